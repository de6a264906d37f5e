"""``gemm-audit`` from the Python package: the same Rust command line as
the ``gemm-audit`` binary (``python -m gemm_audit audit``, or the
``gemm-audit`` command ``pip install`` puts on the PATH)."""

import os
import signal
import sys
import threading
from typing import Iterable, Optional

from . import _native


def main(argv: Optional[Iterable[str]] = None) -> int:
    """Runs ``gemm-audit`` with ``argv`` (default: this process's
    arguments) and returns its exit code (``gemm-audit --help`` lists
    them)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C stops a long audit at once, as it stops the binary: with
        # Python's own handler it would wait until the command returned.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    _nvrtc_from_wheels()
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.cli_main(["gemm-audit", *args])


def _nvrtc_from_wheels() -> None:
    """Where the loader finds no NVRTC (no CUDA toolkit on
    ``LD_LIBRARY_PATH``), loads the one torch's CUDA wheels install
    (``nvidia-cuda-nvrtc``), so the command's CUDA backend finds it by its
    name: a ``pip install``ed node needs no toolkit to compile or admit
    its kernels. An NVRTC the loader finds is left to win."""
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


def console() -> None:
    """The ``gemm-audit`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    console()
