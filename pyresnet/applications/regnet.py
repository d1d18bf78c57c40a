"""RegNetX and RegNetY (Radosavovic, Kosaraju, Girshick, He and Dollar 2020,
"Designing Network Design Spaces", CVPR), the 24 models tf.keras 2.9-2.15
shipped (``keras.applications.RegNetX002`` ... ``RegNetX320`` and
``RegNetY002`` ... ``RegNetY320``), built from public layers.

The stage widths and depths are computed by the paper's quantized linear
rule (section 3.3, eq. 2-4):

    u_j = w_0 + w_a * j                         for blocks j < d
    s_j = round(log(u_j / w_0) / log(w_m))
    w_j = round(w_0 * w_m ** s_j / 8) * 8       (widths on multiples of 8)

consecutive blocks of equal width forming a stage; then each stage's width
is made a multiple of its group width g (g = min(g, w); w = round(w / g) *
g), as pycls's ``adjust_ws_gs_comp`` does.  The (d, w_0, w_a, w_m, g) of each
model are the paper's appendix / pycls model zoo values; the resulting
stages equal the widths and depths tf.keras's regnet.py lists.

Architecture (paper figures 3-4, and the Keras layout and names):

    stem:  conv3x3(32, stride 2) - BN - ReLU
    4 stages of X (or Y) blocks; the first block of each has stride 2 and a
    1x1 conv + BN shortcut:
        X block: conv1x1(w) - BN - ReLU - conv3x3(w, groups = w / g, stride)
                 - BN - ReLU - conv1x1(w) - BN, + shortcut, ReLU
        Y block: X block with squeeze-and-excitation (Hu et al. 2018,
                 section 3) after the 3x3 conv: global average pool -
                 conv1x1(int(0.25 * w_in), ReLU) - conv1x1(w, sigmoid),
                 multiplied into the features
    head:  global average pooling - Dense(classes, classifier_activation)

Batch normalization uses momentum 0.9 and epsilon 1e-5 and convolutions
he_normal initialization, as Keras's.  A stage narrower than the group
width (RegNetX080's first, 80 wide with group width 120) has one group, as
pycls's ``min(g, w)`` and tf.keras's ``groups = 80 // 120 -> 1``.  At
224x224 with 1000 classes the parameter counts (``count_params``, moving
statistics included, as Keras counts) are those of tf.keras, e.g.
RegNetX002 2,705,640; RegNetY002 3,183,844; RegNetX320 107,973,576;
RegNetY320 145,205,058 (without the moving statistics, the paper's
appendix figures: 2.7M, 3.2M, 107.8M, 145.0M).

Departures from tf.keras: no pretrained weights (``weights`` must be None)
and no built-in rescaling of [0, 255] pixels (``include_preprocessing``
must be False; feed normalized float images, as the training command
does); the defaults of both are therefore None and False where tf.keras has
"imagenet" and True.  With ``input_shape=(32, 32, 3)`` the models run at
CIFAR size (the four stride-2 stages after the stride-2 stem leave 1x1
feature maps; ``regnet(..., stem_strides=1)``, ``--stem-strides 1`` in the
training command, keeps the stem at stride 1 so that they leave 2x2).
"""
import math

import numpy as np

from ..layers import (Add, BatchNormalization, Conv2D, Dense, GlobalAveragePooling2D,
                      GlobalMaxPooling2D, Input, Multiply, ReLU)
from ..models import Model

# name -> (depth d, w_0, w_a, w_m, group width g, squeeze-and-excitation): the paper's
# appendix (table of the RegNetX/Y models) and pycls's configs/dds_baselines
DESIGNS = {
    "regnetx002": (13, 24, 36.44, 2.49, 8, False),
    "regnetx004": (22, 24, 24.48, 2.54, 16, False),
    "regnetx006": (16, 48, 36.97, 2.24, 24, False),
    "regnetx008": (16, 56, 35.73, 2.28, 16, False),
    "regnetx016": (18, 80, 34.01, 2.25, 24, False),
    "regnetx032": (25, 88, 26.31, 2.25, 48, False),
    "regnetx040": (23, 96, 38.65, 2.43, 40, False),
    "regnetx064": (17, 184, 60.83, 2.07, 56, False),
    "regnetx080": (23, 80, 49.56, 2.88, 120, False),
    "regnetx120": (19, 168, 73.36, 2.37, 112, False),
    "regnetx160": (22, 216, 55.59, 2.1, 128, False),
    "regnetx320": (23, 320, 69.86, 2.0, 168, False),
    "regnety002": (13, 24, 36.44, 2.49, 8, True),
    "regnety004": (16, 48, 27.89, 2.09, 8, True),
    "regnety006": (15, 48, 32.54, 2.32, 16, True),
    "regnety008": (14, 56, 38.84, 2.4, 16, True),
    "regnety016": (27, 48, 20.71, 2.65, 24, True),
    "regnety032": (21, 80, 42.63, 2.66, 24, True),
    "regnety040": (22, 96, 31.41, 2.24, 64, True),
    "regnety064": (25, 112, 33.22, 2.27, 72, True),
    "regnety080": (17, 192, 76.82, 2.19, 56, True),
    "regnety120": (19, 168, 73.36, 2.37, 112, True),
    "regnety160": (18, 200, 106.23, 2.48, 112, True),
    "regnety320": (20, 232, 115.89, 2.53, 232, True),
}

_BN = {"momentum": 0.9, "epsilon": 1e-5}
_CONV = {"use_bias": False, "kernel_initializer": "he_normal"}


def regnet_stages(depth, w_0, w_a, w_m, group_width, quantum=8):
    """The stages of a RegNet design: ``(widths, depths, group_widths)``.

    The paper's quantized linear rule (section 3.3, eq. 2-4) for ``depth``
    blocks, widths rounded to multiples of ``quantum``; blocks of equal
    width form a stage; then widths made divisible by the group width
    (pycls ``adjust_ws_gs_comp`` with bottleneck ratio 1).

    Raises:
        ValueError: for parameters outside the design space (w_a < 0,
            w_0 <= 0, w_m <= 1, w_0 not a multiple of ``quantum``, depth < 1).
    """
    if depth < 1 or w_a < 0 or w_0 <= 0 or w_m <= 1 or w_0 % quantum:
        raise ValueError(f"regnet_stages: outside the design space: depth={depth}, w_0={w_0}, "
                         f"w_a={w_a}, w_m={w_m}")
    u = w_0 + w_a * np.arange(depth)
    s = np.round(np.log(u / w_0) / math.log(w_m))
    w = (np.round(w_0 * np.power(w_m, s) / quantum) * quantum).astype(int)
    widths, depths = [], []
    for width in w:
        if widths and widths[-1] == width:
            depths[-1] += 1
        else:
            widths.append(int(width))
            depths.append(1)
    groups = [min(group_width, wd) for wd in widths]
    widths = [int(round(wd / g) * g) for wd, g in zip(widths, groups)]
    return widths, depths, groups


def _squeeze_excite(x, filters, se_filters, name):
    """Squeeze-and-excitation (Hu et al. 2018, section 3): channel gates
    from the global average, ``x * sigmoid(W2 relu(W1 mean(x)))``."""
    s = GlobalAveragePooling2D(keepdims=True, name=name + "_squeeze_and_excite_gap")(x)
    s = Conv2D(se_filters, 1, activation="relu", kernel_initializer="he_normal",
               name=name + "_squeeze_and_excite_squeeze")(s)
    s = Conv2D(filters, 1, activation="sigmoid", kernel_initializer="he_normal",
               name=name + "_squeeze_and_excite_excite")(s)
    return Multiply(name=name + "_squeeze_and_excite_multiply")([s, x])


def _block(x, filters_in, filters_out, group_width, stride, se, name):
    """An X block (a Y block with ``se``); see the module docstring."""
    groups = filters_out // group_width
    if stride != 1:
        skip = Conv2D(filters_out, 1, strides=stride, name=name + "_skip_1x1", **_CONV)(x)
        skip = BatchNormalization(name=name + "_skip_bn", **_BN)(skip)
    else:
        skip = x
    y = Conv2D(filters_out, 1, name=name + "_conv_1x1_1", **_CONV)(x)
    y = BatchNormalization(name=name + "_conv_1x1_1_bn", **_BN)(y)
    y = ReLU(name=name + "_conv_1x1_1_relu")(y)
    y = Conv2D(filters_out, 3, strides=stride, groups=groups, padding="same",
               name=name + "_conv_3x3", **_CONV)(y)
    y = BatchNormalization(name=name + "_conv_3x3_bn", **_BN)(y)
    y = ReLU(name=name + "_conv_3x3_relu")(y)
    if se:
        y = _squeeze_excite(y, filters_out, int(filters_in * 0.25), name)
    y = Conv2D(filters_out, 1, name=name + "_conv_1x1_2", **_CONV)(y)
    y = BatchNormalization(name=name + "_conv_1x1_2_bn", **_BN)(y)
    y = Add(name=name + "_add")([y, skip])
    return ReLU(name=name + "_exit_relu")(y)


def regnet(model_name, include_top=True, include_preprocessing=False, weights=None,
           input_tensor=None, input_shape=None, pooling=None, classes=1000,
           classifier_activation="softmax", name=None, stem_strides=2):
    """A RegNet of ``DESIGNS[model_name]`` (functional Model); the named
    constructors below call it.  Arguments as ``keras.applications.RegNetX002``.

    Args:
        model_name (str): a key of :data:`DESIGNS` (``"regnetx002"`` ...
            ``"regnety320"``).
        include_top (bool): add the pooling + Dense head.
        include_preprocessing: only False (see the module docstring).
        weights: only None (random initialization).
        input_tensor: an ``Input`` KerasTensor to build on, or None.
        input_shape (tuple): (H, W, 3); default (224, 224, 3); H, W >= 32
            (None for any size).
        pooling: without the top, None (4D features ``(batch, h, w,
            widths[-1])``), ``"avg"`` or ``"max"`` (``(batch, widths[-1])``);
            ignored with the top, as Keras.
        classes (int): size of the head (>= 1).
        classifier_activation: the head's activation (``"softmax"``, as
            Keras; None for logits, as the training command uses).
        name (str): the model's name and its layers' prefix; default
            ``model_name`` (tf.keras's constructors call it ``model_name``).
        stem_strides (int): the stem convolution's stride, 2 as in the paper
            and tf.keras; 1 (a pyresnet option, not Keras's) keeps 32x32
            CIFAR images at full size through the stem, so the four stages
            see 16x16 ... 2x2 maps, as they do for a 64x64 input with the
            usual stem (the same parameters either way).
    Returns:
        Model named ``name``; float32 ``(batch, H, W, 3)`` -> ``(batch,
        classes)`` with the top.
    Raises:
        ValueError: unknown name, pretrained weights, preprocessing, a bad
            input shape, pooling mode, number of classes or stem stride.
    """
    if model_name not in DESIGNS:
        raise ValueError(f"regnet: unknown model {model_name!r}; known: {sorted(DESIGNS)}")
    if weights is not None:
        raise ValueError(f"regnet: pretrained weights are not available (got weights={weights!r}); "
                         "use weights=None for random initialization")
    if include_preprocessing:
        raise ValueError("regnet: include_preprocessing is not supported; feed normalized "
                         "float images (include_preprocessing=False)")
    if pooling not in (None, "avg", "max"):
        raise ValueError(f"regnet: pooling must be None, 'avg' or 'max', got {pooling!r}")
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 1:
        raise ValueError(f"regnet: classes must be a positive int, got {classes!r}")
    if stem_strides not in (1, 2) or isinstance(stem_strides, bool):
        raise ValueError(f"regnet: stem_strides must be 1 or 2, got {stem_strides!r}")
    name = model_name if name is None else name
    depth, w_0, w_a, w_m, group_width, se = DESIGNS[model_name]
    widths, depths, groups = regnet_stages(depth, w_0, w_a, w_m, group_width)
    if input_tensor is None:
        shape = tuple(input_shape) if input_shape is not None else (224, 224, 3)
        if len(shape) != 3 or shape[-1] != 3 or any(d is not None and d < 32 for d in shape[:2]):
            raise ValueError(f"regnet: input_shape must be (H, W, 3) with H, W >= 32, got {shape}")
        inputs = Input(shape)
    else:
        inputs = input_tensor
    x = Conv2D(32, 3, strides=stem_strides, padding="same", name=name + "_stem_conv",
               **_CONV)(inputs)
    x = BatchNormalization(name=name + "_stem_bn", **_BN)(x)
    x = ReLU(name=name + "_stem_relu")(x)
    filters_in = 32
    block = "YBlock" if se else "XBlock"
    for stage, (width, d, g) in enumerate(zip(widths, depths, groups)):
        for i in range(d):
            x = _block(x, filters_in, width, g, 2 if i == 0 else 1, se,
                       f"{name}_Stage_{stage}_{block}_{i}")
            filters_in = width
    if include_top:
        x = GlobalAveragePooling2D(name=name + "_head_gap")(x)
        x = Dense(classes, activation=classifier_activation, name=name + "_head_dense")(x)
    elif pooling == "avg":
        x = GlobalAveragePooling2D()(x)
    elif pooling == "max":
        x = GlobalMaxPooling2D()(x)
    return Model(inputs, x, name=name)


def _constructor(design, keras_name):
    """The ``keras.applications`` constructor ``keras_name`` of ``DESIGNS[design]``
    (tf.keras's signature: ``model_name`` first)."""
    def build(model_name=design, include_top=True, include_preprocessing=False, weights=None,
              input_tensor=None, input_shape=None, pooling=None, classes=1000,
              classifier_activation="softmax"):
        return regnet(design, include_top, include_preprocessing, weights, input_tensor,
                      input_shape, pooling, classes, classifier_activation, name=model_name)
    d, w_0, w_a, w_m, g, se = DESIGNS[design]
    widths, depths, _ = regnet_stages(d, w_0, w_a, w_m, g)
    build.__name__ = build.__qualname__ = keras_name
    build.__doc__ = (f"``keras.applications.{keras_name}``: RegNet{'Y' if se else 'X'} with "
                     f"d={d}, w_0={w_0}, w_a={w_a}, w_m={w_m}, group width {g} (stage widths "
                     f"{widths}, depths {depths}); ``model_name`` names the model (default "
                     f"{design!r}); the other arguments, the result and the errors as "
                     ":func:`regnet`.")
    return build


RegNetX002 = _constructor("regnetx002", "RegNetX002")
RegNetX004 = _constructor("regnetx004", "RegNetX004")
RegNetX006 = _constructor("regnetx006", "RegNetX006")
RegNetX008 = _constructor("regnetx008", "RegNetX008")
RegNetX016 = _constructor("regnetx016", "RegNetX016")
RegNetX032 = _constructor("regnetx032", "RegNetX032")
RegNetX040 = _constructor("regnetx040", "RegNetX040")
RegNetX064 = _constructor("regnetx064", "RegNetX064")
RegNetX080 = _constructor("regnetx080", "RegNetX080")
RegNetX120 = _constructor("regnetx120", "RegNetX120")
RegNetX160 = _constructor("regnetx160", "RegNetX160")
RegNetX320 = _constructor("regnetx320", "RegNetX320")
RegNetY002 = _constructor("regnety002", "RegNetY002")
RegNetY004 = _constructor("regnety004", "RegNetY004")
RegNetY006 = _constructor("regnety006", "RegNetY006")
RegNetY008 = _constructor("regnety008", "RegNetY008")
RegNetY016 = _constructor("regnety016", "RegNetY016")
RegNetY032 = _constructor("regnety032", "RegNetY032")
RegNetY040 = _constructor("regnety040", "RegNetY040")
RegNetY064 = _constructor("regnety064", "RegNetY064")
RegNetY080 = _constructor("regnety080", "RegNetY080")
RegNetY120 = _constructor("regnety120", "RegNetY120")
RegNetY160 = _constructor("regnety160", "RegNetY160")
RegNetY320 = _constructor("regnety320", "RegNetY320")

CONSTRUCTORS = {design: globals()["RegNet" + design[6:].upper()] for design in DESIGNS}
"""``DESIGNS`` key -> its ``keras.applications`` constructor (``"regnetx002"`` -> RegNetX002)."""
