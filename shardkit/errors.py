"""The one exception type users see, and how its messages quote what came from outside.

Every stage raises `PrepError` for bad input: a message of one line saying what is
wrong and in which file, URL or parameter. The command-line entry points and the Luigi
tasks print that line (never a traceback) and exit non-zero.

A message that shows some of the bad input (a server's answer, a line of a file, a page
title) quotes it with `excerpt`: a short, escaped prefix, so a hostile or broken source can
neither flood the error line nor put control characters on the user's terminal.
"""

from __future__ import annotations

import reprlib

EXCERPT_CHARS = 60

# JSON-like values (a list where a number was expected) are shown by their outline.
_outline = reprlib.Repr()
_outline.maxlevel, _outline.maxlist, _outline.maxdict, _outline.maxstring, _outline.maxother = 2, 3, 3, 20, 20


class PrepError(Exception):
    """Bad input or a failed check, explained in one line for the user.

    `prog`, when known where the error is raised, is the program the line names (`wikiprep: error: ...`):
    an error raised where no program is at hand (a Luigi parameter parsed before any task exists) carries it
    to whoever prints it."""

    def __init__(self, message: str, *, prog: str | None = None):
        super().__init__(" ".join(str(message).split()))
        self.prog = prog


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """`value`, untrusted, as an error message may quote it: the repr() of at most its first `limit`
    characters (bytes for bytes), followed by '...' when it was cut. Other values (numbers, lists,
    dicts from a JSON file) by their reprlib outline, also cut at `limit` characters."""
    if isinstance(value, (str, bytes, bytearray)):
        text = repr(bytes(value[:limit]) if isinstance(value, bytearray) else value[:limit])
        return text + ("..." if len(value) > limit else "")
    text = _outline.repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
