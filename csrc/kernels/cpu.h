/* What this processor can run: one probe (cpuid + xgetbv), made once at
 * import, that kernel-variant tables consult (csrc/ops.h, pr_variant).
 * PYRESNET_KERNELS in the environment at import: "reference" forces every
 * op onto its portable reference kernel; "no_amx" clears the AMX bits (as
 * on a CPU with AVX512_BF16 but no AMX); "avx2" clears the AVX-512 and AMX
 * bits (as on a CPU with AVX2 and FMA only). */
#ifndef PR_K_CPU_H
#define PR_K_CPU_H

enum {
    PR_CPU_AVX2 = 1u << 0,
    PR_CPU_FMA = 1u << 1,
    PR_CPU_AVX512F = 1u << 2,
    PR_CPU_AVX512BW = 1u << 3,
    PR_CPU_AVX512VL = 1u << 4,
    PR_CPU_AVX512DQ = 1u << 5,
    PR_CPU_AVX512_BF16 = 1u << 6,
    PR_CPU_AMX_TILE = 1u << 7,
    PR_CPU_AMX_BF16 = 1u << 8,
};
#define PR_CPU_N_FEATURES 9

/* The feature bits of this CPU that the OS also enabled (AVX-512 needs the
 * zmm state in XCR0, AMX the tile state), probed on first use. */
unsigned pr_cpu_features(void);
/* Name of feature bit k (0 <= k < PR_CPU_N_FEATURES). */
const char *pr_cpu_feature_name(int k);
/* The PYRESNET_KERNELS setting in effect: "reference", "no_amx", "avx2",
 * or "" (none, or one not understood: ignored). */
const char *pr_cpu_kernels_setting(void);
/* Whether only reference kernels may run (PYRESNET_KERNELS=reference). */
int pr_cpu_reference_only(void);
/* Whether code needing `features` may run: this CPU has them and only
 * reference kernels are not forced (the rule of variants and of the fast
 * loops inside a kernel alike). */
int pr_cpu_fast(unsigned features);
/* The AMX tile state: "absent" (no AMX), "tile state granted",
 * "refused: ..." (the OS said no; AMX bits cleared from pr_cpu_features) or
 * "off: PYRESNET_KERNELS=no_amx" (cleared on request, as on a CPU with
 * AVX512_BF16 but no AMX; "=avx2" likewise). */
const char *pr_cpu_amx_status(void);
/* The processor's brand string ("Intel(R) Xeon(R) ..."), or "". */
const char *pr_cpu_brand(void);

/* The vendor cpuid leaf 0 names ("GenuineIntel", "AuthenticAMD"), or "". */
const char *pr_cpu_vendor(void);

#endif
