/* bfloat16 matrix products with float32 sums on AMX tiles (TDPBF16PS) or
 * AVX512_BF16 (VDPBF16PS): the fast kernels of the mixed_bfloat16 policy
 * (Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 2,
 * TDPBF16PS and VDPBF16PS; Intel Optimization Reference Manual, chapter
 * "Intel AMX": the 2x2 tile blocking and the pair-interleaved B layout).
 *
 * C (M x N, float32) = A (M x K) B (K x N), both operands bfloat16:
 *   A  rows of K bfloat16, produced row by row by a gather callback (the
 *      convolutions' im2col rows, converted from float32 while packed);
 *   B  packed once per call: rows in pairs, element (k, n) at
 *      bp[(k / 2) * NP * 2 + n * 2 + k % 2] (the "VNNI" layout both
 *      instructions read), K padded with zeros to KP (a multiple of 32), N
 *      to NP (a multiple of 16).
 * Each product of two bfloat16 is exact in float32; TDPBF16PS and
 * VDPBF16PS add pairs of them to float32 accumulators (round to nearest
 * even; bfloat16 subnormal inputs count as zero, as does VCVTNEPS2BF16's
 * rounding of float32 subnormals).  Every output row's sums run in the same
 * order whatever the thread count.
 *
 * The code is compiled for these instruction sets per function (target
 * attributes); callers check pr_cpu_features() first (PR_BF16_CPU, plus the
 * AMX bits for PR_BF16_AMX). */
#ifndef PR_K_GEMM_BF16_H
#define PR_K_GEMM_BF16_H

#include "cpu.h"
#include "kernels.h"

typedef enum { PR_BF16_AMX, PR_BF16_AVX512 } pr_bf16_isa;

/* CPU features every bfloat16 kernel needs (the AMX one the AMX bits too). */
#define PR_BF16_CPU (PR_CPU_AVX512F | PR_CPU_AVX512BW | PR_CPU_AVX512VL | PR_CPU_AVX512_BF16)
#define PR_BF16_AMX_CPU (PR_BF16_CPU | PR_CPU_AMX_TILE | PR_CPU_AMX_BF16)

int64_t pr_bf16_kp(int64_t k); /* K rounded up to a multiple of 32 */
int64_t pr_bf16_np(int64_t n); /* N rounded up to a multiple of 16 */

/* Bytes of a packed B of K x N. */
size_t pr_bf16_packed_bytes(int64_t k, int64_t n);
/* Pack B: element (k, n) of the source, k = k1 * k2n + k2, is
 * src[k1 * s1 + k2 * s2 + n * sn], float32 (rounded) or bfloat16. */
void pr_bf16_pack_b(const void *src, pr_dtype dt, int64_t k, int64_t k2n, int64_t s1, int64_t s2,
                    int64_t n, int64_t sn, uint16_t *bp);

/* Write rows [r0, r0 + rows) of A: K bfloat16 each, row r at dst + r * ld. */
typedef void (*pr_bf16_gather_fn)(const void *ctx, int64_t r0, int64_t rows, uint16_t *dst,
                                  int64_t ld);

/* Convert n values (float32 rounded to nearest even, or bfloat16 copied)
 * to bfloat16: the gathers' inner step. */
void pr_bf16_convert_run(const void *src, pr_dtype dt, int64_t n, uint16_t *dst);
/* dst[2 j + i] = row_i[j] for j < n: two rows as pairs (the packed layout). */
void pr_bf16_interleave(const uint16_t *row0, const uint16_t *row1, int64_t n, uint16_t *dst);

/* C rows [0, M): c[m * ldc + j] = sum_k A[m][k] B[k][j], rows split across
 * the threads in blocks of 32.  Scratch: pr_bf16_rows_scratch. */
size_t pr_bf16_rows_scratch(int64_t m, int64_t k, int64_t n);
int pr_bf16_gemm_rows(pr_bf16_isa isa, int64_t m, int64_t k, int64_t n, pr_bf16_gather_fn gather,
                      const void *ctx, const uint16_t *bp, float *c, int64_t ldc, void *scratch);

/* One block: ct (32 x NP, row stride NP) = A (32 rows of KP, row stride
 * lda) times packed B.  For callers that own their thread loop (the
 * filter gradient); on AMX the calling thread must have run
 * pr_bf16_thread_begin. */
void pr_bf16_block(pr_bf16_isa isa, const uint16_t *a, int64_t lda, int64_t kp,
                   const uint16_t *bp, int64_t np, float *ct);
void pr_bf16_thread_begin(pr_bf16_isa isa); /* AMX: load the tile configuration */
void pr_bf16_thread_end(pr_bf16_isa isa);   /* AMX: release the tiles */

/* An AMX tile configuration, palette 1: bytes per row and rows of tiles
 * 0-7.  pr_bf16_thread_begin loads eight tiles of 16 rows x 64 bytes; a
 * kernel needing other shapes loads its own with pr_amx_load (keep it in
 * static storage: GCC 12 drops stores to a local configuration before
 * LDTILECFG reads it) and releases with pr_bf16_thread_end. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} pr_amx_tiles;
void pr_amx_load(const pr_amx_tiles *t);

/* Threads for `units` independent work units (at most the kernel threads). */
int pr_bf16_threads(int64_t units);
/* Scratch slots for `units` work units: at most PR_BF16_MAX_SLOTS. */
int64_t pr_bf16_slots(int64_t units);

#endif
