"""A whole model against PyTorch: the golden file made by
tests/golden/make_golden.py (float64 PyTorch, TF padding and BN conventions)
holds a ResNet-8's initial weights, logits, loss, every gradient and the
weights after three SGD(0.1, momentum=0.9) steps on four real CIFAR-10
images.  pyresnet must reproduce them in float32."""
import pathlib

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers

GOLDEN = np.load(pathlib.Path(__file__).parent / "golden" / "resnet8_golden.npz")


def build():
    inputs = layers.Input((16, 16, 3))
    stem_conv = layers.Conv2D(16, 3, padding="same", use_bias=False)
    stem_bn = layers.BatchNormalization()
    x = layers.ReLU()(stem_bn(stem_conv(inputs)))
    blocks = [layers.ResidualBlock(f, strides=s, shortcut="projection")
              for f, s in [(16, 1), (32, 2), (64, 2)]]
    for block in blocks:
        x = block(x)
    dense = layers.Dense(10)
    outputs = dense(layers.GlobalAveragePooling2D()(x))
    model = pr.Model(inputs, outputs)
    named = {"stem/conv": stem_conv.kernel, "stem/bn/gamma": stem_bn.gamma,
             "stem/bn/beta": stem_bn.beta, "dense/kernel": dense.kernel, "dense/bias": dense.bias}
    for i, b in enumerate(blocks):
        parts = [("conv1", b.conv1), ("conv2", b.conv2)]
        bns = [("bn1", b.bn1), ("bn2", b.bn2)]
        if b.projection:
            parts.append(("shortcut_conv", b.shortcut_conv))
            bns.append(("shortcut_bn", b.shortcut_bn))
        for n, conv in parts:
            named[f"block{i}/{n}"] = conv.kernel
        for n, bn in bns:
            named[f"block{i}/{n}/gamma"] = bn.gamma
            named[f"block{i}/{n}/beta"] = bn.beta
    for name, var in named.items():
        var.assign(GOLDEN["init/" + name])
    return model, named


@pytest.fixture()
def golden_model():
    model, named = build()
    assert sorted(named) == sorted(k[5:] for k in GOLDEN.files if k.startswith("init/"))
    assert len(model.trainable_weights) == len(named)
    return model, named


def loss_and_grads(model, named, x, y):
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    with pr.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    grads = tape.gradient(loss, list(named.values()))
    return logits, loss, dict(zip(named, grads))


def test_logits_loss_and_every_gradient(golden_model):
    model, named = golden_model
    logits, loss, grads = loss_and_grads(model, named, GOLDEN["x"], GOLDEN["y"])
    np.testing.assert_allclose(logits.numpy(), GOLDEN["logits"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(loss), float(GOLDEN["loss"]), rtol=1e-5)
    for name, g in grads.items():
        want = GOLDEN["grad/" + name]
        scale = np.abs(want).max()
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-3, atol=1e-4 * scale,
                                   err_msg=f"gradient of {name}")


def test_weights_after_three_sgd_steps(golden_model):
    model, named = golden_model
    opt = pr.optimizers.SGD(0.1, momentum=0.9)
    for _ in range(3):
        _, _, grads = loss_and_grads(model, named, GOLDEN["x"], GOLDEN["y"])
        opt.apply_gradients([(grads[n], v) for n, v in named.items()])
    for name, var in named.items():
        np.testing.assert_allclose(var.numpy(), GOLDEN["after3/" + name], rtol=1e-3, atol=1e-4,
                                   err_msg=f"weight {name} after 3 steps")
