"""Default layer names: snake_case of the class name made unique per session
(Keras's ``auto_name``)."""
import re

_name_counts = {}


def to_snake_case(name):
    """Keras's rule: ``Conv2D`` -> ``conv2d``, ``BatchNormalization`` ->
    ``batch_normalization``, ``ReLU`` -> ``re_lu``."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def unique_name(base):
    """``base`` the first time, then ``base_1``, ``base_2``, ... (Keras's
    default layer names); reset by :func:`clear_session`."""
    n = _name_counts.get(base, 0)
    _name_counts[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def clear_session():
    """Reset the default-name counters (``keras.backend.clear_session``), so
    the next ``Dense`` is named ``dense`` again.  Existing layers keep theirs."""
    _name_counts.clear()
