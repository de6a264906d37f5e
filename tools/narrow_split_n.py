#!/usr/bin/env python3
"""The narrow rung (64x32) with its 32 columns as interleaved chains of
narrower wgmma (two m64n16k16 or four m64n8k16 per k16 step, each on its
own accumulators), against the shipped one m64n32k16 per step (device only;
docs/benchmarks.md, section 4h).

The question: is the narrow rung bound by the latency of one chain of
dependent wgmma steps (then independent chains would overlap and run
faster), or by the cost of each wgmma? The variant is
tools/narrow_split_n.patch (define XP_SPLIT_N = 2 or 4), applied to a
temporary copy of crates/cuda/kernels/wgmma.cu. Every output is compared
bit for bit with the shipped kernel (NaN-filled outputs), and each is
timed against cuBLAS (CUDA graphs of 20 launches, hot L2, the best of 7
interleaved rounds). Nothing here is used by the crate.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 python3 tools/narrow_split_n.py
"""

import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wgmma_probe as wp  # noqa: E402
import wgmma_variants as wv  # noqa: E402
from ladder_tune import best_of, graph_time as graph  # noqa: E402

VARIANTS = ("", "XP_SPLIT_N=2", "XP_SPLIT_N=4")
CASES = [(op, torch.bfloat16, m, 4096, 4096) for op in ("nn", "nt", "tn") for m in (8, 32, 64)]
CASES += [("nn", torch.float16, 64, 4096, 4096), ("nt", torch.float16, 8, 4096, 4096),
          ("nn", torch.bfloat16, 16, 4096, 1024), ("nn", torch.bfloat16, 64, 14336, 4096),
          ("nn", torch.bfloat16, 200, 1024, 3072), ("tn", torch.bfloat16, 200, 1000, 520)]


def main():
    torch.zeros(1, device="cuda")
    patched = os.path.join(tempfile.mkdtemp(), "wgmma_split_n.cu")
    subprocess.run(["patch", "-s", "-o", patched, os.path.join(wp.ROOT, "crates/cuda/kernels/wgmma.cu"),
                    os.path.join(wp.ROOT, "tools", "narrow_split_n.patch")], check=True)
    mods = {d or "shipped": wp.Module(wp.compile_cubin(patched, "sm_90a", [d] if d else [])) for d in VARIANTS}
    r = wp.Runner.__new__(wp.Runner)  # operands only
    keep = []
    ok = True
    print("op dtype m k n  cuBLAS us  " + "  ".join(mods) + "  (cuBLAS time / kernel time)", flush=True)
    for (op, dt, m, k, n) in CASES:
        _, _, a_st, b_st = r.operands(op, m, k, n, dt, 3)
        a_l = a_st.t() if op == "tn" else a_st
        b_l = b_st.t() if op == "nt" else b_st
        c = torch.empty(m, n, device="cuda", dtype=dt)
        outs = {}
        for name, mod in mods.items():
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            wv.ladder(mod, (64, 32), False, op, dt, a_st, b_st, m, k, n, out)()
            outs[name] = out
        torch.cuda.synchronize()
        same = {nm: torch.equal(wp.bits(o), wp.bits(outs["shipped"])) for nm, o in outs.items()}
        ok &= all(same.values())
        samplers = {"cublas": graph(lambda: torch.matmul(a_l, b_l, out=c), 20)}
        for name, mod in mods.items():
            samplers[name] = graph(wv.ladder(mod, (64, 32), False, op, dt, a_st, b_st, m, k, n, c), 20)
        keep.append(samplers)
        best = best_of(samplers)
        base = best["cublas"]
        cols = "  ".join(f"{base / best[nm]:.3f}{'' if same[nm] else ' BITS DIFFER'}" for nm in mods)
        print(f"{op} {str(dt)[6:]} {m} {k} {n} {base:9.1f}  {cols}", flush=True)
    print("SPLIT-N BITS", "PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
