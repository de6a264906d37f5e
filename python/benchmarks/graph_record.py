"""What recording a CUDA-graph replay costs (issue 56, docs/performance.md):
`python3 python/benchmarks/graph_record.py` on a GPU host with torch and
the gemm-audit wheel installed.

For a stack of L bf16 Linear layers (4096 x 4096, batch 16; L GEMMs),
captured once under `gemm_audit.torch.capture`, it times in one
interleaved loop (median of REPEATS rounds, each round in random order):

- replay: `g.replay()` and a synchronize (the strongest baseline: what a
  serving engine runs);
- replay+copies+fingerprints: the same replay, then the copy of every
  captured output and gemm-audit's device fingerprints of them, all in
  one launch (the GPU work a recording adds), and the same with one
  launch per output (what the recorder did before fingerprint_many);
- record: `with gat.record(..., graphs=cap): g.replay()`, trace built
  (profiler start and stop, export, binding, copies, fingerprints);
- record, bound: the same with `profile=False` once the graph has been
  bound by a profiled recording (no profiler: the binding is reused;
  copies, fingerprints and the trace's GEMMs as before).

It also times the capture with and without `gat.capture`. Prints one
table row per L, with the bound recording against issue 56's budget: one
replay plus replay+copies+fingerprints (twice one replay plus the
fingerprints).
"""

import random
import statistics
import sys
import time

import torch

import gemm_audit.torch as gat
from gemm_audit import _native

REPEATS = 7


def stack(layers):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(layers)]).cuda().to(
        torch.bfloat16
    )


def warm(m, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


def timed(f):
    torch.cuda.synchronize()
    t = time.perf_counter()
    f()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def row(layers):
    m, x = stack(layers), torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    warm(m, x)
    plain = torch.cuda.CUDAGraph()

    def capture_plain():
        with torch.cuda.graph(plain), torch.no_grad():
            m(x)

    t_capture_plain = timed(capture_plain)
    g = torch.cuda.CUDAGraph()
    holder = {}

    def capture_recorded():
        with gat.capture("stack") as cap:
            with torch.cuda.graph(g), torch.no_grad():
                m(x)
        holder["cap"] = cap

    t_capture_rec = timed(capture_recorded)
    cap = holder["cap"]
    fp = _native.DeviceFingerprints(torch.cuda.current_device())
    outputs = cap.graphs[0]._outputs

    def replay():
        g.replay()

    def replay_fp():
        g.replay()
        copies = [t.detach().clone() for t in outputs]
        torch.cuda.synchronize()
        fp.fingerprint_many([(c.data_ptr(), c.numel() * c.element_size()) for c in copies])

    def replay_fp_each():
        g.replay()
        copies = [t.detach().clone() for t in outputs]
        torch.cuda.synchronize()
        for c in copies:
            fp.fingerprint(c.data_ptr(), c.numel() * c.element_size())

    def record():
        with gat.record("stack", device="cuda", graphs=cap) as rec:
            g.replay()
        assert len(rec.gemms) == layers and rec.fingerprinted_on == "device"

    def record_bound():
        with gat.record("stack", device="cuda", graphs=cap, profile=False) as rec:
            g.replay()
        assert len(rec.gemms) == layers and rec.fingerprinted_on == "device"

    # "record" runs first in the warm-up below, so the graph is bound
    # before "record, bound" runs.
    cases = {
        "replay": replay,
        "replay+fp": replay_fp,
        "replay+fp each": replay_fp_each,
        "record": record,
        "bound": record_bound,
    }
    for f in cases.values():
        timed(f)
    times = {k: [] for k in cases}
    for _ in range(REPEATS):
        order = list(cases)
        random.shuffle(order)
        for k in order:
            times[k].append(timed(cases[k]))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    # Issue 56's bound: twice one replay plus the copies and fingerprints.
    bound = med["replay"] + med["replay+fp"]
    print(
        f"| {layers} | {med['replay']:.3f} | {med['replay+fp']:.3f} ({med['replay+fp'] / med['replay']:.2f}x) "
        f"| {med['replay+fp each']:.3f} "
        f"| {med['record']:.1f} ({med['record'] / med['replay']:.0f}x) "
        f"| {med['bound']:.3f} ({med['bound'] / med['replay']:.2f}x) | {med['bound'] / bound:.2f} "
        f"| {t_capture_plain * 1e3:.1f} | {t_capture_rec * 1e3:.1f} |",
        flush=True,
    )


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, file=sys.stderr)
    print(
        "| GEMMs | replay ms | replay + copies + fingerprints ms | the same, one launch per output ms | record ms "
        "| record, bound (profile=False) ms | bound / (2 replays + copies + fingerprints) "
        "| capture ms | capture under gat.capture ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for layers in (8, 32, 128):
        row(layers)
