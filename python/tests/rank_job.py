"""One rank of the job python/tests/test_distributed.py runs under torchrun
(Gloo, CPU): it records a tiny model's step with gemm_audit.torch, calls
gemm_audit.distributed.agree and writes its verdict (or the error it
raised) to OUT/verdict-rank<N>.json.

    python -m torch.distributed.run --standalone --nproc_per_node 4 rank_job.py SCENARIO OUT

SCENARIO: ``agree`` (every rank the same), ``weight`` (rank 2's weight
nudged, outputs compared), ``knob`` (rank 2 runs another CPU thread
count, routes compared), ``extra`` (rank 2 records one more GEMM),
``dead`` (rank 2 leaves before agreeing), ``tie`` (run on 2 ranks: rank
1's weight nudged, so no side is a majority)."""

import json
import os
import sys

import torch
import torch.distributed as dist

import gemm_audit
import gemm_audit.distributed as gad
import gemm_audit.torch as gat

ODD = 2


def main(scenario: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    if (rank == ODD and scenario == "weight") or (rank == 1 and scenario == "tie"):
        with torch.no_grad():
            model[2].weight[0, 0] += 1e-3
    if rank == ODD and scenario == "knob":
        torch.set_num_threads(torch.get_num_threads() + 1)
    with torch.no_grad(), gat.record("mlp@b4") as rec:
        y = model(x)
        if rank == ODD and scenario == "extra":
            y @ model[2].weight
    if scenario == "dead":
        # Every rank has started and recorded, so the 4 s below wait for
        # rank 2 alone, not for a slow start of the others.
        dist.barrier()
        if rank == ODD:
            os._exit(0)  # leaves without agreeing (exit 0: torchrun does not stop the others)
    timeout = 4.0 if scenario == "dead" else 60.0
    result = {"rank": rank}
    try:
        v = gad.agree(
            rec,
            same_outputs=scenario != "knob",
            timeout=timeout,
            report_dir=os.path.join(out, "report"),
        )
        if scenario == "agree":
            # A job agrees every step: later rounds agree too, and the
            # store keeps no key of the rounds every rank has left.
            for _ in range(2):
                v = gad.agree(rec, same_outputs=True, timeout=timeout)
            dist.barrier()
            store = dist.distributed_c10d._get_default_store()
            old = [f"gemm_audit/agree/0/0/{k}" for k in ("count", "done")]
            old += [f"gemm_audit/agree/0/0/arrived/{r}" for r in range(dist.get_world_size())]
            result["keys_left"] = [k for k in old if store.check([k])]
            result["keys_kept"] = store.check(["gemm_audit/agree/0/2/count", "gemm_audit/agree/0/2/done"])
        result["verdict"] = v.to_dict()
        if rank == 0 and v.compare is not None:
            result["compare"] = v.compare
    except gemm_audit.GemmAuditError as e:
        result["error"] = str(e)
    with open(os.path.join(out, f"verdict-rank{rank}.json"), "w") as f:
        json.dump(result, f, indent=1)
    if "error" not in result:
        dist.barrier()  # every rank is done with its peers
    # Out without the interpreter's teardown: torch 2.11 can abort at exit
    # ("terminate called without an active exception") in a process that
    # ran the profiler beside a Gloo group, whatever it ran after.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
