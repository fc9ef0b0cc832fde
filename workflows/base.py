"""The base of every task: receipts as Luigi targets, and bad input reported as one line.

A PrepError (a wrong path, URL, date or parameter, a corrupt file) can surface in a task's
run(), requires() or complete(). Each is printed once, as `PROG: error: <message>` on stderr,
PROG being the task's `prog`: on Luigi's FAILURE event (run()), on its BROKEN_TASK event
(requires(), deps()), and by `PrepTask.complete` itself, since Luigi fires no event carrying
the exception of a failing complete() (worker._add logs only its formatted traceback). Luigi's
own log records of such a failure keep their first line, given the message, and lose the
traceback; at `--log-level DEBUG` (given, not Luigi's default) they keep it, for whoever debugs
the code rather than the input.

Progress: a long task passes `self.progress(what, unit)` to its library stage, which luigid's web UI
then shows as the task's percentage and status message. The libraries' own log lines (each stage's
closing INFO line: items, bytes, time, rate) go to the console at the run's log level, beside Luigi's.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import luigi

from shardkit.atomic import (atomic_dir, is_file_receipt, is_folder_receipt, read_dir_receipt, read_receipt,
                             receipt_path, remove_output, write_dir_receipt)
from shardkit.cli import error_line
from shardkit.errors import PrepError
from shardkit.manifest import REPORT_DIR
from shardkit.progress import Progress, status, throttle
from shardkit.signals import Terminated, raise_on_sigterm
from shardkit.verified import check_file

from . import channel, console

logger = logging.getLogger("luigi-interface")

# The errors printed in this process, by message: the same bad input often fails several tasks.
_reported: dict[str, PrepError] = {}


def report_error(prog: str, error: PrepError) -> None:
    """Print `PROG: error: <message>` on stderr, unless this process printed that message already; in a
    command-line run, once, at its end (`console.defer`)."""
    if str(error) not in _reported and not console.defer(error_line(prog, error)):
        print(error_line(prog, error), file=sys.stderr, flush=True)
    _reported[str(error)] = error


def _exception_line(error: BaseException) -> str:
    """The line that ends the error's formatted traceback: 'shardkit.errors.PrepError: <message>'."""
    return "".join(traceback.format_exception_only(error))


def _logged_prep_error(record: logging.LogRecord) -> PrepError | None:
    """The PrepError whose traceback a log record carries, if any.

    Luigi logs a run() failure with the exception as the record's exc_info; a requires()/deps()
    failure as traceback text, while handling the exception (so `sys.exc_info()` has it); a
    complete() failure as traceback text after `PrepTask.complete` reported the error. The text
    is only matched against those exceptions' own last line, never read for a message.
    """
    if record.exc_info:
        error = record.exc_info[1]
        return error if isinstance(error, PrepError) else None
    handled = sys.exc_info()[1]
    candidates = ([handled] if isinstance(handled, PrepError) else []) + list(_reported.values())
    text = record.getMessage()
    return next((e for e in candidates if text.endswith(_exception_line(e))), None)


def _option(flag: str) -> str | None:
    """The value of `--flag VALUE` or `--flag=VALUE` on the command line, if given."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.partition("=")[2]
    return None


def _log_level() -> str:
    """The run's log level as Luigi takes it: `--log-level` on the command line, else log_level in the Luigi
    config (LUIGI_DEFAULTS fill in INFO where no config sets it), upper case."""
    given = _option("--log-level")
    if given is not None:
        return given.upper()
    config = luigi.configuration.get_config()
    return next((config.get("core", key).upper() for key in ("log_level", "log-level")
                 if config.has_option("core", key)), "INFO")


def _debugging() -> bool:
    """Tracebacks wanted: `--log-level DEBUG` on the command line, or log_level DEBUG in the Luigi config.

    Luigi's own default level is DEBUG too, but a user who ran from a folder without luigi.cfg
    asked for nothing: bad input stays one line unless DEBUG was asked for.
    """
    return _log_level() == "DEBUG"


class _PrepErrorTracebacks(logging.Filter):
    """Cut Luigi's repetition of a PrepError from its log record, leaving its first line (which task failed), and
    drop the records of an interrupted task: the error line and the interrupt's line are printed once, last."""

    def filter(self, record: logging.LogRecord) -> bool:
        uncaught = record.exc_info and isinstance(record.exc_info[1], PrepError) and record.exc_info[1].prog
        if uncaught:
            # A parameter that does not parse or is missing: raised while Luigi's command line builds
            # the root task, before any task runs, and logged by `luigi.retcodes` as uncaught.
            report_error(record.exc_info[1].prog, record.exc_info[1])
        if _debugging():
            return True
        if uncaught or (record.exc_info and isinstance(record.exc_info[1], (KeyboardInterrupt, Terminated))):
            return False
        if _logged_prep_error(record) is not None:
            record.msg, record.args, record.exc_info = record.getMessage().split("\n", 1)[0].rstrip(":"), (), None
        return True


# What the project's luigi.cfg sets that a run must have wherever it starts: Luigi reads luigi.cfg
# from the current folder only, and without these a failed run exits 0, a task that returns
# without its output counts as done, and bad input ends in Luigi's DEBUG chatter. A value that
# any config file sets wins; these fill only what none set.
LUIGI_DEFAULTS = {
    "core": {"log_level": "INFO"},
    "retcode": {"already_running": "10", "missing_data": "20", "not_run": "25", "task_failed": "30",
                "scheduling_error": "35", "unhandled_exception": "40"},
    "worker": {"check_complete_on_run": "true"},
    "resources": {"wikimedia_http": "2"},
}


def _fill_luigi_defaults() -> None:
    config = luigi.configuration.get_config()
    for section, values in LUIGI_DEFAULTS.items():
        if not config.has_section(section):
            config.add_section(section)
        for key, value in values.items():
            if not any(config.has_option(section, k) for k in (key, key.replace("_", "-"))):
                config.set(section, key, value)


# The libraries log under their package names; Luigi's default logging set-up gives a handler to its
# own "luigi-interface" logger alone, so without this their lines (warnings included) would reach
# the console only through Python's last-resort handler, and their INFO lines not at all. They get
# Luigi's format and the run's level, unless a logging configuration file (`--logging-conf-file`,
# `[core] logging_conf_file`) or Luigi's `no_configure_logging` says how logging is set up. They
# still propagate: Luigi's own set-up gives the root logger no handler, so nothing prints twice.
LIBRARY_LOGGERS = ("shardkit", "wikiprep", "imagenet_prep", "trainers")


class _Console(logging.StreamHandler):
    """A handler on whatever sys.stderr is when it writes (as Python's last-resort handler), so that a
    process that swaps stderr after importing the tasks (a test runner) is never written to a closed stream."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _configure_library_logging() -> None:
    config = luigi.configuration.get_config()
    if (_option("--logging-conf-file") or config.get("core", "logging_conf_file", None)
            or config.getboolean("core", "no_configure_logging", False)):
        return
    level = getattr(logging, _log_level(), logging.INFO)
    handler = _Console()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    handler.setLevel(level)
    for name in LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        if not any(isinstance(h, _Console) for h in library.handlers):
            library.addHandler(handler)
            library.setLevel(level)


def setup() -> None:
    """What a run of these tasks needs of its process, done once, where the run starts (importing the tasks
    changes nothing): Luigi's command line (`luigi --module workflows`, which runs this as it imports the
    package), `python -m workflows`, or a program that calls `luigi.build` itself.

    - PrepError tracebacks cut from Luigi's log, leaving one line (`_PrepErrorTracebacks`);
    - the project's Luigi settings wherever the run starts (`LUIGI_DEFAULTS`);
    - the libraries' log lines on the console, at the run's level;
    - SIGTERM (Slurm's time limit, preemption, `kill`) unwinds a running task like an exception, so its
      open atomic writes remove their temporaries; the forked worker processes inherit the handler;
    - a luigid run's workers are ClusterWorkers, a local run's `worker.Worker`s: both show the run's progress
      and stop their task processes quietly on Ctrl-C (`worker.install`);
    - the command line's run ends with its answer: the error lines, where the output is, or what was
      interrupted and how to resume (`console.install`).

    Calling it again changes nothing.
    """
    from .worker import install

    if not any(isinstance(f, _PrepErrorTracebacks) for f in logger.filters):
        logger.addFilter(_PrepErrorTracebacks())
    _fill_luigi_defaults()
    _configure_library_logging()
    raise_on_sigterm()
    install()
    console.install()


# ---------------------------------------------------------------------------------------------
# Parameters that name their flag in an error. Luigi parses command-line values before any task
# exists, and its own message ("invalid literal for int()") names neither the flag nor the task.

class _FlagNamed:
    """A Luigi parameter that knows its flag (`--num-shards`) and program, for one error line, and its bounds.

    `min_value`/`max_value` are checked in `normalize`, which Luigi applies to command-line and constructor
    values alike: a value out of bounds never makes a task. `below` replaces "must be at least N" where
    the bound has a reason worth saying."""

    expected = "a valid value"

    def __init__(self, *args, min_value=None, max_value=None, below: str | None = None, **kwargs):
        self.min_value, self.max_value, self.below = min_value, max_value, below
        super().__init__(*args, **kwargs)

    def __set_name__(self, owner, name):
        if hasattr(super(), "__set_name__"):
            super().__set_name__(owner, name)
        # A luigi.Config's parameters are given as --<section>-<name> (`download.retries`: --download-retries).
        section = f"{owner.__name__}_" if isinstance(owner, type) and issubclass(owner, luigi.Config) else ""
        self.flag = "--" + (section + name).replace("_", "-")
        self.prog = getattr(owner, "prog", "wikiprep")

    def _error(self, text: str) -> PrepError:
        return PrepError(text, prog=getattr(self, "prog", "wikiprep"))

    def parse(self, x):
        try:
            return super().parse(x)
        except ValueError:
            raise self._error(f"{getattr(self, 'flag', 'a parameter')} {x!r}: expected {self.expected}") from None

    def normalize(self, x):
        x = super().normalize(x)
        flag = getattr(self, "flag", "a parameter")
        if self.min_value is not None and x < self.min_value:
            raise self._error(f"{flag} {x}: {self.below or f'must be at least {self.min_value}'}")
        if self.max_value is not None and x > self.max_value:
            raise self._error(f"{flag} {x}: must be at most {self.max_value}")
        return x


class IntParameter(_FlagNamed, luigi.IntParameter):
    expected = "a whole number"


class FloatParameter(_FlagNamed, luigi.FloatParameter):
    expected = "a number"


class BoolParameter(_FlagNamed, luigi.BoolParameter):
    expected = "true or false"


class OptionalParameter(_FlagNamed, luigi.OptionalParameter):
    """A text or none; a subclass checks the text in `normalize` (raising `self._error`)."""


class ChoiceParameter(_FlagNamed, luigi.ChoiceParameter):
    """One of `choices`, named in the error in the order given (Luigi keeps them as a set)."""

    def __init__(self, *args, choices, **kwargs):
        super().__init__(*args, choices=choices, **kwargs)
        self.expected = " or ".join(choices)


class MalformedReceipt(PrepError):
    """A receipt that parses but has not the shape its writer gives: read where a task that trusts it reads it."""


class ReceiptTarget(luigi.Target):
    """Complete when `path` (a file or a folder) has a receipt that still matches it.

    `keys` are the receipt's own keys that the tasks after this one read (`stats`, ...), each with its JSON
    type (dict, list, str, int): a receipt without one, or with one of another type, is no receipt, as is one
    without the shape `shardkit.atomic` gives every receipt (an object with the size and sha256, or a folder's
    files): the task runs again, its output is made again and compared with what is there (identical: kept,
    and the receipt replaced), never a traceback where the receipt is read.

    An output whose receipt says it was committed but which no longer matches it (removed, truncated,
    a file of a folder missing: `damage`) is damaged: before its task runs again it is removed
    (`remove_damaged`, on Luigi's START event), so that the rerun writes it afresh instead of finding a
    different file in its place. Only what a receipt proves this pipeline wrote is ever removed."""

    def __init__(self, path: str | Path, keys: dict[str, type] | None = None):
        self.path = Path(path)
        self.keys = keys or {}

    def _has_keys(self, receipt: dict | None) -> bool:
        """`receipt` is one (not None) and holds every one of `keys` with its type (True is not an int here)."""
        return receipt is not None and all(
            isinstance(receipt.get(key), kind) and (kind is bool or not isinstance(receipt.get(key), bool))
            for key, kind in self.keys.items())

    def exists(self) -> bool:
        if self.path.is_dir():
            return self._has_keys(read_dir_receipt(self.path))
        return self._has_keys(read_receipt(self.path))

    def receipt(self) -> dict:
        """The receipt as it is on disk; MalformedReceipt when it is not of a receipt's shape (`keys` included),
        OSError when there is none. Read it of a complete task (`exists()` judged its shape)."""
        rp = receipt_path(self.path)
        try:
            with open(rp, encoding="utf-8") as f:
                held = json.load(f)
        except (ValueError, RecursionError):
            held = None
        shaped = is_folder_receipt(held) if self.path.is_dir() or isinstance(held, dict) and "files" in held \
            else is_file_receipt(held)
        if not (shaped and self._has_keys(held)):
            raise MalformedReceipt(f"{rp}: not a receipt of the shape this pipeline writes (edited or damaged); "
                                   f"run the same command again: {self.path.name} is then checked and its receipt "
                                   f"written again")
        return held

    def _held_receipt(self) -> dict | None:
        """The receipt as it is on disk, whether or not the output still matches it; None without one of a
        receipt's shape (`keys` included): such an output is not known to be ours, and is never removed."""
        try:
            return self.receipt()
        except (OSError, MalformedReceipt):
            return None

    def damage(self) -> list[tuple[Path, str]]:
        """The committed files that no longer match their receipt, each with what is wrong; [] when the output
        is whole or was never committed (no receipt: a run killed before it, which the rerun completes)."""
        held = self._held_receipt()
        if held is None or self.exists():
            return []
        if "files" in held:  # a folder
            return [(self.path, "its files no longer match its receipt")]
        return [(self.path, _size_problem(self.path, held.get("size")))]

    def remove_damaged(self) -> None:
        for path, problem in self.damage():
            logger.warning("%s: %s; removed, to be made again", path, problem)
            remove_output(path)

    def verify(self) -> None:
        """Hash the file against its receipt (`shardkit.verified.check_file`): for a task that reads only part of
        it (a sample), before it commits anything made of it. A damaged file is removed with its receipt and
        named in the PrepError (Damaged) raised; the task's rerun makes it again. Readers that read a file whole
        need not call this: they open it with `shardkit.verified.open_committed`, which hashes as they read."""
        check_file(self.path)


def _size_problem(path: Path, size) -> str:
    actual = _file_size(path)
    return "missing, though its receipt says it was committed" if actual is None else \
        f"{actual} bytes, its receipt says {size}"


class IndexedTarget(ReceiptTarget):
    """A record file whose receipt also names its index file (`index`: file, size, sha256): complete only when
    both still have the sizes recorded."""

    def _index(self, held: dict) -> tuple[Path, int] | None:
        index = held.get("index")
        if not isinstance(index, dict):
            return None
        return self.path.parent / str(index.get("file")), index.get("size")

    def exists(self) -> bool:
        held = read_receipt(self.path)
        if not self._has_keys(held):
            return False
        index = self._index(held)
        return index is None or _file_size(index[0]) == index[1]

    def damage(self) -> list[tuple[Path, str]]:
        held = self._held_receipt()
        if held is None or self.exists():
            return []
        damaged = [(self.path, _size_problem(self.path, held.get("size")))]
        index = self._index(held)
        if index is not None:
            damaged.append((index[0], _size_problem(index[0], index[1])))
        return damaged  # a record file and its index are written together: both go


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


class ManifestTarget(ReceiptTarget):
    """A finished dataset: MANIFEST.json with its receipt, and every file it lists still at its listed size (a
    stat per file: a rerun notices a shard, an index or stats.json removed or truncated, and rebuilds it).
    `wikiprep verify` hashes every file against the manifest: the full re-check."""

    def _listed(self) -> list[tuple[Path, int]]:
        try:
            manifest = json.loads(self.path.read_text(encoding="utf-8"))
            return [(self.path.parent / entry["path"], entry["size"]) for entry in manifest["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def exists(self) -> bool:
        return super().exists() and all(_file_size(path) == size for path, size in self._listed())

    def damage(self) -> list[tuple[Path, str]]:
        if self._held_receipt() is None or self.exists():
            return []
        # MANIFEST.json itself, then the listed files still there at another size (missing ones are simply made
        # again). The record files among them are their own tasks' outputs, rebuilt before this one runs.
        return super().damage() + [(path, f"{_file_size(path)} bytes, MANIFEST.json says {size}")
                                   for path, size in self._listed() if _file_size(path) not in (None, size)]


def report_target(dataset_dir: str | Path) -> ReceiptTarget:
    """The report of a finished dataset: `report/` inside it, outside its MANIFEST.json."""
    return ReceiptTarget(Path(dataset_dir) / REPORT_DIR)


def commit_report(dataset_dir: str | Path, write) -> None:
    """`write(folder)` builds the report of `dataset_dir` in a temporary folder, committed as one (`atomic_dir`),
    then its receipt, last: a run killed on the way leaves no half report, and the rerun makes it whole.

    The report names the dataset by its folder's name, never by its path, and holds no time: the same
    dataset gives the same bytes, so a duplicate run's report is accepted as identical.
    """
    target = report_target(dataset_dir)
    with atomic_dir(target.path) as tmp:
        write(tmp)
    write_dir_receipt(target.path)


# luigid hears of a task's progress at most this often: each report is an HTTP request to it.
PROGRESS_SECONDS = 2.0
# The run's progress (workflows.progress) hears of it at most this often: each report is a write to a pipe.
RUN_PROGRESS_SECONDS = 0.5


class PrepTask(luigi.Task):
    """Base of every task: a PrepError is printed as one `{prog}: error: ...` line and carried to luigid.

    Tasks define output(), never complete(): this complete() is where its PrepErrors are reported.
    """

    prog = "wikiprep"  # the program that names itself in the error line

    @classmethod
    def get_param_values(cls, params, args, kwargs):
        """Luigi's values, with a missing parameter reported as the flag to give, in one line."""
        try:
            return super().get_param_values(params, args, kwargs)
        except luigi.parameter.MissingParameterException:
            family = cls.get_task_family()
            missing = [name for name, p in params if name not in kwargs and not p.has_task_value(family, name)]
            flags = ", ".join("--" + name.replace("_", "-") for name in missing)
            raise PrepError(f"{family}: {flags} must be given", prog=cls.prog) from None

    def complete(self):
        try:
            self.check_before_work()
            return super().complete()
        except PrepError as error:
            report_error(self.prog, error)
            raise

    def check_before_work(self) -> None:
        """Raise PrepError when these parameters must not run, nor reuse what is on disk.

        Called by complete(), the first thing Luigi asks of a task: an output made with other
        parameters is refused here, before any work starts, rather than silently returned.
        """

    def progress(self, what: str, unit: str) -> Progress:
        """A library stage's `progress`: for luigid, the task's percentage and a status message such as
        'extract enwiki-…bz2: 12.3 of 40.1 MB' (unit 'B' for bytes, else the items' name), sent at most
        every PROGRESS_SECONDS (each is a request to the scheduler); for the run's progress
        (`workflows.progress`), the same figures through the run's channel, at most every RUN_PROGRESS_SECONDS.
        Outside a Luigi worker it does nothing."""
        def report(done: int, total: int | None) -> None:
            if callable(getattr(self, "set_progress_percentage", None)) and total:
                self.set_progress_percentage(round(100 * done / total, 1))
            if callable(getattr(self, "set_status_message", None)):
                self.set_status_message(status(what, done, total, unit))

        def tell_the_run(done: int, total: int | None) -> None:
            channel.send({"task": self.task_id, "what": what, "done": done, "total": total, "unit": unit})

        to_luigid = throttle(report, PROGRESS_SECONDS)

        def both(done: int, total: int | None) -> None:
            tell_the_run(done, total)
            to_luigid(done, total)

        # One throttle in the stage's loop (as before the run's progress), the slower luigid one behind it.
        return throttle(both, RUN_PROGRESS_SECONDS)

    def on_failure(self, exception):
        if isinstance(exception, PrepError):
            return str(exception)
        return super().on_failure(exception)


@PrepTask.event_handler(luigi.Event.START)
def _remove_damaged_outputs(task: PrepTask) -> None:
    """A task about to run (so incomplete): its outputs that no longer match their receipts go first."""
    for target in luigi.task.flatten(task.output()):
        if isinstance(target, ReceiptTarget):
            target.remove_damaged()


@PrepTask.event_handler(luigi.Event.FAILURE)
@PrepTask.event_handler(luigi.Event.BROKEN_TASK)
def _report_failure(task: PrepTask, exception: BaseException) -> None:
    """run() failed (FAILURE), or requires() / deps() did (BROKEN_TASK)."""
    if isinstance(exception, PrepError):
        report_error(task.prog, exception)
