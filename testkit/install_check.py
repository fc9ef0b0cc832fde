"""The package as a user installs it, without TensorFlow: `make test-install` (a few minutes; not in `make test`).

    python testkit/install_check.py [--python python3.12] [--work DIR]

In a fresh virtual environment, `pip install -c constraints.txt .` (no extras: no TensorFlow), then, from a
folder outside the source tree (so that nothing of the clone is imported): the demo's Wikipedia part through
`luigi --module wikiprep.workflows Pretrain128` on the sample dump, `wikiprep verify`, `inspect` and `stats` on
the dataset, `--version` of both programs, and the trainers' one line (they are not installed). Each step must
exit 0 and print what it should; TensorFlow must not be importable. Exit 0 when all held, 1 naming the first
step that did not.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _step(what: str, argv: list[str], cwd: Path, expect: str | None = None, *, fails: bool = False) -> str:
    """Run one step; it must exit 0 (non-zero with `fails`) and print `expect`."""
    print(f"-- {what}", flush=True)
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    output = r.stdout + r.stderr
    if (r.returncode != 0) != fails or (expect is not None and expect not in output):
        sys.stdout.write(output[-4000:])
        raise SystemExit(f"install_check: error: {what} failed (exit {r.returncode})"
                         + ("" if expect is None else f"; expected {expect!r} in its output"))
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to build the environment with")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed at the end)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="install-check-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    venv, run_dir = work / "venv", work / "run"
    run_dir.mkdir()
    python, bin_dir = venv / "bin" / "python", venv / "bin"

    _step("a fresh virtual environment", [args.python, "-m", "venv", str(venv)], work)
    _step("pip install -c constraints.txt . (no extras)",
          [str(python), "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), str(ROOT)], work)
    _step("TensorFlow is not installed", [str(python), "-c", "import importlib.util, sys; "
                                          "sys.exit(importlib.util.find_spec('tensorflow') is not None)"], run_dir)
    for program in ("wikiprep", "imagenet-prep"):
        _step(f"{program} --version", [str(bin_dir / program), "--version"], run_dir, expect=f"{program} ")
    _step("the sample dump", [str(python), "-c", "from pathlib import Path; "
                              "from wikiprep.wikipedia.samples import write_sample_dump; "
                              "write_sample_dump(Path('site'), wiki='enwiki', date='20260101')"], run_dir)
    data = run_dir / "data"
    _step("luigi --module wikiprep.workflows Pretrain128",
          [str(bin_dir / "luigi"), "--module", "wikiprep.workflows", "Pretrain128", "--local-scheduler",
           "--workers", "2", "--data-dir", str(data), "--dump-url", (run_dir / "site").as_uri(), "--wiki", "enwiki",
           "--dump-date", "20260101", "--num-shards", "4", "--vocab-size", "8000", "--min-doc-chars", "200"],
          run_dir, expect="This progress looks :)")
    (dataset,) = (data / "enwiki-20260101").glob("seq128_*")
    _step("wikiprep verify", [str(bin_dir / "wikiprep"), "verify", str(dataset)], run_dir, expect=f"OK {dataset}")
    shard = sorted(dataset.glob("*.tfrecord"))[0]
    _step("wikiprep inspect", [str(bin_dir / "wikiprep"), "inspect", str(shard), "-n", "1"], run_dir,
          expect="[CLS]")
    _step("wikiprep stats", [str(bin_dir / "wikiprep"), "stats", str(dataset), "--out", str(run_dir / "report")],
          run_dir, expect="report.html")
    _step("the trainers, not installed, say so in one line",
          [str(bin_dir / "luigi"), "--module", "wikiprep.workflows", "TrainBert", "--local-scheduler",
           "--dataset-dir", str(dataset), "--out-dir", str(run_dir / "train")], run_dir,
          expect="wikiprep: error: the thin trainers are in the source tree", fails=True)
    print(f"install_check: the package installed without TensorFlow built, verified, inspected and reported a "
          f"dataset ({work})")
    if args.work is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
