"""The digests ranks of one job exchange to agree on a recorded step
(:mod:`gemm_audit.distributed`): per entry (entry 0 is the step's context,
entry ``i + 1`` is GEMM ``i``) a 64-bit digest of its route-relevant fields
and, for GEMMs, a 64-bit digest of its output fingerprint. The fields are
kept flat (``"framework.state.allow_tf32"``, ``"kernels[0].grid"``) so two
ranks' entries can be diffed field by field, naming what moved.

Per-machine facts (the GPU's UUID, its ordinal, the CPU's model: the
recording's ``volatile``) are never digested: ranks on different cards of
one class must agree."""

import hashlib
import json
import re
from typing import Dict, List, Optional

#: A GEMM's own fields that decide its route (the context is entry 0).
GEMM_FIELDS = ("op_name", "op", "dtype", "m", "k", "n", "batch", "lda", "ldb", "ldc")
#: A kernel's fields that decide its route.
KERNEL_FIELDS = ("name", "kind", "grid", "block", "shared_memory")

#: The name of entry 0.
CONTEXT = "context"


def _value(v) -> str:
    """A field's value as canonical text (JSON: key order fixed)."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _device_kind(where: str) -> str:
    """``cuda:3`` -> ``cuda``: rank 3 runs on its own ordinal, which is
    where it runs, not how."""
    return re.sub(r":\d+$", "", str(where))


def context_fields(framework: dict, device: dict) -> Dict[str, str]:
    """The step's context, flat: the framework's name, version, libraries
    and state knobs, and the device block (class, compute capability,
    multiprocessors, driver)."""
    out = {
        "framework.name": _value(framework.get("name")),
        "framework.version": _value(framework.get("version")),
    }
    for k, v in (framework.get("libraries") or {}).items():
        out[f"framework.libraries.{k}"] = _value(v)
    for k, v in (framework.get("state") or {}).items():
        out[f"framework.state.{k}"] = _value(v)
    for k, v in (device or {}).items():
        out[f"device.{k}"] = _value(v)
    return out


def gemm_fields(g: dict) -> Dict[str, str]:
    """One recorded GEMM's route-relevant fields, flat: op, dtype, shape,
    layout, leading dimensions, the device kind (not its ordinal), each
    kernel's name, kind and geometry, and the kernels beside it."""
    out = {f: _value(g.get(f)) for f in GEMM_FIELDS}
    out["device"] = _value(_device_kind(g.get("device", "")))
    kernels = g.get("kernels") or []
    out["kernels.count"] = _value(len(kernels))
    for i, k in enumerate(kernels):
        for f in KERNEL_FIELDS:
            out[f"kernels[{i}].{f}"] = _value(k.get(f) if isinstance(k, dict) else k)
    out["beside"] = _value(g.get("beside") or [])
    return out


def digest64(text: str) -> int:
    """64 bits of BLAKE2b of ``text``, as a signed int64 (a tensor's)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def fields_digest(fields: Dict[str, str]) -> int:
    """The digest of a flat field map (order-independent)."""
    return digest64(_value(fields))


def gemm_digest(g: dict) -> int:
    """:func:`fields_digest` of :func:`gemm_fields`, the same fields read
    in one pass (the fast path: the flat map is built only to name what
    differs)."""
    kernels = [[k.get(f) for f in KERNEL_FIELDS] if isinstance(k, dict) else k for k in g.get("kernels") or []]
    route = [g.get(f) for f in GEMM_FIELDS] + [_device_kind(g.get("device", "")), kernels, g.get("beside") or []]
    return digest64(_value(route))


def entries(rec) -> List[Dict[str, str]]:
    """The recording's entries, flat: the context, then every GEMM."""
    return [context_fields(rec.framework, rec.device)] + [gemm_fields(g) for g in rec.gemms]


def entry_names(rec) -> List[str]:
    """Entry names: ``"context"``, then each GEMM's name."""
    return [CONTEXT] + [g.get("name", f"gemm#{i}") for i, g in enumerate(rec.gemms)]


def output_fingerprints(rec) -> List[str]:
    """Each GEMM's output fingerprint as the trace will hold it (the
    fingerprint's JSON): the device's where the recorder fingerprinted
    there, else gemm-audit's own of the output bytes (the same value for
    the same bytes, so ranks fingerprinted either way compare)."""
    from . import _native

    fps: Optional[List[str]] = getattr(rec, "_fingerprints", None)
    if fps is not None:
        return list(fps)
    return [_native.fingerprint_bytes(b) for b in rec.output_bytes()]


def fingerprint_digest(fingerprint: str) -> int:
    """64 bits of an output fingerprint (its JSON, as serde writes it on
    the device and on the host alike: SHA-256, byte count, seed)."""
    return digest64(fingerprint)


def fingerprint_label(fingerprint: str) -> str:
    """A fingerprint as people read it: ``sha256 1a2b3c4d5e6f (4096 bytes)``."""
    f = json.loads(fingerprint)
    return f"sha256 {str(f.get('sha256', '?'))[:12]} ({f.get('bytes', '?')} bytes)"
