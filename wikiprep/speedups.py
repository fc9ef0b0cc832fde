"""Which implementation of the instance writer's loops runs: the compiled `_speedups` or pure Python.

`wikiprep/_speedups.c` (a plain CPython C extension, built by `pip install`/`make setup` when a C
compiler is found, skipped otherwise) holds compiled twins of the loops of `instances` and of the
tokenizer's cache: the same bytes, several times faster. The Python functions stay the reference,
and tests/test_speedups.py runs both on the same inputs and compares every byte.

WIKIPREP_PURE_PYTHON=1 (any value but empty or 0) makes every run take the Python paths: for
the tests, and for a user who wants to rule the extension out.
"""

from __future__ import annotations

import random
from types import ModuleType

from shardkit.extensions import python_requested

try:
    from . import _speedups as _compiled
except ImportError:  # not built: no compiler at install time, or a source tree used without `make setup`
    _compiled = None

PURE_PYTHON_ENV = "WIKIPREP_PURE_PYTHON"


def built() -> bool:
    """True when the extension was built and imports."""
    return _compiled is not None


def compiled() -> ModuleType | None:
    """The extension module, or None when it is not built or WIKIPREP_PURE_PYTHON asks for Python."""
    return None if python_requested(PURE_PYTHON_ENV) else _compiled


def python_reason() -> str | None:
    """Why the Python paths run, for a log line ("pure Python: ..."); None when the extension does."""
    if python_requested(PURE_PYTHON_ENV):
        return f"pure Python: {PURE_PYTHON_ENV} is set"
    if _compiled is None:
        return "pure Python: wikiprep._speedups is not built (make setup with a C compiler builds it)"
    return None


def compiled_rng(rng: random.Random) -> ModuleType | None:
    """The extension when it can stand in for `rng`'s draws: a plain random.Random (a subclass may draw differently)."""
    return compiled() if type(rng) is random.Random else None


def shuffle(rng: random.Random, items) -> None:
    """`rng.shuffle(items)` for an array('q'): the same order and the same state of `rng` afterwards."""
    fast = compiled_rng(rng)
    if fast is None or len(items) >= 1 << 32:
        rng.shuffle(items)
        return
    version, state, gauss = rng.getstate()
    rng.setstate((version, fast.shuffle(state, items), gauss))
