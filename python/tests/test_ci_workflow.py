"""The pytest plugin and the documented CI workflow
(examples/ci/gemm-audit.yml), run offline: the job's own test and gate
commands in a fresh project folder, against the installed package."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

if os.environ.get("GEMM_AUDIT_REQUIRE_TORCH"):
    import torch  # noqa: F401
else:
    pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]
CI = ROOT / "examples" / "ci"

pytest_plugins = ["pytester"]


def run_steps(workflow: pathlib.Path):
    """The workflow's `run:` commands, by step name, in order."""
    steps, name = [], None
    for line in workflow.read_text().splitlines():
        m = re.match(r"\s+- name: (.+)$", line)
        if m:
            name = m.group(1)
        m = re.match(r"\s+run: (.+)$", line)
        if m:
            steps.append((name, m.group(1)))
    return steps


def artifact_glob(workflow: pathlib.Path) -> str:
    return re.search(r"path: (traces/\S+)", workflow.read_text()).group(1)


def test_the_workflow_gates_offline(tmp_path):
    """Install is the package already here (no network); the gate step
    fails first keeping a candidate where the artifact step looks, passes
    once it is accepted, and fails again on a planted change."""
    steps = run_steps(CI / "gemm-audit.yml")
    assert [n for n, _ in steps] == ["Install", "Record and gate the GEMMs"]
    gate = steps[1][1]
    assert gate.startswith("python -m pytest ")
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    shutil.copy(CI / "test_gemm_gate.py", project / "tests")

    def run_gate(*extra):
        cmd = gate.split()[1:] + list(extra)
        return subprocess.run([sys.executable, *cmd], cwd=project, capture_output=True, text=True)

    first = run_gate()
    assert first.returncode == 1, first.stdout[-3000:]
    assert "no golden at" in first.stdout and "candidate(s) kept" in first.stdout
    kept = list(project.glob(artifact_glob(CI / "gemm-audit.yml")))
    assert len(kept) == 1 and kept[0].name.endswith(".gat.pending"), "the artifact step uploads it"
    accepted = run_gate("--gemm-audit-accept")
    assert accepted.returncode == 0, accepted.stdout[-3000:]
    assert not list(project.glob(artifact_glob(CI / "gemm-audit.yml")))
    assert run_gate().returncode == 0
    # A planted change: the model's output layer is widened.
    test = project / "tests" / "test_gemm_gate.py"
    test.write_text(test.read_text().replace("torch.nn.Linear(512, 128)", "torch.nn.Linear(512, 130)"))
    planted = run_gate()
    assert planted.returncode == 1
    assert "aten::addmm#1" in planted.stdout and "differs from its golden" in planted.stdout


def test_the_plugin_options_and_fixture(pytester):
    pytester.makepyfile(
        test_x="""
import gemm_audit, pathlib

def test_dir(gemm_audit_golden, pytestconfig):
    assert gemm_audit_golden.golden_dir == pathlib.Path(pytestconfig.rootpath) / "goldens"

def test_trace(gemm_audit_golden):
    trace = pathlib.Path(%r)
    gemm_audit_golden.check(trace)
"""
        % str(ROOT / "traces" / "cpu-x86_64" / "m-sweep.gat")
    )
    pytester.makeini("[pytest]\ngemm_audit_golden_dir = goldens\n")
    first = pytester.runpytest_subprocess("-q")
    first.assert_outcomes(passed=1, failed=1)
    first.stdout.fnmatch_lines(["*1 GEMM golden candidate(s) kept under*goldens: m-sweep*"])
    assert pytester.runpytest_subprocess("-q", "--gemm-audit-accept").ret == 0
    assert pytester.runpytest_subprocess("-q").ret == 0
    other = pytester.runpytest_subprocess("-q", "--gemm-audit-golden-dir", "elsewhere", "-k", "trace")
    other.assert_outcomes(failed=1)
    assert (pytester.path / "elsewhere").is_dir()
