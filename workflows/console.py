"""The end of a command-line run (`luigi --module workflows ...`): the last thing printed is the answer.

- **A failed run** ends with its `wikiprep: error: ...` line(s), after Luigi's execution summary: the
  lines are collected as the run goes (`defer`: from the worker's process, or through
  `workflows.channel` from the task processes) and printed once, in the order they came, when Luigi
  has printed its summary. A run that failed without one (an unexpected exception, whose traceback
  Luigi printed) ends with one line saying so.
- **A successful run** ends with `wikiprep: done: <where the output is>` (and its report).
- **Ctrl-C and SIGTERM** end the run with no traceback and one line: what was interrupted, that
  nothing half-written was kept, and the command that resumes it (the same command: `make ...` when
  make ran it, which says so in WIKIPREP_COMMAND), with exit status 130 (SIGINT) or 143 (SIGTERM).
  The task processes ignore SIGINT: the worker's process reports it once and stops them with SIGTERM,
  on which their open atomic writes remove their temporaries (`workflows.worker.Worker`).

- **A mistyped task or flag** is one line, naming the closest ones: `luigi --module workflows Pretrain129`
  (Luigi's own is a traceback) and `--num-shard 3` (a prefix, which argparse accepts by default as
  `--num-shards`: refused) or `--bogus` (argparse's own is the usage of every parameter of every task,
  hundreds of lines), exit status 2 as argparse's.

Luigi's command line has no hook where its run ends; `install()`, called by `workflows.setup()` when
`luigi --module workflows` imports the package, wraps `luigi.interface._run`, which the command line
calls once the package is imported. `luigi.build` from a program is left as it is: its errors are
printed where they happen.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import re
import shlex
import signal
import sys
from typing import NoReturn

import luigi.cmdline_parser
import luigi.execution_summary
import luigi.interface
import luigi.task
import luigi.task_register
from luigi.scheduler import DONE

from shardkit.signals import Terminated

from . import channel

_deferring = False
_run_pid: int | None = None
_errors: dict[str, None] = {}  # the error lines of the run, in the order they came
_interrupted_while: list[str] = []  # what was running when the run was interrupted


def defer(line: str) -> bool:
    """Keep `line` (`prog: error: ...`) for the end of a command-line run; False when no such run is on, or the
    line cannot reach its worker's process (its caller prints it then)."""
    if not _deferring:
        return False
    if os.getpid() == _run_pid:
        _errors.setdefault(line)
        return True
    return channel.send({"error": line}, must_arrive=True)


def note_interrupted(running: list[str]) -> None:
    """What the worker was running when an interrupt ended the run (called by the worker as it stops)."""
    _interrupted_while[:] = running


def command_line() -> str:
    """The command the user ran: make's (WIKIPREP_COMMAND), or this program's own command line."""
    given = os.environ.get("WIKIPREP_COMMAND", "").strip()
    if given:
        return given
    if sys.argv and sys.argv[0].endswith("__main__.py"):  # python -m luigi ...
        return shlex.join(sys.orig_argv)
    return shlex.join(sys.argv)


def interrupted_line(prog: str, signum: int) -> str:
    how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    what = ", ".join(_interrupted_while) if _interrupted_while else "the run"
    return (f"{prog}: interrupted ({how}) while running {what}; nothing half-written was kept. "
            f"To resume, run the same command again: {command_line()}")


def _root_outcome(task: luigi.Task) -> str:
    """Where a finished root task's output is: a dataset folder and its report, or its output paths."""
    output = task.output()
    if isinstance(output, dict) and "manifest" in output and "report" in output:
        folder = output["manifest"].path.parent
        return f"{folder} (its report: {output['report'].path / 'report.html'})"
    return ", ".join(str(t.path) for t in luigi.task.flatten(output) if hasattr(t, "path"))


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run(run, *args, **kwargs):
    """luigi.interface._run, ending with the run's answer (module docstring)."""
    global _deferring, _run_pid
    _errors.clear()
    _interrupted_while.clear()
    _deferring, _run_pid = True, os.getpid()
    try:
        result = run(*args, **kwargs)
    except BaseException as stop:
        # The errors found before the run stopped, then what stopped it: an interrupt's line, or (printed by
        # Luigi's command line as it logs the exception) the line of an error no task caught (luigid gone).
        _deferring = False
        for line in _errors:
            _print(line)
        if isinstance(stop, (KeyboardInterrupt, Terminated)):
            signum = signal.SIGINT if isinstance(stop, KeyboardInterrupt) else signal.SIGTERM
            _print(interrupted_line("wikiprep", signum))
            raise SystemExit(128 + signum) from None
        raise
    _deferring = False  # an error raised from here on (a parameter that does not parse) is printed at once
    for line in _errors:
        _print(line)
    history = result.worker._add_task_history
    root = luigi.execution_summary._root_task(result.worker) if history else None  # the task given on the command line
    prog = getattr(root, "prog", "wikiprep")
    # Done by the worker's own account (never by asking complete() again, which may read a server once more).
    if root is not None and [status for task, status, _ in history if task.task_id == root.task_id][-1] == DONE:
        _print(f"{prog}: done: {_root_outcome(root)}")
    elif not _errors:
        _print(f"{prog}: error: the run did not finish ({result.one_line_summary.strip()}); "
               f"see the lines above, then run the same command again: {command_line()}")
    return result


def _close(name: str, names, *, plain) -> str:
    """' (did you mean X, Y or Z?)' for the names closest to a mistyped one (the `plain` ones first: a root task's
    own flag, a task outside a namespace), or ''."""
    names = sorted(names)
    close = (difflib.get_close_matches(name, [n for n in names if plain(n)], n=3, cutoff=0.6)
             or difflib.get_close_matches(name, names, n=3, cutoff=0.6))
    if not close:
        return ""
    close = sorted(close)
    return f" (did you mean {', '.join(close[:-1]) + ' or ' if len(close) > 1 else ''}{close[-1]}?)"


def _parser_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """argparse's error(), as one line: an unknown flag is named with the closest flags."""
    unknown = re.fullmatch(r"unrecognized arguments: (.*)", message)
    if unknown:
        flags = [arg.partition("=")[0] for arg in unknown.group(1).split() if arg.startswith("--")]
        options = [option for option in parser._option_string_actions if option.startswith("--")]
        if flags:
            # A task's flag given for another task carries its name (--SplitPart-num-shards): not plain.
            message = "; ".join(f"{flag}: no such parameter{_close(flag, options, plain=str.islower)}"
                                for flag in flags)
    _print(f"wikiprep: error: {message}")
    raise SystemExit(2)


def _one_line_parser(build):
    """CmdlineParser._build_parser, whose parser takes no prefix of a flag for the flag, and errs in one line."""
    def build_parser(*args, **kwargs):
        parser = build(*args, **kwargs)
        parser.allow_abbrev = False
        parser.error = functools.partial(_parser_error, parser)
        return parser

    build_parser.one_line = True
    return build_parser


def mistyped_task(error: BaseException) -> str | None:
    """'no task X (did you mean Y?)' for Luigi's error on a task name it does not know, else None."""
    missing = re.match(r"No task (\S+)\.", str(error))
    if not (isinstance(error, luigi.task_register.TaskClassNotFoundException) and missing):
        return None
    name = missing.group(1)
    names = luigi.task_register.Register.task_names()
    return f"no task {name}{_close(name, names, plain=lambda n: '.' not in n)}"


def _excepthook(hook):
    """sys.excepthook, with a task name Luigi does not know as one line (Luigi raises it where nothing catches)."""
    def one_line_for_a_mistyped_task(kind, error, tb):
        mistyped = mistyped_task(error)
        if mistyped:
            _print(f"wikiprep: error: {mistyped}")
        else:
            hook(kind, error, tb)

    one_line_for_a_mistyped_task.one_line = True
    return one_line_for_a_mistyped_task


def install_parsing() -> None:
    """Make Luigi's command-line parser take no prefix of a flag for the flag, and err in one line."""
    parser = luigi.cmdline_parser.CmdlineParser
    if not getattr(parser._build_parser, "one_line", False):
        parser._build_parser = staticmethod(_one_line_parser(parser._build_parser))


def install() -> None:
    """Make `luigi --module workflows ...` end with its answer, and its mistakes one line (module docstring)."""
    if not getattr(sys.excepthook, "one_line", False):
        sys.excepthook = _excepthook(sys.excepthook)
    install_parsing()
    run = luigi.interface._run
    if getattr(run, "ends_with_the_answer", False):
        return

    def run_ending_with_the_answer(*args, **kwargs):
        return _run(run, *args, **kwargs)

    run_ending_with_the_answer.ends_with_the_answer = True
    luigi.interface._run = run_ending_with_the_answer
