"""Argument standardisation shared by the conv and pooling layers (Keras's
``standardize_tuple``/``standardize_padding``/``compute_conv_output_shape``)."""


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
