"""nn ops (csrc/ops_nn.c)."""
from .._loader import _C

call = _C.call
