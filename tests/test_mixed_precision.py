"""Keras's mixed_bfloat16 policy: the bfloat16 Tensor dtype and its NumPy
interop (ml_dtypes), the cast op and the widening of bfloat16 inputs,
DTypePolicy / set_global_policy / layer ``dtype=``, and training under the
policy eagerly, compiled, with jit_compile, with fit, saved and loaded.
The kernels themselves (AMX, AVX512_BF16, reference) are tested in
test_bf16_kernels.py.

Error bounds: bfloat16 has an 8-bit significand, so rounding a float32 to
it has relative error at most u16 = 2^-8 (round to nearest); the product of
two bfloat16 numbers is exact in float32 (16 significant bits <= 24), and a
float32 sum of K such products has error at most gamma_K * sum |a_i b_i|
with gamma_K = K u / (1 - K u), u = 2^-24 (Higham, "Accuracy and Stability
of Numerical Algorithms", 2nd ed., section 3.1).
"""
import os

import ml_dtypes
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers, mixed_precision, ops
from test_ops_conv import conv_ref
from train_steps import train_step_fn

bf16 = ml_dtypes.bfloat16
f32 = np.float32
U32 = 2.0 ** -24


def gamma(k):
    return k * U32 / (1 - k * U32)


def rounded(a):
    """float64 of ``a`` rounded to bfloat16."""
    return np.asarray(a, f32).astype(bf16).astype(np.float64)


@pytest.fixture
def mixed():
    """The global policy set to mixed_bfloat16 for one test, then restored."""
    mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        yield
    finally:
        mixed_precision.set_global_policy(None)


# ---- the dtype --------------------------------------------------------------------------

def test_bfloat16_tensor_converts_to_and_from_numpy(rng):
    a = rng.standard_normal((3, 5)).astype(bf16)
    t = pr.Tensor(a)
    assert t.dtype == "bfloat16" and t.shape == (3, 5) and t.nbytes == 30
    v = t.numpy()
    assert v.dtype == bf16
    np.testing.assert_array_equal(v.view(np.uint16), a.view(np.uint16))
    v[0, 0] = 7  # .numpy() is a view
    assert float(pr.Tensor(t.numpy()[0, 0])) == 7.0
    assert np.asarray(t).dtype == bf16
    np.testing.assert_array_equal(np.asarray(t, np.float32), v.astype(np.float32))
    assert pr.convert_to_tensor(np.ones(2, f32), "bfloat16").dtype == "bfloat16"
    assert "dtype=bfloat16" in repr(t)
    with pytest.raises(BufferError, match="bfloat16 has no buffer-protocol format"):
        memoryview(t)
    s = pr.Tensor(np.array(2.5, bf16))
    assert float(s) == 2.5 and int(s) == 2 and bool(s)


def test_cast_rounds_to_nearest_even_and_passes_the_gradient(rng):
    x = rng.standard_normal((4, 33)).astype(f32)
    x[0, :4] = np.array([0x3f808000, 0x3f818000, 0x7f7fffff, 0x7fc00000], np.uint32).view(f32)
    b = ops.cast(x, "bfloat16")
    np.testing.assert_array_equal(b.numpy().view(np.uint16), x.astype(bf16).view(np.uint16))
    np.testing.assert_array_equal(ops.cast(b, np.float32).numpy(), x.astype(bf16).astype(f32))
    with pytest.raises(TypeError, match="dtype must be one of"):
        ops.cast(x, "float16")
    with pytest.raises(TypeError, match="cast: bfloat16 converts to and from float32 only, got "
                                        "int32 to bfloat16"):
        ops.cast(np.arange(3, dtype=np.int32), "bfloat16")
    xv = pr.Variable(x[1:])
    with pr.GradientTape() as tape:
        loss = ops.sum(ops.multiply(ops.cast(xv, "bfloat16"), 3.0))
    (g,) = tape.gradient(loss, [xv])
    assert g.dtype == "float32"
    np.testing.assert_array_equal(g.numpy(), np.full(x[1:].shape, 3.0, f32))


def test_ops_without_bfloat16_kernels_widen_their_inputs(rng):
    """square, multiply, softmax, ... compute in float32 on the exact float32
    value of bfloat16 inputs (a cast the tape and the compiled graph record);
    so do add and relu_backward when their inputs mix float32 and bfloat16."""
    x = rng.standard_normal((5, 7)).astype(bf16)
    y = rng.standard_normal((5, 7)).astype(f32)
    wide = x.astype(f32)
    for name, args, want in (("square", [x], np.square(wide)), ("multiply", [x, x], wide * wide),
                             ("add", [x, y], wide + y),
                             ("relu_backward", [y, x], np.where(wide > 0, y, 0))):
        got = pr.ops.call(name, *args)
        assert got.dtype == "float32"
        np.testing.assert_array_equal(got.numpy(), want)
    f = pr.compile(lambda a: ops.square(a))
    np.testing.assert_array_equal(f(x).numpy(), np.square(wide))
    assert [n["op"] for n in f.get_concrete_function(x).nodes] == ["cast", "square"]


def test_activation_ops_keep_bfloat16(rng):
    """relu, relu_backward and add of bfloat16 inputs return bfloat16 (Keras's
    mixed_bfloat16 activations): the float32 result on the widened values
    rounded once to nearest even, with broadcasting, NaN and infinities;
    compiled and under jit_compile alike, with no cast in the graph."""
    x = rng.standard_normal((4, 6, 6, 17)).astype(f32) * 300
    x[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    y = rng.standard_normal((4, 6, 6, 17)).astype(f32) * 300
    xb, yb, rowb = x.astype(bf16), y.astype(bf16), y[:1, :1, :1].astype(bf16)
    w = lambda a: a.astype(f32)  # noqa: E731
    cases = (("relu", [xb], np.where(w(xb) <= 0, 0, w(xb))),
             ("relu_backward", [yb, xb], np.where(w(xb) <= 0, 0, w(yb))),
             ("add", [xb, yb], w(xb) + w(yb)), ("add", [xb, rowb], w(xb) + w(rowb)))
    for name, args, want in cases:
        for threads in (1, 2):
            with _threads(threads):
                got = pr.ops.call(name, *args)
            assert got.dtype == "bfloat16", name
            np.testing.assert_array_equal(got.numpy().view(np.uint16),
                                          want.astype(bf16).view(np.uint16), err_msg=name)
    assert (w(xb) + w(yb)).astype(bf16).astype(f32).tolist() != (w(xb) + w(yb)).tolist()
    for jit in (False, True):
        f = pr.compile(lambda a, b: ops.relu(ops.add(a, b)), jit_compile=jit)
        got = f(xb, yb)
        assert got.dtype == "bfloat16"
        np.testing.assert_array_equal(got.numpy().view(np.uint16),
                                      np.maximum(w((w(xb) + w(yb)).astype(bf16)), 0)
                                      .astype(bf16).view(np.uint16))
        assert "cast" not in [n["op"] for n in f.get_concrete_function(xb, yb).nodes]


class _threads:
    """Run with n threads, then restore the count."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = pr.get_num_threads()
        pr.set_num_threads(self.n)

    def __exit__(self, *exc):
        pr.set_num_threads(self.old)


def test_matmul_and_conv_compute_in_bfloat16_with_float32_sums(rng):
    """A bfloat16 operand makes the op round both operands to bfloat16 and
    sum in float32: within gamma_K of the float64 result on the rounded
    operands, and within 2 u16 + gamma_K of the unrounded one."""
    a, b = rng.standard_normal((9, 70)).astype(f32), rng.standard_normal((70, 6)).astype(f32)
    got = ops.matmul(a, ops.cast(b, "bfloat16")).numpy()
    assert got.dtype == f32
    scale = np.abs(rounded(a)) @ np.abs(rounded(b))
    assert np.all(np.abs(got - rounded(a) @ rounded(b)) <= gamma(70) * scale)
    exact = a.astype(np.float64) @ b
    assert np.all(np.abs(got - exact) <= (2 * 2 ** -8 + 2 ** -16 + gamma(70)) * scale * 1.01)
    assert np.max(np.abs(got - exact)) > gamma(70) * scale.max()  # really rounded
    x, k = rng.standard_normal((2, 6, 5, 16)).astype(f32), rng.standard_normal((3, 3, 16, 8))
    got = ops.conv2d(x, k.astype(bf16), strides=2, padding="same").numpy()
    want = conv_ref(rounded(x), rounded(k), 2, True)
    bound = gamma(144) * conv_ref(np.abs(rounded(x)), np.abs(rounded(k)), 2, True)
    assert np.all(np.abs(got - want) <= bound)


# ---- the policy ---------------------------------------------------------------------------

def test_dtype_policy_api():
    p = mixed_precision.DTypePolicy("mixed_bfloat16")
    assert (p.name, p.compute_dtype, p.variable_dtype) == ("mixed_bfloat16", "bfloat16",
                                                           "float32")
    assert mixed_precision.DTypePolicy.from_config(p.get_config()) == p
    assert mixed_precision.global_policy().name == "float32"
    for bad in ("bfloat16", "mixed_float16", "float64"):
        with pytest.raises(ValueError, match="unsupported policy"):
            mixed_precision.set_global_policy(bad)
    assert mixed_precision.global_policy().name == "float32"
    with pytest.raises(ValueError, match=r"Dense: dtype: DTypePolicy: unsupported policy 'f16'"):
        layers.Dense(2, dtype="f16")
    dense = layers.Dense(2, dtype="mixed_bfloat16")
    assert (dense.dtype, dense.compute_dtype, dense.variable_dtype) == ("float32", "bfloat16",
                                                                        "float32")
    assert dense.get_config()["dtype"] == "mixed_bfloat16"
    assert layers.Dense.from_config(dense.get_config()).dtype_policy == p
    assert layers.Dense(2).dtype_policy.name == "float32"


def test_layers_follow_the_global_policy_made_under_it(mixed, rng):
    conv = layers.Conv2D(8, 3, padding="same", use_bias=False)
    bn = layers.BatchNormalization()
    block = layers.ResidualBlock(8)
    mixed_precision.set_global_policy("float32")
    plain = layers.Conv2D(8, 3)
    assert conv.compute_dtype == bn.compute_dtype == block.conv1.compute_dtype == "bfloat16"
    assert block.bn2.compute_dtype == "bfloat16" and plain.compute_dtype == "float32"
    x = rng.standard_normal((2, 5, 5, 8)).astype(f32)
    y = conv(x)
    assert y.dtype == "bfloat16" and all(w.dtype == "float32" for w in conv.weights)
    k = conv.kernel.numpy()
    want = conv_ref(rounded(x), rounded(k), 1, True)
    np.testing.assert_allclose(y.numpy().astype(f32), want, rtol=2 ** -8,
                               atol=gamma(72) * np.abs(x).max() * np.abs(k).max() * 72)
    out = bn(y, training=True)
    assert out.dtype == "bfloat16" and all(w.dtype == "float32" for w in bn.weights)
    assert block(x, training=True).dtype == "bfloat16"


class Scale(layers.Layer):
    """A Python layer: y = x @ w; records the dtype its call saw."""

    def build(self, input_shape):
        self.w = self.add_weight((input_shape[-1], 3), initializer="ones")

    def call(self, x):
        self.seen = x.dtype
        return ops.matmul(x, self.w)


def test_python_layers_get_their_inputs_in_the_compute_dtype(mixed, rng):
    layer = Scale()
    x = rng.standard_normal((4, 5)).astype(f32)
    y = layer(x)
    assert layer.seen == "bfloat16" and layer.w.dtype == "float32" and y.dtype == "float32"
    np.testing.assert_allclose(y.numpy(), rounded(x) @ np.ones((5, 3)), rtol=0,
                               atol=gamma(5) * 5 * np.abs(x).max())
    plain = Scale(dtype="float32")
    plain(x)
    assert plain.seen == "float32"
    # a model's outputs are float32 even when its last layer returns bfloat16
    inputs = layers.Input((5,))
    last = Identity()
    model = pr.Model(inputs, last(inputs))
    assert last(x).dtype == "bfloat16" and model(x).dtype == "float32"
    np.testing.assert_array_equal(model(x).numpy(), x.astype(bf16).astype(f32))


class Identity(layers.Layer):
    """A Python layer returning its (autocast) input."""

    def call(self, x):
        return x


def _small_resnet(seed):
    pr.utils.set_random_seed(seed)
    inputs = layers.Input((8, 8, 3))
    x = layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.ResidualBlock(16)(x)
    x = layers.ResidualBlock(32, strides=2, shortcut="zero_pad")(x)
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(x))
    return pr.Model(inputs, outputs)


def _train(model, x, y, steps, compile_kind):
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = pr.optimizers.SGD(0.05, momentum=0.9)
    step = train_step_fn(model, loss_fn, opt)
    if compile_kind != "eager":
        step = pr.compile(step, jit_compile=compile_kind == "jit")
    return [float(step(x, y)) for _ in range(steps)]


def test_training_eager_compiled_and_jit_agree(mixed, rng):
    """Under mixed_bfloat16 the compiled step equals the eager one bit for
    bit (same kernels); jit_compile may choose another bfloat16 kernel
    variant (they agree to float32 summation order), so it is compared with
    a tolerance.  Weights stay float32; the loss falls."""
    x = rng.standard_normal((16, 8, 8, 3)).astype(f32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    runs = {}
    for kind in ("eager", "graph", "jit"):
        model = _small_resnet(3)
        runs[kind] = (_train(model, x, y, 4, kind), model.get_weights())
    assert runs["graph"][0] == runs["eager"][0]
    for a, b in zip(runs["graph"][1], runs["eager"][1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(runs["jit"][0], runs["eager"][0], rtol=1e-3)
    assert runs["eager"][0][-1] < runs["eager"][0][0]
    assert all(w.dtype == np.float32 for w in runs["eager"][1])
    model = _small_resnet(3)
    assert model.layers[1].compute_dtype == "bfloat16"
    graph = pr.compile(lambda a: model(a, training=False))
    ops_run = [n["op"] for n in graph.get_concrete_function(x).nodes]
    # one per conv kernel and the dense kernel, the image to bfloat16, and the
    # last activations back to float32 for the pooling (no bfloat16 kernel)
    assert ops_run.count("cast") == 8
    assert {n["kernel"] for n in graph.get_concrete_function(x).nodes
            if n["op"] == "conv2d"} <= {v for v, _ in pr.config.config()["variants"]["conv2d"]}


def test_fit_save_and_load_keep_float32_weights_and_the_policy(mixed, rng, tmp_path):
    x = rng.standard_normal((32, 8, 8, 3)).astype(f32)
    y = rng.integers(0, 10, 32).astype(np.int32)
    model = _small_resnet(5)
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    mixed_precision.set_global_policy("float32")  # the file carries the policy
    loaded = pr.models.load_model(path)
    assert loaded.layers[1].compute_dtype == "bfloat16"
    for a, b in zip(loaded.get_weights(), model.get_weights()):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert model.predict(x, verbose=0).dtype == np.float32


def test_float32_models_have_no_casts(rng):
    """Under the float32 policy no layer casts anything: the compiled training
    step of a residual network has no cast node (a float32 -> float32 cast
    would copy every activation)."""
    x = rng.standard_normal((4, 8, 8, 3)).astype(f32)
    y = rng.integers(0, 10, 4).astype(np.int32)
    model = _small_resnet(2)
    model.compile(optimizer=pr.optimizers.SGD(0.05),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    step = pr.compile(model.train_step)
    nodes = step.get_concrete_function((x, y)).nodes
    assert any(n["op"] == "conv2d" for n in nodes)
    casts = [n["output_shapes"][0] for n in nodes if n["op"] == "cast"]
    assert all(np.prod(s) <= 1 for s in casts), casts  # the step count's, a scalar, only


# ---- the warning where bfloat16 is slower ---------------------------------------------

def test_bfloat16_hardware_follows_the_probe():
    """bfloat16_hardware names the CPU's bfloat16 features, none under
    PYRESNET_KERNELS=reference; show_config's kernel notice names the
    portable bfloat16 convolution exactly where there are none."""
    from pyresnet._loader import _C

    info = _C.cpu_info()
    want = [] if info["reference_only"] else [
        f for f in ("amx_bf16", "avx512_bf16") if f in info["features"]]
    assert mixed_precision.bfloat16_hardware() == want
    import io

    out = io.StringIO()
    pr.show_config(file=out)
    line = next(ln for ln in out.getvalue().splitlines()
                if ln.startswith("convolution kernels:"))
    reference = _C.op_variants("conv2d")[-1][0]
    assert (f"bfloat16 {reference}, the portable reference" in line) == (not want)


@pytest.mark.parametrize("hardware,vendor,cost", [
    ([], "AuthenticAMD", "0.58x"), (["avx512_bf16"], "AuthenticAMD", None),
    (["avx512_bf16"], "GenuineIntel", "0.74x"),
    (["amx_bf16", "avx512_bf16"], "GenuineIntel", None)])
def test_mixed_bfloat16_warns_once_where_it_is_slower(monkeypatch, hardware, vendor, cost):
    """set_global_policy("mixed_bfloat16") (and so --mixed-precision) warns
    once per process, naming the CPU and the measured cost, on a CPU without
    bfloat16 instructions or with AVX512_BF16 but no AMX on an Intel core
    (VDPBF16PS at half the float32 FMA rate); never where bfloat16 is faster
    (AMX; AVX512_BF16 on AMD Zen 4/5), nor for float32."""
    import warnings

    from pyresnet._loader import _C

    monkeypatch.setattr(mixed_precision, "_warned", [False])
    monkeypatch.setattr(mixed_precision, "bfloat16_hardware", lambda: list(hardware))
    monkeypatch.setattr(mixed_precision, "_cpu_vendor", lambda: vendor)
    try:
        with warnings.catch_warnings(record=True) as first:
            warnings.simplefilter("always")
            mixed_precision.set_global_policy("float32")
            mixed_precision.set_global_policy("mixed_bfloat16")
        with warnings.catch_warnings(record=True) as second:
            warnings.simplefilter("always")
            mixed_precision.set_global_policy("mixed_bfloat16")
    finally:
        mixed_precision.set_global_policy(None)
    assert second == []
    if cost is None:
        assert first == []
    else:
        assert len(first) == 1 and first[0].category is RuntimeWarning
        msg = str(first[0].message)
        assert "slower than float32" in msg and cost in msg
        assert (_C.cpu_info()["brand"].strip() or "this CPU") in msg
        assert first[0].filename == __file__  # points at the caller's line
