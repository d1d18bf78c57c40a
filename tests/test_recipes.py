"""The pieces of the training recipes: label smoothing, NaN propagation
through relu / batch norm / fit (TerminateOnNaN), pre-activation ResNets."""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers

f32 = np.float32


# ---- label smoothing -------------------------------------------------------------------------

def np_smoothed_ce(labels, logits, ls, from_logits=True):
    """-sum_c t_c log p_c with t = one_hot * (1 - ls) + ls / C, float64."""
    z = logits.astype(np.float64)
    if from_logits:
        logp = z - z.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    else:
        p = np.clip(z / z.sum(1, keepdims=True), 1e-7, 1 - 1e-7)
        logp = np.log(p)
    k = z.shape[1]
    t = np.eye(k)[labels] * (1 - ls) + ls / k
    return -(t * logp).sum(1), t


@pytest.mark.parametrize("ls", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("from_logits", [True, False])
def test_label_smoothing_sparse_and_categorical(rng, ls, from_logits):
    """Both losses against NumPy's smoothed cross-entropy, and the logits'
    gradient against (softmax - smoothed target) / batch."""
    logits = rng.standard_normal((6, 5)).astype(f32)
    if not from_logits:
        logits = np.abs(logits) + f32(0.1)
    labels = rng.integers(0, 5, 6)
    want, target = np_smoothed_ce(labels, logits, ls, from_logits)
    sparse = pr.losses.SparseCategoricalCrossentropy(from_logits=from_logits,
                                                     label_smoothing=ls)
    dense = pr.losses.CategoricalCrossentropy(from_logits=from_logits, label_smoothing=ls)
    onehot = np.eye(5, dtype=f32)[labels]
    for loss, y in ((sparse, labels), (dense, onehot)):
        x = pr.Variable(logits)
        with pr.GradientTape() as tape:
            value = loss(y, x)
        np.testing.assert_allclose(float(value), want.mean(), rtol=2e-6)
        if from_logits:
            z = logits.astype(np.float64)
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            np.testing.assert_allclose(tape.gradient(value, x).numpy(), (p - target) / 6,
                                       rtol=1e-5, atol=1e-7)
        per_sample = pr.losses.get(loss.get_config()["name"]).__class__(
            **{**loss.get_config(), "reduction": "none"})(y, logits)
        np.testing.assert_allclose(per_sample.numpy(), want, rtol=2e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got 1.5"):
        pr.losses.SparseCategoricalCrossentropy(label_smoothing=1.5)


def test_label_smoothing_compiles_and_saves(tmp_path, rng):
    x = rng.standard_normal((24, 4)).astype(f32)
    y = rng.integers(0, 3, 24)
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    model.compile("sgd", pr.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 label_smoothing=0.2))
    compiled = model.evaluate(x, y, verbose=0)
    logits = model.predict(x, verbose=0)
    np.testing.assert_allclose(compiled, np_smoothed_ce(y, logits, 0.2)[0].mean(), rtol=1e-5)
    model.save(tmp_path / "m.keras")
    loaded = pr.models.load_model(tmp_path / "m.keras")
    assert loaded._losses[0].label_smoothing == 0.2
    assert loaded.evaluate(x, y, verbose=0) == pytest.approx(compiled, rel=1e-6)


# ---- NaN and Inf are never hidden ------------------------------------------------------------

def _special(rng, shape):
    """Normal values with NaN, +Inf and -Inf planted in different channels."""
    x = rng.standard_normal(shape).astype(f32)
    x[..., 0].flat[1] = np.nan
    x[..., 1].flat[0] = np.inf      # in the first row: the statistics' shift
    x[..., 2].flat[2] = -np.inf
    x[..., 3].flat[[0, 3]] = [np.inf, -np.inf]
    return x


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (40, 17)], ids=["nhwc", "wide"])
def test_relu_and_batch_norm_propagate_nan_as_numpy(rng, shape):
    """relu, batch_norm_train's statistics and output, and the fused
    BN+ReLU kernels (train and inference) give NumPy's NaN/Inf pattern."""
    x = _special(rng, shape)
    c = shape[-1]
    gamma, beta = np.ones(c, f32), np.zeros(c, f32)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(pr.ops.relu(x).numpy(), np.maximum(x, 0))
        axes = tuple(range(x.ndim - 1))
        mean, var = x.astype(np.float64).mean(axes), x.astype(np.float64).var(axes)
        y = (x - mean) / np.sqrt(var + 1e-3)
    for op, relu in (("batch_norm_train", False), ("batch_norm_relu_train", True)):
        out = [t.numpy() for t in pr._C.call(op, x, gamma, beta, epsilon=1e-3)]
        np.testing.assert_allclose(out[1], mean, rtol=1e-5, atol=1e-6, equal_nan=True)
        np.testing.assert_allclose(out[2], var, rtol=1e-5, atol=1e-6, equal_nan=True)
        want = np.maximum(y, 0) if relu else y
        np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(mean[:4]).tolist() == [True, False, False, True] and np.isinf(mean[1:3]).all()
    mv = np.full(c, np.nan, f32)
    out = pr._C.call("batch_norm_relu_infer", x[..., :c], gamma, beta, np.zeros(c, f32), mv,
                     epsilon=1e-3).numpy()
    assert np.isnan(out).all()  # NaN moving variance: every output NaN, none clipped to 0
    g = rng.standard_normal(shape).astype(f32)
    np.testing.assert_array_equal(pr._C.call("relu_backward", g, np.maximum(x, 0)).numpy(),
                                  np.where(np.maximum(x, 0) <= 0, 0, g))


@pytest.mark.parametrize("mode", ["eager", "compiled", "jit"])
def test_nan_batch_gives_nan_loss_and_terminate_on_nan_stops(rng, mode, capsys):
    """A conv-BN-ReLU net: one NaN image in the second batch makes that
    batch's loss NaN (fit reports it), TerminateOnNaN stops after it; without
    the callback the epoch's loss is NaN and so are the weights."""
    x = rng.standard_normal((32, 6, 6, 3)).astype(f32)
    y = rng.integers(0, 3, 32)
    x[9, 2, 3, 1] = np.nan

    def model():
        pr.utils.set_random_seed(0)
        m = pr.Sequential([layers.Input((6, 6, 3)), layers.Conv2D(4, 3, padding="same"),
                           layers.BatchNormalization(), layers.ReLU(),
                           layers.GlobalAveragePooling2D(), layers.Dense(3)])
        m.compile(pr.optimizers.SGD(0.1, momentum=0.9),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=mode == "eager", jit_compile=mode == "jit")
        return m

    m = model()
    losses = []
    rec = pr.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(
        logs["loss"]))
    history = m.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0,
                    callbacks=[rec, pr.callbacks.TerminateOnNaN()])
    assert np.isfinite(losses[0]) and np.isnan(losses[1]) and len(losses) == 2
    assert int(m.optimizer.iterations) == 2 and np.isnan(history.history["loss"][0])
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out
    m = model()
    history = m.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert all(np.isnan(history.history["loss"]))
    assert all(np.isnan(w).any() for w in m.get_weights())  # BN statistics included


# ---- pre-activation ResNets ---------------------------------------------------------------

@pytest.mark.parametrize("shortcut,strides,filters", [("zero_pad", 2, 8), ("projection", 2, 8),
                                                       ("zero_pad", 1, 4)])
def test_pre_activation_block_against_numpy(rng, shortcut, strides, filters):
    """He et al. 2016 fig. 4(e) in NumPy float64 from the block's own weights
    (training mode: batch statistics), and its input gradient is finite."""
    from test_ops_conv import conv_ref
    x = rng.standard_normal((2, 7, 6, 4)).astype(f32)
    block = layers.PreActivationResidualBlock(filters, strides=strides, shortcut=shortcut)
    y = block(x, training=True).numpy()

    def bn_relu(v, bn):
        v = (v - v.mean((0, 1, 2))) / np.sqrt(v.var((0, 1, 2)) + 1e-3)
        return np.maximum(v * bn.gamma.numpy() + bn.beta.numpy(), 0)

    a = bn_relu(x.astype(np.float64), block.bn1)
    h = conv_ref(a, block.conv1.kernel.numpy(), strides, same=True)
    h = conv_ref(bn_relu(h, block.bn2), block.conv2.kernel.numpy(), 1, same=True)
    if shortcut == "projection" and strides == 2:
        short = conv_ref(a, block.shortcut_conv.kernel.numpy(), strides, same=True)
    elif strides == 2:
        short = np.zeros(h.shape)
        short[..., :4] = a[:, ::2, ::2, :]
    else:
        short = x
    np.testing.assert_allclose(y, h + short, rtol=1e-4, atol=1e-4)
    assert y.shape == block.compute_output_shape(x.shape)


def test_preact_resnets_count_and_train(rng):
    for depth in (20, 32, 44, 56, 110):
        fn = getattr(pr.applications, f"preact_resnet{depth}")
        assert fn().count_params() == pr.applications.resnet_cifar(depth).count_params()
    with pytest.raises(ValueError, match="6n \\+ 2"):
        pr.applications.preact_resnet_cifar(21)
    model = pr.applications.preact_resnet_cifar(8, input_shape=(8, 8, 3), num_classes=3,
                                                width=4)
    x = rng.standard_normal((16, 8, 8, 3)).astype(f32)
    y = (x.mean((1, 2, 3)) > 0).astype(np.int32)
    model.compile(pr.optimizers.SGD(0.05, momentum=0.9),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=8, epochs=8, verbose=0)
    assert history.history["loss"][-1] < 0.7 * history.history["loss"][0]
