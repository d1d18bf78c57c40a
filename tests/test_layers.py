"""Layers: the Layer contract (build/call/add_weight/get_config, weights,
names, training flag, input checks) and each built-in layer against NumPy."""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from seeding import seeded_normal as _rand


@pytest.fixture(autouse=True)
def _fresh_session():
    pr.utils.clear_session()
    pr.utils.set_random_seed(1234)


def _snapshot(layer):
    return [np.array(w, copy=True) for w in layer.weights]


def _assert_unchanged(layer, before):
    after = [np.asarray(w) for w in layer.weights]
    assert len(after) == len(before)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


# ---- the Layer base class -------------------------------------------------------


class Scale(layers.Layer):
    """y = x * w + b with per-channel w, b: a minimal Python layer."""

    def build(self, input_shape):
        self.w = self.add_weight((input_shape[-1],), "ones", name="w")
        self.b = self.add_weight((input_shape[-1],), "zeros", name="b")

    def call(self, inputs):
        return inputs * self.w + self.b


class Recorder(layers.Layer):
    """Records the `training` value each call receives."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen = []

    def call(self, inputs, training=None):
        self.seen.append(training)
        return inputs


class Outer(layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Recorder()
        self.forced = Recorder()

    def call(self, inputs, training=None):
        self.forced(inputs, training=False)
        return self.inner(inputs)


def test_default_names_are_unique_snake_case():
    assert [layers.Conv2D(1, 1).name for _ in range(3)] == ["conv2d", "conv2d_1", "conv2d_2"]
    assert layers.BatchNormalization().name == "batch_normalization"
    assert layers.ReLU().name == "re_lu"
    assert layers.GlobalAveragePooling2D().name == "global_average_pooling2d"
    assert layers.ResidualBlock(4).name == "residual_block"
    assert Scale().name == "scale"
    assert layers.Dense(2, name="head").name == "head"
    with pytest.raises(TypeError, match="Unrecognized keyword arguments passed to Dense"):
        layers.Dense(2, bogus=1)


def test_custom_layer_builds_on_first_call_and_tracks_weights():
    layer = Scale()
    assert not layer.built and layer.weights == []
    with pytest.raises(ValueError, match="not built"):
        layer.count_params()
    x = _rand(2, 5)
    y = layer(x)
    assert layer.built and layer.count_params() == 10
    assert [w.path for w in layer.weights] == ["scale/w", "scale/b"]
    np.testing.assert_allclose(y.numpy(), x)
    # a Python layer with weights accepts what it was built for
    with pytest.raises(ValueError, match=r'layer "scale".*expected axis -1 of input shape to have '
                                         r"value 5, but received input with shape \(2, 4\)"):
        layer(_rand(2, 4))


def test_sublayer_weights_in_attribute_order_and_freezing():
    class Block(layers.Layer):
        def __init__(self):
            super().__init__()
            self.first = layers.Dense(3)
            self.pair = [layers.BatchNormalization(), layers.Dense(2)]
            self.shared = self.first  # counted once

        def call(self, inputs, training=None):
            return self.pair[1](self.pair[0](self.first(inputs)))

    block = Block()
    block(_rand(4, 6))
    names = [w.path for w in block.weights]
    assert names == ["dense/kernel", "dense/bias", "batch_normalization/gamma",
                     "batch_normalization/beta", "batch_normalization/moving_mean",
                     "batch_normalization/moving_variance", "dense_1/kernel", "dense_1/bias"]
    assert [w.path for w in block.non_trainable_weights] == names[4:6]
    assert len(block.trainable_weights) == 6
    assert block.count_params() == 6 * 3 + 3 + 4 * 3 + 3 * 2 + 2
    block.trainable = False
    assert block.trainable_weights == [] and len(block.non_trainable_weights) == 8
    assert not block.pair[1].kernel.trainable  # tapes no longer watch it
    block.trainable = True
    assert len(block.trainable_weights) == 6


def test_training_flag_propagates_as_keras():
    outer = Outer()
    x = _rand(2, 3)
    outer(x)
    outer(x, training=True)
    outer(x, training=False)
    assert outer.inner.seen == [None, True, False]
    assert outer.forced.seen == [False, False, False]  # an explicit argument wins


def test_call_without_training_argument_and_error_names_the_layer_path():
    class Bad(layers.Layer):
        def __init__(self):
            super().__init__(name="bad")
            self.conv = layers.Conv2D(2, 3, name="inner_conv")

        def call(self, inputs):
            return self.conv(inputs)

    bad = Bad()
    bad(_rand(1, 5, 5, 3))  # no training parameter: still callable with training=
    bad(_rand(1, 5, 5, 3), training=True)
    with pytest.raises(ValueError, match=r'Layer "bad/inner_conv" \(Conv2D\), called on float32 '
                                         r"input of shape \(1, 5, 5, 4\).*value 3"):
        bad(_rand(1, 5, 5, 4))


def test_failed_build_keeps_no_weight():
    class Fragile(layers.Layer):
        def build(self, input_shape):
            self.a = self.add_weight((2,), name="a")
            if input_shape[-1] != 2:
                raise ValueError(f"need 2 features, got {input_shape}")
            self.b = self.add_weight((2,), name="b")

        def call(self, inputs):
            return inputs * self.a * self.b

    layer = Fragile()
    with pytest.raises(ValueError, match=r'Layer "fragile" \(Fragile\).*need 2 features'):
        layer(_rand(1, 3))
    assert not layer.built and layer.weights == [] and not hasattr(layer, "a")
    layer(_rand(1, 2))
    assert [w.name for w in layer.weights] == ["a", "b"]


def test_get_config_roundtrip():
    dense = layers.Dense(7, activation="relu", use_bias=False, name="d")
    config = dense.get_config()
    assert config["units"] == 7 and config["activation"] == "relu" and config["use_bias"] is False
    assert config["name"] == "d" and config["kernel_initializer"] == "glorot_uniform"
    clone = layers.Dense.from_config(config)
    assert clone.units == 7 and not clone.use_bias and not clone.built
    block = layers.ResidualBlock.from_config(layers.ResidualBlock(32, strides=2).get_config())
    assert block.filters == 32 and block.strides == (2, 2)
    bn = layers.BatchNormalization(momentum=0.9, center=False)
    assert layers.BatchNormalization.from_config(bn.get_config()).momentum == 0.9


def test_initializers_are_seeded_and_scaled():
    pr.utils.set_random_seed(7)
    a = layers.Conv2D(64, 3, kernel_initializer="he_normal")
    a(np.zeros((1, 3, 3, 32), np.float32))
    pr.utils.set_random_seed(7)
    b = layers.Conv2D(64, 3, kernel_initializer="he_normal")
    b(np.zeros((1, 3, 3, 32), np.float32))
    np.testing.assert_array_equal(np.asarray(a.kernel), np.asarray(b.kernel))
    k = np.asarray(a.kernel)
    assert abs(k.std() - np.sqrt(2.0 / (3 * 3 * 32))) < 0.01  # He et al. 2015, fan_in
    assert np.abs(k).max() <= 2 * np.sqrt(2.0 / (3 * 3 * 32)) / 0.8796 + 1e-6  # truncated
    dense = layers.Dense(300)
    dense(np.zeros((1, 200), np.float32))
    limit = np.sqrt(6.0 / 500)  # Glorot uniform
    kd = np.asarray(dense.kernel)
    assert kd.max() <= limit and kd.min() >= -limit and kd.max() > 0.95 * limit
    np.testing.assert_array_equal(np.asarray(dense.bias), 0)
    custom = layers.Dense(2, kernel_initializer=lambda shape, dtype: np.full(shape, 0.5))
    custom(np.zeros((1, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(custom.kernel), 0.5)


# ---- built-in layers against NumPy --------------------------------------------------


def test_dense_matches_numpy_on_rank_2_and_3():
    dense = layers.Dense(4, activation="relu")
    x = _rand(2, 3, 5)
    y = dense(x).numpy()
    w, b = np.asarray(dense.kernel, np.float64), np.asarray(dense.bias, np.float64)
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
    assert dense.compute_output_shape((None, 3, 5)) == (None, 3, 4)


def _conv_ref(x, k, stride, padding):
    """NumPy float64 NHWC/HWIO cross-correlation with TensorFlow's padding."""
    kh, kw = k.shape[:2]
    n, h, w, _ = x.shape
    if padding == "same":
        oh, ow = -(-h // stride), -(-w // stride)
        ph, pw = max((oh - 1) * stride + kh - h, 0), max((ow - 1) * stride + kw - w, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, oh, ow, k.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j] = np.tensordot(patch, k, axes=([1, 2, 3], [0, 1, 2]))
    return out


@pytest.mark.parametrize("kernel,stride,padding,size", [(3, 1, "same", 7), (3, 2, "same", 7),
                                                        (3, 2, "valid", 8), (1, 2, "same", 5)])
def test_conv2d_layer_matches_numpy_and_its_output_shape(kernel, stride, padding, size):
    conv = layers.Conv2D(5, kernel, strides=stride, padding=padding, activation="relu",
                         bias_initializer=lambda s, d: np.linspace(-1, 1, s[0]))
    x = _rand(2, size, size, 3)
    y = conv(x).numpy()
    k, b = np.asarray(conv.kernel, np.float64), np.asarray(conv.bias, np.float64)
    np.testing.assert_allclose(y, np.maximum(_conv_ref(x, k, stride, padding) + b, 0),
                               rtol=1e-4, atol=1e-5)
    assert conv.compute_output_shape((None, size, size, 3)) == (None,) + y.shape[1:]
    assert np.asarray(conv.kernel).shape == (kernel, kernel, 3, 5)


def test_pooling_flatten_add_activation_layers():
    x = _rand(2, 6, 5, 3)
    ref = x[:, :6, :4].reshape(2, 3, 2, 2, 2, 3)
    np.testing.assert_allclose(layers.MaxPooling2D()(x).numpy(), ref.max(axis=(2, 4)))
    np.testing.assert_allclose(layers.AveragePooling2D()(x).numpy(), ref.mean(axis=(2, 4)),
                               rtol=1e-6, atol=1e-6)
    same = layers.MaxPooling2D(3, strides=2, padding="same")
    assert same(x).shape == same.compute_output_shape((2, 6, 5, 3)) == (2, 3, 3, 3)
    gap = layers.GlobalAveragePooling2D(keepdims=True)
    np.testing.assert_allclose(gap(x).numpy(), x.mean(axis=(1, 2), keepdims=True), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(layers.Flatten()(x).numpy(), x.reshape(2, -1))
    assert layers.Flatten().compute_output_shape((None, 6, 5, 3)) == (None, 90)
    np.testing.assert_allclose(layers.Add()([x, x, x]).numpy(), 3 * x, rtol=1e-6)
    np.testing.assert_array_equal(layers.ReLU()(x).numpy(), np.maximum(x, 0))
    soft = layers.Activation("softmax")(x).numpy()
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"cannot be added"):
        layers.Add().compute_output_shape([(None, 4), (None, 5)])
    with pytest.raises(ValueError, match="at least 2 inputs"):
        layers.Add()(x)


def test_batch_normalization_training_vs_inference():
    bn = layers.BatchNormalization(momentum=0.9, epsilon=1e-3,
                                   gamma_initializer=lambda s, d: np.full(s, 2.0),
                                   beta_initializer=lambda s, d: np.full(s, 0.5))
    x = (3 + 2 * _rand(8, 4, 4, 6)).astype(np.float32)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=(0, 1, 2)), x64.var(axis=(0, 1, 2))  # biased, as Keras
    y_train = bn(x, training=True).numpy()
    np.testing.assert_allclose(y_train, 2 * (x64 - mean) / np.sqrt(var + 1e-3) + 0.5,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(bn.moving_mean), 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(bn.moving_variance), 0.9 + 0.1 * var, rtol=1e-5)
    for training in (None, False):  # inference: moving statistics, no update
        y = bn(x, training=training).numpy()
        ref = 2 * (x64 - 0.1 * mean) / np.sqrt(0.9 + 0.1 * var + 1e-3) + 0.5
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(bn.moving_mean), 0.1 * mean, rtol=1e-5)
    bn.trainable = False  # a frozen BN runs in inference mode, as Keras
    np.testing.assert_allclose(bn(x, training=True).numpy(), y, rtol=1e-6)
    assert [w.name for w in bn.weights] == ["gamma", "beta", "moving_mean", "moving_variance"]
    assert layers.BatchNormalization().get_config()["momentum"] == 0.99  # Keras defaults
    assert layers.BatchNormalization().get_config()["epsilon"] == 1e-3


def test_residual_block_structure_and_shapes():
    identity = layers.ResidualBlock(8)
    assert identity(_rand(2, 6, 6, 8)).shape == (2, 6, 6, 8)
    assert not identity.projection
    assert identity.count_params() == 2 * (3 * 3 * 8 * 8) + 2 * 4 * 8
    down = layers.ResidualBlock(16, strides=2)
    assert down(_rand(2, 7, 7, 8)).shape == (2, 4, 4, 16)
    assert down.projection and np.asarray(down.shortcut_conv.kernel).shape == (1, 1, 8, 16)
    assert all(c.use_bias is False for c in (down.conv1, down.conv2, down.shortcut_conv))
    widen = layers.ResidualBlock(12)  # channels change: projection at stride 1
    widen.build((None, 5, 5, 4))
    assert widen.built and widen.projection and widen.count_params() > 0
    assert down.compute_output_shape((None, 7, 7, 8)) == (None, 4, 4, 16)
    with pytest.raises(ValueError, match="shortcut"):
        layers.ResidualBlock(4, shortcut="conv")


def test_zero_pad_shortcut_is_the_subsampled_padded_identity():
    block = layers.ResidualBlock(6, strides=2, shortcut="zero_pad")
    x = _rand(2, 7, 7, 4)
    y = block(x, training=True).numpy()
    assert not block.projection and block.count_params() == 9 * 4 * 6 + 9 * 6 * 6 + 4 * 6 * 2
    main = block.bn2(block.conv2(pr.ops.relu(block.bn1(block.conv1(x), training=True))),
                     training=True).numpy()
    short = np.zeros((2, 4, 4, 6), np.float32)
    short[..., :4] = x[:, ::2, ::2, :]  # He et al. 2015 option A
    np.testing.assert_allclose(y, np.maximum(main + short, 0), rtol=1e-5, atol=1e-5)
    with pr.GradientTape() as tape:
        tape.watch(x_t := pr.Tensor(x))
        out = pr.ops.sum(block(x_t, training=True))
    assert tape.gradient(out, x_t).shape == x.shape
    with pytest.raises(ValueError, match="cannot reduce 8 input channels to 6"):
        layers.ResidualBlock(6, shortcut="zero_pad")(_rand(1, 4, 4, 8))


def test_residual_block_matches_its_definition():
    block = layers.ResidualBlock(6, strides=2)
    x = _rand(3, 5, 5, 4)
    for training in (True, False):
        y = block(x, training=training).numpy()

        def bn(layer, v):
            return layer(v, training=training)

        main = bn(block.bn2, block.conv2(pr.ops.relu(bn(block.bn1, block.conv1(x)))))
        short = bn(block.shortcut_bn, block.shortcut_conv(x))
        np.testing.assert_allclose(y, np.maximum(main.numpy() + short.numpy(), 0), rtol=1e-5,
                                   atol=1e-5)


def test_input_checks_name_the_layer_and_both_shapes():
    conv = layers.Conv2D(4, 3, name="c")
    conv(_rand(1, 8, 8, 3))
    before = _snapshot(conv)
    with pytest.raises(ValueError, match=r'"c".*expected ndim=4, found ndim=3.*\(8, 8, 3\).*built '
                                         r"for input shape \(None, 8, 8, 3\)"):
        conv(_rand(8, 8, 3))
    with pytest.raises(ValueError, match=r'"c".*value 3, but received input with shape '
                                         r"\(1, 8, 8, 2\)"):
        conv(_rand(1, 8, 8, 2))
    with pytest.raises(TypeError, match=r'Layer "c" \(Conv2D\), called on int32 input of shape '
                                        r"\(1, 8, 8, 3\).*float32"):
        conv(np.zeros((1, 8, 8, 3), np.int32))
    with pytest.raises(ValueError, match=r'"c".*\(1, 2, 2, 3\)'):
        conv(_rand(1, 2, 2, 3))
    _assert_unchanged(conv, before)
    bn = layers.BatchNormalization(name="bn")
    bn(_rand(4, 2, 2, 3), training=True)
    before = _snapshot(bn)
    with pytest.raises(ValueError, match=r'"bn".*value 3.*\(4, 2, 2, 5\)'):
        bn(_rand(4, 2, 2, 5), training=True)
    _assert_unchanged(bn, before)
    with pytest.raises(ValueError, match=r"`kernel_size`"):
        layers.Conv2D(4, (3, 3, 3))
    with pytest.raises(ValueError, match="padding"):
        layers.MaxPooling2D(padding="full")
