"""Sibling datasets in one data folder (issue #30): another shard count, seed, dupe factor, sequence length, mask
count, whole-word masking or layout is a dataset of its own folder, named by them (`dataset.folder_name`), that
reuses every stage already in the data folder that does not depend on the change.

Through Luigi's command line, against a small synthetic dump on a real HTTP server (tests/dumpserver.py), whose
request log says what was fetched: a dataset of 16 shards is built once, and each test runs another beside a copy
of it. What must not be made again is checked by inode and mtime_ns (a file rewritten is a new inode, at least a
new mtime): the extracted parts and the Punkt model for any sibling, the splits, sentence shards and vocabulary too
when the shard count and seed are the same. A dataset made before folder names said the shard count (a folder of
the old name) is found, complete, and resumed where it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dumpserver import DumpServer
from test_plan import table
from testkit.synthetic_dump import write_synthetic_dump
from wikiprep import dataset, layouts
from wikiprep.options import GenerationOptions

REPO = Path(__file__).resolve().parents[1]
WIKI, DATE = "enwiki", "20260101"
WORK = Path(f"{WIKI}-{DATE}")  # the corpus' folder under the data folder


def folder(num_shards: int, dupe_factor: int = 5) -> Path:
    """The dataset folder of a run of these parameters (defaults otherwise), under the data folder."""
    return WORK / dataset.folder_name(GenerationOptions(dupe_factor=dupe_factor), num_shards=num_shards)


SIXTEEN = folder(16)
LEGACY = WORK / "seq128_mask20_dup5"  # what a 16-shard dataset's folder was named before


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)
    return env


def _params(srv: DumpServer, data: Path, *args: str) -> list[str]:
    return ["Pretrain128", "--data-dir", str(data), "--dump-url", srv.url, "--wiki", WIKI, "--dump-date", DATE,
            "--vocab-size", "2000", *args]


def pretrain(srv: DumpServer, data: Path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "luigi", "--module", "workflows", *_params(srv, data, *args),
                        "--local-scheduler", "--workers", "2"], cwd=REPO, env=_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def plan(srv: DumpServer, data: Path, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "workflows", "plan", *_params(srv, data, *args)], cwd=REPO, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def verify(path: Path) -> None:
    r = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "verify", str(path)], capture_output=True,
                       text=True, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr


def stamps(data: Path, *globs: str) -> dict[str, tuple[int, int]]:
    """{path: (inode, mtime_ns)} of every file the globs match under `data` (none matching is a mistake)."""
    found = {p.relative_to(data).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
             for pattern in globs for p in data.glob(pattern) if p.is_file()}
    assert found, globs
    return found


def tree(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("siblings")
    write_synthetic_dump(root / "site", WIKI, DATE, xml_mb=0.6, parts=2)
    with DumpServer(root / "site") as srv:
        yield srv


@pytest.fixture(scope="module")
def built(site, tmp_path_factory) -> Path:
    """A data folder holding the dataset of 16 shards (the vocabulary trained), and what it was made from."""
    data = tmp_path_factory.mktemp("built") / "data"
    pretrain(site, data, "--num-shards", "16")
    assert (data / SIXTEEN / "MANIFEST.json").is_file()
    return data


@pytest.fixture
def data(built, tmp_path) -> Path:
    """A copy of `built` (copied files keep their mtimes; the tests compare each file with itself, before and after)."""
    shutil.copytree(built, tmp_path / "data")
    return tmp_path / "data"


UPSTREAM = (f"downloads/{WIKI}/{DATE}/*", f"{WORK}/extracted/*", f"{WORK}/punkt_min200.json")
SPLIT = (f"{WORK}/split/**/*", f"{WORK}/sentences/**/*", f"{WORK}/vocab/*")


def test_another_shard_count_is_a_sibling_made_without_downloading_or_extracting_again(site, data):
    upstream, sixteen, requests = stamps(data, *UPSTREAM), tree(data / SIXTEEN), len(site.log)
    pretrain(site, data, "--num-shards", "8")
    eight = folder(8)
    assert (SIXTEEN.name, eight.name) == ("seq128_mask20_dup5_shards16", "seq128_mask20_dup5_shards8")
    assert [seen.path for seen in site.log[requests:]] == []  # not even the dump's status: its copy is read
    assert stamps(data, *UPSTREAM) == upstream
    assert tree(data / SIXTEEN) == sixteen
    for path, shards in ((SIXTEEN, 16), (eight, 8)):
        verify(data / path)
        assert len(list((data / path).glob("wiki_*.tfrecord"))) == shards
    assert not (data / LEGACY).exists()


def test_another_dupe_factor_also_reuses_the_sentence_shards_and_the_vocabulary(site, data):
    before, sixteen = stamps(data, *UPSTREAM, *SPLIT), tree(data / SIXTEEN)
    assert any("/sentences/" in path for path in before) and any("/vocab/" in path for path in before)
    pretrain(site, data, "--num-shards", "16", "--dupe-factor", "3")
    three = folder(16, dupe_factor=3)
    assert three.name == "seq128_mask20_dup3_shards16"
    assert stamps(data, *UPSTREAM, *SPLIT) == before
    assert tree(data / SIXTEEN) == sixteen
    verify(data / three)
    assert (data / three / "vocab.txt").read_bytes() == (data / SIXTEEN / "vocab.txt").read_bytes()


def test_the_dry_run_shows_a_sibling_reusing_what_it_does_not_depend_on(site, built):
    files = tree(built)
    # Another shard count: the dump's download, extraction and Punkt are done; the split is not.
    assert table(plan(site, built, "--num-shards", "8")) == {
        "DownloadPart": (2, 2, 0), "ExtractPart": (2, 2, 0), "TrainPunkt": (1, 1, 0), "SplitPart": (2, 0, 2),
        "SplitDump": (1, 0, 1), "SentenceShard": (8, 0, 8), "SentenceShards": (1, 0, 1), "TrainVocab": (1, 0, 1),
        "PretrainShard": (8, 0, 8), "Pretrain128": (1, 0, 1)}
    # The same shards and seed: only the dataset's own shards and closing files are to run.
    assert table(plan(site, built, "--num-shards", "16", "--dupe-factor", "3")) == {
        "DownloadPart": (2, 2, 0), "ExtractPart": (2, 2, 0), "TrainPunkt": (1, 1, 0), "SplitPart": (2, 2, 0),
        "SplitDump": (1, 1, 0), "SentenceShard": (16, 16, 0), "SentenceShards": (1, 1, 0), "TrainVocab": (1, 1, 0),
        "PretrainShard": (16, 0, 16), "Pretrain128": (1, 0, 1)}
    assert tree(built) == files


def test_a_dataset_named_before_folders_said_its_shard_count_is_found_done_and_resumes_there(site, data):
    (data / SIXTEEN).rename(data / LEGACY)
    files, requests = tree(data), len(site.log)
    said = (f"{data / LEGACY}: made before a dataset folder's name said its shard count, seed and whole-word "
            f"masking, holds a dataset of these: this run takes it as it is; new datasets of these parameters go "
            f"to {SIXTEEN.name}")
    out = plan(site, data, "--num-shards", "16")
    assert "nothing to run: the dataset is complete" in out and f"into {data / LEGACY}" in out
    r = pretrain(site, data, "--num-shards", "16")
    assert r.stderr.count(f"INFO: {said}\n") == 1, r.stderr[-3000:]
    assert "ran successfully" not in r.stderr and f"wikiprep: done: {data / LEGACY} " in r.stdout + r.stderr
    assert tree(data) == files and not (data / SIXTEEN).exists()
    assert len(site.log) == requests

    # Half-built (a shard's receipt and the manifest lost): the rerun finishes it where it is, the same bytes.
    (data / LEGACY / ".receipts" / "wiki_00003.tfrecord.json").unlink()
    (data / LEGACY / ".receipts" / "MANIFEST.json.json").unlink()
    (data / LEGACY / "MANIFEST.json").unlink()
    r = pretrain(site, data, "--num-shards", "16")
    assert "PretrainShard" in r.stderr and said in r.stderr
    assert tree(data) == files and not (data / SIXTEEN).exists()

    # Another shard count beside it is a sibling, as beside a dataset of the new name.
    pretrain(site, data, "--num-shards", "8")
    verify(data / folder(8))
    legacy = {k.removeprefix(f"{LEGACY}/"): v for k, v in files.items() if k.startswith(f"{LEGACY}/")}
    assert tree(data / LEGACY) == legacy

    # Renamed as the refusal of a default run in its folder says (test_bad_input), it is complete under its new name.
    (data / LEGACY).rename(data / SIXTEEN)
    r = pretrain(site, data, "--num-shards", "16")
    assert "ran successfully" not in r.stderr and said not in r.stderr, r.stderr[-3000:]
    verify(data / SIXTEEN)
    assert tree(data / SIXTEEN) == legacy


def test_a_folder_is_named_by_what_differs_from_the_defaults_and_an_old_one_keeps_its_dataset(tmp_path):
    """`dataset.dataset_folder` on folders as runs leave them (their dataset.json), in process."""
    hdf5 = layouts.from_flags("hdf5", "standard")
    parquet = layouts.from_flags("parquet", "standard", bin_size=64)
    defaults = GenerationOptions(dupe_factor=5)
    assert dataset.folder_name(defaults, num_shards=256) == "seq128_mask20_dup5"  # every version's name
    assert dataset.folder_name(defaults, hdf5, num_shards=256) == "seq128_mask20_dup5_hdf5"
    wwm = GenerationOptions(dupe_factor=5, random_seed=7, do_whole_word_mask=True)
    assert dataset.folder_name(wwm, hdf5, num_shards=16) == "seq128_mask20_dup5_shards16_seed7_wwm_hdf5"

    def begun(folder: Path, options: GenerationOptions, num_shards: int) -> None:
        folder.mkdir(parents=True)
        (folder / "dataset.json").write_text(json.dumps(dataset.describe(
            options, None, corpus={}, num_shards=num_shards, min_doc_chars=200, vocab_size=30522)))

    def where(options: GenerationOptions, num_shards: int, layout=layouts.DEFAULT) -> str:
        return dataset.dataset_folder(tmp_path, options, layout, num_shards=num_shards).name

    assert where(wwm, 16) == "seq128_mask20_dup5_shards16_seed7_wwm"  # nothing there yet
    begun(tmp_path / "seq128_mask20_dup5", wwm, 16)  # as an older version named it
    assert where(wwm, 16) == "seq128_mask20_dup5"
    assert where(defaults, 256) == "seq128_mask20_dup5"  # check_folder refuses it, naming its name now
    for other in ((wwm, 8), (GenerationOptions(dupe_factor=5, random_seed=7), 16), (defaults, 16)):
        assert where(*other) != "seq128_mask20_dup5"
    # Of another layout, or once a dataset of the new name was begun, the old folder is not this dataset's.
    assert where(wwm, 16, hdf5) == "seq128_mask20_dup5_shards16_seed7_wwm_hdf5"
    begun(tmp_path / "seq128_mask20_dup5_shards16_seed7_wwm", wwm, 16)
    assert where(wwm, 16) == "seq128_mask20_dup5_shards16_seed7_wwm"
    # A layout with a finishing step claims its staged shards' folder first: a half-built one of each name.
    begun(tmp_path / "staged" / "seq128_mask20_dup5_parquet_bin64", defaults, 16)
    assert where(defaults, 16, parquet) == "seq128_mask20_dup5_parquet_bin64"
    begun(tmp_path / "staged" / "seq128_mask20_dup5_shards16_parquet_bin64", defaults, 16)
    assert where(defaults, 16, parquet) == "seq128_mask20_dup5_shards16_parquet_bin64"
