"""Unknown dimensions as symbols (csrc/symdim.c): compiled functions whose
inputs have unknown batch, height and width sizes, against eager execution.

Tolerances as in test_compile.py: compiled graphs run the kernels eager calls
run, so single ops compare at rtol 1e-6 and trained weights at 1e-4.
"""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers, ops


def rng_array(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- compiled fit of layers with large per-image outputs -----------------------------

def _conv_model(filters, size, seed, run_eagerly):
    pr.utils.set_random_seed(seed)
    model = pr.Sequential([layers.Input((size, size, 3)),
                           layers.Conv2D(filters, 3, padding="same"),
                           layers.GlobalAveragePooling2D(), layers.Dense(10)])
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=run_eagerly)
    return model


def _wide_block_model(seed, run_eagerly):
    pr.utils.set_random_seed(seed)
    inputs = layers.Input((32, 32, 3))
    x = layers.Conv2D(64, 3, padding="same", use_bias=False)(inputs)
    x = layers.ResidualBlock(128)(x)              # a wide block: 131,072 values per image
    x = layers.ResidualBlock(128, strides=2)(x)
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(x))
    model = pr.Model(inputs, outputs)
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=run_eagerly)
    return model


@pytest.mark.parametrize("make", [
    lambda eager: _conv_model(64, 32, 1, eager),    # 65,536 values per image
    lambda eager: _conv_model(256, 32, 2, eager),
    lambda eager: _conv_model(64, 64, 3, eager),
    lambda eager: _conv_model(256, 64, 4, eager),   # 1,048,576 values per image
    lambda eager: _wide_block_model(5, eager),
], ids=["conv64-32px", "conv256-32px", "conv64-64px", "conv256-64px", "wide-block"])
def test_compiled_fit_equals_eager_fit_for_large_per_image_outputs(make):
    eager, compiled = make(True), make(False)
    size = eager.inputs[0].shape[1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, size, size, 3)).astype(np.float32)
    y = rng.integers(0, 10, 5).astype(np.int32)
    # batches of 3 and 2: two bindings of the batch symbol, one trace
    h_eager = eager.fit(x, y, batch_size=3, epochs=2, verbose=0, shuffle=False)
    h_compiled = compiled.fit(x, y, batch_size=3, epochs=2, verbose=0, shuffle=False)
    assert isinstance(compiled.train_function, pr.Function)
    assert compiled.train_function.tracing_count == 1
    np.testing.assert_allclose(h_compiled.history["loss"], h_eager.history["loss"], rtol=1e-4)
    for a, b in zip(compiled.weights, eager.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(compiled.predict(x, batch_size=3, verbose=0),
                               eager.predict(x, batch_size=3, verbose=0), rtol=1e-4, atol=1e-5)


# ---- several unknown dimensions ----------------------------------------------------

def _conv_stack_and_grads(x, k1, k2):
    """Stride-2 'same' and 'valid' convolutions, pooling, a mean over the
    unknown sizes and its gradient: every size-dependent rule and attribute."""
    with pr.GradientTape() as tape:
        tape.watch(x)
        h = ops.relu(ops.conv2d(x, k1, strides=2, padding="same"))
        h = ops.conv2d(h, k2, strides=1, padding="valid")
        h = ops.max_pool2d(h, 2, padding="same")
        loss = ops.mean(h * h)
    gx, g1 = tape.gradient(loss, [x, k1])
    return h, loss, gx, g1


@pytest.mark.parametrize("jit", [False, True])
def test_unknown_batch_height_and_width_one_trace(jit):
    k1 = pr.Variable(rng_array(3, 3, 3, 4, seed=1))
    k2 = pr.Variable(rng_array(2, 2, 4, 5, seed=2))
    shapes_seen = []

    def fn(x):
        shapes_seen.append(x.shape)
        return _conv_stack_and_grads(x, k1, k2)

    f = pr.compile(fn, jit_compile=jit,
                   input_signature=[pr.TensorSpec((None, None, None, 3), name="images")])
    for shape in [(2, 9, 11, 3), (3, 16, 16, 3), (1, 7, 5, 3), (2, 9, 11, 3)]:
        x = rng_array(*shape, seed=sum(shape))
        got = f(x)
        want = _conv_stack_and_grads(pr.Tensor(x), k1, k2)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    assert f.tracing_count == 1
    assert shapes_seen == [(None, None, None, 3)]
    graph = f.get_concrete_function(rng_array(1, 7, 5, 3)).graph
    assert graph.symbols == ["batch", "images.dim1", "images.dim2"]
    traced = {v[2] for v in graph.values()}
    assert ("batch", "(images.dim1 + 1)//2", "(images.dim2 + 1)//2", 4) in traced


def test_symbolic_shapes_render_as_none_and_expressions():
    seen = {}

    @pr.compile(input_signature=[pr.TensorSpec((None, 6))])
    def f(x):
        seen["shape"], seen["size"] = x.shape, x.size
        seen["repr"] = repr(ops.reshape(x, (-1, 3)))
        return ops.reshape(x, (-1, 3))

    out = f(rng_array(5, 6))
    assert out.shape == (10, 3)
    assert seen["shape"] == (None, 6) and seen["size"] is None
    assert "shape=(2*batch, 3)" in seen["repr"]


def test_noise_sized_by_ops_shape_has_the_batch_size():
    @pr.compile(reduce_retracing=True)
    def f(x):
        n = ops.shape(x)[0]
        assert isinstance(n, pr.Tensor) and n.dtype == "int32" and n.shape == ()
        noise = ops.broadcast_to(0.5, (n, 3))        # sized by the unknown batch
        return x + noise, ops.reshape(x, (n, 3, 1)), n

    for rows in (4, 7, 1):
        x = rng_array(rows, 3, seed=rows)
        y, r, n = f(x)
        np.testing.assert_array_equal(y.numpy(), x + 0.5)
        assert r.shape == (rows, 3, 1) and int(n) == rows
    assert f.tracing_count == 1
    assert ops.shape(np.zeros((2, 3))) == (2, 3)   # eagerly: plain ints


def test_dense_on_rank3_inputs_with_an_unknown_length():
    pr.utils.set_random_seed(0)
    dense = layers.Dense(4)
    x0 = rng_array(2, 5, 3)
    want = dense(x0).numpy()
    f = pr.compile(lambda x: dense(x), input_signature=[pr.TensorSpec((None, None, 3))])
    np.testing.assert_allclose(f(x0).numpy(), want, rtol=1e-6)
    x1 = rng_array(3, 2, 3, seed=1)
    np.testing.assert_allclose(f(x1).numpy(), dense(x1).numpy(), rtol=1e-6)
    assert f.tracing_count == 1


# ---- errors ------------------------------------------------------------------------

def test_mismatched_bindings_name_both_inputs():
    f = pr.compile(lambda x, y: ops.sparse_softmax_cross_entropy(x, y),
                   input_signature=[pr.TensorSpec((None, 4)), pr.TensorSpec((None,), "int32")])
    assert f(rng_array(3, 4), np.zeros(3, np.int32)).shape == (3,)
    with pytest.raises(ValueError, match=r"input 1 has size 2 in dimension 0 but input 0 has "
                                         r"size 3 in dimension 0.*'batch'"):
        f(rng_array(3, 4), np.zeros(2, np.int32))


def test_shape_rules_reject_what_is_wrong_for_every_size():
    # h - 2 rows against h rows: unequal for every h
    k = np.ones((3, 3, 1, 1), np.float32)
    with pytest.raises(ValueError, match=r"arg0.dim1 - 2.*cannot be broadcast"):
        pr.compile(lambda x: ops.conv2d(x, k) + x,
                   input_signature=[pr.TensorSpec((None, None, None, 1))])(np.ones((1, 5, 5, 1),
                                                                                np.float32))
    with pytest.raises(ValueError, match="channels"):
        pr.compile(lambda x: ops.conv2d(x, np.ones((3, 3, 2, 4), np.float32)),
                   input_signature=[pr.TensorSpec((None, None, None, 3))])(rng_array(1, 5, 5, 3))
    with pytest.raises(ValueError, match=r"cannot reshape.*\(batch, 3\) into shape \(-1, 0\)"):
        pr.compile(lambda x: ops.reshape(x, (-1, 0)),
                   input_signature=[pr.TensorSpec((None, 3))])(rng_array(2, 3))


def test_what_is_right_for_some_sizes_is_checked_per_call():
    """Eager rules apply to each call's sizes: (batch, 3) into (-1, 2) works
    for even batches, two unknown sizes may be added when they agree."""
    f = pr.compile(lambda x: ops.reshape(x, (-1, 2)), input_signature=[pr.TensorSpec((None, 3))])
    np.testing.assert_array_equal(f(np.arange(12, dtype=np.float32).reshape(4, 3)).numpy(),
                                  np.arange(12, dtype=np.float32).reshape(6, 2))
    with pytest.raises(ValueError, match=r"cannot reshape a tensor of shape \(3, 3\) into shape "
                                         r"\(-1, 2\)"):
        f(np.zeros((3, 3), np.float32))
    add = pr.compile(lambda a, b: a + b, input_signature=[pr.TensorSpec((2, None)),
                                                          pr.TensorSpec((2, None))])
    np.testing.assert_array_equal(add(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)).numpy(),
                                  np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        add(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32))
    assert f.tracing_count == 1 and add.tracing_count == 1


def test_nested_floor_divisions_are_one_expression():
    """max_pool(max_pool(x, 2), 2) and max_pool(x, 4) have one symbolic size
    ((h)//4), so their sum traces; a ResNet-D shortcut (average pool then 1x1
    conv) against a stride-2 'same' conv agrees for even sizes."""
    f = pr.compile(lambda x: ops.max_pool2d(ops.max_pool2d(x, 2), 2) + ops.max_pool2d(x, 4),
                   input_signature=[pr.TensorSpec((None, None, None, 2))])
    for hw in [(8, 12), (9, 13)]:
        x = rng_array(2, *hw, 2, seed=hw[0])
        want = ops.max_pool2d(ops.max_pool2d(x, 2), 2) + ops.max_pool2d(x, 4)
        np.testing.assert_array_equal(f(x).numpy(), want.numpy())
    k3, k1 = rng_array(3, 3, 2, 4), rng_array(1, 1, 2, 4)
    g = pr.compile(lambda x: ops.conv2d(x, k3, 2, "same") + ops.conv2d(ops.average_pool2d(x, 2),
                                                                        k1),
                   input_signature=[pr.TensorSpec((None, None, None, 2))])
    x = rng_array(1, 8, 8, 2)
    want = ops.conv2d(x, k3, 2, "same") + ops.conv2d(ops.average_pool2d(x, 2), k1)
    np.testing.assert_allclose(g(x).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cannot be broadcast"):   # odd: 5 rows against 4
        g(rng_array(1, 9, 9, 2))


@pytest.mark.parametrize("pool, sizes", [
    ((2, 2, "valid"), [(6, 10), (10, 6), (8, 8), (7, 9)]),   # rows (h + 1)//4
    ((3, 2, "valid"), [(8, 12), (12, 8), (9, 10), (7, 11)]),  # rows (h - 1)//4
])
def test_nested_floor_division_merge_in_a_compiled_gradient(pool, sizes):
    """The merge floor((floor(R / d) + k) / c) = floor((R + k*d) / (d*c)) on
    a stride-2 'same' convolution (rows floor((h + 1) / 2)) then a max pool:
    2x2 (k = 0: rows (h + 1)//4, where a numerator off by one, (h + 2)//4,
    differs at heights 6 and 10) and 3x3 stride 2 (k = -1: rows (h - 1)//4,
    where k not multiplied by d, h//4, differs at heights 8 and 12).  A wrong
    merge sizes the compiled forward and backward wrongly; the test of the
    rule above checks forward values at sizes where right and wrong agree.
    The gradient through both, compiled once for unknown sizes, equals the
    eager one at every size."""
    k = pr.Variable(rng_array(3, 3, 2, 3, seed=4))
    size, stride, padding = pool

    def loss_and_grads(x):
        with pr.GradientTape() as tape:
            tape.watch(x)
            y = ops.max_pool2d(ops.conv2d(x, k, 2, "same"), size, stride, padding)
            loss = ops.sum(ops.square(y))
        return (y,) + tuple(tape.gradient(loss, [x, k]))

    f = pr.compile(loss_and_grads, input_signature=[pr.TensorSpec((None, None, None, 2))])
    for h, w in sizes:
        x = rng_array(2, h, w, 2, seed=h * w)
        got = f(x)
        want = loss_and_grads(pr.Tensor(x))
        assert got[0].shape == (2, ((h + 1) // 2 - size) // 2 + 1, ((w + 1) // 2 - size) // 2 + 1,
                                3)
        for g, e in zip(got, want):
            assert g.shape == e.shape
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    assert f.tracing_count == 1


def test_what_is_wrong_only_for_some_sizes_raises_at_run_time_as_eager():
    f = pr.compile(lambda x: ops.conv2d(x, np.ones((3, 3, 1, 1), np.float32)),
                   input_signature=[pr.TensorSpec((None, None, None, 1))])
    assert f(np.ones((1, 4, 4, 1), np.float32)).shape == (1, 2, 2, 1)
    with pytest.raises(ValueError, match="empty output"):
        f(np.ones((1, 2, 4, 1), np.float32))           # 3x3 'valid' on 2 rows
    assert f(np.ones((2, 3, 3, 1), np.float32)).shape == (2, 1, 1, 1)
    assert f.tracing_count == 1


def test_sizes_computed_in_a_trace_are_refused_as_static_sizes():
    @pr.compile
    def f(x, rows):
        return ops.reshape(x, (rows, -1))        # a tensor argument, not a known size

    with pytest.raises(TypeError, match="not known when it is traced"):
        f(rng_array(2, 3), np.array(2, np.int32))


def test_placeholder_range_is_not_a_size():
    with pytest.raises(ValueError, match="below the supported"):
        ops.reshape(np.zeros(4, np.float32), (-(1 << 40), 4))


def test_relaxed_arguments_that_are_not_batches():
    """reduce_retracing relaxes the leading size of every argument, kernels and
    variables' values included: rules that need it known at run time only
    accept it while tracing (found by the op-table session)."""
    v = pr.Variable(np.zeros((2, 3), np.float32))
    pr.compile(lambda x: v.assign(x), reduce_retracing=True)(np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(v.numpy(), np.ones((2, 3)))
    conv = pr.compile(lambda x, k, p: ops.conv2d(x, k, padding=p), reduce_retracing=True)
    x, k = rng_array(1, 5, 5, 3), rng_array(3, 3, 3, 4, seed=1)
    for padding in ("same", "valid"):
        np.testing.assert_allclose(conv(x, k, padding).numpy(),
                                   ops.conv2d(x, k, padding=padding).numpy(), rtol=1e-6)
    state = pr.Variable(np.array([0, 0], np.int64), trainable=False)
    light = pr.compile(lambda im, ev, evec: ops.random_lighting(im, ev, evec, state),
                       reduce_retracing=True)
    assert light(np.ones((2, 4, 4, 3), np.float32), np.ones(3, np.float32),
                 np.eye(3, dtype=np.float32)).shape == (2, 4, 4, 3)


def test_arithmetic_on_sizes_makes_sizes():
    """ops.shape's sizes combine with + - * and // by an int, as
    tf.shape(x)[1] * tf.shape(x)[2] does, into sizes shape arguments take."""
    @pr.compile(input_signature=[pr.TensorSpec((None, None, None, 3))])
    def f(x):
        s = ops.shape(x)
        flat = ops.reshape(x, (s[0], s[1] * s[2], 3))
        ones = ops.broadcast_to(1.0, (s[0] * 2 + 1, s[1] // 2))
        return flat, ones, s[1] - 1

    for shape in [(2, 5, 7, 3), (1, 4, 4, 3)]:
        x = rng_array(*shape)
        flat, ones, n = f(x)
        np.testing.assert_array_equal(flat.numpy(), x.reshape(shape[0], -1, 3))
        assert ones.shape == (2 * shape[0] + 1, shape[1] // 2) and int(n) == shape[1] - 1
    assert f.tracing_count == 1
    with pytest.raises(TypeError, match="divisor must be a Python int"):
        pr.compile(lambda x: ops.reshape(x, (ops.shape(x)[0] // ops.shape(x)[0], -1)),
                   reduce_retracing=True)(rng_array(2, 3))
    # eagerly, sizes are ints
    assert ops.shape(rng_array(2, 3))[1] * 2 == 6
