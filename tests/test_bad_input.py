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
    if argv[0] == "luigi":  # the project's luigi.cfg, read when run from the root as the README says
        env["LUIGI_CONFIG_PATH"] = str(REPO / "luigi.cfg")
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


def _status(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """Change the sample dump's dumpstatus.json on the dumps site (the first part's entry is `files[0]`)."""
    def setup(root: Path) -> None:
        path = root / "dumps-site" / DEMO_WIKI / DEMO_DATE / "dumpstatus.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        change(doc)
        path.write_text(json.dumps(doc), encoding="utf-8")
    return setup


def _first_file(doc: dict) -> dict:
    files = doc["jobs"]["articlesdump"]["files"]
    return files[sorted(files)[0]]


def _replace_with_dev_zero(rel: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / rel).unlink()
        (root / rel).symlink_to("/dev/zero")
    return setup


# ---------------------------------------------------------------------------------------------
# The table

CREATE = ("wikiprep", "create-pretraining-data", "--input_file={root}/corpus.txt", "--vocab_file={root}/vocab.txt")
PRETRAIN = ("luigi", "Pretrain128", "--data-dir", "{root}/data", "--dump-url", "{site}", "--vocab-file", "{root}/vocab.txt")
DOWNLOAD = ("luigi", "DownloadDump", "--data-dir", "{root}/data", "--dump-url", "{site}")

CASES: list[Bad] = [
    # --- wikiprep create-pretraining-data
    Bad("create-input-glob-matches-nothing",
        ("wikiprep", "create-pretraining-data", "--input_file={root}/nothing*.txt", "--output_file={root}/out.tfrecord",
         "--vocab_file={root}/vocab.txt"), "matches no file"),
    Bad("create-vocab-missing", CREATE[:3] + ("--vocab_file={root}/missing.txt", "--output_file={root}/out.tfrecord"),
        "missing.txt"),

    # --- wikiprep verify / inspect / stats
    Bad("verify-changed-byte", ("wikiprep", "verify", "{root}/wiki_ds"), "checksum differs",
        setup=_write("wiki_ds/vocab.txt", "[PAD]\n")),

    # --- luigi: --wiki and --dump-date are folder names, refused unless plain, before anything is written
    Bad("wiki-escapes-data-dir", PRETRAIN + ("--wiki", "../../escape", "--dump-date", "{date}"), "--wiki '../../escape'"),
    Bad("wiki-with-slash", DOWNLOAD + ("--wiki", "en/wiki", "--dump-date", "{date}"), "--wiki 'en/wiki'"),
    Bad("wiki-hidden", DOWNLOAD + ("--wiki", ".enwiki", "--dump-date", "{date}"), "--wiki '.enwiki'"),
    Bad("wiki-absolute", PRETRAIN + ("--wiki", "{root}/elsewhere", "--dump-date", "{date}"), "--wiki '/"),
    Bad("dump-date-escapes-data-dir", PRETRAIN + ("--wiki", "{wiki}", "--dump-date", "../../x"), "--dump-date '../../x'"),
    Bad("dump-date-not-a-day", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "20261301"), "--dump-date '20261301'"),

    # --- luigi: dumpstatus.json of the wrong JSON types, or endless; refused before anything is written
    Bad("status-jobs-is-a-list", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        "dumpstatus.json: jobs is an array, not an object", setup=_status(lambda d: d.update(jobs=[]))),
    Bad("status-job-is-null", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        "dumpstatus.json: jobs.articlesdump is null, not an object",
        setup=_status(lambda d: d["jobs"].update(articlesdump=None))),
    Bad("status-files-is-a-list", PRETRAIN + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        "dumpstatus.json: jobs.articlesdump.files is an array, not an object",
        setup=_status(lambda d: d["jobs"]["articlesdump"].update(files=[]))),
    Bad("status-size-is-a-string", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        ".size is the string '12', not a size in bytes", setup=_status(lambda d: _first_file(d).update(size="12"))),
    Bad("status-sha1-is-a-list", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        ".sha1 is an array, not 40 hex digits", setup=_status(lambda d: _first_file(d).update(sha1=[]))),
    Bad("status-is-dev-zero", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        f"{{site}}/{{wiki}}/{{date}}/dumpstatus.json is larger than 8 MiB",
        setup=_replace_with_dev_zero(f"dumps-site/{DEMO_WIKI}/{DEMO_DATE}/dumpstatus.json")),
    Bad("sha1sums-is-dev-zero", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        f"{{site}}/{{wiki}}/{{date}}/{{wiki}}-{{date}}-sha1sums.txt is larger than 8 MiB",
        setup=_replace_with_dev_zero(f"dumps-site/{DEMO_WIKI}/{DEMO_DATE}/{DEMO_WIKI}-{DEMO_DATE}-sha1sums.txt")),

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
