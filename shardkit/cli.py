"""One runner for every command-line program: argparse in, one call, errors as one line.

`run(PROG, parser, commands)` parses the arguments, calls the function named by the
sub-command, and turns a PrepError or an OSError into `PROG: error: <what, where>` on
stderr with exit status 1 (never a traceback); Ctrl-C exits 130, SIGTERM 143, after every open
atomic write has removed its temporary.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Mapping

from .errors import PrepError
from .signals import Terminated, raise_on_sigterm


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of records to show, of worker processes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def error_line(prog: str, e: BaseException) -> str:
    """`prog: error: ...` for a PrepError, or for an OSError (a folder without write permission, a full disk)."""
    if isinstance(e, OSError) and not isinstance(e, PrepError):
        return f"{prog}: error: {e.filename}: {e.strerror or e}" if e.filename else f"{prog}: error: {e.strerror or e}"
    return f"{prog}: error: {e}"


def run(prog: str, parser: argparse.ArgumentParser, commands: Mapping[str, Callable[[argparse.Namespace], int | None]],
        argv=None) -> int:
    args = parser.parse_args(argv)
    raise_on_sigterm()
    try:
        return commands[args.command](args) or 0
    except (PrepError, OSError) as e:
        print(error_line(prog, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        print(f"{prog}: terminated (SIGTERM); nothing half-written is left, run the same command again",
              file=sys.stderr)
        return e.code
