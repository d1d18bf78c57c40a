"""TensorBoard in a real browser (issue 30): a small ResNet is trained with
``callbacks.TensorBoard``, ``tensorboard --logdir`` serves the logs on
127.0.0.1, and headless Chromium, driven over the DevTools protocol (a
websocket, through tornado's client), opens the Graphs and Scalars
dashboards.  The test reads the text of the rendered page (through every
shadow root: TensorBoard's dashboards are web components, which
``--dump-dom`` does not serialise): the graph shows the model's scope, and
after a double click on it the ResNet's blocks; the Scalars dashboard shows
the loss card.  The loss values are checked against TensorBoard's HTTP data
API, and both screenshots against blankness.

Set PYRESNET_UPDATE_DOCS=1 to copy the screenshots to docs/ (the README
shows them).  Chromium comes from Debian's ``chromium`` package (.ci/run
installs it when missing); the ``tensorboard`` wheel from the test extra.
"""
import asyncio
import base64
import io
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import pyresnet as pr

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
DEADLINE = 25.0  # seconds to wait for a page to show what is asserted

# The visible text of the page, through every shadow root and same-origin frame.
DEEP_TEXT = """(() => {
  const out = [];
  const walk = (n) => {
    if (n.nodeType === 3) { const t = n.textContent.trim(); if (t) out.push(t); return; }
    if (n.shadowRoot) walk(n.shadowRoot);
    if (n.tagName === 'IFRAME') { try { walk(n.contentDocument); } catch (e) {} }
    for (const c of n.childNodes) walk(c);
  };
  walk(document);
  return out.join('\\n');
})()"""

# Where the graph node `name` (a folded scope) is on the screen: the centre
# of its shape, or null while it is not drawn.
NODE_CENTRE = """((name) => {
  let found = null;
  const walk = (n) => {
    if (found || (n.nodeType !== 1 && n.nodeType !== 9 && n.nodeType !== 11)) return;
    if (n.getAttribute && n.getAttribute('data-name') === name && n.classList.contains('node'))
      { found = n; return; }
    if (n.shadowRoot) walk(n.shadowRoot);
    for (const c of n.children || []) walk(c);
  };
  walk(document);
  if (!found) return null;
  const shape = found.querySelector('.nodeshape') || found;
  const r = shape.getBoundingClientRect();
  return r.width > 0 ? [r.left + r.width / 2, r.top + r.height / 2] : null;
})"""


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (127.0.0.1 only)
        return r.read()


def _wait_for(what, fn, deadline=DEADLINE):
    end = time.monotonic() + deadline
    last = None
    while time.monotonic() < end:
        try:
            result = fn()
            if result:
                return result
        except OSError as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what} ({last})")


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket."""

    def __init__(self, ws_url):
        from tornado.websocket import websocket_connect

        async def connect():
            return await websocket_connect(ws_url, max_message_size=1 << 27)

        self.loop = asyncio.new_event_loop()
        self.ws = self.loop.run_until_complete(connect())
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        ident = self.next_id

        async def exchange():
            await self.ws.write_message(json.dumps({"id": ident, "method": method,
                                                    "params": params}))
            while True:
                message = await asyncio.wait_for(self.ws.read_message(), 30)
                if message is None:
                    raise AssertionError(f"DevTools connection closed during {method}")
                reply = json.loads(message)
                if reply.get("id") == ident:
                    return reply

        reply = self.loop.run_until_complete(exchange())
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        return reply["result"]

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def double_click(self, x, y):
        """A real double click (mouse events through the browser's input)."""
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for count in (1, 2):
            for kind in ("mousePressed", "mouseReleased"):
                self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                          clickCount=count)

    def screenshot(self, path):
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        pathlib.Path(path).write_bytes(data)
        return data

    def close(self):
        async def close():
            self.ws.close()

        self.loop.run_until_complete(close())
        self.loop.close()


def _expand(tools, name, wanted):
    """Double-click the graph node ``name`` once it stands still (the graph
    glides into place after loading) until the texts ``wanted`` show;
    returns the page's text."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        before = tools.evaluate(f"{NODE_CENTRE}({name!r})")
        time.sleep(0.5)
        where = tools.evaluate(f"{NODE_CENTRE}({name!r})")
        if not where or where != before:
            continue
        tools.double_click(*where)  # TensorBoard expands a scope on a double click
        shown = time.monotonic() + 5
        while time.monotonic() < shown:
            text = tools.evaluate(DEEP_TEXT)
            if all(w in text for w in wanted):
                return text
            time.sleep(0.3)
    raise AssertionError(f"the graph node {name} did not expand to show {wanted}")


def _not_blank(png):
    from PIL import Image
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.float64)
    assert img.shape[0] >= 400 and img.shape[1] >= 600
    colours = len(np.unique(img.reshape(-1, 3)[::7], axis=0))
    assert img.std() > 8 and colours > 20, f"a blank screenshot (std {img.std():.1f}, " \
        f"{colours} colours)"


def _train(log_dir):
    rng = np.random.default_rng(0)
    model = pr.applications.resnet_cifar(8, input_shape=(16, 16, 3), num_classes=4, width=8,
                                         name="resnet8")
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x = rng.standard_normal((96, 16, 16, 3)).astype(np.float32)
    means = x.mean(axis=(1, 2))  # a learnable task: the signs of two channels' means
    y = (2 * (means[:, 0] > 0) + (means[:, 1] > 0)).astype(np.int32)
    history = model.fit(x, y, batch_size=32, epochs=6, verbose=0, validation_split=0.25,
                        callbacks=[pr.callbacks.TensorBoard(log_dir, histogram_freq=1,
                                                            write_images=True, profile_batch=2)])
    blocks = [layer.name for layer in model.layers
              if isinstance(layer, pr.layers.ResidualBlock)]
    return model, history.history, blocks


def test_graphs_and_scalars_dashboards_in_chromium(tmp_path):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Chromium is not installed: apt-get install chromium (.ci/run installs it)")
    log_dir = tmp_path / "logs"
    model, history, blocks = _train(log_dir)
    assert len(blocks) == 3

    tb_port, cdp_port = _free_port(), _free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(log_dir), "--host",
             "127.0.0.1", "--port", str(tb_port), "--load_fast", "false",
             "--reload_interval", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        base = f"http://127.0.0.1:{tb_port}"
        _wait_for("TensorBoard's runs", lambda: b"train" in _get(base + "/data/runs"), 60)

        # the data API: the loss curve and the graph's blocks
        scalars = _wait_for("the loss scalars", lambda: json.loads(_get(
            base + "/data/plugin/scalars/scalars?run=train&tag=epoch_loss")))
        assert [s for _, s, _ in scalars] == list(range(6))
        assert np.allclose([v for _, _, v in scalars], history["loss"], rtol=1e-6)
        graph = _wait_for("the graph", lambda: _get(
            base + "/data/plugin/graphs/graph?run=train&conceptual=false").decode())
        for block in blocks:
            assert f'name: "resnet8/{block}/' in graph
        # the profiled batch: node times as the graph's run metadata
        info = json.loads(_get(base + "/data/plugin/graphs/info"))
        assert info["train"]["run_graph"] and info["train"]["tags"]["step_2"]["profile"]
        stats = _get(base + "/data/plugin/graphs/run_metadata?run=train&tag=step_2").decode()
        first_conv = next(layer.name for layer in model.layers
                          if isinstance(layer, pr.layers.Conv2D))
        assert f'node_name: "resnet8/{first_conv}/' in stats and "all_end_rel_micros" in stats
        # histograms and the kernel image
        tags = json.loads(_get(base + "/data/plugin/histograms/tags"))["train"]
        assert any(t.startswith("dense") and t.endswith("kernel/histogram") for t in tags)
        images = json.loads(_get(base + "/data/plugin/images/tags"))["train"]
        assert [t for t in images if t.endswith("kernel/image")]

        procs.append(subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--remote-allow-origins=*",
             "--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={cdp_port}",
             f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,900",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        pages = _wait_for("Chromium's DevTools", lambda: [
            t for t in json.loads(_get(f"http://127.0.0.1:{cdp_port}/json/list"))
            if t.get("type") == "page"], 30)
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        try:
            tools.call("Page.enable")
            tools.call("Emulation.setDeviceMetricsOverride", width=1400, height=900,
                       deviceScaleFactor=1, mobile=False)

            # Graphs: the model folded into one box; double-clicked, its blocks
            tools.call("Page.navigate", url=f"{base}/#graphs&run=train")
            folded = _wait_for("the graph's top level", lambda: (lambda t: t if "resnet8" in t
                               and "gradient_tape" in t else None)(tools.evaluate(DEEP_TEXT)))
            assert not any(b in folded for b in blocks)  # folded into the model's box
            text = _expand(tools, "resnet8", blocks)
            assert all(b in text for b in blocks)
            time.sleep(2.5)  # the expansion's transition
            graph_png = tools.screenshot(tmp_path / "tensorboard_graph.png")
            _not_blank(graph_png)

            # Scalars: the loss chart of both runs (the tags filtered to the loss)
            tools.call("Input.dispatchMouseEvent", type="mouseMoved", x=5, y=895)
            tools.call("Page.navigate", url=f"{base}/#scalars&tagFilter=epoch_loss"
                                            f"&_smoothingWeight=0")
            _wait_for("the loss card", lambda: "epoch_loss" in tools.evaluate(DEEP_TEXT)
                      and "validation" in tools.evaluate(DEEP_TEXT))
            time.sleep(2.0)  # the chart's first draw
            scalars_png = tools.screenshot(tmp_path / "tensorboard_scalars.png")
            _not_blank(scalars_png)
        finally:
            tools.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if os.environ.get("PYRESNET_UPDATE_DOCS") == "1":  # small PNGs: a 64-colour palette
        from PIL import Image
        for name in ("tensorboard_graph.png", "tensorboard_scalars.png"):
            Image.open(tmp_path / name).convert("RGB").quantize(64).save(DOCS / name,
                                                                         optimize=True)
