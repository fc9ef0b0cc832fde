"""The `wikiprep` command line, run as users run it (a subprocess), on real files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.example import decode_example
from wikiprep import stats, verify
from wikiprep.layouts import hdf5
from wikiprep.cli import build_parser
from testkit.instances import encode_features
from shardkit.manifest import write_manifest
from shardkit.example import FLOAT, INT64, encode_example
from shardkit.records import read_records, write_records

REPO = Path(__file__).resolve().parents[1]
from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
INPUTS = FIXTURES / "inputs"


@pytest.fixture(scope="module")
def fixtures() -> Path:
    return FIXTURES


def wikiprep(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    exe = REPO / ".venv" / "bin" / "wikiprep"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "wikiprep.cli"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def expected_records(name: str) -> list[bytes]:
    with gzip.open(FIXTURES / "expected" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [encode_features(json.loads(line)) for line in f]


def round_robin(paths: list[Path]) -> list[bytes]:
    files = [list(read_records(p)) for p in paths]
    return [files[k % len(files)][k // len(files)] for k in range(sum(map(len, files)))]


# ---------------------------------------------------------------------------------------------
# create-pretraining-data, the drop-in

def test_cased_run_with_false_flag_glob_and_round_robin_outputs(fixtures, tmp_path):
    outs = [tmp_path / f"part{i}.tfrecord" for i in range(3)]
    res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/synth*.txt", f"--vocab_file={VOCAB}",
                   "--output_file=" + ",".join(map(str, outs)), "--do_lower_case=False", "--max_seq_length=128",
                   "--max_predictions_per_seq=20", "--masked_lm_prob=0.15", "--random_seed=5", "--dupe_factor=1",
                   "--index_file=" + ",".join(str(p.with_suffix(".index")) for p in outs))
    assert res.returncode == 0, res.stderr
    assert "Wrote 462 total instances" in res.stderr
    assert round_robin(outs) == expected_records("synthetic_128_cased_seed5")
    assert all(p.with_suffix(".index").is_file() for p in outs)


def test_comma_separated_inputs_in_the_order_given(fixtures, tmp_path):
    out = tmp_path / "two.tfrecord"
    res = wikiprep("create-pretraining-data", "--input_file", f"{INPUTS}/sample_text.txt,{INPUTS}/synthetic_docs.txt",
                   "--vocab_file", str(VOCAB), "--output_file", str(out), "--random_seed=9", "--dupe_factor=2")
    assert res.returncode == 0, res.stderr
    assert list(read_records(out)) == expected_records("two_files_128_seed9")
    assert not out.with_suffix(".index").exists()  # no index unless asked for


def test_bare_boolean_flag_and_defaults(fixtures, tmp_path):
    out = tmp_path / "wwm.tfrecord"
    res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt", f"--vocab_file={VOCAB}",
                   f"--output_file={out}", "--do_whole_word_mask", "--random_seed=1", "--dupe_factor=3")
    assert res.returncode == 0, res.stderr
    assert list(read_records(out)) == expected_records("sample_128_wwm_seed1")


def test_flag_spellings_and_defaults_are_the_originals():
    parse = build_parser().parse_args
    d = parse(["create-pretraining-data"])
    assert (d.do_lower_case, d.do_whole_word_mask, d.max_seq_length, d.max_predictions_per_seq, d.random_seed,
            d.dupe_factor, d.masked_lm_prob, d.short_seq_prob, d.fixed_mask_count) == \
        (True, False, 128, 20, 12345, 10, 0.15, 0.1, False)
    for spelling, value in (("--do_lower_case=False", False), ("--do_lower_case=false", False),
                            ("--do_lower_case=0", False), ("--nodo_lower_case", False),
                            ("--do_lower_case=True", True), ("--do_lower_case=1", True), ("--do_lower_case", True)):
        assert parse(["create-pretraining-data", spelling]).do_lower_case is value, spelling
    with pytest.raises(SystemExit):
        parse(["create-pretraining-data", "--do_lower_case=maybe"])
    with pytest.raises(SystemExit):  # no abbreviations: absl has none
        parse(["create-pretraining-data", "--max_seq=64"])


def test_bad_path_is_one_line_and_a_nonzero_exit(fixtures, tmp_path):
    missing = tmp_path / "nope.txt"
    for pattern in (str(missing), str(tmp_path / "nothing*.txt")):
        res = wikiprep("create-pretraining-data", f"--input_file={pattern}", f"--vocab_file={VOCAB}",
                       f"--output_file={tmp_path / 'o.tfrecord'}")
        assert res.returncode != 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("wikiprep: error: ") and pattern in lines[0], res.stderr
    res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt",
                   f"--vocab_file={tmp_path / 'vocab.txt'}", f"--output_file={tmp_path / 'o.tfrecord'}")
    assert res.returncode != 0 and "vocab.txt" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o.tfrecord").exists()


# ---------------------------------------------------------------------------------------------
# verify, inspect, stats on a small dataset folder

@pytest.fixture(scope="module")
def dataset(fixtures, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dataset")
    shards = [folder / f"wiki_{i:05d}.tfrecord" for i in range(2)]
    res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt", f"--vocab_file={VOCAB}",
                   "--output_file=" + ",".join(map(str, shards)),
                   "--index_file=" + ",".join(str(p.with_suffix(".index")) for p in shards),
                   "--random_seed=12345", "--dupe_factor=5")
    assert res.returncode == 0, res.stderr
    shutil.copy(VOCAB, folder / "vocab.txt")
    (folder / "dataset.json").write_text(json.dumps({"max_seq_length": 128, "max_predictions_per_seq": 20}))
    counts = {p.name: len(list(read_records(p))) for p in shards}
    (folder / "stats.json").write_text(json.dumps({"total": {"instances": sum(counts.values())}}))
    write_manifest(folder, counts)
    return folder


def test_verify_accepts_a_good_dataset(dataset):
    res = wikiprep("verify", str(dataset))
    assert res.returncode == 0, res.stderr
    records_bytes = sum(p.stat().st_size for p in dataset.glob("*.tfrecord"))
    assert res.stdout.startswith(f"OK {dataset}: 60 records in 2 files, {records_bytes} bytes,")  # counted once


def test_verify_reports_a_changed_byte(dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    shard = copy / "wiki_00001.tfrecord"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    res = wikiprep("verify", str(copy))
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [f"wikiprep: error: {shard}: checksum differs from MANIFEST.json"]


def test_verify_parses_records_and_finds_a_bad_label(dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    shard = copy / "wiki_00001.tfrecord"
    records = [decode_example(r) for r in read_records(shard)]
    records[3]["next_sentence_labels"] = [2]
    write_records(shard, [encode_example([(k, FLOAT if k == "masked_lm_weights" else INT64, v)
                                          for k, v in ex.items()]) for ex in records],
                  shard.with_suffix(".index"), overwrite=True)  # a bad label, on purpose
    write_manifest(copy, {"wiki_00000.tfrecord": 30, "wiki_00001.tfrecord": 30}, overwrite=True)
    res = wikiprep("verify", str(copy))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "next_sentence_labels" in lines[0] and str(shard) in lines[0], res.stderr


@pytest.fixture(scope="module")
def four_shards(fixtures, tmp_path_factory) -> Path:
    """A dataset folder of four shards: enough for three workers to finish files out of order."""
    folder = tmp_path_factory.mktemp("four_shards")
    shards = [folder / f"wiki_{i:05d}.tfrecord" for i in range(4)]
    res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt", f"--vocab_file={VOCAB}",
                   "--output_file=" + ",".join(map(str, shards)),
                   "--index_file=" + ",".join(str(p.with_suffix(".index")) for p in shards),
                   "--random_seed=12345", "--dupe_factor=5")
    assert res.returncode == 0, res.stderr
    (folder / "dataset.json").write_text(json.dumps({"max_seq_length": 128, "max_predictions_per_seq": 20}))
    counts = {p.name: len(list(read_records(p))) for p in shards}
    (folder / "stats.json").write_text(json.dumps({"total": {"instances": sum(counts.values())}}))
    write_manifest(folder, counts)
    return folder


def _relabel(shard: Path, record: int) -> None:
    """Give one record of `shard` a next_sentence_label of 2 (parses, breaks an invariant); index kept true."""
    records = [decode_example(r) for r in read_records(shard)]
    records[record]["next_sentence_labels"] = [2]
    write_records(shard, [encode_example([(k, FLOAT if k == "masked_lm_weights" else INT64, v)
                                          for k, v in ex.items()]) for ex in records],
                  shard.with_suffix(".index"), overwrite=True)  # a bad label, on purpose


def test_verify_in_parallel_says_what_a_serial_run_says(four_shards, tmp_path):
    """--jobs 3 gives the serial run's output: on a good folder, and on damaged ones its first error line,
    though the workers also find the later files' problems, and sooner (a problem of an early stage in a
    later file comes before one of a later stage in an earlier file, as serially)."""
    def both(folder: Path) -> subprocess.CompletedProcess:
        serial, parallel = wikiprep("verify", str(folder)), wikiprep("verify", str(folder), "--jobs", "3")
        assert (parallel.returncode, parallel.stdout, parallel.stderr) == \
               (serial.returncode, serial.stdout, serial.stderr)
        return serial

    good = both(four_shards)
    assert good.returncode == 0 and good.stdout.startswith(f"OK {four_shards}: "), good.stderr
    assert " in 4 files" in good.stdout

    labels = tmp_path / "labels"
    shutil.copytree(four_shards, labels)
    _relabel(labels / "wiki_00002.tfrecord", 3)
    _relabel(labels / "wiki_00003.tfrecord", 0)  # the serial run never reads it: its error must not show
    write_manifest(labels, {p.name: len(list(read_records(p))) for p in labels.glob("*.tfrecord")}, overwrite=True)
    bad = both(labels)
    assert bad.returncode == 1 and bad.stderr.splitlines() == [
        f"wikiprep: error: {labels / 'wiki_00002.tfrecord'}: batch from record 0: "
        f"record 3 of the batch: next_sentence_labels not 0 or 1"], bad.stderr

    stages = tmp_path / "stages"
    shutil.copytree(four_shards, stages)
    _relabel(stages / "wiki_00001.tfrecord", 5)  # parsing: the last stage
    index = stages / "wiki_00003.index"
    index.write_text("".join(index.read_text().splitlines(keepends=True)[1:]))  # its first record left out
    write_manifest(stages, {p.name: len(list(read_records(p))) for p in stages.glob("*.tfrecord")}, overwrite=True)
    bad = both(stages)
    assert bad.returncode == 1 and bad.stderr.splitlines() == [
        f"wikiprep: error: {index}: index does not match wiki_00003.tfrecord"], bad.stderr


def test_inspect_shows_tokens_with_the_vocab_beside(dataset):
    res = wikiprep("inspect", str(dataset / "wiki_00000.tfrecord"), "-n", "2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("--- record") == 2
    assert "\nA: [CLS] " in res.stdout and ("B is random" in res.stdout or "B is the real next" in res.stdout)


def test_stats_writes_a_report(dataset, tmp_path):
    out = tmp_path / "report"
    res = wikiprep("stats", str(dataset), "--out", str(out))
    assert res.returncode == 0, res.stderr
    st = json.loads((out / "stats.json").read_text())
    records = [decode_example(r) for p in sorted(dataset.glob("*.tfrecord")) for r in read_records(p)]
    assert st["records"] == len(records) == 60
    assert st["random_next"] == sum(r["next_sentence_labels"][0] for r in records)
    assert st["full_length"] == sum(1 for r in records if sum(r["input_mask"]) == 128)
    assert sum(st["masked_count_histogram"].values()) == 60
    assert st["bytes_per_file"]["min"] <= st["bytes_per_file"]["max"]
    assert st["unk_rate"] is not None
    assert "random next" in (out / "report.txt").read_text()


def test_stats_of_an_unfinished_dataset_says_so(dataset, tmp_path):
    """A folder with its dataset.json but no MANIFEST.json yet (a run still writing it, or killed): the report is
    made, of the files there, and says, in a warning line, report.txt and stats.json, that the dataset is unfinished.
    A finished one's report says nothing of the kind."""
    folder = tmp_path / "unfinished"
    shutil.copytree(dataset, folder)
    (folder / "MANIFEST.json").unlink()
    (folder / "dataset.json").write_text("{}\n", encoding="utf-8")
    res = wikiprep("stats", str(folder), "--out", str(tmp_path / "report"))
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines()[-1] == (f"wikiprep: warning: {folder}: an unfinished dataset (dataset.json is "
                                           f"there, MANIFEST.json not yet: the run making it has not finished); the "
                                           f"report is of the files written so far")
    assert "MANIFEST.json       none yet: an UNFINISHED dataset" in (tmp_path / "report" / "report.txt").read_text()
    assert json.loads((tmp_path / "report" / "stats.json").read_text())["manifest"]["unfinished"]
    done = wikiprep("stats", str(dataset), "--out", str(tmp_path / "done"))
    assert done.returncode == 0 and "warning" not in done.stderr
    assert "unfinished" not in json.loads((tmp_path / "done" / "stats.json").read_text())["manifest"]


# ---------------------------------------------------------------------------------------------
# --flagfile, HDF5 and remask outputs, and verify/inspect/stats reading every layout

def test_flagfile_is_read_as_absl_reads_it(fixtures, tmp_path):
    """Comments and blank lines skipped, a nested flag file expanded in place, later flags win, a cycle ignored
    with a warning: the same records as the flags given on the command line."""
    direct = tmp_path / "direct.tfrecord"
    res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt", f"--vocab_file={VOCAB}",
                   f"--output_file={direct}", "--random_seed=9", "--dupe_factor=2", "--max_seq_length=64",
                   "--max_predictions_per_seq=10")
    assert res.returncode == 0, res.stderr
    inner, outer = tmp_path / "inner.flags", tmp_path / "outer.flags"
    inner.write_text(f"// the sizes\n--max_seq_length=64\n--max_predictions_per_seq=12\n--flagfile={outer}\n")
    outer.write_text(f"# as a script of the original would write it\n\n--input_file={INPUTS}/sample_text.txt\n"
                     f"  --vocab_file={VOCAB}\n--random_seed=1\n--flagfile={inner}\n--dupe_factor=2\n")
    via = tmp_path / "via.tfrecord"
    res = wikiprep("create-pretraining-data", "--random_seed=5", f"--flagfile={outer}", f"--output_file={via}",
                   "--random_seed=9", "--max_predictions_per_seq=10")
    assert res.returncode == 0, res.stderr
    assert "already being read (a cycle); ignored, as absl does" in res.stderr
    assert via.read_bytes() == direct.read_bytes()


@pytest.fixture(scope="module")
def layouts(fixtures, tmp_path_factory) -> dict[str, Path]:
    """The same instances (fixed mask count) as standard TFRecords, remask TFRecords and HDF5: three dataset folders
    with vocab.txt, dataset.json and MANIFEST.json, made by the command line."""
    root = tmp_path_factory.mktemp("layouts")
    folders = {}
    for name, suffix, flags in (("standard", ".tfrecord", ["--fixed_mask_count"]),
                                ("remask", ".tfrecord", ["--remask"]), ("hdf5", ".hdf5", ["--fixed_mask_count"])):
        folder = folders[name] = root / name
        folder.mkdir()
        shards = [folder / f"wiki_{i:05d}{suffix}" for i in range(2)]
        indexes = [] if suffix == ".hdf5" else ["--index_file=" + ",".join(str(p.with_suffix(".index"))
                                                                             for p in shards)]
        res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt", f"--vocab_file={VOCAB}",
                       "--output_file=" + ",".join(map(str, shards)), "--random_seed=4", "--dupe_factor=3",
                       *indexes, *flags)
        assert res.returncode == 0, res.stderr
        shutil.copy(VOCAB, folder / "vocab.txt")
        (folder / "dataset.json").write_text(json.dumps({"max_seq_length": 128, "max_predictions_per_seq": 20}))
        write_manifest(folder, {p.name: hdf5.count_instances(p) if suffix == ".hdf5" else len(list(read_records(p)))
                                for p in shards})
    return folders


def test_every_layout_verifies_and_gives_the_same_stats(layouts, tmp_path):
    """verify and stats read the three folders alike (the library in this process: TensorFlow loads once)."""
    figures = {}
    for name, folder in layouts.items():
        summary = verify.verify(folder)
        assert (summary["records"], summary["files"], summary["manifest"]) == (42, 2, True)
        st = stats.dataset_stats(folder)
        assert st["format"] == ("tfrecord" if name == "standard" else name)
        figures[name] = {k: st[k] for k in ("records", "tokens", "random_next", "full_length", "masked_tokens",
                                            "sequence_length_histogram", "masked_count_histogram", "unk_tokens")}
    assert figures["standard"]["masked_count_histogram"].get("20")  # the fixed count: full sequences get 20
    assert figures["remask"] == figures["standard"] == figures["hdf5"]


def test_verify_takes_a_file_or_a_folder_without_a_manifest(layouts, tmp_path):
    res = wikiprep("verify", str(layouts["hdf5"] / "wiki_00001.hdf5"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (f"OK {layouts['hdf5'] / 'wiki_00001.hdf5'}: 21 records in 1 files, "
                                  f"{(layouts['hdf5'] / 'wiki_00001.hdf5').stat().st_size} bytes, seq 128, "
                                  "20 predictions (HDF5, NVIDIA's layout); no MANIFEST.json: records checked, "
                                  "not checksums")
    loose = tmp_path / "loose"
    shutil.copytree(layouts["remask"], loose)
    (loose / "MANIFEST.json").unlink()
    (loose / "dataset.json").unlink()
    res = wikiprep("verify", str(loose))
    assert res.returncode == 0, res.stderr
    assert "42 records in 2 files" in res.stdout and "(TFRecord, Graphcore static mask); no MANIFEST.json" in res.stdout
    (loose / "dataset.json").write_text("{}")
    res = wikiprep("verify", str(loose))
    assert res.returncode == 1 and "dataset.json but no MANIFEST.json: an unfinished dataset" in res.stderr


def test_inspect_shows_hdf5_and_remask_records_with_tokens(layouts):
    """The remask and HDF5 files hold the instances of the standard file (same fixed mask count): inspect shows
    each the same, in the standard layout (only the record lines' byte counts differ)."""
    shown = {}
    for name, shard in (("standard", "wiki_00000.tfrecord"), ("remask", "wiki_00000.tfrecord"),
                        ("hdf5", "wiki_00000.hdf5")):
        res = wikiprep("inspect", str(layouts[name] / shard), "-n", "3")
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert sum(line.startswith("--- ") for line in lines) == 3 and lines[2].startswith("lengths: A ")
        shown[name] = [line for line in lines[1:] if not line.startswith("--- ")]
    assert "A: [CLS] " in "\n".join(shown["standard"])
    assert shown["remask"] == shown["standard"] == shown["hdf5"]


def test_a_vocabulary_file_of_gigabytes_is_one_line_in_bounded_memory(tmp_path):
    """A 4 GiB vocab file (sparse: no disk) under a 1 GB address-space limit: refused by its size, read no further
    than the cap (tokenization.MAX_VOCAB_BYTES), instead of a MemoryError (or the OOM killer) reading it whole."""
    import resource

    vocab = tmp_path / "vocab.txt"
    with open(vocab, "wb") as f:
        f.write(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
        f.truncate(4 << 30)
    (tmp_path / "corpus.txt").write_text("the the the.\n", encoding="utf-8")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = subprocess.run([sys.executable, "-c", "import sys; from wikiprep.cli import main; sys.exit(main())",
                        "create-pretraining-data", f"--input_file={tmp_path / 'corpus.txt'}",
                        f"--output_file={tmp_path / 'out.tfrecord'}", f"--vocab_file={vocab}"],
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                       timeout=120, preexec_fn=limit)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.splitlines()[-1] == (f"wikiprep: error: {vocab}: larger than a vocabulary may be (16 MiB, "
                                         f"1,048,576 tokens): not a WordPiece vocabulary")
    assert not (tmp_path / "out.tfrecord").exists()


def test_a_tokenizer_json_is_taken_for_its_wordpiece_vocabulary(tmp_path):
    """A Hugging Face tokenizer.json (here made by `tokenizers` from BERT's vocab.txt) gives the same records as the
    vocab.txt it holds, and is kept as that vocab.txt."""
    from tokenizers import BertWordPieceTokenizer

    from wikiprep.tokenization import Vocab

    tokenizer_json = tmp_path / "tokenizer.json"
    BertWordPieceTokenizer(str(VOCAB), lowercase=True).save(str(tokenizer_json))
    assert Vocab(tokenizer_json).vocab_txt == VOCAB.read_bytes() and Vocab(tokenizer_json).lowercase is True
    outputs = {}
    for vocab in (VOCAB, tokenizer_json):
        out = tmp_path / f"{vocab.stem}.tfrecord"
        res = wikiprep("create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt", f"--vocab_file={vocab}",
                       f"--output_file={out}")
        assert res.returncode == 0, res.stderr
        outputs[vocab.name] = out.read_bytes()
    assert outputs["tokenizer.json"] == outputs[VOCAB.name]
