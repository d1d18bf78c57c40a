"""TensorBoard summaries of compiled functions (``tf.summary.trace_on`` /
``trace_export``): the traced graph for the Graphs dashboard and the
per-node timings for a trace viewer.

* :func:`graph_def` turns a :class:`~pyresnet.ConcreteFunction` into a
  TensorBoard ``GraphDef``: one node per graph node, named
  ``<name scope>/<op>`` (the scopes are the layers that made the nodes, see
  :func:`pyresnet.name_scope`, so TensorBoard folds a ResNet into its
  blocks), with the attributes ``dtype``, ``_output_shapes`` (an unknown
  size as -1, which TensorBoard shows as ``?``), ``shape`` (text, ``None``
  for an unknown size), ``kernel`` (the kernel variant, when the op has
  several) and ``flops``; the inputs are the edges.  Graph inputs are
  ``Placeholder`` nodes, captured Variables ``VariableV2`` nodes placed in
  the scope of their first user (a layer's weights fold into the layer),
  the outputs ``Identity`` nodes ``output_<k>``.
* :func:`write_graph` writes it to an event file (and, given a profile,
  the per-node compute time and output memory as TensorBoard run metadata:
  the Graphs dashboard colours nodes and blocks by them).
* :func:`write_profile` writes a profile where trace viewers find it:
  ``<logdir>/plugins/profile/<run>/<host>.trace.json.gz`` (Chrome
  trace-event JSON, for ui.perfetto.dev or chrome://tracing) with the
  per-op and per-node tables beside it (``<host>.per_op.txt``,
  ``<host>.per_node.txt``).
* :func:`trace_on` / :func:`trace_export` record the compiled calls made
  in between (their graphs, and with ``profiler=True`` their node times)
  and write them, as TensorFlow's functions of those names do.

The event files are written with tensorboardX (``pip install
'pyresnet[tensorboard]'``); TensorFlow is not needed.
"""
import gzip
import itertools
import json
import os
import socket
import threading
import time

from . import profiling
from . import _trace
from .compile import ConcreteFunction


__all__ = ["graph_def", "run_metadata", "write_graph", "write_run_metadata", "write_profile",
           "trace_on", "trace_off", "trace_export", "recording"]

_writer_numbers = itertools.count()

# TensorFlow's DataType enum (types.proto)
_DTYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6,
           "int64": 9, "bool": 10, "bfloat16": 14, "float16": 19}
_DEVICE = "/device:CPU:0"


def _protos():
    try:
        from tensorboardX.proto import (attr_value_pb2, graph_pb2, node_def_pb2,  # noqa: PLC0415
                                        tensor_shape_pb2, versions_pb2)
    except ImportError as e:
        raise ImportError("TensorBoard graphs need tensorboardX: pip install "
                          "'pyresnet[tensorboard]'") from e
    return attr_value_pb2, graph_pb2, node_def_pb2, tensor_shape_pb2, versions_pb2


def _shape_text(shape):
    return "(" + ", ".join("None" if not isinstance(d, int) else str(d) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


class _Namer:
    """Unique node names that never equal a scope (a group) path."""

    def __init__(self, scopes):
        self.taken = set()
        for s in scopes:
            parts = s.split("/") if s else []
            self.taken.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))

    def __call__(self, scope, base):
        stem = f"{scope}/{base}" if scope else base
        name, k = stem, 0
        while name in self.taken:
            k += 1
            name = f"{stem}_{k}"
        self.taken.add(name)
        return name


def _layout(concrete):
    """Node names and scopes of a concrete function's graph: ``(op_names,
    value_names, values, nodes)`` where ``value_names[v]`` names the
    GraphDef node producing value ``v`` (with ``:k`` for a node's k-th
    output, k > 0)."""
    graph = concrete.graph
    values, nodes = graph.values(), graph.nodes()
    scopes = concrete.node_scopes
    capture_scope = {}
    for (op, ins, outs), scope in zip(nodes, scopes):
        for v in ins:
            if values[v][0] == "capture":
                capture_scope.setdefault(v, scope)
    namer = _Namer(list(scopes) + list(capture_scope.values()))
    value_names = {}
    captures = graph.captures
    for v, (kind, dtype, shape, index) in enumerate(values):
        if kind == "input":
            value_names[v] = namer("", f"input_{index}")
        elif kind == "capture" and v in capture_scope:
            var = captures[index]
            short = str(getattr(var, "name", "") or f"capture_{index}").split("/")[-1]
            short = short.split(":")[0] or f"capture_{index}"
            value_names[v] = namer(capture_scope[v], short)
    op_names = []
    for (op, ins, outs), scope in zip(nodes, scopes):
        name = namer(scope, op)
        op_names.append(name)
        for k, v in enumerate(outs):
            value_names[v] = name if k == 0 else f"{name}:{k}"
    return op_names, value_names, values, nodes


def graph_def(concrete):
    """The TensorBoard ``GraphDef`` (tensorboardX's bundled protobuf
    message) of a traced graph.

    Args:
        concrete: a :class:`~pyresnet.ConcreteFunction` (from
            ``fn.get_concrete_function(*args)``).  Kernel variants and the
            ``flops`` attribute are those of the arguments it was obtained
            with; shapes are the traced ones (unknown sizes as -1/None).
    Returns:
        ``tensorboardX.proto.graph_pb2.GraphDef``.
    Raises:
        ImportError: when tensorboardX is not installed.
    """
    attr_pb, graph_pb, node_pb, shape_pb, versions_pb = _protos()
    op_names, value_names, values, nodes = _layout(concrete)
    plan = concrete._plan()

    def shape_proto(shape):
        return shape_pb.TensorShapeProto(dim=[
            shape_pb.TensorShapeProto.Dim(size=d if isinstance(d, int) else -1) for d in shape])

    def common_attrs(node, vids):
        dtypes = [values[v][1] for v in vids]
        if dtypes:
            node.attr["dtype"].CopyFrom(attr_pb.AttrValue(type=_DTYPES.get(dtypes[0], 0)))
        node.attr["_output_shapes"].CopyFrom(attr_pb.AttrValue(list=attr_pb.AttrValue.ListValue(
            shape=[shape_proto(values[v][2]) for v in vids])))
        node.attr["shape"].CopyFrom(attr_pb.AttrValue(
            s=", ".join(_shape_text(values[v][2]) for v in vids).encode()))

    out = []
    for v, (kind, dtype, shape, index) in enumerate(values):
        if v not in value_names or kind == "node":
            continue
        node = node_pb.NodeDef(name=value_names[v], device=_DEVICE,
                               op="Placeholder" if kind == "input" else "VariableV2")
        common_attrs(node, [v])
        out.append(node)
    for j, (op, ins, outs) in enumerate(nodes):
        node = node_pb.NodeDef(name=op_names[j], op=op, device=_DEVICE,
                               input=[value_names[v] for v in ins])
        common_attrs(node, outs)
        if plan["kernels"][j] is not None:
            node.attr["kernel"].CopyFrom(attr_pb.AttrValue(s=str(plan["kernels"][j]).encode()))
        node.attr["flops"].CopyFrom(attr_pb.AttrValue(i=int(plan["node_flops"][j])))
        out.append(node)
    namer_taken = set(op_names) | set(value_names.values())
    for k, v in enumerate(concrete.graph.outputs):
        name = f"output_{k}"
        while name in namer_taken:
            name += "_"
        node = node_pb.NodeDef(name=name, op="Identity", device=_DEVICE, input=[value_names[v]])
        common_attrs(node, [v])
        out.append(node)
    return graph_pb.GraphDef(node=out, versions=versions_pb.VersionDef(producer=22))


def run_metadata(concrete, profile):
    """TensorBoard run metadata of a profiled call: per GraphDef node its
    mean compute time and the bytes of its outputs (``StepStats``), which
    the Graphs dashboard shows (colour by compute time or memory, summed
    over each block).

    Args:
        concrete: the :class:`~pyresnet.ConcreteFunction` profiled.
        profile: its :class:`pyresnet.profiling.Profile`.
    Returns:
        ``tensorboard.compat.proto.config_pb2.RunMetadata``.
    Raises:
        ImportError: when the ``tensorboard`` package is not installed.
    """
    try:  # (tensorboardX bundles no RunMetadata: TensorBoard's own protos)
        from tensorboard.compat.proto import (  # noqa: PLC0415
            allocation_description_pb2, config_pb2, step_stats_pb2, tensor_description_pb2)
    except ImportError as e:
        raise ImportError("TensorBoard run metadata needs the tensorboard package: pip install "
                          "'pyresnet[tensorboard]'") from e
    op_names, value_names, values, nodes = _layout(concrete)
    plan = concrete._plan()
    # (starts from 1: a zero is left out of the message, and TensorBoard
    # then adds an undefined start to the duration)
    stats, start = [], 1
    for j, row in enumerate(profile.by_node):
        micros = max(1, int(round(row["mean_ms"] * 1e3)))
        outputs, total = [], 0
        for slot, v in enumerate(nodes[j][2]):
            shape = plan["shapes"][v]
            size = 1
            for d in shape:
                size *= int(d)
            nbytes = size * _itemsize(values[v][1])
            total += nbytes
            alloc = allocation_description_pb2.AllocationDescription(
                requested_bytes=nbytes, allocated_bytes=nbytes, allocator_name="cpu")
            desc = tensor_description_pb2.TensorDescription(
                dtype=_DTYPES.get(values[v][1], 0), allocation_description=alloc)
            outputs.append(step_stats_pb2.NodeOutput(slot=slot, tensor_description=desc))
        stats.append(step_stats_pb2.NodeExecStats(
            node_name=op_names[j], all_start_micros=start, op_start_rel_micros=0,
            op_end_rel_micros=micros, all_end_rel_micros=micros,
            memory=[step_stats_pb2.AllocatorMemoryUsed(allocator_name="cpu", total_bytes=total,
                                                       peak_bytes=total)],
            output=outputs))
        start += micros
    return config_pb2.RunMetadata(step_stats=step_stats_pb2.StepStats(
        dev_stats=[step_stats_pb2.DeviceStepStats(device=_DEVICE, node_stats=stats)]))


def _itemsize(dtype):
    return {"float64": 8, "int64": 8, "bfloat16": 2, "float16": 2, "int16": 2, "uint8": 1,
            "int8": 1, "bool": 1}.get(dtype, 4)


def _event_writer(logdir):
    try:
        from tensorboardX import SummaryWriter  # noqa: PLC0415
    except ImportError as e:
        raise ImportError("TensorBoard summaries need tensorboardX: pip install "
                          "'pyresnet[tensorboard]'") from e
    # a suffix of our own: two writers opened in one second would otherwise
    # share a file name (the time and the host) and overwrite each other
    return SummaryWriter(os.fspath(logdir),
                         filename_suffix=f".{os.getpid()}.{next(_writer_numbers)}.graph")


def write_graph(concrete, logdir=None, step=0, profile=None, writer=None):
    """Write a traced graph as a TensorBoard graph event (the Graphs
    dashboard), and, given ``profile``, its node times and memory as run
    metadata tagged ``step_<step>`` (the dashboard's "Session runs" menu).

    Args:
        concrete: a :class:`~pyresnet.ConcreteFunction`.
        logdir: the run's folder (an event file is added to it); or
        writer: an open ``tensorboardX.SummaryWriter`` to write through
            (not closed here).
        step (int): the event's step.
        profile: optional :class:`pyresnet.profiling.Profile` of
            ``concrete`` (``concrete.profile(...)``).
    Raises:
        ValueError: neither or both of ``logdir`` and ``writer``.
        ImportError: when tensorboardX is not installed.
    """
    _write_events(concrete, logdir, writer, step, profile, True, "write_graph")


def write_run_metadata(concrete, profile, logdir=None, step=0, writer=None):
    """Write a profile's node times and memory as TensorBoard run metadata
    tagged ``step_<step>`` for a graph already written
    (:func:`write_graph`): the Graphs dashboard's run menu shows them.

    Args:
        concrete: the :class:`~pyresnet.ConcreteFunction` profiled.
        profile: its :class:`pyresnet.profiling.Profile`.
        logdir, writer, step: as for :func:`write_graph`.
    Raises:
        ValueError: neither or both of ``logdir`` and ``writer``.
        ImportError: when tensorboardX or tensorboard is not installed.
    """
    _write_events(concrete, logdir, writer, step, profile, False, "write_run_metadata")


def _write_events(concrete, logdir, writer, step, profile, graph, caller):
    if (logdir is None) == (writer is None):
        raise ValueError(f"{caller}: give exactly one of logdir and writer")
    own = writer is None
    writer = writer or _event_writer(logdir)
    from tensorboardX.proto import event_pb2  # noqa: PLC0415
    try:
        file_writer = writer._get_file_writer()
        if graph:
            file_writer.add_event(event_pb2.Event(
                graph_def=graph_def(concrete).SerializeToString(), step=int(step),
                wall_time=time.time()))
        if profile is not None:
            tagged = event_pb2.TaggedRunMetadata(
                tag=f"step_{int(step)}",
                run_metadata=run_metadata(concrete, profile).SerializeToString())
            file_writer.add_event(event_pb2.Event(tagged_run_metadata=tagged, step=int(step),
                                                  wall_time=time.time()))
        writer.flush()
    finally:
        if own:
            writer.close()


def write_profile(profile, logdir, run=None, concrete=None):
    """Write a profile where trace viewers look for it: the Chrome trace
    as ``<logdir>/plugins/profile/<run>/<host>.trace.json.gz`` (open it in
    ui.perfetto.dev or chrome://tracing; TensorBoard's profile plugin
    lists the run), with the tables beside it as text
    (``<host>.per_op.txt``, ``<host>.per_node.txt``) and as JSON
    (``<host>.per_op.json``).  Every file is written atomically.

    Args:
        profile: a :class:`pyresnet.profiling.Profile`.
        logdir: the TensorBoard log folder.
        run (str): the run's folder name (default: the UTC time,
            ``YYYY_MM_DD_HH_MM_SS`` as TensorFlow's profiler names it).
        concrete: optional, the profiled
            :class:`~pyresnet.ConcreteFunction`: the trace's slices are then
            named as the graph's nodes (``resnet8/residual_block/conv2d/
            conv2d``), with ``op`` and ``scope`` among their arguments.
    Returns:
        str: the path of the ``.trace.json.gz`` file.
    """
    from .utils.atomic import write_bytes, write_text  # noqa: PLC0415
    run = run or time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    folder = os.path.join(os.fspath(logdir), "plugins", "profile", run)
    os.makedirs(folder, exist_ok=True)
    host = socket.gethostname() or "localhost"
    base = os.path.join(folder, host)
    trace = profile.trace
    if concrete is not None:
        op_names = _layout(concrete)[0]
        scopes = concrete.node_scopes
        trace = dict(trace, traceEvents=[
            dict(e, name=op_names[e["args"]["node"]],
                 args=dict(e["args"], op=e["name"], scope=scopes[e["args"]["node"]]))
            for e in trace["traceEvents"]])
    write_bytes(base + ".trace.json.gz", gzip.compress(json.dumps(trace).encode()))
    write_text(base + ".per_op.txt", str(profile) + "\n")
    write_text(base + ".per_node.txt", str(profile.by_node) + "\n")
    write_text(base + ".per_op.json", json.dumps(profile.by_op.to_dicts(), default=str) + "\n")
    return base + ".trace.json.gz"


# ---- trace_on / trace_export ------------------------------------------------

class _Recording:
    def __init__(self, graph, profiler):
        self.graph, self.profiler = graph, profiler
        self.calls = []  # (concrete, tensors, [per call node times])
        self.lock = threading.Lock()

    def __call__(self, concrete, tensors):
        if not self.profiler:
            outs = concrete._graph.run(tensors)
            times = None
        else:
            outs, times = concrete._graph.run(tensors, True)
        with self.lock:
            for entry in self.calls:
                if entry[0]._graph is concrete._graph:
                    if times is not None:
                        entry[2].append(times)
                    break
            else:
                self.calls.append((concrete, tensors, [] if times is None else [times]))
        return concrete._pack(outs)


def trace_on(graph=True, profiler=False):
    """Start recording compiled calls (``tf.summary.trace_on``): every call
    of a :func:`pyresnet.compile` function until :func:`trace_export` (or
    :func:`trace_off`) has its graph kept and, with ``profiler=True``, its
    node times measured (the executor's timed run; results and effects as
    usual).

    Args:
        graph (bool): keep the graphs of the calls.
        profiler (bool): time every node of every call.
    """
    _trace.recorder = _Recording(bool(graph), bool(profiler))


def recording():
    """What :func:`trace_on` is recording (its calls so far, ``.calls``), or
    None when nothing is."""
    r = _trace.recorder
    return r if isinstance(r, _Recording) else None


def trace_off():
    """Stop recording and drop what was recorded (``tf.summary.trace_off``)."""
    _trace.recorder = None


def trace_export(name, logdir, step=0, writer=None):
    """Write what was recorded since :func:`trace_on`, then stop recording
    (``tf.summary.trace_export``).

    For each compiled function called (the first call of each traced
    graph): its graph, under the run folder ``logdir`` (one graph event
    per function, at ``step``; TensorBoard shows one graph per run, so
    record one function per export); with ``profiler=True`` its node times
    and memory in the graph's run metadata (tag ``step_<step>``) and the
    trace plus the tables under ``logdir/plugins/profile/<name>/``
    (:func:`write_profile`).

    Args:
        name (str): the profile run's name.
        logdir: the TensorBoard run folder.
        step (int): the step of the events.
        writer: optional open ``tensorboardX.SummaryWriter`` of ``logdir``
            to write the events through (not closed here).
    Returns:
        list of :class:`pyresnet.profiling.Profile`, one per function
        profiled (empty without ``profiler=True``).
    Raises:
        ValueError: when :func:`trace_on` was not called, or no compiled
            function was called since.
    """
    recording = _trace.recorder
    if not isinstance(recording, _Recording):
        raise ValueError("trace_export: call pyresnet.summary.trace_on() first")
    _trace.recorder = None
    if not recording.calls:
        raise ValueError("trace_export: no compiled (pyresnet.compile) function was called "
                         "since trace_on()")
    profiles = []
    own = writer is None
    writer = writer or _event_writer(logdir)
    try:
        for concrete, tensors, calls in recording.calls:
            concrete = ConcreteFunction(concrete._graph, concrete._out_structure,
                                                 concrete._out_leaves, tensors, concrete.name,
                                                 concrete._scopes)
            profile = None
            if calls:
                profile = profiling.summarize(concrete.name, concrete.graph.nodes(),
                                              concrete.graph.plan(tensors), calls)
                profiles.append(profile)
                run = name if len(recording.calls) == 1 else f"{name}_{concrete.name}"
                write_profile(profile, logdir, run, concrete)
            if recording.graph:
                write_graph(concrete, writer=writer, step=step, profile=profile)
    finally:
        if own:
            writer.close()
    return profiles
