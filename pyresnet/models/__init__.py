"""Models (``keras.models``): :class:`Model` (functional or subclassed) and
:class:`Sequential`, with ``compile``/``fit``/``evaluate``/``predict``/
``summary``; :class:`TestTimeAugmentation` (a wrapper averaging over
mirrored/translated views); :func:`load_model` and :func:`model_from_json` (from
:mod:`pyresnet.saving`)."""
from .cloning import clone_model
from .model import Model
from .sequential import Sequential
from .tta import TestTimeAugmentation


def load_model(filepath, custom_objects=None, compile=True):
    """See :func:`pyresnet.saving.load_model`."""
    from ..saving import load_model as _load  # noqa: PLC0415
    return _load(filepath, custom_objects=custom_objects, compile=compile)


def model_from_json(json_string, custom_objects=None):
    """See :func:`pyresnet.saving.model_from_json`."""
    from ..saving import model_from_json as _from_json  # noqa: PLC0415
    return _from_json(json_string, custom_objects=custom_objects)


__all__ = ["Model", "Sequential", "TestTimeAugmentation", "clone_model", "load_model",
           "model_from_json"]
