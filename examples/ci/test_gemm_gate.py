"""Gate a model's GEMMs on their goldens (the test the CI job runs).

The first run keeps a candidate and fails; accept it once
(`pytest --gemm-audit-accept`, or `gemm-audit review` then `accept`) and
commit `traces/`. Every later run must match it bit for bit.
"""

import torch


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)
    ).eval()


def test_mlp_gemms(gemm_audit_golden):
    m = model()
    x = torch.randn(8, 128, generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), gemm_audit_golden.record("mlp@b8") as rec:
        m(x)
    gemm_audit_golden.check(rec)
