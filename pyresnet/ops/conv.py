"""conv ops (csrc/ops_conv.c)."""
from .._loader import _C

call = _C.call
