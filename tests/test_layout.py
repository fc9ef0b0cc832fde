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


# ---------------------------------------------------------------------------------------------
# Output layouts (wikiprep.layouts): named in one package only

# The code that writes, checks or reads BERT datasets; tests/, testkit/ and benchmarks/ address particular layouts
# on purpose (they test and measure them), and imagenet_prep/ and shardkit/ know nothing of BERT's layouts.
LAYOUT_USERS = ("wikiprep", "workflows", "trainers")
LAYOUTS_PACKAGE = REPO / "wikiprep" / "layouts"


def _layout_words() -> tuple[set[str], set[str], set[str]]:
    """(the words that name a layout: the registry's names, its flags' values, its file and folder suffixes
    without their dot or underscore; the registry's names; the package's modules)."""
    from wikiprep import layouts

    words = set()
    for layout in layouts.LAYOUTS.values():
        words |= {layout.name, *layout.flags, *(s.lstrip("._") for s in (*layout.suffixes, layout.folder_suffix))}
    return ({w.lower() for w in words if w}, {name.lower() for name in layouts.LAYOUTS},
            {p.stem for p in LAYOUTS_PACKAGE.glob("*.py") if p.stem != "__init__"})


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _names_a_layout(path: Path, words: set[str], names: set[str], modules: set[str]) -> list[str]:
    """Where the module at `path` names a layout, as 'line: what'. A layout is named by

    - a string that is a layout's word, alone or as a file name pattern ("hdf5", "remask", ".tfrecord",
      "*.tfrecord", "_remask"; in an f-string too); prose that mentions one is not (messages, help, docstrings);
    - an identifier that is one ("args.remask", "TFRECORD"), or a name defined here that holds one of the
      registry's names ("is_hdf5_path", "REMASK_INSTANCE"): a layout's own code lives in its module;
    - an import of a module of the package, or an attribute of the package that is one ("layouts.hdf5"):
      `wikiprep.layouts` itself is the interface (`Layout`, the registry, the flags' mapping).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docstrings = _docstrings(tree)
    word = re.compile(rf"[\w*]*[._*]?({'|'.join(map(re.escape, sorted(words)))})", re.IGNORECASE)
    found = []

    def where(node, what):
        found.append(f"{path.relative_to(REPO) if REPO in path.parents else path.name}:{node.lineno}: {what}")

    def layouts_module(module: str | None, level: int) -> bool:
        parts = (module or "").split(".")
        return parts[:2] == ["wikiprep", "layouts"] if level == 0 else "layouts" in parts

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if word.fullmatch(node.value):
                where(node, repr(node.value))
        elif isinstance(node, (ast.Name, ast.Attribute, ast.keyword, ast.arg)):
            ident = getattr(node, {ast.Name: "id", ast.Attribute: "attr"}.get(type(node), "arg"))
            if isinstance(node, ast.Attribute) and ident in modules and isinstance(node.value, ast.Name) \
                    and node.value.id == "layouts":
                where(node, f"layouts.{ident}")
            elif ident and ident.lower() in words:
                where(node, ident)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or \
                isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            ident = node.id if isinstance(node, ast.Name) else node.name
            if any(n in ident.lower() for n in names):
                where(node, f"defines {ident}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:  # the names an import binds here
                bound = alias.asname or alias.name.split(".")[0 if isinstance(node, ast.Import) else -1]
                if any(n in bound.lower() for n in names):
                    where(node, f"imports {bound}")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[:2] == ["wikiprep", "layouts"] and len(alias.name.split(".")) > 2:
                    where(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and layouts_module(node.module, node.level):
            module = (node.module or "").split(".")
            inner = module[module.index("layouts") + 1:]
            imported = [a.name for a in node.names if a.name in modules]
            if inner or imported:
                where(node, f"from {'.' * node.level}{node.module or ''} import "
                            f"{', '.join(a.name for a in node.names)}")
    return sorted(found, key=lambda line: int(line.split(":")[1]))


def test_nothing_outside_the_layouts_package_names_a_layout():
    """A new layout is one module in wikiprep/layouts/ and one line of its registry: no other code says which
    layouts there are, so none has to change (the flags are mapped to a `Layout` value where they enter, by the
    package, and the value is passed on)."""
    found = []
    for package in LAYOUT_USERS:
        for path in sorted((REPO / package).rglob("*.py")):
            if LAYOUTS_PACKAGE not in path.parents:
                found += _names_a_layout(path, *_layout_words())
    assert not found, "layouts named outside wikiprep/layouts/:\n" + "\n".join(found)


def test_the_rule_finds_what_it_is_about(tmp_path):
    """The check above on code that names layouts in each way it looks for, and on code that does not."""
    bad = tmp_path / "bad.py"
    bad.write_text('from wikiprep.layouts import hdf5\nfrom .layouts.remask import LAYOUT\n'
                   'import wikiprep.layouts.tfrecord\nif fmt == "hdf5" or name.endswith(".h5"): pass\n'
                   'GLOB = "wiki_*.tfrecord"\nx = f"{base}_remask"\nif args.remask: pass\n'
                   'def is_hdf5_path(p): pass\ny = layouts.remask.LAYOUT\nz = instances.TFRECORD\n')
    found = [line.split(": ", 1)[1] for line in _names_a_layout(bad, *_layout_words())]
    assert found == ["imports hdf5", "from wikiprep.layouts import hdf5", "from .layouts.remask import LAYOUT",
                     "import wikiprep.layouts.tfrecord", "'hdf5'", "'.h5'", "'wiki_*.tfrecord'", "'_remask'", "remask",
                     "defines is_hdf5_path", "layouts.remask", "TFRECORD"]
    good = tmp_path / "good.py"
    good.write_text('"""Writes TFRecords, hdf5 or remask: prose."""\nfrom wikiprep import layouts\n'
                    'from wikiprep.layouts import DEFAULT, Layout\nname = f"{prefix}_{i:05d}{layout.shard_suffix}"\n'
                    'msg = "the remask layout is written as TFRecords"\nds = tf.data.TFRecordDataset(files)\n')
    assert _names_a_layout(good, *_layout_words()) == []


# The Wikipedia corpus is one source among others: the BERT stages take documents from any `wikiprep.corpus.Source`,
# and only its own package and the Wikipedia workflow module bind them to the dump.
WIKIPEDIA = "wikiprep.wikipedia"
WIKIPEDIA_BINDING = REPO / "workflows" / "wiki.py"


def _modules_imported(path: Path) -> set[str]:
    """Every module an import statement of `path` names, dotted, relative imports resolved from the file's package."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return names


def test_only_the_wikipedia_workflow_imports_the_wikipedia_package():
    wrong = {}
    for package in sorted(OURS - {"testkit"}):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == WIKIPEDIA_BINDING or path.is_relative_to(REPO / "wikiprep" / "wikipedia"):
                continue
            found = sorted(m for m in _modules_imported(path) if m == WIKIPEDIA or m.startswith(WIKIPEDIA + "."))
            if found:
                wrong[str(path.relative_to(REPO))] = found
    assert not wrong, f"imports of the Wikipedia source outside its package and workflows/wiki.py: {wrong}"


def test_the_wikipedia_rule_sees_relative_and_absolute_imports():
    module = REPO / "wikiprep" / "sentences.py"
    assert "wikiprep.corpus.Document" in _modules_imported(module)
    assert {"wikiprep.wikipedia", "wikiprep.wikipedia.source"} <= _modules_imported(WIKIPEDIA_BINDING)
