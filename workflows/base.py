"""The base of every task: receipts as Luigi targets, and bad input reported as one line.

A PrepError (a wrong path, URL, date or parameter, a corrupt file) can surface in a task's
run(), requires() or complete(). Each is printed once, as `PROG: error: <message>` on stderr,
PROG being the task's `prog`: on Luigi's FAILURE event (run()), on its BROKEN_TASK event
(requires(), deps()), and by `PrepTask.complete` itself, since Luigi fires no event carrying
the exception of a failing complete() (worker._add logs only its formatted traceback). Luigi's
own log records of such a failure keep their first line, given the message, and lose the
traceback; at `--log-level DEBUG` they keep it, for whoever debugs the code rather than the input.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import luigi

from shardkit.atomic import read_dir_receipt, read_receipt, receipt_path
from shardkit.cli import error_line
from shardkit.errors import PrepError

logger = logging.getLogger("luigi-interface")

# The errors printed in this process, by message: the same bad input often fails several tasks.
_reported: dict[str, PrepError] = {}


def report_error(prog: str, error: PrepError) -> None:
    """Print `PROG: error: <message>` on stderr, unless this process printed that message already."""
    if str(error) not in _reported:
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


class _PrepErrorTracebacks(logging.Filter):
    """Cut the traceback of a PrepError from Luigi's log record, leaving its first line and the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if logger.isEnabledFor(logging.DEBUG):
            return True
        error = _logged_prep_error(record)
        if error is not None:
            first_line = record.getMessage().split("\n", 1)[0].rstrip(":")
            record.msg, record.args, record.exc_info = f"{first_line}: {error}", (), None
        return True


logger.addFilter(_PrepErrorTracebacks())


class ReceiptTarget(luigi.Target):
    """Complete when `path` (a file or a folder) has a receipt that still matches it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def exists(self) -> bool:
        if self.path.is_dir():
            return read_dir_receipt(self.path) is not None
        return read_receipt(self.path) is not None

    def receipt(self) -> dict:
        with open(receipt_path(self.path), encoding="utf-8") as f:
            return json.load(f)


class PrepTask(luigi.Task):
    """Base of every task: a PrepError is printed as one `{prog}: error: ...` line and carried to luigid.

    Tasks define output(), never complete(): this complete() is where its PrepErrors are reported.
    """

    prog = "wikiprep"  # the program that names itself in the error line

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

    def on_failure(self, exception):
        if isinstance(exception, PrepError):
            return str(exception)
        return super().on_failure(exception)


@PrepTask.event_handler(luigi.Event.FAILURE)
@PrepTask.event_handler(luigi.Event.BROKEN_TASK)
def _report_failure(task: PrepTask, exception: BaseException) -> None:
    """run() failed (FAILURE), or requires() / deps() did (BROKEN_TASK)."""
    if isinstance(exception, PrepError):
        report_error(task.prog, exception)
