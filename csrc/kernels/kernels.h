/* Plain-C kernel interface shared by every kernel file.  No Python.h here:
 * kernels take plain pointers, sizes and strides, return an error code, and
 * never allocate behind the caller's back (scratch comes from the caller).
 */
#ifndef PR_KERNELS_H
#define PR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Error codes returned by kernels and shape rules. */
enum {
    PR_OK = 0,
    PR_ERR_VALUE = 1,   /* data-dependent bad value (label out of range, ...) -> ValueError */
    PR_ERR_MEMORY = 2,  /* allocation failed -> MemoryError */
    PR_ERR_INTERNAL = 3, /* should not happen -> RuntimeError */
    PR_ERR_RUNTIME = 4   /* an outside library failed (MPI) -> RuntimeError with the
                          * pr_kernel_error message */
};

/* Element types.  Tensors are contiguous, row-major; images are NHWC. */
/* PR_BOOL: one byte, 0 or 1 (NumPy's bool_): comparisons' results.
 * PR_BF16: bfloat16, the upper half of a float32 (1 sign, 8 exponent, 7
 * stored significand bits), stored as uint16 (kernels/bf16.h). */
typedef enum { PR_F32 = 0, PR_I32 = 1, PR_I64 = 2, PR_U8 = 3, PR_BOOL = 4, PR_BF16 = 5 } pr_dtype;
#define PR_N_DTYPES 6

/* Whether values of this dtype are floating point (carry gradients). */
static inline int pr_dtype_is_float(pr_dtype t) { return t == PR_F32 || t == PR_BF16; }

/* Offset of outer row r (all dims but the last, row-major) under strides st. */
static inline int64_t pr_outer_offset(int64_t r, int ndim, const int64_t *shape,
                                      const int64_t *st) {
    int64_t off = 0;
    for (int d = ndim - 2; d >= 0; d--) {
        int64_t c = r % shape[d];
        r /= shape[d];
        off += c * st[d];
    }
    return off;
}

#define PR_MAX_DIMS 8

/* A view of a contiguous buffer: what kernels see.  `data` is NULL for a
 * symbolic (traced) tensor and while shape rules run. */
typedef struct {
    void *data;
    pr_dtype dtype;
    int ndim;
    int64_t shape[PR_MAX_DIMS];
    int64_t size; /* product of shape, 1 for a scalar */
} pr_view;

/* A kernel's read-only operand whose dtype varies (float32 or bfloat16
 * data for the bfloat16 kernels). */
typedef struct {
    const void *data;
    pr_dtype dtype;
} pr_operand;

size_t pr_dtype_size(pr_dtype t);
const char *pr_dtype_name(pr_dtype t);

/* Element count of a shape, or -1 when a dimension is negative or a buffer of
 * it could not be addressed.  NumPy's rule: the product of the non-zero
 * dimensions times `itemsize` must fit in a ptrdiff_t, so no product of some
 * of the dimensions (rows, strides, byte offsets) overflows int64 either. */
int64_t pr_shape_size(int ndim, const int64_t *shape, size_t itemsize);

/* Kernels report a data-dependent error's text here (thread-local), then
 * return PR_ERR_VALUE; the boundary raises it as a Python ValueError. */
void pr_kernel_error(const char *fmt, ...);
const char *pr_kernel_error_message(void);

/* Label i of an integer label array: int64, uint8, or else int32. */
static inline int64_t pr_label_at(const void *labels, pr_dtype dt, int64_t i) {
    switch (dt) {
    case PR_I64: return ((const int64_t *)labels)[i];
    case PR_U8: return ((const uint8_t *)labels)[i];
    default: return ((const int32_t *)labels)[i];
    }
}

/* PR_OK when labels [0, n) (as pr_label_at reads them) all lie in [0, k);
 * else PR_ERR_VALUE, the first bad one reported as "label L at <where> I is
 * outside [0, k)" (common.c). */
int pr_check_labels(const void *labels, pr_dtype dt, int64_t n, int64_t k, const char *where);

/* 64-byte aligned allocation, the one allocator for tensor buffers; blocks
 * of 256 KiB and more are kept when freed and reused (up to 1 GiB), so
 * repeated eager calls do not page-fault fresh memory (common.c). */
void *pr_alloc(size_t nbytes);
void *pr_alloc_huge(size_t nbytes); /* long-lived blocks: huge pages from 4 MiB (common.c) */
void pr_free(void *p);

/* Loops compiled for AVX-512, AVX2 and baseline x86-64 from the same C,
 * chosen at load time (the same operations in each and no FMA contraction,
 * -ffp-contract=off in setup.py, so the same bits).  The choice is a GNU indirect function:
 * x86-64 Linux (ELF) with GCC or clang 14+; elsewhere (macOS, Windows,
 * other architectures) one baseline version. */
#if defined(__has_attribute)
#if defined(__x86_64__) && defined(__linux__) && defined(__ELF__) && __has_attribute(target_clones)
#define PR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef PR_CLONES
#define PR_CLONES
#endif

/* Threads used by our own parallel loops and by OpenBLAS (one place). */
int pr_get_num_threads(void);
void pr_set_num_threads(int n);
/* At most n threads for kernels called from this thread (0: no limit); the
 * compiled executor runs a node single-threaded when that timed faster, and
 * a small plan single-threaded (executor.c, PLAN_PARALLEL_MIN_FLOPS). */
void pr_set_thread_limit(int n);
int pr_get_thread_limit(void);

/* OpenBLAS sgemm, row-major: C = alpha * op(A) op(B) + beta * C.  OpenBLAS
 * itself runs single-threaded; called outside a parallel region, large
 * products are split across our OpenMP team; inside one (a kernel's own
 * parallel loop) it runs on the calling thread. */
void pr_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc);

#endif
