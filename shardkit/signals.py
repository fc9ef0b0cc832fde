"""SIGTERM as an exception, so that an interrupted write cleans up after itself.

Slurm sends SIGTERM at a job's time limit or on preemption, and `kill` sends it by default;
Python's default is to die on the spot, leaving every open temporary behind. With
`raise_on_sigterm()` the signal raises `Terminated` (a SystemExit, exit status 143 as a shell
reports a SIGTERM death) in the main thread: every `atomic_write` / `atomic_dir` on the way
out removes its temporary, and nothing half-written stays.
"""

from __future__ import annotations

import signal
import threading

EXIT_STATUS = 128 + signal.SIGTERM


class Terminated(SystemExit):
    """Raised by SIGTERM once `raise_on_sigterm()` is installed."""

    def __init__(self):
        super().__init__(EXIT_STATUS)


def _raise(signum, frame):
    # Once is enough: a second SIGTERM during the cleanup must not cut the cleanup short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def raise_on_sigterm() -> None:
    """Make SIGTERM raise `Terminated` in this process (and in the processes it forks later)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)
