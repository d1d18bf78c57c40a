"""Every op of the registry, driven by the op table (tests/op_table.py):

1. every registered op has an entry, and each entry agrees with the registry
   (arity, attributes, differentiability, in-place updates);
2. forward against the entry's float64 NumPy reference: outputs of pure ops,
   the updated Variables of state ops, and for random ops the outputs
   against the draws they report and those draws against philox_ref;
3. gradients of differentiable ops against float64 central differences;
4. the op inside ``pyresnet.compile`` (plain and ``jit_compile=True``) gives
   the eager result, also for gradients taken inside the compiled function,
   and chains of elementwise entries fused by the jit (the internal
   fused_elementwise op) give the eager chain's bits;
5. every kernel variant this CPU runs equals the reference kernel and NumPy.

The fuzz of tests/test_robustness.py also starts from the table's cases.

Tolerances: each entry states ``rtol``/``atol`` for float32 kernels against
float64 references (0 for ops that only move, select or compare values,
which must be exact); the float32 rounding a kernel accumulates is what they
allow, nothing more.
"""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import _C
from gradcheck import check_gradients
from op_table import FUSED_OPS, TABLE, as64, bf16, registered

CPU = _C.cpu_info()


def _params(entry_ok=lambda e: True, case_ok=lambda e, c: True):
    return [pytest.param(e.name, c.label, id=f"{e.name}-{c.label}")
            for e in TABLE.values() if entry_ok(e) for c in e.cases if case_ok(e, c)]


def _get(name, label):
    e = TABLE[name]
    case = next(c for c in e.cases if c.label == label)
    return e, case, e.inputs(case)


def _tuple(y):
    if y is None:
        return ()
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def assert_matches(got, want, rtol, atol, what, bf16_out=False):
    """A float32 (or integer) output against a float64 (or integer) reference:
    same shape, the dtype the reference implies, values within rtol/atol.
    With ``bf16_out`` a float output is bfloat16: the reference rounded to
    bfloat16 when exact (rtol = atol = 0), else within rtol + 2**-8 (the
    rounding's relative error is at most 2**-9)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "f":
        expected = bf16 if bf16_out else np.float32
        assert got.dtype == expected, f"{what}: dtype {got.dtype}, expected {expected}"
    else:
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    if rtol == 0 and atol == 0:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=what)
    elif bf16_out:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol + 2 ** -8,
                                   atol=atol * (1 + 2 ** -8), err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def assert_same(got, want, what, rtol=0.0, atol=0.0):
    """Two pyresnet results of one op: bitwise, or within rtol/atol."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if rtol == 0 and atol == 0:
        np.testing.assert_array_equal(got, want, err_msg=what)
    elif got.dtype == bf16:  # two float32 results within rtol/atol, each rounded once
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol + 2 ** -7, atol=atol * (1 + 2 ** -7), err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def _wrap(entry, inputs):
    """Variables for the inputs the op updates in place (fresh copies)."""
    mutated = entry.mutated
    return [pr.Variable(a, trainable=False) if i in mutated else a for i, a in enumerate(inputs)]


# ---- 1. the table covers the registry -----------------------------------------------------

def test_every_registered_op_is_in_the_table():
    """Fails naming each op of ``_C.op_names()`` without an entry."""
    missing = sorted(registered() - set(TABLE))
    assert not missing, f"registered ops missing from tests/op_table.py: {missing}"


def test_entries_not_in_the_registry_are_internal_with_a_reason():
    for name, e in TABLE.items():
        if name not in registered():
            assert e.kind == "internal" and e.skip.get("all"), \
                f"{name}: not registered, so it must be an internal entry saying where it is tested"
        else:
            assert e.kind != "internal", f"{name} is registered: give it cases and a reference"


def test_internal_entries_name_real_graph_ops():
    """The internal entries are the names the compiled graphs really use."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2

    @pr.compile(jit_compile=True)
    def chain(a):
        pr.print("host callback")
        return _C.call("relu", _C.call("add", _C.call("multiply", a, a), a))

    ops = {n["op"] for n in chain.get_concrete_function(x).nodes}
    internal = {n for n, e in TABLE.items() if e.kind == "internal"}
    assert internal == {"fused_elementwise", "host_callback"}
    assert internal <= ops, ops
    np.testing.assert_array_equal(chain(x).numpy(), np.maximum(x * x + x, 0))


@pytest.mark.parametrize("name", sorted(registered()))
def test_entry_agrees_with_the_registry(name):
    """Arity, differentiability and in-place updates as ``_C.op_info`` says;
    every entry has cases and a reference."""
    e, info = TABLE.get(name), _C.op_info(name)
    assert e is not None, f"{name} has no entry in tests/op_table.py"
    assert e.cases and e.reference is not None, name
    for c in e.cases:
        assert len(e.inputs(c)) == info["n_in"], (name, c.label)
        assert set(c.attrs) <= set(info["attrs"]), (name, c.label, c.attrs)
    assert (e.grad_wrt is not None) == info["differentiable"], \
        f"{name}: registry says differentiable={info['differentiable']}"
    if e.grad_wrt is not None:
        assert any(c.grad for c in e.cases), f"{name}: no case small enough for gradients"
    assert (e.kind in ("state", "random")) == bool(info["mutates"]), (name, e.kind)
    if e.kind == "random":
        assert e.draws is not None and e.draw_outputs, name


# ---- 2. forward against NumPy -----------------------------------------------------------

def _run_forward(e, case, inputs):
    """The op's results as NumPy: outputs (pure), updated values (state),
    (outputs, state before, state after) (random)."""
    args = _wrap(e, inputs)
    out = _tuple(_C.call(e.name, *args, **case.attrs))
    if e.kind == "state":
        assert out == (), f"{e.name} returns {out}"
        return [args[i].numpy() for i in e.mutated]
    return [o.numpy() for o in out]


@pytest.mark.parametrize("name,label", _params(lambda e: e.kind == "pure"))
def test_forward(name, label):
    """Outputs against the float64 reference within the entry's rtol/atol
    (exact for ops that move, select or compare values)."""
    e, case, inputs = _get(name, label)
    got = _run_forward(e, case, inputs)
    want = _tuple(e.ref(inputs, **case.attrs))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, e.rtol, e.atol, f"{name} [{label}] output {k}", case.bf16_out)


@pytest.mark.parametrize("name,label", _params(lambda e: e.kind == "state"))
def test_state_update(name, label):
    """The updated Variables against the reference of the update itself
    (float64; the float32 update differs by rounding only: rtol 1e-6, exact
    for integer variables); inputs the op does not update stay unchanged."""
    e, case, inputs = _get(name, label)
    before = [np.array(a, copy=True) for a in inputs]
    got = _run_forward(e, case, inputs)
    want = _tuple(e.ref(inputs, **case.attrs))
    assert len(got) == len(want) == len(e.mutated)
    for i, g, w in zip(e.mutated, got, want):
        assert_matches(g, w, e.rtol, e.atol, f"{name} [{label}] input {i}")
    for i, (a, b) in enumerate(zip(inputs, before)):
        np.testing.assert_array_equal(a, b, err_msg=f"{name}: input array {i} changed")


@pytest.mark.parametrize("name,label", _params(lambda e: e.kind == "random"))
def test_random_op(name, label):
    """A random op reports its draws: they must be the Philox streams' draws
    for the state [seed, counter] (philox_ref, exact), the outputs must be the
    reference applied to them (exact for uint8/int moves, entry rtol/atol for
    float arithmetic), and the state's counter must advance by one."""
    e, case, inputs = _get(name, label)
    (si,) = e.mutated
    state = pr.Variable(inputs[si], trainable=False)
    args = list(inputs)
    args[si] = state
    out = [o.numpy() for o in _tuple(_C.call(name, *args, **case.attrs))]
    draws = [out[k] for k in e.draw_outputs]
    for k, (got, want) in enumerate(zip(draws, e.draws(*inputs, **case.attrs))):
        assert_same(got, np.asarray(want, got.dtype), f"{name} [{label}] draw {k}")
    want = _tuple(e.reference(as64(inputs), draws, **case.attrs))
    rest = [o for k, o in enumerate(out) if k not in e.draw_outputs]
    assert len(rest) == len(want)
    for k, (g, w) in enumerate(zip(rest, want)):
        assert_matches(g, w, e.rtol, e.atol, f"{name} [{label}] output {k}", case.bf16_out)
    assert state.numpy().tolist() == [inputs[si][0], inputs[si][1] + 1]


# ---- 3. gradients -----------------------------------------------------------------------

@pytest.mark.parametrize("name,label", _params(lambda e: e.grad_wrt is not None,
                                               lambda e, c: c.grad))
def test_gradient(name, label):
    """The tape's gradient (float32) of sum(f(x) * R) for a random R against
    float64 central differences (step 1e-3) of the NumPy reference; the
    entry's grad tolerance (2e-3, 5e-3 for batch norm) covers float32
    rounding and the O(eps^2) truncation of the difference."""
    e, case, inputs = _get(name, label)
    for i in e.grad_wrt:
        assert inputs[i].dtype == np.float32, f"{name}: input {i} is not float"
    op = lambda *t: _C.call(name, *t, **case.attrs)
    ref = lambda *a: e.reference(*a, **case.attrs)
    for k in e.grad_outputs:
        check_gradients(op, ref, inputs, wrt=list(e.grad_wrt), output=k,
                        rtol=e.grad_rtol, atol=e.grad_atol)


# ---- 4. compiled equals eager ---------------------------------------------------------------

def _compiled_tolerance(e, jit):
    """Bitwise, except where jit_compile's timing may choose another kernel
    variant than eager's first usable one (it sums in another order): there
    the entry's tolerance against NumPy."""
    if jit and len(_C.op_variants(e.name)) > 1:
        return e.rtol, e.atol
    return 0.0, 0.0


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "jit"])
@pytest.mark.parametrize("name,label", _params(lambda e: e.kind != "internal"))
def test_compiled_equals_eager(name, label, jit):
    """The op alone in a ``pyresnet.compile`` function, called twice (the jit
    times kernels on the first call of a shape and runs its choice after):
    the same outputs, Variable updates and RNG draws as two eager calls,
    bitwise (see _compiled_tolerance for the one exception)."""
    e, case, inputs = _get(name, label)
    rtol, atol = _compiled_tolerance(e, jit)
    eager_args, graph_args = _wrap(e, inputs), _wrap(e, inputs)
    fn = pr.compile(lambda *a: _C.call(name, *a, **case.attrs), jit_compile=jit)
    for call in range(2):
        want = _tuple(_C.call(name, *eager_args, **case.attrs))
        got = _tuple(fn(*graph_args))
        assert len(got) == len(want), (len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{name} [{label}] call {call} output {k}", rtol, atol)
        for i in e.mutated:
            assert_same(graph_args[i], eager_args[i], f"{name} [{label}] call {call} input {i}")
        if e.kind == "pure":
            assert_matches(want[0], _tuple(e.ref(inputs, **case.attrs))[0], e.rtol, e.atol,
                           f"{name} [{label}] against NumPy", case.bf16_out)
    assert fn.tracing_count == 1


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "jit"])
@pytest.mark.parametrize("name,label", _params(lambda e: e.grad_wrt is not None,
                                               lambda e, c: c.grad))
def test_compiled_gradient_equals_eager(name, label, jit):
    """A tape inside the compiled function: the gradients of sum(f(x) * R)
    equal the eager tape's, bitwise (within the entry's tolerance where the
    jit may pick another kernel variant of a convolution)."""
    e, case, inputs = _get(name, label)
    y = _tuple(_C.call(name, *inputs, **case.attrs))[0]
    proj = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)

    def grads(*args):
        with pr.GradientTape() as tape:
            for i in e.grad_wrt:
                tape.watch(args[i])
            out = _tuple(_C.call(name, *args, **case.attrs))[0]
            loss = _C.call("sum", _C.call("multiply", out, proj))
        return tape.gradient(loss, [args[i] for i in e.grad_wrt])

    want = grads(*[pr.Tensor(a) for a in inputs])
    got = pr.compile(grads, jit_compile=jit)(*inputs)
    rtol, atol = _compiled_tolerance(e, jit)
    for i, g, w in zip(e.grad_wrt, got, want):
        assert g is not None and w is not None, f"no gradient for input {i}"
        assert_same(g, w, f"{name} [{label}] gradient of input {i}", rtol, atol)


def _fusible(inputs):
    """Whether the fusion pass can take these inputs: float32 (fused kernels
    compute in float32: a bfloat16 activation op stays a node of its own),
    each of the output's shape, one value, or a vector of the output's last
    axis."""
    out = np.broadcast_shapes(*[np.shape(a) for a in inputs])
    return all(a.dtype != bf16 for a in inputs) and all(a.shape == out or a.size == 1 or
               (a.ndim == 1 and out and a.shape[0] == out[-1]) for a in inputs)


@pytest.mark.parametrize("name,label", _params(
    lambda e: e.kind == "pure" and _C.op_info(e.name)["flags"] & 4))
def test_fused_chain_equals_eager(name, label):
    """The internal fused_elementwise op, driven by the table: relu(-op(...))
    under jit_compile becomes one fused node wherever the op is one of
    FUSED_OPS and the shapes fit, and gives the eager chain's bits (fused
    kernels do the same float32 operations in the same order)."""
    e, case, inputs = _get(name, label)

    def chain(*a):
        return _C.call("relu", _C.call("negative", _C.call(name, *a, **case.attrs)))

    fn = pr.compile(chain, jit_compile=True)
    ops = [n["op"] for n in fn.get_concrete_function(*inputs).nodes]
    assert "fused_elementwise" in ops, ops
    if name in FUSED_OPS and _fusible(inputs):
        assert ops == ["fused_elementwise"], ops
    assert_same(fn(*inputs), chain(*inputs), f"{name} [{label}] fused chain")


# ---- 5. kernel variants ---------------------------------------------------------------------

def _has_variants(e):
    return e.kind != "internal" and bool(_C.op_variants(e.name))


@pytest.mark.parametrize("name,label", _params(_has_variants))
def test_kernel_variants_equal_the_reference(name, label):
    """Every variant this CPU can run (``_C.op_variants``: priority order,
    reference last) on the table's awkward shapes: the reference variant
    against NumPy and each other variant against both within the entry's
    tolerance (they sum in another order); the eager call runs the first
    variant that can take the shapes, bit for bit.  A variant that cannot
    run raises ValueError: always under PYRESNET_KERNELS=reference, and
    when the CPU lacks its features."""
    e, case, inputs = _get(name, label)
    variants = _C.op_variants(name)
    want = e.ref(inputs, **case.attrs)
    ref_name, ref_cpu = variants[-1]
    assert ref_cpu, "the reference variant runs on every CPU"
    reference = _C.run_variant(name, ref_name, *inputs, **case.attrs).numpy()
    assert_matches(reference, want, e.rtol, e.atol, f"{name} [{label}] {ref_name} vs NumPy",
                   case.bf16_out)
    runs = []
    for v, cpu_ok in variants[:-1]:
        try:
            out = _C.run_variant(name, v, *inputs, **case.attrs).numpy()
        except ValueError as err:
            assert f"kernel variant '{v}' cannot run these inputs on this CPU" in str(err)
            continue
        assert cpu_ok and not CPU["reference_only"], f"{v} ran though it should not"
        assert_same(out, reference, f"{name} [{label}] {v} vs {ref_name}", e.rtol, e.atol)
        assert_matches(out, want, e.rtol, e.atol, f"{name} [{label}] {v} vs NumPy",
                       case.bf16_out)
        runs.append((v, out))
    first = runs[0][1] if runs else reference
    assert_same(_C.call(name, *inputs, **case.attrs).numpy(), first,
                f"{name} [{label}] eager vs first usable variant")


@pytest.mark.parametrize("name", [e.name for e in TABLE.values() if _has_variants(e)])
def test_fast_variants_run_on_the_table_shapes(name):
    """Not vacuous: each non-reference variant whose CPU features are present
    runs on at least half of the table's shapes of its dtype (the others are
    past its limits, e.g. windows over 7x7), unless PYRESNET_KERNELS=reference,
    where none may run.  A variant named ``*_bf16`` takes the calls with a
    bfloat16 operand (ops.h), the others the float32 calls; one named
    ``*_grouped`` or ``*_grouped*_bf16`` the calls of more than one group (of
    its dtype), the others the calls of one group (so that grouped shapes
    added for the grouped kernels do not count against the direct ones);
    ``avx2_pointwise`` the 1x1 windows at stride 1, on CPUs without AVX-512
    (where it runs none)."""
    e = TABLE[name]

    def pointwise(c):  # a 1x1 window at stride 1
        window = e.inputs(c)[1].shape if name != "conv2d_backprop_filter" else c.attrs["shape"]
        return tuple(window[:2]) == (1, 1) and set(c.attrs.get("strides", [1])) == {1}

    for v, cpu_ok in _C.op_variants(name)[:-1]:
        ran = 0
        cases = [c for c in e.cases
                 if any(a.dtype == bf16 for a in e.inputs(c)) == v.endswith("_bf16")
                 and (c.attrs.get("groups", 1) > 1) == ("_grouped" in v)
                 and (v != "avx2_pointwise" or pointwise(c))]
        assert cases, f"{name}: no case of the dtype {v} takes"
        if v == "avx2_pointwise" and "avx512f" in CPU["features"]:
            cpu_ok = False  # the AVX-512 CPUs keep OpenBLAS's sgemm for these
        for c in cases:
            try:
                _C.run_variant(name, v, *e.inputs(c), **c.attrs)
                ran += 1
            except ValueError:
                pass
        if CPU["reference_only"] or not cpu_ok:
            assert ran == 0, f"{v} ran under reference-only kernels or without its CPU features"
        else:
            assert 2 * ran >= len(cases), f"{v} ran on only {ran} of {len(cases)} shapes"


def test_ops_without_variants_refuse_run_variant():
    """run_variant names an op's variants only; an op with one kernel has none."""
    assert _C.op_variants("add") == []
    with pytest.raises(ValueError, match="add: has no kernel variant 'reference'"):
        _C.run_variant("add", "reference", np.ones(2, np.float32), np.ones(2, np.float32))
