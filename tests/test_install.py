"""What a user installing the package gets: the wheel's packages, `--version`, help text with defaults, the
licence, the constraints `make setup` installs with.

The environment without TensorFlow (the pipeline, verify, inspect and stats run there) is `make test-install`
(testkit/install_check.py): it builds a fresh virtual environment, which takes minutes, so it is not in `make test`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from imagenet_prep.cli import build_parser as imagenet_parser
from wikiprep.cli import build_parser as wikiprep_parser

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("shardkit", "wikiprep", "imagenet_prep")


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                        "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (built,) = out.glob("wikiprep-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_only_the_three_libraries_with_every_subpackage(wheel):
    names = wheel.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    top = {t for t in top if not t.endswith(".so")}
    assert top == set(LIBRARIES)
    # every package of the source tree is in it (a subpackage left out of pyproject.toml breaks only installs)
    for library in LIBRARIES:
        for init in (ROOT / library).rglob("__init__.py"):
            assert init.relative_to(ROOT).as_posix() in names, f"{init.parent.relative_to(ROOT)} is not in the wheel"
    # the Luigi tasks, as wikiprep.workflows, and the licence
    for module in (ROOT / "workflows").glob("*.py"):
        assert f"wikiprep/workflows/{module.name}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)


def test_the_licence_is_apache_2_as_the_vendored_code():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == {"text": "Apache-2.0"}


def test_ranges_in_the_metadata_exact_pins_in_the_constraints():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11,<3.14"
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert not [r for r in requirements if "==" in r], "pyproject.toml gives ranges; constraints.txt pins"
    assert not [r for r in project["dependencies"] if r.startswith("tensorflow")], "TensorFlow is an extra"
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[name.lower().replace("_", "-")] = version
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower().replace("_", "-")
        assert name in pins, f"{name} has no pin in constraints.txt"


@pytest.mark.parametrize("command", [["wikiprep", "--version"], ["imagenet-prep", "--version"],
                                     ["python", "-m", "workflows", "--version"]])
def test_every_program_says_its_version(command):
    from importlib import metadata

    argv = [sys.executable, *command[1:]] if command[0] == "python" else [_bin(command[0]), *command[1:]]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    name = "workflows" if command[0] == "python" else command[0]
    assert r.stdout.strip() == f"{name} {metadata.version('wikiprep')} (Python {sys.version.split()[0]})"


def _optional_actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _optional_actions(sub)
        elif action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield parser.prog, action


@pytest.mark.parametrize("build", [wikiprep_parser, imagenet_parser], ids=["wikiprep", "imagenet-prep"])
def test_every_flag_has_help_that_gives_its_default(build):
    missing = []
    for prog, action in _optional_actions(build()):
        if not action.help:
            missing.append(f"{prog} {action.option_strings[0]}: no help")
        elif action.default not in (None, False, argparse.SUPPRESS) and "default" not in action.help:
            missing.append(f"{prog} {action.option_strings[0]}: default {action.default!r} not in its help")
    assert not missing, "\n".join(missing)


def test_verify_and_inspect_run_without_tensorflow(tmp_path):
    """TensorFlow blocked from import (as where it is not installed): the records are decoded without it."""
    from fixture_paths import GOOGLE_REFERENCE, REFERENCE_VOCAB

    out = tmp_path / "sample.tfrecord"
    r = subprocess.run([_bin("wikiprep"), "create-pretraining-data",
                        f"--input_file={GOOGLE_REFERENCE / 'inputs' / 'sample_text.txt'}", f"--output_file={out}",
                        f"--vocab_file={REFERENCE_VOCAB}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    without_tf = "import sys; sys.modules['tensorflow'] = None; from wikiprep.cli import main; sys.exit(main())"
    for args, expect in ((["verify", str(out)], f"OK {out}: 118 records in 1 files"),
                         (["inspect", str(out), "-n", "1", "--vocab-file", str(REFERENCE_VOCAB)], "[CLS]")):
        r = subprocess.run([sys.executable, "-c", without_tf, *args], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and expect in r.stdout, r.stderr[-2000:]
        assert "tensorflow" not in r.stderr.lower()
