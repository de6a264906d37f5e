"""NVRTC for the CUDA backend where no CUDA toolkit is on the loader's
path: the one torch's CUDA wheels install."""

import os
import sys


def nvrtc_from_wheels() -> None:
    """Where the loader finds no NVRTC (no CUDA toolkit on
    ``LD_LIBRARY_PATH``), loads the one torch's CUDA wheels install
    (``nvidia-cuda-nvrtc``), so the command's CUDA backend finds it by its
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
    for entry in sys.path:
        for sub, name in (("cu13", "libnvrtc.so.13"), ("cuda_nvrtc", "libnvrtc.so.12")):
            folder = os.path.join(entry or ".", "nvidia", sub, "lib")
            if not os.path.isfile(os.path.join(folder, name)):
                continue
            # NVRTC opens its builtins by name when it compiles: loaded
            # first, they are found by that name too.
            builtins = sorted(f for f in os.listdir(folder) if f.startswith("libnvrtc-builtins.so."))
            try:
                for lib in [*builtins, name]:
                    ctypes.CDLL(os.path.join(folder, lib), mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                pass
