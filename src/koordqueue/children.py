"""Child processes that do not outlive the process that started them.

A benchmark or a test harness killed by a timeout (SIGKILL: no `finally` runs) would
leave its API servers, controllers and control-plane programs running, each still
using CPU. Linux sends a child a signal of our choosing when the thread that forked
it dies; `die_with_parent` asks for SIGKILL. Start such children from a thread that
lives as long as they should (the main thread, or the event loop's).
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn` for subprocess.Popen: SIGKILL this child when its parent dies (Linux)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
