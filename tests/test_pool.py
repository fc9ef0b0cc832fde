"""shardkit.pool.forked_each: a child process per item, and a parent that never waits forever for one.

Real forked processes and real signals. multiprocessing.Pool, which `imagenet-prep convert --workers`
used before, hangs in each of the last two situations here: Pool.terminate joins a worker that did not
exit on its one SIGTERM (what a worker with a Python SIGTERM handler did about once in 200 runs, when
the signal came just before it blocked on the pool's queue lock), and a worker killed mid-task leaves
its task unanswered for good.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from shardkit import atomic
from shardkit.errors import PrepError
from shardkit.pool import forked_each
from shardkit.signals import raise_on_sigterm


def _children() -> set[int]:
    """Our live child processes (zombies included: a child not yet reaped is a leak too)."""
    me = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            found.add(int(stat.parent.name))
    return found


def test_every_result_comes_back_and_no_child_gets_a_signal_on_success(tmp_path):
    """Each item in a child of its own, at most `processes` at once; a finished run stops nobody."""
    def work(n: int) -> tuple[int, int]:
        signal.signal(signal.SIGTERM, lambda *_: (tmp_path / f"sigterm-{n}").touch())
        time.sleep(0.01)
        return n * n, os.getpid()

    before = _children()
    with forked_each(work, range(12), 3) as finished:
        results = list(finished)
    assert sorted(value for value, _ in results) == [n * n for n in range(12)]
    assert len({pid for _, pid in results}) == 12 and os.getpid() not in {pid for _, pid in results}
    assert list(tmp_path.iterdir()) == [] and _children() == before


def test_the_first_error_is_raised_and_a_child_deaf_to_sigterm_is_killed_after_the_grace(tmp_path):
    def work(n: int) -> int:
        if n == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a worker that will not stop when asked
            (tmp_path / "deaf").touch()
            time.sleep(30)
        while not (tmp_path / "deaf").exists():
            time.sleep(0.01)
        raise PrepError(f"item {n}: unreadable")

    before = _children()
    start = time.monotonic()
    with pytest.raises(PrepError, match="^item 1: unreadable$"):
        with forked_each(work, range(2), 2, grace=1.0) as finished:
            list(finished)
    assert time.monotonic() - start < 15  # not the 30 s the deaf child would take
    assert _children() == before


def test_a_child_that_dies_without_a_result_is_an_error_naming_its_item():
    def work(n: int) -> int:
        if n == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        return n

    with pytest.raises(PrepError, match=r"^shard 2: the worker process writing it ended without a result "
                                        r"\(killed by SIGKILL\)$"):
        with forked_each(work, range(4), 2, name=lambda n: f"shard {n}") as finished:
            list(finished)


def test_a_stopped_child_unwinds_its_atomic_write_through_the_inherited_sigterm_handler(tmp_path):
    """On an error elsewhere the children still running get SIGTERM: with shardkit.signals installed (the
    commands and the Luigi tasks install it) each unwinds like an exception, and its temporaries go."""
    previous = signal.getsignal(signal.SIGTERM)
    raise_on_sigterm()
    try:
        def work(n: int) -> int:
            if n == 0:
                with atomic.atomic_write(tmp_path / "shard-0") as f:
                    f.write(b"half")
                    (tmp_path / "writing").touch()
                    time.sleep(600)
            while not (tmp_path / "writing").exists():
                time.sleep(0.01)
            raise PrepError("item 1 failed")

        with pytest.raises(PrepError, match="item 1 failed"):
            with forked_each(work, range(2), 2, grace=60) as finished:
                list(finished)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["writing"]  # no shard, no temporary


def test_a_forked_child_never_collects_the_parents_garbage(tmp_path):
    """Garbage the parent has not collected yet (here a cycle with a finaliser; in the suite, a TensorFlow data
    iterator whose finaliser waits for threads a fork does not copy, which hung a child forever) is the parent's
    to collect: a child that collects never runs its finaliser."""
    import gc

    class Cycle:
        def __del__(self):
            (tmp_path / f"collected-in-{os.getpid()}").touch()

    gc.disable()
    try:
        garbage = Cycle()
        garbage.self = garbage
        del garbage
        with forked_each(lambda _: (gc.collect(), os.getpid())[1], [0], 1) as results:
            (child,) = list(results)
    finally:
        gc.enable()
    gc.collect()
    assert not (tmp_path / f"collected-in-{child}").exists()
    assert (tmp_path / f"collected-in-{os.getpid()}").exists()
