"""Optional C extensions (`shardkit._examples`, `wikiprep._speedups`): each is a compiled twin of Python
code that stays the reference (tests compare the two byte for byte), built when a C compiler is found,
and set aside by an environment variable (SHARDKIT_PURE_PYTHON, WIKIPREP_PURE_PYTHON) for the tests and
for a user who wants to rule it out.
"""

from __future__ import annotations

import os


def python_requested(env: str) -> bool:
    """Whether environment variable `env` asks for the Python paths: any value but empty or "0"."""
    return os.environ.get(env, "") not in ("", "0")


SHARDKIT_PURE_PYTHON = "SHARDKIT_PURE_PYTHON"  # shardkit._examples: example.decode_batch's and records.read_records'
