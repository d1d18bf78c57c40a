/* Shared kernel plumbing: dtype sizes, the aligned allocator, the thread
 * count (one place for OpenMP loops and OpenBLAS), the thread-local kernel
 * error message, and the OpenBLAS sgemm wrapper. */
#define _DEFAULT_SOURCE /* madvise */
#include "kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

size_t pr_dtype_size(pr_dtype t) {
    switch (t) {
    case PR_F32: return 4;
    case PR_I32: return 4;
    case PR_I64: return 8;
    case PR_U8: return 1;
    case PR_BOOL: return 1;
    case PR_BF16: return 2;
    }
    return 0;
}

const char *pr_dtype_name(pr_dtype t) {
    switch (t) {
    case PR_F32: return "float32";
    case PR_I32: return "int32";
    case PR_I64: return "int64";
    case PR_U8: return "uint8";
    case PR_BOOL: return "bool";
    case PR_BF16: return "bfloat16";
    }
    return "?";
}

int64_t pr_shape_size(int ndim, const int64_t *shape, size_t itemsize) {
    int64_t bytes = (int64_t)itemsize, empty = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        if (shape[d] == 0) empty = 1;
        else if (__builtin_mul_overflow(bytes, shape[d], &bytes)) return -1;
    }
    return empty ? 0 : bytes / (int64_t)itemsize;
}

static _Thread_local char kernel_error[512];

void pr_kernel_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kernel_error, sizeof kernel_error, fmt, ap);
    va_end(ap);
}

const char *pr_kernel_error_message(void) { return kernel_error; }

int pr_check_labels(const void *labels, pr_dtype dt, int64_t n, int64_t k, const char *where) {
    for (int64_t i = 0; i < n; i++) {
        int64_t l = pr_label_at(labels, dt, i);
        if (l < 0 || l >= k) {
            pr_kernel_error("label %lld at %s %lld is outside [0, %lld)", (long long)l, where,
                            (long long)i, (long long)k);
            return PR_ERR_VALUE;
        }
    }
    return PR_OK;
}

/* ---- the allocator ----------------------------------------------------------
 * Large blocks are kept when freed and handed out again: eager calls make
 * every intermediate afresh, and a large block new from the OS is page-
 * faulted and zeroed by the kernel on first touch (a quarter of an eager
 * ResNet-20 step went there).  A block's size sits in a 64-byte header; a
 * request takes the smallest kept block that fits and is at most twice its
 * size.  At most CACHE_SLOTS blocks and CACHE_BYTES are kept. */
#define HEADER 64
#define CACHE_MIN ((size_t)256 << 10)
#define CACHE_SLOTS 128
#define CACHE_BYTES ((size_t)1 << 30)
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

static struct {
    char *p;
    size_t size;
} cache[CACHE_SLOTS];
static int n_cache;
static size_t cached_bytes;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* The smallest kept block of at least `rounded` bytes and at most twice
 * that, taken out of the cache; NULL if none. */
static char *cache_take(size_t rounded) {
    char *hit = NULL;
    pthread_mutex_lock(&cache_lock);
    int best = -1;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].size >= rounded && cache[i].size / 2 <= rounded &&
            (best < 0 || cache[i].size < cache[best].size))
            best = i;
    if (best >= 0) {
        hit = cache[best].p;
        cached_bytes -= cache[best].size;
        cache[best] = cache[--n_cache];
    }
    pthread_mutex_unlock(&cache_lock);
    return hit;
}

void *pr_alloc(size_t nbytes) {
    if (nbytes > SIZE_MAX - 2 * HEADER) return NULL; /* rounding up would wrap */
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    char *hit = rounded >= CACHE_MIN ? cache_take(rounded) : NULL;
    if (hit) return hit;
    char *raw = aligned_alloc(64, rounded + HEADER);
    if (!raw) return NULL;
    *(size_t *)raw = rounded;
    return raw + HEADER;
}

/* A long-lived block (a compiled graph's arena): from HUGE_MIN bytes on 2 MiB
 * boundaries, advised to use huge pages where the kernel allows
 * (transparent_hugepage "madvise"): a kernel streaming an activation then
 * misses the TLB once per 2 MiB instead of once per 4 KiB.  Not for
 * short-lived blocks: a huge page is zeroed (and maybe compacted for) on
 * first touch, which eager calls would pay again and again.  Freed by
 * pr_free. */
void *pr_alloc_huge(size_t nbytes) {
    if (nbytes > SIZE_MAX - 2 * HUGE_PAGE) return NULL;
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    if (rounded < HUGE_MIN) return pr_alloc(nbytes);
    /* a kept block first (often an arena another binding gave back): fresh
     * ones beside a full cache grew a training run's memory by 0.9 GiB */
    char *hit = cache_take(rounded);
    if (hit) return hit;
    size_t total = (rounded + HEADER + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    char *raw = aligned_alloc(HUGE_PAGE, total);
    if (!raw) return NULL;
#ifdef MADV_HUGEPAGE /* Linux only */
    madvise(raw, total, MADV_HUGEPAGE); /* advice only: failure leaves 4 KiB pages */
#endif
    *(size_t *)raw = rounded;
    return raw + HEADER;
}

void pr_free(void *p) {
    if (!p) return;
    char *raw = (char *)p - HEADER;
    size_t size = *(size_t *)raw;
    if (size >= CACHE_MIN) {
        int kept = 0;
        pthread_mutex_lock(&cache_lock);
        if (n_cache < CACHE_SLOTS && cached_bytes + size <= CACHE_BYTES) {
            cache[n_cache].p = p;
            cache[n_cache++].size = size;
            cached_bytes += size;
            kept = 1;
        }
        pthread_mutex_unlock(&cache_lock);
        if (kept) return;
    }
    free(raw);
}

static int num_threads = 0;
static _Thread_local int thread_limit; /* 0: none (pr_set_thread_limit) */

int pr_get_num_threads(void) {
    if (num_threads <= 0) {
#ifdef _OPENMP
        /* OMP_NUM_THREADS when set (as PyTorch), else the processors this
         * process may run on */
        num_threads = omp_get_max_threads();
#else
        num_threads = 1;
#endif
        if (num_threads < 1) num_threads = 1;
    }
    return thread_limit > 0 && thread_limit < num_threads ? thread_limit : num_threads;
}

void pr_set_thread_limit(int n) { thread_limit = n > 0 ? n : 0; }

int pr_get_thread_limit(void) { return thread_limit; }

void pr_set_num_threads(int n) {
    if (n < 1) n = 1;
    num_threads = n;
    /* OpenBLAS never spawns threads of its own: pr_sgemm splits products
     * across our OpenMP team, so one pool serves every kernel and the two
     * never oversubscribe the cores between them. */
    scipy_openblas_set_num_threads(1);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

static void sgemm1(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc) {
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                      trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k,
                      alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

/* Row-major C (m x n) = alpha op(A) op(B) + beta C.  Large products are cut
 * into one block of rows of C (or of columns, when C is wide and short) per
 * thread, each a single-threaded OpenBLAS call; every element is still one
 * dot product in OpenBLAS's order, so results do not depend on the split. */
void pr_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc) {
    if (m == 0 || n == 0) return;
    int nt = pr_get_num_threads();
    int by_rows = m >= n;
    int64_t extent = by_rows ? m : n;
#ifdef _OPENMP
    if (omp_in_parallel()) nt = 1;
#endif
    if (nt == 1 || 2.0 * (double)m * (double)n * (double)k < 4e6 || extent < 32) {
        sgemm1(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (extent / 16 < nt) nt = (int)(extent / 16);
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        /* block boundaries on multiples of 16 (the kernels' register tiles) */
        int64_t lo = (extent * t / T) & ~(int64_t)15, hi = t == T - 1 ? extent
                                                           : (extent * (t + 1) / T) & ~(int64_t)15;
        if (hi > lo) {
            if (by_rows)
                sgemm1(trans_a, trans_b, hi - lo, n, k, alpha, trans_a ? a + lo : a + lo * lda,
                       lda, b, ldb, beta, c + lo * ldc, ldc);
            else
                sgemm1(trans_a, trans_b, m, hi - lo, k, alpha, a, lda,
                       trans_b ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
        }
    }
}
