"""The random draws of the augmentation ops, tested as draws.

For each random op, over one batch of N = 70,000 tiny images (past 2**16, so
every bit of the 32-bit image index that names a Philox stream is used):

* the parameters the op reports equal an independent, vectorised NumPy
  recomputation of the documented formula on Philox-4x32-10
  (csrc/kernels/rng.h: stream i = image i, below(n) = floor(u n / 2^32),
  normal = Box-Muller on two uniforms), word for word;
* the op's output equals the output those *recomputed* draws give (not the
  ones it reports), so an op cannot use one draw and report another;
* exact bounds: every value of the documented range is drawn and nothing
  outside it (crop offsets in [0, H + 2 pad - h], cutout centres in
  [0, H - 1] x [0, W - 1], flips in {0, 1}, boxes inside the image);
* the distribution: counts against the uniform law (chi-square at the
  0.999 quantile), moments for the normal and beta draws.

The per-case checks of the op table (tests/test_op_table.py) use small
batches; tests/test_augment.py checks the op formulas.
"""
import math

import numpy as np
import pytest

from pyresnet.ops import augment as A
from philox_ref import Stream, mixup_draws, philox4x32, resized_crop_box

N = 70_000
SEED, COUNTER = 2**37 + 99, 2**32 + 5  # both halves of the seed and of the counter in use


def words(n, blocks=1, seed=SEED, counter=COUNTER):
    """(n, 4 * blocks) uint64: the first words of streams 0..n-1 (vectorised Philox)."""
    i = np.arange(n, dtype=np.uint64)
    out = []
    for j in range(blocks):
        ctr = np.stack([np.full(n, counter & 0xFFFFFFFF, np.uint64),
                        np.full(n, counter >> 32, np.uint64), i,
                        np.full(n, j, np.uint64)], -1)
        key = np.broadcast_to(np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint64), (n, 2))
        out.append(philox4x32(ctr, key).astype(np.uint64))
    return np.concatenate(out, -1)


def below(u, n):
    return ((u * np.uint64(n)) >> np.uint64(32)).astype(np.int64)


def uniform(u):
    return (u.astype(np.float64) + 0.5) * 2.0**-32


def state():
    s = A.rng_state(SEED)
    s.assign(np.array([SEED, COUNTER], np.int64))
    return s


def chi_square_ok(values, k):
    """values uniform over 0..k-1: chi-square below the 0.999 quantile (Wilson-Hilferty)."""
    if k == 1:
        return bool((values == 0).all()), 0.0, 0.0
    counts = np.bincount(values, minlength=k)
    expected = len(values) / k
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = k - 1
    q999 = dof * (1 - 2 / (9 * dof) + 3.09 * math.sqrt(2 / (9 * dof))) ** 3
    return chi2 < q999, chi2, q999


def check_uniform_ints(drawn, lo, hi, what):
    """Exactly the integers lo..hi, each about equally often."""
    assert drawn.min() == lo and drawn.max() == hi, f"{what}: drawn {drawn.min()}..{drawn.max()}, " \
                                                    f"allowed {lo}..{hi}"
    assert set(np.unique(drawn)) == set(range(lo, hi + 1)), what
    ok, chi2, q = chi_square_ok(drawn - lo, hi - lo + 1)
    assert ok, f"{what}: chi-square {chi2:.1f} above {q:.1f}"


def test_flip_draws():
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 1, 2, 1)  # one row of two pixels
    y, flags = A.random_flip(x, state(), "horizontal", return_params=True)
    w = words(N)
    want = np.stack([below(w[:, 0], 2), np.zeros(N, np.int64)], -1)
    np.testing.assert_array_equal(flags.numpy(), want)
    check_uniform_ints(want[:, 0], 0, 1, "horizontal flip")
    np.testing.assert_array_equal(y.numpy(), np.where(want[:, 0, None, None, None] == 1,
                                                      x[:, :, ::-1], x))
    _, flags = A.random_flip(np.zeros((N, 1, 1, 1), np.uint8), state(),
                             "horizontal_and_vertical", return_params=True)
    both = np.stack([below(w[:, 0], 2), below(w[:, 1], 2)], -1)
    np.testing.assert_array_equal(flags.numpy(), both)
    check_uniform_ints(both[:, 0] * 2 + both[:, 1], 0, 3, "flip pairs")  # independent


@pytest.mark.parametrize("hw,size,padding,mode", [
    ((1, 1), (1, 1), (3, 3), "zero"),          # offsets 0..6, crops wholly in the padding
    ((5, 4), (2, 3), (1, 2), "reflect"),       # offsets 0..5 x 0..5
    ((6, 6), (6, 6), (4, 4), "zero"),          # the CIFAR recipe's shape, scaled down
    ((3, 9), (3, 1), (0, 0), "zero"),          # no padding: 0..0 x 0..8
])
def test_crop_draws(hw, size, padding, mode):
    h, w = hw
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (N, h, w, 1), dtype=np.uint8)
    y, off = A.random_crop(x, state(), size, padding=padding, padding_mode=mode,
                           return_params=True)
    ry, rx = h + 2 * padding[0] - size[0] + 1, w + 2 * padding[1] - size[1] + 1
    u = words(N)
    oy, ox = below(u[:, 0], ry), below(u[:, 1], rx)
    np.testing.assert_array_equal(off.numpy(), np.stack([oy, ox], -1))
    check_uniform_ints(oy, 0, ry - 1, "crop row offset")
    check_uniform_ints(ox, 0, rx - 1, "crop column offset")
    padded = np.pad(x, ((0, 0), (padding[0],) * 2, (padding[1],) * 2, (0, 0)),
                    mode="constant" if mode == "zero" else "reflect")
    rows = oy[:, None] + np.arange(size[0])
    cols = ox[:, None] + np.arange(size[1])
    want = padded[np.arange(N)[:, None, None], rows[:, :, None], cols[:, None, :]]
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("hw,size", [((5, 7), (2, 3)), ((1, 3), (1, 1)), ((4, 4), (9, 9))])
def test_cutout_centre_draws(hw, size):
    h, w = hw
    x = np.ones((N, h, w, 1), np.float32)
    y, centres = A.cutout(x, state(), size, fill=0.0, return_params=True)
    u = words(N)
    cy, cx = below(u[:, 0], h), below(u[:, 1], w)
    np.testing.assert_array_equal(centres.numpy(), np.stack([cy, cx], -1))
    check_uniform_ints(cy, 0, h - 1, "cutout centre row")
    check_uniform_ints(cx, 0, w - 1, "cutout centre column")
    r, c = np.arange(h)[None, :, None], np.arange(w)[None, None, :]
    y0, x0 = (cy - size[0] // 2)[:, None, None], (cx - size[1] // 2)[:, None, None]
    inside = (r >= y0) & (r < y0 + size[0]) & (c >= x0) & (c < x0 + size[1])
    np.testing.assert_array_equal(y.numpy()[..., 0], np.where(inside, 0.0, 1.0))


def test_lighting_draws():
    stddev = 0.1
    x = np.zeros((N, 1, 1, 3), np.float32)
    y, alpha = A.random_lighting(x, np.ones(3), np.eye(3), state(), stddev=stddev,
                                 return_params=True)
    u = uniform(words(N, blocks=2))
    want = np.stack([stddev * np.sqrt(-2 * np.log(u[:, 2 * j])) * np.cos(2 * np.pi * u[:, 2 * j + 1])
                     for j in range(3)], -1).astype(np.float32)
    np.testing.assert_allclose(alpha.numpy(), want, rtol=1e-6, atol=1e-9)
    a = want.astype(np.float64)
    # Box-Muller on (u + 0.5) / 2^32 cannot exceed sqrt(-2 ln(2^-33)) standard deviations
    assert np.abs(a).max() <= stddev * math.sqrt(-2 * math.log(0.5 * 2.0**-32))
    assert np.all(np.abs(a.mean(0)) < 4 * stddev / math.sqrt(N))
    assert np.all(np.abs(a.std(0) / stddev - 1) < 4 * math.sqrt(0.5 / N))
    assert np.all(np.abs((a**4).mean(0) / stddev**4 - 3) < 0.1)  # normal kurtosis
    np.testing.assert_allclose(y.numpy()[:, 0, 0], want, rtol=1e-6, atol=1e-7)  # eigvec = I


def test_resized_crop_box_draws():
    n, h, w = 3000, 12, 9
    _, boxes = A.random_resized_crop(np.zeros((n, h, w, 1), np.uint8), state(), 4,
                                     area_factor=(0.2, 0.6), return_params=True)
    boxes = boxes.numpy()
    want = np.array([resized_crop_box(Stream(SEED, COUNTER, i), h, w, (0.2, 0.6), (3 / 4, 4 / 3))
                     for i in range(n)])
    np.testing.assert_array_equal(boxes, want)
    top, left, bh, bw = boxes.T
    assert top.min() == 0 and left.min() == 0 and (top + bh).max() == h and (left + bw).max() == w
    assert (top >= 0).all() and (left >= 0).all() and (top + bh <= h).all() and (left + bw <= w).all()
    assert (bh >= 1).all() and (bw >= 1).all()
    # every top offset the box allows is drawn, uniformly (boxes of one height)
    for height in np.unique(bh):
        tops = top[bh == height]
        if len(tops) >= 50 * (h - height + 1):
            check_uniform_ints(tops, 0, h - height, f"top of boxes of height {height}")


@pytest.mark.parametrize("alpha", [0.2, 2.0])
def test_mixup_draws(alpha):
    n = 3000
    _, _, lam, perm = A.mixup(np.zeros((n, 1), np.float32), np.zeros(n, np.int32), state(),
                              alpha=alpha, num_classes=2, per_sample=True, return_params=True)
    want_lam, want_perm = mixup_draws(n, alpha, True, SEED, COUNTER)
    np.testing.assert_array_equal(lam.numpy(), want_lam)
    np.testing.assert_array_equal(perm.numpy(), want_perm)
    assert sorted(want_perm) == list(range(n))
    lam = want_lam.astype(np.float64)
    assert (lam >= 0).all() and (lam <= 1).all()
    var = 1 / (4 * (2 * alpha + 1))  # Beta(a, a)
    assert abs(lam.mean() - 0.5) < 4 * math.sqrt(var / n)
    assert abs(lam.var() / var - 1) < 0.1
    if alpha < 1:  # U-shaped: both ends are reached
        assert lam.min() < 1e-3 and lam.max() > 1 - 1e-3
    # the permutation: where each element goes is uniform over the positions
    ok, chi2, q = chi_square_ok(np.argsort(want_perm) % 10, 10)
    assert ok, (chi2, q)
