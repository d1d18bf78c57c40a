/* The CPU probe (cpu.h): cpuid leaves 0, 1, 7 and 0x80000002-4, and XCR0 for
 * the register state the OS saves (Intel SDM vol. 1, 13.3 and 15.2: AVX-512
 * is usable only when XCR0 bits 1, 2, 5, 6 and 7 are set; AMX needs bits 17
 * and 18, and on Linux a per-process permission that bfloat16 kernels
 * request themselves). */
#define _GNU_SOURCE /* syscall() */
#include "cpu.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static unsigned probe(char *brand, char *vendor) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6, tiles = (xcr0 & 0x60000) == 0x60000;
    if (fma && avx && ymm) f |= PR_CPU_FMA;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if (((b >> 5) & 1) && avx && ymm) f |= PR_CPU_AVX2;
        if (zmm) {
            if ((b >> 16) & 1) f |= PR_CPU_AVX512F;
            if ((b >> 17) & 1) f |= PR_CPU_AVX512DQ;
            if ((b >> 30) & 1) f |= PR_CPU_AVX512BW;
            if ((b >> 31) & 1) f |= PR_CPU_AVX512VL;
        }
        if (tiles && ((d >> 24) & 1)) f |= PR_CPU_AMX_TILE;
        if (tiles && ((d >> 22) & 1)) f |= PR_CPU_AMX_BF16;
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        if (zmm && ((a1 >> 5) & 1)) f |= PR_CPU_AVX512_BF16;
    }
    if (__get_cpuid_max(0x80000000, NULL) >= 0x80000004) {
        unsigned *w = (unsigned *)brand;
        for (unsigned leaf = 0; leaf < 3; leaf++)
            __get_cpuid(0x80000002 + leaf, &w[4 * leaf], &w[4 * leaf + 1], &w[4 * leaf + 2],
                        &w[4 * leaf + 3]);
        brand[48] = 0;
    }
    return f;
}
#else
static unsigned probe(char *brand, char *vendor) { return 0; }
#endif

static unsigned features;
static int probed, reference_only;
static const char *setting; /* PYRESNET_KERNELS when it is one of the known settings */
static char brand[64], vendor[16], amx_status[128];

/* Linux keeps the 8 KiB AMX tile data out of a process's signal frames
 * until the process asks for it (Documentation/arch/x86/xstate.rst):
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), once per process.
 * Without that permission the first tile instruction raises SIGILL, so a
 * refusal clears the AMX bits and every op runs its next variant. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static unsigned request_tiles(unsigned f) {
    if (!(f & PR_CPU_AMX_TILE)) {
        snprintf(amx_status, sizeof amx_status, "absent");
        return f;
    }
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) {
        snprintf(amx_status, sizeof amx_status, "tile state granted");
        return f;
    }
    snprintf(amx_status, sizeof amx_status,
             "refused: arch_prctl(ARCH_REQ_XCOMP_PERM) failed (%s); AMX kernels off",
             strerror(errno));
#else
    snprintf(amx_status, sizeof amx_status, "refused: no arch_prctl here; AMX kernels off");
#endif
    return f & ~(unsigned)(PR_CPU_AMX_TILE | PR_CPU_AMX_BF16);
}

static void ensure(void) {
    if (probed) return;
    const char *env = getenv("PYRESNET_KERNELS");
    static const char *const known[] = {"reference", "no_amx", "avx2"};
    for (size_t i = 0; env && i < sizeof known / sizeof *known; i++)
        if (strcmp(env, known[i]) == 0) setting = known[i];
    reference_only = setting && strcmp(setting, "reference") == 0;
    int avx2 = setting && strcmp(setting, "avx2") == 0;
    features = probe(brand, vendor);
    if ((avx2 || (setting && strcmp(setting, "no_amx") == 0)) && (features & PR_CPU_AMX_BF16)) {
        /* no_amx: a CPU with AVX512_BF16 but no AMX (AMD Zen 4/5), on this one */
        features &= ~(unsigned)(PR_CPU_AMX_TILE | PR_CPU_AMX_BF16);
        snprintf(amx_status, sizeof amx_status, "off: PYRESNET_KERNELS=%s", setting);
    } else {
        features = request_tiles(features);
    }
    /* avx2: a CPU with AVX2 and FMA but no AVX-512 (AMD Zen 2/3, Intel
     * client cores), on this one */
    if (avx2)
        features &= ~(unsigned)(PR_CPU_AVX512F | PR_CPU_AVX512BW | PR_CPU_AVX512VL |
                                PR_CPU_AVX512DQ | PR_CPU_AVX512_BF16);
    probed = 1;
}

unsigned pr_cpu_features(void) {
    ensure();
    return features;
}

const char *pr_cpu_kernels_setting(void) {
    ensure();
    return setting ? setting : "";
}

int pr_cpu_reference_only(void) {
    ensure();
    return reference_only;
}

int pr_cpu_fast(unsigned f) {
    ensure();
    return !reference_only && (features & f) == f;
}

const char *pr_cpu_brand(void) {
    ensure();
    const char *s = brand;
    while (*s == ' ') s++;
    return s;
}

const char *pr_cpu_vendor(void) {
    ensure();
    return vendor;
}

const char *pr_cpu_amx_status(void) {
    ensure();
    return amx_status;
}

const char *pr_cpu_feature_name(int k) {
    static const char *names[PR_CPU_N_FEATURES] = {
        "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_tile",
        "amx_bf16"};
    return k >= 0 && k < PR_CPU_N_FEATURES ? names[k] : "?";
}
