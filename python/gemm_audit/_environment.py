"""What a recording's context says of the process it ran in: torch's
determinism-relevant settings and library versions (cuBLAS, cuBLASLt,
the CPU BLAS), the driver, the device or CPU, and the per-machine facts
a trace keeps but never compares. What cannot change within a process is
found once."""

import ctypes
import os
from typing import Dict, Optional, Tuple


#: Loaded libraries found by :func:`_loaded_library`, their versions, the
#: driver version and the CPU model: none changes within a process, and
#: finding them (a scan of ``/proc/self/maps``, thousands of lines once CUDA
#: is up; NVML's init; ``/proc/cpuinfo``) costs milliseconds a recording.
_PROCESS_FACTS: dict = {}


def _loaded_library(stem: str) -> Optional[str]:
    """The path of a loaded shared library whose name starts with ``stem``
    (remembered once found: a library stays loaded)."""
    key = "library:" + stem
    if key in _PROCESS_FACTS:
        return _PROCESS_FACTS[key]
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                if os.path.basename(path).startswith(stem + ".so"):
                    _PROCESS_FACTS[key] = path
                    return path
    except OSError:
        pass
    return None


def _blas_versions() -> Dict[str, str]:
    """cuBLAS's and cuBLASLt's versions, where loaded (remembered once
    both are: a loaded library's version does not change)."""
    if "blas" in _PROCESS_FACTS:
        return dict(_PROCESS_FACTS["blas"])
    out = {}
    path = _loaded_library("libcublas")
    if path:
        try:
            lib = ctypes.CDLL(path)
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                v = ctypes.c_int()
                if lib.cublasGetProperty(prop, ctypes.byref(v)) != 0:
                    raise OSError("cublasGetProperty failed")
                parts.append(str(v.value))
            out["cublas"] = ".".join(parts)
        except (OSError, AttributeError):
            out["cublas"] = "unknown"
    path = _loaded_library("libcublasLt")
    if path:
        try:
            lib = ctypes.CDLL(path)
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            v = lib.cublasLtGetVersion()
            out["cublaslt"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        except (OSError, AttributeError):
            out["cublaslt"] = "unknown"
    if len(out) == 2:
        _PROCESS_FACTS["blas"] = dict(out)
    return out


def _driver_version() -> str:
    if "driver" in _PROCESS_FACTS:
        return _PROCESS_FACTS["driver"]
    for name in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
        try:
            nvml = ctypes.CDLL(name)
            if nvml.nvmlInit_v2() != 0:
                continue
            buf = ctypes.create_string_buffer(96)
            if nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
                _PROCESS_FACTS["driver"] = buf.value.decode()
                return _PROCESS_FACTS["driver"]
        except (OSError, AttributeError):
            continue
    return "unknown"


def _cpu_blas() -> Tuple[Dict[str, str], Dict[str, str]]:
    """The CPU BLAS behind torch's CPU GEMMs, as (libraries, state):
    the BLAS torch was built with, MKL's and oneDNN's versions where
    present, the CPU capability it dispatches to and the thread counts
    (the bits of a CPU GEMM can depend on them)."""
    import re

    import torch

    config = torch.__config__.show()
    libraries = {}
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    libraries["cpu-blas"] = blas.group(1) if blas else "unknown"
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", config)
    if mkl:
        libraries["mkl"] = mkl.group(1)
    onednn = re.search(r"(?:oneDNN|MKL-DNN) v([\w.]+)", config)
    if onednn:
        libraries["onednn"] = onednn.group(1)
    state = {
        "cpu_threads": str(torch.get_num_threads()),
        "cpu_interop_threads": str(torch.get_num_interop_threads()),
        "mkldnn_enabled": str(torch.backends.mkldnn.enabled),
    }
    try:
        state["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        pass
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR"):
        state[var] = os.environ.get(var, "unset")
    return libraries, state


def framework_state(cuda: bool = True, cpu: bool = False) -> dict:
    """torch's determinism-relevant settings and library versions, as the
    trace's framework block (``name``, ``version``, ``libraries``,
    ``state``): the CUDA ones where a GEMM ran on the GPU (``cuda``), the
    CPU BLAS where one ran on the CPU (``cpu``)."""
    import torch

    m = torch.backends.cuda.matmul
    state = {
        "allow_tf32": str(m.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "use_deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
    }
    libraries: Dict[str, str] = {}
    if cuda:
        state.update(
            {
                "allow_fp16_reduced_precision_reduction": str(m.allow_fp16_reduced_precision_reduction),
                "allow_bf16_reduced_precision_reduction": str(m.allow_bf16_reduced_precision_reduction),
                "preferred_blas_library": str(torch.backends.cuda.preferred_blas_library()),
            }
        )
        for var in ("CUBLAS_WORKSPACE_CONFIG", "NVIDIA_TF32_OVERRIDE", "CUBLASLT_WORKSPACE_SIZE"):
            state[var] = os.environ.get(var, "unset")
        libraries["cuda"] = str(torch.version.cuda)
        libraries.update(_blas_versions())
    if cpu:
        cpu_libraries, cpu_state = _cpu_blas()
        libraries.update(cpu_libraries)
        state.update(cpu_state)
    return {"name": "torch", "version": torch.__version__, "libraries": libraries, "state": state}


def device_identity(device=None) -> dict:
    """The CUDA device as a trace's device block."""
    import torch

    p = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    return {
        "class": p.name,
        "compute_capability": [p.major, p.minor],
        "multiprocessors": p.multi_processor_count,
        "driver": _driver_version(),
    }


def cpu_identity() -> dict:
    """The host CPU as a trace's device block (the class gemm-audit's own
    CPU backend names: ``cpu/<architecture>``)."""
    import platform

    return {"class": f"cpu/{platform.machine()}", "compute_capability": None, "multiprocessors": 0, "driver": "none"}


def _volatile(cuda_device: Optional[int]) -> Dict[str, str]:
    """Per-machine facts kept in the trace, never compared: the GPU's UUID
    (so ``compare`` gives each device one vote) or the CPU's model."""
    out: Dict[str, str] = {}
    if cuda_device is not None:
        import torch

        p = torch.cuda.get_device_properties(cuda_device)
        uuid = getattr(p, "uuid", None)
        if uuid is not None:
            out["cuda.device.uuid"] = str(uuid)
        out["cuda.device.ordinal"] = str(cuda_device)
        bus = getattr(p, "pci_bus_id", None)
        if bus is not None:
            out["cuda.device.pci_bus_id"] = str(bus)
    if "cpu.model" not in _PROCESS_FACTS:
        _PROCESS_FACTS["cpu.model"] = ""
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        _PROCESS_FACTS["cpu.model"] = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    if _PROCESS_FACTS["cpu.model"]:
        out["cpu.model"] = _PROCESS_FACTS["cpu.model"]
    return out
