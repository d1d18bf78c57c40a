"""RegNetX/Y 200MF and 400MF (pyresnet.applications.regnet): the paper's
width/depth quantisation against the stages tf.keras 2.9-2.15 lists, the
parameter counts of tf.keras's models at 224x224 with 1000 classes (counted
here independently from the architecture), and a CIFAR-size model that
trains compiled."""
import importlib

import numpy as np
import pytest

import pyresnet as pr

regnet = importlib.import_module("pyresnet.applications.regnet")  # the module, not the function

# tf.keras regnet.py MODEL_CONFIGS: (depths, widths, group width)
KERAS_STAGES = {
    "regnetx002": ([1, 1, 4, 7], [24, 56, 152, 368], 8),
    "regnetx004": ([1, 2, 7, 12], [32, 64, 160, 384], 16),
    "regnety002": ([1, 1, 4, 7], [24, 56, 152, 368], 8),
    "regnety004": ([1, 3, 6, 6], [48, 104, 208, 440], 8),
}


def count(depths, widths, group_width, se, classes=1000):
    """Parameters of the Keras RegNet layout, BN moving statistics included:
    stem conv3x3(32) + BN; per block the 1x1 shortcut + BN of a stride-2
    block, conv1x1 + BN, grouped conv3x3 + BN, the SE convs (with biases)
    of Y blocks, conv1x1 + BN; the dense head."""
    total, w_in = 27 * 32 + 4 * 32, 32
    for d, w in zip(depths, widths):
        for i in range(d):
            if i == 0:
                total += w_in * w + 4 * w
            total += w_in * w + 4 * w + 9 * group_width * w + 4 * w + w * w + 4 * w
            if se:
                s = int(w_in * 0.25)
                total += w * s + s + s * w + w
            w_in = w
    return total + w_in * classes + classes


@pytest.mark.parametrize("name", sorted(KERAS_STAGES))
def test_quantised_stages_equal_keras(name):
    d, w_0, w_a, w_m, g, se = regnet.DESIGNS[name]
    widths, depths, groups = regnet.regnet_stages(d, w_0, w_a, w_m, g)
    want_depths, want_widths, want_g = KERAS_STAGES[name]
    assert (depths, widths, groups) == (want_depths, want_widths, [want_g] * 4)


@pytest.mark.parametrize("name,constructor,params", [
    ("regnetx002", pr.applications.RegNetX002, 2_705_640),
    ("regnetx004", pr.applications.RegNetX004, 5_194_184),
    ("regnety002", pr.applications.RegNetY002, 3_183_844),
    ("regnety004", pr.applications.RegNetY004, 4_371_296),
])
def test_parameter_counts_at_224_equal_tf_keras(name, constructor, params):
    depths, widths, g = KERAS_STAGES[name]
    assert count(depths, widths, g, name.startswith("regnety")) == params
    model = constructor(classifier_activation=None)
    assert model.name == name and model.compute_output_shape((None, 224, 224, 3)) == (None, 1000)
    assert model.count_params() == params
    # pycls model zoo: about 2.7M, 5.2M, 3.2M and 4.3M
    assert round(params / 1e6, 1) == {"regnetx002": 2.7, "regnetx004": 5.2,
                                      "regnety002": 3.2, "regnety004": 4.4}[name]


def test_design_space_and_argument_errors():
    with pytest.raises(ValueError, match="outside the design space"):
        regnet.regnet_stages(13, 24, 36.44, 1.0, 8)
    with pytest.raises(ValueError, match="pretrained weights"):
        pr.applications.RegNetX002(weights="imagenet")
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
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(x, y, batch_size=8, epochs=6, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
