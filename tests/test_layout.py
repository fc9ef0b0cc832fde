"""The README's Layout holds: imports point down the package list, and the data libraries stay light.

Read from the source with `ast` (every import statement, also those inside functions), so a
new module that reaches the wrong way fails here before anyone depends on it.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = {"shardkit", "wikiprep", "imagenet_prep", "trainers", "workflows", "testkit"}

# What each package may import of ours (README, "Layout").
ALLOWED = {
    "shardkit": set(),
    "wikiprep": {"shardkit"},
    "imagenet_prep": {"shardkit"},
    "trainers": {"shardkit", "wikiprep", "imagenet_prep"},
    "workflows": {"shardkit", "wikiprep", "imagenet_prep", "trainers"},
    "testkit": {"shardkit", "wikiprep", "imagenet_prep"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_the_layout_allows(package):
    wrong = {}
    for path in sorted((REPO / package).rglob("*.py")):
        bad = (_imports(path) & OURS) - ALLOWED[package] - {package}
        if bad:
            wrong[str(path.relative_to(REPO))] = sorted(bad)
    assert not wrong, f"imports against the Layout: {wrong}"


def test_data_libraries_load_without_keras_matplotlib_tensorflow_or_luigi():
    code = ("import pkgutil, importlib, sys\n"
            "import shardkit, wikiprep, imagenet_prep\n"
            "for pkg in (shardkit, wikiprep, imagenet_prep):\n"
            "    for m in pkgutil.iter_modules(pkg.__path__):\n"
            "        importlib.import_module(f'{pkg.__name__}.{m.name}')\n"
            "print(sorted({n.split('.')[0] for n in sys.modules} & {'keras', 'matplotlib', 'tensorflow', 'luigi'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
