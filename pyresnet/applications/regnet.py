"""RegNetX and RegNetY (Radosavovic, Kosaraju, Girshick, He and Dollar 2020,
"Designing Network Design Spaces", CVPR), as tf.keras 2.9-2.15 shipped them
(``keras.applications.RegNetX002``, ...), built from public layers.

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
he_normal initialization, as Keras's.  At 224x224 with 1000 classes the
parameter counts (``count_params``, moving statistics included, as Keras
counts) are those of tf.keras: RegNetX002 2,705,640; RegNetX004
5,194,184; RegNetY002 3,183,844; RegNetY004 4,371,296 (pycls: 2.7M, 5.2M,
3.2M, 4.3M).

Departures from tf.keras: no pretrained weights (``weights`` must be None)
and no built-in rescaling of [0, 255] pixels (``include_preprocessing``
must be False; feed normalized float images, as the training command
does).  With ``input_shape=(32, 32, 3)`` the models run at CIFAR size (the
four stride-2 stages after the stride-2 stem leave 1x1 feature maps).
"""
import math

import numpy as np

from ..layers import (Add, BatchNormalization, Conv2D, Dense, GlobalAveragePooling2D, Input,
                      Multiply, ReLU)
from ..models import Model

# name -> (depth d, w_0, w_a, w_m, group width g, squeeze-and-excitation): the paper's
# appendix (table of the RegNetX/Y models) and pycls's configs/dds_baselines
DESIGNS = {
    "regnetx002": (13, 24, 36.44, 2.49, 8, False),
    "regnetx004": (22, 24, 24.48, 2.54, 16, False),
    "regnety002": (13, 24, 36.44, 2.49, 8, True),
    "regnety004": (16, 48, 27.89, 2.09, 8, True),
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
           classifier_activation="softmax"):
    """A RegNet of ``DESIGNS[model_name]`` (functional Model); the named
    constructors below call it.  Arguments as ``keras.applications.RegNetX002``.

    Args:
        model_name (str): a key of :data:`DESIGNS`.
        include_top (bool): add the pooling + Dense head.
        include_preprocessing: only False (see the module docstring).
        weights: only None (random initialization).
        input_tensor: an ``Input`` KerasTensor to build on, or None.
        input_shape (tuple): (H, W, 3); default (224, 224, 3); H, W >= 32.
        pooling: without the top, None (4D features), "avg" or "max"
            ("max" needs a GlobalMaxPooling2D layer, not in this package yet).
        classes (int): size of the head.
        classifier_activation: the head's activation (``"softmax"``, as
            Keras; None for logits, as the training command uses).
    Returns:
        Model named ``model_name``.
    Raises:
        ValueError: unknown name, pretrained weights, preprocessing, a bad
            input shape or pooling mode.
    """
    if model_name not in DESIGNS:
        raise ValueError(f"regnet: unknown model {model_name!r}; known: {sorted(DESIGNS)}")
    if weights is not None:
        raise ValueError("regnet: pretrained weights are not available; use weights=None")
    if include_preprocessing:
        raise ValueError("regnet: include_preprocessing is not supported; feed normalized "
                         "float images (include_preprocessing=False)")
    depth, w_0, w_a, w_m, group_width, se = DESIGNS[model_name]
    widths, depths, groups = regnet_stages(depth, w_0, w_a, w_m, group_width)
    if input_tensor is None:
        shape = tuple(input_shape) if input_shape is not None else (224, 224, 3)
        if len(shape) != 3 or shape[-1] != 3 or any(d is not None and d < 32 for d in shape[:2]):
            raise ValueError(f"regnet: input_shape must be (H, W, 3) with H, W >= 32, got {shape}")
        inputs = Input(shape)
    else:
        inputs = input_tensor
    x = Conv2D(32, 3, strides=2, padding="same", name=model_name + "_stem_conv", **_CONV)(inputs)
    x = BatchNormalization(name=model_name + "_stem_bn", **_BN)(x)
    x = ReLU(name=model_name + "_stem_relu")(x)
    filters_in = 32
    block = "YBlock" if se else "XBlock"
    for stage, (width, d, g) in enumerate(zip(widths, depths, groups)):
        for i in range(d):
            x = _block(x, filters_in, width, g, 2 if i == 0 else 1, se,
                       f"{model_name}_Stage_{stage}_{block}_{i}")
            filters_in = width
    if include_top:
        x = GlobalAveragePooling2D(name=model_name + "_head_gap")(x)
        x = Dense(classes, activation=classifier_activation, name=model_name + "_head_dense")(x)
    elif pooling == "avg":
        x = GlobalAveragePooling2D()(x)
    elif pooling is not None:
        raise ValueError(f"regnet: pooling must be None or 'avg', got {pooling!r}")
    return Model(inputs, x, name=model_name)


def _constructor(model_name, keras_name):
    def build(include_top=True, include_preprocessing=False, weights=None, input_tensor=None,
              input_shape=None, pooling=None, classes=1000, classifier_activation="softmax"):
        return regnet(model_name, include_top, include_preprocessing, weights, input_tensor,
                      input_shape, pooling, classes, classifier_activation)
    d, w_0, w_a, w_m, g, se = DESIGNS[model_name]
    build.__name__ = build.__qualname__ = keras_name
    build.__doc__ = (f"``keras.applications.{keras_name}``: RegNet{'Y' if se else 'X'} with "
                     f"d={d}, w_0={w_0}, w_a={w_a}, w_m={w_m}, group width {g}; arguments and "
                     "errors as :func:`regnet`.")
    return build


RegNetX002 = _constructor("regnetx002", "RegNetX002")
RegNetX004 = _constructor("regnetx004", "RegNetX004")
RegNetY002 = _constructor("regnety002", "RegNetY002")
RegNetY004 = _constructor("regnety004", "RegNetY004")
