#!/usr/bin/env python3
"""Why the GPU bench and the Python probes disagree at large m: cuBLAS and
the 128x256 wgmma kernel timed under each of the harnesses' conditions, with
the SM clock and power read beside them (device only; nothing here is used
by the crate; docs/benchmarks.md, section 4q).

The bench (`bench decode-by-m`) times seeded operands, uniform in [-1, 1),
in 10 ms samples interleaved with about 900 routes, most of them short
decode kernels, and takes the median; the probes time torch.randn operands
in back-to-back graphs of about 8 ms and take the best. Each factor is
varied here on its own, for every kernel of one problem interleaved:

- operands: randn or uniform in [-1, 1) (the bench's distribution);
- duty: `cool` (a 150 ms pause before every 10 ms sample, as when short
  kernels run between) or `hot` (two seconds of back-to-back launches
  first, then samples back to back);
- statistic: the median and the best of the samples.

Kernels: cuBLAS (torch.matmul), the one-CTA 128x256 kernel (`one`, shipped
until 4q), the working tree's (`shipped`) and the variants REGIME_BUILDS
names (see `builds`; every kernel's bits are checked equal to the one-CTA
kernel's: a tile's k order is its own).
REGIME_OPERANDS picks the operands (default both), REGIME_PROBLEMS the
problems (m,k,n;...), REGIME_ROUNDS the samples a block takes of each
kernel (cool,hot; default 5,7). Every persistent build is also run with each
choice of the clock-split build forced (a no-op for builds that do not
choose): its bits checked, its flags back at 0 after every launch. The SM
clock and board
power come from `nvidia-smi -lms 20` running beside the probe, averaged
over each block's samples.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/regime_probe.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402
import wgmma_variants as wv  # noqa: E402
from ladder_tune import graph_time as graph  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu")
# REGIME_PROBLEMS=m,k,n;... replaces them.
PROBLEMS = [tuple(int(v) for v in p.split(",")) for p in os.environ.get(
    "REGIME_PROBLEMS", "8192,4096,4096;4096,4096,14336;8192,4096,6144;8192,8192,8192").split(";")]
# REGIME_ROUNDS=cool,hot: samples of each kernel in the cool and hot blocks.
ROUNDS = [int(v) for v in os.environ.get("REGIME_ROUNDS", "5,7").split(",")]
KEEP = []


def builds(tmp):
    """name -> launch maker `(a, b, m, k, n, c) -> Launch` (bf16 NN, 128x256
    tiles): `one`, the one-CTA kernel (wgmma_probe.one_cta_source), and
    `shipped`, the working tree's (persistent, the split tail under its
    rule since 4q); then the variants of the one-CTA kernel REGIME_BUILDS
    names (comma separated; default tail,store,pair): groups (GROUP_M 8
    and 32 instead of 16), tail (persistent without (p) and with (t) the
    split, always cut, wgmma_tail.patch), store (persistent with the store
    overlapped, wgmma_persist_store.patch), pair (clusters of two sharing
    B' by multicast, wgmma_pair.patch), clock (the shipped kernel told to
    split where it chooses by the clock, `csplit`, or not, `cwhole`);
    and REGIME_EXTRA's builds (name=path.cu, comma separated)."""
    base = wp.one_cta_source(tmp)
    src = open(base).read()
    wanted = os.environ.get("REGIME_BUILDS", "tail,store,pair").split(",")
    wv.SMS = torch.cuda.get_device_properties(0).multi_processor_count

    def plain(path, defines=()):
        mod = wp.Module(wp.compile_cubin(path, "sm_90a", list(defines)))
        return lambda a, b, m, k, n, c: wp.kernel_launch(mod, (128, 256), "wgmma", "nn", torch.bfloat16,
                                                          a, b, m, k, n, c)

    def variant(name):
        """wgmma_variants' launch of its variant `name` from a module built
        with its patch and define."""
        patch, define, _ = wv.VARIANTS[name]
        path = os.path.join(tmp, f"wgmma_{name}.cu")
        subprocess.run(["patch", "-s", "-o", path, base, os.path.join(HERE, patch)], check=True)
        return wp.Module(wp.compile_cubin(path, "sm_90a", [define]))

    def as_variant(mod, name):
        def make(a, b, m, k, n, c):
            wv.VARIANT = name
            return wv.wgmma(mod, 256, True, "nn", torch.bfloat16, a, b, m, k, n, c)
        return make

    makers = {"one": plain(base), "shipped": plain(SHIPPED)}
    if "groups" in wanted:
        assert "#define GROUP_M 16\n" in src, "wgmma.cu's tile order moved: update this probe"
        for g in (8, 32):
            path = os.path.join(tmp, f"wgmma_g{g}.cu")
            with open(path, "w") as f:
                f.write(src.replace("#define GROUP_M 16\n", f"#define GROUP_M {g}\n"))
            makers[f"g{g}"] = plain(path)
    if "tail" in wanted:
        mod = variant("tail")
        for split, name in ((0, "p"), (1, "t")):
            makers[name] = (lambda mod, split: lambda a, b, m, k, n, c: wv.tail_launch(
                mod, 256, split, "nn", torch.bfloat16, a, b, m, k, n, c))(mod, split)
    if "store" in wanted:
        makers["q"] = as_variant(variant("persist-store"), "persist-store")
    if "pair" in wanted:
        makers["x2"] = as_variant(variant("pair"), "pair")
    if "clock" in wanted:
        # The shipped kernel chooses by its measured SM clock whether a
        # launch splits a last wave of segments over 3/5 of a tile (4s,
        # 4t): `csplit` is that build told to split at any clock and
        # however long the segments, `cwhole` never to split there.
        makers["csplit"] = plain(SHIPPED, ["TAIL_SPLIT_BELOW_MHZ=100000", "TAIL_DRIFT_MAX_KBLOCKS=100000"])
        makers["cwhole"] = plain(SHIPPED, ["TAIL_SPLIT_BELOW_MHZ=0"])
    # Other builds of wgmma.cu to time beside them: REGIME_EXTRA=name=path,...
    for item in filter(None, os.environ.get("REGIME_EXTRA", "").split(",")):
        name, path = item.split("=", 1)
        makers[name] = plain(path)
    return makers


def operands(kind, m, k, n, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "randn":
        a = torch.randn(m, k, device="cuda", generator=g)
        b = torch.randn(k, n, device="cuda", generator=g)
    else:
        a = torch.rand(m, k, device="cuda", generator=g) * 2 - 1
        b = torch.rand(k, n, device="cuda", generator=g) * 2 - 1
    return a.to(torch.bfloat16), b.to(torch.bfloat16)


class Clock:
    """nvidia-smi's SM clock (MHz) and power (W) every 20 ms, in the
    background; `mean(t0, t1)` averages the readings between two times."""

    def __init__(self, path):
        self.path, self.read, self.rows = path, 0, []
        self.out = open(path, "w")
        fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap"
        if subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv"],
                          capture_output=True).returncode != 0:
            fields = "timestamp,clocks.sm,power.draw,temperature.gpu"  # a driver without event reasons
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "20"],
            stdout=self.out, stderr=subprocess.DEVNULL)

    def mean(self, t0, t1):
        self.out.flush()
        # Only the lines written since the last call (a partly written last
        # line fails to parse and is read again next time).
        with open(self.path) as f:
            f.seek(self.read)
            for line in f:
                if not line.endswith("\n"):
                    break
                self.read += len(line.encode())
                x = [v.strip() for v in line.split(",")]
                try:
                    t = datetime.strptime(x[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                    self.rows.append((t, float(x[1]), float(x[2]), x[4] if len(x) > 4 else "?"))
                except (ValueError, IndexError):
                    continue
        inside = [r for r in self.rows if t0 <= r[0] <= t1]
        if not inside:
            return "no clock readings"
        capped = sum(r[3] == "Active" for r in inside)
        return (f"{statistics.mean(r[1] for r in inside):5.0f} MHz {statistics.mean(r[2] for r in inside):4.0f} W "
                f"power-capped {capped}/{len(inside)}")

    def stop(self):
        self.proc.terminate()
        self.out.close()


def forced(launches, outs, what):
    """Builds since 4s choose by the SM clock whether a launch splits its
    last wave, in words after the tail flags, the last of them a forced
    choice (1 split, 2 whole): each forced once, the bits checked against
    the one-CTA kernel's, and every flag and word back at 0 after each
    launch (a launch must leave them as it found them)."""
    ok = True
    for name, launch in launches.items():
        flags = launch.counters
        if name == "one" or flags is None:
            continue
        for choice in (1, 2, 0):
            flags[-1] = choice
            out = launch.keep[2]
            out.fill_(float("nan"))
            torch.cuda.synchronize()
            launch()
            torch.cuda.synchronize()
            diff = wp.differing(out, outs["one"])
            left = flags[:-1].abs().sum().item()
            if diff or left:
                ok = False
                print(f"BAD {name} {what} forced {choice}: {diff} elements differ from the one-CTA kernel's, "
                      f"flags not back at 0: {left}", flush=True)
    return ok


def block(samplers, duty, rounds):
    """Samples of every sampler, interleaved, under `duty`: name -> list (us)."""
    got = {k: [] for k in samplers}
    if duty == "hot":
        end = time.time() + 2.0
        while time.time() < end:
            for s in samplers.values():
                s()
    for _ in range(rounds):
        for key, s in samplers.items():
            if duty == "cool":
                time.sleep(0.15)
            got[key].append(s())
    return got


def main():
    torch.zeros(1, device="cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        return probe(builds(tmp), Clock(os.path.join(os.environ.get("OUT", tmp), "clock.csv")))


def probe(mods, clock):
    print("builds:", ", ".join(mods), flush=True)
    ok = True
    print("problem operands duty: cuBLAS us median/best, then each kernel's cuBLAS time / its time "
          "(median, best); the clock over the block", flush=True)
    for (m, k, n) in PROBLEMS:
        flop = 2.0 * m * k * n
        reps = max(3, int(round(10e-3 * 7.5e14 / flop)))
        for kind in os.environ.get("REGIME_OPERANDS", "randn,uniform").split(","):
            a, b = operands(kind, m, k, n, 3)
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            samplers = {"cublas": graph(lambda: torch.matmul(a, b, out=c), reps)}
            outs = {}
            launches = {}
            for name, make in mods.items():
                mine = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                launch = make(a, b, m, k, n, mine)
                launch()
                torch.cuda.synchronize()
                outs[name] = mine
                launches[name] = launch
                samplers[name] = graph(launch, reps)
            for name in list(mods)[1:]:
                diff = wp.differing(outs[name], outs["one"])
                ok &= diff == 0
                if diff:
                    print(f"BAD {name} {m}x{k}x{n} {kind}: {diff} elements differ from the one-CTA kernel's", flush=True)
            ok &= forced(launches, outs, f"{m}x{k}x{n} {kind}")
            KEEP.append((samplers, outs, a, b, c))  # the graphs' buffers outlive them
            for duty, rounds in zip(("cool", "hot"), ROUNDS):
                t0 = time.time()
                got = block(samplers, duty, rounds)
                t1 = time.time()
                base = got["cublas"]
                cells = " ".join(
                    f"{name} {statistics.median(base) / statistics.median(v):.3f}/{min(base) / min(v):.3f}"
                    for name, v in got.items() if name != "cublas")
                tf = flop / statistics.median(base) / 1e6
                print(f"{m}x{k}x{n} {kind:7} {duty:4}: cuBLAS {statistics.median(base):7.1f}/{min(base):7.1f} us "
                      f"({tf:4.0f} TFLOP/s)  {cells}  [{clock.mean(t0, t1)}]", flush=True)
    clock.stop()
    print("BITS", "PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
