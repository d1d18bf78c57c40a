"""Models (``keras.models``): :class:`Model` (functional or subclassed) and
:class:`Sequential`, with ``compile``/``fit``/``evaluate``/``predict``/
``summary``."""
from .model import Model
from .sequential import Sequential

__all__ = ["Model", "Sequential"]
