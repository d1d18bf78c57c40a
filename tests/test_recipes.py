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
