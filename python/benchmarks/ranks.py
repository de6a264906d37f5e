"""What ranks agreeing costs (issue 57, docs/fleet.md): time and bytes per
rank of ``gemm_audit.distributed.agree`` on CPU ranks over Gloo, at
several world sizes, with the gemm-audit wheel and torch installed::

    python3 python/benchmarks/ranks.py --ranks 2,4,8,16 --gemms 512

For each world size it launches ``torch.distributed.run --standalone
--nproc_per_node N`` of this script. Every rank builds a recording of
GEMMS GEMMs directly (a ``Recording`` whose GEMMs are distinct Linear-like
shapes with a CPU context and output fingerprints; no profiler, so the
number is the agreement's alone), then times, after one warm-up:

- agree: ``agree(rec, same_outputs=True)`` where every rank agrees
  (REPEATS calls; the median; the slowest rank's time);
- odd: the same with rank 1's last GEMM fingerprinted differently: the
  odd rank found, named on every rank, and the traces of rank 1 and two
  majority ranks sent to rank 0, which runs ``compare`` (written to a
  temporary folder).

Bytes: ``bytes_sent`` (what the rank put into collectives and the store),
the largest over the ranks, and the loopback bytes the whole job put on
the wire during the agree calls (``/proc/net/dev``'s ``lo`` transmit
counter, less the same number of empty barriers' worth, divided by the
ranks and calls): all ranks share one host here, so every byte any rank
sends crosses ``lo`` once. Prints one table row per world size.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPEATS = 5


def lo_tx() -> int:
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    return 0


def recording(gemms: int, odd: bool):
    import gemm_audit.torch as gat
    from gemm_audit import _native

    rec = gat.Recording("bench@ranks")
    rec.framework = gat.framework_state(cuda=False, cpu=True)
    rec.device = gat.cpu_identity()
    rec.volatile = {"cpu.model": "bench"}
    fps = []
    for i in range(gemms):
        k, n = 64 + 8 * (i % 32), 64 + 8 * (i // 32)
        rec.gemms.append(
            dict(name=f"aten::addmm#{i}", op_name="aten::addmm", op="nt", dtype="f32", m=8, k=k, n=n,
                 batch=1, lda=k, ldb=k, ldc=n, kernels=[], beside=[], device="cpu")
        )
        out = bytes([i % 251]) * 64 + (b"\x01" if odd and i == gemms - 1 else b"\x00")
        fps.append(_native.fingerprint_bytes(out))
    rec._fingerprints = fps
    return rec


def worker(gemms: int) -> None:
    import torch
    import torch.distributed as dist

    import gemm_audit.distributed as gad

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    same, odd = recording(gemms, False), recording(gemms, rank == 1)
    report = tempfile.mkdtemp(prefix="gemm-audit-bench-")
    gad.agree(same, same_outputs=True, timeout=600)  # warm-up
    rows = {}
    for case, rec in (("agree", same), ("odd", odd)):
        dist.barrier()
        base0 = lo_tx()
        for _ in range(REPEATS):
            dist.barrier()
        dist.barrier()
        base1 = lo_tx()
        times, sent = [], []
        for _ in range(REPEATS):
            dist.barrier()
            t = time.perf_counter()
            v = gad.agree(rec, same_outputs=True, timeout=600, report_dir=report if rank == 0 else None)
            times.append(time.perf_counter() - t)
            sent.append(v.bytes_sent)
            assert v.agree == (case == "agree"), v.describe()
            if case == "odd":
                # Two ranks that differ are a tie: both sides are named.
                assert v.odd_ranks == ([1] if world > 2 else [0, 1]), v.describe()
        dist.barrier()
        wire = (lo_tx() - base1) - (base1 - base0)
        slowest = torch.tensor([statistics.median(times), float(max(sent))], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rows[case] = {
            "seconds": slowest[0].item(),
            "bytes_sent_max": int(slowest[1].item()),
            "bytes_sent_rank0": sent[0],
            "wire_bytes_per_rank": wire / world / REPEATS,
        }
    if rank == 0:
        print("RESULT " + json.dumps({"ranks": world, "gemms": gemms, **rows}), flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # torch 2.11 can abort in teardown after a Gloo group (tests/rank_job.py)


def launch(world: int, gemms: int) -> dict:
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world),
         os.path.abspath(__file__), "--worker", "--gemms", str(gemms)],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[len("RESULT "):])
            out["job_seconds"] = time.perf_counter() - t
            return out
    raise SystemExit(f"{world} ranks: no result (exit {r.returncode})\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", default="2,4,8")
    p.add_argument("--gemms", type=int, default=512)
    p.add_argument("--worker", action="store_true")
    a = p.parse_args()
    if a.worker:
        worker(a.gemms)
        return
    print("| ranks | GEMMs | agree: s (slowest rank) | agree: bytes_sent a rank | agree: wire bytes a rank "
          "| odd rank: s | odd rank: bytes_sent (max rank) | odd rank: wire bytes a rank | job s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for world in [int(w) for w in a.ranks.split(",")]:
        r = launch(world, a.gemms)
        g, o = r["agree"], r["odd"]
        print(
            f"| {world} | {r['gemms']} | {g['seconds']:.4f} | {g['bytes_sent_max']} | {g['wire_bytes_per_rank']:.0f} "
            f"| {o['seconds']:.4f} | {o['bytes_sent_max']} | {o['wire_bytes_per_rank']:.0f} | {r['job_seconds']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
