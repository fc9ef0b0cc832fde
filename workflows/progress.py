"""Progress of the whole run, wherever it runs: tasks done of all, input processed and its rate, an estimate of
the time left, and what is running.

`RunProgress` lives in the worker's process (`workflows.worker.Worker` makes one per run). The worker
tells it which tasks it scheduled and with what status, and which it started; the tasks tell it how far
their stage has got through `workflows.channel` (`PrepTask.progress` sends each stage's `(done, total)`,
from whichever process runs the task). A thread shows the figures:

- on a terminal (stderr is a TTY), one line on the terminal's last row, redrawn every
  `TERMINAL_SECONDS`; the rows above it scroll as usual (the line keeps the last row to itself, as apt's
  progress line does), so the log lines of every process of the run go on above it untouched;
- otherwise (a log file, CI, Slurm), one INFO line `progress: ...` every `[progress] interval` seconds
  (`--progress-interval`, default 30);
- with a luigid, the same figures as the root task's status message (`run: ...`) and progress percentage,
  every `LUIGID_SECONDS` and once at the end, so luigid's web UI and API show the whole run on its root
  task; until the root task itself runs, when its own stage's figures take over.

The estimate of the time left: a running task's own rate for what it has left (elapsed / fraction done),
and for each task still to run the mean time of the finished tasks of its kind (of any kind while none of
its kind has finished), shared over the worker processes. Before any task has finished, the part not yet
known makes it a lower bound, shown once it is a minute or more (`more than ...`).
Nothing here touches an output: the figures only ever go to stderr and to luigid.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time

import luigi
import luigi.worker
from luigi.scheduler import DONE, FAILED, PENDING

from shardkit.progress import MB, status

from . import channel

logger = logging.getLogger("luigi-interface")

TERMINAL_SECONDS = 1.0
LUIGID_SECONDS = 2.0
RATE_WINDOW_SECONDS = 60.0


class progress(luigi.Config):
    """`--progress-interval N`, or `interval` under `[progress]`: seconds between progress lines in a log."""

    interval = luigi.FloatParameter(default=30.0, description="seconds between the run's progress lines when "
                                                              "stderr is not a terminal (a log file, CI, Slurm)")


def duration(seconds: float) -> str:
    """'45s', '12m05s', '3h07m'."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class RunProgress:
    """The run's figures (module docstring). Thread-safe: the worker and the showing thread both call it."""

    def __init__(self, workers: int, clock=time.monotonic):
        self.workers = max(1, workers)
        self.clock = clock
        self.start = clock()
        self._lock = threading.Lock()
        self._status: dict[str, str] = {}  # task id -> its last status
        self._family: dict[str, str] = {}
        self._started: dict[str, float] = {}  # running task id -> when it started
        self._ran: set[str] = set()  # tasks this run started
        self._durations: dict[str, list[float]] = collections.defaultdict(list)  # family -> finished tasks' times
        self._stage: dict[str, tuple[str, int, int | None, str]] = {}  # task id -> (what, done, total, unit)
        self._bytes_finished = 0  # input bytes of the stages of finished tasks
        self._samples: collections.deque = collections.deque()  # (time, bytes processed), for the rate

    # -- fed by the worker and the tasks --------------------------------------------------------

    def scheduled(self, task_id: str, family: str, state: str) -> None:
        with self._lock:
            self._family[task_id] = family
            self._status[task_id] = state
            if state != PENDING and task_id in self._started:
                self._finish(task_id, state)

    def started(self, task_id: str, family: str) -> None:
        with self._lock:
            self._family[task_id] = family
            self._started[task_id] = self.clock()
            self._ran.add(task_id)

    def stage(self, task_id: str, what: str, done: int, total: int | None, unit: str) -> None:
        with self._lock:
            if task_id in self._started:
                self._stage[task_id] = (what, done, total, unit)

    def _finish(self, task_id: str, state: str) -> None:
        started = self._started.pop(task_id)
        if state == DONE:
            self._durations[self._family[task_id]].append(self.clock() - started)
        what, done, _, unit = self._stage.pop(task_id, ("", 0, None, ""))
        if unit == "B":
            self._bytes_finished += done

    def has_run(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._ran

    def running(self) -> list[str]:
        """What runs: each running task's stage ('extract enwiki-…bz2'), or its kind while it has said nothing."""
        with self._lock:
            return [self._stage[t][0] if t in self._stage else self._family[t] for t in sorted(self._started)]

    # -- the figures ------------------------------------------------------------------------------

    def _fraction(self, task_id: str) -> float | None:
        what, done, total, unit = self._stage.get(task_id, ("", 0, None, ""))
        return min(1.0, done / total) if total else None

    def _estimates(self, now: float) -> tuple[float, float, float, bool]:
        """(work done, work left, work in all, whether some of it is unknown), in seconds of one worker.

        A task of a kind none of which has finished yet counts as the mean of all finished tasks; before any
        has finished, it is unknown."""
        finished = [d for durations in self._durations.values() for d in durations]
        means = {family: sum(d) / len(d) for family, d in self._durations.items() if d}
        any_task = sum(finished) / len(finished) if finished else None
        unknown = False
        done = sum(finished)
        left = 0.0
        for task_id, state in self._status.items():
            mean = means.get(self._family[task_id], any_task)
            if task_id in self._started:
                elapsed = now - self._started[task_id]
                fraction = self._fraction(task_id)
                done += elapsed
                if fraction is not None and fraction >= 0.01:
                    left += elapsed * (1 - fraction) / fraction
                elif mean is not None:
                    left += max(mean - elapsed, 0.0)
                else:
                    unknown = True
            elif state == PENDING:
                if mean is not None:
                    left += mean
                else:
                    unknown = True
        return done, left, done + left, unknown

    def figures(self) -> dict:
        with self._lock:
            now = self.clock()
            counts = collections.Counter(self._status.values())
            processed = self._bytes_finished + sum(done for _, done, _, unit in self._stage.values() if unit == "B")
            self._samples.append((now, processed))
            while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_SECONDS:
                self._samples.popleft()
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
            if t1 - t0 >= 1.0:
                rate = (b1 - b0) / (t1 - t0)
            else:  # the first figures of the run
                rate = processed / (now - self.start) if now - self.start >= 1.0 else None
            work_done, work_left, work, unknown = self._estimates(now)
            parallel = min(self.workers, max(1, counts[PENDING]))  # a running task is still PENDING here
            return {
                "tasks": len(self._status), "done": counts[DONE], "failed": counts[FAILED],
                "running": [status(*self._stage[t]) if t in self._stage else self._family[t]
                            for t in sorted(self._started)],
                "pending": counts[PENDING] - len(self._started),
                "bytes": processed, "rate": rate, "elapsed": now - self.start,
                "left": work_left / parallel if self._durations or work_left else None, "left_unknown": unknown,
                "percent": round(100 * work_done / work, 1) if work and not unknown else
                round(100 * counts[DONE] / max(1, len(self._status)), 1),
            }


def line(f: dict) -> str:
    """'37/411 tasks done, 2 running · 512.3 MB processed (12.1 MB/s) · 4m10s in, about 12m05s left · extract …'"""
    parts = [f"{f['done']}/{f['tasks']} tasks done" + (f", {f['failed']} failed" if f["failed"] else "")
             + f", {len(f['running'])} running"]
    if f["bytes"]:
        parts.append(f"{f['bytes'] / MB:,.1f} MB processed" + (f" ({f['rate'] / MB:,.1f} MB/s)" if f["rate"] else ""))
    time_part = f"{duration(f['elapsed'])} in"
    if f["left"] is not None and not f["left_unknown"]:
        time_part += f", about {duration(f['left'])} left"
    elif f["left"] is not None and f["left"] >= 60:  # a lower bound: some kind of task has not finished one yet
        time_part += f", more than {duration(f['left'])} left"
    parts.append(time_part)
    parts.extend(f["running"])
    return " · ".join(parts)


def on_a_terminal() -> bool:
    """Whether stderr is a terminal that moves its cursor (not TERM=dumb, as Emacs' shell sets)."""
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


class TerminalLine:
    """One line on the terminal's last row, kept out of the scrolling rows above it (see the module docstring).

    Written with one write() of the whole escape sequence each time: save the cursor, go to the last row,
    clear it, the text, restore the cursor; so another process's output never lands inside it."""

    def __init__(self, fd: int):
        self.fd = fd
        self.rows = 0

    def _write(self, text: str) -> None:
        try:
            os.write(self.fd, text.encode("utf-8", "replace"))
        except OSError:
            pass

    def show(self, text: str) -> None:
        try:
            columns, rows = os.get_terminal_size(self.fd)
        except OSError:
            return
        if rows < 3:
            return
        if rows != self.rows:
            # A new line, then back up: the cursor is now above the last row, which the scrolling region leaves out.
            self._write(f"\n\x1b[1A\x1b7\x1b[1;{rows - 1}r\x1b8")
            self.rows = rows
        self._write(f"\x1b7\x1b[{rows};1H\x1b[2K{text[:columns - 1]}\x1b8")

    def close(self) -> None:
        if self.rows:
            self._write(f"\x1b7\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b8")
            self.rows = 0


class Display(threading.Thread):
    """The thread that reads the tasks' messages and shows the run's figures (module docstring)."""

    def __init__(self, run: RunProgress, *, on_error, luigid=None, root_id: str | None = None,
                 interval: float | None = None, terminal: bool | None = None):
        super().__init__(name="wikiprep-progress", daemon=True)
        self.run_progress, self.on_error, self.luigid, self.root_id = run, on_error, luigid, root_id
        self.interval = interval if interval is not None else progress().interval
        self.terminal = TerminalLine(sys.stderr.fileno()) if (
            terminal if terminal is not None else on_a_terminal()) else None
        self._stopping = threading.Event()

    def drain(self) -> None:
        """Every message the tasks have sent so far, taken in."""
        if channel.current is None:
            return
        for message in channel.current.receive():
            if "error" in message:
                self.on_error(message["error"])
            elif "task" in message:
                self.run_progress.stage(message["task"], message["what"], message["done"], message["total"],
                                        message["unit"])

    def run(self) -> None:
        now = time.monotonic()
        next_line = now + (TERMINAL_SECONDS if self.terminal else self.interval)
        next_luigid = now  # at once, then every LUIGID_SECONDS: a short run shows in luigid too
        while not self._stopping.is_set():
            wake = min(next_line, next_luigid if self.luigid else next_line)
            if channel.current is not None:
                channel.current.wait(max(0.0, wake - time.monotonic()))
            else:
                self._stopping.wait(max(0.0, wake - time.monotonic()))
            if self._stopping.is_set():
                break
            self.drain()
            now = time.monotonic()
            if now >= next_line:
                self.show()
                period = TERMINAL_SECONDS if self.terminal else self.interval
                next_line = max(next_line + period, now)  # on the interval's beat, never drifting later
            if self.luigid is not None and now >= next_luigid:
                self.tell_luigid()
                next_luigid = max(next_luigid + LUIGID_SECONDS, now)

    def show(self) -> None:
        text = line(self.run_progress.figures())
        # Luigi forks its task processes holding fork_lock: none inherits a lock this thread holds mid-write.
        with luigi.worker.fork_lock:
            if self.terminal is not None:
                self.terminal.show(text)
            else:
                logger.info("progress: %s", text)

    def tell_luigid(self) -> None:
        if self.run_progress.has_run(self.root_id):  # the root task's own stage says more now: its status is its own
            return
        figures = self.run_progress.figures()
        try:
            self.luigid.set_task_status_message(self.root_id, "run: " + line(figures))
            self.luigid.set_task_progress_percentage(self.root_id, figures["percent"])
        except Exception:  # noqa: BLE001 - luigid away: the worker's own requests say so; progress waits
            pass

    def stop(self) -> None:
        self._stopping.set()
        if channel.current is not None:
            channel.current.send({})  # wakes the wait
        self.join(timeout=10)
        self.drain()
        if self.luigid is not None:
            self.tell_luigid()  # the run's last figures
        if self.terminal is not None:
            self.terminal.close()
