"""The test suite's own contract: a plain clone has everything it needs, unchanged, and every test has one tier.

- tests/fixtures/ holds the reference files with their recorded SHA-256 (tests/fixtures/SHA256SUMS), every one
  of them listed: a fixture edited by mistake would make the parity tests compare against something else.
- No test, testkit or benchmarks code reads the folder beside the clone (`../shared`), which a user's clone
  does not have; the fixtures are found through tests/fixture_paths.py.
- TIERS in tests/conftest.py names every test module, and every function it singles out exists.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from fixture_paths import FIXTURES

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
TIER_NAMES = {"unit", "e2e", "daemons"}


def test_the_fixtures_are_the_recorded_bytes():
    recorded = {}
    for line in (FIXTURES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        recorded[name] = digest
    present = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file() and p.name != "SHA256SUMS"
               and p.suffix not in (".md", ".py") and "__pycache__" not in p.parts}
    assert present == set(recorded), "tests/fixtures/SHA256SUMS must list exactly the fixture files"
    for name, digest in recorded.items():
        assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == digest, name
    assert len(list((FIXTURES / "google-reference" / "expected").glob("*.jsonl.gz"))) == 9


def test_nothing_reads_the_folder_beside_the_clone():
    beside = re.compile(r"""parents\[2\]\s*/\s*["']shared|\.parent\s*/\s*["']shared|["']\.\.["']\s*,\s*["']shared"""
                        r"""|\.\./shared""")
    offenders = []
    for folder in ("tests", "testkit", "benchmarks", "cluster", "workflows"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if beside.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_test_module_has_one_tier(tier_table):
    """Every module is in TIERS (collecting one that is not fails too), and each function singled out exists,
    else a renamed test would silently fall back to its module's tier. (An entry for a module not here, being
    written on another branch, say, does no harm.)"""
    modules = {p.stem for p in TESTS.glob("test_*.py")}
    assert modules <= set(tier_table), f"missing from TIERS in tests/conftest.py: {sorted(modules - set(tier_table))}"
    for module, entry in tier_table.items():
        default, exceptions = (entry, {}) if isinstance(entry, str) else entry
        assert default in TIER_NAMES and set(exceptions.values()) <= TIER_NAMES, module
        if module not in modules:
            continue
        tree = ast.parse((TESTS / f"{module}.py").read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert set(exceptions) <= functions, f"{module}: no such test {sorted(set(exceptions) - functions)}"
        assert all(tier != default for tier in exceptions.values()), f"{module}: an exception in its own tier"
