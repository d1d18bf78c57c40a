"""The Keras layers built on the new ops: Dropout, Concatenate, Multiply,
Subtract, Average (and their functional forms), LayerNormalization,
DepthwiseConv2D, Conv2D(groups=), ZeroPadding2D, Reshape, Permute, Lambda,
and the new Activation names.  Each against NumPy, in a functional model,
compiled, and saved and loaded."""
import math
import os

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from test_ops_conv import conv_ref

f32 = np.float32


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(f32)


def test_dropout_layer_training_inference_and_seed(rng):
    x = np.ones((64, 100), f32)
    d = layers.Dropout(0.25, seed=7)
    np.testing.assert_array_equal(d(x).numpy(), x)  # inference by default, as Keras
    y1, y2 = d(x, training=True).numpy(), d(x, training=True).numpy()
    assert set(np.unique(y1)) <= {0.0, f32(1 / 0.75)}
    assert abs((y1 == 0).mean() - 0.25) < 0.02 and not np.array_equal(y1, y2)
    np.testing.assert_array_equal(layers.Dropout(0.25, seed=7)(x, training=True).numpy(), y1)
    z = layers.Dropout(0.5, noise_shape=(None, 1), seed=3)(x, training=True).numpy()
    assert (z == z[:, :1]).all()
    assert d.get_config()["rate"] == 0.25 and d.count_params() == 0
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\)"):
        layers.Dropout(1.0)


@pytest.mark.parametrize("layer,fn,n", [
    (layers.Multiply, lambda *a: a[0] * a[1] * a[2], 3), (layers.Subtract, np.subtract, 2),
    (layers.Average, lambda *a: sum(a) / len(a), 3), (layers.Add, lambda *a: sum(a), 2),
])
def test_merge_layers(layer, fn, n, rng):
    xs = [randn(rng, 2, 3, 4) for _ in range(n - 1)] + [randn(rng, 2, 1, 4)]
    inputs = [layers.Input(x.shape[1:]) for x in xs]
    out = layer()(inputs)
    assert out.shape == (None, 3, 4)
    model = pr.Model(inputs, out)
    np.testing.assert_allclose(model.predict(xs, verbose=0), fn(*[x.astype(np.float64)
                                                                 for x in xs]),
                               rtol=1e-6, atol=1e-6)
    if layer is layers.Subtract:
        with pytest.raises(ValueError, match="exactly 2 inputs"):
            layer()([layers.Input((3,))] * 3)


def test_functional_forms_and_concatenate(rng):
    a, b = randn(rng, 2, 3), randn(rng, 2, 5)
    ia, ib = layers.Input((3,)), layers.Input((5,))
    c = layers.concatenate([ia, ib])
    assert c.shape == (None, 8)
    s = layers.add([layers.multiply([c, c]), layers.subtract([c, c]), layers.average([c, c])])
    got = pr.Model([ia, ib], s).predict([a, b], verbose=0)
    cat = np.concatenate([a, b], 1).astype(np.float64)
    np.testing.assert_allclose(got, cat * cat + cat, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="differ outside the concatenation axis"):
        layers.Concatenate(axis=0)([ia, ib])


def test_layer_normalization(rng):
    x = randn(rng, 3, 4, 5)
    ln = layers.LayerNormalization()
    y = ln(x).numpy()
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert [w.shape for w in ln.weights] == [(5,), (5,)]
    ln2 = layers.LayerNormalization(axis=(1, 2), epsilon=1e-5)
    m = x64.mean((1, 2), keepdims=True)
    np.testing.assert_allclose(ln2(x).numpy(), (x64 - m) / np.sqrt(x64.var((1, 2), keepdims=True)
                                                                   + 1e-5), rtol=1e-5, atol=1e-5)
    assert [w.shape for w in ln2.weights] == [(4, 5), (4, 5)]


def test_depthwise_and_grouped_conv_layers(rng):
    x = randn(rng, 2, 6, 5, 4)
    dw = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=True,
                                bias_initializer="ones")
    y = dw(x).numpy()
    k = dw.kernel.numpy()
    assert k.shape == (3, 3, 4, 2) and dw.bias.shape == (8,) and y.shape == (2, 6, 5, 8)
    want = np.concatenate([conv_ref(x[..., c:c + 1].astype(np.float64), k[:, :, c:c + 1, :],
                                    (1, 1), True) for c in range(4)], -1) + 1
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    gc = layers.Conv2D(6, 3, strides=2, groups=2, use_bias=False)
    y = gc(x).numpy()
    k = gc.kernel.numpy()
    assert k.shape == (3, 3, 2, 6)
    want = np.concatenate([conv_ref(x[..., 2 * g:2 * g + 2].astype(np.float64),
                                    k[..., 3 * g:3 * g + 3], (2, 2), False) for g in range(2)], -1)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="groups=3 does not divide the 4 input channels"):
        layers.Conv2D(6, 3, groups=3)(x)


def test_padding_reshape_permute_lambda_and_activations(rng):
    x = randn(rng, 2, 3, 4, 5)
    np.testing.assert_array_equal(layers.ZeroPadding2D(((1, 0), (2, 1)))(x).numpy(),
                                  np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 0))))
    assert layers.ZeroPadding2D(2).compute_output_shape((None, 3, 4, 5)) == (None, 7, 8, 5)
    np.testing.assert_array_equal(layers.Reshape((12, -1))(x).numpy(), x.reshape(2, 12, 5))
    assert layers.Reshape((-1, 5)).compute_output_shape((None, 3, 4, 5)) == (None, 12, 5)
    np.testing.assert_array_equal(layers.Permute((3, 1, 2))(x).numpy(), x.transpose(0, 3, 1, 2))
    np.testing.assert_allclose(layers.Lambda(lambda t, k: t * k, arguments={"k": 2.0})(x).numpy(),
                               2 * x)
    x64 = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-x64))
    for name, want in [("sigmoid", sig), ("tanh", np.tanh(x64)), ("silu", x64 * sig),
                       ("swish", x64 * sig),
                       ("gelu", 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))),
                       ("softmax", np.exp(x64) / np.exp(x64).sum(-1, keepdims=True))]:
        np.testing.assert_allclose(layers.Activation(name)(x).numpy(), want, rtol=2e-6,
                                   atol=2e-6, err_msg=name)


def test_new_layers_train_compiled_and_survive_save_load(rng, tmp_path):
    inputs = layers.Input((8, 8, 4))
    x = layers.ZeroPadding2D(1)(inputs)
    x = layers.DepthwiseConv2D(3)(x)
    x = layers.Conv2D(8, 3, padding="same", groups=2)(x)
    x = layers.LayerNormalization()(x)
    a = layers.Activation("gelu")(x)
    b = layers.Permute((2, 1, 3))(x)
    x = layers.concatenate([a, layers.multiply([b, a])])
    x = layers.Dropout(0.2, seed=1)(x)
    x = layers.Reshape((-1,))(x)
    outputs = layers.Dense(3)(x)
    model = pr.Model(inputs, outputs)
    model.compile(optimizer=pr.optimizers.SGD(0.05),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs, ys = randn(rng, 16, 8, 8, 4), rng.integers(0, 3, 16).astype(np.int32)
    h = model.fit(xs, ys, batch_size=8, epochs=4, verbose=0)
    assert h.history["loss"][-1] < h.history["loss"][0]
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = pr.saving.load_model(path)
    np.testing.assert_array_equal(loaded.predict(xs, verbose=0), model.predict(xs, verbose=0))
