"""Batches as ``fit`` hands them to the steps (Keras's
``unpack_x_y_sample_weight``/``pack_x_y_sample_weight``) and
:class:`PyDataset`, Keras 3's base class for Python data sources."""


def unpack_x_y_sample_weight(data):
    """``(x, y, sample_weight)`` of a batch, None for the parts it lacks
    (``keras.utils.unpack_x_y_sample_weight``).

    Args:
        data: ``(x,)``, ``(x, y)``, ``(x, y, sample_weight)`` (tuples), or
            ``x`` itself (a Tensor, array, list of inputs or dict).
    Raises:
        ValueError: for a tuple of more than 3 items.
    """
    if not isinstance(data, tuple):
        return data, None, None
    if len(data) == 1:
        return data[0], None, None
    if len(data) == 2:
        return data[0], data[1], None
    if len(data) == 3:
        return data
    raise ValueError(f"a batch is (x,), (x, y) or (x, y, sample_weight), got a tuple of "
                     f"{len(data)} items")


def pack_x_y_sample_weight(x, y=None, sample_weight=None):
    """The inverse of :func:`unpack_x_y_sample_weight`: ``(x,)``, ``(x, y)``
    or ``(x, y, sample_weight)``."""
    if y is None:
        return (x,)
    return (x, y) if sample_weight is None else (x, y, sample_weight)


class PyDataset:
    """Base class for Python data sources of batches (``keras.utils.PyDataset``).

    Subclass it with ``__len__`` (the number of batches) and
    ``__getitem__(index)`` returning batch ``index`` as ``(x, y)``, ``(x, y,
    sample_weight)`` or ``x`` (NumPy arrays or Tensors); ``on_epoch_end``
    runs after every pass (e.g. to reshuffle).  ``fit``, ``evaluate`` and
    ``predict`` take an instance directly.

    Args:
        workers, use_multiprocessing, max_queue_size: accepted for Keras's
            signature; batches are read in order in the calling thread (a
            :class:`pyresnet.data.Dataset` with ``prefetch`` prepares them
            in C on a worker thread instead).
    """

    def __init__(self, workers=1, use_multiprocessing=False, max_queue_size=10):
        self.workers = workers
        self.use_multiprocessing = use_multiprocessing
        self.max_queue_size = max_queue_size

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    @property
    def num_batches(self):
        """``len(self)`` (Keras's name)."""
        return len(self)

    def on_epoch_end(self):
        """Called after every full pass (override it)."""

    def __iter__(self):
        for index in range(len(self)):
            yield self[index]
        self.on_epoch_end()
