"""A NumPy/`math` reference of pyresnet's random streams (csrc/kernels/rng.h):
Philox-4x32-10 (Salmon et al. 2011) and the draws built on it, written from
the formulas, so tests can recompute every parameter an augmentation op draws.
"""
import math

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF
BATCH_STREAM = 0xFFFFFFFF


def philox4x32(ctr, key):
    """Philox-4x32-10 of ctr (..., 4) and key (..., 2) uint32 arrays -> (..., 4) uint32."""
    c = [np.asarray(ctr, np.uint64)[..., i] for i in range(4)]
    k = [np.asarray(key, np.uint64)[..., i] for i in range(2)]
    for r in range(10):
        if r:
            k = [(k[0] + W0) & MASK, (k[1] + W1) & MASK]
        p0, p1 = np.uint64(M0) * c[0], np.uint64(M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k[0], p1 & np.uint64(MASK),
             (p0 >> np.uint64(32)) ^ c[3] ^ k[1], p0 & np.uint64(MASK)]
    return np.stack(c, -1).astype(np.uint32)


class Stream:
    """Words of stream `stream` of one op call with RNG state [seed, counter]."""

    def __init__(self, seed, counter, stream):
        self.key = [seed & MASK, seed >> 32]
        self.ctr = [counter & MASK, (counter >> 32) & MASK, stream, 0]
        self.buf, self.pos = [], 0

    def u32(self):
        if self.pos == len(self.buf):
            self.buf = [int(v) for v in philox4x32(self.ctr, self.key)]
            self.ctr[3] += 1
            self.pos = 0
        self.pos += 1
        return self.buf[self.pos - 1]

    def uniform(self):
        return (self.u32() + 0.5) * 2.0**-32

    def below(self, n):
        return (self.u32() * n) >> 32

    def normal(self):
        u1, u2 = self.uniform(), self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def gamma(self, a):
        if a < 1.0:
            g = self.gamma(a + 1.0)
            return g * self.uniform() ** (1.0 / a)
        d = a - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * d)
        while True:
            x = self.normal()
            v = 1.0 + c * x
            if v <= 0.0:
                continue
            v = v * v * v
            u = self.uniform()
            if math.log(u) < 0.5 * x * x + d - d * v + d * math.log(v):
                return d * v

    def beta(self, a, b):
        x, y = self.gamma(a), self.gamma(b)
        return x / (x + y)


def resized_crop_box(stream, h, w, area, ratio):
    """torchvision RandomResizedCrop.get_params on a Stream."""
    lr0, lr1 = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = h * w * (area[0] + (area[1] - area[0]) * stream.uniform())
        ar = math.exp(lr0 + (lr1 - lr0) * stream.uniform())
        cw, ch = round(math.sqrt(target * ar)), round(math.sqrt(target / ar))
        if 0 < cw <= w and 0 < ch <= h:
            return stream.below(h - ch + 1), stream.below(w - cw + 1), ch, cw
    in_ratio = w / h
    ch, cw = h, w
    if in_ratio < ratio[0]:
        ch = round(w / ratio[0])
    elif in_ratio > ratio[1]:
        cw = round(h * ratio[1])
    ch, cw = min(max(ch, 1), h), min(max(cw, 1), w)
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def mixup_draws(n, alpha, per_sample, seed, counter):
    """(lam float32 (n,), perm (n,)) as the mixup op draws them."""
    s = Stream(seed, counter, BATCH_STREAM)
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = s.below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    if per_sample:
        lam = [Stream(seed, counter, i).beta(alpha, alpha) for i in range(n)]
    else:
        lam = [s.beta(alpha, alpha)] * n
    return np.array(lam, np.float32), np.array(perm)


def buffer_shuffle(n, buffer_size, seed, counter):
    """tf.data's shuffle buffer on the Philox stream (kernels/rng.h): the
    order of n elements through a buffer of ``buffer_size``."""
    s = Stream(seed, counter, 0)
    buf, nxt, out = list(range(min(n, buffer_size))), min(n, buffer_size), []
    while buf:
        k = s.below(len(buf))
        out.append(buf[k])
        if nxt < n:
            buf[k], nxt = nxt, nxt + 1
        else:
            buf[k] = buf[-1]
            buf.pop()
    return out
