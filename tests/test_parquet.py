"""LDDL's Parquet layout (`--output-format parquet`), through the `luigi` command line on a small dump
(a 1 MB synthetic dump, `testkit.synthetic_dump`: enough documents for 8 shards, and one bin whose total divides
by 8), read by its consumers' own code: LDDL's `get_bert_pretrain_data_loader` (vendored unmodified in testkit/lddl/,
commit e4006d2b), its ParquetDataset's balance assertions under real torch.distributed process groups of 1, 2, 4
and 8 ranks, and Hugging Face's `datasets.load_dataset("parquet")`; the snippets of docs/outputs.md run as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from fixture_paths import REFERENCE_VOCAB as VOCAB
from shardkit.atomic import receipt_path
from testkit.reports import as_hashed
from testkit.synthetic_dump import write_synthetic_dump
from wikiprep import reader

REPO = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))
WIKI, DATE = "enwiki", "20260101"
WORK = f"{WIKI}-{DATE}"
SHARDS = 8  # files per bin: the loader's rank count must divide it (8 ranks below)
STANDARD = "seq128_mask20_dup2_shards8"  # the folders of 8 shards, dupe factor 2, and their Parquet siblings
BINNED, DYNAMIC = f"{STANDARD}_parquet_bin32", f"{STANDARD}_parquet_dynamic"
RUNS = {STANDARD: [], BINNED: ["--output-format", "parquet", "--bin-size", "32"],
        DYNAMIC: ["--output-format", "parquet", "--masking", "dynamic"]}


def pretrain(site: Path, data: Path, *extra: str, workers: int = 2) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([LUIGI, "--module", "workflows", "Pretrain128", "--data-dir", str(data), "--dump-url",
                           site.as_uri(), "--wiki", WIKI, "--dump-date", DATE, "--num-shards", str(SHARDS),
                           "--dupe-factor", "2", "--vocab-file", str(VOCAB), "--local-scheduler", "--workers",
                           str(workers), *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("parquet")
    write_synthetic_dump(root / "site", WIKI, DATE, xml_mb=1.0, parts=2)
    for extra in RUNS.values():
        r = pretrain(root / "site", root / "data", *extra)
        assert r.returncode == 0, r.stderr[-3000:]
    r = pretrain(root / "site", root / "one", *RUNS[BINNED], workers=1)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"site": root / "site", "data": root / "data" / WORK, "one": root / "one" / WORK}


def lddl():
    """LDDL's own torch loader, as NVIDIA ships it (testkit/lddl: its files unmodified)."""
    if str(REPO / "testkit") not in sys.path:
        sys.path.insert(0, str(REPO / "testkit"))
    import lddl.torch

    return lddl.torch


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def tfrecord_instances(folder: Path) -> list[tuple]:
    """(tokens of [CLS] A [SEP] B [SEP], {masked position: original id}, random next) of every TFRecord instance."""
    found = []
    for _, b in reader.batches(reader.open_records(folder)):
        for i in range(len(b["input_ids"])):
            n = int(b["input_mask"][i].sum())
            k = int(b["masked_lm_weights"][i].sum())
            masks = dict(zip(b["masked_lm_positions"][i][:k].tolist(), b["masked_lm_ids"][i][:k].tolist()))
            found.append((tuple(b["input_ids"][i][:n].tolist()), masks, int(b["next_sentence_labels"][i][0])))
    return found


def loader_samples(folder: Path, **kwargs) -> list[dict]:
    """Every sample LDDL's loader gives in one epoch, one rank, as plain per-sample values."""
    loader = lddl().get_bert_pretrain_data_loader(str(folder), vocab_file=str(folder / "vocab.txt"),
                                                  data_loader_kwargs={"batch_size": 64, "num_workers": 1},
                                                  shuffle_buffer_size=256, log_level=40, **kwargs)
    samples = []
    for batch in loader:
        for i in range(len(batch["input_ids"])):
            n = int(batch["attention_mask"][i].sum())
            samples.append({"input_ids": tuple(batch["input_ids"][i][:n].tolist()),
                            "labels": batch["labels"][i][:n].tolist(),
                            "token_type_ids": batch["token_type_ids"][i][:n].tolist(),
                            "next": int(batch["next_sentence_labels"][i])})
    return samples


def test_bytes_are_the_same_with_one_and_two_workers(made):
    assert tree(made["data"] / BINNED) == tree(made["one"] / BINNED)
    assert tree(made["data"] / "staged" / BINNED) == tree(made["one"] / "staged" / BINNED)


def test_the_folder_is_ldddls_binned_balanced_layout(made):
    folder = made["data"] / BINNED
    stats = json.loads((folder / "stats.json").read_text())
    bins = stats["balance"]["bins"]
    assert [b["tokens"] for b in bins] == ["1-32", "33-64", "65-96", "97-128"]
    names = sorted(p.name for p in folder.glob("wiki_*"))
    assert names == sorted(f"wiki_{j:05d}.parquet_{b}" for j in range(SHARDS) for b in range(4))
    counts = {p: reader.open_records(p).layout.count(p) for p in folder.glob("wiki_*")}
    assert any(b["dropped"] for b in bins)  # this corpus has a bin whose total divides by the file count
    for b in bins:
        mine = [n for p, n in counts.items() if p.name.endswith(f"_{b['bin']}")]
        assert sorted(set(mine)) == b["per_file"] and max(mine) == min(mine) + 1
        assert sum(mine) == b["kept"] == b["instances"] - b["dropped"]
    assert stats["total"]["instances"] == sum(counts.values())
    import pyarrow.parquet as pq

    schema = pq.read_schema(folder / "wiki_00000.parquet_0")
    assert [(f.name, str(f.type)) for f in schema] == [
        ("A", "string"), ("B", "string"), ("is_random_next", "bool"), ("num_tokens", "uint16"),
        ("masked_lm_positions", "binary"), ("masked_lm_labels", "string"), ("bin_id", "int64")]
    dynamic = pq.read_schema(made["data"] / DYNAMIC / "wiki_00000.parquet")
    assert [f.name for f in dynamic] == ["A", "B", "is_random_next", "num_tokens"]


def test_only_the_positions_are_compressed_and_a_flipped_byte_is_found_by_verify(made, tmp_path):
    """The pinned writer (parquet.WRITER, COMPRESSED; performance.md says why): snappy for masked_lm_positions, whose
    rows repeat np.save's header, the text columns uncompressed, no page checksums (as LDDL writes them). A byte
    flipped in a data page is found by `wikiprep verify`, against MANIFEST.json's sha256."""
    import pyarrow.parquet as pq

    for path in [made["data"] / BINNED / "wiki_00003.parquet_1", made["data"] / DYNAMIC / "wiki_00000.parquet"]:
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            codecs = {meta.row_group(g).column(c).path_in_schema: meta.row_group(g).column(c).compression
                      for c in range(meta.num_columns)}
            assert codecs == {name: "SNAPPY" if name == "masked_lm_positions" else "UNCOMPRESSED" for name in codecs}
    shutil.copytree(made["data"] / DYNAMIC, tmp_path / DYNAMIC)
    damaged = tmp_path / DYNAMIC / "wiki_00000.parquet"
    data = bytearray(damaged.read_bytes())
    data[200] ^= 0xFF  # inside the first data page of column A
    damaged.write_bytes(bytes(data))
    r = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "verify", str(tmp_path / DYNAMIC)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == f"wikiprep: error: {damaged}: checksum differs from MANIFEST.json"


def test_lddls_loader_gives_every_promised_sample_with_the_tfrecord_tokens_and_masks(made):
    folder = made["data"] / BINNED
    expected = tfrecord_instances(made["data"] / STANDARD)
    by_tokens = {}
    for tokens, masks, nxt in expected:
        by_tokens.setdefault(tokens, []).append((masks, nxt))
    samples = loader_samples(folder)
    promised = sum(b["loader_yields"] for b in json.loads((folder / "stats.json").read_text())["balance"]["bins"])
    assert len(samples) == promised > 1000
    for s in samples:
        masks = {p: label for p, label in enumerate(s["labels"]) if label != -1}
        assert (masks, s["next"]) in by_tokens[s["input_ids"]]


def test_with_dynamic_masking_lddls_loader_masks_the_unmasked_pairs_itself(made):
    expected = tfrecord_instances(made["data"] / STANDARD)
    originals = set()
    for tokens, masks, _ in expected:
        unmasked = list(tokens)
        for p, original in masks.items():
            unmasked[p] = original
        originals.add(tuple(unmasked))
    samples = loader_samples(made["data"] / DYNAMIC, mlm_probability=0.15)
    assert len(samples) > 1000
    masked = 0
    for s in samples:
        restored = list(s["input_ids"])
        for p, label in enumerate(s["labels"]):
            if label != -1:
                restored[p] = label
                masked += 1
        assert tuple(restored) in originals
    assert 0.10 < masked / sum(len(s["input_ids"]) for s in samples) < 0.20


def test_each_task_report_is_what_wikiprep_stats_writes(made, tmp_path):
    """A finishing part counts its files' figures from the rows as it writes them (stats.FileFigures), where a
    TFRecord shard is read back: the report is still the bytes `wikiprep stats` writes reading every instance of
    the files, but for the line that says how the manifest was checked (testkit.reports.as_hashed)."""
    for name in (BINNED, DYNAMIC):
        out = tmp_path / name
        r = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "stats", name, "--out", str(out)],
                           cwd=made["data"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert as_hashed(made["data"] / name / "report") == {p.name: p.read_bytes() for p in out.iterdir()}, name


def test_a_damaged_staged_shard_is_named_removed_and_made_again(made, tmp_path):
    """A staged shard is read in ranges, each row checked against its CRC (its sha256 is the whole file's): a row
    flipped there fails the part that reads it with one line naming the shard, which it removes with its receipt;
    the same command again makes the shard again, then the part, and the dataset is byte-identical."""
    shutil.copytree(made["one"].parent, tmp_path / "one")
    work = tmp_path / "one" / WORK
    before, staged = tree(work / BINNED), work / "staged" / BINNED
    shard, first, _ = json.loads((staged / "parts.json").read_text())["parts"][3][0][0]  # part 3's first run, bin 0
    path = staged / f"wiki_{shard:05d}.rows"
    raw = bytearray(path.read_bytes())
    intact = bytes(raw)
    marks_at = struct.unpack_from("<Q", raw, len(raw) - 12)[0]  # the closing framed uint64's payload
    marks = array("q", raw[marks_at + 12:len(raw) - 28])  # the framed marks before it
    raw[marks[first // 4096] + 20] ^= 1  # in the first row of the block that holds the run's first row (bin 0's)
    path.write_bytes(bytes(raw))
    for part in (work / BINNED).glob("wiki_00003.parquet_*"):
        part.unlink()
    r = pretrain(made["site"], tmp_path / "one", *RUNS[BINNED], workers=1)
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"wikiprep: error: {path}: damaged since it was committed: rows ") and \
        "a row whose checksum does not match; removed with its receipt" in line, r.stderr[-3000:]
    assert not path.exists() and not receipt_path(path).exists()
    r = pretrain(made["site"], tmp_path / "one", *RUNS[BINNED], workers=1)
    assert r.returncode == 0, r.stderr[-3000:]
    assert path.read_bytes() == intact and tree(work / BINNED) == before


def _ranks(rank: int, world: int, folder: str, init: str, out: str) -> None:
    """One rank of a gloo group: LDDL's dataset of every bin, built (its balance assertions) and read, its share."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    sys.path.insert(0, str(REPO / "testkit"))
    from lddl.torch.bert import BertPretrainDataset
    from lddl.torch.log import DatasetLogger
    from lddl.utils import get_all_bin_ids, get_all_parquets_under, get_file_paths_for_bin_id

    paths = get_all_parquets_under(folder)
    got = []
    for b in get_all_bin_ids(paths):
        ds = BertPretrainDataset(get_file_paths_for_bin_id(paths, b), logger=DatasetLogger(log_level=40),
                                 shuffle_buffer_size=64)
        got += [(a, bb) for a, bb, *_ in ds]
    Path(out, f"rank{rank}.json").write_text(json.dumps(got))
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_every_bin_passes_lddls_balance_assertions_on_1_2_4_and_8_ranks(made, world, tmp_path):
    import torch.multiprocessing as mp

    folder = made["data"] / BINNED
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(_ranks, args=(world, str(folder), init, str(tmp_path)), nprocs=world, join=True,
                       start_method="fork")
    shares = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    bins = json.loads((folder / "stats.json").read_text())["balance"]["bins"]
    assert {len(s) for s in shares} == {sum(b["loader_yields"] for b in bins) // world}
    everything = [tuple(x) for s in shares for x in s]
    assert len(set(everything)) == len(everything)  # the ranks' shares do not overlap


def _snippet(name: str) -> str:
    text = (REPO / "docs" / "outputs.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- reading: {name} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/outputs.md has no {name} snippet"
    return found[1]


def _run_snippet(name: str, folder: Path, tmp_path: Path) -> str:
    code = re.sub(r'^DATASET = ".*"$', f"DATASET = {str(folder)!r}", _snippet(name), flags=re.MULTILINE)
    # LDDL from testkit/ (as `pip install` would give it); datasets' cache in the test's folder, offline.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "testkit"), os.environ.get("PYTHONPATH", "")]),
               HF_HOME=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_the_docs_lddl_snippet_runs(made, tmp_path):
    out = _run_snippet("lddl-loader", made["data"] / BINNED, tmp_path)
    bins = json.loads((made["data"] / BINNED / "stats.json").read_text())["balance"]["bins"]
    assert f"samples: {sum(b['loader_yields'] for b in bins)}" in out


def test_the_docs_datasets_snippet_loads_every_row(made, tmp_path):
    out = _run_snippet("hf-datasets", made["data"] / DYNAMIC, tmp_path)
    total = json.loads((made["data"] / DYNAMIC / "stats.json").read_text())["total"]["instances"]
    assert f"rows: {total}" in out


def test_verify_inspect_and_a_broken_balance(made, tmp_path):
    wikiprep = str(Path(sys.executable).with_name("wikiprep"))
    for name in (BINNED, DYNAMIC):
        r = subprocess.run([wikiprep, "verify", str(made["data"] / name)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "Parquet, LDDL's layout" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([wikiprep, "inspect", str(made["data"] / BINNED / "wiki_00003.parquet_2"), "-n", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "[CLS]" in r.stdout and "masked:" in r.stdout, r.stderr
    # A file of a bin moved to another bin: the loader's assertions would fail; verify says so first.
    broken = tmp_path / "broken"
    shutil.copytree(made["data"] / BINNED, broken)
    (broken / "MANIFEST.json").unlink()
    (broken / "dataset.json").unlink()
    (broken / "wiki_00000.parquet_0").unlink()
    r = subprocess.run([wikiprep, "verify", str(broken)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0  # without a manifest: the records alone are checked
    from wikiprep.layouts import parquet
    from shardkit.errors import PrepError

    counts = {p: parquet.LAYOUT.count(p) for p in broken.glob("wiki_*")}
    with pytest.raises(PrepError, match="bins of \\[7, 8\\] files"):
        parquet.LAYOUT.check_counts(counts)
