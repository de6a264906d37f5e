"""Makes the GPU profiles in this folder with real torch on a CUDA device,
as a user takes them: `python3 tests/data/profiles/make_gpu.py OUTDIR`
(torch 2.11; an H100 or H200). The committed ones were taken on an H100
80GB HBM3 (driver 580.159.04, torch 2.11.0+cu130) on 2026-12-06. Each profile is of one small step: a bf16
MLP (256 -> 512 -> 256) and an f32 head (256 -> 128), at batch 8 unless
named.

- gpu-eager: the step run eagerly (record_shapes=True).
- gpu-replay: the step captured in a CUDA graph before profiling; three
  replays profiled (no capture in the profile: no shapes).
- gpu-capture-replay: the capture and three replays in one profile.
- gpu-batches: graphs captured at batch 1, 8 and 64, each replayed once
  under record_function("batch=<m>") (the capture in the profile).
- gpu-tf32-replay: the graph captured with TF32 on and replayed with it
  off (eager runs with TF32 off: the f32 head runs another kernel).
- gpu-reduce-overhead: torch.compile(mode="reduce-overhead"), warmed up,
  then two calls profiled.
- gpu-max-autotune: torch.compile(mode="max-autotune-no-cudagraphs"),
  warmed up, then one call profiled (Triton template GEMMs).
"""

import gzip
import json
import os
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
ACT = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


class Step(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(256, 512).to(torch.bfloat16)
        self.down = nn.Linear(512, 256).to(torch.bfloat16)
        self.head = nn.Linear(256, 128)

    def forward(self, x):
        h = self.down(torch.relu(self.up(x)))
        return self.head(h.float())


def save(prof, name):
    raw = os.path.join(OUT, name + ".tmp.json")
    prof.export_chrome_trace(raw)
    with open(raw) as f:
        doc = json.load(f)
    for key in ("deviceProperties", "distributedInfo"):
        doc.pop(key, None)
    doc.pop("traceName", None)
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            ev.get("args", {}).pop("labels", None)
    with open(os.path.join(OUT, name + ".json.gz"), "wb") as out:
        with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as g:
            g.write(json.dumps(doc).encode())
    os.unlink(raw)
    print("wrote", name, flush=True)


def model():
    torch.manual_seed(0)
    return Step().cuda()


def inputs(b):
    g = torch.Generator(device="cuda").manual_seed(1)
    return torch.randn(b, 256, device="cuda", generator=g).to(torch.bfloat16)


def capture(m, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(2):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        y = m(x)
    return g, y


def eager():
    m, x = model(), inputs(8)
    with torch.no_grad():
        m(x)
        torch.cuda.synchronize()
        with profile(activities=ACT, record_shapes=True) as prof:
            m(x)
            torch.cuda.synchronize()
    save(prof, "gpu-eager")


def replay():
    m, x = model(), inputs(8)
    g, _ = capture(m, x)
    torch.cuda.synchronize()
    with profile(activities=ACT, record_shapes=True) as prof:
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    save(prof, "gpu-replay")


def capture_replay():
    m, x = model(), inputs(8)
    with torch.no_grad():
        m(x)
    torch.cuda.synchronize()
    with profile(activities=ACT, record_shapes=True) as prof:
        g, _ = capture(m, x)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    save(prof, "gpu-capture-replay")


def batches():
    m = model()
    with profile(activities=ACT, record_shapes=True) as prof:
        graphs = {b: capture(m, inputs(b))[0] for b in (1, 8, 64)}
        for b, g in graphs.items():
            with record_function(f"batch={b}"):
                g.replay()
        torch.cuda.synchronize()
    save(prof, "gpu-batches")


def tf32_replay():
    m, x = model(), inputs(8)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        g, _ = capture(m, x)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    torch.cuda.synchronize()
    with profile(activities=ACT, record_shapes=True) as prof:
        g.replay()
        torch.cuda.synchronize()
    save(prof, "gpu-tf32-replay")


def compiled(mode, name):
    m, x = model(), inputs(8)
    c = torch.compile(m, mode=mode)
    with torch.no_grad():
        for _ in range(3):
            c(x)
        torch.cuda.synchronize()
        with profile(activities=ACT, record_shapes=True) as prof:
            for _ in range(2):
                c(x)
            torch.cuda.synchronize()
    save(prof, name)


if __name__ == "__main__":
    eager()
    replay()
    capture_replay()
    batches()
    tf32_replay()
    compiled("reduce-overhead", "gpu-reduce-overhead")
    compiled("max-autotune-no-cudagraphs", "gpu-max-autotune")
