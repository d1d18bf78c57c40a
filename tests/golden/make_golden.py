"""Make the golden file for tests/test_golden.py with PyTorch (not needed to
run the tests).

A CIFAR ResNet-8 (He et al. 2015, section 4.2: 16/32/64 filters, one
ResidualBlock per stage, projection shortcuts as pyresnet.layers.ResidualBlock
builds them) on a fixed batch of 4 real CIFAR-10 images cropped to 16x16: the
initial weights, the logits, the mean sparse cross-entropy, every weight
gradient, and the weights after three SGD(0.1, momentum=0.9) steps.

TensorFlow/Keras conventions are reproduced in PyTorch where they differ:
padding="same" with stride 2 pads (0, 1) (TF puts the extra row at the end),
BN epsilon 1e-3 and momentum 0.99 (torch momentum 0.01), weights saved HWIO
for convs and (in, out) for dense layers.

    python tests/golden/make_golden.py [--data ../shared/datasets]
"""
import argparse
import pathlib
import pickle

import numpy as np
import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent


def conv(x, w, stride):
    """TF 'same' padding for odd kernels: pad_total split with the extra at the end."""
    k = w.shape[-1]
    size = x.shape[-1]
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    before = total // 2
    x = F.pad(x, (before, total - before, before, total - before))
    return F.conv2d(x, w, stride=stride)


def bn(x, p, name):
    return F.batch_norm(x, None, None, p[name + "/gamma"], p[name + "/beta"], training=True,
                        eps=1e-3)


def forward(p, x):
    h = F.relu(bn(conv(x, p["stem/conv"], 1), p, "stem/bn"))
    for i, (filters, stride) in enumerate([(16, 1), (32, 2), (64, 2)]):
        b = f"block{i}"
        y = F.relu(bn(conv(h, p[b + "/conv1"], stride), p, b + "/bn1"))
        y = bn(conv(y, p[b + "/conv2"], 1), p, b + "/bn2")
        if b + "/shortcut_conv" in p:
            s = bn(conv(h, p[b + "/shortcut_conv"], stride), p, b + "/shortcut_bn")
        else:
            s = h
        h = F.relu(y + s)
    h = h.mean(dim=(2, 3))
    return h @ p["dense/kernel"] + p["dense/bias"]


def init_params(rng):
    p = {}

    def conv_w(name, cin, cout, k):
        std = np.sqrt(2.0 / (k * k * cin))  # he_normal
        p[name] = rng.standard_normal((k, k, cin, cout)) * std

    def bn_w(name, c):
        p[name + "/gamma"] = 1.0 + 0.1 * rng.standard_normal(c)
        p[name + "/beta"] = 0.1 * rng.standard_normal(c)

    conv_w("stem/conv", 3, 16, 3)
    bn_w("stem/bn", 16)
    cin = 16
    for i, (filters, stride) in enumerate([(16, 1), (32, 2), (64, 2)]):
        b = f"block{i}"
        conv_w(b + "/conv1", cin, filters, 3)
        bn_w(b + "/bn1", filters)
        conv_w(b + "/conv2", filters, filters, 3)
        bn_w(b + "/bn2", filters)
        if stride != 1 or cin != filters:
            conv_w(b + "/shortcut_conv", cin, filters, 1)
            bn_w(b + "/shortcut_bn", filters)
        cin = filters
    p["dense/kernel"] = rng.standard_normal((64, 10)) * np.sqrt(1.0 / 64)
    p["dense/bias"] = 0.1 * rng.standard_normal(10)
    return {k: v.astype(np.float32) for k, v in p.items()}


def to_torch(p):
    out = {}
    for k, v in p.items():
        t = torch.tensor(v, dtype=torch.float64)
        if t.ndim == 4:  # HWIO -> OIHW
            t = t.permute(3, 2, 0, 1).contiguous()
        out[k] = t.requires_grad_(True)
    return out


def from_torch(t):
    v = t.detach().numpy()
    return v.transpose(2, 3, 1, 0) if v.ndim == 4 else v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(HERE.parents[2] / "shared" / "datasets"))
    args = ap.parse_args()
    with open(pathlib.Path(args.data) / "cifar-10-batches-py" / "test_batch", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    images = batch[b"data"][:4].reshape(4, 3, 32, 32).transpose(0, 2, 3, 1)[:, 8:24, 8:24, :]
    x = (images.astype(np.float32) / 255.0 - 0.5) / 0.25
    y = np.array(batch[b"labels"][:4], np.int32)

    rng = np.random.default_rng(2015)
    params = init_params(rng)
    golden = {"x": x, "y": y}
    golden.update({"init/" + k: v for k, v in params.items()})

    p = to_torch(params)
    names = sorted(p)
    xt = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2)
    yt = torch.tensor(y, dtype=torch.long)
    logits = forward(p, xt)
    loss = F.cross_entropy(logits, yt)
    grads = torch.autograd.grad(loss, [p[n] for n in names])
    golden["logits"] = logits.detach().numpy().astype(np.float32)
    golden["loss"] = np.float32(loss.item())
    for n, g in zip(names, grads):
        golden["grad/" + n] = from_torch(g).astype(np.float32)

    # Three SGD steps, Keras semantics: v = 0.9 v - lr g; w += v.
    velocity = {n: torch.zeros_like(p[n]) for n in names}
    for _ in range(3):
        loss = F.cross_entropy(forward(p, xt), yt)
        grads = torch.autograd.grad(loss, [p[n] for n in names])
        with torch.no_grad():
            for n, g in zip(names, grads):
                velocity[n] = 0.9 * velocity[n] - 0.1 * g
                p[n] += velocity[n]
    for n in names:
        golden["after3/" + n] = from_torch(p[n]).astype(np.float32)
    np.savez_compressed(HERE / "resnet8_golden.npz", **golden)
    print("wrote", HERE / "resnet8_golden.npz", "loss", float(golden["loss"]))


if __name__ == "__main__":
    main()
