"""Argument standardisation shared by the conv and pooling layers (Keras's
``standardize_tuple``/``standardize_padding``/``compute_conv_output_shape``),
and the kernel-and-bias arguments and weights of Dense and the convolutions."""
from .. import activations, regularizers


def standardize_tuple(value, n, name, layer):
    """An int or an n-sequence of positive ints -> an n-tuple of ints.

    Raises:
        ValueError: naming the layer class and the argument.
    """
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or not all(isinstance(v, int) and v > 0 for v in values):
        raise ValueError(f"{layer}: `{name}` must be a positive int or a tuple of {n} positive "
                         f"ints, got {value!r}")
    return values


def standardize_padding(value, layer):
    """``"valid"`` or ``"same"`` (case-insensitive, as Keras).  Raises ValueError."""
    padding = str(value).lower()
    if padding not in ("valid", "same"):
        raise ValueError(f"{layer}: `padding` must be 'valid' or 'same', got {value!r}")
    return padding


def standardize_data_format(value, layer):
    """Only ``None``/``"channels_last"`` (NHWC) is supported.  Raises ValueError."""
    if value not in (None, "channels_last"):
        raise ValueError(f"{layer}: only data_format='channels_last' (NHWC) is supported, "
                         f"got {value!r}")
    return "channels_last"


def conv_output_length(length, window, stride, padding):
    """Output size along one spatial axis (None stays None): ``valid``:
    floor((L - k) / s) + 1; ``same``: ceil(L / s) (TensorFlow's rule)."""
    if length is None:
        return None
    if padding == "same":
        return -(-length // stride)
    return (length - window) // stride + 1


def pooled_shape(layer, input_shape, window, strides, padding, channels):
    """NHWC output shape of a windowed op on ``input_shape``.

    Raises:
        ValueError: naming ``layer`` when the window does not fit the input.
    """
    n, h, w = input_shape[:3]
    out_h, out_w = (conv_output_length(size, k, s, padding)
                    for size, k, s in zip((h, w), window, strides))
    if (out_h is not None and out_h <= 0) or (out_w is not None and out_w <= 0):
        raise ValueError(f'Layer "{layer.name}": window {window} with padding "{padding}" does not '
                         f"fit input shape {tuple(input_shape)}")
    return (n, out_h, out_w, channels)


def known_channels(layer, input_shape):
    """The channel count, the last axis of an NHWC ``input_shape``.

    Raises:
        ValueError: naming ``layer`` when it is unknown (None).
    """
    channels = input_shape[-1]
    if channels is None:
        raise ValueError(f'Layer "{layer.name}": the channel axis (last) of the input must be '
                         f"known, got input shape {input_shape}")
    return channels


def set_kernel_bias_args(layer, activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer):
    """Keep the arguments of a layer with a kernel and an optional bias (Dense,
    the convolutions) on it: ``activation`` and the regularizers resolved
    (``activations.get``, ``regularizers.get``, which raise for unknown
    names), the initializers as given (resolved by ``add_weight``)."""
    layer.activation = activations.get(activation)
    layer.use_bias = bool(use_bias)
    layer.kernel_initializer = kernel_initializer
    layer.bias_initializer = bias_initializer
    layer.kernel_regularizer = regularizers.get(kernel_regularizer)
    layer.bias_regularizer = regularizers.get(bias_regularizer)


def add_kernel_and_bias(layer, kernel_shape, units):
    """Create ``layer.kernel`` of ``kernel_shape`` and ``layer.bias`` of
    ``(units,)`` (None without ``use_bias``) from the arguments
    :func:`set_kernel_bias_args` kept."""
    layer.kernel = layer.add_weight(kernel_shape, layer.kernel_initializer, name="kernel",
                                    regularizer=layer.kernel_regularizer)
    layer.bias = layer.add_weight((units,), layer.bias_initializer, name="bias",
                                  regularizer=layer.bias_regularizer) if layer.use_bias else None
