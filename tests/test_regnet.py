"""The 24 RegNets X/Y (pyresnet.applications.regnet): the paper's width/depth
quantisation against the stages tf.keras 2.x lists, the parameter counts of
tf.keras's models with 1000 classes (counted here independently, layer by
layer, from tf.keras's layout; the 200MF-800MF models built, the larger ones
-- up to 145M parameters, too heavy for a unit test -- counted from their
layout only), and a CIFAR-size model that trains compiled."""
import importlib

import numpy as np
import pytest

import pyresnet as pr

regnet = importlib.import_module("pyresnet.applications.regnet")  # the module, not the function

# tf.keras 2.x keras/applications/regnet.py MODEL_CONFIGS: (depths, widths, group width)
KERAS_STAGES = {
    "regnetx002": ([1, 1, 4, 7], [24, 56, 152, 368], 8),
    "regnetx004": ([1, 2, 7, 12], [32, 64, 160, 384], 16),
    "regnetx006": ([1, 3, 5, 7], [48, 96, 240, 528], 24),
    "regnetx008": ([1, 3, 7, 5], [64, 128, 288, 672], 16),
    "regnetx016": ([2, 4, 10, 2], [72, 168, 408, 912], 24),
    "regnetx032": ([2, 6, 15, 2], [96, 192, 432, 1008], 48),
    "regnetx040": ([2, 5, 14, 2], [80, 240, 560, 1360], 40),
    "regnetx064": ([2, 4, 10, 1], [168, 392, 784, 1624], 56),
    "regnetx080": ([2, 5, 15, 1], [80, 240, 720, 1920], 120),
    "regnetx120": ([2, 5, 11, 1], [224, 448, 896, 2240], 112),
    "regnetx160": ([2, 6, 13, 1], [256, 512, 896, 2048], 128),
    "regnetx320": ([2, 7, 13, 1], [336, 672, 1344, 2520], 168),
    "regnety002": ([1, 1, 4, 7], [24, 56, 152, 368], 8),
    "regnety004": ([1, 3, 6, 6], [48, 104, 208, 440], 8),
    "regnety006": ([1, 3, 7, 4], [48, 112, 256, 608], 16),
    "regnety008": ([1, 3, 8, 2], [64, 128, 320, 768], 16),
    "regnety016": ([2, 6, 17, 2], [48, 120, 336, 888], 24),
    "regnety032": ([2, 5, 13, 1], [72, 216, 576, 1512], 24),
    "regnety040": ([2, 6, 12, 2], [128, 192, 512, 1088], 64),
    "regnety064": ([2, 7, 14, 2], [144, 288, 576, 1296], 72),
    "regnety080": ([2, 4, 10, 1], [168, 448, 896, 2016], 56),
    "regnety120": ([2, 5, 11, 1], [224, 448, 896, 2240], 112),
    "regnety160": ([2, 4, 11, 1], [224, 448, 1232, 3024], 112),
    "regnety320": ([2, 5, 12, 1], [232, 696, 1392, 3712], 232),
}

# the paper's appendix / pycls MODEL_ZOO.md: millions of (trainable) parameters
PAPER_MILLIONS = {
    "regnetx002": 2.7, "regnetx004": 5.2, "regnetx006": 6.2, "regnetx008": 7.3,
    "regnetx016": 9.2, "regnetx032": 15.3, "regnetx040": 22.1, "regnetx064": 26.2,
    "regnetx080": 39.6, "regnetx120": 46.1, "regnetx160": 54.3, "regnetx320": 107.8,
    "regnety002": 3.2, "regnety004": 4.3, "regnety006": 6.1, "regnety008": 6.3,
    "regnety016": 11.2, "regnety032": 19.4, "regnety040": 20.6, "regnety064": 30.6,
    "regnety080": 39.2, "regnety120": 51.8, "regnety160": 83.6, "regnety320": 145.0,
}

# tf.keras 2.x's count_params() of four models, read from tf.keras itself
TF_KERAS_PARAMS = {"regnetx002": 2_705_640, "regnetx004": 5_194_184,
                   "regnety002": 3_183_844, "regnety004": 4_371_296}

# the models small enough to build in the test (the others: their count from the layout)
BUILT = ("regnetx002", "regnetx004", "regnetx006", "regnetx008",
         "regnety002", "regnety004", "regnety006", "regnety008")


def count(depths, widths, group_width, se, classes=1000):
    """Parameters of tf.keras's RegNet layout, ``(count_params(), BN moving
    statistics)``: stem conv3x3(32) + BN; per block the 1x1 shortcut + BN of a
    stride-2 block, conv1x1 + BN, conv3x3 with ``filters // group_width``
    groups (Keras's Conv2D takes groups=0 as 1) + BN, the SE convs (with
    biases, ``int(0.25 * filters_in)`` squeezed) of Y blocks, conv1x1 + BN; the
    dense head.  Each BN holds gamma, beta and two moving statistics."""
    total, bn, w_in = 27 * 32 + 4 * 32, 32, 32
    for d, w in zip(depths, widths):
        for i in range(d):
            if i == 0:
                total += w_in * w + 4 * w
                bn += w
            groups = (w // group_width) or 1
            total += w_in * w + 4 * w + 9 * (w // groups) * w + 4 * w + w * w + 4 * w
            bn += 3 * w
            if se:
                s = int(w_in * 0.25)
                total += w * s + s + s * w + w
            w_in = w
    return total + w_in * classes + classes, 2 * bn


@pytest.mark.parametrize("name", sorted(KERAS_STAGES))
def test_quantised_stages_equal_keras(name):
    d, w_0, w_a, w_m, g, se = regnet.DESIGNS[name]
    widths, depths, groups = regnet.regnet_stages(d, w_0, w_a, w_m, g)
    want_depths, want_widths, want_g = KERAS_STAGES[name]
    assert (depths, widths) == (want_depths, want_widths)
    # the groups Keras's conv3x3 gets (filters // group width, 0 taken as 1) equal ours
    assert [w // gw for w, gw in zip(widths, groups)] == [(w // want_g) or 1 for w in widths]
    assert se == name.startswith("regnety")


def test_every_keras_name_is_a_constructor():
    assert len(regnet.DESIGNS) == len(KERAS_STAGES) == 24
    for name, constructor in regnet.CONSTRUCTORS.items():
        keras_name = "RegNet" + name[6:].upper()
        assert constructor is getattr(pr.applications, keras_name)
        assert constructor.__name__ == keras_name and constructor.__doc__


@pytest.mark.parametrize("name", sorted(KERAS_STAGES))
def test_layout_count_equals_tf_keras_and_the_paper(name):
    """The layer-by-layer count of tf.keras's layout: tf.keras's own
    count_params() where we have it, the paper's trainable millions for all."""
    depths, widths, g = KERAS_STAGES[name]
    total, moving = count(depths, widths, g, name.startswith("regnety"))
    if name in TF_KERAS_PARAMS:
        assert total == TF_KERAS_PARAMS[name]
    assert round((total - moving) / 1e6, 1) == pytest.approx(PAPER_MILLIONS[name], abs=0.11)


@pytest.mark.parametrize("name", BUILT)
def test_built_parameter_counts_equal_tf_keras(name):
    """The built model's count equals the count of tf.keras's layout (the
    count does not depend on the image size: built at 64x64 here, checked at
    224x224 for the 200MF ones)."""
    depths, widths, g = KERAS_STAGES[name]
    want = count(depths, widths, g, name.startswith("regnety"))[0]
    size = 224 if name.endswith("002") else 64
    model = regnet.CONSTRUCTORS[name](input_shape=(size, size, 3), classifier_activation=None)
    assert model.name == name
    assert model.compute_output_shape((None, size, size, 3)) == (None, 1000)
    assert model.count_params() == want
    assert sum(int(np.prod(w.shape)) for w in model.non_trainable_weights) == \
        count(depths, widths, g, name.startswith("regnety"))[1]


def test_group_width_wider_than_a_stage(monkeypatch):
    """RegNetX080's first stage (80 wide, group width 120) has one group, as
    pycls's min(g, w) and Keras's groups=0 -> 1: a small design of that kind
    built and counted (the big models share the code path but are not built)."""
    monkeypatch.setitem(regnet.DESIGNS, "regnetx080", (6, 16, 12.0, 2.5, 24, False))
    widths, depths, groups = regnet.regnet_stages(6, 16, 12.0, 2.5, 24)
    assert widths[0] < 24 and groups[0] == widths[0]
    model = regnet.regnet("regnetx080", input_shape=(32, 32, 3), classes=10)
    assert model.count_params() == count(depths, widths, 24, False, classes=10)[0]
    conv = model.get_layer("regnetx080_Stage_0_XBlock_0_conv_3x3")
    assert conv.groups == 1 and conv.kernel.shape == (3, 3, widths[0], widths[0])


def test_keras_arguments_pooling_and_name():
    x = np.random.default_rng(0).standard_normal((2, 32, 32, 3)).astype(np.float32)
    features = pr.applications.RegNetX002(include_top=False, input_shape=(32, 32, 3))
    assert features.compute_output_shape((None, 32, 32, 3)) == (None, 1, 1, 368)
    f = features(x, training=False).numpy()
    avg = pr.applications.RegNetX002(include_top=False, input_shape=(32, 32, 3), pooling="avg")
    mx = pr.applications.RegNetX002(include_top=False, input_shape=(64, 64, 3), pooling="max")
    assert avg.compute_output_shape((None, 32, 32, 3)) == (None, 368)
    mx.set_weights(features.get_weights())
    x64 = np.random.default_rng(1).standard_normal((2, 64, 64, 3)).astype(np.float32)
    features64 = pr.applications.RegNetX002(include_top=False, input_shape=(64, 64, 3))
    features64.set_weights(features.get_weights())
    np.testing.assert_allclose(mx(x64, training=False).numpy(),
                               features64(x64, training=False).numpy().max(axis=(1, 2)),
                               rtol=1e-6)
    assert f.shape == (2, 1, 1, 368)
    # tf.keras's positional order: model_name first; it names the model and its layers
    named = pr.applications.RegNetY002("my_regnet", True, False, None, None, (32, 32, 3), None, 7)
    assert named.name == "my_regnet" and named.compute_output_shape((None, 32, 32, 3)) == (None, 7)
    assert named.get_layer("my_regnet_stem_conv").filters == 32
    probs = named(x, training=False).numpy()  # softmax head by default, as Keras
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_stem_strides_one_keeps_cifar_maps_with_the_same_weights():
    """stem_strides=1 (a pyresnet option): the same layers and parameters,
    the stages see 2x the size; the stride-2 'same' stem is the stride-1
    one at the odd pixels (TF's 'same' pads 0 before and 1 after at stride
    2 on 32 pixels, 1 and 1 at stride 1)."""
    x = np.random.default_rng(2).standard_normal((2, 32, 32, 3)).astype(np.float32)
    usual = pr.applications.regnet("regnetx002", include_top=False, input_shape=(32, 32, 3))
    full = pr.applications.regnet("regnetx002", include_top=False, input_shape=(32, 32, 3),
                                  stem_strides=1)
    assert full.compute_output_shape((None, 32, 32, 3)) == (None, 2, 2, 368)
    assert full.count_params() == usual.count_params()
    full.set_weights(usual.get_weights())
    s1 = full.get_layer("regnetx002_stem_conv")(x).numpy()
    s2 = usual.get_layer("regnetx002_stem_conv")(x).numpy()
    assert s1.shape == (2, 32, 32, 32) and s2.shape == (2, 16, 16, 32)
    np.testing.assert_allclose(s2, s1[:, 1::2, 1::2], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="stem_strides must be 1 or 2, got 3"):
        pr.applications.regnet("regnetx002", stem_strides=3)


def test_design_space_and_argument_errors():
    with pytest.raises(ValueError, match="outside the design space"):
        regnet.regnet_stages(13, 24, 36.44, 1.0, 8)
    with pytest.raises(ValueError, match="pretrained weights.*weights=None"):
        pr.applications.RegNetX002(weights="imagenet")
    with pytest.raises(ValueError, match="pretrained weights"):
        pr.applications.RegNetY320(weights="/tmp/regnety320.h5")
    with pytest.raises(ValueError, match="pooling must be None, 'avg' or 'max', got 'sum'"):
        pr.applications.RegNetX004(include_top=False, pooling="sum")
    with pytest.raises(ValueError, match="classes must be a positive int"):
        pr.applications.RegNetX004(classes=0)
    with pytest.raises(ValueError, match="input_shape must be"):
        pr.applications.RegNetY002(input_shape=(16, 16, 3))
    with pytest.raises(ValueError, match="unknown model"):
        regnet.regnet("regnetz002")


def test_regnety002_at_cifar_size_trains_compiled_and_matches_eager(rng):
    model = pr.applications.RegNetY002(input_shape=(32, 32, 3), classes=10,
                                       classifier_activation=None)
    x = rng.standard_normal((8, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, 8).astype(np.int32)
    # the compiled forward equals the eager one
    eager = model(x, training=False).numpy()
    np.testing.assert_allclose(pr.compile(lambda a: model(a, training=False))(x).numpy(), eager,
                               rtol=1e-5, atol=1e-5)
    # lr 0.01: at 0.05 the 6 steps on 8 images swing (losses 5.7 -> 12.2 -> 3.4 -> 12.3), so a
    # last-below-first test passes or fails with the kernels' rounding; the lowest loss of the
    # later steps falls well below the first
    model.compile(optimizer=pr.optimizers.SGD(0.01, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(x, y, batch_size=8, epochs=6, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and min(losses[2:]) < 0.8 * losses[0], losses
