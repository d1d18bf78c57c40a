/* bfloat16 convolutions as products of gathered rows (conv_bf16.h), the
 * im2col formulation of conv.c (Chellapilla et al. 2006, section 3) with
 * the rows gathered straight into bfloat16 blocks that stay in cache:
 *
 *   forward          y  (N*HO*WO, O) = rows of x's taps   (N*HO*WO, KH*KW*C) . w (KH*KW*C, O)
 *   backprop_input   dx (N*H*W, C)   = rows of dy's taps   (N*H*W, KH*KW*O)  . w' (KH*KW*O, C)
 *                    where input pixel (h, w) meets output pixel
 *                    ((h + ph - kh) / sh, (w + pw - kw) / sw) through tap
 *                    (kh, kw) when both divide exactly and fall inside
 *                    (zeros otherwise), and w'[(kh, kw, o)][c] = w[kh][kw][c][o];
 *                    a gather, so no two threads write one dx element;
 *   backprop_filter  dw^T (O, KH*KW*C) = dy^T (O, M) . im2col(x) (M, KH*KW*C),
 *                    M cut into chunks of CHUNK pixels dealt round-robin to
 *                    a fixed number of stripes: each stripe sums its chunks in
 *                    order into its own partial, and the partials are added
 *                    in stripe order (the split depends on the shapes only,
 *                    so results do not depend on the thread count).
 */
#include "conv_bf16.h"

#include <string.h>

#include "bf16.h"

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

#define CHUNK 512  /* pixels per filter-gradient product (a multiple of 32) */
#define STRIPES 8  /* partial filter gradients */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static int64_t taps_width(const pr_window *g) { return g->kh * g->kw * g->c; }

/* ---- gathers ------------------------------------------------------------- */

typedef struct {
    const pr_window *g;
    pr_operand src;
} gather_ctx;

static const void *at(pr_operand s, int64_t i) {
    return (const char *)s.data + (size_t)i * pr_dtype_size(s.dtype);
}

static void copy_bf16(const void *p, int64_t src, int64_t count, void *dst) {
    const gather_ctx *cx = p;
    pr_bf16_convert_run(at(cx->src, src), cx->src.dtype, count, dst);
}

/* Rows [r0, r0 + rows) (output pixels, n-major) of im2col(x): KH*KW*C values
 * each, converted to bfloat16. */
static void gather_forward(const void *p, int64_t r0, int64_t rows, uint16_t *dst, int64_t ld) {
    const gather_ctx *cx = p;
    pr_im2col_rows(cx->g, r0, rows, dst, ld, sizeof(uint16_t), copy_bf16, cx);
}

/* Rows [r0, r0 + rows) (input pixels, n-major) of the taps of dy: KH*KW*O
 * values each, for any stride (stride 1 goes through gather_forward on a
 * flipped window instead, see pr_conv_bf16). */
static void gather_backprop_input(const void *p, int64_t r0, int64_t rows, uint16_t *dst,
                                  int64_t ld) {
    const gather_ctx *cx = p;
    const pr_window *g = cx->g;
    const int64_t O = g->o;
    int64_t iw = r0 % g->w, ih = r0 / g->w % g->h, n = r0 / (g->w * g->h);
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *d = dst + r * ld;
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t th = ih + g->ph - kh, oh = th / g->sh;
            int ok_h = th >= 0 && th % g->sh == 0 && oh < g->ho;
            for (int64_t kw = 0; kw < g->kw; kw++, d += O) {
                int64_t tw = iw + g->pw - kw, ow = tw / g->sw;
                if (ok_h && tw >= 0 && tw % g->sw == 0 && ow < g->wo)
                    pr_bf16_convert_run(at(cx->src, ((n * g->ho + oh) * g->wo + ow) * O),
                                        cx->src.dtype, O, d);
                else
                    memset(d, 0, sizeof(uint16_t) * (size_t)O);
            }
        }
        if (++iw == g->w) {
            iw = 0;
            if (++ih == g->h) ih = 0, n++;
        }
    }
}

/* ---- forward and backprop_input: gathered rows times packed weights ------ */

static int64_t rows_of(const pr_window *g, pr_conv_pass pass) {
    return pass == PR_CONV_FORWARD ? g->n * g->ho * g->wo : g->n * g->h * g->w;
}

static int64_t depth_of(const pr_window *g, pr_conv_pass pass) {
    return pass == PR_CONV_FORWARD ? taps_width(g) : g->kh * g->kw * g->o;
}

static int64_t width_of(const pr_window *g, pr_conv_pass pass) {
    return pass == PR_CONV_FORWARD ? g->o : g->c;
}

/* ---- backprop_filter ------------------------------------------------------ */

static int64_t filter_rows(const pr_window *g) { return (g->o + 31) / 32 * 32; }

/* One stripe's buffers: the packed im2col chunk (B), dy^T of the chunk (A),
 * a product block, two gathered rows, and the stripe's partial dw^T. */
static size_t stripe_bytes(const pr_window *g) {
    const int64_t np = pr_bf16_np(taps_width(g));
    return pr_bf16_packed_bytes(CHUNK, taps_width(g)) +
           align64(sizeof(uint16_t) * (size_t)(filter_rows(g) * CHUNK)) +
           align64(sizeof(float) * (size_t)(32 * np)) +
           align64(sizeof(uint16_t) * (size_t)(2 * taps_width(g))) +
           align64(sizeof(float) * (size_t)(g->o * np));
}

static int64_t count_chunks(const pr_window *g) {
    return (g->n * g->ho * g->wo + CHUNK - 1) / CHUNK;
}

static int64_t count_stripes(const pr_window *g) {
    int64_t c = count_chunks(g);
    return c < STRIPES ? c : STRIPES;
}

/* Chunk [r0, r0 + m) into the stripe's buffers, multiplied into its partial. */
static void filter_chunk(pr_bf16_isa isa, const pr_window *g, pr_operand x, pr_operand dy,
                         int64_t r0, int64_t m, char *buf, int first) {
    const int64_t K = taps_width(g), np = pr_bf16_np(K), O = g->o, OR = filter_rows(g);
    uint16_t *bp = (uint16_t *)buf;
    uint16_t *a = (uint16_t *)(buf + pr_bf16_packed_bytes(CHUNK, K));
    float *ct = (float *)((char *)a + align64(sizeof(uint16_t) * (size_t)(OR * CHUNK)));
    uint16_t *rows = (uint16_t *)((char *)ct + align64(sizeof(float) * (size_t)(32 * np)));
    float *partial = (float *)((char *)rows + align64(sizeof(uint16_t) * (size_t)(2 * K)));
    gather_ctx cx = {g, x};
    if (m < CHUNK) { /* a short last chunk: zero pixels beyond it on both sides */
        memset(bp, 0, pr_bf16_packed_bytes(CHUNK, K));
        memset(a, 0, sizeof(uint16_t) * (size_t)(OR * CHUNK));
    }
    for (int64_t p = 0; p < m; p += 2) { /* pixel pairs, interleaved (gemm_bf16.h) */
        if (p + 1 < m) {
            gather_forward(&cx, r0 + p, 2, rows, K);
        } else {
            gather_forward(&cx, r0 + p, 1, rows, K);
            memset(rows + K, 0, sizeof(uint16_t) * (size_t)K);
        }
        pr_bf16_interleave(rows, rows + K, K, bp + p / 2 * np * 2);
    }
    for (int64_t p = 0; p < m; p++) { /* dy^T */
        uint16_t t[64];
        for (int64_t o0 = 0; o0 < O; o0 += 64) {
            int64_t w = O - o0 < 64 ? O - o0 : 64;
            pr_bf16_convert_run(at(dy, (r0 + p) * O + o0), dy.dtype, w, t);
            for (int64_t o = 0; o < w; o++) a[(o0 + o) * CHUNK + p] = t[o];
        }
    }
    for (int64_t o0 = 0; o0 < O; o0 += 32) {
        pr_bf16_block(isa, a + o0 * CHUNK, CHUNK, CHUNK, bp, np, ct);
        int64_t rows_here = O - o0 < 32 ? O - o0 : 32;
        for (int64_t r = 0; r < rows_here; r++) {
            float *dst = partial + (o0 + r) * np;
            const float *src = ct + r * np;
            if (first) memcpy(dst, src, sizeof(float) * (size_t)K);
            else for (int64_t j = 0; j < K; j++) dst[j] += src[j];
        }
    }
}

static int backprop_filter(pr_bf16_isa isa, const pr_window *g, pr_operand x, pr_operand dy,
                           float *dw, void *scratch) {
    const int64_t K = taps_width(g), np = pr_bf16_np(K), O = g->o, M = g->n * g->ho * g->wo;
    const int64_t chunks = count_chunks(g), stripes = count_stripes(g);
    const size_t sb = stripe_bytes(g);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)(K * O));
        return PR_OK;
    }
    const size_t partial_at = sb - align64(sizeof(float) * (size_t)(O * np));
#pragma omp parallel num_threads(pr_bf16_threads(stripes))
    {
        pr_bf16_thread_begin(isa);
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            char *buf = (char *)scratch + (size_t)s * sb;
            /* the padding of dy^T (rows O..) and of the packed columns stays zero */
            memset(buf, 0, partial_at);
            for (int64_t c = s; c < chunks; c += stripes) {
                int64_t r0 = c * CHUNK, m = M - r0 < CHUNK ? M - r0 : CHUNK;
                filter_chunk(isa, g, x, dy, r0, m, buf, c == s);
            }
        }
        pr_bf16_thread_end(isa);
#pragma omp for schedule(static)
        for (int64_t kk = 0; kk < K; kk++)
            for (int64_t o = 0; o < O; o++) {
                float sum = 0.0f;
                for (int64_t s = 0; s < stripes; s++)
                    sum += ((const float *)((char *)scratch + (size_t)s * sb + partial_at))
                        [o * np + kk];
                dw[kk * O + o] = sum;
            }
    }
    return PR_OK;
}

/* ---- entry points ---------------------------------------------------------- */

size_t pr_conv_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    if (pass == PR_CONV_BACKPROP_FILTER) return (size_t)count_stripes(g) * stripe_bytes(g);
    int64_t k = depth_of(g, pass), n = width_of(g, pass);
    return pr_bf16_packed_bytes(k, n) + pr_bf16_rows_scratch(rows_of(g, pass), k, n);
}

int pr_conv_bf16(pr_bf16_isa isa, pr_conv_pass pass, const pr_window *g, pr_operand a,
                 pr_operand b, float *out, void *scratch) {
    if (pass == PR_CONV_BACKPROP_FILTER) return backprop_filter(isa, g, a, b, out, scratch);
    const int64_t k = depth_of(g, pass), n = width_of(g, pass);
    uint16_t *bp = scratch;
    void *rest = (char *)scratch + pr_bf16_packed_bytes(k, n);
    gather_ctx cx = {g, a};
    if (pass == PR_CONV_FORWARD) { /* w (KH*KW*C, O) as it is */
        pr_bf16_pack_b(b.data, b.dtype, k, k, 0, g->o, n, 1, bp);
        return pr_bf16_gemm_rows(isa, rows_of(g, pass), k, n, gather_forward, &cx, bp, out, n,
                                 rest);
    }
    const int64_t taps = g->kh * g->kw, tap_size = g->c * g->o;
    if (g->sh > 1 || g->sw > 1) { /* w'[(tap, o)][c] = w[tap][c][o] */
        pr_bf16_pack_b(b.data, b.dtype, k, g->o, tap_size, 1, n, g->o, bp);
        return pr_bf16_gemm_rows(isa, rows_of(g, pass), k, n, gather_backprop_input, &cx, bp,
                                 out, n, rest);
    }
    /* Stride 1: dx is the forward convolution of dy (padded by KH-1-ph, KW-1-pw)
     * with the flipped filter w''[(kh, kw, o)][c] = w[KH-1-kh][KW-1-kw][c][o],
     * whose rows gather_forward copies in runs of KW*O values. */
    pr_window flipped = {g->n, g->ho, g->wo, g->o, g->kh, g->kw, g->c, 1, 1,
                         g->kh - 1 - g->ph, g->kw - 1 - g->pw, g->h, g->w};
    const char *last_tap = (const char *)b.data + (size_t)((taps - 1) * tap_size) *
                                                      pr_dtype_size(b.dtype);
    pr_bf16_pack_b(last_tap, b.dtype, k, g->o, -tap_size, 1, n, g->o, bp);
    cx.g = &flipped;
    return pr_bf16_gemm_rows(isa, rows_of(g, pass), k, n, gather_forward, &cx, bp, out, n, rest);
}

typedef struct {
    pr_operand a;
    int64_t m, k;
} matmul_ctx;

static void gather_a(const void *p, int64_t r0, int64_t rows, uint16_t *dst, int64_t ld) {
    const matmul_ctx *cx = p;
    for (int64_t r = 0; r < rows; r++)
        pr_bf16_convert_run(at(cx->a, (r0 + r) * cx->k), cx->a.dtype, cx->k, dst + r * ld);
}

static void gather_a_transposed(const void *p, int64_t r0, int64_t rows, uint16_t *dst,
                                int64_t ld) {
    const matmul_ctx *cx = p;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < cx->k; i++) /* a stored (k, m) */
            pr_bf16_convert_run(at(cx->a, i * cx->m + r0 + r), cx->a.dtype, 1, dst + r * ld + i);
}

size_t pr_matmul_bf16_scratch_bytes(int64_t m, int64_t k, int64_t n) {
    return pr_bf16_packed_bytes(k, n) + pr_bf16_rows_scratch(m, k, n);
}

int pr_matmul_bf16(pr_bf16_isa isa, int ta, int tb, int64_t m, int64_t k, int64_t n,
                   pr_operand a, pr_operand b, float *c, void *scratch) {
    uint16_t *bp = scratch;
    if (tb) pr_bf16_pack_b(b.data, b.dtype, k, k, 0, 1, n, k, bp); /* b stored (n, k) */
    else pr_bf16_pack_b(b.data, b.dtype, k, k, 0, n, n, 1, bp);
    matmul_ctx cx = {a, m, k};
    return pr_bf16_gemm_rows(isa, m, k, n, ta ? gather_a_transposed : gather_a, &cx, bp, c, n,
                             (char *)scratch + pr_bf16_packed_bytes(k, n));
}
