"""Saving and loading models (``keras.saving``).

``model.save("m.keras")`` writes one zip archive (``config.json``, the
weights, ``metadata.json``) to a temporary file renamed into place:
Keras 3's own format (Keras's layer configs and ``model.weights.h5``, see
:mod:`.keras_saving`) when h5py is installed, which Keras 3's
``load_model`` opens too, else pyresnet's ``model.weights.npz`` (see
:mod:`.saving_lib`).  :func:`load_model` reads both, and ``.keras`` files
Keras 3 wrote, without unpickling or evaluating anything from the file.  Custom
Python layers are found through ``custom_objects`` or
:func:`register_serializable`.
"""
import json

from .object_registration import (custom_object_scope, get_custom_objects, get_registered_name,
                                  get_registered_object, register_serializable)
from .saving_lib import load_model, load_weights, model_from_config, save_model, save_weights
from .serialization import (deserialize_keras_object, deserialize_layer, serialize_keras_object,
                            serialize_layer)

CustomObjectScope = custom_object_scope  # Keras's other name for it

register_keras_serializable = register_serializable  # Keras's name for the same decorator


def model_from_json(json_string, custom_objects=None):
    """A new, unbuilt-weights model from :meth:`pyresnet.Model.to_json`'s
    string (``keras.models.model_from_json``).

    Raises:
        ValueError: for text that is not such JSON, or an unknown class.
    """
    try:
        config = json.loads(json_string)
    except (TypeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"model_from_json: not a JSON model config ({e})") from None
    if not isinstance(config, dict):
        raise ValueError("model_from_json: the JSON must be an object")
    return model_from_config(config, custom_objects, where="model_from_json")


__all__ = ["CustomObjectScope", "custom_object_scope", "deserialize_keras_object",
           "deserialize_layer", "get_custom_objects", "get_registered_name",
           "get_registered_object", "load_model", "load_weights", "model_from_config",
           "model_from_json", "register_keras_serializable", "register_serializable", "save_model",
           "save_weights", "serialize_keras_object", "serialize_layer"]
