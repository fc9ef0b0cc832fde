"""How far a long stage has got: the `progress(done, total)` callback, a terminal bar, and the closing log line.

Every long library stage takes `progress: Progress | None` and calls it with how much it has done and
its total (None while the total is truly unknown): `done` never decreases nor passes a known total,
and the last call says `done == total`. Stages call it per block or per document; `throttle` keeps what reaches
the caller's callback to a few calls a second (and always the first and last), so that a bar or a
Luigi status update costs nothing measurable in the hot loops.

The consumers: `bar(desc)` for the command lines (tqdm on a terminal, nothing on a pipe), and
`workflows.base.PrepTask.progress` for the Luigi tasks (luigid's web UI). Each stage ends with one INFO
line made by `Stage.finish`: items, bytes, time and rate.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

# progress(done, total): total is None while unknown.
Progress = Callable[[int, "int | None"], None]

# The callers' callbacks get at most this many calls a second (a terminal bar redraws 10 times a second).
CALLS_PER_SECOND = 5

MB = 1e6


def throttle(progress: Progress | None, interval: float = 1 / CALLS_PER_SECOND) -> Progress | None:
    """`progress`, passed on at most once per `interval` seconds, and always the first and the final call
    (done == total). None stays None, so a stage without a callback pays one `is None` test per call."""
    if progress is None:
        return None
    clock = time.monotonic
    last = [-interval]

    def throttled(done: int, total: int | None) -> None:
        now = clock()
        if now - last[0] >= interval or (total is not None and done >= total):
            last[0] = now
            progress(done, total)

    return throttled


def part_of(progress: Progress | None, start: int, end: int, total: int | None) -> Progress | None:
    """A part of a stage's work, reported as the span [start, end] of the whole's `total`: a part's
    (done, part_total) becomes start + (end - start) * done / part_total (start while its total is unknown)."""
    if progress is None:
        return None
    span = end - start

    def part(done: int, part_total: int | None) -> None:
        progress(start + span * done // part_total if part_total else start, total)

    return part


def amount(n: float, unit: str) -> str:
    """'38.2 MB' for bytes (unit 'B'), '4,213 pages' for items."""
    return f"{n / MB:,.1f} MB" if unit == "B" else f"{n:,.0f} {unit}"


def status(what: str, done: int, total: int | None, unit: str) -> str:
    """'extract enwiki-…bz2: 12.3 of 40.1 MB' (or '12.3 MB' while the total is unknown)."""
    if total is None:
        return f"{what}: {amount(done, unit)}"
    if unit == "B":
        return f"{what}: {done / MB:,.1f} of {amount(total, unit)}"
    return f"{what}: {done:,} of {amount(total, unit)}"


class Stage:
    """Times one stage and logs its closing INFO line on `logger`:
    `extract enwiki-…-p1p41242.bz2: 4,213 pages, 38.2 MB in 12.1 s (3.2 MB/s)`."""

    def __init__(self, logger: logging.Logger, what: str):
        self.logger, self.what = logger, what
        self.start = time.perf_counter()

    def finish(self, items: int, unit: str, nbytes: int | None = None) -> str:
        seconds = time.perf_counter() - self.start
        line = stage_line(self.what, items, unit, nbytes, seconds)
        self.logger.info("%s", line)
        return line


def stage_line(what: str, items: int, unit: str, nbytes: int | None, seconds: float) -> str:
    """The closing line of a stage: the rate in MB/s when it moved bytes, else in items a second."""
    if seconds <= 0:
        rate = "-"
    elif nbytes is not None:
        mb_per_s = nbytes / MB / seconds
        rate = f"{mb_per_s:,.{1 if mb_per_s >= 1 else 2}f} MB/s"  # a small stage's rate is not '0.0'
    else:
        rate = f"{items / seconds:,.{0 if items >= seconds else 2}f} {unit}/s"
    size = f", {amount(nbytes, 'B')}" if nbytes is not None else ""
    return f"{what}: {items:,} {unit}{size} in {seconds:.1f} s ({rate})"


class Bar:
    """A tqdm bar on stderr when stderr is a terminal, nothing at all otherwise; a Progress to pass to a stage.

    `unit` 'B' shows bytes scaled (kB, MB); any other unit counts items. Use it as a context manager, or
    close() it, so the line it drew is cleared.
    """

    def __init__(self, desc: str, unit: str = "it", *, enabled: bool | None = None):
        self.tqdm = None
        if enabled if enabled is not None else sys.stderr.isatty():
            from tqdm import tqdm

            self.tqdm = tqdm(desc=desc, total=None, unit=unit, unit_scale=unit == "B", leave=False,
                             file=sys.stderr, dynamic_ncols=True)

    def __call__(self, done: int, total: int | None) -> None:
        if self.tqdm is None:
            return
        if total != self.tqdm.total:
            self.tqdm.total = total
        if done < self.tqdm.n:  # a stage that started over
            self.tqdm.reset(total=total)
        self.tqdm.update(done - self.tqdm.n)

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(desc: str, unit: str = "it") -> Bar:
    """The command lines' bar: `with progress.bar("instances", "B") as show: stage(..., progress=show)`."""
    return Bar(desc, unit)
