"""``gemm-audit compile-kernels`` from the installed package, on a machine
with no GPU, with the NVRTC that torch's CUDA wheels bring
(``nvidia-cuda-nvrtc``): Hopper's modules are admitted from the shipped
cubins and nothing is stored where that NVRTC is the shipped release;
another architecture's modules are compiled into the cache, and a second
run finds them there.

NVRTC is required where ``GEMM_AUDIT_REQUIRE_TORCH`` is set (``.ci/run``
sets it; torch's Linux wheel depends on ``nvidia-cuda-nvrtc``): a missing
one is then a failure, never a skip."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

from gemm_audit._nvrtc import wheels_nvrtc

SHIPPED_RELEASE = "13.0.88"

FOUND = wheels_nvrtc()
NVRTC = FOUND[0] if FOUND else None
if NVRTC is None and not os.environ.get("GEMM_AUDIT_REQUIRE_TORCH"):
    pytest.skip(
        "no nvidia-cuda-nvrtc wheel (torch's CUDA dependency) is installed",
        allow_module_level=True,
    )


def compile_kernels(cache, *args, nvrtc_on_path=True):
    assert NVRTC is not None, "no libnvrtc.so from the nvidia-cuda-nvrtc wheel on sys.path"
    env = dict(os.environ, GEMM_AUDIT_KERNEL_CACHE=str(cache), LD_LIBRARY_PATH=NVRTC)
    if not nvrtc_on_path:
        del env["LD_LIBRARY_PATH"]
    env.pop("GEMM_AUDIT_SHIPPED_KERNELS", None)
    run = subprocess.run(
        [sys.executable, "-m", "gemm_audit", "compile-kernels", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = [line.split(None, 1) for line in run.stdout.splitlines()]
    return run, {parts[0]: parts[1] for parts in lines if len(parts) == 2 and ".cu." in parts[0]}


def test_another_architecture_is_compiled_into_the_cache_once(tmp_path):
    cache = tmp_path / "kernels"
    first, modules = compile_kernels(cache, "--arch", "sm_80")
    assert first.returncode == 0, first.stderr
    assert sorted(modules) == ["gemm.cu.sm_80", "nh128.cu.sm_80", "seed.cu.sm_80", "sha256.cu.sm_80"]
    release = importlib.metadata.version("nvidia-cuda-nvrtc")
    for module, how in modules.items():
        assert how.startswith(f"compiled (no cubin is shipped for sm_80 with NVRTC {release} "), (module, how)
    assert f"kernel cache: {cache}" in first.stdout
    assert "compiling gemm.cu for sm_80" in first.stderr
    stored = [p for p in cache.rglob("*") if p.is_file()]
    assert len(stored) == 4, stored

    second, modules = compile_kernels(cache, "--arch", "sm_80")
    assert second.returncode == 0, second.stderr
    assert set(modules.values()) == {"cached"}, modules
    assert "compiling" not in second.stderr


def test_hopper_takes_the_shipped_cubins_where_nvrtc_is_their_release(tmp_path):
    cache = tmp_path / "kernels"
    run, modules = compile_kernels(cache, "-q")
    assert run.returncode == 0, run.stderr
    assert sorted(modules) == [
        "gemm.cu.sm_90",
        "nh128.cu.sm_90",
        "seed.cu.sm_90",
        "sha256.cu.sm_90",
        "wgmma.cu.sm_90a",
    ]
    release = importlib.metadata.version("nvidia-cuda-nvrtc")
    if release == SHIPPED_RELEASE:
        assert set(modules.values()) == {"shipped"}, modules
        assert not cache.exists(), "a shipped cubin was stored"
    else:
        for module, how in modules.items():
            assert how.startswith("compiled (no cubin is shipped"), (module, how)


def test_bad_input_is_refused(tmp_path):
    bad_arch, _ = compile_kernels(tmp_path / "k", "--arch", "sm90")
    assert bad_arch.returncode == 2
    assert "sm_90" in bad_arch.stderr
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    stored, _ = compile_kernels(blocked / "kernels", "--arch", "sm_80")
    assert stored.returncode == 4
    assert "could not be stored in the kernel cache" in stored.stderr
    assert blocked.read_text() == "not a folder"


def test_the_command_finds_the_nvrtc_of_torch_s_wheels(tmp_path):
    """No CUDA toolkit on the loader's path (as on CI, and on a node that
    only pip-installed torch): the command loads the wheels' NVRTC."""
    run, modules = compile_kernels(tmp_path / "kernels", "-q", nvrtc_on_path=False)
    assert run.returncode == 0, run.stderr
    assert len(modules) == 5, run.stdout
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    probe = "import ctypes; ctypes.CDLL('libnvrtc.so.13')"
    toolkit = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0
    if not toolkit and importlib.metadata.version("nvidia-cuda-nvrtc") == SHIPPED_RELEASE:
        # The wheels' NVRTC, not another found on the way: it admits the cubins.
        assert set(modules.values()) == {"shipped"}, modules
