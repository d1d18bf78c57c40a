"""This machine's fp32 FMA peak, measured: the ceiling for any conv kernel.

A tiny C loop runs independent fused-multiply-add chains on full vector
registers (AVX-512 ``_mm512_fmadd_ps``, 16 floats per register, 16 chains;
AVX2 ``_mm256_fmadd_ps``, 8 floats, 12 chains) on every OpenMP thread.
Each ISA the CPU has is measured: an AVX-512 machine also gives the AVX2
peak, the ceiling of the AVX2 kernels (``PYRESNET_KERNELS=avx2``) on it, and
a CPU with AVX512_BF16 its VDPBF16PS peak (``avx512_bf16``: 16 chains of
``_mm512_dpbf16_ps``, each instruction 16 float32 lanes of two bfloat16
products, counted as 32 multiply-adds), the ceiling of the bfloat16 kernels
(``bf16_isas()``; about twice the fp32 peak on AMD Zen 4).
Twelve or more chains hide the 4-cycle FMA latency on two FMA ports, and
chains plus the two constants fit the registers (AVX2 has 16: sixteen
chains there spilled two of them to the stack, a store and a load per
iteration that held the loop to 57% of the peak on AMD Zen 3), so the loop
is bound by FMA throughput alone.  The source is compiled at run time with the system
``cc -O2 -mavx512f -mfma -fopenmp`` (or ``-mavx2 -mfma``) into a temporary
directory and loaded with ctypes.

    FLOPs = threads * iterations * chains * lanes * 2   (an FMA is 2 FLOPs)
    GFLOP/s = FLOPs / wall seconds / 1e9

Each try is timed in C (``omp_get_wtime`` around one parallel region of
about 0.2 s); the figure is the best of ``tries`` tries, since contention
from other processes on a shared machine can only lower it.  For reference,
one core with two 512-bit FMA units does 64 FLOPs per cycle: ~166 GFLOP/s at
2.6 GHz.

    python bench/fma_peak.py [--threads 2] [--tries 5] [--isa avx512|avx2] [--scaling]

``--scaling`` also measures 1..threads threads, which checks that the loop
is FMA-bound (per-core GFLOP/s stays flat as threads are added) and that the
threads are on separate physical cores (two hyper-threads of one core share
its FMA units, so two threads would then give no more than one); and it
times one dependent FMA chain to estimate the clock (4-cycle FMA latency),
from which it prints vector FMAs per cycle per core: 2.0 means both FMA
units are kept busy, i.e. the loop runs at the hardware peak.

From other scripts: ``from fma_peak import fma_peak_gflops, cpu_model``
(``fma_peak_gflops(threads, tries, isa="avx2")`` for the AVX2 peak).
"""
import argparse
import ctypes
import functools
import os
import pathlib
import shutil
import subprocess
import tempfile


_SOURCE = r"""
#include <immintrin.h>
#include <omp.h>
@PRELUDE@

#define VEC            @VEC@
#define FMA(a, b, c)   @FMA@(a, b, c)
#define SET1(x)        @SET1@(x)
#define ADD(a, b)      @ADD@(a, b)
#define STORE(p, v)    @STORE@(p, v)
#define LANES          @LANES@
#define CHAINS         @CHAINS@

/* Runs `iters` iterations of CHAINS (12 or 16) independent FMA chains on each of `threads`
   OpenMP threads; returns the wall seconds of the parallel region.  Each
   chain converges to 1 (acc = acc * 0.999 + 0.001): no overflow, no
   denormals.  The sum is stored to `sink` so the loop cannot be removed. */
double fma_loop(long iters, int threads, float *sink)
{
    double t0 = omp_get_wtime();
    #pragma omp parallel num_threads(threads)
    {
        const VEC a = SET1(0.999f), b = SET1(0.001f);
        float s = 0.5f + 0.01f * omp_get_thread_num();
        VEC c0 = SET1(s), c1 = SET1(s + .001f), c2 = SET1(s + .002f), c3 = SET1(s + .003f);
        VEC c4 = SET1(s + .004f), c5 = SET1(s + .005f), c6 = SET1(s + .006f);
        VEC c7 = SET1(s + .007f), c8 = SET1(s + .008f), c9 = SET1(s + .009f);
        VEC c10 = SET1(s + .010f), c11 = SET1(s + .011f);
#if CHAINS == 16
        VEC c12 = SET1(s + .012f), c13 = SET1(s + .013f), c14 = SET1(s + .014f);
        VEC c15 = SET1(s + .015f);
#endif
        for (long i = 0; i < iters; i++) {
            c0 = FMA(c0, a, b);   c1 = FMA(c1, a, b);   c2 = FMA(c2, a, b);   c3 = FMA(c3, a, b);
            c4 = FMA(c4, a, b);   c5 = FMA(c5, a, b);   c6 = FMA(c6, a, b);   c7 = FMA(c7, a, b);
            c8 = FMA(c8, a, b);   c9 = FMA(c9, a, b);   c10 = FMA(c10, a, b); c11 = FMA(c11, a, b);
#if CHAINS == 16
            c12 = FMA(c12, a, b); c13 = FMA(c13, a, b); c14 = FMA(c14, a, b); c15 = FMA(c15, a, b);
#endif
        }
        VEC t = ADD(ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7))),
                    ADD(ADD(c8, c9), ADD(c10, c11)));
#if CHAINS == 16
        t = ADD(t, ADD(ADD(c12, c13), ADD(c14, c15)));
#endif
        float out[LANES];
        STORE(out, t);
        #pragma omp critical
        *sink += out[0];
    }
    return omp_get_wtime() - t0;
}

/* One dependent FMA chain on the calling thread: each FMA waits for the
   previous one, so the loop runs at the FMA latency (4 cycles on Intel since
   Skylake and on AMD Zen 4/5); returns wall seconds. */
double fma_chain(long iters, float *sink)
{
    double t0 = omp_get_wtime();
    VEC a = SET1(0.999f), b = SET1(0.001f), c = SET1(0.5f);
    for (long i = 0; i < iters; i++)
        c = FMA(c, a, b);
    float out[LANES];
    STORE(out, c);
    *sink += out[0];
    return omp_get_wtime() - t0;
}
"""

_ISAS = {
    "avx512": dict(flags=["-mavx512f", "-mfma"], lanes=16, chains=16, VEC="__m512",
                   FMA="_mm512_fmadd_ps", SET1="_mm512_set1_ps", ADD="_mm512_add_ps",
                   STORE="_mm512_storeu_ps"),
    "avx2": dict(flags=["-mavx2", "-mfma"], lanes=8, chains=12, VEC="__m256",
                 FMA="_mm256_fmadd_ps", SET1="_mm256_set1_ps", ADD="_mm256_add_ps",
                 STORE="_mm256_storeu_ps"),
    # VDPBF16PS: each of 16 float32 lanes adds two bfloat16 products, so 32
    # "lanes" of multiply-adds per instruction; a and b read as bfloat16 pairs
    # (0.999f and 0.001f give -0.24 / 1.0 and 7.5e-28 / 0.001: each chain grows
    # by about 0.001 per step, no overflow, no subnormals)
    "avx512_bf16": dict(flags=["-mavx512f", "-mavx512bf16", "-mfma"], lanes=32, chains=16,
                        VEC="__m512", FMA="dot_bf16", SET1="_mm512_set1_ps",
                        ADD="_mm512_add_ps", STORE="_mm512_storeu_ps",
                        PRELUDE="static inline __m512 dot_bf16(__m512 c, __m512 a, __m512 b)"
                                " { return _mm512_dpbf16_ps(c, (__m512bh)a, (__m512bh)b); }"),
}


def cpu_flags():
    """The CPU feature flags of /proc/cpuinfo (set of str; empty if unreadable)."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model():
    """The "model name" line of /proc/cpuinfo (str), or "unknown"."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def isas():
    """The FMA ISAs this CPU has, widest first: ["avx512", "avx2"], ["avx2"]
    or [] (list of str)."""
    flags = cpu_flags()
    return (["avx512"] if "avx512f" in flags else []) + (
        ["avx2"] if {"avx2", "fma"} <= flags else [])


def bf16_isas():
    """["avx512_bf16"] where the CPU has AVX512_BF16 (its VDPBF16PS peak, the
    ceiling of the bfloat16 kernels: about twice the fp32 FMA peak), else []."""
    return ["avx512_bf16"] if {"avx512f", "avx512_bf16"} <= cpu_flags() else []


def isa():
    """"avx512" or "avx2", the widest FMA this CPU has; RuntimeError if neither."""
    have = isas()
    if not have:
        raise RuntimeError("fma_peak: the CPU has neither AVX-512F nor AVX2+FMA")
    return have[0]


@functools.lru_cache(maxsize=None)
def _library(name):
    """Compile the loop for ISA `name` and load it (once per process)."""
    spec = _ISAS[name]
    src = _SOURCE
    for key in ("VEC", "FMA", "SET1", "ADD", "STORE"):
        src = src.replace(f"@{key}@", spec[key])
    src = src.replace("@PRELUDE@", spec.get("PRELUDE", ""))
    src = src.replace("@LANES@", str(spec["lanes"])).replace("@CHAINS@", str(spec["chains"]))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="fma_peak_"))
    (tmp / "fma.c").write_text(src)
    so = tmp / "fma.so"
    subprocess.run(["cc", "-O2", *spec["flags"], "-fopenmp", "-shared", "-fPIC",
                    str(tmp / "fma.c"), "-o", str(so)], check=True)
    # Idle OpenMP threads sleep at once instead of spinning on a core that the
    # benchmarked frameworks need; libgomp reads this when it is loaded.
    saved = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        lib = ctypes.CDLL(str(so))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the loaded library stays mapped
        if saved is None:
            del os.environ["OMP_WAIT_POLICY"]
        else:
            os.environ["OMP_WAIT_POLICY"] = saved
    lib.fma_loop.restype = ctypes.c_double
    lib.fma_loop.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    lib.fma_chain.restype = ctypes.c_double
    lib.fma_chain.argtypes = [ctypes.c_long, ctypes.POINTER(ctypes.c_float)]
    return lib, spec["lanes"] * spec["chains"]


def fma_peak_gflops(threads=2, tries=5, seconds=0.2, isa_name=None):
    """Measured fp32 FMA peak of ``threads`` threads, in GFLOP/s (float),
    of ISA ``isa_name`` ("avx512" or "avx2"; default the widest, isa()).

    Best of ``tries`` runs of about ``seconds`` each (wall time, all threads
    together), after one calibration run sizing the loop.
    """
    lib, floats = _library(isa_name or isa())  # floats: lanes x chains
    sink = ctypes.c_float(0.0)
    flops_per_iter = threads * floats * 2
    iters = 100_000
    while True:  # calibrate: grow the loop until one run takes >= 20 ms
        t = lib.fma_loop(iters, threads, ctypes.byref(sink))
        if t >= 0.02:
            break
        iters *= 4
    iters = max(1, int(iters * seconds / t))
    best = 0.0
    for _ in range(tries):
        t = lib.fma_loop(iters, threads, ctypes.byref(sink))
        best = max(best, flops_per_iter * iters / t / 1e9)
    return best


def clock_ghz(tries=3, latency=4, isa_name=None):
    """The core clock in GHz (float) as one dependent FMA chain sees it,
    assuming ``latency`` cycles per FMA; best of ``tries`` runs of ~0.1 s."""
    lib, _ = _library(isa_name or isa())
    sink = ctypes.c_float(0.0)
    iters = 20_000_000
    return max(latency * iters / lib.fma_chain(iters, ctypes.byref(sink)) / 1e9
               for _ in range(tries))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="OpenMP threads (default 2)")
    ap.add_argument("--tries", type=int, default=5, help="best of this many runs (default 5)")
    ap.add_argument("--scaling", action="store_true",
                    help="also measure 1..threads threads (FMA-bound check)")
    ap.add_argument("--isa", choices=list(_ISAS),
                    help="one ISA (default: every one this CPU has, widest first)")
    args = ap.parse_args()
    names = [args.isa] if args.isa else isas() + bf16_isas()
    if not names:
        raise SystemExit("fma_peak: the CPU has neither AVX-512F nor AVX2+FMA")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs)")
    counts = range(1, args.threads + 1) if args.scaling else [args.threads]
    for name in names:
        for n in counts:
            g = fma_peak_gflops(n, args.tries, isa_name=name)
            kind = "bfloat16 VDPBF16PS peak" if name == "avx512_bf16" else "fp32 FMA peak"
            print(f"{name} ({_ISAS[name]['chains']} FMA chains x {_ISAS[name]['lanes']} lanes) "
                  f"{kind}, "
                  f"{n} thread{'s' if n > 1 else ''}: {g:.1f} GFLOP/s ({g / n:.1f} per thread)")
            if args.scaling and n == 1:
                ghz = clock_ghz(isa_name=name)
                per_cycle = g / ghz / (_ISAS[name]["lanes"] * 2)
                print(f"  clock from one dependent FMA chain (4-cycle latency): {ghz:.2f} GHz; "
                      f"{per_cycle:.2f} vector FMAs/cycle/core (2.00 = two FMA units busy)")


if __name__ == "__main__":
    main()
