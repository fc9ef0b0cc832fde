"""One runner for every command-line program: argparse in, one call, errors as one line.

`run(PROG, parser, commands)` parses the arguments, calls the function named by the
sub-command, and turns a PrepError or an OSError into `PROG: error: <what, where>` on
stderr with exit status 1 (never a traceback); Ctrl-C exits 130, SIGTERM 143, after every open
atomic write has removed its temporary.

When the reader of standard output goes away (`wikiprep inspect F | head -3`), the program
ends quietly with exit status 141, what a shell reports for `cat` or `grep` killed by SIGPIPE
in the same place: the output was cut, which `set -o pipefail` scripts may want to know, but
nothing went wrong to print. Python's default instead raises BrokenPipeError at the next write,
and again when it flushes standard output at exit.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
from typing import Callable, Mapping

from .errors import PrepError
from .signals import Terminated, raise_on_sigterm, received


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of records to show, of worker processes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def version_text(prog: str, distribution: str = "wikiprep") -> str:
    """`PROG VERSION (Python X.Y.Z)`, the installed distribution's version, for `--version`."""
    from importlib import metadata

    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "(not installed)"
    return f"{prog} {version} (Python {sys.version.split()[0]})"


def add_version(parser: argparse.ArgumentParser, prog: str) -> None:
    """`--version` on a program's top-level parser: print `version_text` and exit 0."""
    parser.add_argument("--version", action="version", version=version_text(prog))


def error_line(prog: str, e: BaseException) -> str:
    """`prog: error: ...` for a PrepError, or for an OSError (a folder without write permission, a full disk)."""
    if isinstance(e, OSError) and not isinstance(e, PrepError):
        return f"{prog}: error: {e.filename}: {e.strerror or e}" if e.filename else f"{prog}: error: {e.strerror or e}"
    return f"{prog}: error: {e}"


# The exit status of a program whose standard output closed: 128 + SIGPIPE, as a shell reports a SIGPIPE death.
CLOSED_OUTPUT_STATUS = 128 + signal.SIGPIPE


def warn(prog: str, message: str | None) -> None:
    """`PROG: warning: <message>` on stderr (nothing for None): what a user should know of a run that succeeded."""
    if message is not None:
        print(f"{prog}: warning: {message}", file=sys.stderr)


def stdout_closed() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone: poll() flags its write end POLLERR."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def silence_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's flush at exit finds no closed pipe
    (it would print "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def run(prog: str, parser: argparse.ArgumentParser, commands: Mapping[str, Callable[[argparse.Namespace], int | None]],
        argv=None) -> int:
    args = parser.parse_args(argv)
    raise_on_sigterm()
    try:
        status = commands[args.command](args) or 0
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
        return status
    except BrokenPipeError as e:
        if not stdout_closed():  # another pipe or socket (an output file that is a FIFO): a real error
            print(error_line(prog, e), file=sys.stderr)
            return 1
        silence_stdout()
        return CLOSED_OUTPUT_STATUS
    except (PrepError, OSError) as e:
        if received():  # failed because of a SIGTERM whose Terminated was swallowed (see shardkit.signals)
            return _terminated(prog, Terminated())
        print(error_line(prog, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        return _terminated(prog, e)


def _terminated(prog: str, e: Terminated) -> int:
    print(f"{prog}: terminated (SIGTERM); nothing half-written is left, run the same command again", file=sys.stderr)
    return e.code
