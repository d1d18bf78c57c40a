/* Fused elementwise kernel (see fused.h).  Layout: contiguous row-major;
 * a CHANNEL input has the output's last dimension (a bias, a BN scale).
 * Each element's operations are the unfused ops' float32 operations in the
 * same order, so results equal the unfused graph exactly. */
#include "fused.h"

#include "elementwise.h"

#define BLOCK 512
#define PARALLEL_MIN 32768

static void block(const pr_fused_attrs *p, const float *const *in, float *out, int64_t e0,
                  int len, int64_t channels) {
    float regs[PR_FUSED_MAX_IN + PR_FUSED_MAX_INSTR][BLOCK];
    const float *src[PR_FUSED_MAX_IN + PR_FUSED_MAX_INSTR];
    for (int k = 0; k < p->n_in; k++) {
        if (p->mode[k] == PR_FM_FULL) {
            src[k] = in[k] + e0;
        } else if (p->mode[k] == PR_FM_SCALAR) {
            for (int t = 0; t < len; t++) regs[k][t] = in[k][0];
            src[k] = regs[k];
        } else {
            int64_t c = e0 % channels;
            for (int t = 0; t < len; t++) {
                regs[k][t] = in[k][c];
                if (++c == channels) c = 0;
            }
            src[k] = regs[k];
        }
    }
    for (int i = 0; i < p->n_instr; i++) {
        const pr_finstr *x = &p->ins[i];
        int r = PR_FUSED_MAX_IN + i;
        float *d = i == p->n_instr - 1 ? out + e0 : regs[r];
        const float *a = src[x->a], *b = src[x->b];
        switch (x->code) {
        case PR_FI_ADD: for (int t = 0; t < len; t++) d[t] = a[t] + b[t]; break;
        case PR_FI_SUB: for (int t = 0; t < len; t++) d[t] = a[t] - b[t]; break;
        case PR_FI_MUL: for (int t = 0; t < len; t++) d[t] = a[t] * b[t]; break;
        case PR_FI_DIV: for (int t = 0; t < len; t++) d[t] = a[t] / b[t]; break;
        case PR_FI_NEG: for (int t = 0; t < len; t++) d[t] = a[t] * -1.0f; break;
        case PR_FI_SCALE: {
            float s = x->imm;
            for (int t = 0; t < len; t++) d[t] = a[t] * s;
            break;
        }
        case PR_FI_UNARY: {
            pr_unary_kind k = (pr_unary_kind)x->pad;
            for (int t = 0; t < len; t++) d[t] = pr_unary_apply(k, a[t]);
            break;
        }
        /* relu lets NaN through (pr_k_relu) */
        case PR_FI_RELU: for (int t = 0; t < len; t++) d[t] = a[t] <= 0.0f ? 0.0f : a[t]; break;
        case PR_FI_RELU_BWD:
            for (int t = 0; t < len; t++) {
                float g = a[t]; /* unconditional load: vectorizes */
                d[t] = b[t] <= 0.0f ? 0.0f : g;
            }
            break;
        }
        src[r] = d;
    }
}

int pr_k_fused(const pr_fused_attrs *p, const float *const *in, float *out, int64_t n,
               int64_t channels) {
    if (p->n_instr < 1 || p->n_instr > PR_FUSED_MAX_INSTR || channels < 1) return PR_ERR_INTERNAL;
    int64_t nblocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t e0 = b * BLOCK;
        block(p, in, out, e0, (int)(n - e0 < BLOCK ? n - e0 : BLOCK), channels);
    }
    return PR_OK;
}
