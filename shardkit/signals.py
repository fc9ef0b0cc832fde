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

import contextlib
import signal
import sys
import threading
from typing import Iterator

EXIT_STATUS = 128 + signal.SIGTERM

# The signals that stop a run (SIGINT: Ctrl-C), held back while a process forks a child that sets its own handlers.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})

_handlers_held: dict | None = None  # while `held_for_fork` holds them: the handlers it replaced
_arrived_while_held: list[int] = []

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


def _note_held(signum, frame):
    _arrived_while_held.append(signum)


@contextlib.contextmanager
def held_for_fork() -> Iterator[None]:
    """STOP_SIGNALS held back while the block forks a child, then delivered to this process as they came.

    Blocking them (pthread_sigmask) is what the child needs: it inherits the mask, so a SIGTERM sent to it
    before it has set its own handlers (`release_in_child`) waits instead of landing in what runs at a fork
    (Python's at-fork hooks, multiprocessing's start-up), where its Terminated would be swallowed. It is not
    enough for this process: the mask is the calling thread's, and a signal sent to the process is taken by
    any other thread (luigi's keep-alive, a progress display), whose Python handler then runs in the main
    thread wherever it is, half-way through multiprocessing's `start()`, after the fork and before the
    child is recorded. The child then runs on, never stopped or waited for. So the Python handlers are
    replaced too, by one that notes the signal, which is raised once the block is over: the child started
    and recorded (or the start failed).
    """
    global _handlers_held
    # Only the main thread sets handlers; an inner hold adds nothing; a handler set from C is not Python's to put back.
    hold_handlers = (threading.current_thread() is threading.main_thread() and _handlers_held is None
                     and all(signal.getsignal(s) is not None for s in STOP_SIGNALS))
    if hold_handlers:
        _arrived_while_held.clear()
        _handlers_held = {signum: signal.signal(signum, _note_held) for signum in sorted(STOP_SIGNALS)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        arrived = []
        if hold_handlers:
            handlers, _handlers_held = _handlers_held, None
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            arrived = list(dict.fromkeys(_arrived_while_held))
            _arrived_while_held.clear()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one sent to this thread meanwhile lands here
        for signum in arrived:  # and one another thread took, here: its handler as it would have run
            signal.raise_signal(signum)


def release_in_child() -> None:
    """In a child forked under `held_for_fork`: the parent's handlers back (SIGINT ignored: Ctrl-C reaches the
    whole process group, and the parent reports it once), then STOP_SIGNALS unblocked, so that a SIGTERM sent to
    the child meanwhile is handled from here on."""
    global _handlers_held
    if _handlers_held is not None:
        signal.signal(signal.SIGTERM, _handlers_held[signal.SIGTERM])
        _handlers_held = None  # a hold of the child's own (forked_each in a task process) holds them anew
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
