"""The Layout table (docs/architecture.md, "Layout") holds: imports (and the C sources' includes) point down the
package list, the data libraries stay light, and the sdist holds what the C extensions include.

Read from the source with `ast` (every import statement, also those inside functions), so a
new module that reaches the wrong way fails here before anyone depends on it.
"""

import ast
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = {"shardkit", "wikiprep", "imagenet_prep", "trainers", "workflows", "testkit"}

# What each package may import of ours: the "imports of ours" column of docs/architecture.md's Layout table.
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


_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _local_includes(source: Path) -> list[Path]:
    """The files `source` (C) includes with quotes, resolved as the compiler does: from its own folder."""
    return [(source.parent / name).resolve() for name in _LOCAL_INCLUDE.findall(source.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_c_sources_include_only_what_the_layout_allows(package):
    wrong = {}
    for source in sorted((REPO / package).rglob("*.[ch]")):
        for header in _local_includes(source):
            owner = header.relative_to(REPO).parts[0]
            if owner != package and owner not in ALLOWED[package]:
                wrong[str(source.relative_to(REPO))] = str(header.relative_to(REPO))
    assert not wrong, f"includes against the Layout: {wrong}"


def test_the_sdist_holds_every_header_the_extensions_include(tmp_path):
    """An sdist (what pip builds from where no wheel fits) compiles the optional extensions from the files it
    holds: a header setuptools leaves out fails the build there, and optional=True turns that into a silent
    install without them. Built from a copy of what setup.py reads, so nothing is written in the repo."""
    src = tmp_path / "src"
    for name in ("pyproject.toml", "setup.py", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    for package in sorted(OURS):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    run = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path), "sdist", "-d",
                          str(tmp_path)], cwd=src, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    (archive,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (tree,) = (tmp_path / "unpacked").iterdir()
    sources = sorted(tree.rglob("*.c"))
    assert {p.relative_to(tree).as_posix() for p in sources} >= {"wikiprep/_speedups.c", "shardkit/_examples.c"}
    missing = {str(s.relative_to(tree)): str(h) for s in sources for h in _local_includes(s) if not h.is_file()}
    assert not missing, f"included but not in the sdist: {missing}"


def test_data_libraries_load_without_keras_matplotlib_tensorflow_or_luigi():
    code = ("import pkgutil, importlib, sys\n"
            "import shardkit, wikiprep, imagenet_prep\n"
            "for pkg in (shardkit, wikiprep, imagenet_prep):\n"
            "    for m in pkgutil.iter_modules(pkg.__path__):\n"
            "        importlib.import_module(f'{pkg.__name__}.{m.name}')\n"
            "print(sorted({n.split('.')[0] for n in sys.modules} & {'keras', 'matplotlib', 'tensorflow', 'luigi'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
