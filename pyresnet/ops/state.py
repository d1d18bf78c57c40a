"""state ops (csrc/ops_state.c)."""
from .._loader import _C

call = _C.call
