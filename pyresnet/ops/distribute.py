"""distribute ops (csrc/ops_distribute.c): collectives over MPI ranks.

They need :func:`pyresnet.distribute.init` first (mpi4py); every rank must
make the same calls with the same shapes in the same order, eagerly or as
nodes of a compiled step (the executor runs each exactly once per call, with
the GIL released).
"""
from .._loader import _C

call = _C.call

__all__ = ["allreduce", "allreduce_inplace", "flat_assign", "flat_slice"]

_AVERAGE = {"sum": False, "mean": True}


def _average(op):
    if op not in _AVERAGE:
        raise ValueError(f"allreduce: op must be 'sum' or 'mean', got {op!r}")
    return _AVERAGE[op]


def allreduce(x, op="sum"):
    """The sum (or mean) of ``x`` over all ranks, returned on every rank.

    Args:
        x: float32 Tensor or array, the same shape on every rank.
        op (str): ``"sum"`` or ``"mean"`` (the sum divided by the number of
            ranks, in float32).
    Returns:
        Tensor of x's shape.  Differentiable: the gradient is the same
        allreduce of the output gradients (Horovod's rule).
    Raises:
        RuntimeError: MPI not initialised, or MPI_Allreduce failed (its
            error string).  TypeError: x not float32.  ValueError: bad op.
    """
    return call("allreduce", x, average=_average(op))


def allreduce_inplace(variable, op="sum"):
    """``variable = allreduce(variable, op)`` in place (arguments and errors
    as :func:`allreduce`; ``variable`` must be a float32 Variable)."""
    call("allreduce_inplace", variable, average=_average(op))


def flat_assign(variable, value, offset):
    """``variable.flat[offset:offset + value.size] = value.flat`` in place:
    packs a tensor into a flat buffer (a bucket of gradients for one
    allreduce).

    Args:
        variable: float32 Variable (any shape, read flat).
        value: float32 tensor of known size.
        offset (int): the first element written.
    Raises:
        ValueError: the range does not lie in the variable (nothing written).
        TypeError: not float32, or ``variable`` not a Variable.
    """
    call("flat_assign", variable, value, offset=int(offset))


def flat_slice(x, offset, shape):
    """``x.flat[offset:offset + prod(shape)]`` as a new float32 tensor of
    ``shape``: unpacks a tensor from a flat buffer (not differentiable).

    Raises:
        ValueError: the range does not lie in ``x``, or a negative size.
        TypeError: x not float32.
    """
    return call("flat_slice", x, offset=int(offset), shape=tuple(int(d) for d in shape))
