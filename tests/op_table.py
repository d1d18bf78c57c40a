"""The op table: one entry per op of the C registry (``pyresnet._C.op_names()``)
and per internal graph op, driving tests/test_op_table.py (and giving the
fuzz in tests/test_robustness.py its valid starting calls).

An :class:`Entry` holds

* ``name`` and ``kind``: "pure" (outputs from inputs), "state" (updates
  Variables in place: the inputs in ``op_info(name)["mutates"]``), "random"
  (augmentation ops that draw from an RNG state Variable) or "internal"
  (graph-only ops the registry does not list);
* ``cases``: named shape cases, each a seeded input generator and the op's
  attributes, chosen to include the awkward shapes (odd sizes, stride 2,
  batch 1, padding at the borders; channel counts 3, 15, 16, 17 and 64 for
  the convolutions).  ``Case.grad`` marks the ones small enough for finite
  differences;
* ``reference``: a float64 NumPy function of the inputs (float inputs as
  float64, others as they are) and the attributes.  For "pure" ops it
  returns the outputs; for "state" ops the new values of the mutated inputs
  (the reference of the update itself); for "random" ops it is called as
  ``reference(inputs, draws, **attrs)`` with the draws the op reports
  (flags, offsets, boxes, ...) and returns the other outputs, while
  ``draws(inputs, **attrs)`` recomputes those draws from the Philox streams
  (tests/philox_ref.py);
* ``rtol``/``atol``: the forward tolerance against the reference;
* ``grad_wrt``: the inputs (float inputs only) whose gradients the tape
  gives, checked against central differences of the reference (None: the
  registry marks the op not differentiable) and ``grad_outputs``;
* ``skip``: for a check the entry cannot take, the reason.

The references are the ones the per-family tests already use, imported from
them (test_ops_conv, test_ops_nn, test_augment, philox_ref); the few that
did not exist (backward ops, sum_to_shape, avg-pool adjoint) are written
here from their documented formulas.
"""
import dataclasses
import math
import zlib
from typing import Callable, Optional

import ml_dtypes
import numpy as np

from pyresnet import _C
from philox_ref import Stream, mixup_draws, resized_crop_box
from test_augment import resize_reference
from test_ops_conv import (conv_bpf_ref, conv_bpi_ref, conv_ref, max_pool_grad_ref, pool_ref,
                           _taps)
from test_ops_nn import (BN_SHAPES, np_bn_infer, np_bn_train, np_keras_probs_ce, np_log_softmax,
                         np_soft_ce, np_softmax, np_sparse_ce, onehot)

f32 = np.float32
bf16 = ml_dtypes.bfloat16


# ---- the table's types ----------------------------------------------------------------

@dataclasses.dataclass
class Case:
    """One call of an op: ``make(rng)`` -> list of NumPy inputs, and attrs."""
    label: str
    make: Callable
    attrs: dict = dataclasses.field(default_factory=dict)
    grad: bool = True  # small enough for central differences of every element
    bf16_out: bool = False  # float outputs are bfloat16: the float32 result rounded once


def as_bf16(case, bf16_out=False):
    """The case with its float inputs in bfloat16 (the mixed_bfloat16 policy's
    operands and activations): matmul and the convolutions compute in
    bfloat16 with float32 sums, the activation ops in float32 on the widened
    values, so on these exactly representable inputs the float32 tolerances
    still hold, for outputs rounded to bfloat16 (``bf16_out``) up to that
    rounding."""
    return Case(case.label + " bf16", lambda r: [a.astype(bf16) for a in case.make(r)],
                case.attrs, grad=False, bf16_out=bf16_out)


@dataclasses.dataclass
class Entry:
    name: str
    cases: list = dataclasses.field(default_factory=list)
    reference: Optional[Callable] = None
    rtol: float = 1e-6
    atol: float = 1e-6
    grad_wrt: Optional[tuple] = None
    grad_outputs: tuple = (0,)
    grad_rtol: float = 2e-3
    grad_atol: float = 2e-3
    kind: str = "pure"
    draws: Optional[Callable] = None  # random ops: expected draws from philox_ref
    draw_outputs: tuple = ()  # random ops: which outputs are the draws
    skip: dict = dataclasses.field(default_factory=dict)  # check -> reason
    note: str = ""

    def inputs(self, case, rng=None):
        """The case's inputs, seeded by op name and case label."""
        if rng is None:
            rng = np.random.default_rng(zlib.crc32(f"{self.name}/{case.label}".encode()))
        return [np.asarray(a) for a in case.make(rng)]

    @property
    def mutated(self):
        """Indices of the inputs the op updates in place."""
        if self.kind == "internal":
            return ()
        m = _C.op_info(self.name)["mutates"]
        return tuple(i for i in range(m.bit_length()) if m >> i & 1)

    def ref(self, inputs, **attrs):
        """The reference on float64 copies of the float inputs."""
        return self.reference(*as64(inputs), **attrs)


def as64(inputs):
    """Float inputs (float32 and bfloat16) as float64, exactly; others as they are."""
    return [np.asarray(a, np.float64) if is_float(a) else np.asarray(a) for a in inputs]


def is_float(a):
    return np.asarray(a).dtype.kind == "f" or np.asarray(a).dtype == bf16


TABLE = {}


def add(entry):
    assert entry.name not in TABLE, entry.name
    TABLE[entry.name] = entry
    return entry


# ---- input generators ---------------------------------------------------------------------

def randn(rng, *shape, scale=1.0, shift=0.0):
    return np.asarray(rng.standard_normal(shape) * scale + shift, f32)


def uniform(rng, lo, hi, *shape):
    return np.asarray(rng.uniform(lo, hi, shape), f32)


def away_from_zero(rng, *shape):
    """Normal values with none within 1e-2 of 0 (relu's kink, a divisor)."""
    x = randn(rng, *shape)
    x[np.abs(x) < 1e-2] = 0.5
    return x


def nonzero_divisor(rng, *shape):
    # test_core.test_binary_broadcasting's divisor: |b| in [0.5, 2]
    return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)).astype(f32)


def distinct_pair(rng, sa, sb):
    """Values on a 0.1 grid, b offset by 0.05: no ties between or within a
    and b, every pair at least 0.05 apart (test_ops_nn.test_maximum_minimum)."""
    na, nb = int(np.prod(sa)), int(np.prod(sb))
    p = rng.permutation(na + nb)
    return ((p[:na].reshape(sa) * 0.1).astype(f32),
            (p[na:].reshape(sb) * 0.1 + 0.05).astype(f32))


def distinct(rng, shape, step=0.01):
    """Distinct values spaced `step` apart: no ties in a max (test_pool2d)."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * step - 1.0).astype(f32)


def labels(rng, c, shape, dtype=np.int32):
    return rng.integers(0, c, shape).astype(dtype)


def image(rng, shape, dtype):
    """test_augment.images: uint8 pixels or normal float32."""
    if dtype == np.uint8:
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.standard_normal(shape).astype(f32)


def rng_state(seed, counter=0):
    return np.array([seed, counter], np.int64)


# ---- elementwise ------------------------------------------------------------------------

# test_core.test_binary_broadcasting's shapes, then odd sizes past a vector width
BINARY_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2)),
                 ((1, 3, 1, 2), (4, 1, 3, 1, 1))]
# and past the kernels' 32768-element threading threshold (PARALLEL_MIN)
BINARY_LARGE = [((1, 17, 33), (33,)), ((31, 1), (1, 19)), ((64, 1025), (1025,)),
                ((2, 129, 257), (2, 129, 257)), ((1, 40001), ()), ((3, 33001), (3, 1))]


def _binary_cases(gen):
    return ([Case(f"{sa}x{sb}", lambda r, sa=sa, sb=sb: gen(r, sa, sb)) for sa, sb in BINARY_SHAPES]
            + [Case(f"{sa}x{sb}", lambda r, sa=sa, sb=sb: gen(r, sa, sb), grad=False)
               for sa, sb in BINARY_LARGE])


for _name, _fn in [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply)]:
    _cases = _binary_cases(lambda r, sa, sb: [randn(r, *sa), randn(r, *sb)])
    # add takes bfloat16 activations (the residual add under mixed_bfloat16)
    _bf16 = [as_bf16(c, bf16_out=True) for c in _cases] if _name == "add" else []
    add(Entry(_name, _cases + _bf16, reference=_fn, rtol=1e-6, atol=1e-6, grad_wrt=(0, 1)))
add(Entry("divide", _binary_cases(lambda r, sa, sb: [randn(r, *sa), nonzero_divisor(r, *sb)]),
          reference=np.divide, rtol=1e-6, atol=1e-6, grad_wrt=(0, 1)))
for _name, _fn in [("maximum", np.maximum), ("minimum", np.minimum)]:
    add(Entry(_name, _binary_cases(lambda r, sa, sb: list(distinct_pair(r, sa, sb))),
              reference=_fn, rtol=0, atol=0, grad_wrt=(0, 1),
              note="distinct values 0.05 apart: no ties, differences stay on one side"))
add(Entry("power", _binary_cases(lambda r, sa, sb: [uniform(r, 0.5, 2.0, *sa), randn(r, *sb)]),
          reference=np.power, rtol=2e-6, atol=1e-6, grad_wrt=(0, 1),
          note="positive bases: the exponent's gradient needs log(x1)"))

UNARY_SHAPES = [(3, 5), (1,), (), (2, 4, 1)]
UNARY_LARGE = [(3, 17, 33), (65, 1031)]


def _unary_cases(gen, attrs=None):
    attrs = attrs or {}
    return ([Case(str(s), lambda r, s=s: [gen(r, s)], dict(attrs)) for s in UNARY_SHAPES]
            + [Case(str(s), lambda r, s=s: [gen(r, s)], dict(attrs), grad=False)
               for s in UNARY_LARGE])


# test_ops_nn.test_unary_math's ranges
for _name, _fn, _lo, _hi in [("exp", np.exp, -3.0, 3.0), ("log", np.log, 0.2, 4.0),
                             ("sqrt", np.sqrt, 0.2, 4.0), ("square", np.square, -3.0, 3.0)]:
    add(Entry(_name, _unary_cases(lambda r, s, lo=_lo, hi=_hi: uniform(r, lo, hi, *s)),
              reference=_fn, rtol=2e-6, atol=1e-6, grad_wrt=(0,)))
add(Entry("abs", _unary_cases(lambda r, s: away_from_zero(r, *s)), reference=np.abs,
          rtol=0, atol=0, grad_wrt=(0,), note="no value within 1e-2 of the kink"))
add(Entry("sign", _unary_cases(lambda r, s: away_from_zero(r, *s))
          + [Case("zeros", lambda r: [np.array([0.0, -0.0, 1.5, -2.0], f32)], grad=False)],
          reference=np.sign, rtol=0, atol=0, grad_wrt=(0,),
          note="gradient 0 away from 0 (central differences agree)"))
for _name, _fn, _lo, _hi in [
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), -6.0, 6.0), ("tanh", np.tanh, -3.0, 3.0),
        ("erf", lambda x: np.vectorize(__import__("math").erf)(x), -2.5, 2.5)]:
    add(Entry(_name, _unary_cases(lambda r, s, lo=_lo, hi=_hi: uniform(r, lo, hi, *s))
              + [Case("saturated", lambda r: [np.array([-100.0, -20.0, 0.0, 20.0, 100.0], f32)],
                      grad=False)],
              reference=_fn, rtol=2e-6, atol=2e-7, grad_wrt=(0,)))
add(Entry("negative", _unary_cases(lambda r, s: randn(r, *s)), reference=np.negative,
          rtol=0, atol=0, grad_wrt=(0,)))
_cases = _unary_cases(lambda r, s: away_from_zero(r, *s))
add(Entry("relu", _cases + [as_bf16(c, bf16_out=True) for c in _cases],
          reference=lambda x: np.maximum(x, 0), rtol=0, atol=0, grad_wrt=(0,),
          note="no value within 1e-2 of the kink; bfloat16 in, bfloat16 out"))


add(Entry("scale", _unary_cases(lambda r, s: randn(r, *s), {"value": 2.5, "divisor": 3})
          + [Case("default divisor", lambda r: [randn(r, 4, 3)], {"value": -0.75})],
          reference=lambda x, value, divisor=1: x * (value / divisor), rtol=1e-6, atol=1e-7,
          grad_wrt=(0,)))
add(Entry("ones_like", _unary_cases(lambda r, s: randn(r, *s)),
          reference=lambda x: np.ones_like(x, np.float64), rtol=0, atol=0))
add(Entry("zeros_like", _unary_cases(lambda r, s: randn(r, *s)),
          reference=lambda x: np.zeros_like(x, np.float64), rtol=0, atol=0))


def _clip_values(r, *shape, lo=-0.6, hi=0.8):
    """Values at least 2e-3 away from both bounds (central differences)."""
    x = randn(r, *shape)
    x[np.abs(x - lo) < 2e-3] = lo - 0.1
    x[np.abs(x - hi) < 2e-3] = hi + 0.1
    return x


add(Entry("clip", [
    Case("fixed", lambda r: [np.array([[-2.0, -0.5, 0.25, 0.7, 3.0], [0.1, -1.7, 1.9, -0.2, 0.9]],
                                      f32)], {"min": -0.6, "max": 0.8}),  # test_ops_nn's
    Case("(4, 7)", lambda r: [_clip_values(r, 4, 7)], {"min": -0.6, "max": 0.8}),
    Case("(1,)", lambda r: [_clip_values(r, 1)], {"min": -0.6, "max": 0.8}),
    Case("(3, 17, 33)", lambda r: [_clip_values(r, 3, 17, 33)], {"min": -0.6, "max": 0.8},
         grad=False),
    Case("(65, 1031)", lambda r: [_clip_values(r, 65, 1031)], {"min": -0.6, "max": 0.8},
         grad=False),
    Case("min > max", lambda r: [randn(r, 2, 5)], {"min": 1.0, "max": 0.0}, grad=False),
], reference=lambda x, min, max: np.clip(x, min, max), rtol=0, atol=0, grad_wrt=(0,),
    note="min > max gives max everywhere, as NumPy"))


def _mask_cases(second):
    return [Case(str(s), lambda r, s=s: [randn(r, *s), second(r, s)], grad=False)
            for s in [(3, 5), (1,), (2, 17, 33), (65, 1031)]]


def _with_bounds(r, s, lo=-0.5, hi=0.75):
    x = randn(r, *s)
    x.flat[: x.size // 3] = lo  # exactly on the bounds: inclusive
    x.flat[x.size // 3: x.size // 2] = hi
    return r.permutation(x.reshape(-1)).reshape(s)


def _relu_outputs(r, s):
    y = np.maximum(randn(r, *s), 0)  # zeros included: no gradient at 0
    return y


_cases = _mask_cases(_relu_outputs)
add(Entry("relu_backward", _cases + [as_bf16(c, bf16_out=True) for c in _cases]
          + [Case("(3, 5) y away from 0", lambda r: [randn(r, 3, 5), away_from_zero(r, 3, 5)])],
          reference=lambda dy, y: np.where(y > 0, dy, 0.0), rtol=0, atol=0, grad_wrt=(0, 1),
          note="second order: linear in dy, 0 in y (the mask is piecewise constant)"))


def _gelu_ref(x):
    return 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))


def _gelu_backward_ref(dy, x):
    cdf = 0.5 * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    return dy * (cdf + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi))


_gelu_cases = _unary_cases(lambda r, s: uniform(r, -5.0, 5.0, *s))
add(Entry("gelu", _gelu_cases + [as_bf16(c, bf16_out=True) for c in _gelu_cases]
          + [Case("saturated", lambda r: [np.array([-100.0, -9.0, -1e-30, 0.0, 1e-30, 9.0, 100.0],
                                                   f32)], grad=False)],
          reference=_gelu_ref, rtol=2e-6, atol=2e-6, grad_wrt=(0,),
          note="vectorized erf/exp approximations (absolute error < 2e-6, float32 rounding of 1 + erf near -1 included); bfloat16 in and out"))
_gelu_bw_cases = [Case(str(s), lambda r, s=s: [randn(r, *s), uniform(r, -5.0, 5.0, *s)])
                  for s in [(3, 5), (1,), (2, 17, 33)]] + [
    Case("(65, 1031)", lambda r: [randn(r, 65, 1031), uniform(r, -5.0, 5.0, 65, 1031)],
         grad=False)]
add(Entry("gelu_backward", _gelu_bw_cases
          + [as_bf16(c, bf16_out=True) for c in _gelu_bw_cases],
          reference=_gelu_backward_ref, rtol=2e-6, atol=2e-6, grad_wrt=(0, 1),
          note="second order: linear in dy; in x, dy * phi(x) (2 - x**2)"))
add(Entry("clip_backward",
          [Case(c.label, c.make, {"min": -0.5, "max": 0.75}, grad=False)
           for c in _mask_cases(_with_bounds)]
          + [Case("(3, 5) x away from the bounds",
                  lambda r: [randn(r, 3, 5), _clip_values(r, 3, 5, lo=-0.5, hi=0.75)],
                  {"min": -0.5, "max": 0.75})],
          reference=lambda dy, x, min, max: np.where((x >= min) & (x <= max), dy, 0.0),
          rtol=0, atol=0, grad_wrt=(0, 1),
          note="x exactly on the bounds: inclusive; second order as relu_backward"))


def sum_to_shape_ref(x, shape):
    """The adjoint of np.broadcast_to: sum the broadcast axes down to `shape`."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    y = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and y.shape[i] != 1)
    return y.sum(axis=axes, keepdims=True) if axes else y


add(Entry("broadcast_to", [
    Case("(1, 3)->(4, 3)", lambda r: [randn(r, 1, 3)], {"shape": [4, 3]}),
    Case("(5, 1, 7)->(2, 5, 4, 7)", lambda r: [randn(r, 5, 1, 7)], {"shape": [2, 5, 4, 7]}),
    Case("()->(2, 3)", lambda r: [randn(r)], {"shape": [2, 3]}),
    Case("identity", lambda r: [randn(r, 3)], {"shape": [3]}),
    Case("(33,)->(17, 33)", lambda r: [randn(r, 33)], {"shape": [17, 33]}, grad=False),
], reference=lambda x, shape: np.broadcast_to(x, tuple(shape)), rtol=0, atol=0, grad_wrt=(0,)))
add(Entry("sum_to_shape", [
    Case("(4, 3)->(1, 3)", lambda r: [randn(r, 4, 3)], {"shape": [1, 3]}),
    Case("(2, 5, 4, 7)->(5, 1, 7)", lambda r: [randn(r, 2, 5, 4, 7)], {"shape": [5, 1, 7]}),
    Case("(2, 3)->()", lambda r: [randn(r, 2, 3)], {"shape": []}),
    Case("identity", lambda r: [randn(r, 3)], {"shape": [3]}),
    Case("(17, 33)->(33,)", lambda r: [randn(r, 17, 33)], {"shape": [33]}, grad=False),
], reference=sum_to_shape_ref, rtol=1e-6, atol=1e-6, grad_wrt=(0,)))
add(Entry("multiply_sum_to_shape", [
    Case("(4, 3)->(1, 3)", lambda r: [randn(r, 4, 3), randn(r, 4, 3)], {"shape": [1, 3]}),
    Case("(2, 5, 4, 7)->(2, 1, 1, 7)", lambda r: [randn(r, 2, 5, 4, 7), randn(r, 2, 5, 4, 7)],
         {"shape": [2, 1, 1, 7]}),
    Case("(2, 5, 4, 7)->(5, 1, 7)", lambda r: [randn(r, 2, 5, 4, 7), randn(r, 2, 5, 4, 7)],
         {"shape": [5, 1, 7]}),
    Case("(2, 3)->()", lambda r: [randn(r, 2, 3), randn(r, 2, 3)], {"shape": []}),
    Case("(64, 8, 8, 33)->(64, 1, 1, 33) threads", lambda r: [randn(r, 64, 8, 8, 33),
                                                               randn(r, 64, 8, 8, 33)],
         {"shape": [64, 1, 1, 33]}, grad=False),
], reference=lambda a, b, shape: sum_to_shape_ref(a.astype(np.float64) * b, shape), rtol=1e-5,
          atol=1e-5, note="made by jit_compile from sum_to_shape(a * b) (tests/test_compile.py: "
                          "bit for bit); callable eagerly too; no gradient rule"))


# ---- reductions and reshapes ----------------------------------------------------------------

# test_ops_nn.test_reductions's cases (axes [] = all), then a larger odd one
REDUCE_CASES = [((2, 3, 4), [], False), ((2, 3, 4), [1], False), ((2, 3, 4), [-1], True),
                ((2, 3, 4), [0, 2], False), ((2, 3, 4), [2, 0], True), ((3, 1, 5), [1], False),
                ((1, 5, 1, 3), [0, 1], False), ((4, 3, 3, 5), [1, 2], False), ((7,), [0], False),
                ((), [], False)]


def _reduce_ref(fn):
    return lambda x, axes, keepdims: fn(x, axis=tuple(axes) if axes else None, keepdims=keepdims)


for _name in ("sum", "mean"):
    add(Entry(_name, [Case(f"{s} axes={a} keepdims={k}", lambda r, s=s: [randn(r, *s)],
                           {"axes": a, "keepdims": k}) for s, a, k in REDUCE_CASES]
              + [Case(f"(64, 33, 17) axes={a}", lambda r: [randn(r, 64, 33, 17, scale=100)],
                      {"axes": a, "keepdims": False}, grad=False)
                 for a in ([], [0], [1, 2], [0, 2], [-1])],
              reference=_reduce_ref(getattr(np, _name)), rtol=1e-6, atol=1e-6, grad_wrt=(0,)))

add(Entry("reshape", [Case(f"(2, 3, 5)->{s}", lambda r: [randn(r, 2, 3, 5)], {"shape": s})
                      for s in [[6, 5], [-1], [5, -1, 1], [2, 15], [30]]]
          + [Case("int64", lambda r: [np.arange(6, dtype=np.int64)], {"shape": [2, 3]},
                  grad=False),
             Case("uint8", lambda r: [r.integers(0, 256, (4, 3), dtype=np.uint8)],
                  {"shape": [3, -1]}, grad=False)],
          reference=lambda x, shape: np.reshape(x, shape), rtol=0, atol=0, grad_wrt=(0,),
          note="any dtype; int and uint8 cases are forward only"))
add(Entry("flatten", [Case("batch 1 (1, 3, 5, 2)", lambda r: [randn(r, 1, 3, 5, 2)]),
                      Case("(2, 3, 4)", lambda r: [randn(r, 2, 3, 4)]),
                      Case("rank 1", lambda r: [randn(r, 4)])],
          reference=lambda x: x.reshape(x.shape[0], -1), rtol=0, atol=0, grad_wrt=(0,)))
add(Entry("dim_size", [Case(f"(2, 3, 5) axis {a}", lambda r: [randn(r, 2, 3, 5)], {"axis": a})
                       for a in (0, 1, -1)]
          + [Case("int64 axis 0", lambda r: [np.zeros((7, 2), np.int64)], {"axis": 0})],
          reference=lambda x, axis: np.int32(x.shape[axis]), rtol=0, atol=0))
add(Entry("size", [Case(f"value {v}", lambda r: [], {"value": v}) for v in (0, 7, 2 ** 31 - 1)],
          reference=lambda value: np.int32(value), rtol=0, atol=0))


# ---- softmax and losses -------------------------------------------------------------------------

SOFTMAX_SHAPES = [(1, 1), (3, 7), (2, 3, 5), (4,)]  # test_ops_nn.test_softmax_family's


def _softmax_cases():
    return ([Case(str(s), lambda r, s=s: [randn(r, *s, scale=2)]) for s in SOFTMAX_SHAPES]
            + [Case("(5, 37) large logits", lambda r: [randn(r, 5, 37, scale=30)], grad=False),
               Case("(129, 1001)", lambda r: [randn(r, 129, 1001, scale=3)], grad=False),
               Case("extreme", lambda r: [np.array([[1000.0, 999.0, -1000.0],
                                                    [-1e30, 0.0, 1e30]], f32)], grad=False)])


add(Entry("softmax", _softmax_cases(), reference=np_softmax, rtol=1e-5, atol=1e-7,
          grad_wrt=(0,)))
add(Entry("log_softmax", _softmax_cases()[:-1], reference=np_log_softmax, rtol=1e-5, atol=2e-5,
          grad_wrt=(0,), note="the extreme row [-1e30, 0, 1e30] has log-probabilities of "
                              "-2e30, beyond a relative tolerance: left to test_ops_nn"))
add(Entry("softmax_backward",
          [Case(str(s), lambda r, s=s: [randn(r, *s), np_softmax(randn(r, *s, scale=2)
                                                                 .astype(np.float64)).astype(f32)],
                grad=s[-1] < 30)
           for s in [(1, 1), (3, 7), (2, 3, 5), (5, 37), (129, 1001)]],
          reference=lambda dy, y: y * (dy - (dy * y).sum(-1, keepdims=True)),
          rtol=1e-5, atol=1e-6, grad_wrt=(0, 1), note="second-order rules"))
add(Entry("log_softmax_backward",
          [Case(str(s), lambda r, s=s: [randn(r, *s),
                                        np_log_softmax(randn(r, *s, scale=2).astype(np.float64))
                                        .astype(f32)], grad=s[-1] < 30)
           for s in [(1, 1), (3, 7), (2, 3, 5), (5, 37), (129, 1001)]],
          reference=lambda dy, y: dy - np.exp(y) * dy.sum(-1, keepdims=True),
          rtol=1e-5, atol=1e-5, grad_wrt=(0, 1), note="second-order rules"))

LOSS_SHAPES = [(1, 3), (5, 7), (2, 3, 4)]  # test_ops_nn's loss shapes


def _sparse_logits(r, s, dtype):
    return [randn(r, *s, scale=3), labels(r, s[-1], s[:-1], dtype)]


add(Entry("sparse_softmax_cross_entropy",
          [Case(f"{s} {np.dtype(dt).name}", lambda r, s=s, dt=dt: _sparse_logits(r, s, dt))
           for s in LOSS_SHAPES for dt in (np.int32, np.int64)]
          + [Case(f"{s} int64", lambda r, s=s: _sparse_logits(r, s, np.int64), grad=False)
             for s in [(8, 17), (257, 131)]],
          reference=np_sparse_ce, rtol=1e-5, atol=1e-5, grad_wrt=(0,)))


def _soft_target(r, s):
    t = r.uniform(0, 1, s)
    return (t / t.sum(-1, keepdims=True) * 1.3).astype(f32)  # need not sum to 1


add(Entry("softmax_cross_entropy",
          [Case(str(s), lambda r, s=s: [randn(r, *s, scale=2), _soft_target(r, s)])
           for s in [(1, 2), (5, 7), (2, 3, 4)]]
          + [Case(str(s), lambda r, s=s: [randn(r, *s, scale=2), _soft_target(r, s)], grad=False)
             for s in [(8, 17), (257, 131)]],
          reference=np_soft_ce, rtol=1e-5, atol=1e-5, grad_wrt=(0, 1)))


def _probs(r, s):
    return uniform(r, 0.05, 1.0, *s)  # not normalised: Keras renormalises


add(Entry("sparse_categorical_crossentropy",
          [Case(str(s), lambda r, s=s: [_probs(r, s), labels(r, s[-1], s[:-1])],
                grad=s in LOSS_SHAPES)
           for s in LOSS_SHAPES + [(257, 131)]]
          + [Case("clipped", lambda r: [np.array([[1e-9, 0.3, 0.7], [1e-9, 1e-9, 1.0]], f32),
                                        np.array([0, 2], np.int64)], grad=False)],
          reference=lambda p, l: np_keras_probs_ce(p, onehot(l, p.shape[-1])),
          rtol=1e-5, atol=1e-5, grad_wrt=(0,)))
add(Entry("categorical_crossentropy",
          [Case(str(s), lambda r, s=s: [_probs(r, s), uniform(r, 0, 1, *s)],
                grad=s in LOSS_SHAPES)
           for s in LOSS_SHAPES + [(257, 131)]]
          + [Case("clipped", lambda r: [np.array([[1e-9, 0.3, 0.7], [1e-9, 1e-9, 1.0]], f32),
                                        np.array([[1.0, 0.5, 0.5], [0.0, 0.0, 1.0]], f32)],
                  grad=False)],
          reference=np_keras_probs_ce, rtol=1e-5, atol=1e-5, grad_wrt=(0,),
          note="gradient wrt probs only, as Keras (the target is data)"))

ACC_PRED = np.array([[0.1, 0.7, 0.2], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.0, 0.0, 0.0]], f32)


def _first_argmax(a):
    return np.argmax(a, axis=-1)  # NumPy's argmax is the first maximum


add(Entry("sparse_categorical_accuracy", [
    Case("ties", lambda r: [ACC_PRED, np.array([1, 1, 2, 0], np.int64)]),  # test_accuracies
    Case("out of range", lambda r: [ACC_PRED, np.array([1, 0, 7, -1], np.int32)]),
    Case("(3, 5, 10)", lambda r: [r.integers(0, 4, (3, 5, 10)).astype(f32),
                                  labels(r, 10, (3, 5))]),
], reference=lambda p, l: (_first_argmax(p) == l).astype(np.float64), rtol=0, atol=0,
    note="ties go to the first maximum; out-of-range labels score 0"))
add(Entry("categorical_accuracy", [
    Case("ties", lambda r: [ACC_PRED, np.array([[0.2, 0.8, 0.0], [0.0, 0.4, 0.6],
                                                [0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], f32)]),
    Case("(3, 5, 10)", lambda r: [r.integers(0, 4, (3, 5, 10)).astype(f32),
                                  r.integers(0, 4, (3, 5, 10)).astype(f32)]),
], reference=lambda p, t: (_first_argmax(p) == _first_argmax(t)).astype(np.float64),
    rtol=0, atol=0))


def _keras_probs_ce_grad(g, p, t, eps=1e-7):
    """d/dp of np_keras_probs_ce: q = p / S, L = -sum t log(clip(q)); dL/dq is
    -t/q inside (eps, 1 - eps) and 0 where clipped; dq_j/dp_i = (d_ij - q_j)/S."""
    s = p.sum(-1, keepdims=True)
    q = p / s
    a = np.where((q > eps) & (q < 1 - eps), -t / q, 0.0)
    return g[..., None] * (a - (a * q).sum(-1, keepdims=True)) / s


def _loss_bw_cases(second):
    return [Case(str(s), lambda r, s=s: [randn(r, *s[:-1]), randn(r, *s, scale=2)
                                         if second != "probs" else _probs(r, s),
                                         *_loss_target(r, s, second)], grad=False)
            for s in [(1, 3), (5, 7), (2, 3, 4), (8, 17), (257, 131)]]


def _loss_target(r, s, kind):
    if kind == "labels" or kind == "probs":
        return [labels(r, s[-1], s[:-1], np.int64)]
    return [_soft_target(r, s)]


add(Entry("sparse_softmax_cross_entropy_backward", _loss_bw_cases("labels"),
          reference=lambda g, x, l: g[..., None] * (np_softmax(x) - onehot(l, x.shape[-1])),
          rtol=1e-5, atol=1e-6))
add(Entry("softmax_cross_entropy_backward", _loss_bw_cases("soft"),
          reference=lambda g, x, t: g[..., None] * (np_softmax(x) * t.sum(-1, keepdims=True) - t),
          rtol=1e-5, atol=1e-6))
add(Entry("sparse_categorical_crossentropy_backward", _loss_bw_cases("probs"),
          reference=lambda g, p, l: _keras_probs_ce_grad(g, p, onehot(l, p.shape[-1])),
          rtol=1e-5, atol=1e-5))
add(Entry("categorical_crossentropy_backward",
          [Case(str(s), lambda r, s=s: [randn(r, *s[:-1]), _probs(r, s), uniform(r, 0, 1, *s)],
                grad=False) for s in [(1, 3), (5, 7), (2, 3, 4), (8, 17), (257, 131)]]
          + [Case("clipped", lambda r: [np.array([1.0, -2.0], f32),
                                        np.array([[1e-9, 0.3, 0.7], [1e-9, 1e-9, 1.0]], f32),
                                        np.array([[1.0, 0.5, 0.5], [0.0, 0.0, 1.0]], f32)],
                  grad=False)],
          reference=_keras_probs_ce_grad, rtol=1e-5, atol=1e-5))


# ---- batch normalization ---------------------------------------------------------------------

# test_ops_nn.BN_SHAPES (channels < 16, 16 + leftovers, two blocks + leftovers), then
# channel counts 17 and 64 at batch 1 and an odd image (forward only)
BN_LARGE = [(2, 5, 5, 17), (1, 3, 3, 64), (3, 7, 9, 15), (16, 16, 16, 16), (8, 9, 9, 35)]


def _bn_inputs(r, shape, infer=False):
    c = shape[-1]
    x = randn(r, *shape, scale=2, shift=3)
    gamma, beta = uniform(r, 0.5, 1.5, c), randn(r, c)  # test_ops_nn.bn_params
    if not infer:
        return [x, gamma, beta]
    return [x, gamma, beta, randn(r, c), uniform(r, 0.2, 2, c)]


def _bn_cases(infer=False, grad_ok=True):
    return ([Case(str(s), lambda r, s=s: _bn_inputs(r, s, infer), {"epsilon": 1e-3},
                  grad=grad_ok) for s in BN_SHAPES]
            + [Case(str(s), lambda r, s=s: _bn_inputs(r, s, infer), {"epsilon": 1e-3}, grad=False)
               for s in BN_LARGE])


def _bn_train_ref(x, gamma, beta, epsilon):
    return np_bn_train(x, gamma, beta, epsilon)


def _bn_infer_ref(x, gamma, beta, mm, mv, epsilon):
    return np_bn_infer(x, gamma, beta, mm, mv, epsilon)


add(Entry("batch_norm_train", _bn_cases(), reference=_bn_train_ref, rtol=1e-4, atol=1e-5,
          grad_wrt=(0, 1, 2), grad_rtol=5e-3, grad_atol=5e-3,
          note="gradient through y only: the batch statistics outputs have none "
               "(test_ops_nn.test_batch_norm_gradient_ignores_statistics_outputs)"))
add(Entry("batch_norm_infer", _bn_cases(infer=True), reference=_bn_infer_ref, rtol=1e-5,
          atol=1e-5, grad_wrt=(0, 1, 2),
          note="the moving statistics get no gradient (non-trainable state)"))
add(Entry("batch_norm_relu_train", _bn_cases(),
          reference=lambda *a, epsilon: (lambda y, m, v: (np.maximum(y, 0), m, v))(
              *_bn_train_ref(*a, epsilon)), rtol=1e-4, atol=1e-5,
          note="made by jit_compile from batch_norm_train + relu; callable eagerly too"))
add(Entry("batch_norm_relu_infer", _bn_cases(infer=True),
          reference=lambda *a, epsilon: np.maximum(_bn_infer_ref(*a, epsilon), 0),
          rtol=1e-5, atol=1e-5,
          note="made by jit_compile from batch_norm_infer + relu; callable eagerly too"))


def _bn_train_bw_inputs(r, shape):
    x, gamma, _ = _bn_inputs(r, shape)
    axes = tuple(range(x.ndim - 1))
    x64 = x.astype(np.float64)
    return [randn(r, *shape), x, gamma, x64.mean(axes).astype(f32), x64.var(axes).astype(f32)]


def _bn_train_bw_ref(dy, x, gamma, mean, var, epsilon):
    """Ioffe & Szegedy 2015 section 3 (test_batch_norm_large_is_deterministic_and_accurate)."""
    axes = tuple(range(x.ndim - 1))
    m = x.size // x.shape[-1]
    xhat = (x - mean) / np.sqrt(var + epsilon)
    dbeta, dgamma = dy.sum(axes), (dy * xhat).sum(axes)
    dx = gamma / np.sqrt(var + epsilon) * (dy - dbeta / m - xhat * dgamma / m)
    return dx, dgamma, dbeta


def _bn_infer_bw_ref(dy, x, gamma, mm, mv, epsilon):
    axes = tuple(range(x.ndim - 1))
    inv = 1 / np.sqrt(mv + epsilon)
    return dy * gamma * inv, (dy * (x - mm) * inv).sum(axes), dy.sum(axes)


add(Entry("batch_norm_train_backward",
          [Case(str(s), lambda r, s=s: _bn_train_bw_inputs(r, s), {"epsilon": 1e-3}, grad=False)
           for s in BN_SHAPES + BN_LARGE],
          reference=_bn_train_bw_ref, rtol=1e-4, atol=1e-4))
def _bn_add_relu_inputs(r, shape):
    return _bn_inputs(r, shape) + [randn(r, *shape, scale=2)]


def _bn_relu_bw_inputs(r, shape):
    dy, x, gamma, mean, var = _bn_train_bw_inputs(r, shape)
    return [dy, x, gamma, randn(r, shape[-1]), mean, var]


def _bn_relu_bw_ref(dy, x, gamma, beta, mean, var, epsilon):
    """The batch-norm backward of dy masked where the BN output (with these
    statistics) is not positive: relu_backward then batch_norm_train_backward."""
    y = (x - mean) / np.sqrt(var + epsilon) * gamma + beta
    return _bn_train_bw_ref(np.where(y > 0, dy, 0), x, gamma, mean, var, epsilon)


add(Entry("batch_norm_add_relu_train",
          [Case(str(s), lambda r, s=s: _bn_add_relu_inputs(r, s), {"epsilon": 1e-3}, grad=False)
           for s in BN_SHAPES + BN_LARGE],
          reference=lambda x, gamma, beta, res, epsilon: (lambda y, m, v: (
              np.maximum(y + res, 0), m, v))(*_bn_train_ref(x, gamma, beta, epsilon)),
          rtol=1e-4, atol=1e-5,
          note="made by jit_compile from batch_norm_train + add + relu (a residual block's "
               "end); bit for bit the unfused ops (test_compile)"))
add(Entry("batch_norm_relu_train_backward",
          [Case(str(s), lambda r, s=s: _bn_relu_bw_inputs(r, s), {"epsilon": 1e-3}, grad=False)
           for s in BN_SHAPES + BN_LARGE],
          reference=_bn_relu_bw_ref, rtol=1e-4, atol=1e-4,
          note="made by jit_compile from relu_backward + batch_norm_train_backward; bit for "
               "bit the unfused ops (test_compile)"))
add(Entry("batch_norm_infer_backward",
          [Case(str(s), lambda r, s=s: [randn(r, *s)] + [_bn_inputs(r, s, True)[i]
                                                         for i in (0, 1, 3, 4)],
                {"epsilon": 1e-3}, grad=False) for s in BN_SHAPES + BN_LARGE],
          reference=_bn_infer_bw_ref, rtol=1e-5, atol=1e-4))


# ---- matmul, convolutions, pooling -------------------------------------------------------

def _matmul_case(m, k, n, ta, tb, grad=True):
    def make(r):
        a, b = randn(r, m, k), randn(r, k, n)
        return [a.T.copy() if ta else a, b.T.copy() if tb else b]
    return Case(f"({m}, {k})@({k}, {n}) ta={ta} tb={tb}", make,
                {"transpose_a": ta, "transpose_b": tb}, grad=grad)


MATMUL_CASES = ([_matmul_case(3, 4, 5, ta, tb) for ta in (False, True) for tb in (False, True)]
                + [_matmul_case(17, 33, 15, False, True, grad=False),
                   _matmul_case(1, 64, 17, True, False, grad=False),
                   _matmul_case(2, 0, 3, False, False, grad=False)])
add(Entry("matmul", MATMUL_CASES + [as_bf16(c) for c in MATMUL_CASES],
          reference=lambda a, b, transpose_a, transpose_b:
          (a.T if transpose_a else a) @ (b.T if transpose_b else b),
          rtol=1e-5, atol=1e-5, grad_wrt=(0, 1), note="includes an empty inner dimension"))


def st2(strides):
    s = [strides] if np.isscalar(strides) else list(strides)
    return tuple(s * 2 if len(s) == 1 else s)


# (label, x shape, kernel (KH, KW, C, O), strides, same, grad): test_ops_conv.CONV_CASES's
# geometries at the awkward channel counts 3, 15, 16, 17, 64, batch 1, odd sizes
CONV_SHAPES = [
    ("3x3 s1 same c3 o4 batch1 odd", (1, 5, 7, 3), (3, 3, 3, 4), [1], True, True),
    ("3x3 s2 same c2 o3", (1, 5, 7, 2), (3, 3, 2, 3), [2], True, True),
    ("1x1 s2 valid c3 o2", (2, 5, 7, 3), (1, 1, 3, 2), [2], False, True),
    ("2x3 s(1,2) same c2 o2", (1, 4, 7, 2), (2, 3, 2, 2), [1, 2], True, True),
    ("3x1 s(2,1) valid c2 o3", (2, 5, 4, 2), (3, 1, 2, 3), [2, 1], False, True),
    ("4x4 s3 same c2 o2", (1, 7, 5, 2), (4, 4, 2, 2), [3], True, True),
    ("3x3 s2 same c16 o3 small", (1, 3, 4, 16), (3, 3, 16, 3), [2], True, True),
    ("2x2 s1 valid c17 o2 small", (1, 3, 3, 17), (2, 2, 17, 2), [1], False, True),
    ("3x3 s2 same c15 o17 odd", (2, 9, 9, 15), (3, 3, 15, 17), [2], True, False),
    ("3x3 s1 same c16 o16", (1, 8, 8, 16), (3, 3, 16, 16), [1], True, False),
    ("3x3 s2 valid c17 o15", (1, 7, 7, 17), (3, 3, 17, 15), [2], False, False),
    ("3x3 s1 same c64 o64", (1, 9, 9, 64), (3, 3, 64, 64), [1], True, False),
    ("1x1 s2 same c64 o17 projection", (1, 7, 7, 64), (1, 1, 64, 17), [2], True, False),
    ("7x7 s2 same c3 o16 stem", (2, 11, 13, 3), (7, 7, 3, 16), [2], True, False),
    ("5x5 s2 same c15 o3", (1, 9, 8, 15), (5, 5, 15, 3), [2], True, False),
    ("2x2 s2 same c16 o17 odd", (3, 5, 5, 16), (2, 2, 16, 17), [2], True, False),
    ("3x3 s1 same c1 o33 width 37", (1, 3, 37, 1), (3, 3, 1, 33), [1], True, False),
    ("3x3 s2 same c33 o1 width 19", (2, 6, 19, 33), (3, 3, 33, 1), [2], True, False),
    ("1x3 s1 valid c8 o16 width 3", (1, 1, 3, 8), (1, 3, 8, 16), [1], False, False),
    ("3x3 s1 same c16 o32 1x1 image", (3, 1, 1, 16), (3, 3, 16, 32), [1], True, False),
    ("5x5 s1 same c17 o48 width 23", (1, 6, 23, 17), (5, 5, 17, 48), [1], True, False),
    ("3x3 s2 same c64 o64 16x16", (2, 16, 16, 64), (3, 3, 64, 64), [2], True, False),
    ("3x3 s1 same c32 o32 batch 4 width 29", (4, 12, 29, 32), (3, 3, 32, 32), [1], True, False),
    ("9x9 s1 same c3 o4 (window > 7)", (1, 10, 10, 3), (9, 9, 3, 4), [1], True, False),
    ("3x3 s5 valid c16 o8 (stride > 4)", (1, 13, 13, 16), (3, 3, 16, 8), [5], False, False),
    # avx512_direct_bf16's patches (odd C, KH*KW*C <= 32 values a window): 28 values in 4
    # blocks of outputs, 25 values at strides (1, 2), the stem's 27 at stride 2 with tiles of
    # 11 pixels and an odd pixel count (a last pair of one pixel)
    ("2x2 s1 same c7 o64 (28 values a window)", (2, 5, 6, 7), (2, 2, 7, 64), [1], True, False),
    ("5x5 s(1,2) valid c1 o20 (25 values)", (2, 9, 12, 1), (5, 5, 1, 20), [1, 2], False, False),
    ("3x3 s2 same c3 o17 width 65", (2, 5, 65, 3), (3, 3, 3, 17), [2], True, False),
    # avx2_pointwise (1x1 at stride 1, a GEMM over the pixels): tiles of 1-8 rows, a partial
    # last block of 8 columns and a last panel of one column (49 = 24 + 24 + 1), 17 input
    # channels (filter-gradient tiles of 4 rows and a last one of 1), and 4096 pixels (two
    # blocks of pixels in the filter gradient)
    ("1x1 s1 same c3 o2 pointwise", (2, 5, 7, 3), (1, 1, 3, 2), [1], True, True),
    ("1x1 s1 valid c17 o49 pointwise panels", (3, 5, 4, 17), (1, 1, 17, 49), [1], False, False),
    ("1x1 s1 same c33 o13 pointwise", (1, 7, 9, 33), (1, 1, 33, 13), [1], True, False),
    ("1x1 s1 same c8 o8 pointwise 4096 pixels", (4, 32, 32, 8), (1, 1, 8, 8), [1], True, False),
]


# grouped convolutions (label, x shape, kernel (KH, KW, C / groups, O), strides, same, grad,
# groups): ResNeXt/RegNet groups and depthwise (groups = C), awkward sizes
GROUPED_SHAPES = [
    ("3x3 s1 same c4 o6 groups 2", (1, 5, 4, 4), (3, 3, 2, 6), [1], True, True, 2),
    ("3x3 s2 same c6 o3 groups 3", (2, 5, 5, 6), (3, 3, 2, 3), [2], True, True, 3),
    ("depthwise 3x3 s1 same c3 o3", (1, 4, 5, 3), (3, 3, 1, 3), [1], True, True, 3),
    ("depthwise x2 3x3 s2 valid c2 o4", (1, 5, 6, 2), (3, 3, 1, 4), [2], False, True, 2),
    ("1x1 c8 o8 groups 4", (2, 3, 3, 8), (1, 1, 2, 8), [1], False, True, 4),
    ("3x3 s2 same c48 o48 groups 6 (RegNet)", (2, 9, 9, 48), (3, 3, 8, 48), [2], True, False, 6),
    ("depthwise 5x5 c17 o17", (1, 7, 6, 17), (5, 5, 1, 17), [1], True, False, 17),
    # the group widths of RegNet-200MF/400MF (8, 16, 24) at stride 1 and 2, images of a
    # few pixels (a tile spans images), a group width past a block of 8, depthwise with
    # a partial block of channels
    ("3x3 s1 same c24 o24 groups 3 (gw 8)", (3, 3, 2, 24), (3, 3, 8, 24), [1], True, False, 3),
    ("3x3 s2 same c32 o32 groups 2 (gw 16)", (2, 7, 6, 32), (3, 3, 16, 32), [2], True, False, 2),
    ("3x3 s2 same c48 o48 groups 2 (gw 24)", (5, 4, 4, 48), (3, 3, 24, 48), [2], True, False, 2),
    ("3x3 s1 valid c20 o30 groups 2 (gw 10 -> 15)", (2, 6, 5, 20), (3, 3, 10, 30), [1], False,
     False, 2),
    ("depthwise 3x3 s2 same c20", (3, 7, 8, 20), (3, 3, 1, 20), [2], True, False, 20),
    ("1x1 s2 valid c8 o8 groups 2 (input-gradient phases without taps)", (2, 5, 4, 8),
     (1, 1, 4, 8), [2], False, False, 2),
    ("3x3 s1 same c16 o16 groups 8 (gw 2, 180 pixels)", (2, 9, 10, 16), (3, 3, 2, 16), [1], True,
     False, 8),
    # avx512_grouped's pair tiles: 10 channel pairs (past a tile's 8), 5 blocks of 8 output
    # channels (tiles of 2, 2, 1), a group width not a multiple of 8, 84 pixels a chunk
    ("3x3 s1 same c40 o80 groups 2 (gw 20 -> 40)", (2, 6, 7, 40), (3, 3, 20, 80), [1], True,
     False, 2),
    # avx512_grouped_dp_bf16's bfloat16 tiles (4 channels a step): a group width of 12 (steps
    # of 4, a partial block of 8) at stride 2; 8 -> 20 (two blocks, a partial one) over 25
    # pixels (a tile of 11 rows twice and one row); 4 -> 4 (one step, half a block)
    ("3x3 s2 same c24 o24 groups 2 (gw 12)", (3, 7, 7, 24), (3, 3, 12, 24), [2], True, False,
     2),
    ("3x3 s1 same c16 o40 groups 2 (gw 8 -> 20, 25 pixels)", (1, 5, 5, 16), (3, 3, 8, 40), [1],
     True, False, 2),
    ("3x3 s1 valid c12 o12 groups 3 (gw 4)", (2, 6, 7, 12), (3, 3, 4, 12), [1], False, False,
     3),
]


def _per_group(fn, a, b, groups, a_axis_in, b_axis_in):
    """fn on each group's slices of a and b (channel axis 3), joined on axis 3."""
    ca, cb = a.shape[3] // groups, b.shape[3] // groups
    return np.concatenate([fn(a[..., i * ca:(i + 1) * ca], b[..., i * cb:(i + 1) * cb])
                           for i in range(groups)], 3)


def _grouped_conv_ref(x, k, strides, same, groups=1):
    return _per_group(lambda a, b: conv_ref(a, b, st2(strides), same), x, k, groups, 3, 3)


def _grouped_bpi_ref(dy, k, strides, same, shape, groups=1):
    cg = shape[3] // groups
    return _per_group(lambda a, b: conv_bpi_ref(a, b, tuple(shape[:3]) + (cg,), st2(strides),
                                                same), dy, k, groups, 3, 3)


def _grouped_bpf_ref(x, dy, strides, same, shape, groups=1):
    return _per_group(lambda a, b: conv_bpf_ref(a, b, tuple(shape[:3]) + (b.shape[3],),
                                                st2(strides), same), x, dy, groups, 3, 3)


def _conv_out(x_shape, k_shape, strides, same):
    return conv_ref(np.zeros((1,) + tuple(x_shape[1:3]) + (1,)), np.zeros(k_shape[:2] + (1, 1)),
                    st2(strides), same).shape[1:3]


def _conv_cases(kind):
    cases = []
    for label, xs, ks, strides, same, grad, *groups in CONV_SHAPES + GROUPED_SHAPES:
        ys = (xs[0],) + _conv_out(xs, ks, strides, same) + (ks[3],)
        attrs = {"strides": strides, "same": same}
        if groups:
            attrs["groups"] = groups[0]
        if kind == "fw":
            make = lambda r, xs=xs, ks=ks: [randn(r, *xs), randn(r, *ks)]
        elif kind == "bpi":
            make, attrs = (lambda r, ys=ys, ks=ks: [randn(r, *ys), randn(r, *ks)]), \
                {**attrs, "shape": list(xs)}
        else:
            make, attrs = (lambda r, xs=xs, ys=ys: [randn(r, *xs), randn(r, *ys)]), \
                {**attrs, "shape": list(ks)}
        cases.append(Case(label, make, attrs, grad=grad))
    return cases


# the bfloat16 cases: the shapes of ResNet-20 and the awkward ones around them, and
# grouped ones (RegNet's group width 8, a partial block, depthwise, a gradient case)
CONV_BF16 = ("3x3 s1 same c3 o4 batch1 odd", "3x3 s2 same c15 o17 odd", "3x3 s1 same c16 o16",
             "3x3 s1 same c64 o64", "1x1 s2 same c64 o17 projection", "3x3 s2 same c64 o64 16x16",
             "3x3 s1 same c32 o32 batch 4 width 29", "5x5 s1 same c17 o48 width 23",
             "3x3 s1 same c16 o32 1x1 image", "3x3 s5 valid c16 o8 (stride > 4)",
             "2x3 s(1,2) same c2 o2", "3x3 s1 same c24 o24 groups 3 (gw 8)",
             "3x3 s2 same c48 o48 groups 2 (gw 24)", "3x3 s1 valid c20 o30 groups 2 (gw 10 -> 15)",
             "3x3 s2 same c32 o32 groups 2 (gw 16)", "3x3 s1 same c40 o80 groups 2 (gw 20 -> 40)",
             "depthwise 3x3 s2 same c20", "3x3 s1 same c4 o6 groups 2",
             "3x3 s2 same c24 o24 groups 2 (gw 12)",
             "3x3 s1 same c16 o40 groups 2 (gw 8 -> 20, 25 pixels)",
             "3x3 s1 valid c12 o12 groups 3 (gw 4)", "3x3 s1 same c1 o33 width 37",
             "2x2 s1 same c7 o64 (28 values a window)", "5x5 s(1,2) valid c1 o20 (25 values)",
             "3x3 s2 same c3 o17 width 65")


def _conv_cases_all(kind):
    """The float32 cases, then bfloat16 ones: conv2d and its input gradient
    return bfloat16 for two bfloat16 operands, the filter gradient float32."""
    f32_cases = _conv_cases(kind)
    return f32_cases + [as_bf16(c, bf16_out=kind != "bpf") for c in f32_cases
                        if c.label in CONV_BF16]


add(Entry("conv2d", _conv_cases_all("fw"), reference=_grouped_conv_ref,
          rtol=1e-4, atol=1e-4, grad_wrt=(0, 1), note="groups: NumPy convs per group, joined"))
add(Entry("conv2d_backprop_input", _conv_cases_all("bpi"), reference=_grouped_bpi_ref,
          rtol=1e-4, atol=1e-4, grad_wrt=(0, 1), note="differentiable: second-order gradients"))
add(Entry("conv2d_backprop_filter", _conv_cases_all("bpf"), reference=_grouped_bpf_ref,
          rtol=1e-4, atol=2e-4, grad_wrt=(0, 1), note="differentiable: second-order gradients"))

# test_ops_conv.POOL_CASES (pool, strides, same, x shape), then batch 1 at 16/17/64 channels
POOL_SHAPES = [(2, None, False, (1, 5, 7, 3)), (2, None, True, (2, 5, 7, 3)),
               (3, 2, True, (1, 5, 7, 2)), (3, 1, False, (1, 5, 6, 2)),
               ((2, 3), (1, 2), True, (1, 4, 7, 2)), (3, 3, True, (1, 7, 5, 70)),
               (3, 2, True, (1, 9, 9, 17)), (2, 2, False, (1, 8, 8, 16)),
               (3, 2, False, (2, 7, 7, 64))]


def _pool_attrs(pool, strides, same):
    a = {"pool_size": [int(v) for v in np.atleast_1d(pool)], "same": same}
    if strides is not None:
        a["strides"] = [int(v) for v in np.atleast_1d(strides)]
    return a


def _pool_args(attrs):
    pool = st2(attrs["pool_size"])
    return pool, st2(attrs.get("strides", pool)), attrs["same"]


def _pool_out(x_shape, attrs):
    pool, strides, same = _pool_args(attrs)
    return pool_ref(np.zeros((1,) + tuple(x_shape[1:3]) + (1,)), pool, strides, same,
                    "avg").shape[1:3]


def _pool_cases(make):
    return [Case(f"pool {p} strides {s} {'same' if same else 'valid'} {xs}",
                 lambda r, xs=xs, a=_pool_attrs(p, s, same): make(r, xs, a),
                 _pool_attrs(p, s, same), grad=xs[-1] <= 3) for p, s, same, xs in POOL_SHAPES]


def avg_pool_grad_ref(dy, pool, strides, same, x_shape):
    """The adjoint of pool_ref(..., "avg"): dy / count scattered to each tap."""
    _, _, pads, taps = _taps(x_shape, pool, strides, same)
    count = sum(np.pad(np.ones(x_shape), pads)[sl] for _, _, sl in taps)
    dxp = np.zeros([n + a + b for n, (a, b) in zip(x_shape, pads)])
    for _, _, sl in taps:
        dxp[sl] += dy / count
    (_, _), (pt, _), (pl, _), _ = pads
    return dxp[:, pt:pt + x_shape[1], pl:pl + x_shape[2], :]


_max_pool_cases = _pool_cases(lambda r, xs, a: [distinct(r, xs)])
add(Entry("max_pool2d", _max_pool_cases + [as_bf16(c, bf16_out=True) for c in _max_pool_cases],
          reference=lambda x, **a: pool_ref(x, *_pool_args(a), "max"), rtol=0, atol=0,
          grad_wrt=(0,), note="distinct values 0.01 apart: no ties"))
add(Entry("avg_pool2d", _pool_cases(lambda r, xs, a: [distinct(r, xs)]),
          reference=lambda x, **a: pool_ref(x, *_pool_args(a), "avg"), rtol=1e-6, atol=1e-6,
          grad_wrt=(0,), note="padding not counted (TensorFlow/Keras)"))


def _ties(r):
    x = np.zeros((1, 5, 5, 2), f32)
    x[0, 1, 1, 1] = x[0, 2, 2, 1] = 1.0  # test_max_pool_ties_go_to_first_maximum
    return [x, randn(r, 1, 3, 3, 2)]


_max_pool_bw_cases = (
    [Case(c.label, lambda r, c=c, xs=xs: [distinct(r, xs), randn(r, xs[0], *_pool_out(xs, c.attrs),
                                                                 xs[3])],
          c.attrs, grad=False)
     for c, (_, _, _, xs) in zip(_pool_cases(lambda r, xs, a: []), POOL_SHAPES)]
    + [Case("ties", _ties, {"pool_size": [3], "strides": [2], "same": True}, grad=False)])
add(Entry("max_pool2d_backward",
          _max_pool_bw_cases + [as_bf16(c, bf16_out=True) for c in _max_pool_bw_cases],
          reference=lambda x, dy, **a: max_pool_grad_ref(x, dy, *_pool_args(a)),
          rtol=1e-6, atol=1e-6, note="dy routed to the first maximum of each window; "
          "overlapping windows add their dy in float32"))
add(Entry("avg_pool2d_backward",
          [Case(c.label, lambda r, c=c, xs=xs: [randn(r, xs[0], *_pool_out(xs, c.attrs), xs[3])],
                {**c.attrs, "shape": list(xs)}, grad=c.grad)
           for c, (_, _, _, xs) in zip(_pool_cases(lambda r, xs, a: []), POOL_SHAPES)],
          reference=lambda dy, shape, **a: avg_pool_grad_ref(dy, *_pool_args(a), tuple(shape)),
          rtol=1e-6, atol=1e-6, grad_wrt=(0,), note="linear: its gradient is avg_pool2d"))
add(Entry("global_average_pool",
          [Case("(2, 3, 5, 4)", lambda r: [randn(r, 2, 3, 5, 4)]),
           Case("batch 1 (1, 1, 1, 3)", lambda r: [randn(r, 1, 1, 1, 3)]),
           Case("(1, 7, 7, 17)", lambda r: [randn(r, 1, 7, 7, 17)], grad=False),
           Case("(3, 4, 4, 64)", lambda r: [randn(r, 3, 4, 4, 64)], grad=False)],
          reference=lambda x: x.mean(axis=(1, 2)), rtol=1e-6, atol=1e-6, grad_wrt=(0,)))
add(Entry("global_average_pool_backward",
          [Case(str(xs), lambda r, xs=xs: [randn(r, xs[0], xs[3])], {"shape": list(xs)},
                grad=xs[3] <= 4)
           for xs in [(2, 3, 5, 4), (1, 1, 1, 3), (1, 7, 7, 17), (3, 4, 4, 64)]],
          reference=lambda dy, shape: np.broadcast_to(dy[:, None, None, :] / (shape[1] * shape[2]),
                                                      tuple(shape)),
          rtol=1e-6, atol=1e-7, grad_wrt=(0,)))


# ---- state updates -------------------------------------------------------------------------
# reference: the new values of the mutated inputs (the update itself)

def _assign_cases(dtype):
    def vals(r, *s):
        return randn(r, *s) if dtype == f32 else r.integers(-50, 50, s).astype(dtype)
    d = np.dtype(dtype).name
    return [Case(f"{d} same shape", lambda r: [vals(r, 2, 3), vals(r, 2, 3)], grad=False),
            Case(f"{d} row broadcast", lambda r: [vals(r, 2, 3), vals(r, 3)], grad=False),
            Case(f"{d} column broadcast", lambda r: [vals(r, 4, 1, 5), vals(r, 4, 1, 1)],
                 grad=False),
            Case(f"{d} scalar", lambda r: [vals(r), vals(r)], grad=False),
            Case(f"{d} (17, 33)", lambda r: [vals(r, 17, 33), vals(r, 33)], grad=False)]


add(Entry("assign", _assign_cases(f32) + [Case("int32", lambda r: [np.arange(6, dtype=np.int32),
                                                                   np.int32(7)], grad=False)],
          reference=lambda v, x: (np.broadcast_to(x, v.shape).astype(v.dtype),),
          rtol=0, atol=0, kind="state"))
add(Entry("assign_add", _assign_cases(np.int32) + _assign_cases(f32)[:2],
          reference=lambda v, x: ((v + x).astype(v.dtype),), rtol=1e-7, atol=1e-7, kind="state",
          note="int32 counters and float32 weights"))
add(Entry("assign_sub", _assign_cases(np.int64) + _assign_cases(f32)[:2],
          reference=lambda v, x: ((v - x).astype(v.dtype),), rtol=1e-7, atol=1e-7, kind="state"))
add(Entry("moving_average_update",
          [Case(str(s), lambda r, s=s: [randn(r, *s), randn(r, *s)], {"momentum": m}, grad=False)
           for s, m in [((5,), 0.99), ((64,), 0.9), ((17,), 0.0), ((), 0.5), ((40001,), 0.99)]],
          reference=lambda v, x, momentum: (v * momentum + x * (1 - momentum),),
          rtol=1e-6, atol=1e-6, kind="state", note="Keras BatchNormalization's formula"))



# ---- collectives (MPI) ---------------------------------------------------------------------
# In the test process MPI is a world of one rank (mpi4py's singleton init), so
# the sum and the mean over the ranks are the input itself; the two-rank
# values are checked by tests/test_distribute.py on real ranks.

def _one_rank(make):
    def made(r):
        import pyresnet.distribute
        pyresnet.distribute.init()
        return make(r)
    return made


def _allreduce_cases():
    return [Case(f"{s} average={a}", _one_rank(lambda r, s=s: [randn(r, *s)]), {"average": a})
            for s, a in [((5,), False), ((3, 4), True), ((), False), ((2, 3, 4, 5), True),
                         ((17, 33), False)]]


add(Entry("allreduce", _allreduce_cases(), reference=lambda x, average: (x,), rtol=0, atol=0,
          grad_wrt=(0,), note="one rank: the sum and the mean are x"))
add(Entry("allreduce_inplace", _allreduce_cases(), reference=lambda v, average: (v,),
          rtol=0, atol=0, kind="state"))


def _flat_assign_ref(var, value, offset):
    out = var.copy().ravel()
    out[offset:offset + value.size] = value.ravel()
    return (out.reshape(var.shape),)


add(Entry("flat_assign",
          [Case(f"{sv} <- {s} at {o}", lambda r, sv=sv, s=s: [randn(r, *sv), randn(r, *s)],
                {"offset": o}, grad=False)
           for sv, s, o in [((10,), (3,), 0), ((10,), (2, 2), 6), ((3, 3, 2), (3, 2), 12),
                            ((5,), (), 4), ((4,), (0,), 4), ((2400,), (3, 3, 16, 16), 0)]],
          reference=_flat_assign_ref, rtol=0, atol=0, kind="state",
          note="packs a gradient into a bucket"))
add(Entry("flat_slice",
          [Case(f"{sx} -> {s} at {o}", lambda r, sx=sx: [randn(r, *sx)], {"offset": o, "shape": s})
           for sx, s, o in [((10,), (3,), 0), ((10,), (2, 2), 6), ((3, 3, 2), (3, 2), 12),
                            ((5,), (), 4), ((4,), (0,), 4), ((2400,), (3, 3, 16, 16), 96)]],
          reference=lambda x, offset, shape: (
              x.ravel()[offset:offset + int(np.prod(shape))].reshape(shape),),
          rtol=0, atol=0, note="unpacks a gradient from a bucket"))

def _sgd_ref(w, g, lr, weight_decay=0.0):
    """Keras 3 SGD without momentum and the base optimizer's weight decay
    (keras_replays.keras_sgd, one step in float64)."""
    w = w - w * weight_decay * lr
    return (w - g * lr,)


def _sgd_momentum_ref(w, g, m, lr, momentum, nesterov=False, weight_decay=0.0):
    w = w - w * weight_decay * lr
    m = m * momentum - g * lr
    w = w + (m * momentum - g * lr if nesterov else m)
    return w, m


add(Entry("sgd_update",
          [Case(f"{s} wd={wd}", lambda r, s=s: [randn(r, *s), randn(r, *s), f32(0.1)],
                {"weight_decay": wd}, grad=False)
           for s, wd in [((3, 5), 0.0), ((3, 3, 16, 17), 5e-4), ((), 1e-2),
                         ((3, 3, 64, 64), 1e-4)]],
          reference=_sgd_ref, rtol=1e-6, atol=1e-7, kind="state",
          note="the learning rate is a tensor input (a schedule)"))
add(Entry("sgd_momentum_update",
          [Case(f"{s} momentum={m} nesterov={n} wd={wd}",
                lambda r, s=s: [randn(r, *s), randn(r, *s), randn(r, *s, scale=0.1), f32(0.05)],
                {"momentum": m, "nesterov": n, "weight_decay": wd}, grad=False)
           for s, m, n, wd in [((3, 5), 0.9, False, 0.0), ((3, 5), 0.9, True, 0.0),
                               ((7, 17), 0.9, False, 1e-2), ((64,), 0.5, True, 1e-3),
                               ((3, 3, 64, 64), 0.9, True, 1e-4)]],
          reference=_sgd_momentum_ref, rtol=1e-6, atol=1e-7, kind="state",
          note="updates the variable and the velocity"))



def _ema_ref(w, avg, momentum, iterations, period=1, overwrite_frequency=0,
             first_step_copy=False):
    """ops.ema_update in float64: Keras 3's EMA (period 1) / Lookahead's sync."""
    t = int(iterations) + 1
    if t % period:
        return w, avg
    m = 0.0 if first_step_copy and t == 1 else float(momentum)
    avg = m * avg + (1 - m) * w
    return (avg.copy() if overwrite_frequency and t % overwrite_frequency == 0 else w), avg


add(Entry("ema_update",
          [Case(f"{s} step={it} period={k} overwrite={ow} first={fc}",
                lambda r, s=s, it=it: [randn(r, *s), randn(r, *s), f32(0.8), np.int64(it)],
                {"period": k, "overwrite_frequency": ow, "first_step_copy": fc}, grad=False)
           for s, it, k, ow, fc in [((3, 5), 0, 1, 0, True), ((3, 5), 0, 1, 0, False),
                                    ((7, 17), 2, 1, 3, True), ((64,), 4, 5, 5, False),
                                    ((64,), 3, 5, 5, False), ((3, 3, 64, 64), 9, 5, 5, False)]],
          reference=_ema_ref, rtol=1e-6, atol=1e-6, kind="state",
          note="updates the variable (on overwrite) and the average; t = iterations + 1"))


def _adam_ref(w, g, m, v, vhat, lr, iterations, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
              weight_decay=0.0):
    """Keras 3 Adam/AdamW, one step in float64 (test_optimizers.keras_adam)."""
    t = float(iterations) + 1
    w = w - w * weight_decay * lr
    alpha = lr * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
    m = m + (g - m) * (1 - beta_1)
    v = v + (g * g - v) * (1 - beta_2)
    if vhat.size:
        vhat = np.maximum(vhat, v)
    return w - m * alpha / (np.sqrt(vhat if vhat.size else v) + epsilon), m, v, vhat


def _rmsprop_ref(w, g, vel, mom, avg, lr, rho=0.9, momentum=0.0, epsilon=1e-7,
                 weight_decay=0.0):
    """Keras 3 RMSprop, one step in float64 (test_optimizers.keras_rmsprop)."""
    w = w - w * weight_decay * lr
    vel = rho * vel + (1 - rho) * g * g
    if avg.size:
        avg = rho * avg + (1 - rho) * g
    inc = lr * g / np.sqrt(vel - (avg * avg if avg.size else 0) + epsilon)
    if mom.size:
        mom = momentum * mom + inc
    return w - (mom if mom.size else inc), vel, mom, avg


_EMPTY = np.zeros(0, f32)
add(Entry("adam_update",
          [Case(f"{s} step={it} amsgrad={ams} wd={wd}",
                lambda r, s=s, it=it, ams=ams: [
                    randn(r, *s), randn(r, *s), randn(r, *s, scale=0.1),
                    uniform(r, 0.01, 0.1, *s), uniform(r, 0.05, 0.2, *s) if ams else _EMPTY,
                    f32(0.01), np.int64(it)],
                {"weight_decay": wd, "beta_1": b1}, grad=False)
           for s, it, ams, wd, b1 in [((3, 5), 0, False, 0.0, 0.9), ((7, 17), 4, True, 0.0, 0.9),
                                      ((64,), 9, False, 4e-3, 0.8), ((), 1, True, 1e-2, 0.9),
                                      ((3, 3, 64, 64), 2, False, 5e-5, 0.9)]],
          reference=_adam_ref, rtol=1e-6, atol=1e-6, kind="state",
          note="iterations + 1 is Adam's t; velocity_hat of shape (0,) without amsgrad"))
add(Entry("rmsprop_update",
          [Case(f"{s} momentum={mo} centered={c} wd={wd}",
                lambda r, s=s, mo=mo, c=c: [
                    randn(r, *s), randn(r, *s), uniform(r, 0.5, 1.0, *s),
                    randn(r, *s, scale=0.01) if mo else _EMPTY,
                    randn(r, *s, scale=0.1) if c else _EMPTY, f32(0.01)],
                {"momentum": mo, "weight_decay": wd}, grad=False)
           for s, mo, c, wd in [((3, 5), 0.0, False, 0.0), ((7, 17), 0.9, False, 0.0),
                                ((64,), 0.0, True, 1e-3), ((), 0.5, True, 0.0),
                                ((3, 3, 64, 64), 0.9, True, 1e-4)]],
          reference=_rmsprop_ref, rtol=1e-6, atol=1e-6, kind="state",
          note="momentum and average_gradient of shape (0,) when unused"))


def _cosine_ref(step, initial_learning_rate, decay_steps, alpha=0.0, warmup=False,
                warmup_target=0.0, warmup_steps=0.0, linear=False):
    """Keras CosineDecay (test_optimizers.keras_cosine_decay) in float64."""
    s = float(step)

    def anneal(s, frm):
        frac = s / decay_steps
        c = 1 - frac if linear else 0.5 * (1 + np.cos(np.pi * frac))
        return frm * ((1 - alpha) * c + alpha)
    if not warmup:
        return np.float64(anneal(min(s, decay_steps), initial_learning_rate))
    s = min(s, decay_steps + warmup_steps)
    if s < warmup_steps:
        return np.float64((warmup_target - initial_learning_rate) * s / warmup_steps
                          + initial_learning_rate)
    return np.float64(anneal(s - warmup_steps, warmup_target))


def _step_cases(attrs_list):
    return [Case(f"step={st} {a}", lambda r, st=st: [st], a, grad=False) for st, a in attrs_list]


add(Entry("cosine_decay_schedule",
          _step_cases([(np.int64(0), {"initial_learning_rate": 0.1, "decay_steps": 100}),
                       (np.int64(37), {"initial_learning_rate": 0.1, "decay_steps": 100,
                                       "alpha": 0.1}),
                       (np.int64(250), {"initial_learning_rate": 0.1, "decay_steps": 100}),
                       (np.int32(7), {"initial_learning_rate": 0.0, "decay_steps": 90,
                                      "warmup": True, "warmup_target": 0.2,
                                      "warmup_steps": 10}),
                       (f32(55.0), {"initial_learning_rate": 0.0, "decay_steps": 90,
                                    "warmup": True, "warmup_target": 0.2, "warmup_steps": 10}),
                       (np.int64(40), {"initial_learning_rate": 0.01, "decay_steps": 90,
                                       "warmup": True, "warmup_target": 0.2,
                                       "warmup_steps": 10, "linear": True})]),
          reference=_cosine_ref, rtol=1e-6, atol=1e-8,
          note="float32 as Keras; linear=True is the one-cycle's linear decay"))
add(Entry("exponential_decay_schedule",
          _step_cases([(np.int64(0), {"initial_learning_rate": 0.1, "decay_steps": 10,
                                      "decay_rate": 0.5}),
                       (np.int64(25), {"initial_learning_rate": 0.1, "decay_steps": 10,
                                       "decay_rate": 0.5}),
                       (np.int32(25), {"initial_learning_rate": 0.1, "decay_steps": 10,
                                       "decay_rate": 0.5, "staircase": True}),
                       (f32(3.5), {"initial_learning_rate": 2.0, "decay_steps": 1,
                                   "decay_rate": 0.96})]),
          reference=lambda step, initial_learning_rate, decay_steps, decay_rate, staircase=False:
          np.float64(initial_learning_rate * decay_rate ** (
              np.floor(float(step) / decay_steps) if staircase else float(step) / decay_steps)),
          rtol=1e-6, atol=1e-8))


def _piecewise_ref(step, boundaries, values):
    """Keras PiecewiseConstantDecay: values[i] for b[i-1] < step <= b[i]."""
    return np.float64(values[np.searchsorted(np.asarray(boundaries, np.float64), float(step),
                                             side="left")])


add(Entry("piecewise_constant_schedule",
          [Case(f"step={st} {np.asarray(b).dtype}", lambda r, st=st, b=b, v=v: [
              st, np.asarray(b), np.asarray(v, f32)], grad=False)
           for st, b, v in [(np.int64(0), np.array([10, 20], np.int64), [0.1, 0.01, 0.001]),
                            (np.int64(10), np.array([10, 20], np.int64), [0.1, 0.01, 0.001]),
                            (np.int64(11), np.array([10, 20], np.int64), [0.1, 0.01, 0.001]),
                            (np.int64(99), np.array([10, 20], np.int64), [0.1, 0.01, 0.001]),
                            (np.int32(5), np.array([], np.int32), [0.5]),
                            (f32(2.5), np.array([2.5, 3.0], f32), [1.0, 2.0, 3.0])]],
          reference=_piecewise_ref, rtol=0, atol=0,
          note="step <= boundary selects the earlier value (Keras)"))

# ---- augmentation: deterministic ones -----------------------------------------------------

add(Entry("center_crop",
          [Case(f"{np.dtype(dt).name} {xs}->{sz}", lambda r, xs=xs, dt=dt: [image(r, xs, dt)],
                {"size": sz}, grad=False)
           for xs, sz, dt in [((2, 7, 8, 3), [4, 5], f32), ((2, 7, 8, 3), [7, 8], np.uint8),
                              ((1, 9, 9, 1), [1, 1], np.uint8), ((3, 6, 5, 2), [3, 4], f32),
                              ((16, 40, 40, 3), [32, 32], np.uint8)]],
          reference=lambda x, size: x[:, (x.shape[1] - size[0]) // 2:][:, :size[0],
                                      (x.shape[2] - size[1]) // 2:][:, :, :size[1]],
          rtol=0, atol=0))
add(Entry("resize_bilinear",
          [Case(f"{np.dtype(dt).name} {xs}->{sz}", lambda r, xs=xs, dt=dt: [image(r, xs, dt)],
                {"size": sz}, grad=False)
           for xs, sz, dt in [((2, 5, 7, 3), [8, 4], np.uint8), ((2, 5, 7, 3), [5, 7], np.uint8),
                              ((1, 4, 5, 1), [9, 3], f32), ((2, 13, 9, 2), [7, 11], f32),
                              ((16, 32, 32, 3), [40, 24], np.uint8)]],
          reference=lambda x, size: resize_reference(x, [(0, 0, x.shape[1], x.shape[2])]
                                                     * len(x), *size).astype(np.float64),
          rtol=0, atol=0, note="test_augment.resize_reference does the kernel's float32 math"))
add(Entry("normalize_channels",
          [Case(f"{np.dtype(dt).name}", lambda r, dt=dt: [
              image(r, (3, 4, 5, 3), dt), np.array([0.4914, 0.4822, 0.4465], f32) * 255,
              (np.array([0.2470, 0.2435, 0.2616], f32) * 255) ** 2], {"epsilon": 1e-7}, grad=False)
           for dt in (np.uint8, f32)]
          + [Case("floor", lambda r: [image(r, (2, 3, 3, 3), np.uint8), np.ones(3, f32) * 100,
                                      np.array([0, 4, 1e-20], f32)], {"epsilon": 1e-3},
                  grad=False),
             Case("17 channels", lambda r: [image(r, (1, 3, 5, 17), f32), randn(r, 17),
                                            uniform(r, 0.1, 3, 17)], {"epsilon": 1e-7},
                  grad=False),
             Case("(16, 32, 32, 3) uint8", lambda r: [image(r, (16, 32, 32, 3), np.uint8),
                                                      randn(r, 3, scale=50, shift=120),
                                                      uniform(r, 100, 5000, 3)],
                  {"epsilon": 1e-7}, grad=False)],
          reference=lambda x, mean, variance, epsilon:
          (x - mean) / np.maximum(np.sqrt(variance), epsilon),
          rtol=1e-6, atol=1e-6, note="Keras Normalization's floor on the deviation"))


# ---- augmentation: random ones -------------------------------------------------------------
# reference(inputs, draws, **attrs) applies the draws the op reports; draws()
# recomputes them from philox_ref's streams for the state [seed, counter]

def _flip_draws(x, state, horizontal, vertical):
    out = []
    for i in range(len(x)):
        s = Stream(int(state[0]), int(state[1]), i)
        fh, fv = s.below(2), s.below(2)
        out.append([fh if horizontal else 0, fv if vertical else 0])
    return (np.array(out, np.int32).reshape(-1, 2),)


def _flip_ref(inputs, draws, horizontal, vertical):
    x, (flags,) = inputs[0], draws
    return (np.stack([x[i][::-1 if fv else 1, ::-1 if fh else 1]
                      for i, (fh, fv) in enumerate(flags)]),)


def _pads(padding):
    p = list(padding) if padding else [0]
    return (p[0], p[0]) if len(p) == 1 else tuple(p)


def _alt_flip_draws(x, indices, state, horizontal, vertical):
    parity = (int(state[1]) >> 32) & 1
    out = []
    for i in indices:
        s = Stream(int(state[0]), 0, int(i))
        fh, fv = s.below(2), s.below(2)
        out.append([fh ^ parity if horizontal else 0, fv ^ parity if vertical else 0])
    return (np.array(out, np.int32).reshape(-1, 2),)


NP_PAD_MODES = ["constant", "reflect", "symmetric", "edge", "wrap"]
"""numpy.pad's name of each PR_FILL_* mode (csrc/kernels/augment.h)."""


def fill_index(k, n, mode):
    """Indices k (an int array) of an axis of n samples extended as
    numpy.pad(mode=NP_PAD_MODES[mode]) extends it (-1: the constant), read
    from numpy.pad itself."""
    k = np.asarray(k, np.int64)
    reach = int(np.abs(k).max(initial=0)) + n + 1
    ext = np.pad(np.arange(n), reach, mode=NP_PAD_MODES[mode]) if mode \
        else np.pad(np.arange(n), reach, constant_values=-1)
    return ext[k + reach]


def affine_reference(x, t, interpolation, fill_mode, fill_value):
    """keras.ops.image.affine_transform in NumPy (float64 coordinates and
    weights): output pixel (r, s) samples the input at
    ((a0 s + a1 r + a2)/k, (b0 s + b1 r + b2)/k), k = c0 s + c1 r + 1."""
    x = np.asarray(x, np.float64)
    n, h, w, c = x.shape
    t = np.asarray(t, np.float64).reshape(n, 8, 1, 1)
    r, s = np.mgrid[0:h, 0:w].astype(np.float64)
    k = t[:, 6] * s + t[:, 7] * r + 1
    xs, ys = (t[:, 0] * s + t[:, 1] * r + t[:, 2]) / k, (t[:, 3] * s + t[:, 4] * r + t[:, 5]) / k
    img = np.arange(n).reshape(n, 1, 1)

    def tap(rr, ss):
        rr, ss = fill_index(rr, h, fill_mode), fill_index(ss, w, fill_mode)
        out = x[img, np.maximum(rr, 0), np.maximum(ss, 0)]
        return np.where(((rr < 0) | (ss < 0))[..., None], fill_value, out)

    if not interpolation:
        return tap(np.floor(ys + 0.5).astype(np.int64), np.floor(xs + 0.5).astype(np.int64))
    r0, s0 = np.floor(ys).astype(np.int64), np.floor(xs).astype(np.int64)
    wy, wx = (ys - r0)[..., None], (xs - s0)[..., None]
    return ((1 - wy) * ((1 - wx) * tap(r0, s0) + wx * tap(r0, s0 + 1))
            + wy * ((1 - wx) * tap(r0 + 1, s0) + wx * tap(r0 + 1, s0 + 1)))


def _affine_draws(x, state, height_lower=0.0, height_upper=0.0, width_lower=0.0,
                  width_upper=0.0, rotation_lower=0.0, rotation_upper=0.0,
                  zoom_height_lower=1.0, zoom_height_upper=1.0, zoom_width_lower=1.0,
                  zoom_width_upper=1.0, same_zoom=False, **how):
    h, w = x.shape[1], x.shape[2]
    cx, cy = (w - 1) / 2, (h - 1) / 2
    out = []
    for i in range(len(x)):
        s = Stream(int(state[0]), int(state[1]), i)
        u = [s.uniform() for _ in range(5)]
        ty = h * (height_lower + (height_upper - height_lower) * u[0])
        tx = w * (width_lower + (width_upper - width_lower) * u[1])
        angle = rotation_lower + (rotation_upper - rotation_lower) * u[2]
        zy = zoom_height_lower + (zoom_height_upper - zoom_height_lower) * u[3]
        zx = zy if same_zoom else zoom_width_lower + (zoom_width_upper - zoom_width_lower) * u[4]
        co, si = math.cos(angle), math.sin(angle)
        a0, a1, b0, b1 = co * zx, -si * zy, si * zx, co * zy
        out.append([a0, a1, cx - a0 * cx - a1 * cy - tx, b0, b1, cy - b0 * cx - b1 * cy - ty, 0, 0])
    return (np.array(out, f32).reshape(-1, 8),)


def _affine_random_ref(inputs, draws, interpolation=1, fill_mode=0, fill_value=0.0, **ranges):
    return (affine_reference(inputs[0], draws[0], interpolation, fill_mode, fill_value),)


def _contrast_draws(x, state, lower, upper, value_min=0.0, value_max=255.0):
    return (np.array([lower + (upper - lower) * Stream(int(state[0]), int(state[1]), i).uniform()
                      for i in range(len(x))], f32),)


def contrast_reference(x, factors, value_min, value_max):
    """keras RandomContrast's arithmetic: clip((x - m) f + m) with m the
    per-image, per-channel mean over height and width."""
    x = np.asarray(x, np.float64)
    m = x.mean(axis=(1, 2), keepdims=True)
    f = np.asarray(factors, np.float64).reshape(-1, 1, 1, 1)
    return np.clip((x - m) * f + m, value_min, value_max)


def _contrast_ref(inputs, draws, lower, upper, value_min=0.0, value_max=255.0):
    return (contrast_reference(inputs[0], draws[0], value_min, value_max),)


def _crop_draws(x, state, size, padding=(0,), mode=0):
    py, px = _pads(padding)
    ry, rx = x.shape[1] + 2 * py - size[0] + 1, x.shape[2] + 2 * px - size[1] + 1
    out = []
    for i in range(len(x)):
        s = Stream(int(state[0]), int(state[1]), i)
        out.append([s.below(ry), s.below(rx)])
    return (np.array(out, np.int32).reshape(-1, 2),)


def _crop_ref(inputs, draws, size, padding=(0,), mode=0):
    x, (off,) = inputs[0], draws
    py, px = _pads(padding)
    padded = np.pad(x, ((0, 0), (py, py), (px, px), (0, 0)), mode=NP_PAD_MODES[mode])
    return (np.stack([padded[i, oy:oy + size[0], ox:ox + size[1]]
                      for i, (oy, ox) in enumerate(off)]),)


_AREA = {"area_min": 0.08, "area_max": 1.0, "ratio_min": 3 / 4, "ratio_max": 4 / 3}


def _rrc_draws(x, state, size, **a):
    a = {**_AREA, **a}
    return (np.array([resized_crop_box(Stream(int(state[0]), int(state[1]), i), x.shape[1],
                                       x.shape[2], (a["area_min"], a["area_max"]),
                                       (a["ratio_min"], a["ratio_max"]))
                      for i in range(len(x))], np.int32).reshape(-1, 4),)


def _rrc_ref(inputs, draws, size, **a):
    return (resize_reference(inputs[0], draws[0], *size).astype(np.float64),)


def _lighting_draws(x, eigval, eigvec, state, stddev=0.1):
    return (np.array([[f32(stddev * s.normal()) for _ in range(3)]
                      for s in (Stream(int(state[0]), int(state[1]), i) for i in range(len(x)))],
                     f32).reshape(-1, 3),)


def _lighting_ref(inputs, draws, stddev=0.1):
    x, eigval, eigvec = inputs[:3]
    alpha = draws[0].astype(np.float64)
    shift = np.einsum("cj,nj,j->nc", eigvec, alpha, eigval).astype(f32)  # float32, as the kernel
    return (x.astype(np.float64) + shift[:, None, None, :],)


def _cutout_draws(x, state, size, fill=0.0):
    out = []
    for i in range(len(x)):
        s = Stream(int(state[0]), int(state[1]), i)
        out.append([s.below(x.shape[1]), s.below(x.shape[2])])
    return (np.array(out, np.int32).reshape(-1, 2),)


def _cutout_ref(inputs, draws, size, fill=0.0):
    x, (centres,) = inputs[0], draws
    y = x.copy()
    for i, (cy, cx) in enumerate(centres):
        y0, x0 = cy - size[0] // 2, cx - size[1] // 2
        y[i, max(y0, 0):max(y0 + size[0], 0), max(x0, 0):max(x0 + size[1], 0)] = fill
    return (y,)


def _mixup_draws(x, labels_, state, alpha=0.2, num_classes=0, per_sample=False):
    lam, perm = mixup_draws(len(x), alpha, per_sample, int(state[0]), int(state[1]))
    return lam, perm.astype(np.int32)


def _mixup_ref(inputs, draws, alpha=0.2, num_classes=0, per_sample=False):
    x, y = inputs[0].astype(np.float64), inputs[1]
    lam, perm = draws[0].astype(np.float64), draws[1]
    soft = np.eye(num_classes)[y.reshape(len(y))] if num_classes else y.astype(np.float64)
    lx = lam.reshape((-1,) + (1,) * (x.ndim - 1))
    return lx * x + (1 - lx) * x[perm], lam[:, None] * soft + (1 - lam[:, None]) * soft[perm]


def _random(name, cases, reference, draws, draw_outputs, rtol=0, atol=0, note=""):
    return add(Entry(name, cases, reference=reference, draws=draws, draw_outputs=draw_outputs,
                     rtol=rtol, atol=atol, kind="random", note=note or
                     "random: checked against the draws it reports, and those draws against "
                     "philox_ref's streams; no gradient"))


_random("random_flip",
        [Case(f"{np.dtype(dt).name} {xs} h={h} v={v}",
              lambda r, xs=xs, dt=dt: [image(r, xs, dt), rng_state(3, 5)],
              {"horizontal": h, "vertical": v}, grad=False)
         for xs, dt, h, v in [((9, 5, 7, 3), np.uint8, True, False),
                              ((9, 5, 7, 3), f32, False, True),
                              ((1, 4, 3, 17), f32, True, True),
                              ((6, 1, 1, 1), np.uint8, True, True),
                              ((16, 32, 32, 3), np.uint8, True, True)]],
        _flip_ref, _flip_draws, (1,))
_random("alternating_flip",
        [Case(f"{np.dtype(dt).name} {xs} h={h} v={v} pass {e}",
              lambda r, xs=xs, dt=dt, e=e: [image(r, xs, dt),
                                            r.permutation(50)[:xs[0]].astype(np.int64),
                                            rng_state(3, (e << 32) + 5)],
              {"horizontal": h, "vertical": v}, grad=False)
         for xs, dt, h, v, e in [((9, 5, 7, 3), np.uint8, True, False, 0),
                                 ((9, 5, 7, 3), np.uint8, True, False, 1),
                                 ((9, 5, 7, 3), f32, False, True, 3),
                                 ((1, 4, 3, 17), f32, True, True, 2),
                                 ((16, 32, 32, 3), np.uint8, True, False, 7)]],
        lambda inputs, draws, **a: _flip_ref(inputs, draws, **a), _alt_flip_draws, (1,),
        note="draws keyed on the dataset indices (input 1) and the pass parity")
_random("random_crop",
        [Case(f"{np.dtype(dt).name} {xs}->{sz} pad {p} {NP_PAD_MODES[m]}",
              lambda r, xs=xs, dt=dt: [image(r, xs, dt), rng_state(5, 2 ** 33 + 7)],
              {"size": sz, "padding": p, "mode": m}, grad=False)
         for xs, sz, p, m, dt in [((3, 32, 32, 3), [32, 32], [4], 0, np.uint8),
                                  ((4, 7, 9, 2), [5, 3], [2, 1], 1, f32),
                                  ((4, 7, 9, 2), [7, 9], [0], 0, f32),
                                  ((1, 7, 9, 2), [1, 1], [3], 1, np.uint8),
                                  ((4, 7, 9, 2), [11, 10], [2, 3], 0, np.uint8),
                                  ((3, 4, 3, 1), [1, 1], [1, 3], 0, f32),
                                  ((16, 32, 32, 3), [32, 32], [4], 1, f32),
                                  ((16, 32, 32, 3), [32, 32], [2], 2, np.uint8),
                                  ((3, 4, 3, 2), [12, 11], [4, 4], 2, f32),
                                  ((3, 4, 3, 2), [12, 11], [4, 4], 3, np.uint8),
                                  ((3, 4, 3, 2), [12, 11], [4, 4], 4, f32),
                                  ((2, 1, 3, 1), [5, 9], [2, 3], 1, f32)]],
        _crop_ref, _crop_draws, (1,), note="includes crops wholly in the padding "
        "(test_robustness.test_random_crop_inside_the_padding) and padding past the image "
        "(periodic modes)")
_AFFINE_CASES = [  # (shape, dtype, attrs)
    ((4, 6, 7, 3), np.uint8, {"height_lower": -0.3, "height_upper": 0.3, "width_lower": -0.4,
                              "width_upper": 0.2}),
    ((3, 5, 5, 2), f32, {"rotation_lower": -1.0, "rotation_upper": 2.0, "fill_mode": 1}),
    ((3, 5, 8, 1), f32, {"rotation_lower": -0.6, "rotation_upper": 0.6, "fill_mode": 2,
                         "interpolation": 0}),
    ((3, 6, 4, 3), np.uint8, {"zoom_height_lower": 0.5, "zoom_height_upper": 1.6,
                              "same_zoom": True, "fill_mode": 3}),
    ((3, 6, 4, 2), f32, {"zoom_height_lower": 0.7, "zoom_height_upper": 1.3,
                         "zoom_width_lower": 1.2, "zoom_width_upper": 2.0, "fill_mode": 4}),
    ((2, 5, 6, 1), f32, {"height_lower": -1.0, "height_upper": 1.0, "width_lower": -1.0,
                         "width_upper": 1.0, "rotation_lower": 0.3, "rotation_upper": 0.5,
                         "zoom_height_lower": 0.8, "zoom_height_upper": 1.4,
                         "fill_value": -2.5}),
    ((4, 32, 32, 3), np.uint8, {"height_lower": -0.1, "height_upper": 0.1,
                                "width_lower": -0.1, "width_upper": 0.1, "fill_mode": 2}),
]
_random("random_affine",
        [Case(f"{np.dtype(dt).name} {xs} {a}", lambda r, xs=xs, dt=dt: [image(r, xs, dt),
                                                                          rng_state(17, 3)],
              a, grad=False) for xs, dt, a in _AFFINE_CASES],
        _affine_random_ref, _affine_draws, (1,), rtol=1e-5, atol=2e-3,
        note="float32 bilinear weights against float64 ones; every fill mode")
add(Entry("affine_transform",
          [Case(f"{np.dtype(dt).name} {xs} interp {ip} fill {fm}",
                lambda r, xs=xs, dt=dt: [image(r, xs, dt),
                                         (np.array([1, 0, 0, 0, 1, 0, 0, 0], f32)
                                          + r.normal(0, 0.3, (xs[0], 8)) * [1, 1, 3, 1, 1, 3,
                                                                             0.02, 0.02]
                                          ).astype(f32)],
                {"interpolation": ip, "fill_mode": fm, "fill_value": 7.0}, grad=False)
           for xs, dt, ip, fm in [((3, 5, 6, 2), f32, 1, 0), ((3, 5, 6, 2), np.uint8, 0, 1),
                                  ((2, 4, 7, 3), f32, 1, 2), ((2, 4, 7, 3), f32, 0, 3),
                                  ((2, 6, 3, 1), np.uint8, 1, 4)]],
          reference=lambda x, t, interpolation, fill_mode, fill_value: affine_reference(
              x, t, interpolation, fill_mode, fill_value),
          rtol=1e-5, atol=2e-3, note="projective transforms (c0, c1 != 0) too"))
_random("random_contrast",
        [Case(f"{np.dtype(dt).name} {xs} ({lo}, {hi}) clip ({vmin}, {vmax})",
              lambda r, xs=xs, dt=dt: [image(r, xs, dt), rng_state(29, 1)],
              {"lower": lo, "upper": hi, "value_min": vmin, "value_max": vmax}, grad=False)
         for xs, dt, lo, hi, vmin, vmax in [((5, 6, 7, 3), np.uint8, 0.5, 1.5, 0.0, 255.0),
                                            ((3, 4, 4, 2), f32, 0.0, 3.0, -1.0, 1.0),
                                            ((2, 1, 1, 3), f32, 1.0, 1.0, -9.0, 9.0),
                                            ((16, 32, 32, 3), np.uint8, 0.8, 1.2, 0.0, 255.0)]],
        _contrast_ref, _contrast_draws, (1,), rtol=1e-5, atol=1e-3)
_random("random_resized_crop",
        [Case(f"{np.dtype(dt).name} {xs}->{sz} {a}",
              lambda r, xs=xs, dt=dt: [image(r, xs, dt), rng_state(11)], {"size": sz, **a},
              grad=False)
         for xs, sz, a, dt in [((6, 32, 32, 3), [32, 32], {}, np.uint8),
                               ((5, 13, 9, 2), [7, 11], {}, f32),
                               ((1, 4, 5, 1), [9, 3], {}, np.uint8),
                               ((16, 32, 32, 3), [24, 40], {"area_min": 0.25}, f32),
                               ((4, 12, 12, 1), [6, 6],
                                {"area_min": 0.9, "area_max": 1.0, "ratio_min": 3.0,
                                 "ratio_max": 4.0}, f32)]],
        _rrc_ref, _rrc_draws, (1,), note="the last case falls back to the central crop")
_EIG = (np.array([0.2, 0.02, 0.004], f32) * 255,
        np.linalg.qr(np.arange(9.0).reshape(3, 3) + np.eye(3))[0].astype(f32))
_random("random_lighting",
        [Case(f"{np.dtype(dt).name} {xs}", lambda r, xs=xs, dt=dt: [image(r, xs, dt), *_EIG,
                                                                     rng_state(99, 1)],
              {"stddev": sd}, grad=False)
         for xs, dt, sd in [((7, 5, 6, 3), np.uint8, 0.1), ((1, 3, 3, 3), f32, 0.5),
                            ((2, 1, 17, 3), f32, 0.0), ((16, 32, 32, 3), np.uint8, 0.1)]],
        _lighting_ref, _lighting_draws, (1,), rtol=1e-6, atol=1e-4)
_random("cutout",
        [Case(f"{np.dtype(dt).name} {xs} size {sz} fill {fill}",
              lambda r, dt=dt, xs=xs: [image(r, xs, dt), rng_state(4)],
              {"size": sz, "fill": fill}, grad=False)
         for dt, fill, sz, xs in [(np.uint8, 0.0, [4, 4], (6, 9, 11, 3)),
                                  (np.uint8, 128.0, [3, 6], (6, 9, 11, 3)),
                                  (f32, -1.5, [1, 1], (6, 9, 11, 3)),
                                  (f32, 0.0, [20, 20], (6, 9, 11, 3)),
                                  (np.uint8, 0.0, [16, 16], (16, 32, 32, 3))]],
        _cutout_ref, _cutout_draws, (1,), note="boxes clipped at the borders")
_random("mixup",
        [Case("int32 labels", lambda r: [image(r, (10, 3, 2, 3), np.uint8),
                                         labels(r, 4, (10,)), rng_state(21)],
              {"alpha": 0.4, "num_classes": 4, "per_sample": False}, grad=False),
         Case("uint8 column labels per sample",
              lambda r: [image(r, (10, 3, 2, 3), f32),
                         labels(r, 4, (10, 1), np.uint8), rng_state(21, 3)],
              {"alpha": 0.4, "num_classes": 4, "per_sample": True}, grad=False),
         Case("soft labels batch 1", lambda r: [image(r, (1, 4, 4, 3), f32),
                                                r.dirichlet(np.ones(5), 1).astype(f32),
                                                rng_state(2)],
              {"alpha": 1.0, "num_classes": 0, "per_sample": True}, grad=False),
         Case("(16, 32, 32, 3) int64 labels", lambda r: [image(r, (16, 32, 32, 3), np.uint8),
                                                         labels(r, 10, (16,), np.int64),
                                                         rng_state(8, 2)],
              {"alpha": 0.2, "num_classes": 10, "per_sample": False}, grad=False)],
        _mixup_ref, _mixup_draws, (2, 3), rtol=1e-6, atol=1e-4)



# ---- random draws (csrc/ops_random.c): the output is the draws ----------------------------

def _random_values(draw):
    """draws(state, shape=..., a, b): element i of stream 0, in order (philox_ref)."""
    def draws(state, shape, **params):
        stream = Stream(int(state[0]), int(state[1]), 0)
        n = int(np.prod(shape, dtype=np.int64))
        return [np.array([draw(stream, **params) for _ in range(n)], f32).reshape(shape)]
    return draws


_RANDOM_SHAPES = [[5], [3, 4], [2, 1, 3], [0, 3], [], [2, 2, 2, 7]]
_random("random_normal",
        [Case(f"{sh} mean {m} std {sd}", lambda r: [rng_state(21, 4)],
              {"shape": sh, "mean": m, "stddev": sd}, grad=False)
         for sh, m, sd in zip(_RANDOM_SHAPES, [0.0, 1.5, -2.0, 0.0, 0.5, 0.0],
                              [1.0, 0.25, 3.0, 1.0, 2.0, 0.05])],
        lambda inputs, draws, **a: (),
        _random_values(lambda s, mean=0.0, stddev=1.0: mean + stddev * s.normal()), (0,),
        note="the output is the draws: checked exactly against philox_ref's stream 0")
_random("random_uniform",
        [Case(f"{sh} [{lo}, {hi})", lambda r: [rng_state(2 ** 40 + 3, 2 ** 33)],
              {"shape": sh, "minval": lo, "maxval": hi}, grad=False)
         for sh, lo, hi in zip(_RANDOM_SHAPES, [0.0, -1.0, 2.0, 0.0, -0.05, 0.0],
                               [1.0, 1.0, 7.5, 1.0, 0.05, 1e-3])],
        lambda inputs, draws, **a: (),
        _random_values(lambda s, minval=0.0, maxval=1.0: minval + (maxval - minval) * s.uniform()),
        (0,), note="the output is the draws: checked exactly against philox_ref's stream 0")


# ---- array ops (csrc/ops_array.c) ------------------------------------------------------------

def _small_ints(r, shape, dtype=f32):
    return r.integers(0, 3, shape).astype(dtype)


_COMPARE = {"greater": np.greater, "greater_equal": np.greater_equal, "less": np.less,
            "less_equal": np.less_equal, "equal": np.equal, "not_equal": np.not_equal}
for _name, _fn in _COMPARE.items():
    add(Entry(_name, _binary_cases(lambda r, sa, sb: [_small_ints(r, sa), _small_ints(r, sb)])
              + [Case("int32 vs float32", lambda r: [_small_ints(r, (3, 4), np.int32),
                                                     _small_ints(r, (4,)) + 0.5], grad=False),
                 Case("int64 past 2**53", lambda r: [np.array([2 ** 60, 2 ** 60 + 1], np.int64),
                                                     np.array([2 ** 60 + 1], np.int64)],
                      grad=False),
                 Case("NaN", lambda r: [np.array([np.nan, 1.0, np.nan], f32),
                                        np.array([np.nan, np.nan, 2.0], f32)], grad=False),
                 Case("bool", lambda r: [np.array([True, False, True]), np.array([True])],
                      grad=False)],
              reference=_fn, rtol=0, atol=0, note="small integers: many ties"))


def _bool_mask(r, shape):
    return r.random(shape) < 0.5


add(Entry("where", [
    Case("(3, 4) all", lambda r: [_bool_mask(r, (3, 4)), randn(r, 3, 4), randn(r, 3, 4)]),
    Case("broadcast cond (4,)", lambda r: [_bool_mask(r, (4,)), randn(r, 3, 4), randn(r, 3, 1)]),
    Case("scalar y", lambda r: [_bool_mask(r, (2, 3)), randn(r, 2, 3), randn(r)]),
    Case("float cond with NaN", lambda r: [np.array([0.0, np.nan, -1.0], f32), randn(r, 3),
                                           randn(r, 3)]),
    Case("int32 cond (1, 5)", lambda r: [r.integers(0, 2, (1, 5)).astype(np.int32),
                                        randn(r, 4, 1), randn(r, 5)]),
    Case("(33, 1025) large", lambda r: [_bool_mask(r, (33, 1025)), randn(r, 33, 1025),
                                        randn(r, 1025)], grad=False),
], reference=lambda c, x, y: np.where(c != 0, x, y), rtol=0, atol=0, grad_wrt=(1, 2)))

_DT = {"float32": 0, "int32": 1, "int64": 2, "uint8": 3, "bool": 4, "bfloat16": 5}


def _bf16_specials(r, *shape):
    """Normal values, plus ties between two bfloat16 (both parities), values
    that round up to the next binade or to infinity, subnormals, signed zero,
    inf and NaN, as float32."""
    x = randn(r, *shape).ravel()
    bits = np.array([0x3f808000, 0x3f818000, 0x3f80c000, 0x3fffc000, 0x7f7fffff, 0x00012345,
                     0x80008000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc12345],
                    np.uint32)
    x[:len(bits)] = bits.view(f32)
    return x.reshape(shape)


def _cast_ref(x, dtype):
    name = [k for k, v in _DT.items() if v == dtype][0]
    if name == "bfloat16":  # from float32 (exact in float64): round to nearest even
        return x.astype(bf16)
    if name == "float32":
        return np.asarray(x, np.float64) if x.dtype.kind != "f" else x
    if x.dtype.kind == "f" and name != "bool":
        return np.trunc(x).astype(np.int64).astype(name)
    return x.astype(name)


add(Entry("cast", [
    Case("float32 -> float32", lambda r: [randn(r, 3, 4)], {"dtype": 0}),
    Case("float32 -> int32", lambda r: [randn(r, 17, 5, scale=50)], {"dtype": 1}, grad=False),
    Case("float32 -> int64", lambda r: [randn(r, 6, scale=1e6)], {"dtype": 2}, grad=False),
    Case("float32 -> uint8", lambda r: [uniform(r, 0, 255, 4, 4)], {"dtype": 3}, grad=False),
    Case("float32 -> bool", lambda r: [np.array([0.0, -0.0, 0.5, np.nan, -3], f32)],
         {"dtype": 4}, grad=False),
    Case("int64 -> float32", lambda r: [r.integers(-2 ** 40, 2 ** 40, 7)], {"dtype": 0},
         grad=False),
    Case("int64 -> int32 wraps", lambda r: [np.array([2 ** 31, -2 ** 31 - 1, 5], np.int64)],
         {"dtype": 1}, grad=False),
    Case("int32 -> uint8 wraps", lambda r: [np.array([-1, 256, 300, 7], np.int32)],
         {"dtype": 3}, grad=False),
    Case("bool -> int32", lambda r: [np.array([True, False])], {"dtype": 1}, grad=False),
    Case("uint8 -> float32", lambda r: [r.integers(0, 256, (2, 3), dtype=np.uint8)],
         {"dtype": 0}, grad=False),
    Case("float32 -> bfloat16 specials", lambda r: [_bf16_specials(r, 4, 16)], {"dtype": 5},
         grad=False),
    Case("float32 -> bfloat16 (5, 3, 7)", lambda r: [randn(r, 5, 3, 7)], {"dtype": 5},
         grad=False),
    Case("bfloat16 -> float32", lambda r: [_bf16_specials(r, 3, 17).astype(bf16)], {"dtype": 0},
         grad=False),
    Case("float32 -> bfloat16 empty", lambda r: [randn(r, 0, 3)], {"dtype": 5}, grad=False),
], reference=_cast_ref, rtol=0, atol=0, grad_wrt=(0,),
    note="in-range values: NumPy leaves out-of-range float to int undefined"))
add(Entry("stop_gradient", [Case(str(s), lambda r, s=s: [randn(r, *s)]) for s in UNARY_SHAPES]
          + [Case("int64", lambda r: [np.arange(5)])],
          reference=lambda x: x, rtol=0, atol=0))
add(Entry("transpose", [
    Case("(2, 3, 4) (2, 0, 1)", lambda r: [randn(r, 2, 3, 4)], {"perm": [2, 0, 1]}),
    Case("(3, 5) (1, 0)", lambda r: [randn(r, 3, 5)], {"perm": [1, 0]}),
    Case("identity", lambda r: [randn(r, 2, 3)], {"perm": [0, 1]}),
    Case("scalar", lambda r: [randn(r)], {"perm": []}),
    Case("NHWC -> NCHW (2, 5, 7, 3)", lambda r: [randn(r, 2, 5, 7, 3)], {"perm": [0, 3, 1, 2]}),
    Case("uint8 (4, 1, 3)", lambda r: [r.integers(0, 256, (4, 1, 3), dtype=np.uint8)],
         {"perm": [2, 1, 0]}, grad=False),
    Case("(64, 33, 17) large", lambda r: [randn(r, 64, 33, 17)], {"perm": [1, 2, 0]},
         grad=False),
], reference=lambda x, perm: np.transpose(x, perm), rtol=0, atol=0, grad_wrt=(0,)))

# (shape, begin, strides, size) and the NumPy slices they mean
SLICES = [((5, 4), [1, 0], [1, 1], [3, -1], np.s_[1:4, :]),
          ((5, 4), [4, 3], [-1, -2], [5, 2], np.s_[::-1, 3::-2]),
          ((3, 7, 2), [0, 1, 1], [2, 3, 1], [2, 2, 1], np.s_[::2, 1::3, 1:]),
          ((6,), [5], [-4], [2], np.s_[5::-4]),
          ((4, 3), [0, 0], [1, 1], [0, -1], np.s_[0:0, :]),
          ((2, 9, 9, 3), [0, 1, 0, 0], [1, 2, 2, 1], [-1, 4, 5, -1], np.s_[:, 1::2, ::2, :])]


def _slice_ref(x, begin, strides, size):
    return x[next(sl for sh, b, st, sz, sl in SLICES if b == begin and st == strides
                  and sz == size and sh == x.shape)]


add(Entry("strided_slice", [Case(f"{sh} {sl}", lambda r, sh=sh: [randn(r, *sh)],
                                 {"begin": b, "strides": st, "size": sz})
                            for sh, b, st, sz, sl in SLICES]
          + [Case("int64 (5, 4)", lambda r: [np.arange(20).reshape(5, 4)],
                  {"begin": [4, 3], "strides": [-1, -2], "size": [5, 2]}, grad=False)],
          reference=_slice_ref, rtol=0, atol=0, grad_wrt=(0,)))


def _slice_bw_ref(g, begin, strides, shape):
    out = np.zeros(shape)
    out[next(sl for sh, b, st, sz, sl in SLICES if b == begin and st == strides
             and sh == tuple(shape))] = g
    return out


add(Entry("strided_slice_backward",
          [Case(f"{sh} {sl}", lambda r, sh=sh, sl=sl: [randn(r, *np.zeros(sh)[sl].shape)],
                {"begin": b, "strides": st, "shape": list(sh)})
           for sh, b, st, sz, sl in SLICES],
          reference=_slice_bw_ref, rtol=0, atol=0, grad_wrt=(0,)))


def _pad_ref(x, before, after, value=0.0):
    return np.pad(x, list(zip(before, after)), constant_values=value)


add(Entry("pad", [
    Case("(2, 3) 1,0/2,1", lambda r: [randn(r, 2, 3)], {"before": [1, 2], "after": [0, 1]}),
    Case("NHWC spatial (2, 5, 4, 3)", lambda r: [randn(r, 2, 5, 4, 3)],
         {"before": [0, 1, 2, 0], "after": [0, 1, 0, 0], "value": -1.5}),
    Case("nothing", lambda r: [randn(r, 3)], {"before": [0], "after": [0]}),
    Case("empty input", lambda r: [randn(r, 0, 2)], {"before": [1, 0], "after": [1, 1]}),
    Case("uint8", lambda r: [r.integers(0, 256, (2, 2), dtype=np.uint8)],
         {"before": [1, 1], "after": [1, 1], "value": 7}, grad=False),
], reference=_pad_ref, rtol=0, atol=0, grad_wrt=(0,)))
add(Entry("concatenate", [
    Case("(2, 3)+(4, 3) axis 0", lambda r: [randn(r, 2, 3), randn(r, 4, 3)], {"axis": 0}),
    Case("(2, 3)+(2, 1) axis -1", lambda r: [randn(r, 2, 3), randn(r, 2, 1)], {"axis": -1}),
    Case("NHWC channels (2, 3, 3, 5)+(2, 3, 3, 4)",
         lambda r: [randn(r, 2, 3, 3, 5), randn(r, 2, 3, 3, 4)], {"axis": 3}),
    Case("empty part", lambda r: [randn(r, 0, 3), randn(r, 2, 3)], {"axis": 0}),
    Case("int32", lambda r: [np.arange(6, dtype=np.int32).reshape(2, 3),
                             np.arange(3, dtype=np.int32).reshape(1, 3)], {"axis": 0},
         grad=False),
], reference=lambda a, b, axis=0: np.concatenate([a, b], axis), rtol=0, atol=0,
    grad_wrt=(0, 1)))
add(Entry("take", [
    Case("(5, 3) axis 0 [4, 0, 4]", lambda r: [randn(r, 5, 3), np.array([4, 0, 4])], {"axis": 0}),
    Case("(2, 6, 3) axis 1 negative", lambda r: [randn(r, 2, 6, 3),
                                                 np.array([[-1, 2], [0, -6]], np.int32)],
         {"axis": 1}),
    Case("(4,) scalar index", lambda r: [randn(r, 4), np.array(2)], {"axis": 0}),
    Case("axis -1 empty indices", lambda r: [randn(r, 3, 2), np.zeros(0, np.int64)],
         {"axis": -1}),
    Case("uint8 rows", lambda r: [r.integers(0, 256, (4, 2), dtype=np.uint8), np.array([3, 3])],
         {"axis": 0}, grad=False),
], reference=lambda x, i, axis=0: np.take(x, i, axis=axis), rtol=0, atol=0, grad_wrt=(0,)))


def _take_bw_ref(g, idx, axis, dim):
    shape = list(g.shape[:axis]) + [dim] + list(g.shape[axis + idx.ndim:])
    out = np.zeros(shape)
    moved = np.moveaxis(out, axis, 0)
    gm = g.reshape(g.shape[:axis] + (-1,) + g.shape[axis + idx.ndim:])
    np.add.at(moved, idx.reshape(-1) % dim, np.moveaxis(gm, axis, 0))
    return out


add(Entry("take_backward", [
    Case("repeats axis 0", lambda r: [randn(r, 3, 3), np.array([4, 0, 4])], {"axis": 0, "dim": 5}),
    Case("(2, 2, 2, 3) axis 1", lambda r: [randn(r, 2, 2, 2, 3),
                                           np.array([[-1, 2], [0, -6]], np.int32)],
         {"axis": 1, "dim": 6}),
    Case("scalar index", lambda r: [randn(r), np.array(2)], {"axis": 0, "dim": 4}),
], reference=_take_bw_ref, rtol=1e-6, atol=1e-6, grad_wrt=(0,)))
add(Entry("one_hot", [
    Case("int32 (4,)", lambda r: [np.array([0, 2, 1, 2], np.int32)], {"num_classes": 3}),
    Case("int64 (2, 3) out of range", lambda r: [np.array([[0, 5, -1], [3, 3, 1]])],
         {"num_classes": 4}),
    Case("uint8 scalar", lambda r: [np.array(1, np.uint8)], {"num_classes": 2}),
], reference=lambda i, num_classes: (np.arange(num_classes) == i[..., None]).astype(np.float64),
    rtol=0, atol=0))

EXTREME_CASES = [((2, 3, 4), [], False), ((2, 3, 4), [1], False), ((2, 3, 4), [-1], True),
                 ((2, 3, 4), [0, 2], False), ((3, 1, 5), [1], False), ((7,), [0], True),
                 ((), [], False)]
for _name, _fn in [("max", np.max), ("min", np.min)]:
    add(Entry(_name, [Case(f"{s} axes={a} keepdims={k}", lambda r, s=s: [distinct(r, s)],
                           {"axes": a, "keepdims": k}) for s, a, k in EXTREME_CASES]
              + [Case("ties", lambda r: [np.array([[1, 3, 3], [2, 2, 0]], f32)],
                      {"axes": [1], "keepdims": False}, grad=False),
                 Case("NaN", lambda r: [np.array([[1, np.nan, 3], [2, 2, 0]], f32)],
                      {"axes": [1], "keepdims": False}, grad=False),
                 Case("(64, 33, 17) axes [0, 2]", lambda r: [randn(r, 64, 33, 17)],
                      {"axes": [0, 2], "keepdims": False}, grad=False)],
              reference=_reduce_ref(_fn), rtol=0, atol=0, grad_wrt=(0,),
              note="distinct values for gradients; ties share the gradient (forward only)"))


def _arg_ref(fn):
    def ref(x, axes, keepdims):
        y = fn(x, axis=axes[0] if axes else None, keepdims=keepdims)
        return np.asarray(y, np.int32)
    return ref


for _name, _fn in [("argmax", np.argmax), ("argmin", np.argmin)]:
    add(Entry(_name, [Case(f"{s} axes={a} keepdims={k}", lambda r, s=s: [distinct(r, s)],
                           {"axes": a, "keepdims": k})
                      for s, a, k in [((2, 3, 4), [], False), ((2, 3, 4), [1], False),
                                      ((2, 3, 4), [-1], True), ((5,), [0], False),
                                      ((2, 3, 4), [], True)]]
              + [Case("ties: the first", lambda r: [np.array([[1, 3, 3], [2, 2, 0]], f32)],
                      {"axes": [1], "keepdims": False}),
                 Case("NaN: the first", lambda r: [np.array([[1, np.nan, np.nan], [2, 2, 0]],
                                                            f32)],
                      {"axes": [1], "keepdims": False}),
                 Case("(64, 33, 17) axes [0]", lambda r: [randn(r, 64, 33, 17)],
                      {"axes": [0], "keepdims": False})],
              reference=_arg_ref(_fn), rtol=0, atol=0))


# ---- internal graph ops (not in the registry's op_names) ------------------------------------

# the ops jit_compile fuses into one fused_elementwise node (csrc/ops_fused.c): those
# whose registry entry names a fused instruction (pr_op.fuse)
FUSED_OPS = tuple(n for n in sorted(_C.op_names()) if _C.op_info(n)["fusible"])

add(Entry("fused_elementwise", kind="internal",
          skip={"all": "made only by jit_compile's fusion pass from chains of the FUSED_OPS "
                       "(variable arity, an encoded program), never callable by name; "
                       "test_op_table.test_fused_chain_equals_eager runs each FUSED_OPS entry's "
                       "cases through it, and tests/test_compile.py fused training steps"}))
add(Entry("host_callback", kind="internal",
          skip={"all": "the graph node of pyresnet.print (Python called from the executor), not "
                       "an op of the registry; tested by tests/test_compile.py (printing and "
                       "dead-node removal keeping it)"}))


def registered():
    """The ops of the C registry."""
    return set(_C.op_names())

