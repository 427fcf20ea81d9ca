"""A child process that ends with its parent: Linux's PR_SET_PDEATHSIG, which sends a signal
when the thread that forked the child exits, however it exits (kill -9 included)."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def sigterm_when_parent_dies() -> bool:
    """Asks the kernel for SIGTERM when this process's parent thread exits; False where not
    granted (not Linux). Safe as a preexec_fn: one libc call."""
    if not sys.platform.startswith("linux"):
        return False
    return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)) == 0
