"""augment ops (csrc/ops_augment.c)."""
from .._loader import _C

call = _C.call
