"""Mixed precision with Keras 3's API: ``DTypePolicy``, ``set_global_policy``,
``global_policy`` (``keras.mixed_precision``).

A policy names two dtypes: the *variable* dtype weights are stored in and
the *compute* dtype a layer computes in.  Two policies exist here:

* ``"float32"``: both float32 (the default);
* ``"mixed_bfloat16"``: variables float32, compute bfloat16.

Under ``"mixed_bfloat16"`` (Keras 3 semantics, Micikevicius et al., "Mixed
Precision Training", ICLR 2018, section 3, with bfloat16 in place of float16
so no loss scaling is needed: Kalamkar et al., "A Study of BFLOAT16 for Deep
Learning Training", 2019):

* weights stay float32 (optimizers update and ``save`` writes float32);
* ``Conv2D``, ``Dense`` and the residual blocks cast their kernels to
  bfloat16 once per call (one ``cast`` node per step in a compiled step);
  convolutions and matmuls multiply in bfloat16 and sum in float32 (AMX
  tiles or AVX512_BF16 where the CPU has them, ``pyresnet.show_config()``);
* the activations between layers are bfloat16, as in Keras: ``Conv2D`` and
  the residual blocks cast a float32 input to bfloat16 and a convolution of
  two bfloat16 operands returns bfloat16 (its float32 sums rounded once);
  batch normalization, ReLU, GELU, max pooling and the residual adds read
  and write bfloat16, computing in float32 inside (batch-norm statistics
  summed in double, returned float32), so the activations move half the
  bytes; their gradients are bfloat16 too (a cast's gradient is cast back
  to its source's dtype, as TensorFlow's);
* batch-norm statistics, softmax, losses and metrics are float32, and a
  model's outputs are float32;
* a custom Python layer follows its policy's compute dtype as in Keras:
  floating inputs reach its ``call`` cast to bfloat16, and any op on them
  computes as that op does with bfloat16 operands (matmul and convolutions
  in bfloat16; add, relu, gelu, max pooling and batch norm on bfloat16 data;
  other ops in float32 on the exactly widened values, returning float32);
  a layer whose own policy computes in float32 gets bfloat16 inputs widened
  to float32 (exact), as Keras's autocast does.

Where this departs from Keras: ``Dense`` returns its float32 sums (a
model's logits stay float32 without a float32 last layer), and so does a
convolution with one float32 operand; ops without bfloat16 kernels
(average pooling, dropout, softmax, ...) widen their inputs and return float32 (the
next ``Conv2D`` casts back); a convolution's weight gradient is its float32
sum (one rounding fewer than Keras's bfloat16 gradient of the cast kernel).
"""
__all__ = ["DTypePolicy", "set_global_policy", "global_policy", "dtype_policy",
           "set_dtype_policy", "bfloat16_hardware"]

_POLICIES = {"float32": ("float32", "float32"), "mixed_bfloat16": ("bfloat16", "float32")}


class DTypePolicy:
    """A dtype policy, as ``keras.DTypePolicy``.

    Args:
        name (str): ``"float32"`` or ``"mixed_bfloat16"``; ``None`` means
            the global policy's name.
    Attributes:
        name (str), compute_dtype (str: ``"float32"``/``"bfloat16"``),
        variable_dtype (str: always ``"float32"``).
    Raises:
        ValueError: for another name (``"bfloat16"``, ``"float16"`` and
            ``"mixed_float16"`` included: variables are always float32 here).
        TypeError: for a name that is not a str.
    """

    def __init__(self, name=None):
        if name is None:
            name = global_policy().name
        if not isinstance(name, str):
            raise TypeError(f"DTypePolicy: name must be a str, got {type(name).__name__}")
        if name not in _POLICIES:
            raise ValueError(f"DTypePolicy: unsupported policy {name!r}; expected one of "
                             f"{sorted(_POLICIES)} (variables are always float32)")
        self._name = name
        self._compute_dtype, self._variable_dtype = _POLICIES[name]

    @property
    def name(self):
        """The policy's name (str)."""
        return self._name

    @property
    def compute_dtype(self):
        """The dtype layers compute in (str)."""
        return self._compute_dtype

    @property
    def variable_dtype(self):
        """The dtype of the weights (str, always ``"float32"``)."""
        return self._variable_dtype

    def get_config(self):
        """``{"name": name}``."""
        return {"name": self._name}

    @classmethod
    def from_config(cls, config):
        """The policy of ``get_config()``'s dict."""
        return cls(**config)

    def __eq__(self, other):
        return isinstance(other, DTypePolicy) and other.name == self.name

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return f'<DTypePolicy "{self._name}">'


_default = DTypePolicy("float32")
_global = [_default]  # process-wide, as Keras's global policy


def get(policy):
    """A :class:`DTypePolicy` from a policy, a policy name, a policy config
    dict or ``None`` (the global policy); ``"float32"`` may also come as a
    NumPy dtype (Keras's ``dtype=`` on layers).

    Raises:
        ValueError/TypeError: as :class:`DTypePolicy`.
    """
    if policy is None:
        return global_policy()
    if isinstance(policy, DTypePolicy):
        return policy
    if isinstance(policy, dict):
        return DTypePolicy.from_config(policy.get("config", policy))
    if not isinstance(policy, str):
        import numpy as np  # noqa: PLC0415
        try:
            policy = np.dtype(policy).name
        except TypeError:
            raise TypeError(f"DTypePolicy: expected a policy name, got {policy!r}") from None
    return DTypePolicy(policy)


def bfloat16_hardware():
    """The bfloat16 instructions this process's kernels use: a list of
    ``"amx_bf16"`` and/or ``"avx512_bf16"`` (empty on a CPU with neither, or
    under ``PYRESNET_KERNELS=reference``)."""
    from ._loader import _C  # noqa: PLC0415

    info = _C.cpu_info()
    if info["reference_only"]:
        return []
    return [f for f in ("amx_bf16", "avx512_bf16") if f in info["features"]]


def _cpu_vendor():
    """cpuid's vendor string: ``"GenuineIntel"``, ``"AuthenticAMD"``, or ``""``."""
    from ._loader import _C  # noqa: PLC0415

    return _C.cpu_info().get("vendor", "")


# Measured on an AMD EPYC (Zen 3 class: AVX2 + FMA, neither AVX512_BF16 nor
# AMX), 2 threads, float32 running the avx2_direct convolutions: `python
# bench/peers.py --modes pyresnet_compiled,pyresnet_bf16_compiled --tag
# avx2_zen3_bf16check` (bench/results/peers_resnet20_b128_avx2_zen3_bf16check.md).
_SLOW_BF16 = ("it has neither AVX512_BF16 nor AMX (or PYRESNET_KERNELS=reference is set), so "
              "bfloat16 convolutions and matmuls widen their operands to float32 before "
              "multiplying; the ResNet-20 compiled training step ran 0.58x as fast as in "
              "float32 on an AMD EPYC with AVX2 and neither (bench/results/"
              "peers_resnet20_b128_avx2_zen3_bf16check.md)")
# Measured on an Intel Xeon (Sapphire Rapids class) with PYRESNET_KERNELS=no_amx,
# 2 threads: `python bench/fma_peak.py` and `python bench/peers.py --modes
# pyresnet_compiled,pyresnet_bf16_compiled,... --tag sapphire_rapids_no_amx_direct_bf16`.
# AMD's Zen 4 runs VDPBF16PS at twice its float32 FMA rate (452 against 224
# GFLOP/s), where mixed_bfloat16 ran 1.58x float32.
_SLOW_INTEL_BF16 = ("it has AVX512_BF16 but no usable AMX, and an Intel core runs VDPBF16PS at "
                    "half its float32 FMA rate (239 against 478 GFLOP/s on two cores of a "
                    "Sapphire Rapids Xeon, bench/fma_peak.py); there the ResNet-20 compiled "
                    "training step ran 0.74x as fast as in float32 (bench/results/"
                    "peers_resnet20_b128_sapphire_rapids_no_amx_direct_bf16.md)")
_warned = [False]


def _slow_reason():
    """Why bfloat16 is slower than float32 on this CPU, or None where it is
    faster: no bfloat16 instructions at all, or AVX512_BF16 without AMX on
    an Intel core."""
    hardware = bfloat16_hardware()
    if not hardware:
        return _SLOW_BF16
    if "amx_bf16" not in hardware and _cpu_vendor() == "GenuineIntel":
        return _SLOW_INTEL_BF16
    return None


def _warn_if_slow(policy):
    """Warn once per process when ``policy`` computes in bfloat16 on a CPU
    where that costs speed instead of saving it (:func:`_slow_reason`)."""
    if policy.compute_dtype != "bfloat16" or _warned[0]:
        return
    reason = _slow_reason()
    if reason is None:
        return
    _warned[0] = True
    from ._loader import _C  # noqa: PLC0415

    cpu = _C.cpu_info()["brand"].strip() or "this CPU"
    import warnings  # noqa: PLC0415

    warnings.warn(f"mixed_bfloat16 is slower than float32 on {cpu}: {reason}. Keep the "
                  f"float32 policy for speed.", RuntimeWarning, stacklevel=3)


def set_global_policy(policy):
    """Set the policy of layers created from now on without a ``dtype``
    (``keras.mixed_precision.set_global_policy``).

    Warns (``RuntimeWarning``, once per process) when the policy computes in
    bfloat16 on a CPU where that is slower than float32: one without
    AVX512_BF16 and AMX (see :func:`bfloat16_hardware`), or an Intel CPU
    with AVX512_BF16 but no usable AMX (its VDPBF16PS runs at half the
    float32 FMA rate).

    Args:
        policy: a :class:`DTypePolicy`, ``"float32"``, ``"mixed_bfloat16"``
            or ``None`` (back to float32).
    Raises:
        ValueError/TypeError: for an unsupported policy (the global policy
            is then unchanged).
    """
    _global[0] = _default if policy is None else get(policy)
    _warn_if_slow(_global[0])


def global_policy():
    """The global :class:`DTypePolicy` (``"float32"`` unless set)."""
    return _global[0]


# Keras 3's other names for the same functions (keras.config)
dtype_policy = global_policy
set_dtype_policy = set_global_policy
