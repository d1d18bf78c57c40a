"""Utilities with Keras names: seeding (``set_random_seed``), session reset
(``clear_session``), nested-structure helpers (``utils.tree``), data
helpers (``to_categorical``, ``PyDataset``, ``unpack_x_y_sample_weight``),
image files (``load_img``, ``img_to_array``, ``array_to_img``, ``save_img``,
``image_dataset_from_directory``; Pillow, ``pip install pyresnet[images]``)
and ``plot_model``."""
from .naming import clear_session
from .rng import get_rng, set_random_seed
from .data import PyDataset, pack_x_y_sample_weight, unpack_x_y_sample_weight
from .numerical_utils import to_categorical
from .image_utils import array_to_img, img_to_array, load_img, save_img, smart_resize
from .image_dataset import image_dataset_from_directory


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
           "unpack_x_y_sample_weight", "pack_x_y_sample_weight", "plot_model", "model_to_dot",
           "load_img", "img_to_array", "array_to_img", "save_img", "smart_resize",
           "image_dataset_from_directory"]
