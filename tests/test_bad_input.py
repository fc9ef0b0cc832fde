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
import re
import resource
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
    file_size_limit: int | None = None  # RLIMIT_FSIZE: a write beyond it fails as on a full disk (EFBIG)


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


def _run(argv: list[str], cwd: Path, timeout: float = 300, file_size_limit: int | None = None
         ) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)

    def limit():
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(PROGRAMS[argv[0]] + list(argv[1:]), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    _build_world(root)
    return root


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _expand(arg: str, root: Path) -> str:
    """`{root}`, `{site}` (the sample dumps site's file:// URL), `{wiki}` and `{date}` filled in."""
    for key, value in (("root", str(root)), ("site", (root / "dumps-site").as_uri()), ("wiki", DEMO_WIKI),
                       ("date", DEMO_DATE)):
        arg = arg.replace("{" + key + "}", value)
    return arg


# ---------------------------------------------------------------------------------------------
# Setups

def _write(rel: str, data: str | bytes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return setup


def _manifest_edit(folder: str, edit: Callable[[dict], None]) -> Callable[[Path], None]:
    """Rewrite folder/MANIFEST.json after `edit` changed it in place ({root} in strings is expanded)."""
    def setup(root: Path) -> None:
        path = root / folder / "MANIFEST.json"
        manifest = json.loads(path.read_text())
        edit(manifest)
        path.write_text(_expand(json.dumps(manifest), root))
    return setup


def _short_instance() -> bytes:
    """A BERT instance of 4 tokens in a dataset of 32: parses as an Example, breaks the schema."""
    from shardkit.example import encode_example
    return encode_example([("input_ids", "int64", [2, 5, 3, 3]), ("input_mask", "int64", [1] * 32),
                           ("segment_ids", "int64", [0] * 32), ("masked_lm_positions", "int64", [1, 0, 0, 0, 0]),
                           ("masked_lm_ids", "int64", [5, 0, 0, 0, 0]),
                           ("masked_lm_weights", "float", [1.0] + [0.0] * 4), ("next_sentence_labels", "int64", [0])])


def _bad_record_at(shard: str, at: int, payload: bytes) -> Callable[[Path], None]:
    """Insert a framed record (valid CRCs) with `payload` at position `at` of a shard, and index it."""
    def setup(root: Path) -> None:
        from shardkit.records import read_records, write_records
        path = root / shard
        records = list(read_records(path))
        write_records(path, records[:at] + [payload] + records[at:], path.with_suffix(".index"))
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
# Without --wiki and --dump-date, for the rows that vary them.
DUMP_PRETRAIN = ("luigi", "Pretrain128", "--data-dir", "{root}/data", "--dump-url", "{site}", "--vocab-file",
                 "{root}/vocab.txt")
DOWNLOAD = ("luigi", "DownloadDump", "--data-dir", "{root}/data", "--dump-url", "{site}")

PRETRAIN = ("luigi", "Pretrain128", "--data-dir", "{root}/data", "--dump-url", "{site}", "--wiki", "{wiki}",
            "--dump-date", "{date}")

CASES: list[Bad] = [
    # --- wikiprep create-pretraining-data
    Bad("create-input-glob-matches-nothing",
        ("wikiprep", "create-pretraining-data", "--input_file={root}/nothing*.txt", "--output_file={root}/out.tfrecord",
         "--vocab_file={root}/vocab.txt"), "matches no file"),
    Bad("create-vocab-missing", CREATE[:3] + ("--vocab_file={root}/missing.txt", "--output_file={root}/out.tfrecord"),
        "missing.txt"),

    Bad("create-output-is-a-folder", CREATE + ("--output_file={root}/wiki_ds",), "{root}/wiki_ds: is a folder"),

    # --- wikiprep verify / inspect / stats
    Bad("verify-changed-byte", ("wikiprep", "verify", "{root}/wiki_ds"), "checksum differs",
        setup=_write("wiki_ds/vocab.txt", "[PAD]\n")),

    Bad("verify-manifest-is-a-list", ("wikiprep", "verify", "{root}/wiki_ds"), "not a manifest",
        setup=_write("wiki_ds/MANIFEST.json", "[]")),
    Bad("verify-manifest-is-null", ("wikiprep", "verify", "{root}/wiki_ds"), "not a manifest",
        setup=_write("wiki_ds/MANIFEST.json", "null")),
    Bad("verify-manifest-entry-wrong-type", ("wikiprep", "verify", "{root}/wiki_ds"), "an entry is str",
        setup=_write("wiki_ds/MANIFEST.json", '{"files": ["vocab.txt"]}')),
    Bad("verify-manifest-size-wrong-type", ("wikiprep", "verify", "{root}/wiki_ds"), '"size" is not',
        setup=_manifest_edit("wiki_ds", lambda m: m["files"][0].update(size="12"))),
    Bad("verify-manifest-path-escapes", ("wikiprep", "verify", "{root}/wiki_ds"), "leaves the folder",
        setup=_manifest_edit("wiki_ds", lambda m: m["files"][0].update(path="../corpus.txt"))),
    Bad("verify-manifest-absolute-path", ("wikiprep", "verify", "{root}/wiki_ds"), "leaves the folder",
        setup=_manifest_edit("wiki_ds", lambda m: m["files"][0].update(path="{root}/corpus.txt"))),
    Bad("verify-stray-temporary", ("wikiprep", "verify", "{root}/wiki_ds"), "a temporary left by an interrupted run",
        setup=_write("wiki_ds/wiki_00000.tfrecord.tmp-host-1", b"junk")),
    Bad("verify-stray-file", ("wikiprep", "verify", "{root}/wiki_ds"), "not listed in MANIFEST.json",
        setup=_write("wiki_ds/notes.txt", "mine")),
    Bad("stats-record-tensorflow-cannot-parse", ("wikiprep", "stats", "{root}/wiki_ds", "--out", "{root}/report"),
        "record 3: not a tf.train.Example", setup=_bad_record_at("wiki_ds/wiki_00000.tfrecord", 3, b"\x0a\x05hello")),
    Bad("stats-record-with-wrong-shape", ("wikiprep", "stats", "{root}/wiki_ds", "--out", "{root}/report"),
        "record 2: feature input_ids has", setup=_bad_record_at("wiki_ds/wiki_00000.tfrecord", 2, _short_instance())),
    Bad("inspect-n-zero", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord", "-n", "0"),
        "must be at least 1"),
    Bad("inspect-n-negative", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord", "-n", "-1"),
        "must be at least 1"),

    # --- luigi --module workflows: every parameter that can be judged is, before any download
    Bad("luigi-dump-date-missing", PRETRAIN[:-2], "--dump-date must be given"),
    Bad("luigi-num-shards-zero", PRETRAIN + ("--num-shards", "0"), "--num-shards 0: must be at least 1"),
    Bad("luigi-num-shards-not-a-number", PRETRAIN + ("--num-shards", "abc"), "--num-shards 'abc': expected a whole"),
    Bad("luigi-masked-lm-prob-not-a-number", PRETRAIN + ("--masked-lm-prob", "x"), "--masked-lm-prob 'x'"),
    Bad("luigi-do-lower-case-not-a-bool", PRETRAIN + ("--do-lower-case", "maybe"), "--do-lower-case 'maybe'"),
    Bad("luigi-dupe-factor-zero", PRETRAIN + ("--dupe-factor", "0"), "dupe_factor"),
    Bad("luigi-vocab-file-missing", PRETRAIN + ("--vocab-file", "{root}/missing.txt"), "{root}/missing.txt"),
    Bad("luigi-vocab-file-not-a-vocab", PRETRAIN + ("--vocab-file", "{root}/corpus.txt"), "{root}/corpus.txt"),
    Bad("luigi-vocab-size-tiny", PRETRAIN + ("--vocab-size", "3"), "--vocab-size 3"),
    Bad("luigi-data-dir-is-a-file", ("luigi", "Pretrain128", "--data-dir", "{root}/corpus.txt", "--dump-url", "{site}",
                                     "--dump-date", "{date}", "--wiki", "{wiki}"), "--data-dir {root}/corpus.txt: is a file"),
    Bad("luigi-more-shards-than-documents", PRETRAIN + ("--num-shards", "200", "--vocab-file", "{root}/vocab.txt"),
        "--num-shards 200:", may_add=("data/downloads/*", "data/downloads/*/*/*", "data/*/extracted/*",
                                      "data/*/punkt_*.json", "data/*/split/*/*/*", "data/*/.receipts/*",
                                      "data/*/*/.receipts/*", "data/*/split/*/.receipts/*", "data/*/extracted/.receipts/*"),
        timeout=600),

    # --- luigi: --wiki and --dump-date are folder names, refused unless plain, before anything is written
    Bad("wiki-escapes-data-dir", DUMP_PRETRAIN + ("--wiki", "../../escape", "--dump-date", "{date}"), "--wiki '../../escape'"),
    Bad("wiki-with-slash", DOWNLOAD + ("--wiki", "en/wiki", "--dump-date", "{date}"), "--wiki 'en/wiki'"),
    Bad("wiki-hidden", DOWNLOAD + ("--wiki", ".enwiki", "--dump-date", "{date}"), "--wiki '.enwiki'"),
    Bad("wiki-absolute", DUMP_PRETRAIN + ("--wiki", "{root}/elsewhere", "--dump-date", "{date}"), "--wiki '/"),
    Bad("dump-date-escapes-data-dir", DUMP_PRETRAIN + ("--wiki", "{wiki}", "--dump-date", "../../x"), "--dump-date '../../x'"),
    Bad("dump-date-not-a-day", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "20261301"), "--dump-date '20261301'"),

    # --- luigi: dumpstatus.json of the wrong JSON types, or endless; refused before anything is written
    Bad("status-jobs-is-a-list", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        "dumpstatus.json: jobs is an array, not an object", setup=_status(lambda d: d.update(jobs=[]))),
    Bad("status-job-is-null", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        "dumpstatus.json: jobs.articlesdump is null, not an object",
        setup=_status(lambda d: d["jobs"].update(articlesdump=None))),
    Bad("status-files-is-a-list", DUMP_PRETRAIN + ("--wiki", "{wiki}", "--dump-date", "{date}"),
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
    Bad("imagenet-verify-manifest-is-a-list", ("imagenet-prep", "verify", "{root}/imagenet_ds"), "not a manifest",
        setup=_write("imagenet_ds/MANIFEST.json", "[]")),
    Bad("imagenet-verify-manifest-path-escapes", ("imagenet-prep", "verify", "{root}/imagenet_ds"), "leaves the folder",
        setup=_manifest_edit("imagenet_ds", lambda m: m["files"][0].update(path="../vocab.txt"))),
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
    r = _run(argv, root, case.timeout, case.file_size_limit)

    assert r.returncode != 0, f"exit 0:\n{r.stderr[-3000:]}"
    prog = ERROR_PROG[argv[0]]
    # argparse names the sub-command: `wikiprep inspect: error: argument -n: ...`.
    lines = [line for line in r.stderr.splitlines() if re.match(rf"{prog}( [a-z-]+)?: error: ", line)]
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
