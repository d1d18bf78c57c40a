"""Where a compiled call's time goes: the tables that
:meth:`pyresnet.ConcreteFunction.profile` returns.

:func:`summarize` turns the executor's per-node times (start and duration in
microseconds, one list per call) into a :class:`Profile`: the Chrome trace
(``trace``), one row per (op, kernel variant) (``by_op``) and one row per
node (``by_node``).  Each table prints as aligned text, shows as an HTML
table in a notebook, and converts to a list of dicts (:meth:`ProfileTable.
to_dicts`).
"""
import html

_FORMATS = {  # column -> (heading, format of a value)
    "node": ("node", "{}"), "op": ("op", "{}"), "kernel": ("kernel", "{}"),
    "output_shapes": ("output shapes", "{}"), "calls": ("calls", "{}"),
    "total_ms": ("total ms", "{:.3f}"), "mean_ms": ("mean ms", "{:.3f}"),
    "share": ("share", "{:.1%}"), "gflops": ("GFLOP/s", "{:.2f}"),
}


class ProfileTable:
    """Rows of a profile, each a dict with the keys ``columns``.

    Iterating, ``len`` and indexing give the row dicts; :meth:`to_dicts`
    gives copies of them as a list; ``str`` (and ``print``) gives an aligned
    text table, and a notebook shows an HTML table.
    """

    def __init__(self, columns, rows):
        self.columns = tuple(columns)
        self._rows = [dict(r) for r in rows]

    def to_dicts(self):
        """The rows as a new list of new dicts (column -> value)."""
        return [dict(r) for r in self._rows]

    def top(self, n=10, by="total_ms"):
        """A new table of the ``n`` rows with the largest ``by`` (a column
        name; KeyError names the columns for another)."""
        if by not in self.columns:
            raise KeyError(f"top(by={by!r}): the columns are {list(self.columns)}")
        rows = sorted(self._rows, key=lambda r: -r[by])[:max(0, int(n))]
        return ProfileTable(self.columns, rows)

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)

    def __getitem__(self, index):
        return self._rows[index]

    def _cells(self):
        heads = [_FORMATS[c][0] for c in self.columns]
        body = [["-" if r[c] is None else _FORMATS[c][1].format(r[c]) for c in self.columns]
                for r in self._rows]
        return heads, body

    def __str__(self):
        heads, body = self._cells()
        widths = [max(len(x) for x in col) for col in zip(heads, *body)]
        text = [c for c in self.columns if c in ("op", "kernel", "output_shapes")]
        def line(cells):
            return "  ".join(s.ljust(w) if c in text else s.rjust(w)
                             for c, s, w in zip(self.columns, cells, widths)).rstrip()
        return "\n".join(line(r) for r in [heads, *body])

    __repr__ = __str__

    def _repr_html_(self):
        heads, body = self._cells()
        row = lambda cells, tag: "<tr>" + "".join(  # noqa: E731
            f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"
        return "<table>" + row(heads, "th") + "".join(row(r, "td") for r in body) + "</table>"


class Profile:
    """What :meth:`~pyresnet.ConcreteFunction.profile` measured.

    Attributes:
        trace: the Chrome trace-event dict (``{"traceEvents": [...]}``, one
            complete event ``ph="X"`` per node and call, times in
            microseconds from the first node's start) for chrome://tracing
            or ui.perfetto.dev.
        by_op: :class:`ProfileTable`, one row per (op, kernel variant),
            slowest first: ``op``, ``kernel`` (the variant's name, None for
            ops with one kernel), ``calls`` (node runs: nodes x repeats),
            ``total_ms`` (summed over those runs), ``mean_ms`` (per run),
            ``share`` (of the summed time of every node), ``gflops``
            (GFLOP/s over those runs; ops without a FLOP rule count one
            operation per output element).
        by_node: :class:`ProfileTable`, one row per node in run order, with
            ``node`` (its index in :attr:`~pyresnet.ConcreteFunction.nodes`)
            and ``output_shapes`` besides the columns of ``by_op``
            (``calls`` = repeats).
        repeats: the number of calls timed.
        step_ms: the summed node time of one call, in milliseconds (mean
            over the calls).
    """

    def __init__(self, trace, by_op, by_node, repeats, step_ms):
        self.trace, self.by_op, self.by_node = trace, by_op, by_node
        self.repeats, self.step_ms = repeats, step_ms

    def to_dicts(self):
        """``by_op`` as a list of dicts (:meth:`ProfileTable.to_dicts`)."""
        return self.by_op.to_dicts()

    def _header(self):
        mean = "" if self.repeats == 1 else f" (mean of {self.repeats} calls)"
        return f"{len(self.by_node)} nodes, {self.step_ms:.3f} ms of node time per call{mean}"

    def __str__(self):
        return (f"{self._header()}\n\nper op:\n{self.by_op}\n\n"
                f"slowest nodes:\n{self.by_node.top(10)}")

    __repr__ = __str__

    def _repr_html_(self):
        return (f"<p>{html.escape(self._header())}</p><p>per op:</p>{self.by_op._repr_html_()}"
                f"<p>slowest nodes:</p>{self.by_node.top(10)._repr_html_()}")


def _rates(total_us, runs, flops, all_us):
    """The timing columns of a row: ``runs`` runs took ``total_us`` in all
    (of ``all_us`` for every node) and did ``flops`` operations."""
    return {"calls": runs, "total_ms": total_us / 1e3, "mean_ms": total_us / 1e3 / runs,
            "share": total_us / all_us,
            "gflops": flops / total_us / 1e3 if total_us > 0 else 0.0}


def summarize(name, nodes, plan, calls):
    """Build a :class:`Profile`.

    Args:
        name: the function's name (for the trace).
        nodes: the graph's nodes, ``(op, inputs, outputs)`` in run order.
        plan: the executor's plan of the profiled binding (``shapes``,
            ``kernels``, ``node_flops``).
        calls: per call, per node ``(start_us, duration_us)`` (at least one
            call).
    """
    if not calls:
        raise ValueError("summarize needs the times of at least one call")
    t0 = calls[0][0][0] if calls[0] else 0.0
    events, node_us = [], [0.0] * len(nodes)
    for c, times in enumerate(calls):
        for j, ((op, ins, outs), (start, dur)) in enumerate(zip(nodes, times)):
            node_us[j] += dur
            events.append({"name": op, "cat": "op", "ph": "X", "ts": start - t0, "dur": dur,
                           "pid": 0, "tid": 0,
                           "args": {"node": j, "call": c, "kernel": plan["kernels"][j],
                                    "inputs": ins, "outputs": outs,
                                    "shapes": [list(plan["shapes"][v]) for v in outs],
                                    "flops": plan["node_flops"][j]}})
    trace = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"function": name}}
    repeats, total_us = len(calls), sum(node_us) or 1.0
    by_node, groups = [], {}
    for j, (op, _, outs) in enumerate(nodes):
        kernel, flops = plan["kernels"][j], plan["node_flops"][j] * repeats
        by_node.append({"node": j, "op": op, "kernel": kernel,
                        "output_shapes": [tuple(plan["shapes"][v]) for v in outs],
                        **_rates(node_us[j], repeats, flops, total_us)})
        g = groups.setdefault((op, kernel), [0.0, 0, 0.0])
        g[0], g[1], g[2] = g[0] + node_us[j], g[1] + repeats, g[2] + flops
    by_op = [{"op": op, "kernel": kernel, **_rates(us, runs, flops, total_us)}
             for (op, kernel), (us, runs, flops) in groups.items()]
    by_op.sort(key=lambda r: -r["total_ms"])
    op_columns = ("op", "kernel", "calls", "total_ms", "mean_ms", "share", "gflops")
    return Profile(trace, ProfileTable(op_columns, by_op),
                   ProfileTable(("node", "op", "kernel", "output_shapes", *op_columns[2:]),
                                by_node),
                   repeats, sum(node_us) / 1e3 / repeats)
