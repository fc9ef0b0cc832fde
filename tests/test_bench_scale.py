"""benchmarks/bench_scale.py --quick runs end to end (every stage on one core, TrainVocab in its limited child,
the projection) and prints well-formed tables, so the script behind docs/performance.md's scale table keeps working."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODES = ("1 node", "4 nodes", "16 nodes", "64 nodes")


def tables(markdown: str) -> list[list[list[str]]]:
    """The markdown tables of `markdown`, each a list of rows of cells."""
    out, current = [], None
    for line in markdown.splitlines():
        if line.startswith("|"):
            assert line.endswith("|"), line
            if current is None:
                current = []
                out.append(current)
            current.append([c.strip() for c in line[1:-1].split("|")])
        else:
            current = None
    return out


def seconds(cell: str) -> float:
    value, unit = cell.strip("*").split(" ")
    return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]


def test_bench_scale_quick_prints_the_projection(tmp_path):
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_scale.py", "--quick", "--work", str(tmp_path / "work"),
                        "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]  # ~25 s on a quiet 2-core machine
    report = json.loads(out.read_text())
    assert report["markdown"] == r.stdout.rstrip("\n")

    rates, projection = tables(r.stdout)
    assert all(len(row) == 3 for row in rates) and rates[1] == ["---"] * 3
    assert {row[0].split(" ")[0] for row in rates[2:]} >= {"ExtractPart", "SplitPart", "merge", "PretrainShard",
                                                           "sha256", "`wikiprep", "TrainPunkt"}
    assert projection[0] == ["stage", "tasks", "core-hours", *NODES]
    assert all(len(row) == 3 + len(NODES) for row in projection)
    rows = {row[0].split(" ")[0].strip("*"): row for row in projection[2:]}
    assert set(rows) >= {"download", "ExtractPart", "TrainPunkt", "SplitPart", "merge,", "TrainVocab",
                         "PretrainShard", "finalize:", "total,", "LDDL's", "`wikiprep"}
    for name in ("download", "TrainPunkt", "TrainVocab", "finalize:"):  # serial: the same on any number of nodes
        assert rows[name][1] == "serial" and len(set(rows[name][3:])) == 1
    total = [seconds(c) for c in projection[[r[0] for r in projection].index("**total, from downloaded parts**")][3:]]
    assert all(t > 0 for t in total) and total == sorted(total, reverse=True)  # more nodes never slower

    for stage in report["projection"]["rows"]:  # the largest task is the floor of every parallel stage
        if not stage["serial"]:
            assert all(w >= stage["largest_task_s"] * 0.999 for w in stage["wall_s"].values())
    vocab = report["vocab"]
    for key in ("own_words", "long_tail"):
        assert vocab[key]["seconds"] > 0 and 0 < vocab[key]["peak_rss_mb"] < vocab["mem_gb"] * 1024
        assert vocab[key]["vocab_tokens"] > 1000
    assert vocab["long_tail"]["distinct_words"] > 2 * vocab["own_words"]["distinct_words"]
