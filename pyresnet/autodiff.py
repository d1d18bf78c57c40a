"""``GradientTape``: reverse-mode autodiff over the op registry's gradient
rules (csrc/autodiff.c), with tf.GradientTape's interface."""
from ._loader import _C
from .compile import name_scope
from .tensor import Tensor
from .utils import tree


class GradientTape:
    """Record ops for automatic differentiation, as ``tf.GradientTape``.

    Inside ``with GradientTape() as tape:`` every op whose input is a
    trainable Variable, a watched tensor, or the output of a recorded op is
    recorded; ``tape.gradient(target, sources)`` then applies the registry's
    gradient rules backwards (eagerly, or as graph nodes while tracing).

    Args:
        persistent (bool): allow several ``gradient`` calls.
    """

    def __init__(self, persistent=False):
        self._tape = _C.Tape(persistent=persistent)

    def __enter__(self):
        self._tape.push()
        return self

    def __exit__(self, *exc):
        self._tape.pop()
        return False

    def watch(self, tensor):
        """Record ops on ``tensor`` (or every tensor of a nested structure)."""
        for t in tree.flatten(tensor):
            self._tape.watch(t)

    def gradient(self, target, sources, output_gradients=None):
        """Gradients of ``target`` with respect to ``sources``.

        Args:
            target: a Tensor (usually a scalar loss), or a list/tuple of
                Tensors whose sum is differentiated (as TensorFlow does:
                each target is seeded, nothing needs recording).
            sources: a Tensor/Variable or a nested list/tuple/dict of them.
            output_gradients: optional float32 Tensor of target's shape to
                start from (default: ones); for a list of targets, a list
                with one such gradient (or None) per target.
        Returns:
            The gradients in the structure of ``sources``: float32 Tensors of
            each source's shape, or ``None`` for a source the target does not
            depend on.
        Raises:
            RuntimeError: on a second call of a non-persistent tape, or inside
                the ``with`` block.
            TypeError: when target or a source is not a Tensor, or an output
                gradient is not float32.
            ValueError: for an empty target list, or an output gradient whose
                shape differs from its target's.
        """
        if isinstance(target, (list, tuple)):
            target = list(target)
            if isinstance(output_gradients, tuple):
                output_gradients = list(output_gradients)
        flat = tree.flatten(sources)
        for i, s in enumerate(flat):
            if not isinstance(s, Tensor):
                raise TypeError(
                    f"GradientTape.gradient: source {i} must be a Tensor or Variable, "
                    f"got {type(s).__name__}"
                )
        with name_scope("gradient_tape"):  # (traced: the backward nodes' scope)
            grads = self._tape.gradient(target, flat, output_gradients)
        return tree.pack_sequence_as(sources, grads)
