"""benchmarks/bench_pipeline.py runs end to end on a small synthetic dump (ours only: the anchors'
chain has its own test), so the benchmark behind docs/performance.md's figures keeps working."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_pipeline_reports_every_stage(tmp_path):
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_pipeline.py", "--xml-mb", "0.6", "--parts", "1",
                        "--multistream", "--slice-mb", "0.05", "--num-shards", "2", "--skip-anchors",
                        "--work", str(tmp_path / "work"), "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    report = json.loads(out.read_text())
    ours = report["ours"]
    assert ours["instances"] > 1000 and ours["seconds"] > 0
    assert ours["tasks"]["ExtractPart"]["tasks"] >= 2  # the one part was extracted in slices
    assert ours["tasks"]["PretrainShard"]["tasks"] == 2
    assert 0 < ours["peak_worker_rss_mb"] < 2000
    stages = report["stages_one_core"]
    assert set(stages) >= {"bz2_decompress", "extract_wikiextractor", "train_punkt", "clean_and_split",
                           "instances_to_indexed_tfrecord", "hf_wordpiece_encode_batch"}
    assert all(s["mb_per_s"] > 0 for s in stages.values())


def test_bench_pipeline_takes_a_downloaded_dump(tmp_path):
    """--dump-dir: any dump folder in the dumps-site layout (here the embedded sample, as dewiki)."""
    from wikiprep.wikipedia.samples import write_sample_dump

    folder = write_sample_dump(tmp_path / "site", wiki="dewiki", date="20250301")
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_pipeline.py", "--dump-dir", str(folder), "--num-shards", "2",
                        "--skip-anchors", "--skip-stages", "--work", str(tmp_path / "work"), "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert len(report["dump"]["parts"]) == 2 and report["ours"]["instances"] > 1000
    assert Path(report["ours"]["dataset"]).parent.name == "dewiki-20250301"
