"""Models: the functional graph (several inputs/outputs, shared and nested
layers), Sequential, summary and the CIFAR ResNets."""
import re

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers, ops
from seeding import seeded_normal as _rand


@pytest.fixture(autouse=True)
def _fresh_session():
    pr.utils.clear_session()
    pr.utils.set_random_seed(99)


def _cifar_resnet_trainable_params(n, classes=10):
    """He et al. 2015 sec. 4.2 (6n + 2 layers, option A shortcuts without
    parameters) counted by hand: convs without bias, BN gamma and beta, the
    Dense head."""
    convs = 3 * 3 * 3 * 16 + n * 2 * 9 * 16 * 16
    convs += 9 * 16 * 32 + (2 * n - 1) * 9 * 32 * 32 + 9 * 32 * 64 + (2 * n - 1) * 9 * 64 * 64
    bn_channels = 16 + 2 * n * (16 + 32 + 64)
    return convs + 2 * bn_channels + 64 * classes + classes


@pytest.mark.parametrize("fn,n,paper", [(pr.applications.resnet20, 3, "0.27M"),
                                        (pr.applications.resnet32, 5, "0.46M"),
                                        (pr.applications.resnet56, 9, "0.85M"),
                                        (pr.applications.resnet110, 18, "1.7M")])
def test_cifar_resnet_parameter_counts_match_the_paper(fn, n, paper):
    model = fn()
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == _cifar_resnet_trainable_params(n)
    assert f"{float(f'{trainable / 1e6:.2g}'):g}M" == paper  # table 6, 2 significant digits
    assert model.name == f"resnet{6 * n + 2}"
    blocks = [layer for layer in model.layers if isinstance(layer, layers.ResidualBlock)]
    assert len(blocks) == 3 * n
    assert [b.strides for b in blocks if b.strides != (1, 1)] == [(2, 2), (2, 2)]
    assert not any(b.projection for b in blocks)
    assert model.outputs[0].shape == (None, 10)


def test_resnet_forward_shape_and_bad_depth():
    model = pr.applications.resnet_cifar(8, input_shape=(16, 16, 3), num_classes=7)
    assert model(_rand(2, 16, 16, 3)).shape == (2, 7)
    projected = pr.applications.resnet_cifar(8, shortcut="projection")
    extra = 16 * 32 + 32 * 64 + 4 * (32 + 64)  # two 1x1 convs and their BNs
    assert projected.count_params() == pr.applications.resnet_cifar(8).count_params() + extra
    with pytest.raises(ValueError, match="6n \\+ 2"):
        pr.applications.resnet_cifar(21)


def _copy_weights(src, dst):
    assert [tuple(w.shape) for w in src.weights] == [tuple(w.shape) for w in dst.weights]
    dst.set_weights(src.get_weights())


def test_sequential_equals_functional_with_the_same_weights():
    def stack():
        return [layers.Conv2D(8, 3, padding="same", use_bias=False), layers.BatchNormalization(),
                layers.ReLU(), layers.ResidualBlock(8), layers.ResidualBlock(16, strides=2),
                layers.GlobalAveragePooling2D(), layers.Dense(5)]

    seq = pr.Sequential([layers.Input((9, 9, 3))] + stack())
    inputs = layers.Input((9, 9, 3))
    x = inputs
    for layer in stack():
        x = layer(x)
    fun = pr.Model(inputs, x)
    # random weights everywhere, BN moving statistics included
    rng = np.random.default_rng(5)
    seq.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(np.float32) for w in seq.weights])
    _copy_weights(seq, fun)
    x = _rand(4, 9, 9, 3)
    labels = np.array([0, 3, 4, 1], np.int32)
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    results = []
    for model in (seq, fun):
        np.testing.assert_allclose(model(x).numpy(), model.predict(x, verbose=0), rtol=1e-6)
        with pr.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        results.append((model(x, training=False).numpy(), float(loss),
                        [g.numpy() for g in grads]))
    (out_s, loss_s, grads_s), (out_f, loss_f, grads_f) = results
    np.testing.assert_allclose(out_s, out_f, rtol=1e-5, atol=1e-6)
    assert abs(loss_s - loss_f) < 1e-5
    assert len(grads_s) == len(grads_f) == len(seq.trainable_weights)
    for gs, gf in zip(grads_s, grads_f):
        np.testing.assert_allclose(gs, gf, rtol=1e-4, atol=1e-6)
    assert seq.count_params() == fun.count_params()


def test_deferred_sequential_builds_on_first_call():
    seq = pr.Sequential()
    seq.add(layers.Dense(4, activation="relu"))
    seq.add(layers.Dense(2))
    assert not seq.built
    with pytest.raises(ValueError, match="not been built"):
        seq.summary()
    y = seq(_rand(3, 6))
    assert seq.built and y.shape == (3, 2) and seq.count_params() == 6 * 4 + 4 + 4 * 2 + 2
    assert [layer.name for layer in seq.layers] == ["dense", "dense_1"]
    with pytest.raises(ValueError, match=r'"sequential".*value 6.*\(3, 5\)'):
        seq(_rand(3, 5))
    seq2 = pr.Sequential([layers.Dense(3, input_shape=(4,))])
    assert seq2.built and seq2.outputs[0].shape == (None, 3)
    clone = pr.Sequential.from_config(seq2.get_config())
    assert clone.built and clone.layers[0] is not seq2.layers[0]
    assert clone.count_params() == seq2.count_params()
    seq2.pop()
    assert seq2.layers == [] and not seq2.built


def test_shared_layer_uses_the_same_weights():
    a, b = layers.Input((3,)), layers.Input((3,))
    shared = layers.Dense(2, use_bias=False, name="shared")
    out = layers.Add()([shared(a), shared(b)])
    model = pr.Model([a, b], out)
    assert model.count_params() == 6 and len(model.trainable_weights) == 1
    xa, xb = _rand(4, 3, seed=1), _rand(4, 3, seed=2)
    w = np.asarray(shared.kernel, np.float64)
    np.testing.assert_allclose(model([xa, xb]).numpy(), xa @ w + xb @ w, rtol=1e-5, atol=1e-6)
    with pr.GradientTape() as tape:
        total = pr.ops.sum(model([xa, xb]))
    (grad,) = tape.gradient(total, model.trainable_weights)
    # d/dW sum(xa W + xb W) = (xa + xb)^T 1: both uses contribute
    np.testing.assert_allclose(grad.numpy(), (xa + xb).sum(0)[:, None].repeat(2, 1), rtol=1e-5)
    assert "multiple" not in pr.models.summary.render(model)  # same output shape twice
    text = pr.models.summary.render(model)
    assert "Connected to" in text and "shared[0][0], shared[1][0]" in text


def test_multi_output_model_and_nesting():
    inputs = layers.Input((4, 4, 2))
    features = layers.Flatten()(layers.Conv2D(3, 3, padding="same")(inputs))
    head_a = layers.Dense(5, name="a")(features)
    head_b = layers.Dense(1, name="b")(features)
    model = pr.Model(inputs, [head_a, head_b], name="two_heads")
    x = _rand(6, 4, 4, 2)
    out_a, out_b = model(x)
    assert out_a.shape == (6, 5) and out_b.shape == (6, 1)
    pred = model.predict(x, batch_size=4, verbose=0)
    assert isinstance(pred, list) and pred[0].shape == (6, 5)
    np.testing.assert_allclose(pred[1], out_b.numpy(), rtol=1e-6)
    # nested: the whole model as one layer of another
    outer_in = layers.Input((4, 4, 2))
    a, b = model(outer_in)
    lift = layers.Dense(5, name="lift")
    outer = pr.Model(outer_in, layers.Add()([a, lift(b)]))
    assert outer.layers[1] is model and len(model._inbound_nodes) == 1
    assert outer.count_params() == model.count_params() + 1 * 5 + 5
    inner_a, inner_b = model(x)
    np.testing.assert_allclose(outer(x).numpy(), (inner_a + lift(inner_b)).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_functional_api_errors():
    a, b = layers.Input((3,)), layers.Input((3,))
    out = layers.Add()([layers.Dense(3)(a), b])
    with pytest.raises(ValueError, match="graph disconnected"):
        pr.Model(a, out)
    with pytest.raises(TypeError, match="KerasTensors"):
        pr.Model(a, np.zeros(3))
    with pytest.raises(ValueError, match="must come from layers.Input"):
        pr.Model(out, out)
    with pytest.raises(TypeError, match="has no value"):
        np.asarray(a)
    dense = layers.Dense(2)
    dense(layers.Input((3,)))
    with pytest.raises(ValueError, match=r"value 3.*\(None, 4\)"):
        dense(layers.Input((4,)))


def test_custom_layer_in_functional_model_gets_its_shape_by_running_once():
    class Double(layers.Layer):
        def call(self, inputs):
            return pr.ops.flatten(inputs + inputs)

    inputs = layers.Input((2, 3))
    model = pr.Model(inputs, layers.Dense(4)(Double()(inputs)))
    assert model.layers[1].compute_output_shape((None, 2, 3)) == (None, 6)
    assert model(_rand(5, 2, 3)).shape == (5, 4)
    with pytest.raises(ValueError, match="define compute_output_shape"):
        Double()(layers.Input((None, 3)))


def test_summary_totals():
    model = pr.applications.resnet20()
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    trainable = _cifar_resnet_trainable_params(3)
    frozen = 2 * (16 + 6 * (16 + 32 + 64))  # BN moving mean and variance
    assert trainable == 269_722 and frozen == 1_376
    assert 'Model: "resnet20"' in text
    assert " Total params: 271,098 (1.03 MB)" in text  # 1,084,392 bytes
    assert " Trainable params: 269,722 (1.03 MB)" in text
    assert " Non-trainable params: 1,376 (5.38 KB)" in text  # 5,504 bytes
    assert "│ residual_block_3 (ResidualBlock)" in text and "(None, 16, 16, 32)" in text
    assert "input_layer (InputLayer)" in text and "dense (Dense)" in text
    assert "Connected to" not in text  # a chain prints three columns
    row = next(r for r in text.splitlines() if "(Dense)" in r)
    assert row.split("│")[3].strip() == "650"
    assert pr.models.summary.readable_memory_size(6272) == "6.12 KB"


def test_subclassed_model_build_and_summary():
    class Net(pr.Model):
        def __init__(self):
            super().__init__(name="net")
            self.conv = layers.Conv2D(4, 3, padding="same")
            self.pool = layers.GlobalAveragePooling2D()
            self.head = layers.Dense(2)

        def call(self, inputs, training=None):
            return self.head(self.pool(self.conv(inputs)))

    net = Net()
    assert net.weights == []
    net.build((None, 6, 6, 3))
    assert net.built and net.count_params() == 3 * 3 * 3 * 4 + 4 + 4 * 2 + 2
    lines = []
    net.summary(print_fn=lines.append)
    assert "conv2d (Conv2D)" in lines[0] and "(None, 6, 6, 4)" in lines[0]
    assert "dense (Dense)" in lines[0] and "(None, 2)" in lines[0]
    assert " Total params: 122 (488.00 B)" in lines[0]
    assert net(_rand(3, 6, 6, 3)).shape == (3, 2)
    inputs = layers.Input((6, 6, 3))
    wrapper = pr.Model(inputs, net(inputs))  # a subclassed model as a layer
    assert wrapper.outputs[0].shape == (None, 2) and wrapper.count_params() == 122


class _TwoPaths(pr.Model):
    """A subclassed model whose call fails for inputs of the wrong width."""

    def __init__(self):
        super().__init__()
        self.dense = layers.Dense(3)
        self.w = pr.Variable(np.ones((5, 3), np.float32), name="w")

    def call(self, x):
        return ops.add(self.dense(x), ops.matmul(x, self.w))


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_subclassed_model_shape_error_names_the_callers_batch(batch):
    """The first call builds the model by running call on a batch of one;
    its shape error used to report that batch (1, 6), not the caller's."""
    model = _TwoPaths()
    with pytest.raises(ValueError, match=re.escape(
            f'Layer "{model.name}" (_TwoPaths), called on float32 input of shape ({batch}, 6): '
            f"matmul: inner dimensions differ: a ({batch}, 6) and b (5, 3)")):
        model(np.zeros((batch, 6), np.float32))
    assert not model.built
    got = model(np.ones((batch, 5), np.float32)).numpy()  # the failed call changed nothing
    np.testing.assert_allclose(got, np.ones((batch, 5)) @ (model.dense.kernel.numpy() + 1)
                               + model.dense.bias.numpy(), rtol=1e-6)
    # once built, a sublayer's message quotes its build shape with any batch
    with pytest.raises(ValueError, match=re.escape(
            f"received input with shape ({batch + 2}, 6) (the layer was built for input shape "
            f"(None, 5))")):
        model(np.zeros((batch + 2, 6), np.float32))
