"""SIGTERM as an exception, so that an interrupted write cleans up after itself.

Slurm sends SIGTERM at a job's time limit or on preemption, and `kill` sends it by default;
Python's default is to die on the spot, leaving every open temporary behind. With
`raise_on_sigterm()` the signal raises `Terminated` (a SystemExit, exit status 143 as a shell
reports a SIGTERM death) in the main thread: every `atomic_write` / `atomic_dir` on the way
out removes its temporary, and nothing half-written stays.

Python runs the handler wherever the main thread is, and a few places cannot pass an exception on:
a weakref callback, a `__del__`, an at-fork hook. There the `Terminated` is swallowed (Python
would print it as "Exception ignored in ...": it is left unprinted here) and the process runs on;
`received()` still says the signal came, for the next point that can stop (`shardkit.pool`,
`shardkit.cli`).
"""

from __future__ import annotations

import signal
import sys
import threading

EXIT_STATUS = 128 + signal.SIGTERM

# The signals that stop a run (SIGINT: Ctrl-C), held back while a process forks a child that sets its own handlers.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})

_received = False


class Terminated(SystemExit):
    """Raised by SIGTERM once `raise_on_sigterm()` is installed."""

    def __init__(self):
        super().__init__(EXIT_STATUS)


def _raise(signum, frame):
    global _received
    _received = True
    # Once is enough: a second SIGTERM during the cleanup must not cut the cleanup short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def received() -> bool:
    """Whether SIGTERM came since `raise_on_sigterm()`, even if its `Terminated` was swallowed."""
    return _received


def _unraisable_hook(hook):
    def hook_without_terminated(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Terminated):  # a swallowed Terminated is `received()`, not a traceback
            hook(unraisable)

    hook_without_terminated.wraps_terminated = True
    return hook_without_terminated


def raise_on_sigterm() -> None:
    """Make SIGTERM raise `Terminated` in this process (and in the processes it forks later)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)
        if not getattr(sys.unraisablehook, "wraps_terminated", False):
            sys.unraisablehook = _unraisable_hook(sys.unraisablehook)
