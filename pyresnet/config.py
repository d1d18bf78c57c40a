"""What this installation runs on: the CPU, the threads, and per op the
kernel variants (csrc/ops.h, ``pr_variant``) that this CPU can run."""
import os
import sys
import warnings

from ._loader import _C

__all__ = ["show_config", "config", "kernel_notice"]

# What the portable reference convolutions cost where faster ones exist,
# measured per pass on ResNet-20's shapes at batch 128 (bench/results/conv.md,
# Intel Xeon Sapphire Rapids class, 2 threads): 126 ms of convolutions per
# training step with im2col_blas against 85 ms with avx512_direct.
_REFERENCE_COST = "ResNet-20's convolutions take about 1.5x as long as with avx512_direct"

_KERNELS = os.environ.get("PYRESNET_KERNELS")
if _KERNELS not in (None, "", "reference", "no_amx", "avx2"):
    warnings.warn(f"PYRESNET_KERNELS={_KERNELS!r} is not understood and was ignored: the "
                  f"settings are PYRESNET_KERNELS=reference (every op on its reference kernel), "
                  f"PYRESNET_KERNELS=no_amx (the AMX kernels off, as on a CPU with "
                  f"AVX512_BF16 but no AMX) and PYRESNET_KERNELS=avx2 (the AVX-512 and AMX "
                  f"kernels off, as on a CPU with AVX2 and FMA only)", RuntimeWarning,
                  stacklevel=2)


def config():
    """The configuration as a dict.

    Returns:
        dict with ``cpu`` (the processor's brand string), ``features`` (list
        of the instruction-set features the probe found and the OS enabled:
        ``avx2``, ``fma``, ``avx512f``, ``avx512bw``, ``avx512vl``,
        ``avx512dq``, ``avx512_bf16``, ``amx_tile``, ``amx_bf16``),
        ``reference_only`` (bool: ``PYRESNET_KERNELS=reference`` was set at
        import, so every op runs its portable reference kernel),
        ``amx`` (str: ``"absent"``, ``"tile state granted"`` or
        ``"refused: ..."`` when Linux denied the AMX tile state, in which
        case the AMX bits are cleared and AMX kernels do not run, or
        ``"off: PYRESNET_KERNELS=no_amx"`` when that was set at import: the
        AMX bits cleared as on a CPU with AVX512_BF16 but no AMX, or
        ``"off: PYRESNET_KERNELS=avx2"``), ``setting`` (str: the
        ``PYRESNET_KERNELS`` setting in effect, ``""`` for none; ``"avx2"``
        clears the AVX-512 and AMX features, as on a CPU with AVX2 and FMA
        only), ``threads`` (int), ``variants``: for each op with several
        kernels, a list of ``(name, this_cpu_has_its_features)`` in priority
        order (the reference kernel last; a call runs the first variant that
        runs on this CPU and supports its shapes), and ``kernels``: the
        convolution kernel this CPU gets for ``"float32"`` and for
        ``"bfloat16"`` operands of one group (variants named ``*_bf16``
        take the bfloat16 calls, the others the float32 ones; those named
        ``*_grouped*`` only grouped and depthwise calls; the reference,
        ``im2col_blas``, takes all of them where nothing faster runs).
    """
    info = _C.cpu_info()
    variants = {name: _C.op_variants(name) for name in sorted(_C.op_names())
                if _C.op_variants(name)}
    reference_only = info["reference_only"]

    def first(bf16):
        conv = variants["conv2d"]
        usable = [n for n, ok in conv[:-1]
                  if ok and not reference_only and _takes(n, bf16)]
        return usable[0] if usable else conv[-1][0]

    return {"cpu": info["brand"], "features": info["features"],
            "reference_only": reference_only, "amx": info["amx"],
            "setting": info["kernels"],
            "threads": _C.get_num_threads(),
            "variants": variants,
            "kernels": {"float32": first(False), "bfloat16": first(True)}}


def _takes(variant, bf16):
    """Whether a convolution variant takes the calls of one group of this
    dtype (bfloat16: ``*_bf16``; the ``*_grouped*`` ones take only groups)."""
    return variant.endswith("_bf16") == bf16 and "_grouped" not in variant


def kernel_notice(c=None):
    """One line naming the convolution kernels this CPU gets (float32 and
    bfloat16) and, where that is the portable reference, why and what it
    costs: ``python -m pyresnet.train`` prints it first, ``show_config``
    too.  ``c`` is a :func:`config` dict (default: this process's)."""
    c = c or config()
    conv = c["variants"]["conv2d"]
    reference = conv[-1][0]
    parts = []
    for dtype, bf16 in (("float32", False), ("bfloat16", True)):
        name = c["kernels"][dtype]
        if name != reference:
            parts.append(f"{dtype} {name}")
            continue
        faster = [n for n, _ in conv[:-1] if _takes(n, bf16)]
        why = ("PYRESNET_KERNELS=reference" if c["reference_only"] else
               "this CPU runs none of " + ", ".join(faster))
        cost = (_REFERENCE_COST if not bf16 else
                "float32 convolutions of the rounded operands, no faster than float32")
        parts.append(f"{dtype} {name}, the portable reference ({why}): {cost}")
    return "convolution kernels: " + "; ".join(parts)


def show_config(file=None):
    """Print :func:`config` for people: the CPU, its features, the kernel
    threads and, per op, the kernel variants in priority order (those this
    CPU cannot run are marked)."""
    c = config()
    out = file or sys.stdout
    print(f"CPU:      {c['cpu'] or 'unknown'}", file=out)
    print(f"features: {' '.join(c['features']) or 'none detected'}", file=out)
    print(f"AMX:      {c['amx']}", file=out)
    print(f"threads:  {c['threads']}", file=out)
    if c["reference_only"]:
        print("kernels:  reference only (PYRESNET_KERNELS=reference)", file=out)
    elif c["setting"]:
        print(f"kernels:  PYRESNET_KERNELS={c['setting']} ("
              + ("AVX-512 and AMX off" if c["setting"] == "avx2" else "AMX off") + ")", file=out)
    print(kernel_notice(c), file=out)
    for op, variants in c["variants"].items():
        off = [c["reference_only"] and k < len(variants) - 1 for k in range(len(variants))]
        names = ", ".join(f"{n} (off)" if o else n if ok else f"{n} (not on this CPU)"
                          for (n, ok), o in zip(variants, off))
        print(f"  {op}: {names}", file=out)
