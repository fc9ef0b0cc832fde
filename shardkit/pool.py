"""Checks of many files spread over worker processes, with the answers (and the first error) of a serial run.

`file_map(jobs)` gives a `map(fn, items)` whose results come back in item order, computed by up to
`jobs` worker processes. A PrepError or OSError raised by `fn` is carried back and raised where
the serial loop would raise it: on reaching that item, after every earlier item's result. Later
items may have been computed meanwhile; their results are dropped, so the first error, and so the
output, is the same for any number of workers. With `jobs` 1 nothing is started: plain `map`.

The workers are spawned, not forked: a forked child of a process that has started threads (as
TensorFlow does) may deadlock, and a fresh interpreter holds only what its function imports.
They ignore SIGINT (the parent reports the interrupt once) and are terminated when the block ends,
also on an error. Memory is that of `jobs` processes each checking one file at a time: what one
file's check needs, whatever the number of files.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import signal
from typing import Callable, Iterable, Iterator

from .errors import PrepError

Map = Callable[[Callable, Iterable], Iterator]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _caught(fn: Callable, item):
    """(True, fn(item)), or (False, the PrepError or OSError it raised): carried back as a value, so the
    parent raises the worker's own exception, without multiprocessing's remote traceback as its cause."""
    try:
        return True, fn(item)
    except (PrepError, OSError) as error:
        return False, error


def _in_order(results: Iterable) -> Iterator:
    for ok, value in results:
        if not ok:
            raise value
        yield value


@contextlib.contextmanager
def file_map(jobs: int) -> Iterator[Map]:
    """A `map(fn, items)` over up to `jobs` spawned worker processes, in item order (see the module docstring).

    `fn` must be picklable (a module-level function, or a functools.partial of one, with picklable
    arguments). The pool is started on the first call, with no more workers than that call has
    items, and serves every later call of the block.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    pool = None

    def ordered_map(fn: Callable, items: Iterable) -> Iterator:
        nonlocal pool
        items = list(items)
        call = functools.partial(_caught, fn)
        if jobs == 1 or (pool is None and len(items) <= 1):
            return _in_order(map(call, items))
        if pool is None:
            pool = multiprocessing.get_context("spawn").Pool(min(jobs, len(items)), initializer=_ignore_sigint)
        return _in_order(pool.imap(call, items))

    try:
        yield ordered_map
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
