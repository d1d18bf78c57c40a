"""Utilities with Keras names: seeding (``set_random_seed``), session reset
(``clear_session``), nested-structure helpers (``utils.tree``), data
helpers (``to_categorical``, ``PyDataset``, ``unpack_x_y_sample_weight``)
and ``plot_model``."""
from .naming import clear_session
from .rng import get_rng, set_random_seed
from .data import PyDataset, pack_x_y_sample_weight, unpack_x_y_sample_weight
from .numerical_utils import to_categorical


def plot_model(model, to_file="model.png", show_shapes=False, show_dtype=False,
               show_layer_names=True, rankdir="TB", dpi=200, **kwargs):
    """See :func:`pyresnet.utils.model_visualization.plot_model`."""
    from .model_visualization import plot_model as _plot  # noqa: PLC0415
    return _plot(model, to_file, show_shapes, show_dtype, show_layer_names, rankdir, dpi,
                 **kwargs)


def model_to_dot(model, show_shapes=False, show_dtype=False, show_layer_names=True,
                 rankdir="TB", dpi=200):
    """See :func:`pyresnet.utils.model_visualization.model_to_dot`."""
    from .model_visualization import model_to_dot as _to_dot  # noqa: PLC0415
    return _to_dot(model, show_shapes, show_dtype, show_layer_names, rankdir, dpi)


__all__ = ["set_random_seed", "clear_session", "get_rng", "PyDataset", "to_categorical",
           "unpack_x_y_sample_weight", "pack_x_y_sample_weight", "plot_model", "model_to_dot"]
