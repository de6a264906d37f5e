"""Makes the CPU profiles in this folder with real torch (CPU), as a user
takes them: `python3 tests/data/profiles/make_cpu.py` (torch 2.11).

- cpu-block.json.gz: a small transformer block, forward and backward, and
  a few other GEMM-family ops (bmm, baddbmm, addmm with a full C, mv),
  profiled with record_shapes=True.
- cpu-compile.json.gz: the same block under torch.compile (a
  CompiledFunction region).
- cpu-sweep.json.gz: one Linear layer at m = 1, 2, 4, ..., 64 (a census).
- cpu-ranks/rank{0,1}.*.pt.trace.json.gz: two gloo ranks of one job,
  written by tensorboard_trace_handler.
"""

import gzip
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, d=64, h=4, ff=128):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d, bias=False)
        self.up = nn.Linear(d, ff)
        self.down = nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, -1).transpose(1, 2) for z in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)).softmax(-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        return x + self.down(F.gelu(self.up(x)))


def save(prof, name):
    raw = os.path.join(HERE, name + ".tmp.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, open(os.path.join(HERE, name + ".json.gz"), "wb") as out:
        with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as g:
            g.write(f.read())
    os.unlink(raw)


def block():
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(2, 8, 64, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        m(x).pow(2).mean().backward()
        torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 5))
        torch.baddbmm(torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
        torch.addmm(torch.randn(8, 16), torch.randn(8, 32), torch.randn(32, 16))
        torch.mv(torch.randn(16, 32), torch.randn(32))
        torch.mm(torch.randn(32, 8).t(), torch.randn(32, 16))
    save(prof, "cpu-block")


def compiled():
    torch.manual_seed(0)
    m = torch.compile(Block())
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        m(x)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            m(x)
    save(prof, "cpu-compile")


def sweep():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32, bias=False)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for m in (1, 2, 4, 8, 16, 32, 64):
            lin(torch.randn(m, 64))
    save(prof, "cpu-sweep")


def rank(r, world):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29512")
    dist.init_process_group("gloo", rank=r, world_size=world)
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(2, 8, 64)
    out = os.path.join(HERE, "cpu-ranks")
    handler = tensorboard_trace_handler(out, worker_name=f"rank{r}", use_gzip=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, on_trace_ready=handler):
        m(x).pow(2).mean().backward()
        t = torch.ones(4)
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    block()
    compiled()
    sweep()
    mp.spawn(rank, args=(2,), nprocs=2)
    print("torch", torch.__version__, file=sys.stderr)
