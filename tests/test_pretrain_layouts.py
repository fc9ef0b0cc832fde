"""The Pretrain tasks' other outputs, through the `luigi` command line on the embedded sample dump: NVIDIA's HDF5
(`--output-format hdf5`) and Graphcore's static mask (`--layout remask`), each in its sibling folder, holding the
instances of the TFRecord dataset made with the same parameters, in the same order, byte-deterministic."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardkit.errors import PrepError
from shardkit.example import decode_example
from shardkit.records import read_records
from testkit.instances import assert_hdf5_holds_records
from testkit.reports import as_hashed
from wikiprep import dataset, layouts, reader
from wikiprep.wikipedia.samples import write_sample_dump
from workflows import DEMO_DATE, DEMO_WIKI

REPO = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))
from fixture_paths import REFERENCE_VOCAB as VOCAB  # noqa: E402
WORK = f"{DEMO_WIKI}-{DEMO_DATE}"
# Every run below uses --fixed-mask-count (given, or implied by --layout remask): the standard dataset the
# remask one is undone into is the one made with it, not the default's.
# The folders of 2 shards, dupe factor 2: the standard layout's, and its siblings of the other layouts.
STANDARD = "seq128_mask20_dup2_shards2"
HDF5, REMASK = f"{STANDARD}_hdf5", f"{STANDARD}_remask"
RUNS = {STANDARD: [], HDF5: ["--output-format", "hdf5"], REMASK: ["--layout", "remask"]}


def run_luigi(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([LUIGI, "--module", "workflows", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)


def pretrain(site: Path, data: Path, *extra: str, workers: int = 2):
    return run_luigi("Pretrain128", "--data-dir", str(data), "--dump-url", site.as_uri(), "--wiki", DEMO_WIKI,
                     "--dump-date", DEMO_DATE, "--num-shards", "2", "--dupe-factor", "2", "--vocab-file", str(VOCAB),
                     "--local-scheduler", "--workers", str(workers), *extra)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("layouts")
    write_sample_dump(root / "site", DEMO_WIKI, DEMO_DATE)
    for name, extra in RUNS.items():
        fixed = [] if "remask" in extra else ["--fixed-mask-count"]
        r = pretrain(root / "site", root / "data", *extra, *fixed)
        assert r.returncode == 0, r.stderr[-3000:]
    return {"site": root / "site", "data": root / "data", **{name: root / "data" / WORK / name for name in RUNS}}


def tree(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`, receipts included, by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_each_folder_holds_its_own_format_and_says_so(made):
    standard, h5, rm = (made[name] for name in RUNS)
    assert sorted(p.name for p in h5.glob("wiki_*")) == ["wiki_00000.hdf5", "wiki_00001.hdf5"]
    assert not list(h5.glob("*.tfrecord")) and not list(h5.glob("*.index"))
    assert sorted(p.name for p in rm.glob("wiki_*")) == ["wiki_00000.index", "wiki_00000.tfrecord",
                                                         "wiki_00001.index", "wiki_00001.tfrecord"]
    assert "input_position" in decode_example(next(read_records(rm / "wiki_00000.tfrecord")))
    described = {name: json.loads((made[name] / "dataset.json").read_text()) for name in RUNS}
    assert "output_format" not in described[STANDARD] and "layout" not in described[STANDARD]
    assert {k: described[HDF5][k] for k in ("output_format", "layout", "fixed_mask_count")} == \
        {"output_format": "hdf5", "layout": "standard", "fixed_mask_count": True}
    assert {k: described[REMASK][k]
            for k in ("output_format", "layout", "pad_position_value", "fixed_mask_count")} == \
        {"output_format": "tfrecord", "layout": "remask", "pad_position_value": 384, "fixed_mask_count": True}
    for name in RUNS:
        manifest = json.loads((made[name] / "MANIFEST.json").read_text())
        assert manifest["dataset"] == described[name]
        stats = json.loads((made[name] / "stats.json").read_text())
        assert [s["file"] for s in stats["shards"]] == [p.name for p in sorted(made[name].glob("wiki_*.[th]*"))]


def test_hdf5_holds_the_tfrecord_instances_in_the_same_order(made):
    standard, h5 = made[STANDARD], made[HDF5]
    total = 0
    for i in range(2):
        count = assert_hdf5_holds_records(h5 / f"wiki_{i:05d}.hdf5", standard / f"wiki_{i:05d}.tfrecord")
        assert count > 100
        total += count
    assert json.loads((h5 / "stats.json").read_text())["total"]["instances"] == total


def test_the_remask_dataset_undone_is_the_fixed_mask_count_standard_dataset(made):
    standard, rm = (reader.open_records(made[name]) for name in (STANDARD, REMASK))
    assert rm.layout.name == "remask" and standard.layout.name == "tfrecord"
    assert rm.layout.pad_position_value == 384  # as dataset.json says
    undone, expected = list(reader.batches(rm)), list(reader.batches(standard))
    assert [p.name for p, _ in undone] == [p.name for p, _ in expected]
    for (path, got), (_, want) in zip(undone, expected, strict=True):
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{path} {name}")


def test_verify_passes_on_both_new_folders(made):
    for name in (HDF5, REMASK):
        r = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "verify", str(made[name])],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr


def test_each_task_report_is_what_wikiprep_stats_writes(made, tmp_path):
    """Each task made its report from its shards' receipts (each shard read back by its own writer, in its
    layout): the same bytes as `wikiprep stats` reading every record, run where it names the folder alike."""
    for name in RUNS:
        out = tmp_path / name
        r = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "stats", name, "--out", str(out)],
                           cwd=made[name].parent, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert r.returncode == 0, r.stdout + r.stderr
        assert as_hashed(made[name] / "report") == {p.name: p.read_bytes() for p in out.iterdir()}, name


def test_a_rerun_with_other_values_never_returns_another_folders_data(made):
    before = {name: tree(made[name]) for name in RUNS}
    # The remask folder holds fixed-mask-count instances: asking for them again is complete, nothing runs.
    r = pretrain(made["site"], made["data"], "--layout", "remask", "--fixed-mask-count")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "complete ones were encountered" in r.stderr and "ran successfully" not in r.stderr, r.stderr[-3000:]
    # The HDF5 folder holds fixed-mask-count instances: the default count is refused, naming it, before any work.
    r = pretrain(made["site"], made["data"], "--output-format", "hdf5")
    assert r.returncode != 0
    assert "wikiprep: error: " in r.stderr and "fixed_mask_count True there, False here" in r.stderr, r.stderr[-3000:]
    assert {name: tree(made[name]) for name in RUNS} == before
    # A folder's description is compared on its format and layout even when the run's own omits them (the
    # standard dataset's description has neither): a standard run never takes an HDF5 folder for its own.
    held = json.loads((made[HDF5] / "dataset.json").read_text())
    standard = dataset.DatasetSpec({k: v for k, v in held.items() if k not in ("output_format", "layout")},
                                   layouts.DEFAULT, "wiki")
    with pytest.raises(PrepError, match=r"\(output_format 'hdf5' there, 'tfrecord' here\)"):
        dataset.check_folder(made[HDF5], standard)
    with pytest.raises(PrepError, match=r"\(layout 'remask' there, 'standard' here\)"):
        dataset.check_folder(made[REMASK], standard)


def test_two_runs_give_the_same_bytes(made):
    """Both new folders removed and made again, by one worker rather than two: every file the same bytes."""
    for name in (HDF5, REMASK):
        before = tree(made[name])
        shutil.rmtree(made[name])
        r = pretrain(made["site"], made["data"], *RUNS[name], *([] if "remask" in name else ["--fixed-mask-count"]),
                     workers=1)
        assert r.returncode == 0, r.stderr[-3000:]
        after = tree(made[name])
        assert set(after) == set(before)
        changed = [path for path in after if after[path] != before[path] and not path.startswith(".receipts/")]
        assert not changed
        assert [p for p in after if p.endswith((".hdf5", ".tfrecord", ".index", "MANIFEST.json"))]
