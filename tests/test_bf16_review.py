"""Regressions found reviewing the bfloat16-activation change (bf16act).

* A float32 tensor convolved with a bfloat16 kernel (a float32 Variable
  image, say) must get a float32 gradient: conv2d_backprop_input of two
  bfloat16 operands now returns bfloat16, and the gradient rule handed that
  to the float32 input, which optimizers refuse.
* Layers whose policy computes in float32 (Keras's float32 output layers of
  a mixed_bfloat16 model) must compute in float32 when the bfloat16
  activations of the layers before them arrive: a
  BatchNormalization(dtype="float32") returned bfloat16, and a float32
  Conv2D rounded its float32 kernel to bfloat16.
"""
import ml_dtypes
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers, mixed_precision, ops
from test_mixed_precision import mixed, rounded  # noqa: F401 (mixed: a fixture)
from test_ops_conv import conv_bpi_ref, conv_ref

bf16 = ml_dtypes.bfloat16
f32 = np.float32


def test_float32_input_beside_a_bfloat16_kernel_gets_a_float32_gradient(rng):
    x = pr.Variable(rng.standard_normal((2, 6, 6, 4)).astype(f32))
    k = rng.standard_normal((3, 3, 4, 8)).astype(f32)
    dy = rng.standard_normal((2, 6, 6, 8)).astype(f32)
    with pr.GradientTape() as tape:
        y = ops.conv2d(x, ops.cast(k, "bfloat16"), padding="same")
        loss = ops.sum(ops.multiply(y, dy))
    assert y.dtype == "float32"
    g = tape.gradient(loss, x)
    assert g.dtype == "float32"
    # the product of the rounded operands, summed in float32 (not rounded
    # to bfloat16 afterwards: that would be off by up to 2^-9 relative)
    want = conv_bpi_ref(rounded(dy), rounded(k), x.shape, 1, True)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-4)
    opt = pr.optimizers.SGD(0.5)
    before = x.numpy().copy()
    opt.apply_gradients([(g, x)])
    np.testing.assert_allclose(x.numpy(), before - np.float32(0.5) * g.numpy(), rtol=1e-6,
                               atol=1e-6)


def test_float32_layers_of_a_mixed_model_compute_in_float32(mixed, rng):
    x = rng.standard_normal((2, 6, 6, 3)).astype(f32)
    h = layers.Conv2D(8, 3, padding="same")(x)
    assert h.dtype == "bfloat16"
    hw = h.numpy().astype(np.float64)
    bn = layers.BatchNormalization(dtype="float32")
    y = bn(h, training=True)
    assert y.dtype == "float32"
    mean, var = hw.mean((0, 1, 2)), hw.var((0, 1, 2))
    np.testing.assert_allclose(y.numpy(), (hw - mean) / np.sqrt(var + 1e-3), rtol=1e-4,
                               atol=1e-4)
    assert layers.ReLU(dtype="float32")(h).dtype == "float32"
    head = layers.Conv2D(4, 3, padding="same", use_bias=False, dtype="float32")
    out = head(h)
    assert out.dtype == "float32"
    k = head.kernel.numpy().astype(np.float64)
    # the float32 kernel as it is (rounding it to bfloat16 is off by ~2^-9)
    np.testing.assert_allclose(out.numpy(), conv_ref(hw, k, 1, True), rtol=1e-5, atol=1e-5)


class _Seen(layers.Layer):
    def call(self, x):
        self.seen = x.dtype
        return x


def test_float32_python_layer_sees_float32_after_bfloat16_layers(mixed, rng):
    x = rng.standard_normal((2, 5, 5, 3)).astype(f32)
    h = layers.ReLU()(layers.Conv2D(4, 3)(x))
    assert h.dtype == "bfloat16"
    seen = _Seen(dtype="float32")
    out = seen(h)
    assert seen.seen == "float32" and out.dtype == "float32"
    np.testing.assert_array_equal(out.numpy(), h.numpy().astype(f32))
