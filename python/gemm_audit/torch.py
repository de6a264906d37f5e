"""Record, golden and gate the GEMMs of a PyTorch step, on a GPU or a CPU.

::

    import gemm_audit.torch as gat

    with gat.record("decode@b8") as rec:
        model(x)
    rec.write("decode@b8.gat")                      # a gemm-audit trace
    gat.assert_matches_golden("decode@b8.gat", "traces")
    probe = rec.probe_batch_invariance()            # the batch matrix of your own GEMMs
    threads = rec.probe_thread_invariance([1, 2, 4])  # CPU GEMMs: do the bits follow the thread count?

While recording, every matmul-family aten op the step dispatches (``mm``,
``addmm``, ``bmm``, ``baddbmm``, ``addbmm``, ``_addmm_activation``, ``mv``,
``addmv``, ``_scaled_mm``; ``nn.Linear``, ``F.linear`` and ``matmul``
reach these) is seen with its shapes, strides, dtype, layout and device,
and runs inside a profiler range of its own. On a GPU, the CUDA kernels it
launched are bound to it by gemm-audit's own binder (the one ``gemm-audit
import`` uses): a split-K GEMM and its reduce kernel are two kernels of one
GEMM, and copies, fills and child-op kernels are kept beside them, never
as the launch. A GEMM on the CPU is recorded with its device and no kernel,
and the CPU BLAS behind it (MKL, oneDNN, their versions, the thread
count, the CPU capability) is part of the context. Each output is copied
when the op returns and fingerprinted: on the GPU by gemm-audit's own chunk
kernel where the outputs live (``Recording.fingerprinted_on`` says
``"device"``; where that cannot run, e.g. without NVRTC, on the host, and it
says why), on the host for CPU outputs.
The determinism-relevant state (torch, CUDA, cuBLAS and cuBLASLt versions
where a GEMM ran on the GPU, driver, device, TF32 and reduced-precision
flags, ``use_deterministic_algorithms``, ``CUBLAS_WORKSPACE_CONFIG``,
``NVIDIA_TF32_OVERRIDE``, ``CUBLASLT_WORKSPACE_SIZE``, the preferred BLAS
library, the CPU thread count) becomes the trace's context. The trace
itself is built and written by gemm-audit's Rust library
(``gemm_audit.observed``), so ``diff``, ``check --golden``, ``compare`` and
the reports read it as any trace of vendor routes.

Not captured: kernels of other ops (attention, norms, fused or compiled
kernels) are not GEMMs of the trace; their names are listed in
``Recording.other_kernels``, and convolution kernels (cuDNN's and
CUTLASS's, implicit-GEMM ones among them) in
``Recording.convolution_kernels``. The recorder records the aten ops of
:data:`GEMM_OPS`; which profiled kernel is GEMM-family, a convolution or
other work is decided by gemm-audit's one kernel rule
(:func:`kernel_class`, the rule ``gemm-audit import`` and the census use),
through the binder. GEMMs replayed from a CUDA graph are
recorded where the graph was captured under :func:`capture` and the
replay runs inside ``record(..., graphs=...)``; a replay of any other
graph, or a ``torch.compile`` region that calls a Triton template outside
aten dispatch, is not dispatched: the profile binds its kernels to the
region (``Recording.regions``: label, kernels, device;
``Recording.unseen_graphs``), but they are not GEMMs of the trace, since
their outputs and shapes are not observed (import a profile of the step
with ``gemm-audit import`` to gate their kernels).
Ops whose dtype a trace cannot express (complex, integer but int8) are
listed in ``Recording.skipped`` with the reason.
"""

import contextlib
import ctypes
import functools
import json
import os
import tempfile
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import _native
from ._native import GemmAuditError
from ._environment import _volatile, cpu_identity, device_identity, framework_state
from ._nvrtc import nvrtc_from_wheels

__all__ = [
    "record",
    "Recording",
    "bind_kernels",
    "bind_profile",
    "gemm_layout",
    "kernel_class",
    "assert_matches_golden",
    "capture",
    "Captures",
    "CapturedGraph",
    "compare_recordings",
    "batch_invariance",
    "GEMM_OPS",
]

#: The aten ops recorded, with the argument positions of A and B.
GEMM_OPS: Dict[str, Tuple[int, int]] = {
    "mm": (0, 1),
    "bmm": (0, 1),
    "mv": (0, 1),
    "_scaled_mm": (0, 1),
    "addmm": (1, 2),
    "_addmm_activation": (1, 2),
    "baddbmm": (1, 2),
    "addbmm": (1, 2),
    "addmv": (1, 2),
}

#: The prefix of the profiler range each recorded op runs in.
RANGE_PREFIX = "gemm_audit:"

_DTYPES = {
    "torch.float32": "f32",
    "torch.float16": "f16",
    "torch.bfloat16": "bf16",
    "torch.float64": "f64",
    "torch.float8_e4m3fn": "f8e4m3",
    "torch.float8_e5m2": "f8e5m2",
    "torch.int8": "i8",
}


def _matrix(shape: Sequence[int], strides: Sequence[int]) -> Tuple[bool, int]:
    """(transposed, leading dimension) of the last two dims of an operand
    stored row-major: rows contiguous, or columns contiguous."""
    rows, cols = shape[-2], shape[-1]
    s_row, s_col = strides[-2], strides[-1]
    if s_col == 1 or cols == 1:
        return False, max(s_row, cols)
    if s_row == 1 or rows == 1:
        return True, max(s_col, rows)
    return False, s_row


def gemm_layout(a_shape, a_strides, b_shape, b_strides, dtype) -> dict:
    """The GEMM an op computes, from its operands' shapes, strides and
    dtype: ``{"op", "dtype", "m", "k", "n", "batch", "lda", "ldb", "ldc"}``.
    Raises ``ValueError`` naming why a trace cannot express it."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype} is not one a trace names ({', '.join(sorted(_DTYPES))})")
    a_shape, b_shape = list(a_shape), list(b_shape)
    a_strides, b_strides = list(a_strides), list(b_strides)
    if len(b_shape) == 1:  # mv: B is a vector (k,) -> k x 1
        b_shape, b_strides = [b_shape[0], 1], [b_strides[0], 1]
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError(f"operands of shapes {a_shape} and {b_shape} are not matrices")
    batch = a_shape[0] if len(a_shape) == 3 else 1
    m, k = a_shape[-2], a_shape[-1]
    k2, n = b_shape[-2], b_shape[-1]
    if k != k2:
        raise ValueError(f"inner extents differ: A {a_shape}, B {b_shape}")
    a_t, lda = _matrix(a_shape, a_strides)
    b_t, ldb = _matrix(b_shape, b_strides)
    return {
        "op": ("t" if a_t else "n") + ("t" if b_t else "n"),
        "dtype": _DTYPES[dtype],
        "m": m,
        "k": k,
        "n": n,
        "batch": batch,
        "lda": lda,
        "ldb": ldb,
        "ldc": n,
    }


def kernel_class(name: str) -> str:
    """What a kernel is, by its name: ``"gemm"``, ``"gemm-reduce"`` (a
    split-K GEMM's reduce kernel), ``"attention"``, ``"convolution"`` or
    ``"other"``. It is gemm-audit's one rule (Rust's
    ``profile::KernelClass``), the one the binder, ``gemm-audit import``
    and the census apply; docs/profiles.md states it."""
    return _native.kernel_class(name)


def bind_profile(profile, prefix: str = RANGE_PREFIX) -> dict:
    """Binds a profiler trace as :func:`bind_kernels` does, and also
    returns the GEMMs no recorded op launched: ``{"gemms": {index: {...}},
    "regions": [...], "other_kernels": [...], "convolution_kernels":
    [...], "unbound": [...]}``. Each
    region GEMM is a GEMM kernel (cuBLAS, CUTLASS, nvjet, a Triton matmul
    template) launched by a CUDA-graph replay or a ``torch.compile``
    region, outside aten dispatch: ``{"label", "kernels", "beside",
    "device"}``, in launch order, its label naming the region
    (``cudaGraphLaunch in CompiledFunction``). The profile holds no shapes
    for them."""
    if isinstance(profile, dict) or isinstance(profile, list):
        data = json.dumps(profile).encode()
    elif isinstance(profile, bytes):
        data = profile
    else:
        with open(os.fspath(profile), "rb") as f:
            data = f.read()
    doc = json.loads(_native.bind_profile(data, prefix))
    doc["gemms"] = {int(i): g for i, g in doc["gemms"].items()}
    return doc


def bind_kernels(profile, prefix: str = RANGE_PREFIX) -> Tuple[Dict[int, dict], List[str]]:
    """Binds the GPU activities of a profiler trace to the ranges named
    ``prefix + index``, with gemm-audit's own binder (the one ``gemm-audit
    import`` uses): an activity belongs to the range that holds the CUDA
    runtime or driver call that launched it (by correlation id, on
    whichever thread launched it). ``profile`` is the Chrome trace as a
    dict, or the path of its file. Returns ``({index: {"kernels",
    "beside", "device"}}, other)``: per range, the kernels it launched
    (each ``{"name", "kind", "grid", "block", "shared_memory"}``, in launch
    order; a split-K GEMM and its reduce kernel are two), the copies, fills
    and child-op kernels beside them, and the device; ``other`` names the
    kernels bound to no range (a region GEMM's kernels and convolution
    kernels among them: :func:`bind_profile` keeps those apart)."""
    doc = bind_profile(profile, prefix)
    other = list(doc["other_kernels"])
    for r in doc["regions"]:
        other.extend(k["name"] for k in r["kernels"])
    other.extend(doc["convolution_kernels"])
    return doc["gemms"], other


def step_document(
    workload: str, framework: dict, device: dict, gemms: List[dict], volatile: Optional[Dict[str, str]] = None
) -> str:
    """The JSON of an observed step, as ``gemm_audit.observed`` reads it."""
    return json.dumps(
        {"workload": workload, "framework": framework, "device": device, "gemms": gemms, "volatile": volatile or {}}
    )


class Recording:
    """What one recorded step ran: ``gemms`` (the observed GEMMs, as the
    trace will hold them), ``skipped`` (ops seen but not expressible, with
    why), ``other_kernels`` (kernels bound to no GEMM),
    ``convolution_kernels`` (convolution kernels, counted apart) and the framework
    state and device. ``write`` builds and writes the trace;
    ``probe_batch_invariance`` re-runs the recorded GEMMs at other m."""

    def __init__(self, workload: str):
        self.workload = workload
        self.gemms: List[dict] = []
        self.skipped: List[str] = []
        self.other_kernels: List[str] = []
        #: Convolution kernels (cuDNN, CUTLASS conv) bound to no GEMM:
        #: neither GEMMs nor other kernels (:func:`kernel_class`).
        self.convolution_kernels: List[str] = []
        #: GEMMs the dispatch mode did not see, bound from the profile: the
        #: GEMM kernels of CUDA-graph replays and ``torch.compile`` regions
        #: (:func:`bind_profile`'s ``regions``). Listed, not yet in the
        #: trace: their outputs are not observed and their shapes unknown.
        self.regions: List[dict] = []
        #: Replays of CUDA graphs whose capture was not recorded (not
        #: captured under :func:`capture`): their GEMMs cannot be named.
        self.unseen_graphs: List[str] = []
        self.framework: dict = {}
        self.device: dict = {}
        #: Per-machine facts (GPU UUID, CPU model): kept, never compared.
        self.volatile: Dict[str, str] = {}
        self._outputs: list = []
        self._calls: list = []  # (aten op, args, kwargs) to re-run for the probe
        self._fingerprints: Optional[List[str]] = None
        #: Where the outputs were fingerprinted: ``"device"``, or
        #: ``"host"`` and why the device could not (copied back first).
        self.fingerprinted_on = "host"
        #: Whether the block ran under the profiler. ``False`` for
        #: ``record(..., profile=False)``: the replays' kernels are those
        #: their graphs' profiled replays ran, and ``other_kernels``,
        #: ``convolution_kernels``, ``regions`` and ``unseen_graphs`` were
        #: not observed (empty, not "none ran").
        self.profiled = True

    def step_json(self) -> str:
        """The observed step, as JSON."""
        return step_document(self.workload, self.framework, self.device, self.gemms, self.volatile)

    def output_bytes(self) -> List[bytes]:
        """Each recorded GEMM's output, in storage bytes."""
        return [_storage_bytes(t) for t in self._outputs]

    def write(self, path, overwrite: bool = False) -> dict:
        """Writes the trace to ``path`` (an existing file is refused unless
        ``overwrite``); returns its ``show`` document."""
        if not self.gemms and (self.regions or self.unseen_graphs):
            seen = self.unseen_graphs[:1] or [f"{len(self.regions)} GEMM kernels in regions no aten op dispatched"]
            raise GemmAuditError(
                f"step {self.workload!r} recorded no GEMM op, but GEMM kernels ran where the recorder cannot see "
                f"their ops ({seen[0]}): capture the graph inside gemm_audit.torch.capture() and pass it as "
                "record(..., graphs=...), or import a profile of the step with gemm-audit import"
            )
        if self._fingerprints is not None:
            doc = _native.write_observed_fingerprinted(
                self.step_json(), self._fingerprints, os.fspath(path), overwrite
            )
        else:
            doc = _native.write_observed(self.step_json(), self.output_bytes(), os.fspath(path), overwrite)
        return json.loads(doc)

    def probe_batch_invariance(self, ms: Optional[Iterable[int]] = None, seed: int = 0) -> List[dict]:
        """Re-runs each recorded 2-D GEMM with its own B (the weights, and
        the bias of an addmm) on new seeded A at every m in ``ms`` (default:
        1, 2, 4, ... up to the recorded m, and the recorded m), and says per
        GEMM whether the rows all those m share (rows ``0..min(ms)``) are
        bit-identical to the smallest m's, and which kernels served each m.
        Each result: ``{"gemm", "ms", "identical": {m: bool}, "invariant",
        "kernels": {m: [names]}}``."""
        import torch

        results = []
        for g, (func, args, kwargs) in zip(self.gemms, self._calls):
            if func is None or g["batch"] != 1 or g["op_name"] not in ("aten::mm", "aten::addmm"):
                continue
            a_pos, _ = GEMM_OPS[g["op_name"].split("::")[1]]
            if g["op_name"] == "aten::addmm" and args[0].dim() == 2 and args[0].shape[0] != 1:
                continue  # a full C input cannot be cut to m rows
            a = args[a_pos]
            sizes = sorted(set(ms) if ms is not None else _powers_to(g["m"]))
            gen = torch.Generator(device=a.device).manual_seed(seed)
            full = torch.randn(max(sizes), g["k"], generator=gen, device=a.device, dtype=torch.float32).to(a.dtype)
            if g["op"].startswith("t"):
                full = full.t().contiguous().t()
            rows = min(sizes)
            base = None
            identical, kernels = {}, {}
            for m in sizes:
                call = list(args)
                call[a_pos] = full[:m]
                out, bound = _run_bound(func, call, kwargs)
                kernels[m] = [k["name"] for k in bound]
                part = _storage_bytes(out[:rows])
                if base is None:
                    base = part
                identical[m] = part == base
            if identical:
                results.append(
                    {
                        "gemm": g["name"],
                        "ms": sorted(identical),
                        "identical": identical,
                        "invariant": all(identical.values()),
                        "kernels": kernels,
                    }
                )
        return results

    def probe_thread_invariance(self, threads: Iterable[int] = (1, 2, 4)) -> List[dict]:
        """Re-runs each recorded CPU GEMM on its own inputs with torch's
        CPU thread count set to each of ``threads`` and says per GEMM
        whether the output bits depend on it (they can with MKL, OpenBLAS
        and oneDNN, which split a GEMM's k across threads). The thread
        count is restored after. Each result: ``{"gemm", "dtype", "op",
        "threads", "identical": {threads: bool}, "invariant"}``; GPU GEMMs
        are left out (the thread count does not reach their kernels)."""
        import torch

        counts = [int(t) for t in threads]
        if not counts or any(t < 1 for t in counts):
            raise GemmAuditError(f"thread counts {counts}: give at least one, each 1 or more")
        before = torch.get_num_threads()
        results = []
        try:
            for g, (func, args, kwargs) in zip(self.gemms, self._calls):
                if g.get("device") != "cpu" or func is None:
                    continue
                identical, base = {}, None
                for t in counts:
                    torch.set_num_threads(t)
                    out = func(*args, **kwargs)
                    bits = _storage_bytes(out[0] if isinstance(out, tuple) else out)
                    if base is None:
                        base = bits
                    identical[t] = bits == base
                results.append(
                    {
                        "gemm": g["name"],
                        "dtype": g["dtype"],
                        "op": g["op"],
                        "threads": counts,
                        "identical": identical,
                        "invariant": all(identical.values()),
                    }
                )
        finally:
            torch.set_num_threads(before)
        return results


_FINGERPRINTERS: dict = {}


def _device_fingerprints(tensors) -> Tuple[Optional[List[str]], Optional[str]]:
    """Each tensor's fingerprint computed on its device by gemm-audit's
    chunk kernel (all of them in one launch), or ``(None, why)`` when that
    cannot be done here."""
    import torch

    if not hasattr(_native, "DeviceFingerprints"):
        return None, "the package was built without CUDA"
    ordinal = torch.cuda.current_device()
    try:
        if ordinal not in _FINGERPRINTERS:
            nvrtc_from_wheels()  # the fingerprint kernels are compiled (or admitted) by NVRTC
            _FINGERPRINTERS[ordinal] = _native.DeviceFingerprints(ordinal)
        fp = _FINGERPRINTERS[ordinal]
        dense = [t.detach().contiguous() for t in tensors]  # alive until hashed
        torch.cuda.synchronize()
        return fp.fingerprint_many([(c.data_ptr(), c.numel() * c.element_size()) for c in dense]), None
    except _native.GemmAuditError as e:
        return None, str(e)


def _powers_to(m: int) -> List[int]:
    out, p = [], 1
    while p < m:
        out.append(p)
        p *= 2
    return out + [m]


def _storage_bytes(t) -> bytes:
    """The tensor's elements in storage order (no numpy needed)."""
    flat = t.detach().contiguous().reshape(-1).cpu()
    return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())


def _cuda() -> bool:
    """Whether torch sees a CUDA device (never raises)."""
    import torch

    try:
        return torch.cuda.is_available()
    except Exception:  # a broken CUDA install is no CUDA here
        return False


def _sync() -> None:
    import torch

    if _cuda():
        torch.cuda.synchronize()


def _activities():
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if _cuda() else [ProfilerActivity.CPU]


def _profile():
    """A profiler of this machine's activities. torch warns, at every
    stop, that a profile without a schedule keeps one cycle of events: one
    is all a recording is, so that warning alone is silenced."""
    from torch.profiler import profile

    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
    return profile(activities=_activities())


def _run_bound(func, args, kwargs):
    """Runs one aten op under the profiler; returns its output and the
    kernels bound to it (none on the CPU)."""
    from torch.profiler import record_function

    _sync()
    with _profile() as prof:
        with record_function(RANGE_PREFIX + "0"):
            out = func(*args, **kwargs)
        _sync()
    bound = _bind_profile(prof)["gemms"]
    return out, bound.get(0, {}).get("kernels", [])


def _profile_text(prof) -> bytes:
    """A finished profiler's Chrome trace, as bytes: it goes through a
    temporary file, removed after."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gemm-audit-profile-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def _bind_profile(prof, prefix: str = RANGE_PREFIX) -> dict:
    """Binds a finished profiler's activities (:func:`bind_profile`)."""
    return bind_profile(_profile_text(prof), prefix)


def _gemm_call(short: str, args, device: Optional[str] = None):
    """What a dispatched GEMM-family op computes: ``(op_name, layout,
    where, why)``; ``layout`` is ``None`` where a trace cannot express it,
    and ``why`` says why. ``device="cpu"`` refuses operands elsewhere."""
    op_name = f"aten::{short}"
    a_pos, b_pos = GEMM_OPS[short]
    a, b = args[a_pos], args[b_pos]
    where = str(a.device) if a.device.type != "cuda" else f"cuda:{a.device.index or 0}"
    try:
        if a.device != b.device:
            raise ValueError(f"operands on two devices ({a.device}, {b.device})")
        if device == "cpu" and a.device.type != "cpu":
            raise ValueError(f"operands on {a.device}, not the CPU asked for")
        return op_name, gemm_layout(a.shape, a.stride(), b.shape, b.stride(), str(a.dtype)), where, None
    except ValueError as e:
        return op_name, None, where, str(e)


@contextlib.contextmanager
def record(
    workload: str,
    path=None,
    overwrite: bool = False,
    device: Optional[str] = None,
    graphs: Optional["Captures"] = None,
    profile: bool = True,
):
    """Records the GEMMs the block dispatches; yields the
    :class:`Recording`, written to ``path`` on exit when given. GEMMs run
    wherever their tensors are (GPU, CPU, or both in one step: each GEMM
    says where it ran). ``device="cuda"`` asks for a GPU recording: where
    torch sees no CUDA device it raises :class:`GemmAuditError` naming what
    is missing, before anything runs.

    ``graphs`` (the :class:`Captures` of :func:`capture`) records CUDA-graph
    replays too: every replay of a graph captured under it
    (``g.replay()``, a ``make_graphed_callables`` callable, a
    ``torch.compile(mode="reduce-overhead")`` step) adds the graph's
    captured GEMMs, in capture order, each bound to the kernels the replay
    ran in its place and fingerprinted with what the replay wrote. A replay
    of a graph not captured under it cannot be seen: it is listed in
    :attr:`Recording.unseen_graphs` (its GEMM kernels in
    :attr:`Recording.regions`), and when ``graphs`` is given it is an error
    naming the graph.

    ``profile=False`` (with ``graphs``) records a block that only replays
    graphs without the profiler, which costs far more than a replay: each
    replay's GEMMs get the kernels its graph's last profiled replay ran
    (an instantiated graph launches the same kernels every replay; the
    trace's graph label says which replay bound them), and its outputs are
    copied and fingerprinted as usual. Every replayed graph must have been
    recorded once with the profiler; an eager GEMM-family op in the block
    raises (it could not be bound), and kernels outside the graphs' GEMMs
    are not observed (:attr:`Recording.profiled` is ``False``)."""
    import torch

    if device not in (None, "cpu", "cuda"):
        raise GemmAuditError(f'device {device!r}: expected None, "cpu" or "cuda"')
    if device == "cuda" and not _cuda():
        raise GemmAuditError(
            "a CUDA recording was asked for (device='cuda'), but torch sees no CUDA device "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False: no GPU or no NVIDIA driver "
            "here); record on the CPU with device=None or 'cpu'"
        )
    if graphs is not None and not isinstance(graphs, Captures):
        raise GemmAuditError(f"graphs={graphs!r}: expected the Captures of gemm_audit.torch.capture()")
    if not profile and graphs is None:
        raise GemmAuditError(
            "record(..., profile=False) records only replays of CUDA graphs already bound by a profiled "
            "recording: pass their capture as graphs="
        )
    rec = Recording(workload)
    rec.profiled = profile
    # (name, op_name, layout or None, device, output copy, call, why, replayed or None)
    seen: list = []
    replays = _graphs.Replays(graphs, seen, rec, profiled=profile)

    _warn_if_compiled_code_runs_eagerly()
    _sync()
    with _profile() if profile else contextlib.nullcontext() as prof:
        with _observer()(seen, device, profile), replays.patched():
            yield rec
        _sync()
    if profile:
        text = _profile_text(prof)
        doc = bind_profile(text)
        replayed = replays.bind(text)
    else:
        doc = {"gemms": {}, "other_kernels": [], "convolution_kernels": [], "regions": []}
        replayed = replays.cached()
    bound = doc["gemms"]
    rec.other_kernels = doc["other_kernels"]
    rec.convolution_kernels = doc["convolution_kernels"]
    rec.regions = [r for r in doc["regions"] if not replays.owns_region(r["label"])] + replays.unowned
    recorded = [x for x in seen if x[2] is not None]
    cuda_devices = sorted({int(x[3].split(":")[1]) for x in recorded if x[3].startswith("cuda")})
    on_cpu = any(x[3] == "cpu" for x in recorded)
    main_cuda = cuda_devices[0] if cuda_devices else None
    rec.framework = framework_state(cuda=main_cuda is not None, cpu=on_cpu)
    rec.device = device_identity(main_cuda) if main_cuda is not None else cpu_identity()
    rec.volatile = _volatile(main_cuda)
    for i, (name, op_name, layout, where, copy, call, why, replay) in enumerate(seen):
        if layout is None:
            rec.skipped.append(f"{name}: {why}")
            continue
        b = bound.get(i, {}) if replay is None else replayed[replay["replay"]].get(replay["index"], {})
        gemm = dict(
            name=name,
            op_name=op_name,
            kernels=b.get("kernels", []),
            beside=b.get("beside", []),
            device=where,
            **layout,
        )
        if replay is not None:
            gemm["graph"] = replay["graph"]
        rec.gemms.append(gemm)
        rec._outputs.append(copy)
        rec._calls.append(call)
    if rec._outputs and all(t.is_cuda for t in rec._outputs):
        rec._fingerprints, why = _device_fingerprints(rec._outputs)
        rec.fingerprinted_on = "device" if why is None else f"host ({why})"
    else:
        rec._fingerprints, rec.fingerprinted_on = None, "host"
    if path is not None:
        rec.write(path, overwrite)


@functools.lru_cache(maxsize=None)
def _observer():
    """The dispatch mode of :func:`record` (made once per process): each
    GEMM-family op runs in a profiler range of its own, its output is
    copied, and it is appended to ``seen``."""
    from torch.profiler import record_function

    class Observe(_recorder_mode()):
        def __init__(self, seen: list, device: Optional[str], profile: bool):
            super().__init__()
            self.seen, self.device, self.profile = seen, device, profile

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            short = str(func).split(".")[1]  # aten.mm.default -> mm
            if short not in GEMM_OPS:
                return func(*args, **kwargs)
            i = len(self.seen)
            op_name, layout, where, why = _gemm_call(short, args, self.device)
            if not self.profile:
                raise GemmAuditError(
                    f"{op_name}#{i} ran eagerly inside record(..., profile=False), which records only "
                    "replays of bound CUDA graphs: record this block with the profiler (profile=True)"
                )
            with record_function(RANGE_PREFIX + str(i)):
                out = func(*args, **kwargs)
            result = out[0] if isinstance(out, tuple) else out
            copy = result.detach().clone() if layout is not None else None
            self.seen.append((f"{op_name}#{i}", op_name, layout, where, copy, (func, args, kwargs), why, None))
            return out

    return Observe


@functools.lru_cache(maxsize=None)
def _recorder_mode():
    """The base of the recorder's dispatch modes. Its
    ``ignore_compile_internals`` lets torch.compile run its compiled code
    under them (the mode is off while compiling and on while the compiled
    code runs, so the aten GEMMs that code calls are recorded as they
    run). Without it torch skips compiled code under any dispatch mode and
    runs the step eagerly: a recording of a compiled step would be one of
    its eager twin. Made once per process, on first use (torch is
    imported only then)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class RecorderMode(TorchDispatchMode):
        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

    return RecorderMode


def _warn_if_compiled_code_runs_eagerly() -> None:
    """Say so where torch.compile'd code would run eagerly under the
    recorder, rather than record its eager twin silently: on torch
    releases without ``ignore_compile_internals`` (before 2.9), and under
    another dispatch mode that does not ignore compile internals (torch
    skips compiled code under it, and keeps skipping that code object
    afterwards)."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return
    import torch
    from torch.utils import _python_dispatch as dispatch

    if not hasattr(dispatch.TorchDispatchMode, "ignore_compile_internals"):
        warnings.warn(
            f"torch {torch.__version__} runs torch.compile'd code eagerly under a dispatch mode, so a compiled "
            "function called inside gemm_audit.torch.record() or capture() is recorded as its eager ops "
            "(torch 2.9 and later run the compiled code): to gate a compiled step's own kernels, import a "
            "profile of it with gemm-audit import",
            stacklevel=3,
        )
        return
    others = [
        type(m).__name__
        for m in dispatch._get_current_dispatch_mode_stack()
        if not m.is_infra_mode() and not m.ignore_compile_internals()
    ]
    if others:
        warnings.warn(
            f"dispatch mode {', '.join(others)} is active and does not ignore compile internals: torch runs "
            "torch.compile'd code eagerly under it, so a compiled function called inside "
            "gemm_audit.torch.record() or capture() is recorded as its eager ops, and torch keeps running that "
            "function eagerly afterwards; record outside that mode (or give it ignore_compile_internals) to "
            "record the compiled code",
            stacklevel=3,
        )


def assert_matches_golden(trace, golden_dir="traces", allow=()):
    """``gemm_audit.assert_matches_golden`` for a trace written by
    :meth:`Recording.write`: the golden lives at
    ``golden_dir/<device>/<workload>.gat``; a drift keeps the candidate
    for ``gemm-audit review``."""
    from . import assert_matches_golden as gate

    return gate(trace, golden_dir, allow)


from . import _graphs  # noqa: E402  (it uses the helpers above)
from ._graphs import CapturedGraph, Captures, batch_invariance, capture, compare_recordings  # noqa: E402
