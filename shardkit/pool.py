"""Work spread over worker processes: checks with the answers (and the first error) of a serial run; writers.

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

`forked_each(fn, items, processes)` runs `fn(item)` in a forked child process of its own per item,
at most `processes` at a time, results as they finish: for writers (ImageNet shards) whose parent
holds everything they need (a plan) and has started no threads (`imagenet-prep convert` imports no
TensorFlow), and whose children must be stopped and reaped without ever hanging.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import multiprocessing.connection
import signal
from typing import Callable, Iterable, Iterator

from .errors import PrepError
from .signals import Terminated, held_for_fork, received, release_in_child

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


# STOP_SIGNALS are held back while a child is forked (`held_for_fork`), until it runs `_run_child`: one that lands
# in what runs at a fork (Python's at-fork hooks, multiprocessing's start-up) is printed there as "Exception
# ignored" and swallowed, and the child, its SIGTERM handler already spent, runs on deaf to the next one.


def _run_child(fn: Callable, item, conn) -> None:
    """In the child: fn(item), sent back as (True, value) or (False, the Exception it raised)."""
    release_in_child()  # SIGINT ignored (the parent reports it once); a SIGTERM sent meanwhile is handled from here
    try:
        outcome = (True, fn(item))
    except Exception as error:  # noqa: BLE001 - carried back and raised in the parent, as a serial run would
        outcome = (False, error)
    try:
        conn.send(outcome)
    except OSError:
        pass  # the parent closed its end: it is stopping this child, and needs no answer
    except Exception as error:  # noqa: BLE001 - an unpicklable value or exception: say what it was
        with contextlib.suppress(OSError):
            conn.send((False, RuntimeError(f"{type(error).__name__} sending the result of {item!r}: {error}")))
    finally:
        conn.close()


def _ended(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


@contextlib.contextmanager
def forked_each(fn: Callable, items: Iterable, processes: int, *, grace: float = 10.0,
                name: Callable[[object], str] = repr) -> Iterator[Iterator]:
    """The values of `fn(item)` for every item, as they finish, each computed in a child process forked for it.

    At most `processes` children run at once. An Exception raised by `fn` is carried back and raised
    here, and the first one ends the run; so does a child that dies without a result (a PrepError
    naming `name(item)` and how it ended). Whenever the block ends (the last result, an error, Ctrl-C,
    SIGTERM), every child still running is stopped and reaped before it returns: its pipe closed, then
    SIGTERM (with `shardkit.signals` installed, inherited, its atomic writes remove their temporaries),
    then SIGKILL after `grace` seconds.

    Not multiprocessing.Pool: its workers share one task queue and its lock, and `Pool.terminate`
    takes that lock for good and sends each worker one SIGTERM. A worker with a Python SIGTERM
    handler that gets it just before it blocks on the lock never runs the handler and never exits,
    and the parent joins it forever (about one `convert --workers 2` in 200 on a loaded machine).
    Here nothing is shared: each child has the parent's memory as it was at the fork, and a pipe of
    its own for its one result.
    """
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    context = multiprocessing.get_context("fork")
    pending = iter(items)
    running: dict = {}  # the read end of each child's pipe -> (child, item)

    def start(item) -> None:
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_run_child, args=(fn, item, send), daemon=True)
        running[receive] = (child, item)  # before the fork: stopped and reaped whatever happens from here
        # The child's garbage collector never touches what the parent had: garbage awaiting collection there
        # (a TensorFlow data iterator, say) has destructors that wait for threads the fork did not copy, and a
        # child collecting it would wait forever. Frozen objects are the parent's to collect, after the fork.
        with held_for_fork():  # ours, held meanwhile, lands as the block ends
            gc.freeze()
            try:
                child.start()
            finally:
                gc.unfreeze()
                send.close()

    def results() -> Iterator:
        for item in pending:
            if len(running) >= processes:
                yield from finished()
            if received():  # a SIGTERM whose Terminated was swallowed (see shardkit.signals): stop here
                raise Terminated()
            start(item)
        while running:
            yield from finished()

    def finished() -> Iterator:
        ready = multiprocessing.connection.wait(list(running))
        for receive in ready:
            child, item = running[receive]
            try:
                ok, value = receive.recv()
            except (EOFError, OSError):
                child.join()
                if received():  # the child was stopped by the SIGTERM this process got too
                    raise Terminated() from None
                ok, value = False, PrepError(f"{name(item)}: the worker process writing it ended without a result "
                                             f"({_ended(child)})")
            receive.close()
            child.join()
            del running[receive]  # only once reaped: an interrupt before leaves it to the cleanup below
            if not ok:
                raise value
            yield value

    try:
        yield results()
    finally:
        started = [child for child, _ in running.values() if child.pid is not None]
        for receive, (child, _) in running.items():
            receive.close()  # a child sending its result gets EPIPE at once instead of waiting for a reader
            if child.pid is not None:
                child.terminate()
        for child in started:
            child.join(grace)
            if child.exitcode is None:
                child.kill()
                child.join()
        running.clear()
