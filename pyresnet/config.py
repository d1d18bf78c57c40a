"""What this installation runs on: the CPU, the threads, and per op the
kernel variants (csrc/ops.h, ``pr_variant``) that this CPU can run."""
import os
import sys
import warnings

from ._loader import _C

__all__ = ["show_config", "config"]

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
        ``"off: PYRESNET_KERNELS=avx2"``), ``kernels`` (str: the
        ``PYRESNET_KERNELS`` setting in effect, ``""`` for none; ``"avx2"``
        clears the AVX-512 and AMX features, as on a CPU with AVX2 and FMA
        only),
        ``threads`` (int) and ``variants``: for each op with several
        kernels, a list of ``(name, this_cpu_has_its_features)`` in priority
        order (the reference kernel last).  A call runs the first variant that
        runs on this CPU and supports its shapes.
    """
    info = _C.cpu_info()
    variants = {name: _C.op_variants(name) for name in sorted(_C.op_names())
                if _C.op_variants(name)}
    return {"cpu": info["brand"], "features": info["features"],
            "reference_only": info["reference_only"], "amx": info["amx"],
            "kernels": info["kernels"],
            "threads": _C.get_num_threads(),
            "variants": variants}


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
    elif c["kernels"]:
        print(f"kernels:  PYRESNET_KERNELS={c['kernels']} ("
              + ("AVX-512 and AMX off" if c["kernels"] == "avx2" else "AMX off") + ")", file=out)
    for op, variants in c["variants"].items():
        off = [c["reference_only"] and k < len(variants) - 1 for k in range(len(variants))]
        names = ", ".join(f"{n} (off)" if o else n if ok else f"{n} (not on this CPU)"
                          for (n, ok), o in zip(variants, off))
        print(f"  {op}: {names}", file=out)
