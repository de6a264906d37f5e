"""Ranks of one live job agree on their recorded step, through the job's
own ``torch.distributed`` process group::

    import gemm_audit.distributed as gad
    import gemm_audit.torch as gat

    with torch.no_grad(), gat.record("train@step100") as rec:
        model(x)
    verdict = gad.agree(rec, same_outputs=True, report_dir="/shared/gemm-audit")
    assert verdict.agree, verdict.describe()      # every rank gets the same verdict

Every rank of the group calls :func:`agree` with its own
:class:`~gemm_audit.torch.Recording`. They agree entry by entry: entry 0
is the step's context (framework version, libraries, state knobs, device
class, workload), each further entry one GEMM (op, dtype, shape, layout,
leading dimensions, kernels with their grid, block and shared memory,
the kernels beside them). Each entry is hashed to 64 bits on its rank and
only those digests travel: an ``all_reduce`` MAX of ``[h, ~h]`` gives
every rank the largest and (through the complement) the smallest digest of
every entry, and an entry agrees iff they are equal. With
``same_outputs=True`` (data-parallel replicas, meant to compute the same
bits) each GEMM's output fingerprint is agreed the same way.

Only where an entry disagrees is more said: every rank sends one 64-bit
signature of its disagreeing digests (``all_gather``, 8 bytes a rank),
the ranks are grouped by it and the largest group is the majority; one
representative of each group and the odd ranks (up to
:data:`MAX_NAMED_RANKS`) send their identity (rank, host, device UUID or
CPU model from ``rec.volatile``) and the differing entries' fields, so
every rank's verdict names the odd ranks, the GEMMs and the fields that
moved. Rank 0 then receives the full traces of the odd ranks (up to
:data:`MAX_ODD_TRACES`) and of one majority rank more than those, and
runs :func:`gemm_audit.compare` on them: the ``compare`` document the command
line writes, kept in ``report_dir`` when given.

A rank that does not arrive is an error, never a pass: the ranks meet at
a gate in the group's key-value store first (``timeout`` seconds), and a
rank missing there makes every rank that arrived raise
:class:`~gemm_audit.GemmAuditError` naming it. Everything a rank digests
is computed before it arrives, so after the gate only collectives run.
"""

import datetime
import json
import os
import socket
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from . import _native
from . import _rank_digests as rd
from ._native import GemmAuditError

__all__ = ["agree", "Verdict", "MAX_NAMED_RANKS", "MAX_ODD_TRACES", "MAX_DETAILED_GEMMS"]

#: Odd ranks whose identity every verdict carries (the rest by number only).
MAX_NAMED_RANKS = 32
#: Odd ranks whose traces rank 0 gathers for the ``compare`` document
#: (beside one majority rank more than that; on a tie, one rank a side).
MAX_ODD_TRACES = 4
#: Disagreeing entries whose fields every verdict carries (the rest by name).
MAX_DETAILED_GEMMS = 16

_ROUNDS: Dict[str, int] = {}


def _torch_dist():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise GemmAuditError(f"gemm_audit.distributed needs torch with torch.distributed: {e}") from e
    if not dist.is_available():
        raise GemmAuditError("this torch build has no torch.distributed (torch.distributed.is_available() is False)")
    if not dist.is_initialized():
        raise GemmAuditError(
            "no torch.distributed process group is initialized: call torch.distributed.init_process_group() "
            "(e.g. under torchrun) before gemm_audit.distributed.agree()"
        )
    return torch, dist


def _seconds(timeout) -> float:
    s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if not s > 0:
        raise GemmAuditError(f"timeout {timeout!r}: expected a positive number of seconds or a timedelta")
    return s


class _Channel:
    """The group, its store and device, and what this rank sent over them."""

    def __init__(self, torch, dist, group, store, timeout: float):
        self.torch, self.dist = torch, dist
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        if self.rank < 0:
            raise GemmAuditError("this process is not a member of the group it passed to agree()")
        self.world = dist.get_world_size(self.group)
        self.global_ranks = [dist.get_global_rank(self.group, r) for r in range(self.world)]
        backend = str(dist.get_backend(self.group)).lower()
        cuda = "nccl" in backend and "gloo" not in backend
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.store = store if store is not None else _default_store(dist)
        self.timeout = timeout
        self.bytes_sent = 0
        self.collectives = 0
        name = str(getattr(self.group, "group_name", "") or "world")
        self.round = _ROUNDS.get(name, 0)
        _ROUNDS[name] = self.round + 1
        self.prefix = f"gemm_audit/agree/{name}"

    def key(self, what: str, rnd: Optional[int] = None) -> str:
        return f"{self.prefix}/{self.round if rnd is None else rnd}/{what}"

    def who(self, group_rank: int) -> int:
        return self.global_ranks[group_rank]

    def arrive(self) -> None:
        """The gate: every rank of the group within ``timeout``, or every
        rank that came raises naming the ranks that did not."""
        store = self.store
        try:
            self._store_sent(self.key(f"arrived/{self.rank}"), "1")
            store.set(self.key(f"arrived/{self.rank}"), "1")
            self._store_sent(self.key("count"), "1")
            last = store.add(self.key("count"), 1) == self.world
            if last:
                self._store_sent(self.key("done"), "1")
                store.set(self.key("done"), "1")
            self._forget(self.round - 2, last)
            self._store_sent(self.key("done"), "")
            store.wait([self.key("done")], datetime.timedelta(seconds=self.timeout))
        except Exception as e:  # the store's timeout, or the store gone
            missing = self._missing()
            if missing is None:
                raise GemmAuditError(f"rank {self.who(self.rank)}: the job's store failed during agree(): {e}") from e
            raise GemmAuditError(
                f"rank {self.who(self.rank)}: ranks {missing} of {self.world} did not arrive at agree() "
                f"within {self.timeout:g} s (round {self.round}): they failed, hung or run another step; "
                "their agreement is unknown, which is not a pass"
            ) from e

    def _missing(self) -> Optional[List[int]]:
        try:
            return [self.who(r) for r in range(self.world) if not self.store.check([self.key(f"arrived/{r}")])]
        except Exception:
            return None

    def _forget(self, rnd: int, last: bool) -> None:
        """Drops this rank's key of an old round (every rank has left it:
        all arrived at the round after it), and the last arriver its count
        and done keys, so a long job's store does not grow; one or three
        keys a rank, whatever the world size."""
        if rnd < 0:
            return
        for what in [f"arrived/{self.rank}"] + (["count", "done"] if last else []):
            key = self.key(what, rnd)
            self._store_sent(key, "")
            try:
                self.store.delete_key(key)
            except Exception:  # a store without deletion keeps them
                return

    def _store_sent(self, key: str, value: str) -> None:
        self.bytes_sent += len(key) + len(value)

    def _run(self, what: str, fn):
        try:
            return fn()
        except GemmAuditError:
            raise
        except Exception as e:
            raise GemmAuditError(
                f"rank {self.who(self.rank)}: agree()'s {what} failed ({type(e).__name__}: {e}); a rank left or "
                "broke during the agreement: it is not a pass"
            ) from e

    def all_reduce(self, t, op: str, what: str):
        """``t`` reduced in place over the group (``op``: MAX or SUM)."""
        t = t.to(self.device)
        self.bytes_sent += t.numel() * t.element_size()
        self.collectives += 1
        self._run(what, lambda: self.dist.all_reduce(t, op=getattr(self.dist.ReduceOp, op), group=self.group))
        return t.cpu()

    def all_gather_int(self, value: int, what: str) -> List[int]:
        t = self.torch.tensor([value], dtype=self.torch.int64, device=self.device)
        out = [self.torch.zeros_like(t) for _ in range(self.world)]
        self.bytes_sent += 8
        self.collectives += 1
        self._run(what, lambda: self.dist.all_gather(out, t, group=self.group))
        return [int(o.item()) for o in out]

    def send_bytes(self, data: bytes, dst: int) -> None:
        torch = self.torch
        n = torch.tensor([len(data)], dtype=torch.int64, device=self.device)
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        self.bytes_sent += 8 + len(data)
        self._run("send of a trace", lambda: self.dist.send(n, dst=self.who(dst), group=self.group))
        self._run("send of a trace", lambda: self.dist.send(payload, dst=self.who(dst), group=self.group))

    def recv_bytes(self, src: int) -> bytes:
        torch = self.torch
        n = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._run("receive of a trace", lambda: self.dist.recv(n, src=self.who(src), group=self.group))
        payload = torch.zeros(int(n.item()), dtype=torch.uint8, device=self.device)
        self._run("receive of a trace", lambda: self.dist.recv(payload, src=self.who(src), group=self.group))
        return _tensor_bytes(payload.cpu())


def _tensor_bytes(t) -> bytes:
    import ctypes

    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel())


def _default_store(dist):
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception as e:
        raise GemmAuditError(
            f"agree() needs the job's key-value store (torch.distributed's default store: {e}); pass store="
        ) from e


class _Local:
    """This rank's side, computed before it arrives: entries, digests,
    identity. The flat field maps that name what differs are built only
    for the entries a disagreement asks about (:meth:`fields`)."""

    def __init__(self, rec, same_outputs: bool, rank: int, world: int):
        self.rec = rec
        self.context = rd.context_fields(rec.framework, rec.device)
        self.context["workload"] = rd._value(rec.workload)
        self.names = rd.entry_names(rec)
        self.routes = [rd.fields_digest(self.context)] + [rd.gemm_digest(g) for g in rec.gemms]
        self.outputs: List[int] = [0] * len(self.routes)
        self.output_labels: List[Optional[str]] = [None] * len(self.routes)
        if same_outputs:
            for i, fp in enumerate(rd.output_fingerprints(rec)):
                self.outputs[i + 1] = rd.fingerprint_digest(fp)
                self.output_labels[i + 1] = rd.fingerprint_label(fp)
        vol = rec.volatile or {}
        self.identity = {
            "rank": rank,
            "host": socket.gethostname(),
            "device_uuid": vol.get("cuda.device.uuid"),
            "cpu_model": vol.get("cpu.model"),
        }
        self.extra_volatile = {"profile.rank": str(rank), "profile.world_size": str(world), "host": self.identity["host"]}

    def fields(self, entry: int) -> Dict[str, str]:
        """Entry ``entry``'s route fields, flat."""
        return self.context if entry == 0 else rd.gemm_fields(self.rec.gemms[entry - 1])


class Verdict:
    """What the ranks agreed on, the same on every rank.

    ``agree`` is the verdict. ``ranks`` is the group's size, ``gemms`` this
    rank's GEMM count, ``same_outputs`` whether outputs were compared.
    Where they disagree: ``sides`` (``[{"ranks", "gemms"}]``, the largest
    first), ``majority`` (the ranks of the largest side, ``None`` on a
    tie), ``odd_ranks`` (every rank outside the majority; on a tie every
    rank), ``named`` (``{rank: {"rank", "host", "device_uuid",
    "cpu_model"}}`` for the majority's representative and up to
    :data:`MAX_NAMED_RANKS` odd ranks) and ``disagreements`` (per
    disagreeing entry: ``{"gemm", "entry", "what", "sides", "fields"}``;
    ``fields`` lists ``{"field", "values": [value per side]}``). On rank 0,
    ``compare`` is the ``compare`` document of the gathered traces and
    ``report`` its file (under ``report_dir``). ``bytes_sent`` counts
    what this rank put into collectives and the store (tensor payloads,
    store keys and values), ``collectives`` how many it ran and
    ``seconds`` the wall time of the agreement on this rank."""

    def __init__(self, rank: int, ranks: int, gemms: int, same_outputs: bool):
        self.rank, self.ranks, self.gemms, self.same_outputs = rank, ranks, gemms, same_outputs
        self.agree = True
        self.sides: List[dict] = []
        self.majority: Optional[List[int]] = None
        self.odd_ranks: List[int] = []
        self.named: Dict[int, dict] = {}
        self.disagreements: List[dict] = []
        self.count_differs = False
        self.compare: Optional[dict] = None
        self.compare_error: Optional[str] = None
        self.report: Optional[str] = None
        self.bytes_sent = 0
        self.collectives = 0
        self.seconds = 0.0

    def __bool__(self) -> bool:
        return self.agree

    def to_dict(self) -> dict:
        """The verdict as JSON-ready data (``describe`` included)."""
        return {
            "agree": self.agree,
            "rank": self.rank,
            "ranks": self.ranks,
            "gemms": self.gemms,
            "same_outputs": self.same_outputs,
            "sides": self.sides,
            "majority": self.majority,
            "odd_ranks": self.odd_ranks,
            "named": {str(r): v for r, v in self.named.items()},
            "count_differs": self.count_differs,
            "disagreements": self.disagreements,
            "report": self.report,
            "compare_verdict": None if self.compare is None else self.compare.get("verdict"),
            "compare_error": self.compare_error,
            "bytes_sent": self.bytes_sent,
            "collectives": self.collectives,
            "seconds": self.seconds,
            "describe": self.describe(),
        }

    def _who(self, r: int) -> str:
        n = self.named.get(r)
        if n is None:
            return f"rank {r}"
        device = n.get("device_uuid") or (f"cpu {n['cpu_model']}" if n.get("cpu_model") else "device unknown")
        return f"rank {r} (host {n['host']}, {device})"

    def describe(self) -> str:
        """The verdict as text: one headline, then per odd side its ranks
        and per disagreeing GEMM the fields that differ."""
        what = "routes and outputs" if self.same_outputs else "routes"
        if self.agree:
            return (
                f"gemm-audit agree: PASS: {self.ranks} ranks agree on the {what} of {self.gemms} GEMMs "
                f"(this rank sent {self.bytes_sent} bytes in {self.collectives} collectives)"
            )
        lines = [f"gemm-audit agree: FAIL: {self.ranks} ranks, {what} compared"]
        if self.majority is None:
            sides = "; ".join(f"ranks {s['ranks']} ({self._who(s['ranks'][0])}, ...)" for s in self.sides)
            lines.append(f"  no majority (a tie): {sides}")
        else:
            odd = ", ".join(self._who(r) for r in self.odd_ranks[:MAX_NAMED_RANKS])
            if len(self.odd_ranks) > MAX_NAMED_RANKS:
                odd += f" and {len(self.odd_ranks) - MAX_NAMED_RANKS} more"
            verb = "differs" if len(self.odd_ranks) == 1 else "differ"
            lines.append(
                f"  {odd} {verb} from the majority ({len(self.majority)} of {self.ranks} ranks, "
                f"e.g. {self._who(self.majority[0])})"
            )
        if self.count_differs:
            lines.append("  GEMM counts differ: " + "; ".join(f"ranks {s['ranks']}: {s['gemms']} GEMMs" for s in self.sides))
        for d in self.disagreements:
            if d["entry"] == 0:
                lines.append("  context (framework, libraries, knobs, device class, workload) differs")
            else:
                lines.append(f"  {d['gemm']}: {d['what']} differs")
            for f in d["fields"]:
                vals = "; ".join(f"ranks {s['ranks']}: {v}" for s, v in zip(self.sides, f["values"]))
                lines.append(f"    {f['field']}: {vals}")
        if self.report:
            lines.append(f"  compare document (rank 0): {self.report}")
        elif self.compare_error:
            lines.append(f"  compare document (rank 0) not made: {self.compare_error}")
        return "\n".join(lines)


def agree(
    rec,
    group=None,
    same_outputs: bool = False,
    timeout: float = 300.0,
    report_dir=None,
    store=None,
) -> Verdict:
    """Every rank of ``group`` (default: the whole job) calls this with its
    recording of the same step; every rank returns the same
    :class:`Verdict`. Routes (kernels, geometry, libraries, knobs,
    framework version, device class) are agreed GEMM by GEMM; with
    ``same_outputs=True`` the output fingerprints too. ``timeout`` (seconds
    or a ``timedelta``) bounds the wait for the other ranks: a rank missing
    then makes every rank raise :class:`~gemm_audit.GemmAuditError` naming
    it. On a disagreement rank 0 gathers the odd ranks' traces and those
    of as many majority ranks plus one, runs ``compare`` and, with
    ``report_dir``, writes the traces (``rank<N>.gat``) and the document
    (``compare.json``) there.
    ``store`` is the key-value store of the gate (default: the one
    ``init_process_group`` made). Raises :class:`~gemm_audit.GemmAuditError`
    where no process group is initialized, for a recording with no GEMMs,
    and where a rank fails or times out."""
    from .torch import Recording

    if not isinstance(rec, Recording):
        raise GemmAuditError(f"agree() takes a gemm_audit.torch.Recording, not {type(rec).__name__}")
    if not rec.gemms:
        raise GemmAuditError(
            f"recording {rec.workload!r} holds no GEMM: there is nothing for the ranks to agree on "
            "(record the step inside gemm_audit.torch.record())"
        )
    torch, dist = _torch_dist()
    start = time.perf_counter()
    ch = _Channel(torch, dist, group, store, _seconds(timeout))
    local = _Local(rec, bool(same_outputs), ch.who(ch.rank), ch.world)
    ch.arrive()
    v = Verdict(ch.who(ch.rank), ch.world, len(rec.gemms), bool(same_outputs))
    entries = len(local.routes)
    shape = ch.all_reduce(
        torch.tensor([entries, -entries, int(v.same_outputs), -int(v.same_outputs)], dtype=torch.int64),
        "MAX",
        "count check",
    ).tolist()
    if shape[2] != -shape[3]:
        raise GemmAuditError(
            f"rank {v.rank}: the ranks called agree() with different same_outputs (this rank: {v.same_outputs})"
        )
    if shape[0] != -shape[1]:
        signature = rd.digest64(json.dumps([entries, local.routes, local.outputs]))
        _find_odd(ch, local, v, signature, list(range(entries)), counts_differ=True)
    else:
        differing = _differing_entries(ch, local, v.same_outputs)
        if differing:
            signature = rd.digest64(json.dumps([[local.routes[j], local.outputs[j]] for j in differing]))
            _find_odd(ch, local, v, signature, differing, counts_differ=False)
    if not v.agree:
        _gather_traces(ch, rec, local, v, report_dir)
    v.bytes_sent, v.collectives = ch.bytes_sent, ch.collectives
    v.seconds = time.perf_counter() - start
    return v


def _differing_entries(ch, local: _Local, same_outputs: bool) -> List[int]:
    """The entries whose digests are not the same on every rank: one
    ``all_reduce`` MAX of ``[h, ~h]`` per digest row (``~`` reverses
    order, so its maximum is the complement of the minimum)."""
    torch = ch.torch
    rows = [local.routes] + ([local.outputs] if same_outputs else [])
    t = torch.tensor(rows, dtype=torch.int64)
    both = ch.all_reduce(torch.cat([t, ~t]), "MAX", "digest check")
    hi, lo = both[: len(rows)], ~both[len(rows) :]
    return [int(j) for j in (hi != lo).any(dim=0).nonzero().flatten().tolist()]


def _find_odd(ch, local: _Local, v: Verdict, signature: int, differing: List[int], counts_differ: bool) -> None:
    """Groups the ranks by their signature over the differing entries
    (8 bytes a rank), then the sides' representatives and the odd ranks
    send what names them and the differing fields."""
    v.agree, v.count_differs = False, counts_differ
    signatures = ch.all_gather_int(signature, "signature gather")
    by_sig: Dict[int, List[int]] = {}
    for r, s in enumerate(signatures):
        by_sig.setdefault(s, []).append(r)
    sides = sorted(by_sig.values(), key=lambda rs: (-len(rs), rs[0]))
    tie = len(sides) > 1 and len(sides[0]) == len(sides[1])
    majority = None if tie else sides[0]
    odd = sorted(r for s in sides for r in s if majority is None or r not in majority)
    representatives = [s[0] for s in sides]
    named = sorted(set(representatives) | set(odd[:MAX_NAMED_RANKS]))
    detailed = differing[:MAX_DETAILED_GEMMS] if not counts_differ else [0]
    mine = {"identity": local.identity, "gemms": len(local.routes) - 1}
    if ch.rank in representatives:
        mine["entries"] = {
            str(j): {
                "name": local.names[j],
                "route": local.routes[j],
                "output": local.outputs[j],
                "output_label": local.output_labels[j],
                "fields": local.fields(j) if j in detailed else None,
            }
            for j in (differing if not counts_differ else [0])
        }
    payloads = _exchange(ch, named, mine if ch.rank in named else None)
    v.majority = None if majority is None else [ch.who(r) for r in majority]
    v.odd_ranks = [ch.who(r) for r in odd]
    v.named = {ch.who(r): payloads[r]["identity"] for r in named}
    v.sides = [{"ranks": [ch.who(r) for r in s], "gemms": payloads[s[0]]["gemms"]} for s in sides]
    reps = [payloads[s[0]] for s in sides]
    v.disagreements = _disagreements(reps, differing if not counts_differ else [0])


def _exchange(ch, named: List[int], mine: Optional[dict]) -> Dict[int, dict]:
    """Each named rank's JSON to every rank: an ``all_reduce`` SUM of
    their lengths, then of the bytes, each rank filling its own slot
    (only the named ranks' data travels; the rest send zeros)."""
    torch = ch.torch
    data = json.dumps(mine, separators=(",", ":")).encode() if mine is not None else b""
    lengths = torch.zeros(len(named), dtype=torch.int64)
    if mine is not None:
        lengths[named.index(ch.rank)] = len(data)
    lengths = ch.all_reduce(lengths, "SUM", "exchange of the odd ranks' lengths").tolist()
    offsets = [sum(lengths[:i]) for i in range(len(named))]
    buf = torch.zeros(sum(lengths), dtype=torch.uint8)
    if mine is not None:
        i = named.index(ch.rank)
        buf[offsets[i] : offsets[i] + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    raw = _tensor_bytes(ch.all_reduce(buf, "SUM", "exchange of the odd ranks' details"))
    return {r: json.loads(raw[offsets[i] : offsets[i] + lengths[i]]) for i, r in enumerate(named)}


def _disagreements(reps: List[dict], differing: Sequence[int]) -> List[dict]:
    """Per differing entry, what each side (its representative) holds and
    the fields whose values are not the same on every side."""
    out = []
    for j in differing:
        per = [rep.get("entries", {}).get(str(j), {}) for rep in reps]
        route = len({p.get("route") for p in per}) > 1
        output = len({p.get("output") for p in per}) > 1
        if not (route or output):
            continue
        fields = []
        maps = [p.get("fields") for p in per]
        if route and all(m is not None for m in maps):
            for f in sorted(set().union(*maps)):
                values = [m.get(f, "(absent)") for m in maps]
                if len(set(values)) > 1:
                    fields.append({"field": f, "values": values})
        if output:
            fields.append({"field": "output", "values": [p.get("output_label") for p in per]})
        out.append(
            {
                "entry": j,
                "gemm": per[0].get("name", f"entry {j}"),
                "what": " and ".join(w for w, on in (("route", route), ("output", output)) if on),
                "fields": fields,
            }
        )
    return out


def _senders(ch, v: Verdict) -> List[int]:
    """The group ranks whose traces rank 0 compares: up to
    :data:`MAX_ODD_TRACES` odd ranks and one majority rank more than
    them (so ``compare``'s own vote, which sees only these traces, has the
    job's majority: one majority trace against one odd trace would be a
    tie), or one rank of every side on a tie."""
    by_global = {g: r for r, g in enumerate(ch.global_ranks)}
    if v.majority is None:
        picked = [s["ranks"][0] for s in v.sides]
    else:
        odd = v.odd_ranks[:MAX_ODD_TRACES]
        picked = v.majority[: len(odd) + 1] + odd
    return sorted(by_global[g] for g in picked)


def _gather_traces(ch, rec, local: _Local, v: Verdict, report_dir) -> None:
    """The senders write their traces and send the bytes to rank 0, which
    runs ``compare`` on them (and keeps them in ``report_dir``)."""
    senders = _senders(ch, v)
    if ch.rank in senders:
        try:
            data = _trace_bytes(rec, local)
        except (GemmAuditError, OSError) as e:  # rank 0 still gets a message: no hang
            data, v.compare_error = b"", f"this rank's trace could not be written: {e}"
        if ch.rank != 0:
            ch.send_bytes(data, 0)
    if ch.rank != 0:
        return
    keep = report_dir is not None
    folder = os.fspath(report_dir) if keep else tempfile.mkdtemp(prefix="gemm-audit-agree-")
    os.makedirs(folder, exist_ok=True)
    paths, missing = [], []
    for r in senders:
        blob = data if r == 0 else ch.recv_bytes(r)
        if not blob:
            missing.append(ch.who(r))
            continue
        path = os.path.join(folder, f"rank{ch.who(r)}.gat")
        with open(path, "wb") as f:
            f.write(blob)
        paths.append(path)
    try:
        if missing:
            raise GemmAuditError(f"ranks {missing} could not write their traces (their verdicts say why)")
        text = _native.compare(paths, False)
        v.compare = json.loads(text)
        if keep:
            v.report = os.path.join(folder, "compare.json")
            with open(v.report, "w") as f:
                f.write(text)
    except GemmAuditError as e:
        v.compare_error = str(e)
    finally:
        if not keep:
            for p in paths:
                os.unlink(p)
            os.rmdir(folder)


def _trace_bytes(rec, local: _Local) -> bytes:
    """This rank's trace, its rank, world size and host among its
    per-machine facts (so ``compare`` names it), as file bytes."""
    saved = rec.volatile
    rec.volatile = dict(saved or {}, **local.extra_volatile)
    folder = tempfile.mkdtemp(prefix="gemm-audit-rank-")
    path = os.path.join(folder, "trace.gat")
    try:
        rec.write(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        rec.volatile = saved
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(folder)
