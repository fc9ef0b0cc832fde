"""Bad input, table-driven: every program refuses it with one line and changes nothing it had made.

Each row of CASES is one bad input found by a hostile review (issue #13) or since. A row runs a
real command as users run it (a subprocess: `wikiprep`, `imagenet-prep` or `luigi --module
workflows`) in a fresh folder holding good inputs and good outputs (the `world` below), after its
`setup` damaged or added something. Every row asserts the same contract:

- a non-zero exit;
- exactly one `<program>: error:` line on stderr, containing `expect` (and never a traceback), and it is
  the last line printed;
- every file that existed before is byte-identical after (a failed run changes no good output);
- no file was added, except paths matching the row's `may_add` globs (what the run had fully
  committed before it failed, e.g. a verified download), and never a temporary (`*.tmp-*`).

To add a case: a row with a unique id, the argv (placeholders in braces are paths in the world),
the text the error line must contain, and a setup function when the input must be built.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
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

from testkit.archives import tar_bytes
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
    data_tmpfs: str | None = None  # mount options of a tmpfs mounted at {root}/data: "size=64k" (a disk that fills), "ro"


# ---------------------------------------------------------------------------------------------
# The world every row starts from: good inputs and good outputs, built once, copied per row.

def _build_world(root: Path) -> None:
    """vocab.txt and corpus.txt; dumps-site/ (the sample dump); wiki_ds/ and imagenet_ds/, two finished
    datasets with their manifests; imagenet/ (the sample ImageNet tree they were converted from)."""
    from imagenet_prep import samples as imagenet_samples
    from shardkit.manifest import write_manifest
    from shardkit.records import read_records
    from wikiprep.wikipedia import samples as wiki_samples

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
    env.pop("WIKIPREP_COMMAND", None)

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
        write_records(path, records[:at] + [payload] + records[at:], path.with_suffix(".index"), overwrite=True)
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


def _second_part_holds_only(wikitext: str) -> Callable[[Path], None]:
    """The sample dump's second part holding one article page of `wikitext` (XML-escaped here), its
    sha1sums and dumpstatus.json made again for it."""
    def setup(root: Path) -> None:
        import bz2
        from xml.sax.saxutils import escape

        from wikiprep.wikipedia.samples import write_dump_status
        folder = root / "dumps-site" / DEMO_WIKI / DEMO_DATE
        names = sorted(p.name for p in folder.glob("*.bz2"))
        head = bz2.decompress((folder / names[1]).read_bytes()).decode("utf-8").split("  <page>", 1)[0]
        page = (f"  <page>\n    <title>Deep</title>\n    <ns>0</ns>\n    <id>4242</id>\n    <revision>\n"
                f"      <id>1</id>\n      <text xml:space=\"preserve\">{escape(wikitext)}</text>\n"
                "    </revision>\n  </page>\n")
        (folder / names[1]).write_bytes(bz2.compress((head + page + "</mediawiki>\n").encode("utf-8")))
        status = json.loads((folder / "dumpstatus.json").read_text(encoding="utf-8"))
        write_dump_status(folder, DEMO_WIKI, DEMO_DATE, "articlesdump", status["jobs"]["articlesdump"]["updated"],
                          names)
    return setup


def _train_tar_with_a_corrupt_class(root: Path) -> None:
    """ILSVRC2012_img_train.tar's layout (one tar per class inside) from imagenet/train, the first class's
    tar with a corrupt header."""
    inner = {f"{cls.name}.tar": tar_bytes({f.name: f.read_bytes() for f in sorted(cls.iterdir())})
             for cls in sorted((root / "imagenet" / "train").iterdir())}
    first = next(iter(inner))
    inner[first] = b"x" * 100 + inner[first][100:]
    (root / "ILSVRC2012_img_train.tar").write_bytes(tar_bytes(inner))


def _rewrite_first_record(shard: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    """imagenet_ds with the first record of `shard` replaced by change(record), its index file and MANIFEST.json
    made to match, so that only reading the record itself finds the damage."""
    def setup(root: Path) -> None:
        from shardkit.manifest import MANIFEST, write_manifest
        from shardkit.records import RecordWriter, read_records

        folder = root / "imagenet_ds"
        payloads = list(read_records(folder / shard))
        payloads[0] = change(payloads[0])
        with RecordWriter(folder / shard, folder / "idx" / f"{shard}.idx", overwrite=True) as w:  # damaged on purpose
            for data in payloads:
                w.write(data)
        manifest = json.loads((folder / MANIFEST).read_text())
        counts = {f["path"]: f["records"] for f in manifest["files"] if "records" in f}
        write_manifest(folder, counts, {k: v for k, v in manifest.items() if k != "files"}, overwrite=True)
    return setup


def _without_feature(name: str) -> Callable[[bytes], bytes]:
    def change(data: bytes) -> bytes:
        from shardkit.example import decode_example_kinds, encode_example

        return encode_example([(n, kind, values) for n, (kind, values) in decode_example_kinds(data).items()
                               if n != name])
    return change


def _edit_manifest(folder: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    """folder/MANIFEST.json replaced by change(manifest) ({root} in its strings expanded)."""
    def setup(root: Path) -> None:
        path = root / folder / "MANIFEST.json"
        path.write_text(_expand(json.dumps(change(json.loads(path.read_text()))), root))
    return setup


def _first_entry(**fields) -> Callable[[dict], dict]:
    """The manifest with `fields` set on its first "files" entry."""
    return lambda d: {**d, "files": [{**d["files"][0], **fields}, *d["files"][1:]]}


def _set(key: str, value) -> Callable[[dict], dict]:
    return lambda d: {**d, key: value}


def _empty_files(*rels: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        for rel in rels:
            (root / rel).write_bytes(b"")
    return setup


def _huge_vocab(root: Path) -> None:
    """A vocabulary file of 64 MiB, sparse (a hole after its tokens); tests/test_cli.py reads one of gigabytes under
    a memory limit."""
    with open(root / "huge_vocab.txt", "wb") as f:
        f.write("\n".join(VOCAB_WORDS).encode() + b"\n")
        f.truncate(64 << 20)


def _then(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        for step in setups:
            step(root)
    return setup


_unreadable_image = _write("imagenet/train/n01440764/bad.JPEG", "not an image\n")


def _converted_without_strict(output_dir: str) -> Callable[[Path], None]:
    """A dataset converted from imagenet/ as it is then (with _unreadable_image: that image left out)."""
    def setup(root: Path) -> None:
        from imagenet_prep import convert as imagenet_convert

        flags = {k: _expand(v, root) for k, v in IMAGENET_FLAGS.items()}
        imagenet_convert.convert_dataset(
            flags["--train-dir"], flags["--validation-dir"], flags["--val-labels"], root / output_dir,
            synsets_file=flags["--synsets-file"], train_shards=2, validation_shards=1)
    return setup


def _relabelled(root: Path) -> None:
    lines = (root / "imagenet" / "validation_labels.txt").read_text().splitlines(True)
    (root / "other_labels.txt").write_text("".join([lines[2], *lines[1:2], lines[0], *lines[3:]]))


def _copy_less_one(src: str, dest: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        shutil.copytree(root / src, root / dest)
        sorted((root / dest).rglob("*.JPEG"))[-1].unlink()
    return setup


def _copy_one_longer(src: str, dest: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        shutil.copytree(root / src, root / dest)
        image = sorted((root / dest).rglob("*.JPEG"))[0]
        image.write_bytes(image.read_bytes() + b"\0")
    return setup


def _synsets_and_one_more(root: Path) -> None:
    wnids = (root / "imagenet" / "synsets.txt").read_text().split()
    (root / "synsets5.txt").write_text("".join(w + "\n" for w in sorted(wnids + ["n15075141"])))


def _copy(src: str, dest: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / src, root / dest)
    return setup


def _remove(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


def _link(rel: str, target: str, hard: bool = False) -> Callable[[Path], None]:
    """`rel`: a symbolic (or hard) link to the world's `target`."""
    def setup(root: Path) -> None:
        (os.link if hard else os.symlink)(root / target, root / rel)
    return setup


def _made(rel: str, change: Callable[[Path], None] | None = None, remask: bool = False) -> Callable[[Path], None]:
    """`rel` made from the world's corpus by the library (seq 32, 5 fixed-count masks: an HDF5 file when it is
    named so, else TFRecords, Graphcore's static mask with `remask`), then damaged by change(path)."""
    def setup(root: Path) -> None:
        from wikiprep import layouts
        from wikiprep.instances import write_pretraining_files
        from wikiprep.options import GenerationOptions

        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        layout = layouts.from_output_names([path], "remask" if remask else "standard")
        write_pretraining_files([str(root / "corpus.txt")], str(root / "vocab.txt"), [path], None,
                                GenerationOptions(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2,
                                                  fixed_mask_count=True), layout=layout)
        if change is not None:
            change(path)
    return setup


def _hdf5_edit(edit: Callable) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        import h5py

        with h5py.File(path, "r+") as f:
            edit(f)
    return change


def _a_zero_inside_the_masked_positions(f) -> None:
    """The first instance with 3 masks gets a 0 at its second: NVIDIA's reader would end its masks there."""
    positions = f["masked_lm_positions"][:]
    row = next(i for i in range(len(positions)) if positions[i, 2])
    positions[row, 1] = 0
    f["masked_lm_positions"][:] = positions


def _remask_first_record(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def rewrite(path: Path) -> None:
        from shardkit.example import decode_example_kinds, encode_example
        from shardkit.records import read_records, write_records

        records = list(read_records(path))
        features = {n: values for n, (_, values) in decode_example_kinds(records[0]).items()}
        change(features)
        records[0] = encode_example([(n, "float" if n == "masked_lm_weights" else "int64", v)
                                     for n, v in features.items()])
        write_records(path, records, overwrite=True)  # damaged on purpose
    return rewrite


def _flags(rel: str, text: str) -> Callable[[Path], None]:
    """A flag file at `rel`, `{root}` in its text expanded."""
    def setup(root: Path) -> None:
        (root / rel).write_text(text.replace("{root}", str(root)), encoding="utf-8")
    return setup


# ---------------------------------------------------------------------------------------------
# The table

CREATE = ("wikiprep", "create-pretraining-data", "--input_file={root}/corpus.txt", "--vocab_file={root}/vocab.txt")
# A Hugging Face tokenizer.json of VOCAB_WORDS whose normalizer keeps case.
CASED_TOKENIZER_JSON = json.dumps({"model": {"type": "WordPiece", "vocab": {w: i for i, w in enumerate(VOCAB_WORDS)}},
                                   "normalizer": {"type": "BertNormalizer", "lowercase": False}})
# Without --wiki and --dump-date, for the rows that vary them.
DUMP_PRETRAIN = ("luigi", "Pretrain128", "--data-dir", "{root}/data", "--dump-url", "{site}", "--vocab-file",
                 "{root}/vocab.txt")
DOWNLOAD = ("luigi", "DownloadDump", "--data-dir", "{root}/data", "--dump-url", "{site}")

# The sample dump's two parts, as extracted files are named, and an extracted part made otherwise.
FIRST_PART, SECOND_PART = (f"{DEMO_WIKI}-{DEMO_DATE}-pages-articles1.xml-p1p4854",
                           f"{DEMO_WIKI}-{DEMO_DATE}-pages-articles2.xml-p4855p9768")
OTHER_EXTRACT = b"{}\n"

PRETRAIN = ("luigi", "Pretrain128", "--data-dir", "{root}/data", "--dump-url", "{site}", "--wiki", "{wiki}",
            "--dump-date", "{date}")

# How imagenet_ds was made: `convert()` with no changes makes it again.
IMAGENET_FLAGS = {"--train-dir": "{root}/imagenet/train", "--validation-dir": "{root}/imagenet/validation",
                  "--val-labels": "{root}/imagenet/validation_labels.txt",
                  "--synsets-file": "{root}/imagenet/synsets.txt", "--train-shards": "2", "--validation-shards": "1"}


def convert(output_dir: str = "{root}/imagenet_ds", **changes: str | bool | None) -> tuple[str, ...]:
    """`imagenet-prep convert` with imagenet_ds's flags, `changes` (train_shards="0") replacing or adding
    flags, None removing one and True giving a bare switch (strict=True)."""
    flags: dict[str, str | bool] = {**IMAGENET_FLAGS, "--output-dir": output_dir}
    for name, value in changes.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            flags.pop(flag, None)
        else:
            flags[flag] = value
    return ("imagenet-prep", "convert", *[a for flag, value in flags.items()
                                          for a in ((flag,) if value is True else (flag, value))])


TEXT_RUN = ("luigi", "PretrainText128", "--data-dir", "{root}/data", "--vocab-file", "{root}/vocab.txt",
            "--num-shards", "1", "--min-doc-chars", "0")


def _dataset_there(num_shards: int) -> Callable[[Path], None]:
    """The sample dump's dataset of `num_shards` shards begun in {root}/data (its dataset.json, as a run of PRETRAIN
    with --num-shards writes it first), in the folder of a dataset of that count, or in `seq128_mask20_dup5/`, as
    it was named before a folder's name said the shard count."""
    def setup(root: Path) -> None:
        from wikiprep import dataset
        from wikiprep.options import GenerationOptions

        options = GenerationOptions(dupe_factor=5)
        name = dataset.folder_name(options, num_shards=num_shards)
        held = dataset.describe(options, None, corpus={"wiki": DEMO_WIKI, "dump_date": DEMO_DATE,
                                                       "multistream": False, "extract_slice_mb": 100.0},
                                num_shards=num_shards, min_doc_chars=200, vocab_size=30522)
        _write(f"data/{DEMO_WIKI}-{DEMO_DATE}/{name}/dataset.json", json.dumps(held))(root)
    return setup


def _legacy_dataset_there(num_shards: int) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _dataset_there(num_shards)(root)
        work = root / "data" / f"{DEMO_WIKI}-{DEMO_DATE}"
        (work / f"seq128_mask20_dup5_shards{num_shards}").rename(work / "seq128_mask20_dup5")
    return setup


def _built_text_corpus(root: Path) -> None:
    """A books folder made into a dataset in {root}/data, then one of its files changed."""
    _write("books/a.txt", TEXT)(root)
    r = _run([_expand(a, root) for a in TEXT_RUN] + ["--text-dir", str(root / "books"), "--text-format", "books", "--local-scheduler",
                               "--workers", "1"], root)
    assert r.returncode == 0, r.stderr
    with open(root / "books" / "a.txt", "a", encoding="utf-8") as f:
        f.write("One more line.\n")


CASES: list[Bad] = [
    # --- text corpora and mixtures (#28)
    Bad("text-dir-missing", TEXT_RUN + ("--text-dir", "{root}/nothing", "--text-format", "books"),
        "{root}/nothing: no such folder"),
    Bad("text-format-unknown", TEXT_RUN + ("--text-dir", "{root}/dumps-site", "--text-format", "pdf"),
        "--text-format 'pdf': expected books or sentences or lines or jsonl"),
    Bad("text-strict-utf8", TEXT_RUN + ("--text-dir", "{root}/books", "--text-format", "books", "--text-strict-utf8"),
        "{root}/books/latin1.txt: not UTF-8 (byte 0xe9 at offset 3) (--text-strict-utf8)",
        setup=_then(_write("books/a.txt", TEXT), _write("books/latin1.txt", "Café".encode("latin-1")))),
    Bad("text-jsonl-without-its-field", TEXT_RUN + ("--text-dir", "{root}/web", "--text-format", "jsonl"),
        "{root}/web/a.jsonl: offset 0: no text field 'text' (a string)",
        setup=_write("web/a.jsonl", '{"body": "The old city."}\n'), may_add=("data/*",)),
    Bad("text-corpus-changed", TEXT_RUN + ("--text-dir", "{root}/books", "--text-format", "books"),
        "{root}/books: changed since {root}/data/books/text_files.json was made (a.txt ", setup=_built_text_corpus),
    Bad("mix-recipe-without-format", ("luigi", "PretrainMix128", "--data-dir", "{root}/data", "--recipe",
                                      "{root}/r.toml"),
        "--recipe {root}/r.toml: source 1: format must be given for kind 'text'",
        setup=_write("r.toml", 'name = "m"\n[[source]]\nkind = "text"\npath = "books"\n')),

    # --- wikiprep create-pretraining-data
    Bad("create-input-glob-matches-nothing",
        ("wikiprep", "create-pretraining-data", "--input_file={root}/nothing*.txt", "--output_file={root}/out.tfrecord",
         "--vocab_file={root}/vocab.txt"), "matches no file"),
    Bad("create-vocab-missing", CREATE[:3] + ("--vocab_file={root}/missing.txt", "--output_file={root}/out.tfrecord"),
        "missing.txt"),
    # a Hugging Face tokenizer.json is taken for its WordPiece vocabulary; another model type, or a normalizer cased
    # otherwise than --do_lower_case, is refused
    Bad("create-tokenizer-json-bpe", CREATE[:3] + ("--vocab_file={root}/tok.json", "--output_file={root}/o.tfrecord"),
        "tok.json: a tokenizer.json of model type 'BPE': only a WordPiece vocabulary (BERT's) can be used",
        setup=_write("tok.json", '{"model": {"type": "BPE", "vocab": {}, "merges": []}}')),
    Bad("create-tokenizer-json-cased", CREATE[:3] + ("--vocab_file={root}/tok.json", "--output_file={root}/o.tfrecord"),
        "tok.json: its normalizer keeps case (a cased vocabulary), but --do_lower_case is true: give "
        "--do_lower_case false", setup=_write("tok.json", CASED_TOKENIZER_JSON)),
    Bad("pretrain-tokenizer-json-cased", PRETRAIN + ("--vocab-file", "{root}/tok.json"),
        "tok.json: its normalizer keeps case (a cased vocabulary), but --do-lower-case is true: give "
        "--do-lower-case false", setup=_write("tok.json", CASED_TOKENIZER_JSON)),
    # generation flags beyond GenerationOptions' bounds (within them, the original's instances)
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
    Bad("create-disk-full", CREATE + ("--output_file={root}/out/a.tfrecord",), "{root}/out/a.tfrecord: cannot write",
        file_size_limit=3000, may_add=("out",)),
    Bad("create-output-under-a-file", CREATE + ("--output_file={root}/corpus.txt/a.tfrecord",),
        "{root}/corpus.txt is not a folder"),
    Bad("create-output-is-a-folder", CREATE + ("--output_file={root}/wiki_ds",), "{root}/wiki_ds: is a folder"),
    # an index that cannot be written commits no output, and changes no good one (#13, part 3)
    Bad("create-index-below-a-file", CREATE + ("--output_file={root}/wiki_ds/wiki_00000.tfrecord",
                                               "--index_file={root}/corpus.txt/wiki_00000.index"),
        "index file {root}/corpus.txt/wiki_00000.index: {root}/corpus.txt is not a folder"),
    Bad("create-second-index-below-a-file", CREATE + ("--output_file={root}/a.tfrecord,{root}/b.tfrecord",
                                                      "--index_file={root}/a.index,{root}/corpus.txt/b.index"),
        "index file {root}/corpus.txt/b.index: {root}/corpus.txt is not a folder"),

    Bad("create-output-is-a-folder", CREATE + ("--output_file={root}/wiki_ds",), "{root}/wiki_ds: is a folder"),

    # --flagfile, as absl reads it; one line naming the file (and line) when it cannot be
    Bad("create-flagfile-missing", CREATE + ("--output_file={root}/out.tfrecord", "--flagfile={root}/missing.flags"),
        "--flagfile={root}/missing.flags: no such file"),
    Bad("create-flagfile-without-a-name", CREATE + ("--output_file={root}/out.tfrecord", "--flagfile"),
        "--flagfile with no file name"),
    Bad("create-flagfile-line-not-a-flag", CREATE + ("--output_file={root}/out.tfrecord", "--flagfile={root}/f.flags"),
        "--flagfile={root}/f.flags, line 2: 'max_seq_length=64' is not a flag",
        setup=_flags("f.flags", "# sizes\nmax_seq_length=64\n")),
    Bad("create-nested-flagfile-missing", CREATE + ("--output_file={root}/out.tfrecord", "--flagfile={root}/f.flags"),
        "--flagfile={root}/gone.flags: no such file", setup=_flags("f.flags", "--flagfile={root}/gone.flags\n")),
    Bad("create-flagfile-is-a-folder", CREATE + ("--output_file={root}/out.tfrecord", "--flagfile={root}/wiki_ds"),
        "--flagfile={root}/wiki_ds: a folder, not a file of flags"),
    Bad("create-flagfile-unknown-flag", CREATE + ("--output_file={root}/out.tfrecord", "--flagfile={root}/f.flags"),
        "unrecognized arguments: --max_seq=64", setup=_flags("f.flags", "--max_seq=64\n")),
    # the remask layout: what cannot fit is refused in one line, before the corpus is read
    Bad("create-remask-without-the-fixed-count", CREATE + ("--output_file={root}/out.tfrecord", "--remask",
                                                           "--fixed_mask_count=False"),
        "the remask layout needs fixed_mask_count=True"),
    Bad("create-remask-whole-word-masking", CREATE + ("--output_file={root}/out.tfrecord", "--remask",
                                                      "--do_whole_word_mask"),
        "the remask layout cannot take do_whole_word_mask=True"),
    Bad("create-remask-predictions-leave-no-room", CREATE + ("--output_file={root}/out.tfrecord", "--remask",
                                                             "--max_seq_length=16", "--max_predictions_per_seq=14"),
        "the remask layout cannot fit max_predictions_per_seq=14 in max_seq_length=16"),
    Bad("create-remask-into-hdf5", CREATE + ("--output_file={root}/out.hdf5", "--remask"),
        "the remask layout is written as TFRecords"),
    # HDF5 outputs: a name that cannot be written, an index, a mix of formats
    Bad("create-hdf5-with-an-index", CREATE + ("--output_file={root}/out.hdf5", "--index_file={root}/out.index"),
        "index file {root}/out.index: an index lists the records of a TFRecord file; {root}/out.hdf5 is HDF5"),
    Bad("create-masking-without-parquet", CREATE + ("--output_file={root}/out.tfrecord", "--masking=dynamic"),
        "--masking dynamic: only Parquet, LDDL's layout takes it"),
    Bad("create-parquet-with-an-index", CREATE + ("--output_file={root}/out.parquet", "--index_file={root}/out.index"),
        "index file {root}/out.index: an index lists the records of a TFRecord file; {root}/out.parquet is Parquet"),
    Bad("create-hdf5-and-tfrecord-outputs", CREATE + ("--output_file={root}/a.hdf5,{root}/b.tfrecord",),
        "one run writes one format"),
    Bad("create-hdf5-under-a-file", CREATE + ("--output_file={root}/corpus.txt/a.hdf5",),
        "{root}/corpus.txt is not a folder"),
    Bad("create-hdf5-is-a-folder", CREATE + ("--output_file={root}/wiki_ds",), "{root}/wiki_ds: is a folder"),
    Bad("create-hdf5-disk-full", CREATE + ("--output_file={root}/out/a.hdf5", "--dupe_factor=40"),
        "{root}/out/a.hdf5: cannot write: file too large", file_size_limit=3000, may_add=("out",)),
    Bad("create-hdf5-is-the-vocab-through-a-symlink", CREATE + ("--output_file={root}/link.h5",),
        "output file {root}/link.h5 is the same file as the vocab file {root}/vocab.txt",
        setup=_link("link.h5", "vocab.txt")),

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
        setup=_edit_manifest("wiki_ds", _first_entry(size="12"))),
    Bad("verify-manifest-path-escapes", ("wikiprep", "verify", "{root}/wiki_ds"), "leaves the folder",
        setup=_edit_manifest("wiki_ds", _first_entry(path="../corpus.txt"))),
    Bad("verify-manifest-absolute-path", ("wikiprep", "verify", "{root}/wiki_ds"), "leaves the folder",
        setup=_edit_manifest("wiki_ds", _first_entry(path="{root}/corpus.txt"))),
    Bad("verify-stray-temporary", ("wikiprep", "verify", "{root}/wiki_ds"), "a temporary left by an interrupted run",
        setup=_write("wiki_ds/wiki_00000.tfrecord.tmp-host-1", b"junk")),
    Bad("verify-stray-file", ("wikiprep", "verify", "{root}/wiki_ds"), "not listed in MANIFEST.json",
        setup=_write("wiki_ds/notes.txt", "mine")),
    Bad("stats-record-tensorflow-cannot-parse", ("wikiprep", "stats", "{root}/wiki_ds", "--out", "{root}/report"),
        "record 3: not a tf.train.Example", setup=_bad_record_at("wiki_ds/wiki_00000.tfrecord", 3, b"\x0a\x05hello")),
    Bad("stats-record-with-wrong-shape", ("wikiprep", "stats", "{root}/wiki_ds", "--out", "{root}/report"),
        "record 2: feature input_ids has", setup=_bad_record_at("wiki_ds/wiki_00000.tfrecord", 2, _short_instance())),
    # HDF5 and remask files read back: what breaks the layout is named by file and record
    Bad("verify-hdf5-not-hdf5", ("wikiprep", "verify", "{root}/fake.hdf5"), "{root}/fake.hdf5: not an HDF5 file",
        setup=_write("fake.hdf5", "not HDF5\n")),
    Bad("verify-hdf5-without-a-dataset", ("wikiprep", "verify", "{root}/h5/wiki_00000.hdf5"),
        "{root}/h5/wiki_00000.hdf5: no masked_lm_ids dataset",
        setup=_made("h5/wiki_00000.hdf5", _hdf5_edit(lambda f: f.__delitem__("masked_lm_ids")))),
    Bad("verify-hdf5-a-zero-inside-the-masked-positions", ("wikiprep", "verify", "{root}/h5"),
        "{root}/h5/wiki_00000.hdf5: batch from record 0: record ", setup=_made(
            "h5/wiki_00000.hdf5", _hdf5_edit(_a_zero_inside_the_masked_positions))),
    Bad("stats-hdf5-rows-differ", ("wikiprep", "stats", "{root}/h5", "--out", "{root}/report"),
        "{root}/h5/wiki_00000.hdf5: dataset next_sentence_labels holds 3 instances",
        setup=_made("h5/wiki_00000.hdf5", _hdf5_edit(lambda f: (f.__delitem__("next_sentence_labels"),
                                                                 f.create_dataset("next_sentence_labels",
                                                                                  data=[0, 1, 0], dtype="i1"))))),
    Bad("inspect-hdf5-not-hdf5", ("wikiprep", "inspect", "{root}/fake.h5"), "{root}/fake.h5: not an HDF5 file",
        setup=_write("fake.h5", b"\x89HDF\r\n\x1a\n truncated")),
    Bad("verify-remask-a-position-twice", ("wikiprep", "verify", "{root}/rm/wiki_00000.tfrecord"),
        "{root}/rm/wiki_00000.tfrecord: batch from record 0: record 0 of the batch: the slots do not hold each "
        "position once", setup=_made("rm/wiki_00000.tfrecord", _remask_first_record(
            lambda f: f["input_position"].__setitem__(1, f["input_position"][0])), remask=True)),
    Bad("verify-remask-record-without-input-ids", ("wikiprep", "verify", "{root}/rm/wiki_00000.tfrecord"),
        "record 0: no input_ids feature (not a BERT pre-training, Graphcore static mask record)",
        setup=_made("rm/wiki_00000.tfrecord", _remask_first_record(lambda f: f.pop("input_ids")), remask=True)),
    Bad("inspect-n-zero", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord", "-n", "0"),
        "must be at least 1"),
    Bad("inspect-n-negative", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord", "-n", "-1"),
        "must be at least 1"),
    Bad("verify-jobs-zero", ("wikiprep", "verify", "{root}/wiki_ds", "--jobs", "0"), "must be at least 1"),
    Bad("inspect-missing-file", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00009.tfrecord"),
        "{root}/wiki_ds/wiki_00009.tfrecord: no such record file"),
    Bad("inspect-a-folder", ("wikiprep", "inspect", "{root}/wiki_ds"),
        "{root}/wiki_ds: a folder; give one of its record files"),
    Bad("inspect-not-records", ("wikiprep", "inspect", "{root}/corpus.txt"), "{root}/corpus.txt: not a TFRecord file"),
    Bad("inspect-an-imagenet-shard", ("wikiprep", "inspect", "{root}/imagenet_ds/train-00000-of-00002"),
        "{root}/imagenet_ds/train-00000-of-00002: first record is not a BERT pre-training example"),
    Bad("inspect-vocab-file-missing", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord", "--vocab-file",
                                       "{root}/missing.txt"), "{root}/missing.txt: vocabulary file not found"),
    Bad("inspect-vocab-file-not-a-vocab", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord",
                                           "--vocab-file", "{root}/corpus.txt"), "{root}/corpus.txt: not a BERT vocabulary"),
    Bad("inspect-vocab-too-small", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord", "--vocab-file",
                                    "{root}/small.txt"),
        "{root}/small.txt: 5 tokens, but record 0 of {root}/wiki_ds/wiki_00000.tfrecord holds id",
        setup=_write("small.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")),
    Bad("inspect-vocab-of-other-records", ("wikiprep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord",
                                           "--vocab-file", "{root}/other.txt"),
        "{root}/other.txt: record 0 of {root}/wiki_ds/wiki_00000.tfrecord starts with id 2, '[SEP]' in this "
        "vocabulary, not its [CLS] (3)", setup=_write("other.txt", "\n".join(
            ["[PAD]", "[UNK]", "[SEP]", "[CLS]"] + VOCAB_WORDS[4:]) + "\n")),
    Bad("inspect-remask-a-position-twice", ("wikiprep", "inspect", "{root}/rm/wiki_00000.tfrecord"),
        "{root}/rm/wiki_00000.tfrecord: record 0: the slots do not hold each position once", setup=_made(
            "rm/wiki_00000.tfrecord", _remask_first_record(
                lambda f: f["input_position"].__setitem__(1, f["input_position"][0])), remask=True)),
    Bad("imagenet-inspect-missing-file", ("imagenet-prep", "inspect", "{root}/imagenet_ds/train-00009-of-00010"),
        "{root}/imagenet_ds/train-00009-of-00010: no such shard"),
    Bad("imagenet-inspect-a-bert-file", ("imagenet-prep", "inspect", "{root}/wiki_ds/wiki_00000.tfrecord"),
        "{root}/wiki_ds/wiki_00000.tfrecord: record 0: no image/encoded feature"),
    Bad("imagenet-inspect-n-zero", ("imagenet-prep", "inspect", "{root}/imagenet_ds/train-00000-of-00002", "-n", "0"),
        "must be at least 1"),

    # --- luigi --module workflows: every parameter that can be judged is, before any download
    Bad("luigi-dump-date-missing", PRETRAIN[:-2], "--dump-date must be given"),
    Bad("luigi-num-shards-zero", PRETRAIN + ("--num-shards", "0"), "--num-shards 0: must be at least 1"),
    Bad("luigi-num-shards-not-a-number", PRETRAIN + ("--num-shards", "abc"), "--num-shards 'abc': expected a whole"),
    Bad("luigi-masked-lm-prob-not-a-number", PRETRAIN + ("--masked-lm-prob", "x"), "--masked-lm-prob 'x'"),
    Bad("luigi-do-lower-case-not-a-bool", PRETRAIN + ("--do-lower-case", "maybe"), "--do-lower-case 'maybe'"),
    Bad("luigi-language-not-a-code", PRETRAIN + ("--language", "zh/../x"),
        "--language 'zh/../x': expected a language code such as en, zh, ja or zh-yue"),
    Bad("luigi-dupe-factor-zero", PRETRAIN + ("--dupe-factor", "0"), "dupe_factor"),
    # LDDL's Parquet: its parameters, refused where they enter, before any work
    Bad("luigi-bin-size-without-parquet", PRETRAIN + ("--bin-size", "32"),
        "--bin-size 32: only Parquet, LDDL's layout takes it (--output-format parquet), not TFRecord"),
    Bad("luigi-parquet-bin-size-not-a-divisor", PRETRAIN + ("--output-format", "parquet", "--bin-size", "48"),
        "--bin-size 48: must divide --max-seq-length 128"),
    Bad("luigi-parquet-one-shard", PRETRAIN + ("--output-format", "parquet", "--num-shards", "1"),
        "--num-shards 1: a Parquet dataset needs at least 2 files per bin"),
    Bad("luigi-masking-unknown", PRETRAIN + ("--output-format", "parquet", "--masking", "sometimes"),
        "--masking 'sometimes'"),
    Bad("luigi-vocab-file-missing", PRETRAIN + ("--vocab-file", "{root}/missing.txt"), "{root}/missing.txt"),
    Bad("luigi-vocab-file-not-a-vocab", PRETRAIN + ("--vocab-file", "{root}/corpus.txt"), "{root}/corpus.txt"),
    Bad("luigi-vocab-file-of-gigabytes", PRETRAIN + ("--vocab-file", "{root}/huge_vocab.txt"),
        "{root}/huge_vocab.txt: larger than a vocabulary may be (16 MiB, 1,048,576 tokens)", setup=_huge_vocab),
    Bad("create-vocab-file-of-gigabytes", CREATE[:3] + ("--vocab_file={root}/huge_vocab.txt", "--output_file={root}/o.tfrecord"),
        "{root}/huge_vocab.txt: larger than a vocabulary may be", setup=_huge_vocab),
    Bad("create-vocab-file-of-a-million-empty-lines", CREATE[:3] + ("--vocab_file={root}/lines.txt", "--output_file={root}/o.tfrecord"),
        "{root}/lines.txt: larger than a vocabulary may be", setup=_write("lines.txt", "[CLS]\n[SEP]\n[MASK]\n" + "\n" * (1 << 20))),
    Bad("luigi-vocab-size-tiny", PRETRAIN + ("--vocab-size", "3"), "--vocab-size 3"),
    Bad("luigi-output-format-unknown", PRETRAIN + ("--output-format", "h5"),
        "--output-format 'h5': expected tfrecord or hdf5"),
    Bad("luigi-layout-unknown", PRETRAIN + ("--layout", "static"), "--layout 'static': expected standard or remask"),
    Bad("luigi-remask-into-hdf5", PRETRAIN + ("--output-format", "hdf5", "--layout", "remask"),
        "--output-format hdf5 --layout remask: the remask layout is written as TFRecords"),
    Bad("luigi-remask-whole-word-masking", PRETRAIN + ("--layout", "remask", "--do-whole-word-mask"),
        "the remask layout cannot take do_whole_word_mask=True"),
    Bad("luigi-remask-predictions-leave-no-room", PRETRAIN + ("--layout", "remask", "--max-predictions-per-seq", "126"),
        "the remask layout cannot fit max_predictions_per_seq=126 in max_seq_length=128"),
    Bad("luigi-task-name-mistyped", ("luigi", "Pretrain129") + PRETRAIN[2:],
        "no task Pretrain129 (did you mean Pretrain128, "),  # the closest names, whatever tasks are registered
    Bad("luigi-flag-a-prefix", PRETRAIN + ("--num-shard", "3"), "--num-shard: no such parameter (did you mean --num-shards?)"),
    Bad("luigi-flag-unknown", PRETRAIN + ("--bogus", "3"), "--bogus: no such parameter"),
    Bad("luigi-data-dir-is-a-file", ("luigi", "Pretrain128", "--data-dir", "{root}/corpus.txt", "--dump-url", "{site}",
                                     "--dump-date", "{date}", "--wiki", "{wiki}"), "--data-dir {root}/corpus.txt: is a file"),
    Bad("luigi-more-shards-than-documents", PRETRAIN + ("--num-shards", "200", "--vocab-file", "{root}/vocab.txt"),
        "--num-shards 200:", may_add=("data/downloads/*", "data/downloads/*/*/*", "data/*/extracted/*",
                                      "data/*/punkt_*.json", "data/*/split/*/*/*", "data/*/.receipts/*",
                                      "data/*/*/.receipts/*", "data/*/split/*/.receipts/*", "data/*/extracted/.receipts/*"),
        timeout=600),

    # --- luigi: a dataset folder holding a dataset of other content parameters (not those its name says) (#30)
    Bad("luigi-rerun-with-another-masked-lm-prob", PRETRAIN + ("--num-shards", "4", "--masked-lm-prob", "0.2"),
        "{root}/data/{wiki}-{date}/seq128_mask20_dup5_shards4: holds a dataset made with other parameters "
        "(masked_lm_prob 0.15 there, 0.2 here); give another --data-dir, or remove "
        "{root}/data/{wiki}-{date}/seq128_mask20_dup5_shards4 to rebuild it (another shard count, seed, dupe factor, "
        "sequence length, mask count, whole-word masking or layout gives a dataset of its own folder)",
        setup=_dataset_there(4)),
    Bad("luigi-rerun-into-a-folder-named-before-it-said-the-shard-count", PRETRAIN,
        "{root}/data/{wiki}-{date}/seq128_mask20_dup5: holds a dataset made with other parameters (num_shards 4 "
        "there, 256 here), named before a folder's name said its shard count, seed and whole-word masking; rename "
        "it to seq128_mask20_dup5_shards4 to keep both", setup=_legacy_dataset_there(4)),
    # the folder of the old name holds the dataset of this shard count, seed and masking: it is this run's folder still
    # (no new one beside it, which would hide it from the run that made it), and refuses the other masked_lm_prob
    Bad("luigi-rerun-with-another-masked-lm-prob-into-a-folder-named-before", PRETRAIN + (
        "--num-shards", "4", "--masked-lm-prob", "0.2"),
        "{root}/data/{wiki}-{date}/seq128_mask20_dup5: holds a dataset made with other parameters (masked_lm_prob 0.15 "
        "there, 0.2 here); give another --data-dir, or remove", setup=_legacy_dataset_there(4)),

    # --- luigi: an output already there with other content (an older version's, its receipt lost) is kept
    Bad("luigi-output-there-with-other-content", DUMP_PRETRAIN + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        f"{{root}}/data/{{wiki}}-{{date}}/extracted/{FIRST_PART}.jsonl: exists with other content than this run's "
        f"(sha256 {hashlib.sha256(OTHER_EXTRACT).hexdigest()[:16]} there, ",
        setup=_write(f"data/{DEMO_WIKI}-{DEMO_DATE}/extracted/{FIRST_PART}.jsonl", OTHER_EXTRACT),
        may_add=("data/downloads/*", f"data/*/extracted/{SECOND_PART}.jsonl",
                 f"data/*/extracted/.receipts/{SECOND_PART}*")),
    # --- luigi: a page WikiExtractor raises on is skipped as unextractable (#27); a part of only such pages
    # yields no article, and says why (it used to stop the dump with the page's RecursionError)
    Bad("luigi-part-of-only-an-unextractable-page", PRETRAIN,
        "yields no articles (1 pages; dropped: unextractable 1)",
        setup=_second_part_holds_only("{{#if:x|" * 1500 + "deep" + "}}" * 1500),
        may_add=("data/downloads/*", "data/*/extracted/*", "data/*/extracted/.receipts/*")),

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
        "{site}/{wiki}/{date}/dumpstatus.json is larger than 8 MiB",
        setup=_replace_with_dev_zero(f"dumps-site/{DEMO_WIKI}/{DEMO_DATE}/dumpstatus.json")),
    Bad("sha1sums-is-dev-zero", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        "{site}/{wiki}/{date}/{wiki}-{date}-sha1sums.txt is larger than 8 MiB",
        setup=_replace_with_dev_zero(f"dumps-site/{DEMO_WIKI}/{DEMO_DATE}/{DEMO_WIKI}-{DEMO_DATE}-sha1sums.txt")),

    # --- luigi: an empty dump part, listed as 0 bytes or served empty (#27)
    Bad("dump-part-listed-as-0-bytes", DOWNLOAD + ("--wiki", "{wiki}", "--dump-date", "{date}"),
        f"lists {DEMO_WIKI}-{DEMO_DATE}-pages-articles1.xml-p1p4854.bz2 as 0 bytes: an empty dump part",
        setup=_status(lambda d: _first_file(d).update(size=0)), may_add=("data/downloads/*",)),
    Bad("dump-part-served-empty", ("luigi", "DownloadPart", "--part", f"{FIRST_PART}.bz2", *DOWNLOAD[2:], "--wiki",
                                   "{wiki}", "--dump-date", "{date}"),
        f"sent 0 bytes of {FIRST_PART}.bz2: too short to be a bz2 file (tried 3 times; the file was discarded)",
        setup=_then(_empty_files(f"dumps-site/{DEMO_WIKI}/{DEMO_DATE}/{FIRST_PART}.bz2"), _status(
            lambda d: _first_file(d).update(size=None, sha1=hashlib.sha1().hexdigest(), md5=hashlib.md5().hexdigest()))),
        may_add=("data/downloads/*/*/dumpstatus.json", "data/downloads/*/*/*sums.txt", "data/downloads/*/*/.receipts/*")),
    # --- luigi: a disk that fills during a download, a read-only data folder: one line naming the file (#27)
    Bad("download-onto-a-full-disk", ("luigi", "DownloadPart", "--part", f"{FIRST_PART}.bz2", *DOWNLOAD[2:], "--wiki",
                                      "{wiki}", "--dump-date", "{date}"),
        f"{{root}}/data/downloads/{{wiki}}/{{date}}/{FIRST_PART}.bz2: cannot write: no space left on the device; the ",
        data_tmpfs="size=64k", may_add=("data/downloads/*",)),
    Bad("data-dir-read-only", PRETRAIN + ("--vocab-file", "{root}/vocab.txt"),
        "{root}/data/downloads/{wiki}/{date}/dumpstatus.json: cannot write: read-only file system", data_tmpfs="ro"),

    # --- imagenet-prep
    Bad("imagenet-verify-manifest-is-a-list", ("imagenet-prep", "verify", "{root}/imagenet_ds"), "not a manifest",
        setup=_write("imagenet_ds/MANIFEST.json", "[]")),
    Bad("imagenet-verify-manifest-path-escapes", ("imagenet-prep", "verify", "{root}/imagenet_ds"), "leaves the folder",
        setup=_edit_manifest("imagenet_ds", _first_entry(path="../vocab.txt"))),
    Bad("imagenet-verify-no-manifest", ("imagenet-prep", "verify", "{root}/imagenet"), "stray file"),

    Bad("imagenet-verify-record-without-a-feature",
        ("imagenet-prep", "verify", "{root}/imagenet_ds", "--synsets-file", "{root}/imagenet/synsets.txt"),
        "{root}/imagenet_ds/train-00001-of-00002: record 0: does not parse with the 15-key ImageNet schema: "
        "no image/class/synset feature", setup=_rewrite_first_record("train-00001-of-00002",
                                                                     _without_feature("image/class/synset"))),
    Bad("imagenet-stats-record-without-a-feature", ("imagenet-prep", "stats", "{root}/imagenet_ds", "--out",
                                                    "{root}/report"),
        "{root}/imagenet_ds/train-00000-of-00002: record 0: does not parse with the 15-key ImageNet schema: "
        "no image/height feature", setup=_rewrite_first_record("train-00000-of-00002",
                                                               _without_feature("image/height"))),
    Bad("imagenet-stats-record-not-an-example", ("imagenet-prep", "stats", "{root}/imagenet_ds", "--out",
                                                 "{root}/report"),
        "{root}/imagenet_ds/validation-00000-of-00001: record 0: not a tf.train.Example",
        setup=_rewrite_first_record("validation-00000-of-00001", lambda data: b"\xff\xfe not a protobuf")),
    Bad("imagenet-stats-no-records", ("imagenet-prep", "stats", "{root}/imagenet_ds", "--out", "{root}/report"),
        "{root}/imagenet_ds: its validation shards hold no records",
        setup=_empty_files("imagenet_ds/validation-00000-of-00001")),
    Bad("imagenet-verify-manifest-splits-a-list", ("imagenet-prep", "verify", "{root}/imagenet_ds"),
        "MANIFEST.json: splits is not an object", setup=_edit_manifest("imagenet_ds", _set("splits", []))),
    Bad("imagenet-verify-manifest-split-records-a-string", ("imagenet-prep", "verify", "{root}/imagenet_ds"),
        "MANIFEST.json: splits.train.records is '16', not a record count",
        setup=_edit_manifest("imagenet_ds", lambda d: {**d, "splits": {**d["splits"], "train": {"records": "16"}}})),
    Bad("imagenet-verify-manifest-file-records-a-list", ("imagenet-prep", "verify", "{root}/imagenet_ds"),
        'train-00000-of-00002: "records" is not a non-negative integer',
        setup=_edit_manifest("imagenet_ds", lambda d: {**d, "files": [
            {**f, "records": [f["records"]]} if f["path"] == "train-00000-of-00002" else f for f in d["files"]]})),

    # --- stats --out: never into a dataset, nor inside one, finished or not; nothing read, nothing written (#27)
    Bad("wikiprep-stats-out-into-another-dataset", ("wikiprep", "stats", "{root}/wiki_ds", "--out", "{root}/wiki_ds2"),
        "--out {root}/wiki_ds2: holds a dataset ({root}/wiki_ds2/MANIFEST.json is there)",
        setup=lambda root: shutil.copytree(root / "wiki_ds", root / "wiki_ds2")),
    Bad("wikiprep-stats-out-inside-a-dataset", ("wikiprep", "stats", "{root}/wiki_ds", "--out", "{root}/imagenet_ds/r"),
        "--out {root}/imagenet_ds/r: is inside the dataset {root}/imagenet_ds ({root}/imagenet_ds/MANIFEST.json"),
    Bad("wikiprep-stats-out-into-an-unfinished-dataset", ("wikiprep", "stats", "{root}/wiki_ds", "--out",
                                                          "{root}/started"),
        "--out {root}/started: holds a dataset ({root}/started/dataset.json is there)",
        setup=_write("started/dataset.json", "{}\n")),
    Bad("imagenet-stats-out-into-a-wiki-dataset", ("imagenet-prep", "stats", "{root}/imagenet_ds", "--out",
                                                   "{root}/wiki_ds"),
        "--out {root}/wiki_ds: holds a dataset ({root}/wiki_ds/MANIFEST.json is there)"),
    Bad("imagenet-stats-out-into-an-unfinished-dataset", ("imagenet-prep", "stats", "{root}/imagenet_ds", "--out",
                                                          "{root}/started"),
        "--out {root}/started: holds a dataset ({root}/started/.work/plan.json is there)",
        setup=_write("started/.work/plan.json", "{}\n")),

    # --- imagenet-prep convert: counts refused by their flag before anything is listed or written
    Bad("imagenet-convert-train-shards-0", convert("{root}/new_ds", train_shards="0"),
        "--train-shards 0: must be a positive integer"),
    Bad("imagenet-convert-negative-validation-shards", convert("{root}/new_ds", validation_shards="-2"),
        "--validation-shards -2: must be a positive integer"),
    Bad("imagenet-convert-workers-0", convert("{root}/new_ds", workers="0"), "--workers 0: must be a positive integer"),
    Bad("imagenet-convert-max-pixels-0", convert("{root}/new_ds", max_pixels="0"),
        "--max-pixels 0: must be a positive integer"),
    Bad("imagenet-convert-train-shards-0-into-a-dataset", convert(train_shards="0"), "--train-shards 0"),
    # --- imagenet-prep convert: a failed run leaves nothing of its own, and never changes a good dataset
    Bad("imagenet-convert-strict-unreadable-image-into-a-new-folder", convert("{root}/new/ds", strict=True),
        "{root}/imagenet/train/n01440764/bad.JPEG: not an image (no decoder recognises the content); --strict "
        "fails on an unreadable image instead of leaving it out", setup=_unreadable_image),
    Bad("imagenet-convert-strict-unreadable-image-with-workers", convert("{root}/new_ds", strict=True, workers="2"),
        "bad.JPEG: not an image", setup=_unreadable_image),
    Bad("imagenet-convert-strict-unreadable-image-into-a-folder-of-the-users", convert("{root}/mine", strict=True),
        "bad.JPEG: not an image", setup=_then(_unreadable_image, _write("mine/notes.txt", "mine\n"))),
    Bad("imagenet-convert-strict-into-a-dataset-that-left-an-image-out", convert("{root}/lossy_ds", strict=True),
        "{root}/lossy_ds: holds this dataset made without --strict, which left out train/n01440764/bad.JPEG (not an "
        "image (no decoder recognises the content)); --strict fails on them: give another --output-dir",
        setup=_then(_unreadable_image, _converted_without_strict("lossy_ds"))),

    # --- imagenet-prep convert into imagenet_ds from other inputs: refused before any work, naming the input
    Bad("imagenet-convert-other-val-labels", convert(val_labels="{root}/other_labels.txt"),
        "{root}/imagenet_ds: holds an ImageNet dataset made with other parameters (--val-labels 8 labels (sha256 ",
        setup=_relabelled),
    Bad("imagenet-convert-other-train-tree", convert(train_dir="{root}/train2"),
        ") there, 23 files (sha256 ", setup=_copy_less_one("imagenet/train", "train2")),
    Bad("imagenet-convert-other-validation-tree", convert(validation_dir="{root}/validation2"),
        "(--validation-dir 8 files (sha256 ", setup=_copy_one_longer("imagenet/validation", "validation2")),
    Bad("imagenet-convert-other-synsets-file", convert(synsets_file="{root}/synsets5.txt"),
        "(--synsets-file 4 synsets (sha256 ", setup=_synsets_and_one_more),
    Bad("imagenet-convert-dataset-without-its-plan", convert(),
        "{root}/imagenet_ds: holds an ImageNet dataset whose inputs cannot be compared with these",
        setup=_remove("imagenet_ds/.work/plan.json")),
    Bad("imagenet-convert-into-another-tools-shards", convert("{root}/foreign"),
        "{root}/foreign/train-00000-of-00002: a shard or index file that no MANIFEST.json or .work/plan.json",
        setup=_copy("imagenet_ds/train-00000-of-00002", "foreign/train-00000-of-00002")),
    Bad("imagenet-convert-beside-a-shard-of-other-counts", convert(),
        "{root}/imagenet_ds/train-00000-of-00003: not a shard of this conversion (other shard counts?)",
        setup=_write("imagenet_ds/train-00000-of-00003", b"")),
    Bad("imagenet-convert-into-a-wiki-dataset", convert("{root}/wiki_ds"),
        "{root}/wiki_ds/MANIFEST.json: not an ImageNet dataset's MANIFEST.json; give another --output-dir"),
    Bad("imagenet-convert-output-dir-is-a-file", convert("{root}/corpus.txt"),
        "--output-dir {root}/corpus.txt: not a folder"),

    # --- imagenet-prep convert: what is wrong is named where it is
    Bad("imagenet-convert-corrupt-class-tar-inside-the-train-tar",
        convert("{root}/new_ds", train_dir="{root}/ILSVRC2012_img_train.tar"),
        "{root}/ILSVRC2012_img_train.tar: n01440764.tar: not a readable tar archive",
        setup=_train_tar_with_a_corrupt_class),
    Bad("imagenet-convert-synsets-file-is-a-folder", convert("{root}/new_ds", synsets_file="{root}/imagenet"),
        "{root}/imagenet: a folder, not a text file"),
    Bad("imagenet-convert-val-labels-not-text",
        convert("{root}/new_ds", val_labels="{root}/imagenet_ds/train-00000-of-00002"),
        "train-00000-of-00002: not a UTF-8 text file (byte "),
    Bad("imagenet-convert-too-many-shards", convert("{root}/new_ds", validation_shards="9"),
        "--validation-shards 9 is more than the 8 validation images found"),
]


@contextlib.contextmanager
def _mounted_tmpfs(folder: Path, options: str | None):
    """A tmpfs mounted at `folder` with `options` for the block (a small one fills: ENOSPC; `ro`: EROFS), as a real
    full disk or read-only file system answers; the test is skipped, saying why, where mounting is not allowed."""
    if options is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): a full disk and a read-only "
                    f"folder need root with CAP_SYS_ADMIN")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(case: Bad, world: Path, tmp_path: Path):
    root = tmp_path / "w"
    shutil.copytree(world, root, symlinks=True)
    with _mounted_tmpfs(root / "data", case.data_tmpfs):
        _check_one_line_and_nothing_changed(case, root)


def _check_one_line_and_nothing_changed(case: Bad, root: Path) -> None:
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
    # The answer is the last thing printed: after Luigi's execution summary, before only make's own line.
    assert r.stderr.splitlines()[-1] == lines[0], f"the error line is not the last:\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]

    after = _snapshot(root)
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert not changed, f"changed or removed: {changed}"
    added = sorted(set(after) - set(before))
    assert not [p for p in added if ".tmp-" in p], f"temporaries left: {added}"
    unexpected = [p for p in added if not any(fnmatch.fnmatch(p, g) for g in case.may_add)]
    assert not unexpected, f"added: {unexpected}"
