"""One runner for every command-line program: argparse in, one call, errors as one line.

`run(PROG, parser, commands)` parses the arguments, calls the function named by the
sub-command, and turns a PrepError or an OSError into `PROG: error: <what, where>` on
stderr with exit status 1 (never a traceback); Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Mapping

from .errors import PrepError


def error_line(prog: str, e: BaseException) -> str:
    """`prog: error: ...` for a PrepError, or for an OSError (a folder without write permission, a full disk)."""
    if isinstance(e, OSError) and not isinstance(e, PrepError):
        return f"{prog}: error: {e.filename or ''}: {e.strerror or e}"
    return f"{prog}: error: {e}"


def run(prog: str, parser: argparse.ArgumentParser, commands: Mapping[str, Callable[[argparse.Namespace], int | None]],
        argv=None) -> int:
    args = parser.parse_args(argv)
    try:
        return commands[args.command](args) or 0
    except (PrepError, OSError) as e:
        print(error_line(prog, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
