"""Process-group hygiene shared by trial isolation and engine servers: a child that dies with its
parent, and a group that is stopped as a whole (no engine worker may outlive a trial)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess

__all__ = ["die_with_parent", "kill_process_group"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (call it in a child,
    before exec). Best effort: outside glibc Linux, process-group kills still clean up."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


def kill_process_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL it if the leader outlives ``grace_s``, then
    SIGKILL whatever is left in the group. ``proc`` must lead its own session or group."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # The leader is gone; no process it spawned may outlive it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10.0)
