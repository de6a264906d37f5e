"""CUDA graphs: their GEMMs recorded at capture, their replays bound to
them (``gemm_audit.torch.capture`` and ``record(..., graphs=...)``), and
the per-GEMM comparisons of recordings (eager against replay, graphs
captured at several batch sizes).

A replay is one ``cudaGraphLaunch``: the profiler cannot say which op
launched which of its kernels. The capture can: while a graph is being
captured the kernels do not run, but every launching call is still made,
inside the range of the op that made it. A graph captured on one stream
replays its nodes in capture order, so the replay's ``p``-th GPU activity
is bound to the op of the capture's ``p``-th launching call, by the rule
an eager launch is bound with (``gemm_audit::profile::graph``).
"""

import contextlib
import json
from typing import Dict, List, Optional, Tuple

from . import _native
from . import torch as _t
from ._native import GemmAuditError

#: The prefix of the profiler range each capture runs in.
CAPTURE_PREFIX = "gemm_audit-capture:"
#: The prefix of the profiler range each recorded replay runs in.
REPLAY_PREFIX = "gemm_audit-replay:"


class CapturedGraph:
    """One CUDA graph captured under :func:`capture`: its GEMMs in capture
    order (``gemms``: the layout of each, as a trace holds it, with
    ``op_name`` and ``index``), what could not be expressed (``skipped``),
    its device and capture stream, and the launching calls the capture
    made (``launches``)."""

    def __init__(self, index: int, label: str, device: int, stream):
        self.index = index
        self.label = label
        self.device = device
        self.stream = stream
        self.gemms: List[dict] = []
        self.skipped: List[str] = []
        self.launches: List[dict] = []
        self.replays = 0
        self.problems: List[str] = []
        #: Captured by ``torch.compile``'s CUDA-graph trees
        #: (``mode="reduce-overhead"``), which refuse any tensor of their
        #: pool kept alive: the outputs cannot be kept, so replays cannot
        #: be fingerprinted.
        self.managed = False
        #: What its last profiled replay ran, per captured GEMM index (the
        #: kernels an instantiated graph launches do not change between
        #: replays): what ``record(..., profile=False)`` gives its replays.
        self.binding: Optional[Dict[int, dict]] = None
        #: That replay's GEMM kernels no captured op launched.
        self.binding_unowned: List[str] = []
        #: Which replay (of any recording) the binding came from.
        self.bound_at: Optional[int] = None
        # The captured outputs, kept alive so the graph's pool cannot give
        # their memory to a later node; a copy replaces one where a later
        # op of the graph writes into it.
        self._outputs: list = []

    def __repr__(self) -> str:
        return f"<CapturedGraph {self.label}: {len(self.gemms)} GEMMs on cuda:{self.device}>"


class Captures:
    """The graphs captured under one :func:`capture` block, in capture
    order (``graphs``); pass it to ``record(..., graphs=...)`` to record
    their replays."""

    def __init__(self, label: str):
        self.label = label
        self.graphs: List[CapturedGraph] = []
        self._by_graph: Dict[int, CapturedGraph] = {}
        self._keep: list = []  # the torch graphs, so their ids stay theirs

    def of(self, graph) -> Optional[CapturedGraph]:
        """The capture of a ``torch.cuda.CUDAGraph``, or ``None``."""
        return self._by_graph.get(id(graph))

    def _add(self, graph, captured: CapturedGraph) -> None:
        self._by_graph[id(graph)] = captured
        self._keep.append(graph)


def _mutated_tensors(func, args, kwargs):
    """The tensors an op writes into (its schema's mutable arguments)."""
    import torch

    out = []
    for k, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[k] if k < len(args) else kwargs.get(arg.name)
        for t in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


class _Capturing:
    """The capture under way: the graph, and the dispatch mode that sees
    its ops."""

    def __init__(self, caps: Captures):
        self.caps = caps
        self.graph: Optional[CapturedGraph] = None
        self.next_index = 0
        self.ranges: list = []

    def protect(self, func, args, kwargs) -> None:
        """Copies a kept output before an op of the graph writes into it
        (an in-place activation), so it stays the GEMM's own output."""
        g = self.graph
        if g is None or not g._outputs:
            return
        written = {t.untyped_storage().data_ptr() for t in _mutated_tensors(func, args, kwargs)}
        if not written:
            return
        for j, kept in enumerate(g._outputs):
            if kept is not None and kept.untyped_storage().data_ptr() in written:
                g._outputs[j] = kept.detach().clone()

    def gemm(self, func, short, args, kwargs):
        import torch
        from torch.profiler import record_function

        g = self.graph
        i = self.next_index
        self.next_index += 1
        op_name, layout, where, why = _t._gemm_call(short, args)
        name = f"{op_name}#{len(g.gemms) + len(g.skipped)}"
        stream = torch.cuda.current_stream()
        if layout is not None and where != f"cuda:{g.device}":
            g.problems.append(f"{name} ran on {where}, but {g.label} is captured on cuda:{g.device}")
        if stream != g.stream:
            g.problems.append(
                f"{name} was dispatched on stream {stream.cuda_stream:#x}, but {g.label} is captured on "
                f"stream {g.stream.cuda_stream:#x}: a replay's kernels are bound to the captured GEMMs in "
                "capture order, which holds for a graph captured on one stream"
            )
        with record_function(_t.RANGE_PREFIX + str(i)):
            out = func(*args, **kwargs)
        if layout is None:
            g.skipped.append(f"{name}: {why}")
            return out
        result = out[0] if isinstance(out, tuple) else out
        g.gemms.append(dict(name=name, op_name=op_name, index=i, device=where, **layout))
        g._outputs.append(None if g.managed else result)
        return out


@contextlib.contextmanager
def capture(label: str = "graph"):
    """Records the GEMMs of every CUDA graph captured inside the block
    (``torch.cuda.graph``, ``torch.cuda.make_graphed_callables``, the
    captures of ``torch.compile(mode="reduce-overhead")``); yields the
    :class:`Captures`. Each GEMM-family aten op dispatched while a graph is
    being captured is recorded with its op, dtype, shapes, layout and
    device, in capture order, and its output is kept alive (a copy is
    captured where a later op of the graph writes into it). Pass the
    result to ``record(..., graphs=...)`` to record replays.

    Raises :class:`GemmAuditError` when the block captured no GEMM, or
    when a GEMM was dispatched on another stream or device than its
    graph's capture (naming the GEMM)."""
    import torch
    from torch.profiler import record_function

    if not _t._cuda():
        raise GemmAuditError("capture() records CUDA graphs, but torch sees no CUDA device here")
    caps = Captures(label)
    state = _Capturing(caps)

    class Observe(_t._recorder_mode()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            state.protect(func, args, kwargs)
            short = str(func).split(".")[1]
            if short not in _t.GEMM_OPS or state.graph is None:
                return func(*args, **kwargs)
            return state.gemm(func, short, args, kwargs)

    mode = Observe()
    cls = torch.cuda.CUDAGraph
    begin, end = cls.capture_begin, cls.capture_end

    def capture_begin(graph, *args, **kwargs):
        if state.graph is not None:
            raise GemmAuditError(f"a graph began capturing while {state.graph.label} was being captured")
        j = len(caps.graphs)
        g = CapturedGraph(j, f"{label}#{j}", torch.cuda.current_device(), torch.cuda.current_stream())
        g.managed = _called_from("torch._inductor.cudagraph_trees")
        r = record_function(CAPTURE_PREFIX + str(j))
        r.__enter__()
        state.ranges.append(r)
        begin(graph, *args, **kwargs)
        state.graph = g
        mode.__enter__()

    def capture_end(graph):
        g = state.graph
        try:
            mode.__exit__(None, None, None)
            state.graph = None
            end(graph)
        finally:
            state.ranges.pop().__exit__(None, None, None)
        caps.graphs.append(g)
        caps._add(graph, g)

    _t._warn_if_compiled_code_runs_eagerly()
    _t._sync()
    cls.capture_begin, cls.capture_end = capture_begin, capture_end
    try:
        with _t._profile() as prof:
            yield caps
            _t._sync()
    finally:
        cls.capture_begin, cls.capture_end = begin, end
    launches = json.loads(_native.graph_captures(_t._profile_text(prof), _t.RANGE_PREFIX, CAPTURE_PREFIX))
    for g in caps.graphs:
        g.launches = launches.get(str(g.index), [])
    problems = [p for g in caps.graphs for p in g.problems]
    if problems:
        raise GemmAuditError("; ".join(problems))
    if not caps.graphs:
        raise GemmAuditError("no CUDA graph was captured in the capture() block")
    empty = [g.label for g in caps.graphs if not g.gemms]
    if len(empty) == len(caps.graphs):
        skipped = [s for g in caps.graphs for s in g.skipped]
        raise GemmAuditError(
            f"{', '.join(empty)} captured no GEMM-family op"
            + (f" a trace can express ({'; '.join(skipped)})" if skipped else "")
            + ": nothing to record (a compiled graph whose GEMMs are Triton templates dispatches no aten GEMM)"
        )


def _called_from(module: str) -> bool:
    """Whether a frame of the calling stack runs code of ``module``."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(module):
            return True
        frame = frame.f_back
    return False


#: What a replay of a graph of ``torch.compile``'s CUDA-graph trees cannot give.
MANAGED = (
    "is a CUDA graph of torch.compile's CUDA-graph trees (mode='reduce-overhead'), which refuse any tensor of "
    "their memory pool kept alive, so its GEMMs' outputs cannot be kept to fingerprint them: record the compiled "
    "step with mode='max-autotune-no-cudagraphs' or 'default' (its GEMMs then go through aten and are recorded "
    "as eager ones), or import a profile of the replays (gemm-audit import; diff pairs it by kernel sequence)"
)


class Replays:
    """The replays of one recording: patches ``CUDAGraph.replay`` while
    the block runs, and binds each replay to its capture after."""

    def __init__(self, caps: Optional[Captures], seen: list, rec, profiled: bool = True):
        self.caps = caps
        self.seen = seen
        self.rec = rec
        self.profiled = profiled
        # Per recorded replay: its graph and the graph's replay number.
        self.recorded: Dict[int, Tuple[CapturedGraph, int]] = {}
        self.unowned: List[dict] = []

    @contextlib.contextmanager
    def patched(self):
        import torch

        cls = torch.cuda.CUDAGraph
        original = cls.replay
        me = self

        def replay(graph):
            return me.replay(original, graph)

        cls.replay = replay
        try:
            yield
        finally:
            cls.replay = original

    def replay(self, original, graph):
        import torch
        from torch.profiler import record_function

        g = self.caps.of(graph) if self.caps is not None else None
        if g is None:
            what = f"a replay of a CUDA graph not captured under gemm_audit.torch.capture() ({graph!r})"
            self.rec.unseen_graphs.append(what)
            if self.caps is not None:
                raise GemmAuditError(
                    f"{what}: its GEMMs cannot be named; capture it inside the capture() block "
                    "passed as graphs="
                )
            return original(graph)
        if g.managed:
            raise GemmAuditError(f"{g.label} {MANAGED}")
        if not self.profiled and g.binding is None:
            raise GemmAuditError(
                f"{g.label}: no replay of it has been recorded with the profiler, so record(..., profile=False) "
                "cannot say what its replays run; record one replay with profile=True (the default) first"
            )
        k = len(self.recorded)
        r = g.replays
        self.recorded[k] = (g, r)
        # The range is what binds a profiled replay's kernels; unprofiled, it is not needed.
        with record_function(REPLAY_PREFIX + str(k)) if self.profiled else contextlib.nullcontext():
            out = original(graph)
        g.replays += 1
        label = f"{g.label}, replay {r}"
        if not self.profiled:
            label += f" (kernels as its profiled replay {g.bound_at} ran them)"
        # The copies are the recorder's, not the block's: made past every
        # dispatch mode (the recorder's own would see each one).
        with torch._C._DisableTorchDispatch():
            copies = [kept.detach().clone() for kept in g._outputs]  # stream-ordered after the replay
        for gemm, copy in zip(g.gemms, copies):
            i = len(self.seen)
            layout = {key: gemm[key] for key in ("op", "dtype", "m", "k", "n", "batch", "lda", "ldb", "ldc")}
            replayed = {"graph": label, "replay": k, "index": gemm["index"]}
            name = f"{gemm['op_name']}#{i}"
            self.seen.append((name, gemm["op_name"], layout, gemm["device"], copy, (None, None, None), None, replayed))
        return out

    def bind(self, text: bytes) -> Dict[int, Dict[int, dict]]:
        """Per recorded replay, per captured GEMM index: what it ran."""
        if not self.recorded:
            return {}
        captures = {k: g.launches for k, (g, _) in self.recorded.items()}
        empty = [g.label for g, _ in self.recorded.values() if not g.launches]
        if empty:
            raise GemmAuditError(
                f"the profile of the capture of {', '.join(sorted(set(empty)))} holds no launching call, "
                "so its replays' kernels cannot be bound to its GEMMs"
            )
        try:
            doc = json.loads(_native.bind_graph_replays(text, REPLAY_PREFIX, json.dumps(captures)))
        except GemmAuditError as e:
            raise GemmAuditError(f"binding the replays of {self._labels()}: {e}") from None
        out = {}
        for k, b in doc.items():
            g, r = self.recorded[int(k)]
            out[int(k)] = {int(i): v for i, v in b["gemms"].items()}
            g.binding, g.binding_unowned, g.bound_at = out[int(k)], list(b["unowned_gemm_kernels"]), r
            self._unowned(int(k), g.binding_unowned)
        return out

    def cached(self) -> Dict[int, Dict[int, dict]]:
        """Per recorded replay, what its graph's last profiled replay ran
        (``record(..., profile=False)``: no profile to bind)."""
        out = {}
        for k, (g, _) in self.recorded.items():
            out[k] = g.binding
            self._unowned(k, g.binding_unowned)
        return out

    def _unowned(self, k: int, kernels: List[str]) -> None:
        g, r = self.recorded[k]
        for kernel in kernels:
            self.unowned.append(
                {
                    "label": f"{g.label}, replay {r} (a GEMM kernel no captured aten op launched)",
                    "kernels": [kernel],
                    "beside": [],
                    "device": g.device,
                }
            )

    def owns_region(self, label: str) -> bool:
        """Whether a profile region is one of the recorded replays."""
        return f" in {REPLAY_PREFIX}" in label

    def _labels(self) -> str:
        return ", ".join(sorted({g.label for g, _ in self.recorded.values()}))


def _element_size(dtype: str) -> int:
    return {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1, "i8": 1}[dtype]


def _first_difference(a: bytes, b: bytes, gemm: dict) -> Optional[dict]:
    """Where two outputs' bits first differ: element, row and column."""
    if a == b:
        return None
    if len(a) != len(b):
        return {"element": None, "why": f"outputs of {len(a)} and {len(b)} bytes"}
    size = _element_size(gemm["dtype"])
    at = next(i for i in range(len(a)) if a[i] != b[i]) // size
    n = gemm["n"]
    return {"element": at, "row": at // n % gemm["m"], "column": at % n}


def compare_recordings(a, b) -> List[dict]:
    """Per GEMM, two recordings of one step (eager against graph replay,
    one run against another), paired in order: ``{"gemm", "kernels":
    [a, b], "grid": [a, b], "graph": [a, b], "same_kernels", "identical",
    "first_difference"}`` where ``first_difference`` is ``None`` or the
    element (row, column) where the output bits first differ. The steps
    must hold the same GEMMs (op, dtype, shape) in the same order."""
    if len(a.gemms) != len(b.gemms):
        raise GemmAuditError(f"the recordings hold {len(a.gemms)} and {len(b.gemms)} GEMMs: not one step")
    out_a, out_b = a.output_bytes(), b.output_bytes()
    results = []
    for ga, gb, xa, xb in zip(a.gemms, b.gemms, out_a, out_b):
        shape = ("op_name", "op", "dtype", "m", "k", "n", "batch")
        if any(ga[key] != gb[key] for key in shape):
            raise GemmAuditError(
                f"{ga['name']} and {gb['name']} are not one GEMM: "
                + ", ".join(f"{key} {ga[key]} / {gb[key]}" for key in shape if ga[key] != gb[key])
            )
        names = [[k["name"] for k in g["kernels"]] for g in (ga, gb)]
        grids = [[k.get("grid") for k in g["kernels"]] for g in (ga, gb)]
        diff = _first_difference(xa, xb, ga)
        results.append(
            {
                "gemm": ga["name"],
                "kernels": names,
                "grid": grids,
                "graph": [ga.get("graph"), gb.get("graph")],
                "same_kernels": names[0] == names[1] and grids[0] == grids[1],
                "identical": diff is None,
                "first_difference": diff,
            }
        )
    return results


def batch_invariance(recordings: Dict[int, object]) -> List[dict]:
    """The batch-invariance matrix of one step recorded at several batch
    sizes (``{batch: Recording}``, e.g. graphs captured at 1, 8 and 64 and
    replayed, with the same leading rows of input): per GEMM (paired in
    order; one family: op, dtype, k and n), whether the rows all sizes
    share (rows ``0..min(m)``) are bit-identical to the smallest size's,
    and which kernels served each size: ``{"gemm", "family", "ms",
    "identical": {size: bool}, "invariant", "kernels": {size: [names]},
    "first_difference": {size: ...}}``. 2-D GEMMs only (batch 1)."""
    sizes = sorted(recordings)
    if len(sizes) < 2:
        raise GemmAuditError("batch_invariance needs recordings at two batch sizes at least")
    counts = {s: len(recordings[s].gemms) for s in sizes}
    if len(set(counts.values())) != 1:
        raise GemmAuditError(f"the recordings hold different numbers of GEMMs: {counts}")
    outputs = {s: recordings[s].output_bytes() for s in sizes}
    results = []
    for j, base in enumerate(recordings[sizes[0]].gemms):
        gemms = {s: recordings[s].gemms[j] for s in sizes}
        family = {key: base[key] for key in ("op_name", "op", "dtype", "k", "n")}
        for s, g in gemms.items():
            other = {key: g[key] for key in family}
            if other != family:
                raise GemmAuditError(f"GEMM {j} at batch {s} is {other}, at batch {sizes[0]} {family}: not one step")
        if any(g["batch"] != 1 for g in gemms.values()):
            continue
        rows = min(g["m"] for g in gemms.values())
        width = rows * base["n"] * _element_size(base["dtype"])
        first = outputs[sizes[0]][j][:width]
        identical, where = {}, {}
        for s in sizes:
            part = outputs[s][j][:width]
            identical[s] = part == first
            where[s] = _first_difference(first, part, dict(base, m=rows))
        results.append(
            {
                "gemm": base["name"],
                "family": family,
                "ms": {s: gemms[s]["m"] for s in sizes},
                "rows_compared": rows,
                "identical": identical,
                "invariant": all(identical.values()),
                "kernels": {s: [k["name"] for k in gemms[s]["kernels"]] for s in sizes},
                "first_difference": where,
            }
        )
    return results
