"""``gemm-audit`` from the Python package: the same Rust command line as
the ``gemm-audit`` binary (``python -m gemm_audit audit``, or the
``gemm-audit`` command ``pip install`` puts on the PATH)."""

import signal
import sys
import threading
from typing import Iterable, Optional

from . import _native
from ._nvrtc import nvrtc_from_wheels


def main(argv: Optional[Iterable[str]] = None) -> int:
    """Runs ``gemm-audit`` with ``argv`` (default: this process's
    arguments) and returns its exit code (``gemm-audit --help`` lists
    them)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C stops a long audit at once, as it stops the binary: with
        # Python's own handler it would wait until the command returned.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    nvrtc_from_wheels()
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.cli_main(["gemm-audit", *args])


def console() -> None:
    """The ``gemm-audit`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    console()
