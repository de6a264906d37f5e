"""NVRTC for the CUDA backend where no CUDA toolkit is on the loader's
path: the one torch's CUDA wheels install."""

import os
import sys
from typing import Optional, Tuple


def wheels_nvrtc() -> Optional[Tuple[str, str]]:
    """The folder and file name of the ``libnvrtc.so`` that torch's CUDA
    wheels installed (``nvidia-cuda-nvrtc``) on ``sys.path``, or None."""
    for entry in sys.path:
        for sub, name in (("cu13", "libnvrtc.so.13"), ("cuda_nvrtc", "libnvrtc.so.12")):
            folder = os.path.join(entry or ".", "nvidia", sub, "lib")
            if os.path.isfile(os.path.join(folder, name)):
                return folder, name
    return None


def nvrtc_from_wheels() -> None:
    """Where the loader finds no NVRTC (no CUDA toolkit on
    ``LD_LIBRARY_PATH``), loads the one torch's CUDA wheels install
    (:func:`wheels_nvrtc`), so the command's CUDA backend finds it by its
    name: a ``pip install``ed node needs no toolkit to compile or admit
    its kernels. An NVRTC the loader finds (or a process has loaded) is
    left to win."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            ctypes.CDLL(name)
            return
        except OSError:
            pass
    found = wheels_nvrtc()
    if found is None:
        return
    folder, name = found
    # NVRTC opens its builtins by name when it compiles: loaded first,
    # they are found by that name too.
    builtins = sorted(f for f in os.listdir(folder) if f.startswith("libnvrtc-builtins.so."))
    try:
        for lib in [*builtins, name]:
            ctypes.CDLL(os.path.join(folder, lib), mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass  # the backend then says that NVRTC was not found
