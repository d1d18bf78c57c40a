"""Keras-style layers (``keras.layers``), one per file.

Every layer computes with pyresnet ops, so it runs eagerly, under a
``GradientTape`` and inside ``pyresnet.compile`` alike.  Images are NHWC
float32.
"""
from .activation import Activation
from .add import Add, add
from .alternating_flip import AlternatingFlip
from .average import Average, average
from .average_pooling2d import AveragePooling2D
from .batch_normalization import BatchNormalization
from .concatenate import Concatenate, concatenate
from .conv1d import Conv1D
from .conv2d import Conv2D
from .conv2d_transpose import Conv2DTranspose
from .cut_out import CutOut
from .dense import Dense
from .depthwise_conv2d import DepthwiseConv2D
from .dropout import Dropout
from .flatten import Flatten
from .global_average_pooling2d import GlobalAveragePooling2D
from .global_max_pooling2d import GlobalMaxPooling2D
from .global_pooling1d import GlobalAveragePooling1D, GlobalMaxPooling1D
from .input_layer import Input, InputLayer
from .input_spec import InputSpec
from .lambda_layer import Lambda
from .layer import Layer
from .layer_normalization import LayerNormalization
from .leaky_re_lu import LeakyReLU
from .max_pooling2d import MaxPooling2D
from .mix_up import MixUp
from .multiply import Multiply, multiply
from .normalization import Normalization
from .permute import Permute
from .random_contrast import RandomContrast
from .random_crop import RandomCrop
from .random_flip import RandomFlip
from .random_lighting import RandomLighting
from .random_resized_crop import RandomResizedCrop
from .random_rotation import RandomRotation
from .random_translation import RandomTranslation
from .random_zoom import RandomZoom
from .node import KerasTensor
from .pre_activation_residual_block import PreActivationResidualBlock
from .re_lu import ReLU
from .rescaling import Rescaling
from .separable_conv2d import SeparableConv2D
from .reshape import Reshape
from .residual_block import ResidualBlock
from .softmax import Softmax
from .subtract import Subtract, subtract
from .up_sampling2d import UpSampling2D
from .zero_padding2d import ZeroPadding2D
from .._unsupported import LAYERS as _UNSUPPORTED, getattr_for as _getattr_for

__all__ = ["Activation", "Add", "AlternatingFlip", "Average", "AveragePooling2D",
           "BatchNormalization", "Concatenate", "Conv1D", "Conv2D", "Conv2DTranspose", "CutOut",
           "Dense", "DepthwiseConv2D", "Dropout", "Flatten", "GlobalAveragePooling1D",
           "GlobalAveragePooling2D", "GlobalMaxPooling1D", "GlobalMaxPooling2D", "Input",
           "InputLayer", "InputSpec", "KerasTensor", "Lambda", "Layer", "LayerNormalization",
           "LeakyReLU", "MaxPooling2D", "MixUp", "Multiply", "Normalization", "Permute",
           "PreActivationResidualBlock", "RandomContrast", "RandomCrop", "RandomFlip",
           "RandomLighting", "RandomResizedCrop", "RandomRotation", "RandomTranslation",
           "RandomZoom", "ReLU", "Rescaling", "Reshape", "ResidualBlock", "SeparableConv2D",
           "Softmax", "Subtract", "UpSampling2D", "ZeroPadding2D", "add", "average",
           "concatenate", "deserialize", "multiply", "serialize", "subtract"]



def serialize(layer):
    """A layer as JSON-ready data (``keras.layers.serialize``): see
    :func:`pyresnet.saving.serialize_keras_object`."""
    from ..saving.serialization import serialize_keras_object  # noqa: PLC0415
    return serialize_keras_object(layer)


def deserialize(config, custom_objects=None):
    """A new layer from :func:`serialize`'s data (``keras.layers.deserialize``),
    classes found by name only (pyresnet's layers, ``custom_objects``,
    registered ones).  Raises ValueError for an unknown class."""
    from ..saving.serialization import deserialize_keras_object  # noqa: PLC0415
    return deserialize_keras_object(config, custom_objects=custom_objects)


__getattr__ = _getattr_for(__name__, _UNSUPPORTED)  # Embedding, LSTM, Conv3D...: not provided
