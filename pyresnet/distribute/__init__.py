"""Data-parallel training over MPI ranks (``mpirun -n N python ...``).

Two ways to use it, with the names users know:

* Keras 3's ``keras.distribution.DataParallel``: ``strategy =
  pyresnet.distribute.DataParallel()``, then ``with strategy.scope():
  model.fit(...)`` (or ``set_distribution(strategy)``).  ``fit`` then gives
  each rank its slice of every global batch, averages the gradients over
  the ranks before the optimizer, broadcasts rank 0's weights and optimizer
  state at the start, averages the logged loss and metrics, and lets only
  rank 0 print progress and run the callbacks that write files.
* Horovod's ``DistributedOptimizer`` + ``broadcast_variables`` for custom
  (compiled) training steps, with :meth:`DataParallel.shard` for the data.

Batch normalization: each rank normalises with its own batch statistics
(the default of Keras's ``DataParallel``/``MirroredStrategy`` and of
PyTorch's DDP without ``SyncBatchNorm``), so two ranks with half batches
train as one process with the whole batch only for models without batch
normalization.  The moving mean/variance (non-trainable weights) are
averaged over the ranks at the end of every epoch, so all ranks hold the
same weights when they validate and when rank 0 saves.

The MPI library is the one mpi4py loads (``pip install
"pyresnet[distributed]"`` installs mpi4py and MPICH); the C core resolves
``MPI_Allreduce`` from it at run time (csrc/kernels/comm.c).

A rank that stops answering (stopped, hung, dead without its process
ending) would leave the others waiting in a collective forever.  So every
collective has a timeout, ``DEFAULT_COLLECTIVE_TIMEOUT`` (600 s, PyTorch's
default for NCCL process groups) unless :func:`init` or
:func:`set_collective_timeout` (the training command's
``--collective-timeout``) says otherwise: a rank that waits longer prints on
stderr which collective it waited in and which ranks had not arrived, and
ends the job (``MPI_Abort``, exit status 1).  The allreduces are polled
nonblocking ones (``MPI_Iallreduce``/``MPI_Test``); mpi4py's broadcasts
are preceded by a timed barrier.
"""
import contextlib
import sys
import threading
import time

import numpy as np

from .. import ops
from .._loader import _C
from ..tensor import Tensor, Variable
from ..utils import tree

__all__ = ["init", "is_initialized", "size", "rank", "local_size", "abort", "allreduce",
           "broadcast_variables", "set_collective_timeout", "collective_timeout",
           "DEFAULT_COLLECTIVE_TIMEOUT",
           "DistributedOptimizer", "DataParallel", "set_distribution", "distribution"]

_MPI = None
_ARRIVALS = None  # the duplicate of COMM_WORLD that carries the arrival messages
DEFAULT_COLLECTIVE_TIMEOUT = 600.0  # seconds (the C core's PR_COMM_DEFAULT_TIMEOUT)


def init(collective_timeout=None):
    """Initialise MPI through mpi4py (once; later calls return at once) and
    bind the C core's collectives to ``MPI.COMM_WORLD``.

    In a world of more than one rank it also installs a ``sys.excepthook``
    that prints the traceback and calls ``MPI_Abort``, so a rank that
    raises ends the whole job instead of leaving the others waiting in a
    collective (as ``python -m mpi4py`` does).

    Args:
        collective_timeout (float or None): seconds a collective waits for
            the other ranks before this rank reports which collective and
            which ranks, and ends the job; 0 waits forever; None keeps the
            current setting (``DEFAULT_COLLECTIVE_TIMEOUT`` at first).
            See :func:`set_collective_timeout`.
    Returns:
        (size, rank) of ``MPI.COMM_WORLD``.
    Raises:
        ImportError: mpi4py (or an MPI library) is not installed, with the
            pip command that installs both.
        ValueError: a timeout that is not a number of seconds >= 0.
    """
    global _MPI, _ARRIVALS
    if collective_timeout is not None:
        set_collective_timeout(collective_timeout)
    if _MPI is None:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise ImportError("pyresnet.distribute needs mpi4py and an MPI library: "
                              "pip install 'pyresnet[distributed]' (" + str(e) + ")") from None
        comm = MPI.COMM_WORLD
        _ARRIVALS = comm.Dup()
        handles = [_handle(MPI, h) for h in (comm, MPI.FLOAT, MPI.SUM, _ARRIVALS)]
        _C.mpi_bind(MPI.__file__, MPI._sizeof(MPI.Comm), *handles,
                    comm.Get_size(), comm.Get_rank())
        _MPI = MPI
        if comm.Get_size() > 1:
            _install_abort_hook(comm)
    return size(), rank()


def _handle(MPI, obj):
    """mpi4py's handle of ``obj`` as a signed 64-bit int: MPICH's int handles
    of duplicated communicators come sign-extended (0xffffffff84000000), and
    the C side keeps the low bytes of 4-byte ones."""
    h = MPI._handleof(obj) & (2**64 - 1)
    return h - 2**64 if h >= 2**63 else h


def _install_abort_hook(comm):
    previous = sys.excepthook

    def abort(kind, value, tb):
        sys.stderr.write(f"[rank {comm.Get_rank()} of {comm.Get_size()}] ")
        previous(kind, value, tb)
        sys.stderr.flush()
        sys.stdout.flush()
        # mpiexec forwards a rank's output through its proxy; Abort kills the
        # job at once, so give the proxy a moment to pass the traceback on.
        time.sleep(0.5)
        comm.Abort(1)

    sys.excepthook = abort
    # an exception in another thread ends the job too
    threading.excepthook = lambda args: abort(args.exc_type, args.exc_value,
                                              args.exc_traceback)


def set_collective_timeout(seconds):
    """How long (float seconds; 0: forever) a collective of this process
    (allreduce, and the barrier before each broadcast) waits for the other
    ranks.  Past it the rank prints on stderr the collective, its number
    and the ranks that had not arrived at it, then ends the whole job with
    ``MPI_Abort`` (exit status 1).  Default ``DEFAULT_COLLECTIVE_TIMEOUT``;
    give every rank the same value, longer than any rank's longest pause
    between two collectives (an epoch's validation, a save).

    Raises:
        ValueError: not a number of seconds in [0, 1e9].
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.integer,
                                                             np.floating)):
        raise ValueError(f"collective_timeout must be a number of seconds >= 0 (0: none), "
                         f"got {seconds!r}")
    _C.mpi_set_timeout(float(seconds))


def collective_timeout():
    """The collective timeout in seconds (0.0: none); see
    :func:`set_collective_timeout`."""
    return _C.mpi_timeout()


def is_initialized():
    """Whether :func:`init` has bound MPI in this process."""
    return bool(_C.mpi_world()[0])


def size():
    """The number of ranks (1 before :func:`init`)."""
    return _C.mpi_world()[1]


def rank():
    """This process's rank in ``MPI.COMM_WORLD`` (0 before :func:`init`)."""
    return _C.mpi_world()[2]


def allreduce(x, op="mean"):
    """The mean (or ``op="sum"``) of the float32 tensor ``x`` over all ranks
    (:func:`pyresnet.ops.allreduce`, whose default is ``"sum"``; this one
    defaults to ``"mean"`` as Horovod's ``hvd.allreduce``).  Initialises MPI
    if needed."""
    init()
    return ops.allreduce(x, op=op)


def broadcast_variables(variables, root_rank=0):
    """Overwrite every Variable with its value on ``root_rank`` (Horovod's
    ``broadcast_variables``), eagerly.  All ranks must pass Variables of the
    same shapes and dtypes in the same order.

    Raises:
        TypeError: an item is not a Variable.
        ValueError: ``root_rank`` is not a rank.
    """
    init()
    if not 0 <= root_rank < size():
        raise ValueError(f"broadcast_variables: root_rank must be in [0, {size()}), got "
                         f"{root_rank!r}")
    comm = _MPI.COMM_WORLD
    _C.mpi_barrier("broadcast_variables")
    for v in variables:
        if not isinstance(v, Variable):
            raise TypeError(f"broadcast_variables: expected Variables, got {type(v).__name__}")
        value = np.array(v)  # a copy: the root sends it, the others receive into it
        comm.Bcast(value, root=root_rank)
        if comm.Get_rank() != root_rank:
            v.assign(value)


def local_size():
    """The number of ranks on this machine (sharing its memory)."""
    init()
    _C.mpi_barrier("local_size")
    local = _MPI.COMM_WORLD.Split_type(_MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_size()
    finally:
        local.Free()


def abort(code=1):
    """End every rank of the job now with exit status ``code``
    (``MPI_Abort``); for a rank that cannot go on, so that the others do
    not wait for it in a collective."""
    init()
    sys.stdout.flush()
    sys.stderr.flush()
    _MPI.COMM_WORLD.Abort(code)


def _bcast_object(obj, root_rank=0):
    init()
    _C.mpi_barrier("broadcast")
    return _MPI.COMM_WORLD.bcast(obj, root=root_rank)


BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's default bucket_cap_mb


class _Buckets:
    """Averages gradients over the ranks a bucket at a time: consecutive
    gradients, up to ``bucket_bytes`` together, are copied into one flat
    float32 Variable (``ops.flat_assign``), averaged by one
    ``ops.allreduce_inplace`` and copied out (``ops.flat_slice``): one
    message per bucket instead of one per tensor (Horovod's tensor fusion,
    PyTorch DDP's buckets), which matters between machines, where each
    message pays the network's latency (docs/distributed.md).
    A gradient larger than a bucket, or alone in one, is averaged directly.
    ``bucket_bytes=0``: one allreduce per gradient.

    The buffers are kept per list of shapes, so a step traced again (another
    batch size) reuses them; one owner runs one step at a time."""

    def __init__(self, bucket_bytes):
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) \
                or bucket_bytes < 0:
            raise ValueError(f"bucket_bytes must be an int >= 0, got {bucket_bytes!r}")
        self.bucket_bytes = bucket_bytes
        self._buffers = {}

    def _groups(self, grads):
        groups, current, nbytes = [], [], 0
        for i, g in enumerate(grads):
            if g is None:
                continue
            b = 4 * int(np.prod(g.shape))
            if current and nbytes + b > self.bucket_bytes:
                groups.append(current)
                current, nbytes = [], 0
            current.append(i)
            nbytes += b
        return groups + ([current] if current else [])

    def average(self, grads):
        """The gradients (None stays None) averaged over the ranks, as
        Tensors, eager or traced into a compiled step; as given with one
        rank."""
        out = list(grads)
        if size() == 1:
            return out
        for group in self._groups(out):
            if len(group) == 1:
                out[group[0]] = ops.allreduce(out[group[0]], op="mean")
                continue
            shapes = tuple(tuple(int(d) for d in out[i].shape) for i in group)
            counts = [int(np.prod(s)) for s in shapes]
            buffer = self._buffers.get(shapes)
            if buffer is None:
                buffer = self._buffers[shapes] = Variable(
                    np.zeros(sum(counts), np.float32), trainable=False, name="allreduce_bucket")
            offsets = np.cumsum([0] + counts[:-1]).tolist()
            for i, offset in zip(group, offsets):
                ops.flat_assign(buffer, out[i], offset)
            ops.allreduce_inplace(buffer, op="mean")
            for i, offset, shape in zip(group, offsets, shapes):
                out[i] = ops.flat_slice(buffer, offset, shape)
        return out


class DistributedOptimizer:
    """Horovod's ``DistributedOptimizer``: wraps an optimizer so that
    ``apply_gradients`` first averages every gradient over the ranks (in
    buckets, as :meth:`DataParallel.average_gradients`), then applies the wrapped optimizer's update.
    Works eagerly and inside ``pyresnet.compile``d steps.  Every other
    attribute (``learning_rate``, ``iterations``, ``variables``, ...) is the
    wrapped optimizer's.

    Args:
        optimizer: e.g. :class:`pyresnet.optimizers.SGD`.
        bucket_bytes (int): gradients are averaged in buckets of up to this
            many bytes, one allreduce each (0: one per gradient); default
            25 MiB, PyTorch DDP's.
    Raises:
        ValueError: bucket_bytes not an int >= 0.
    """

    def __init__(self, optimizer, bucket_bytes=BUCKET_BYTES):
        init()
        self.optimizer = optimizer
        self._buckets = _Buckets(bucket_bytes)

    def apply_gradients(self, grads_and_vars):
        """Average the gradients over the ranks, then apply them (arguments,
        return value and errors as the wrapped optimizer's
        ``apply_gradients``)."""
        pairs = list(grads_and_vars)
        grads = self._buckets.average([g for g, _ in pairs])
        return self.optimizer.apply_gradients(zip(grads, [v for _, v in pairs]))

    def apply(self, grads, trainable_variables=None):
        """Average the gradients over the ranks, then the wrapped optimizer's
        ``apply(grads, trainable_variables)`` (Keras 3's form)."""
        return self.optimizer.apply(self._buckets.average(list(grads)), trainable_variables)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


_stack = []
_global = None


def set_distribution(value):
    """Make ``value`` (a :class:`DataParallel` or None) the distribution
    ``fit`` uses outside any ``scope()`` (Keras 3's
    ``keras.distribution.set_distribution``)."""
    global _global
    if value is not None and not isinstance(value, DataParallel):
        raise TypeError(f"set_distribution: expected a DataParallel or None, got "
                        f"{type(value).__name__}")
    _global = value


def distribution():
    """The distribution in force: the innermost ``scope()``, else the one
    given to :func:`set_distribution`, else None."""
    return _stack[-1] if _stack else _global


class DataParallel:
    """Synchronous data parallelism over all MPI ranks (Keras 3's
    ``keras.distribution.DataParallel`` name; one replica per rank).

    Under it, ``model.fit``:

    * keeps ``batch_size`` as the global batch: each step, rank r trains on
      rows ``[r*b, (r+1)*b)`` of the global batch, ``b = len(batch) // N``
      (the ``len(batch) % N`` rows left over in an epoch's last batch are
      not used; a batch with fewer rows than ranks is skipped), so every
      epoch's data is split over the ranks;
    * averages the gradients over the ranks before the optimizer (in buckets
      of ``bucket_bytes``, one allreduce each), so a step
      equals one step of one process on the whole global batch (up to batch
      normalization, see the module's docstring, and float32 rounding);
      with the global batch kept, the learning rate needs no scaling;
    * broadcasts the weights, the optimizer's variables and the shuffling
      seed from rank 0 at the start of ``fit``;
    * averages the logged loss and metrics over the ranks, so callbacks that
      decide (EarlyStopping, ReduceLROnPlateau, LearningRateScheduler) decide
      alike on every rank;
    * averages the moving statistics of batch normalization at every epoch's
      end;
    * on ranks other than 0, prints nothing and drops the callbacks that
      write files (ModelCheckpoint, CSVLogger, TensorBoard, BackupAndRestore)
      and the progress bar.

    Args:
        bucket_bytes (int): gradients are averaged in buckets of up to this
            many bytes, one allreduce each (0: one per gradient); default
            25 MiB, PyTorch DDP's.  Not overlapped with the backward pass:
            the averaging of ResNet-20's gradients takes under 1% of a step
            here (docs/distributed.md).
    Raises:
        ImportError: mpi4py missing (see :func:`init`).
        ValueError: bucket_bytes not an int >= 0.
    """

    def __init__(self, bucket_bytes=BUCKET_BYTES):
        self.num_replicas, self.rank = init()
        self._buckets = _Buckets(bucket_bytes)

    def average_gradients(self, grads):
        """The gradients (a list; None stays None) averaged over the ranks,
        bucketed (see ``bucket_bytes``), eagerly or inside a compiled step."""
        return self._buckets.average(grads)

    @contextlib.contextmanager
    def scope(self):
        """A context in which ``fit`` (and :func:`distribution`) use this
        strategy."""
        _stack.append(self)
        try:
            yield self
        finally:
            _stack.pop()

    def shard(self, batch):
        """This rank's rows of a global batch (a Tensor/array or a list of
        them, batch first) as Tensors/arrays of the same kind; see the class
        docstring for the split.  Returns None when the batch has fewer rows
        than there are ranks."""
        items = batch if isinstance(batch, (list, tuple)) else [batch]
        n = len(items[0]) // self.num_replicas
        if n == 0:
            return None
        lo = self.rank * n
        out = [_rows(a, lo, lo + n) for a in items]
        return type(batch)(out) if isinstance(batch, (list, tuple)) else out[0]

    def distribute_dataset(self, batches):
        """Iterate the global batches of ``batches`` (``(x, y)``, ``(x, y,
        sample_weight)`` tuples or ``x`` alone, as ``fit`` hands them to the
        steps) as this rank's shards of the same structure (batches too
        small to split are skipped)."""
        for batch in batches:
            parts = batch if isinstance(batch, tuple) else (batch,)
            xs = self.shard(parts[0])
            if xs is None:
                continue
            rest = tuple(None if p is None else self.shard(p) for p in parts[1:])
            yield (xs,) + rest if isinstance(batch, tuple) else xs

    # ---- the hooks fit uses (_NoDistribution has the same, doing nothing) -------------

    def _wrap_step(self, model, step):
        """The train step ``fit`` runs under this strategy: the step with
        the optimizer averaging the gradients over the ranks (in buckets)
        before it applies them, then its logs averaged over the ranks.  An
        optimizer that averages already (:class:`DistributedOptimizer`) is
        left as it is."""
        def distributed(data):
            optimizer = model.optimizer
            if isinstance(optimizer, DistributedOptimizer):
                logs = step(data)
            else:
                optimizer._gradient_reducer = self.average_gradients
                try:
                    logs = step(data)
                finally:
                    optimizer._gradient_reducer = None
            return tree.map_structure(lambda v: ops.allreduce(v, op="mean"), logs)
        distributed.__name__ = getattr(step, "__name__", "train_step")
        return distributed

    def _fit_begin(self, data, callbacks, verbose):
        """(this rank's batches, its callbacks, its verbosity)."""
        from .. import callbacks as cb
        if self.rank != 0:
            writers = (cb.ProgbarLogger, cb.ModelCheckpoint, cb.CSVLogger, cb.TensorBoard,
                       cb.BackupAndRestore)
            callbacks = [c for c in callbacks or [] if not isinstance(c, writers)]
            verbose = 0
        return _ShardedBatches(data, self), callbacks, verbose

    def _train_begin(self, model, progress):
        """After the callbacks' on_train_begin (a restored backup on rank 0):
        rank 0's weights (trainable and not), optimizer state and place in
        the run, on every rank."""
        variables = [w for w in model.weights if w.dtype == "float32"]
        opt = model.optimizer
        if opt is not None:
            variables += [v for v in opt.variables if v.dtype == "float32"]
            variables.append(opt.iterations)
        broadcast_variables(variables)
        state = _bcast_object(progress.get_state())
        if self.rank != 0:
            progress.set_state(state)

    def _epoch_end(self, model):
        """Average the moving statistics (float32 non-trainable weights)."""
        for w in model.non_trainable_weights:
            if w.dtype == "float32":
                ops.allreduce_inplace(w, op="mean")


class _NoDistribution:
    """The hooks of :class:`DataParallel` for ``fit`` without a distribution:
    the data, callbacks, step and variables as they are."""

    def _fit_begin(self, data, callbacks, verbose):
        return data, callbacks, verbose

    def _wrap_step(self, model, step):
        return step

    def _train_begin(self, model, progress):
        pass

    def _epoch_end(self, model):
        pass


NO_DISTRIBUTION = _NoDistribution()


class _ShardedBatches:
    """The batches of ``data`` (ArrayBatches or DatasetBatches) as this rank's
    shards; ``len()``, ``num_samples`` and the state hooks are the global
    data's, so progress bars and callbacks count global steps."""

    def __init__(self, data, strategy):
        self.data, self.strategy = data, strategy
        self.num_samples = getattr(data, "num_samples", None)
        self.batch_size = getattr(data, "batch_size", None)
        if getattr(data, "shuffle", False):
            data.seed = _bcast_object(data.seed)

    def __len__(self):
        return len(self.data)

    def get_state(self):
        return self.data.get_state()

    def set_state(self, state):
        self.data.set_state(state)

    def __iter__(self):
        return self.strategy.distribute_dataset(self.data)


def _rows(a, lo, hi):
    if isinstance(a, Tensor):
        return Tensor(np.ascontiguousarray(np.asarray(a)[lo:hi]))
    return a[lo:hi]
