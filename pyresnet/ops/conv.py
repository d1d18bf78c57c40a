"""Conv-family ops (csrc/ops_conv.c): matmul, 2D convolution and pooling.

Names, arguments and defaults follow ``keras.ops`` and the Keras layers.
Images are channels-last (NHWC) float32, convolution kernels HWIO
(``kernel_h, kernel_w, in_channels, out_channels``, as Keras stores them).
Padding follows TensorFlow: ``"valid"`` uses only full windows;
``"same"`` gives ``ceil(size / stride)`` outputs and pads
``max((out - 1) * stride + window - size, 0)`` in total, the smaller half
before and the larger half after (tf.nn.convolution docs, "padding").
"""
from .._loader import _C
from ..tensor import convert_to_tensor

call = _C.call

__all__ = ["matmul", "conv2d", "conv2d_transpose", "depthwise_conv2d", "max_pool2d",
           "average_pool2d", "global_average_pool2d"]


def _same(op, padding):
    """True for "same", False for "valid" (any case); ValueError otherwise."""
    mode = padding.lower() if isinstance(padding, str) else None
    if mode not in ("same", "valid"):
        raise ValueError(f"{op}: padding must be 'same' or 'valid', got {padding!r}")
    return mode == "same"


def matmul(a, b, transpose_a=False, transpose_b=False):
    """Matrix product ``op(a) @ op(b)`` in float32 (OpenBLAS sgemm).

    Args:
        a: float32 array-like of shape (M, K), or (K, M) with ``transpose_a``.
        b: float32 array-like of shape (K, N), or (N, K) with ``transpose_b``.
        transpose_a, transpose_b (bool): use the transpose of ``a`` / ``b``.
    Returns:
        Tensor of shape (M, N), float32.
    Raises:
        ValueError: when an input is not 2-D or the inner dimensions differ
            (the message names both shapes).
        TypeError: for non-float32 inputs.
    """
    return call("matmul", a, b, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def conv2d(x, kernel, strides=1, padding="valid", groups=None):
    """2D convolution (cross-correlation, as Keras/TensorFlow), no bias.

    ``y[n, i, j, o] = sum_{di, dj, c} x[n, i*sh + di - ph, j*sw + dj - pw, c]
    * kernel[di, dj, c, o]`` with zero padding outside the image.

    Args:
        x: float32 (N, H, W, C) images; N may be 0.
        kernel: float32 (KH, KW, C / groups, O) filter, any positive size.
        groups: grouped convolution (Xie et al. 2017, ResNeXt, section 3.3):
            C and O split into ``groups`` parts, output part g reading input
            part g only.  None infers it as ``C // kernel.shape[2]``, as
            ``keras.ops.conv`` does.
        strides: int or pair of ints ``(sh, sw)``, positive.
        padding: ``"valid"`` or ``"same"`` (case-insensitive; TensorFlow's
            split, see the module docstring).
    Returns:
        Tensor of shape (N, HO, WO, O), float32, where HO = ceil(H / sh) for
        "same" and floor((H - KH) / sh) + 1 for "valid" (WO alike).
    Raises:
        ValueError: bad padding string, wrong ranks, channel mismatch between
            x and kernel, non-positive strides, or a kernel larger than the
            input with "valid" (the message names the shapes).
        TypeError: for non-float32 inputs.
    """
    same = _same("conv2d", padding)
    if groups is None:  # when the ranks are wrong, groups=1 lets the op name them
        xs, ks = convert_to_tensor(x).shape, convert_to_tensor(kernel).shape
        groups = xs[-1] // ks[2] if len(xs) == 4 and len(ks) == 4 and xs[-1] and ks[2] else 1
    return call("conv2d", x, kernel, strides=strides, same=same, groups=int(groups))


def depthwise_conv2d(x, kernel, strides=1, padding="valid"):
    """Depthwise 2D convolution (``keras.ops.depthwise_conv``; Howard et al.
    2017, MobileNets, section 3.1): every input channel c convolved with its
    own ``depth_multiplier`` filters; output channel ``c * M + m``.

    Args:
        x: float32 (N, H, W, C).
        kernel: float32 (KH, KW, C, M), as ``keras.layers.DepthwiseConv2D``
            stores it.
    Returns:
        (N, HO, WO, C * M): the grouped conv2d with groups = C of the kernel
        reshaped to (KH, KW, 1, C * M) (exactly the same sums).
    Raises:
        ValueError: as :func:`conv2d`, or a kernel whose C differs from x's.
    """
    k = convert_to_tensor(kernel)
    if k.ndim != 4:
        raise ValueError(f"depthwise_conv2d: kernel must be (KH, KW, C, M), got {k.shape}")
    kh, kw, c, m = k.shape
    from .nn import reshape
    return conv2d(x, reshape(k, (kh, kw, 1, c * m)), strides, padding, groups=c)


def _transposed_length(length, window, stride, same):
    """Keras's ``deconv_output_length`` without output padding: ``same``:
    L * s; ``valid``: L * s + max(k - s, 0)."""
    return length * stride if same else length * stride + max(window - stride, 0)


def conv2d_transpose(x, kernel, strides=1, padding="valid"):
    """2D transposed convolution (``keras.ops.conv_transpose`` for NHWC, no
    output padding or dilation): the adjoint of :func:`conv2d`, computed by
    the registered ``conv2d_backprop_input`` op (the gradient of a
    convolution with respect to its input), so its kernels and its
    gradients (``conv2d`` and ``conv2d_backprop_filter``) are the
    convolution's own.

    Args:
        x: float32 (N, H, W, C) images.
        kernel: float32 (KH, KW, O, C): Keras's Conv2DTranspose layout
            (output channels, then the input's C).
        strides: int or pair of ints, positive.
        padding: ``"valid"`` or ``"same"``.
    Returns:
        Tensor (N, HO, WO, O), float32: HO = H * sh for "same" and
        H * sh + max(KH - sh, 0) for "valid" (WO alike), the sizes a
        convolution with these arguments maps back to (H, W).
    Raises:
        ValueError: bad padding, ranks, strides, or ``x``'s channels not the
            kernel's last axis (naming the shapes); TypeError for non-float32.
    """
    same = _same("conv2d_transpose", padding)
    sh, sw = (strides, strides) if isinstance(strides, int) else tuple(strides)
    kh, kw = kernel.shape[0], kernel.shape[1]
    x_shape, k_shape = tuple(x.shape), tuple(kernel.shape)
    if len(x_shape) != 4 or len(k_shape) != 4:
        raise ValueError(f"conv2d_transpose: expected x (N, H, W, C) and kernel (KH, KW, O, C), "
                         f"got shapes {x_shape} and {k_shape}")
    if k_shape[3] != x_shape[3]:
        raise ValueError(f"conv2d_transpose: x has {x_shape[3]} channels but the kernel "
                         f"{k_shape} expects {k_shape[3]} (its last axis)")
    from .nn import shape as dynamic_shape  # noqa: PLC0415
    n = dynamic_shape(x)[0] if x_shape[0] is None else x_shape[0]
    out = (n, _transposed_length(x_shape[1], kh, sh, same),
           _transposed_length(x_shape[2], kw, sw, same), k_shape[2])
    return call("conv2d_backprop_input", x, kernel, strides=[sh, sw], same=same, shape=out)


def max_pool2d(x, pool_size=2, strides=None, padding="valid"):
    """2D max pooling over NHWC float32 images (as ``keras.layers.MaxPooling2D``).

    Padded positions never win.  A NaN in a window makes its max NaN (as
    ``np.max`` and PyTorch).  The gradient goes to the window's first NaN,
    else to its first maximum (row-major order, like NumPy argmax).

    Args:
        x: float32 (N, H, W, C).
        pool_size: int or pair of ints, positive.
        strides: int, pair of ints, or None (= pool_size).
        padding: ``"valid"`` or ``"same"`` (case-insensitive).
    Returns:
        Tensor (N, HO, WO, C), float32 (sizes as for :func:`conv2d`).
    Raises:
        ValueError: bad padding string, rank other than 4, non-positive sizes
            or strides, or a window larger than the input with "valid".
        TypeError: for non-float32 input.
    """
    same = _same("max_pool2d", padding)
    return call("max_pool2d", x, pool_size=pool_size, strides=strides, same=same)


def average_pool2d(x, pool_size=2, strides=None, padding="valid"):
    """2D average pooling over NHWC float32 images (as
    ``keras.layers.AveragePooling2D``).

    With ``padding="same"`` each output averages only the window's taps
    inside the image (TensorFlow's ``avg_pool``: padding is not counted).

    Args:
        x: float32 (N, H, W, C).
        pool_size: int or pair of ints, positive.
        strides: int, pair of ints, or None (= pool_size).
        padding: ``"valid"`` or ``"same"`` (case-insensitive).
    Returns:
        Tensor (N, HO, WO, C), float32.
    Raises:
        ValueError / TypeError: as :func:`max_pool2d`.
    """
    same = _same("average_pool2d", padding)
    return call("avg_pool2d", x, pool_size=pool_size, strides=strides, same=same)


def global_average_pool2d(x):
    """Mean over the spatial axes (as ``keras.layers.GlobalAveragePooling2D``).

    Args:
        x: float32 (N, H, W, C) with H, W >= 1.
    Returns:
        Tensor (N, C), float32.
    Raises:
        ValueError: rank other than 4 or an empty image; TypeError: non-float32.
    """
    return call("global_average_pool", x)
