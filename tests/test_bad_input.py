"""Bad input, table-driven: every program refuses it with one line and changes nothing it had made.

Each row of CASES is one bad input found by a hostile review (issue #13) or since. A row runs a
real command as users run it (a subprocess: `wikiprep`, `imagenet-prep` or `luigi --module
workflows`) in a fresh folder holding good inputs and good outputs (the `world` below), after its
`setup` damaged or added something. Every row asserts the same contract:

- a non-zero exit;
- exactly one `<program>: error:` line on stderr, containing `expect` (and never a traceback);
- every file that existed before is byte-identical after (a failed run changes no good output);
- no file was added, except paths matching the row's `may_add` globs (what the run had fully
  committed before it failed, e.g. a verified download), and never a temporary (`*.tmp-*`).

To add a case: a row with a unique id, the argv (placeholders in braces are paths in the world),
the text the error line must contain, and a setup function when the input must be built.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from workflows import DEMO_DATE, DEMO_WIKI

REPO = Path(__file__).resolve().parents[1]

# How each program is started: this interpreter and the package's own entry point, so a checkout on
# PYTHONPATH is what runs (the console scripts are thin wrappers of the same functions).
PROGRAMS = {
    "wikiprep": [sys.executable, "-c", "import sys; from wikiprep.cli import main; sys.exit(main())"],
    "imagenet-prep": [sys.executable, "-c", "import sys; from imagenet_prep.cli import main; sys.exit(main())"],
    "luigi": [sys.executable, "-m", "luigi", "--module", "workflows"],
}
# The program named in the error line of each command.
ERROR_PROG = {"wikiprep": "wikiprep", "imagenet-prep": "imagenet-prep", "luigi": "wikiprep"}

VOCAB_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "and", "to", "in", "is", "was",
               "it", "city", "river", "north", "south", "old", "new", "##s", "##ed", "##ing", ".", ","]
TEXT = ("The old city is north of the river.\nIt was new and the river was old.\n\n"
        "A city is in the south.\nThe north river is old.\nIt is a new city.\n")


@dataclass(frozen=True)
class Bad:
    id: str
    argv: tuple[str, ...]
    expect: str
    setup: Callable[[Path], None] | None = None
    may_add: tuple[str, ...] = ()
    timeout: float = 300
    luigi_local: bool = field(default=True)  # luigi rows run with --local-scheduler --workers 1


# ---------------------------------------------------------------------------------------------
# The world every row starts from: good inputs and good outputs, built once, copied per row.

def _build_world(root: Path) -> None:
    """vocab.txt and corpus.txt; dumps-site/ (the sample dump); wiki_ds/ and imagenet_ds/, two finished
    datasets with their manifests; imagenet/ (the sample ImageNet tree they were converted from)."""
    from imagenet_prep import samples as imagenet_samples
    from shardkit.manifest import write_manifest
    from shardkit.records import read_records
    from wikiprep import samples as wiki_samples

    (root / "vocab.txt").write_text("\n".join(VOCAB_WORDS) + "\n", encoding="utf-8")
    (root / "corpus.txt").write_text(TEXT * 20, encoding="utf-8")
    wiki_samples.write_sample_dump(root / "dumps-site", wiki=DEMO_WIKI, date=DEMO_DATE)

    wiki_ds = root / "wiki_ds"
    wiki_ds.mkdir()
    shards = [wiki_ds / f"wiki_{i:05d}.tfrecord" for i in range(2)]
    r = _run(["wikiprep", "create-pretraining-data", f"--input_file={root / 'corpus.txt'}",
              "--output_file=" + ",".join(map(str, shards)), f"--vocab_file={root / 'vocab.txt'}",
              "--index_file=" + ",".join(str(p.with_suffix(".index")) for p in shards),
              "--max_seq_length=32", "--max_predictions_per_seq=5"], root)
    assert r.returncode == 0, r.stderr
    shutil.copy(root / "vocab.txt", wiki_ds / "vocab.txt")
    (wiki_ds / "dataset.json").write_text(json.dumps({"max_seq_length": 32, "max_predictions_per_seq": 5}))
    counts = {p.name: sum(1 for _ in read_records(p)) for p in shards}
    (wiki_ds / "stats.json").write_text(json.dumps({"total": {"instances": sum(counts.values())}}))
    write_manifest(wiki_ds, counts)

    layout = imagenet_samples.write_sample_tree(root / "imagenet", classes=4, per_class=6, val_per_class=2)
    r = _run(["imagenet-prep", "convert", "--train-dir", layout["train_dir"], "--validation-dir",
              layout["validation_dir"], "--val-labels", layout["val_labels"], "--output-dir", str(root / "imagenet_ds"),
              "--synsets-file", str(_write_synsets(root, layout)), "--train-shards", "2", "--validation-shards", "1"],
             root)
    assert r.returncode == 0, r.stderr


def _write_synsets(root: Path, layout: dict) -> Path:
    path = root / "imagenet" / "synsets.txt"
    path.write_text("".join(f"{d.name}\n" for d in sorted(Path(layout["train_dir"]).iterdir())), encoding="utf-8")
    return path


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run(PROGRAMS[argv[0]] + list(argv[1:]), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    _build_world(root)
    return root


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _expand(arg: str, root: Path) -> str:
    return arg.format(root=root, site=(root / "dumps-site").as_uri(), wiki=DEMO_WIKI, date=DEMO_DATE)


# ---------------------------------------------------------------------------------------------
# Setups

def _write(rel: str, data: str | bytes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return setup


def _link(rel: str, target: str, hard: bool = False) -> Callable[[Path], None]:
    """`rel`: a symbolic (or hard) link to the world's `target`."""
    def setup(root: Path) -> None:
        (os.link if hard else os.symlink)(root / target, root / rel)
    return setup


# ---------------------------------------------------------------------------------------------
# The table

CREATE = ("wikiprep", "create-pretraining-data", "--input_file={root}/corpus.txt", "--vocab_file={root}/vocab.txt")

CASES: list[Bad] = [
    # --- wikiprep create-pretraining-data
    Bad("create-input-glob-matches-nothing",
        ("wikiprep", "create-pretraining-data", "--input_file={root}/nothing*.txt", "--output_file={root}/out.tfrecord",
         "--vocab_file={root}/vocab.txt"), "matches no file"),
    Bad("create-vocab-missing", CREATE[:3] + ("--vocab_file={root}/missing.txt", "--output_file={root}/out.tfrecord"),
        "missing.txt"),
    # generation flags beyond GenerationOptions.check's bounds (within them, the original's instances)
    Bad("create-seq-too-short", CREATE + ("--output_file={root}/out.tfrecord", "--max_seq_length=4"),
        "max_seq_length=4: must be at least 5"),
    Bad("create-seq-too-long", CREATE + ("--output_file={root}/out.tfrecord", "--max_seq_length=100000000"),
        "max_seq_length=100000000: must be at most 1000000"),
    Bad("create-negative-predictions", CREATE + ("--output_file={root}/out.tfrecord", "--max_predictions_per_seq=-1"),
        "max_predictions_per_seq=-1: must be within [0, 1000000]"),
    Bad("create-masked-lm-prob-above-1", CREATE + ("--output_file={root}/out.tfrecord", "--masked_lm_prob=1.5"),
        "masked_lm_prob=1.5: must be within [0, 1]"),
    Bad("create-short-seq-prob-nan", CREATE + ("--output_file={root}/out.tfrecord", "--short_seq_prob=nan"),
        "short_seq_prob=nan: must be within [0, 1]"),
    Bad("create-dupe-factor-0", CREATE + ("--output_file={root}/out.tfrecord", "--dupe_factor=0"),
        "dupe_factor=0: must be at least 1"),
    # file lists that name no file, or an empty one (#13, part 4)
    Bad("create-input-list-names-no-file", ("wikiprep", "create-pretraining-data", "--input_file=,",
                                            "--vocab_file={root}/vocab.txt", "--output_file={root}/out.tfrecord"),
        "--input_file: no input file given"),
    Bad("create-output-list-names-no-file", CREATE + ("--output_file=,",), "--output_file=,: names no file"),
    Bad("create-output-list-empty-name", CREATE + ("--output_file={root}/a.tfrecord,,{root}/b.tfrecord",),
        "an empty file name in the list"),
    Bad("create-index-list-names-no-file", CREATE + ("--output_file={root}/out.tfrecord", "--index_file=,"),
        "--index_file=,: names no file"),
    Bad("create-index-count-differs", CREATE + ("--output_file={root}/a.tfrecord,{root}/b.tfrecord",
                                                "--index_file={root}/a.index"),
        "--index_file lists 1 files for 2 --output_file files"),
    # an output or index that is an input, the vocab or another output, under any name (#13, part 2)
    Bad("create-output-is-the-input", CREATE + ("--output_file={root}/corpus.txt",),
        "output file {root}/corpus.txt is the same file as the input file {root}/corpus.txt"),
    Bad("create-output-is-the-vocab-through-a-symlink", CREATE + ("--output_file={root}/link.tfrecord",),
        "output file {root}/link.tfrecord is the same file as the vocab file {root}/vocab.txt",
        setup=_link("link.tfrecord", "vocab.txt")),
    Bad("create-output-is-a-hard-link-of-the-input", CREATE + ("--output_file={root}/hard.tfrecord",),
        "output file {root}/hard.tfrecord is the same file as the input file {root}/corpus.txt",
        setup=_link("hard.tfrecord", "corpus.txt", hard=True)),
    Bad("create-index-is-the-vocab", CREATE + ("--output_file={root}/out.tfrecord", "--index_file={root}/vocab.txt"),
        "index file {root}/vocab.txt is the same file as the vocab file {root}/vocab.txt"),
    Bad("create-index-is-its-output",
        CREATE + ("--output_file={root}/out.tfrecord", "--index_file={root}/out.tfrecord"),
        "index file {root}/out.tfrecord is the same file as the output file {root}/out.tfrecord"),
    Bad("create-two-outputs-one-file", CREATE + ("--output_file={root}/a.tfrecord,{root}/wiki_ds/../a.tfrecord",),
        "output file {root}/wiki_ds/../a.tfrecord is the same file as the output file {root}/a.tfrecord"),
    Bad("create-output-is-a-folder", CREATE + ("--output_file={root}/wiki_ds",), "{root}/wiki_ds: is a folder"),
    # an index that cannot be written commits no output, and changes no good one (#13, part 3)
    Bad("create-index-below-a-file", CREATE + ("--output_file={root}/wiki_ds/wiki_00000.tfrecord",
                                               "--index_file={root}/corpus.txt/wiki_00000.index"),
        "index file {root}/corpus.txt/wiki_00000.index: {root}/corpus.txt is not a folder"),
    Bad("create-second-index-below-a-file", CREATE + ("--output_file={root}/a.tfrecord,{root}/b.tfrecord",
                                                      "--index_file={root}/a.index,{root}/corpus.txt/b.index"),
        "index file {root}/corpus.txt/b.index: {root}/corpus.txt is not a folder"),

    # --- wikiprep verify / inspect / stats
    Bad("verify-changed-byte", ("wikiprep", "verify", "{root}/wiki_ds"), "checksum differs",
        setup=_write("wiki_ds/vocab.txt", "[PAD]\n")),

    # --- imagenet-prep
    Bad("imagenet-verify-no-manifest", ("imagenet-prep", "verify", "{root}/imagenet"), "stray file"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(case: Bad, world: Path, tmp_path: Path):
    root = tmp_path / "w"
    shutil.copytree(world, root, symlinks=True)
    if case.setup is not None:
        case.setup(root)
    before = _snapshot(root)
    argv = [_expand(a, root) for a in case.argv]
    if argv[0] == "luigi" and case.luigi_local:
        argv += ["--local-scheduler", "--workers", "1"]
    r = _run(argv, root, case.timeout)

    assert r.returncode != 0, f"exit 0:\n{r.stderr[-3000:]}"
    prog = ERROR_PROG[argv[0]]
    lines = [line for line in r.stderr.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1, f"expected one '{prog}: error:' line, got {len(lines)}:\n{r.stderr[-3000:]}"
    assert _expand(case.expect, root) in lines[0], lines[0]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]

    after = _snapshot(root)
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert not changed, f"changed or removed: {changed}"
    added = sorted(set(after) - set(before))
    assert not [p for p in added if ".tmp-" in p], f"temporaries left: {added}"
    unexpected = [p for p in added if not any(fnmatch.fnmatch(p, g) for g in case.may_add)]
    assert not unexpected, f"added: {unexpected}"
