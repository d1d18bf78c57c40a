"""The issue's done-when: a squeeze-and-excitation block and a small
attention block written by a user as Python layers from ``pyresnet.ops``
alone (operators, indexing, reductions, sigmoid/softmax, matmul) train
inside ``@pyresnet.compile`` and match NumPy references of their forward
pass."""
import math

import numpy as np

import pyresnet as pr
from pyresnet import ops

f32 = np.float32


class SqueezeExcite(pr.layers.Layer):
    """Hu et al. 2018, section 3: channel gates sigmoid(W2 relu(W1 mean(x)))."""

    def __init__(self, ratio=0.5, **kwargs):
        super().__init__(**kwargs)
        self.ratio = ratio

    def build(self, input_shape):
        c = input_shape[-1]
        s = max(1, int(c * self.ratio))
        self.w1 = self.add_weight((c, s), "glorot_uniform", name="w1")
        self.b1 = self.add_weight((s,), "zeros", name="b1")
        self.w2 = self.add_weight((s, c), "glorot_uniform", name="w2")
        self.b2 = self.add_weight((c,), "zeros", name="b2")

    def call(self, x):
        squeezed = ops.mean(x, axis=(1, 2))                      # (N, C)
        h = ops.relu(ops.matmul(squeezed, self.w1) + self.b1)
        gate = ops.sigmoid(ops.matmul(h, self.w2) + self.b2)     # (N, C)
        return x * gate[:, None, None, :]


def se_reference(layer, x):
    w1, b1, w2, b2 = (w.numpy().astype(np.float64) for w in layer.weights)
    h = np.maximum(x.mean((1, 2)) @ w1 + b1, 0)
    return x * (1 / (1 + np.exp(-(h @ w2 + b2))))[:, None, None, :]


class TinySelfAttention(pr.layers.Layer):
    """One head of scaled dot-product self-attention (Vaswani et al. 2017,
    section 3.2.1) with a residual and layer normalization (section 3.1)
    over (N, T, D) sequences."""

    def build(self, input_shape):
        d = input_shape[-1]
        self.wq, self.wk, self.wv, self.wo = (self.add_weight((d, d), "glorot_uniform", name=n)
                                              for n in ("wq", "wk", "wv", "wo"))

    def _dense(self, x, w):
        n, t, d = ops.shape(x)
        return ops.reshape(ops.matmul(ops.reshape(x, (n * t, d)), w), (n, t, d))

    def call(self, x):
        d = x.shape[-1]
        q, k, v = self._dense(x, self.wq), self._dense(x, self.wk), self._dense(x, self.wv)
        scores = (q[:, :, None, :] * k[:, None, :, :]).sum(axis=-1) / math.sqrt(d)   # (N, T, T)
        attn = ops.softmax(scores, axis=-1)
        mixed = (attn[..., None] * v[:, None, :, :]).sum(axis=2)                      # (N, T, D)
        return ops.layer_normalization(x + self._dense(mixed, self.wo), epsilon=1e-5)


def attention_reference(layer, x):
    wq, wk, wv, wo = (w.numpy().astype(np.float64) for w in layer.weights)
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.transpose(0, 2, 1) / math.sqrt(x.shape[-1])
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    y = x + (a @ v) @ wo
    m, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    return (y - m) / np.sqrt(var + 1e-5)


def train_compiled(layer, x, target, steps=25, lr=0.1):
    """A user's compiled training step: tape, gradients, SGD; returns the
    losses and the step function."""
    opt = pr.optimizers.SGD(lr, momentum=0.9)

    @pr.compile
    def step(a, t):
        with pr.GradientTape() as tape:
            loss = ops.mean(ops.square(layer(a) - t))
        grads = tape.gradient(loss, layer.trainable_weights)
        opt.apply_gradients(zip(grads, layer.trainable_weights))
        return loss

    return [float(step(x, target)) for _ in range(steps)], step


def test_squeeze_excite_block_matches_numpy_and_trains_compiled(rng):
    pr.utils.set_random_seed(1)
    x = rng.standard_normal((4, 5, 5, 8)).astype(f32)
    layer = SqueezeExcite()
    y = layer(x).numpy()
    np.testing.assert_allclose(y, se_reference(layer, x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pr.compile(lambda a: layer(a))(x).numpy(), y, rtol=1e-6, atol=1e-6)
    target = (x * rng.uniform(0.2, 0.9, (4, 1, 1, 8))).astype(f32)
    losses, step = train_compiled(layer, x, target, lr=0.5)
    assert step.tracing_count == 1
    assert losses[-1] < 0.6 * losses[0], losses
    np.testing.assert_allclose(layer(x).numpy(), se_reference(layer, x.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)


def test_small_attention_block_matches_numpy_and_trains_compiled(rng):
    pr.utils.set_random_seed(2)
    x = rng.standard_normal((3, 6, 8)).astype(f32)
    layer = TinySelfAttention()
    y = layer(x).numpy()
    np.testing.assert_allclose(y, attention_reference(layer, x.astype(np.float64)), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(pr.compile(lambda a: layer(a))(x).numpy(), y, rtol=1e-5, atol=1e-5)
    target = np.roll(x, 1, axis=1)  # learn to look at the previous position
    target = (target - target.mean(-1, keepdims=True)) / target.std(-1, keepdims=True)
    losses, step = train_compiled(layer, x, target.astype(f32), lr=0.05)
    assert step.tracing_count == 1
    assert losses[-1] < 0.8 * losses[0], losses
    np.testing.assert_allclose(layer(x).numpy(), attention_reference(layer, x.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)
