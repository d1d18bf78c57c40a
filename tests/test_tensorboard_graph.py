"""TensorBoard graphs, profiles, histograms and images (issue 30): the event
files are read back (the TFRecord reader of test_tensorboard.py, every CRC
checked) and the GraphDef's node names, scopes, attributes and edges, the
run metadata, the histogram and image summaries and the profile files are
compared with the traced graph, the profile and the weights."""
import glob
import gzip
import io
import json
import os
import sys

import numpy as np
import pytest
from tensorboard.compat.proto import config_pb2
from tensorboardX.proto import graph_pb2
from test_tensorboard import read_events

import pyresnet as pr
from pyresnet import layers, ops
from train_steps import train_step_fn


def read_graph(folder):
    graphs = [e.graph_def for e in read_events(folder) if e.graph_def]
    assert len(graphs) == 1
    return graph_pb2.GraphDef.FromString(graphs[0])


def _small_resnet(rng):
    model = pr.applications.resnet_cifar(8, input_shape=(8, 8, 3), num_classes=3, width=4,
                                         name="tiny_resnet")
    x = rng.standard_normal((6, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 3, 6).astype(np.int32)
    return model, x, y


def _train_step(model):
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = pr.optimizers.SGD(0.05, momentum=0.9)

    signature = [pr.TensorSpec((None, 8, 8, 3)), pr.TensorSpec((None,), "int32")]
    step = pr.compile(input_signature=signature)(train_step_fn(model, loss_fn, optimizer))
    return step, optimizer


def test_graph_nodes_scopes_attributes_and_edges(tmp_path, rng):
    model, x, y = _small_resnet(rng)
    step, optimizer = _train_step(model)
    pr.summary.trace_on(graph=True)
    step(x, y)
    step(x[:4], y[:4])
    assert pr.summary.trace_export("step", tmp_path) == []  # no profiler: no profiles
    graph = read_graph(tmp_path)
    concrete = step.get_concrete_function(x, y)
    nodes = concrete.nodes
    by_name = {n.name: n for n in graph.node}
    assert len(by_name) == len(graph.node)                       # unique names
    ops_nodes = [n for n in graph.node if n.op not in ("Placeholder", "VariableV2", "Identity")]
    assert [n.op for n in ops_nodes] == [n["op"] for n in nodes]  # one per node, run order

    # scopes: the layers (blocks nested in the model), the tape, the optimizer, the loss
    blocks = [l.name for l in model.layers if isinstance(l, layers.ResidualBlock)]
    assert len(blocks) == 3
    for n, node in zip(ops_nodes, nodes):
        assert n.name.rsplit("/", 1)[0] == node["scope"] or (node["scope"] == "" and "/" not in n.name)
    scopes = {node["scope"] for node in nodes}
    for block in blocks:
        inner = [s for s in scopes if s.startswith(f"tiny_resnet/{block}/")]
        assert any("conv2d" in s for s in inner) and any("batch_normalization" in s for s in inner)
    assert "gradient_tape" in scopes and optimizer.name in scopes
    for block in blocks:  # the backward nodes under the forward layer's scope
        assert any(s.startswith(f"gradient_tape/tiny_resnet/{block}/conv2d") for s in scopes)
    assert "sparse_categorical_crossentropy" in scopes
    # the weights fold into their layer: each kernel sits in the scope of its first user
    kernels = [n for n in graph.node if n.op == "VariableV2" and n.name.endswith("/kernel")]
    assert len(kernels) == len([w for w in model.trainable_weights if w.name.endswith("kernel")])
    assert all(n.name.startswith("tiny_resnet/") for n in kernels)

    # attributes: kernel variant, dtype, shapes (-1 for the symbolic batch), flops
    for n, node in zip(ops_nodes, nodes):
        if node["kernel"] is None:
            assert "kernel" not in n.attr
        else:
            assert n.attr["kernel"].s.decode() == node["kernel"]
        assert n.attr["flops"].i == node["flops"]
        shapes = [[d.size for d in s.dim] for s in n.attr["_output_shapes"].list.shape]
        assert len(shapes) == len(node["outputs"])
        for traced, bound in zip(shapes, node["output_shapes"]):  # bound: batch 6
            assert [b if t != -1 else -1 for t, b in zip(traced, bound)] == traced
    conv = next(n for n in ops_nodes if n.op == "conv2d")
    assert conv.attr["dtype"].type == 1  # DT_FLOAT
    assert [d.size for d in conv.attr["_output_shapes"].list.shape[0].dim][0] == -1
    assert conv.attr["shape"].s.decode().startswith("(None, 8, 8, ")
    inp = by_name["input_1"]  # the labels: int32 (None,)
    assert inp.op == "Placeholder" and inp.attr["dtype"].type == 3
    assert [d.size for d in inp.attr["_output_shapes"].list.shape[0].dim] == [-1]

    # edges: each input names the node producing that value
    producer = {}
    for n, node in zip(ops_nodes, nodes):
        for k, v in enumerate(node["outputs"]):
            producer[v] = n.name if k == 0 else f"{n.name}:{k}"
    values = concrete.graph.values()
    for n, node in zip(ops_nodes, nodes):
        assert len(n.input) == len(node["inputs"])
        for name, v in zip(n.input, node["inputs"]):
            if values[v][0] == "node":
                assert name == producer[v]
            else:
                assert by_name[name].op == ("Placeholder" if values[v][0] == "input"
                                            else "VariableV2")
    outs = [n for n in graph.node if n.op == "Identity"]
    assert [n.name for n in outs] == ["output_0"] and outs[0].input[0] == producer[
        concrete.graph.outputs[0]]


def test_profile_writes_trace_tables_and_run_metadata(tmp_path, rng):
    model, x, y = _small_resnet(rng)
    step, _ = _train_step(model)
    step(x, y)  # traced outside the recording: still recorded on the calls
    pr.summary.trace_on(graph=True, profiler=True)
    step(x, y)
    step(x, y)
    (profile,) = pr.summary.trace_export("resnet_step", tmp_path, step=3)
    assert pr.summary.recording() is None  # the export ends the recording
    concrete = step.get_concrete_function(x, y)
    n = len(concrete.nodes)
    assert profile.repeats == 2 and len(profile.by_node) == n
    (trace_path,) = glob.glob(str(tmp_path / "plugins/profile/resnet_step/*.trace.json.gz"))
    with gzip.open(trace_path) as f:
        trace = json.load(f)
    assert len(trace["traceEvents"]) == 2 * n
    # the profile's events, each named as its GraphDef node, with its op and scope
    nodes = concrete.nodes
    for written, event in zip(trace["traceEvents"], json.loads(json.dumps(profile.trace))[
            "traceEvents"]):
        node = nodes[event["args"]["node"]]
        assert written["args"] == dict(event["args"], op=event["name"], scope=node["scope"])
        assert written["name"] == (f"{node['scope']}/{node['op']}" if node["scope"]
                                   else node["op"]) or written["name"].startswith(
                                       f"{node['scope']}/{node['op']}_")
        assert (written["ts"], written["dur"]) == (event["ts"], event["dur"])
    host = trace_path[:-len(".trace.json.gz")]
    assert "per op:" in open(host + ".per_op.txt").read()
    rows = json.load(open(host + ".per_op.json"))
    assert sum(r["calls"] for r in rows) == 2 * n

    # the run metadata: one NodeExecStats per node, named as in the GraphDef
    events = read_events(tmp_path)
    graph = graph_pb2.GraphDef.FromString(next(e.graph_def for e in events if e.graph_def))
    tagged = [e.tagged_run_metadata for e in events if e.HasField("tagged_run_metadata")]
    assert [t.tag for t in tagged] == ["step_3"]
    meta = config_pb2.RunMetadata.FromString(tagged[0].run_metadata)
    stats = meta.step_stats.dev_stats[0].node_stats
    op_names = [g.name for g in graph.node if g.op not in ("Placeholder", "VariableV2",
                                                            "Identity")]
    assert [s.node_name for s in stats] == op_names
    for s, row, node in zip(stats, profile.by_node, concrete.nodes):
        assert s.all_end_rel_micros == max(1, round(row["mean_ms"] * 1e3))
        size = sum(4 * int(np.prod(shape)) for shape in node["output_shapes"])
        assert s.memory[0].total_bytes == size or node["op"] in ("argmax",)


def test_concrete_function_profile_writes_to_a_log_folder(tmp_path, rng):
    model, x, y = _small_resnet(rng)
    step, _ = _train_step(model)
    concrete = step.get_concrete_function(x, y)
    profile = concrete.profile(x, y, repeats=2, logdir=tmp_path)
    events = read_events(tmp_path)
    graph = graph_pb2.GraphDef.FromString(next(e.graph_def for e in events if e.graph_def))
    tagged = [e.tagged_run_metadata for e in events if e.HasField("tagged_run_metadata")]
    stats = config_pb2.RunMetadata.FromString(tagged[0].run_metadata).step_stats
    assert len(stats.dev_stats[0].node_stats) == len(profile.by_node) == len(concrete.nodes)
    assert {s.node_name for s in stats.dev_stats[0].node_stats} <= {n.name for n in graph.node}
    (trace,) = glob.glob(str(tmp_path / "plugins/profile/train_step/*.trace.json.gz"))
    with gzip.open(trace) as f:
        assert len(json.load(f)["traceEvents"]) == 2 * len(concrete.nodes)


def test_trace_export_without_calls_raises(tmp_path):
    pr.summary.trace_off()
    with pytest.raises(ValueError, match="trace_on"):
        pr.summary.trace_export("x", tmp_path)
    pr.summary.trace_on()
    with pytest.raises(ValueError, match="no compiled"):
        pr.summary.trace_export("x", tmp_path)


def test_name_scope_outside_tracing_does_nothing(rng):
    with pr.name_scope("outer"):
        y = ops.relu(rng.standard_normal((3,)).astype(np.float32))
    assert y.shape == (3,)

    @pr.compile
    def f(x):
        with pr.name_scope("a"):
            with pr.name_scope("b/c"):
                y = ops.relu(x)
            z = ops.exp(y)
        return ops.sum(z)

    nodes = f.get_concrete_function(np.ones((2,), np.float32)).nodes
    assert [(n["op"], n["scope"]) for n in nodes] == [("relu", "a/b_c"), ("exp", "a"), ("sum", "")]


def _conv_model():
    return pr.Sequential([layers.Input((6, 6, 3)),
                          layers.Conv2D(4, 3, padding="same", name="first_conv"),
                          layers.ReLU(), layers.GlobalAveragePooling2D(),
                          layers.Dense(3, name="head")])


def test_fit_writes_graph_histograms_images_and_profile(tmp_path, rng):
    model = _conv_model()
    model.compile(optimizer=pr.optimizers.SGD(0.1),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = rng.standard_normal((20, 6, 6, 3)).astype(np.float32)
    y = rng.integers(0, 3, 20)
    tb = pr.callbacks.TensorBoard(tmp_path, histogram_freq=2, write_images=True,
                                  write_steps_per_second=True, profile_batch=(2, 3))
    model.fit(x, y, batch_size=5, epochs=3, verbose=0, callbacks=[tb])
    events = read_events(tmp_path / "train")

    graph = graph_pb2.GraphDef.FromString(next(e.graph_def for e in events if e.graph_def))
    names = [n.name for n in graph.node]
    assert any(n.startswith(f"{model.name}/first_conv/") for n in names)
    assert any(n.startswith(f"{model.name}/head/") for n in names)
    assert any(n.startswith("gradient_tape/") for n in names)

    hist = {}
    images = {}
    scalars = set()
    for e in events:
        for v in e.summary.value:
            if v.HasField("histo"):
                hist[(v.tag, e.step)] = v.histo
            elif v.HasField("image"):
                images[(v.tag, e.step)] = v.image
            else:
                scalars.add(v.tag)
    assert {"epoch_loss", "epoch_steps_per_second"} <= scalars
    assert sorted(hist) == sorted((f"{layer}/{w}/histogram", step)
                                  for layer in ("first_conv", "head") for w in ("kernel", "bias")
                                  for step in (0, 2))
    # the last histogram holds the trained weights: NumPy's histogram of them
    kernel = model.layers[-1].kernel.numpy().astype(np.float64)
    h = hist[("head/kernel/histogram", 2)]
    counts, edges = np.histogram(kernel, bins=30)  # (the end bins hold the min and max)
    assert h.min == kernel.min() and h.max == kernel.max() and h.num == kernel.size
    assert h.sum == pytest.approx(kernel.sum())
    assert h.sum_squares == pytest.approx((kernel ** 2).sum())
    # TensorBoard's buckets: right edges, with an empty bucket ending at the minimum
    assert list(h.bucket) == [0.0] + list(counts.astype(float))
    assert np.allclose(list(h.bucket_limit), edges)

    # one image, of the first convolution's 4 kernels (2x2 grid of 3x3 filters at 4x)
    assert sorted(images) == [("first_conv/kernel/image", 0), ("first_conv/kernel/image", 2)]
    from PIL import Image
    img = np.asarray(Image.open(io.BytesIO(images[("first_conv/kernel/image", 2)]
                                           .encoded_image_string)))
    assert img.shape[:2] == (2 * 13 + 1, 2 * 13 + 1)
    assert img.std() > 10  # not blank

    tagged = [e.tagged_run_metadata for e in events if e.HasField("tagged_run_metadata")]
    assert [t.tag for t in tagged] == ["step_2"]
    stats = config_pb2.RunMetadata.FromString(tagged[0].run_metadata).step_stats
    assert {s.node_name for s in stats.dev_stats[0].node_stats} <= set(names)
    (trace,) = glob.glob(str(tmp_path / "train/plugins/profile/*/*.trace.json.gz"))
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    n = len(next(iter(model.train_function._cache.values())).nodes)
    assert len(events) == 2 * n  # batches 2 and 3


def test_keras_arguments_accepted_or_refused_by_name(tmp_path):
    tb = pr.callbacks.TensorBoard(log_dir=tmp_path, histogram_freq=1, write_graph=False,
                                  write_images=True, write_steps_per_second=True,
                                  update_freq="batch", profile_batch="2,4", embeddings_freq=0,
                                  embeddings_metadata=None)
    assert tb._profile_range == (2, 4) and tb.update_freq == 1
    assert pr.callbacks.TensorBoard(tmp_path, profile_batch=3)._profile_range == (3, 3)
    assert pr.callbacks.TensorBoard(tmp_path, profile_batch=0)._profile_range is None
    with pytest.raises(ValueError, match="embeddings_freq"):
        pr.callbacks.TensorBoard(tmp_path, embeddings_freq=1)
    with pytest.raises(ValueError, match="embeddings_metadata"):
        pr.callbacks.TensorBoard(tmp_path, embeddings_metadata={"x": "y"})
    for bad in ((3, 2), -1, "a,b", (1, 2, 3)):
        with pytest.raises(ValueError, match="profile_batch"):
            pr.callbacks.TensorBoard(tmp_path, profile_batch=bad)
    with pytest.raises(ValueError, match="histogram_freq"):
        pr.callbacks.TensorBoard(tmp_path, histogram_freq=-1)
    with pytest.raises(TypeError, match="no_such"):
        pr.callbacks.TensorBoard(tmp_path, no_such=1)
