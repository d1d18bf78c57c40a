"""Augmentation ops: the Philox streams, each op against a NumPy reference of
its formula on the same draws, the draws' statistics, reproducibility and
argument errors."""
import math
import re

import numpy as np
import pytest

import pyresnet as pr
from pyresnet.ops import augment as A
from seeding import test_rng
from philox_ref import Stream, mixup_draws, philox4x32, resized_crop_box


def images(shape, dtype):
    """Random uint8 pixels or normal float32 values from the test's own generator."""
    if dtype == np.uint8:
        return test_rng().integers(0, 256, shape, dtype=np.uint8)
    return test_rng().standard_normal(shape).astype(np.float32)


def state_values(state):
    return [int(v) for v in state.numpy()]


# ---- the generator -----------------------------------------------------------

def test_philox_known_answers():
    # Random123 tests/kat_vectors, "philox4x32 10" lines.
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in kat:
        assert tuple(int(v) for v in philox4x32(ctr, key)) == want


def test_c_streams_match_reference():
    """Flip flags and crop offsets are below(2) / below(range) of the first
    words of stream i: recomputing them pins the C Philox and stream layout."""
    seed, counter = 2**40 + 12345, 2**33 + 7
    state = pr.Variable(np.array([seed, counter], np.int64), trainable=False)
    x = images((37, 5, 6, 2), np.uint8)
    _, flags = A.random_flip(x, state, "horizontal_and_vertical", return_params=True)
    _, off = A.random_crop(x, state, (4, 3), padding=(2, 1), return_params=True)
    assert state_values(state) == [seed, counter + 2]
    for i in range(37):
        s = Stream(seed, counter, i)
        assert list(flags.numpy()[i]) == [s.below(2), s.below(2)]
        s = Stream(seed, counter + 1, i)
        assert list(off.numpy()[i]) == [s.below(5 + 4 - 4 + 1), s.below(6 + 2 - 3 + 1)]


# ---- each op against NumPy ---------------------------------------------------

@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("mode", ["horizontal", "vertical", "horizontal_and_vertical"])
def test_random_flip(dtype, mode):
    x = images((9, 5, 7, 3), dtype)
    y, flags = A.random_flip(x, A.rng_state(3), mode, return_params=True)
    flags = flags.numpy()
    want = x.copy()
    for i, (fh, fv) in enumerate(flags):
        want[i] = x[i][::-1 if fv else 1, ::-1 if fh else 1]
    assert y.dtype == np.dtype(dtype).name
    np.testing.assert_array_equal(y.numpy(), want)
    assert mode != "horizontal" or not flags[:, 1].any()
    assert mode != "vertical" or not flags[:, 0].any()


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("size,padding,mode", [((32, 32), 4, "zero"), ((5, 3), (2, 1), "reflect"),
                                               ((7, 9), 0, "zero"), ((1, 1), 3, "reflect"),
                                               ((11, 10), (2, 3), "zero")])
def test_random_crop(dtype, size, padding, mode):
    shape = (3, 32, 32, 3) if size == (32, 32) else (4, 7, 9, 2)
    x = images(shape, dtype)
    y, off = A.random_crop(x, A.rng_state(5), size, padding=padding, padding_mode=mode,
                           return_params=True)
    py, px = (padding, padding) if np.isscalar(padding) else padding
    padded = np.pad(x, ((0, 0), (py, py), (px, px), (0, 0)),
                    mode="constant" if mode == "zero" else "reflect")
    want = np.stack([padded[i, oy:oy + size[0], ox:ox + size[1]]
                     for i, (oy, ox) in enumerate(off.numpy())])
    np.testing.assert_array_equal(y.numpy(), want)
    assert (off.numpy() >= 0).all()
    assert (off.numpy()[:, 0] <= shape[1] + 2 * py - size[0]).all()
    assert (off.numpy()[:, 1] <= shape[2] + 2 * px - size[1]).all()


def test_center_crop():
    x = images((2, 7, 8, 3), np.float32)
    np.testing.assert_array_equal(A.center_crop(x, (4, 5)).numpy(), x[:, 1:5, 1:6])
    np.testing.assert_array_equal(A.center_crop(x, (7, 8)).numpy(), x)


def resize_reference(x, boxes, out_h, out_w):
    """Bilinear, half-pixel centres, taps clamped to the box, float32 math in
    the kernel's order."""
    out = np.empty((len(x), out_h, out_w, x.shape[3]), np.float32)
    for i, (top, left, bh, bw) in enumerate(boxes):
        img = x[i, top:top + bh, left:left + bw].astype(np.float32)

        def taps(n_in, n_out):
            s = np.maximum((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0)
            i0 = s.astype(np.int64)
            return i0, np.minimum(i0 + 1, n_in - 1), (s - i0).astype(np.float32)

        y0, y1, h1 = taps(bh, out_h)
        x0, x1, w1 = taps(bw, out_w)
        h1, h0 = h1[:, None, None], np.float32(1) - h1[:, None, None]
        w1, w0 = w1[None, :, None], np.float32(1) - w1[None, :, None]
        a, b = img[y0][:, x0], img[y0][:, x1]
        c, d = img[y1][:, x0], img[y1][:, x1]
        out[i] = h0 * (w0 * a + w1 * b) + h1 * (w0 * c + w1 * d)
    return out


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("shape,size", [((6, 32, 32, 3), (32, 32)), ((5, 13, 9, 2), (7, 11)),
                                        ((1, 4, 5, 1), (9, 3))])
def test_random_resized_crop(dtype, shape, size):
    x = images(shape, dtype)
    seed = 11
    state = A.rng_state(seed)
    y, boxes = A.random_resized_crop(x, state, size, return_params=True)
    want_boxes = [resized_crop_box(Stream(seed, 0, i), shape[1], shape[2], (0.08, 1.0),
                                   (3 / 4, 4 / 3)) for i in range(shape[0])]
    np.testing.assert_array_equal(boxes.numpy(), want_boxes)
    assert y.dtype == "float32"
    np.testing.assert_array_equal(y.numpy(), resize_reference(x, want_boxes, *size))


def test_resized_crop_falls_back_to_central_crop():
    # A box of 90-100% of the area with aspect ratio 3..4 never fits a square
    # image: torchvision's fallback is the central crop at ratio 3.
    x = images((4, 12, 12, 1), np.float32)
    _, boxes = A.random_resized_crop(x, A.rng_state(0), 6, area_factor=(0.9, 1.0),
                                     aspect_ratio=(3.0, 4.0), return_params=True)
    np.testing.assert_array_equal(boxes.numpy(), [[4, 0, 4, 12]] * 4)


def test_resize_bilinear():
    x = images((2, 5, 7, 3), np.uint8)
    np.testing.assert_array_equal(A.resize_bilinear(x, (8, 4)).numpy(),
                                  resize_reference(x, [(0, 0, 5, 7)] * 2, 8, 4))
    np.testing.assert_array_equal(A.resize_bilinear(x, (5, 7)).numpy(), x.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_random_lighting(dtype):
    x = images((7, 5, 6, 3), dtype)
    eigval, eigvec = A.rgb_pca(images((20, 8, 8, 3), np.uint8))
    eigval, eigvec = (eigval * 255).astype(np.float32), eigvec.astype(np.float32)
    seed = 99
    y, alpha = A.random_lighting(x, eigval, eigvec, A.rng_state(seed), stddev=0.1,
                                 return_params=True)
    alpha = alpha.numpy()
    want_alpha = [[np.float32(0.1 * s.normal()) for _ in range(3)]
                  for s in (Stream(seed, 0, i) for i in range(7))]
    np.testing.assert_array_equal(alpha, want_alpha)
    e, a, l = eigvec.astype(np.float64), alpha.astype(np.float64), eigval.astype(np.float64)
    shift = (e[None, :, 0] * a[:, None, 0] * l[0] + e[None, :, 1] * a[:, None, 1] * l[1]
             + e[None, :, 2] * a[:, None, 2] * l[2]).astype(np.float32)
    np.testing.assert_array_equal(y.numpy(), x.astype(np.float32) + shift[:, None, None, :])


def test_rgb_pca():
    x = images((10, 4, 4, 3), np.uint8)
    eigval, eigvec = A.rgb_pca(x, chunk=3)
    cov = np.cov(x.reshape(-1, 3).T.astype(np.float64) / 255, bias=True)
    np.testing.assert_allclose(eigvec @ np.diag(eigval) @ eigvec.T, cov, atol=1e-12)
    assert eigval[0] >= eigval[1] >= eigval[2] >= 0
    np.testing.assert_allclose(eigvec.T @ eigvec, np.eye(3), atol=1e-12)


@pytest.mark.parametrize("shape", [(2, 0, 4, 3), (3, 4, 0, 3)])
def test_rgb_pca_of_images_without_pixels_names_the_shape(shape):
    """Images with no pixels ended in NumPy's LinAlgError."""
    with pytest.raises(ValueError, match=re.escape(f"at least one pixel, got shape {shape}")):
        A.rgb_pca(np.zeros(shape, np.uint8))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_rgb_pca_of_a_non_finite_pixel_names_it(bad):
    """A NaN (or infinite) value ended in NumPy's LinAlgError."""
    x = images((5, 3, 4, 3), np.uint8).astype(np.float32)
    x[3, 1, 2, 1] = bad
    with pytest.raises(ValueError, match=re.escape(f"must be finite, got {bad} at index "
                                                   "(3, 1, 2, 1)")):
        A.rgb_pca(x, chunk=2)


@pytest.mark.parametrize("chunk", [0, -1, -4096, 2.5, True, None])
def test_rgb_pca_chunk_must_be_a_positive_int(chunk):
    """A zero or negative chunk used to end in LinAlgError (no pixel counted)."""
    with pytest.raises(ValueError, match="rgb_pca: chunk must be a positive int .*got "
                                         + re.escape(repr(chunk))):
        A.rgb_pca(images((4, 2, 2, 3), np.uint8), chunk=chunk)


def test_rgb_pca_any_positive_chunk_gives_the_same_result():
    x = images((5, 3, 3, 3), np.uint8)
    whole = A.rgb_pca(x, chunk=5)
    for chunk in (1, 2, np.int64(4), 10**6):
        for got, want in zip(A.rgb_pca(x, chunk=chunk), whole):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


NOT_REAL = [np.array(["2020-01-01"] * 3, "datetime64[D]"), np.array([1, 2, 3], "timedelta64[s]"),
            np.array([1 + 2j, 0, 0]), np.array([True, False, True]), ["a", "b", "c"],
            [None, 1.0, 2.0]]


@pytest.mark.parametrize("bad", NOT_REAL, ids=lambda v: np.asarray(v).dtype.name)
@pytest.mark.parametrize("which", ["mean", "variance"])
def test_normalize_channels_statistics_must_be_real_numbers(bad, which):
    """datetime64 means and variances were cast to day counts; now every
    non-real statistic is refused, by the op and by the layer."""
    x = images((2, 3, 3, 3), np.uint8)
    stats = {"mean": np.zeros(3), "variance": np.ones(3)}
    stats[which] = bad
    dtype = np.asarray(bad).dtype.name
    with pytest.raises(TypeError, match=re.escape(f"normalize_channels: {which} must be real "
                                                  f"numbers (int or float), got {dtype}")):
        A.normalize_channels(x, stats["mean"], stats["variance"])
    with pytest.raises(TypeError, match="random_lighting: eigval must be real numbers"):
        A.random_lighting(x, bad, np.eye(3), A.rng_state(0))
    with pytest.raises(TypeError, match=f"Normalization: {which} must be real numbers"):
        layers.Normalization(**stats)
    # integer statistics are real numbers: accepted as float32
    y = A.normalize_channels(x, [1, 2, 3], np.array([4, 4, 4], np.int64))
    np.testing.assert_array_equal(y.numpy(), (x.astype(np.float32) - [1, 2, 3]) / 2)


@pytest.mark.parametrize("dtype,fill", [(np.uint8, 0), (np.uint8, 128), (np.float32, -1.5)])
@pytest.mark.parametrize("size", [(4, 4), (3, 6), (1, 1), (20, 20)])
def test_cutout(dtype, fill, size):
    x = images((6, 9, 11, 3), dtype)
    y, centres = A.cutout(x, A.rng_state(4), size, fill=fill, return_params=True)
    want = x.copy()
    for i, (cy, cx) in enumerate(centres.numpy()):
        y0, x0 = cy - size[0] // 2, cx - size[1] // 2
        want[i, max(y0, 0):max(y0 + size[0], 0), max(x0, 0):max(x0 + size[1], 0)] = fill
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("per_sample", [False, True])
@pytest.mark.parametrize("label_kind", ["int32", "uint8_column", "soft"])
def test_mixup(per_sample, label_kind):
    n, k, alpha, seed = 10, 4, 0.4, 21
    x = images((n, 3, 2, 3), np.uint8)
    classes = test_rng().integers(0, k, n)
    if label_kind == "soft":
        labels = test_rng().dirichlet(np.ones(k), n).astype(np.float32)
        onehot = labels
    else:
        labels = classes.astype(np.int32) if label_kind == "int32" else \
            classes[:, None].astype(np.uint8)
        onehot = np.eye(k, dtype=np.float32)[classes]
    state = A.rng_state(seed)
    xm, ym, lam, perm = A.mixup(x, labels, state, alpha=alpha,
                                num_classes=None if label_kind == "soft" else k,
                                per_sample=per_sample, return_params=True)
    want_lam, want_perm = mixup_draws(n, alpha, per_sample, seed, 0)
    np.testing.assert_array_equal(lam.numpy(), want_lam)
    np.testing.assert_array_equal(perm.numpy(), want_perm)
    lam_col = want_lam.reshape(n, 1)
    mx = lam_col[:, :, None, None] * x.astype(np.float32) + \
        (np.float32(1) - lam_col)[:, :, None, None] * x[want_perm].astype(np.float32)
    np.testing.assert_array_equal(xm.numpy(), mx)
    np.testing.assert_array_equal(ym.numpy(),
                                  lam_col * onehot + (np.float32(1) - lam_col) * onehot[want_perm])
    np.testing.assert_allclose(ym.numpy().sum(1), 1.0, rtol=1e-6)
    assert sorted(perm.numpy()) == list(range(n))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_normalize_channels(dtype):
    x = images((3, 4, 5, 3), dtype)
    mean = np.array([0.4914, 0.4822, 0.4465], np.float32) * 255
    std = np.array([0.2470, 0.2435, 0.2616], np.float32) * 255
    y = A.normalize_channels(x, mean, std * std)
    np.testing.assert_array_equal(y.numpy(), (x.astype(np.float32) - mean) / np.sqrt(std * std))
    # Keras's floor on the standard deviation
    y = A.normalize_channels(x, mean, np.array([0, 4, 1e-20], np.float32), epsilon=1e-3)
    np.testing.assert_array_equal(
        y.numpy(), (x.astype(np.float32) - mean) / np.array([1e-3, 2, 1e-3], np.float32))


# ---- statistics of the draws ---------------------------------------------------

def chi_square(counts):
    expected = counts.sum() / counts.size
    return ((counts - expected) ** 2 / expected).sum()


def test_flip_rate_and_crop_offsets_are_uniform():
    n = 20000
    x = np.zeros((n, 2, 2, 1), np.uint8)
    state = A.rng_state(7)
    _, flags = A.random_flip(x, state, "horizontal_and_vertical", return_params=True)
    rate = flags.numpy().mean(0)
    assert np.all(np.abs(rate - 0.5) < 4 * math.sqrt(0.25 / n)), rate
    # independent flips: P(both) ~ 1/4
    assert abs(flags.numpy().all(1).mean() - 0.25) < 4 * math.sqrt(0.1875 / n)
    _, off = A.random_crop(np.zeros((n, 32, 32, 1), np.uint8), state, 32, padding=4,
                           return_params=True)
    off = off.numpy()
    for axis in range(2):
        counts = np.bincount(off[:, axis], minlength=9)
        assert len(counts) == 9  # offsets cover exactly 0..8
        assert chi_square(counts) < 26.1  # chi2(8 dof) 0.999 quantile
    joint = np.bincount(off[:, 0] * 9 + off[:, 1], minlength=81)
    assert chi_square(joint) < 124.8  # chi2(80 dof) 0.999 quantile


@pytest.mark.parametrize("alpha", [0.2, 1.0, 2.0])
def test_mixup_lambda_is_beta(alpha):
    n = 20000
    _, _, lam, _ = A.mixup(np.zeros((n, 1), np.float32), np.zeros(n, np.int32),
                           A.rng_state(1), alpha=alpha, num_classes=2, per_sample=True,
                           return_params=True)
    lam = lam.numpy().astype(np.float64)
    var = 1 / (4 * (2 * alpha + 1))  # Beta(a, a): mean 1/2, variance 1/(4(2a+1))
    assert abs(lam.mean() - 0.5) < 4 * math.sqrt(var / n)
    assert abs(lam.var() - var) < 0.1 * var
    assert lam.min() >= 0 and lam.max() <= 1


def test_lighting_alpha_is_normal():
    n = 10000
    _, alpha = A.random_lighting(np.zeros((n, 1, 1, 3), np.float32), np.ones(3), np.eye(3),
                                 A.rng_state(2), stddev=0.1, return_params=True)
    a = alpha.numpy().astype(np.float64)
    assert np.all(np.abs(a.mean(0)) < 4 * 0.1 / math.sqrt(n))
    assert np.all(np.abs(a.std(0) - 0.1) < 0.005)


def test_resized_crop_boxes_respect_ranges():
    n, h, w = 5000, 40, 30
    _, boxes = A.random_resized_crop(np.zeros((n, h, w, 1), np.uint8), A.rng_state(3), 8,
                                     area_factor=(0.25, 0.5), return_params=True)
    top, left, bh, bw = boxes.numpy().T
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + bh <= h).all() and (left + bw <= w).all()
    area = bh * bw / (h * w)
    # rounding the sides to integers moves the area by at most a few percent
    assert area.min() > 0.22 and area.max() < 0.54
    log_ratio = np.log(bw / bh)
    assert log_ratio.min() > math.log(3 / 4) - 0.1 and log_ratio.max() < math.log(4 / 3) + 0.1
    assert abs(np.median(log_ratio)) < 0.05  # log-uniform: symmetric around 0


# ---- reproducibility -------------------------------------------------------------

def test_same_seed_same_results_and_counter_advances():
    x = images((8, 12, 12, 3), np.uint8)

    def run(seed):
        s = A.rng_state(seed)
        a = A.random_resized_crop(x, s, 10)
        b = A.random_resized_crop(x, s, 10)
        return a.numpy(), b.numpy(), state_values(s)

    a1, b1, s1 = run(5)
    a2, b2, s2 = run(5)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    assert s1 == s2 == [5, 2]
    assert not np.array_equal(a1, b1)  # the second call drew new numbers
    assert not np.array_equal(a1, run(6)[0])


def test_results_do_not_depend_on_thread_count():
    x = images((64, 32, 32, 3), np.uint8)
    before = pr.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            pr.set_num_threads(threads)
            s = A.rng_state(8)
            outs.append([A.random_resized_crop(x, s, 32).numpy(),
                         A.random_crop(x, s, 32, padding=4).numpy(),
                         A.mixup(x, np.arange(64) % 10, s, num_classes=10)[0].numpy()])
    finally:
        pr.set_num_threads(before)
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            np.testing.assert_array_equal(a, b)


# ---- errors --------------------------------------------------------------------

def test_bad_arguments_raise_and_leave_state_alone():
    x = images((2, 8, 8, 3), np.uint8)
    s = A.rng_state(0)
    cases = [
        (ValueError, "area", lambda: A.random_resized_crop(x, s, 4, area_factor=(0.0, 1.0))),
        (ValueError, "area", lambda: A.random_resized_crop(x, s, 4, area_factor=(0.5, 1.5))),
        (ValueError, "area", lambda: A.random_resized_crop(x, s, 4, area_factor=(0.8, 0.5))),
        (ValueError, "aspect", lambda: A.random_resized_crop(x, s, 4, aspect_ratio=(2, 1))),
        (ValueError, "larger than the padded image", lambda: A.random_crop(x, s, 11, padding=1)),
        (ValueError, "padding_mode", lambda: A.random_crop(x, s, 8, 1, "mirror")),
        (ValueError, "fill_mode", lambda: A.random_affine(x, s, fill_mode="symmetric")),
        (ValueError, "interpolation", lambda: A.random_affine(x, s, interpolation="cubic")),
        (ValueError, "height range", lambda: A.random_affine(x, s, height_factor=(-2, 0))),
        (ValueError, "zoom height", lambda: A.random_affine(x, s, zoom_height=(0, 1))),
        (ValueError, "\\(N, 8\\)", lambda: A.affine_transform(x, np.zeros((2, 6)))),
        (ValueError, "contrast factor", lambda: A.random_contrast(x, s, (2, 1))),
        (ValueError, "value range", lambda: A.random_contrast(x, s, (1, 2), (5, 1))),
        (ValueError, "indices", lambda: A.alternating_flip(x, [0, 1, 2], s)),
        (ValueError, r"outside \[0, 2\*\*32\)", lambda: A.alternating_flip(x, [0, -1], s)),
        (ValueError, "padding", lambda: A.random_crop(x, s, 8, -1)),
        (ValueError, "rank 4", lambda: A.random_flip(x[0], s)),
        (TypeError, "uint8 or float32", lambda: A.random_flip(x.astype(np.int32), s)),
        (TypeError, "RNG state", lambda: A.random_flip(x, pr.Variable(np.zeros(2, np.float32)))),
        (TypeError, "Variable", lambda: A.random_flip(x, np.array([0, 0], np.int64))),
        (ValueError, "mode", lambda: A.random_flip(x, s, "diagonal")),
        (ValueError, "3 \\(RGB\\) channels", lambda: A.random_lighting(x[..., :2], np.ones(3),
                                                                    np.eye(3), s)),
        (ValueError, "eigvec", lambda: A.random_lighting(x, np.ones(3), np.eye(2), s)),
        (ValueError, "alpha", lambda: A.mixup(x, [0, 1], s, alpha=0.0, num_classes=2)),
        (ValueError, "num_classes", lambda: A.mixup(x, [0, 1], s)),
        (ValueError, "outside \\[0, 2\\)", lambda: A.mixup(x, np.array([0, 2]), s, num_classes=2)),
        (ValueError, "shape", lambda: A.mixup(x, np.array([0, 1, 1]), s, num_classes=2)),
        (ValueError, "fill", lambda: A.cutout(x, s, 2, fill=300)),
        (ValueError, "positive", lambda: A.cutout(x, s, 0)),
        (ValueError, "mean", lambda: A.normalize_channels(x, np.zeros(2), np.ones(3))),
        (ValueError, "larger than|exceeds|padded", lambda: A.center_crop(x, 9)),
    ]
    for exc, match, fn in cases:
        with pytest.raises(exc, match=match):
            fn()
    assert state_values(s) == [0, 0]
    with pytest.raises(ValueError, match="seed"):
        A.rng_state(-1)


# ---- preprocessing layers ---------------------------------------------------------

from pyresnet import layers  # noqa: E402


def layer_cases():
    eigval, eigvec = (0.2, 0.02, 0.004), np.linalg.qr(np.arange(9.0).reshape(3, 3) + np.eye(3))[0]
    return [
        (layers.RandomFlip("horizontal", seed=1),
         lambda x, s: A.random_flip(x, s, "horizontal")),
        (layers.RandomCrop(6, 5, seed=2, padding=(2, 1), padding_mode="reflect"),
         lambda x, s: A.random_crop(x, s, (6, 5), (2, 1), "reflect")),
        (layers.RandomResizedCrop((5, 7), crop_area_factor=(0.3, 0.9), seed=3),
         lambda x, s: A.random_resized_crop(x, s, (5, 7), (0.3, 0.9))),
        (layers.RandomLighting(eigval, eigvec, stddev=0.2, seed=4),
         lambda x, s: A.random_lighting(x, np.array(eigval) * 255, eigvec, s, 0.2)),
        (layers.CutOut(3, fill_value=7, seed=5), lambda x, s: A.cutout(x, s, 3, 7)),
    ]


@pytest.mark.parametrize("index", range(5))
def test_layers_run_their_op_when_training(index):
    layer, op = layer_cases()[index]
    x = images((4, 8, 9, 3), np.uint8)
    twin = type(layer).from_config(layer.get_config())  # same seed, fresh state
    assert twin.get_config() == layer.get_config()
    state = A.rng_state(layer.seed)
    for _ in range(2):  # each call draws new numbers, as the op on the same state
        np.testing.assert_array_equal(layer(x, training=True).numpy(), op(x, state).numpy())
    np.testing.assert_array_equal(twin(x).numpy(), op(x, A.rng_state(layer.seed)).numpy())
    assert layer.weights == []  # the RNG state is not a weight
    out = layer(x, training=False)
    if isinstance(layer, layers.RandomCrop):
        np.testing.assert_array_equal(out.numpy(), x[:, 1:7, 2:7])
    elif isinstance(layer, layers.RandomResizedCrop):
        np.testing.assert_array_equal(out.numpy(), A.resize_bilinear(x, (5, 7)).numpy())
    else:
        np.testing.assert_array_equal(out.numpy(), x)
    assert layer.compute_output_shape((None, 8, 9, 3)) == (None,) + out.shape[1:]


def test_layer_argument_errors():
    for make, match in [(lambda: layers.RandomFlip("sideways"), "mode"),
                        (lambda: layers.RandomCrop(4, 4, padding_mode="mirror"), "padding_mode"),
                        (lambda: layers.RandomCrop(0, 4), "positive"),
                        (lambda: layers.RandomResizedCrop((4, 4), crop_area_factor=(0, 1)),
                         "crop_area_factor"),
                        (lambda: layers.RandomResizedCrop((4, 4), crop_area_factor=(0.5, 2)),
                         "crop_area_factor"),
                        (lambda: layers.RandomResizedCrop((4, 4), aspect_ratio_factor=(2, 1)),
                         "aspect_ratio_factor"),
                        (lambda: layers.RandomLighting(eigval=(1, 2)), "eigval"),
                        (lambda: layers.MixUp(alpha=0), "alpha"),
                        (lambda: layers.CutOut(0), "size"),
                        (lambda: layers.Normalization(mean=[1.0]), "both")]:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(ValueError, match="larger than the padded image"):
        layers.RandomCrop(9, 9)(images((1, 4, 4, 3), np.uint8))
    with pytest.raises(TypeError, match="uint8 or float32"):
        layers.RandomFlip()(np.zeros((1, 4, 4, 3), np.int32))


def test_mixup_layer():
    x, y = images((6, 4, 4, 3), np.float32), np.arange(6) % 3
    layer = layers.MixUp(0.3, num_classes=3, seed=8)
    xm, ym = layer((x, y))
    want = A.mixup(x, y.astype(np.int32), A.rng_state(8), alpha=0.3, num_classes=3)
    np.testing.assert_array_equal(xm.numpy(), want[0].numpy())
    np.testing.assert_array_equal(ym.numpy(), want[1].numpy())
    xi, yi = layer((x, y), training=False)
    np.testing.assert_array_equal(xi.numpy(), x)
    assert layer.compute_output_shape(((None, 4, 4, 3), (None,))) == ((None, 4, 4, 3), (None, 3))
    assert layers.MixUp.from_config(layer.get_config()).get_config() == layer.get_config()


def test_normalization_adapt_and_config():
    x = images((20, 5, 5, 3), np.uint8)
    norm = layers.Normalization()
    norm.adapt(x, batch_size=7)
    values = x.reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), values.mean(0), rtol=1e-6)
    np.testing.assert_allclose(norm.variance.numpy(), values.var(0), rtol=1e-5)
    out = norm(x, training=False).numpy()  # active at inference too
    np.testing.assert_allclose(out.reshape(-1, 3).mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(out.reshape(-1, 3).std(0), 1, atol=1e-4)
    from pyresnet.data import Dataset
    from_ds = layers.Normalization()
    from_ds.adapt(Dataset.from_tensor_slices((x, np.zeros(20, np.int32))).batch(6))
    np.testing.assert_allclose(from_ds.mean.numpy(), norm.mean.numpy(), rtol=1e-6)
    given = layers.Normalization(mean=[1, 2, 3], variance=[4, 9, 16])
    np.testing.assert_allclose(given(np.ones((1, 2, 2, 3), np.float32)).numpy()[0, 0, 0],
                               [0, -1 / 3, -0.5], rtol=1e-6)
    again = layers.Normalization.from_config(given.get_config())
    np.testing.assert_array_equal(again(x).numpy(), given(x).numpy())
    assert sorted(w.name for w in given.weights) == ["mean", "variance"]
    with pytest.raises(ValueError, match="channels|axis"):
        given(np.ones((1, 2, 2, 4), np.float32))


def test_layers_in_sequential_and_functional_models():
    x = images((3, 10, 10, 3), np.uint8)
    augment = [layers.RandomCrop(8, 8, seed=1, padding=1), layers.RandomFlip(seed=2),
               layers.Normalization(mean=[0, 0, 0], variance=[1, 1, 1])]
    model = pr.Sequential(augment)
    trained, inferred = model(x, training=True).numpy(), model(x, training=False).numpy()
    assert trained.shape == inferred.shape == (3, 8, 8, 3)
    np.testing.assert_array_equal(inferred, x[:, 1:9, 1:9].astype(np.float32))
    crop, flip = A.rng_state(1), A.rng_state(2)
    want = A.random_flip(A.random_crop(x, crop, 8, 1), flip, "horizontal_and_vertical")
    np.testing.assert_array_equal(trained, want.numpy().astype(np.float32))
    inputs = layers.Input((10, 10, 3))
    outputs = layers.RandomResizedCrop((6, 6), seed=3)(layers.RandomFlip(seed=4)(inputs))
    functional = pr.Model(inputs, outputs)
    assert functional(x, training=True).shape == (3, 6, 6, 3)
    np.testing.assert_array_equal(functional(x, training=False).numpy(),
                                  A.resize_bilinear(x, 6).numpy())


def test_layer_on_a_single_image():
    x = images((1, 6, 6, 3), np.uint8)
    crop = layers.RandomCrop(4, 4, seed=1, padding=1)
    one = crop(x[0], training=True)
    assert one.shape == (4, 4, 3)
    np.testing.assert_array_equal(one.numpy(), A.random_crop(x, A.rng_state(1), 4, 1).numpy()[0])
    np.testing.assert_array_equal(crop(x[0], training=False).numpy(), x[0, 1:5, 1:5])


@pytest.mark.parametrize("jit_compile", [False, True])
def test_compiled_steps_draw_fresh_numbers_like_eager(jit_compile):
    x = images((4, 10, 10, 3), np.uint8)
    labels = np.arange(4, dtype=np.int32) % 3

    def make():
        return ([layers.RandomCrop(8, 8, seed=1, padding=1), layers.RandomFlip(seed=2),
                 layers.RandomResizedCrop((6, 6), seed=3), layers.RandomLighting(seed=4),
                 layers.CutOut(2, seed=5)], layers.MixUp(0.5, num_classes=3, seed=6))

    def run(augment, mixup, x, y):
        for layer in augment:
            x = layer(x, training=True)
        return mixup((x, y), training=True)

    compiled_layers, eager_layers = make(), make()
    step = pr.compile(lambda x, y: run(*compiled_layers, x, y), jit_compile=jit_compile)
    outputs = []
    for _ in range(3):
        got, want = step(pr.Tensor(x), pr.Tensor(labels)), run(*eager_layers, x, labels)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        outputs.append(got[0].numpy())
    assert step.tracing_count == 1
    assert not np.array_equal(outputs[0], outputs[1])  # every call draws new numbers
    for layer in compiled_layers[0] + [compiled_layers[1]]:
        assert state_values(layer._seed_generator.state)[1] == 3
