"""Kill loops: SIGKILL a whole run at random moments, run the same command again, compare every byte.

    python -m testkit.kill_loop wiki --kills 25        # a 2-worker Pretrain128 on a synthetic dump
    python -m testkit.kill_loop imagenet --kills 12    # the ImageNet task on the sample tree

`make test-kill` runs both ([docs/guarantees.md](../docs/guarantees.md)). First one uninterrupted run gives the
reference bytes. Then, for each kill, a fresh data folder: the command starts in its own process group, the
whole group (luigi, its worker processes, their pool children) is sent SIGKILL after a random delay within the
reference run's duration (a run that finished first does not count: another delay is drawn), and the same command
runs again to the end. Every file of the rerun must be byte-identical to the reference, with none missing or
added, and no temporary (`*.tmp-*`, a download's `.part`) may be left anywhere. The delays come from `--seed`,
so a failing kill can be replayed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LUIGI = [sys.executable, "-m", "luigi", "--module", "workflows", "--local-scheduler"]
TEMPORARY_MARKS = (".tmp-", ".part")


def _wiki_inputs(root: Path) -> tuple[str, str]:
    from testkit.synthetic_dump import write_synthetic_dump

    folder = write_synthetic_dump(root / "site", date="20260301", xml_mb=3.0, parts=2)
    return folder.parents[1].as_uri(), "20260301"


def wiki_command(inputs: tuple[str, str], data: Path) -> list[str]:
    site, date = inputs
    return LUIGI + ["Pretrain128", "--workers", "2", "--data-dir", str(data), "--dump-url", site,
                    "--dump-date", date, "--num-shards", "6", "--vocab-size", "4000", "--min-doc-chars", "200"]


def imagenet_command(layout: dict, data: Path) -> list[str]:
    return LUIGI + ["ImageNet", "--workers", "2", "--train-dir", layout["train_dir"],
                    "--validation-dir", layout["validation_dir"], "--val-labels", layout["val_labels"],
                    "--output-dir", str(data / "imagenet"), "--train-shards", "8", "--validation-shards", "4"]


def _imagenet_inputs(root: Path) -> dict:
    from imagenet_prep.samples import write_sample_tree

    return write_sample_tree(root / "raw", classes=12, per_class=80, val_per_class=20)


KINDS = {"wiki": (_wiki_inputs, wiki_command), "imagenet": (_imagenet_inputs, imagenet_command)}


def _files(root: Path) -> dict[str, str]:
    """Every file under `root` by relative path: its sha256 (luigi's own logs left out)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _run(command: list[str], log: Path, *, kill_after: float | None = None) -> tuple[int, float]:
    """Run `command` in a process group of its own; with `kill_after`, SIGKILL the group then. (exit, seconds)."""
    started = time.monotonic()
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    _reap_group(process.pid)
    return process.returncode, time.monotonic() - started


def _reap_group(pgid: int) -> None:
    """Wait until no process of the killed group is left (its pool children die with their parent's pipe)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise SystemExit(f"kill_loop: error: process group {pgid} still alive 30 s after SIGKILL")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kill_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None, help="where to build (default: a temporary folder)")
    args = parser.parse_args(argv)
    make_inputs, command = KINDS[args.kind]
    work = args.work or Path(tempfile.mkdtemp(prefix=f"kill-loop-{args.kind}-"))
    work.mkdir(parents=True, exist_ok=True)
    inputs = make_inputs(work / "inputs")
    rng = random.Random(args.seed)

    reference_dir = work / "reference"
    shutil.rmtree(reference_dir, ignore_errors=True)
    reference_dir.mkdir()
    code, duration = _run(command(inputs, reference_dir), work / "reference.log")
    if code != 0:
        print(f"kill_loop: error: the uninterrupted run failed (exit {code}); see {work / 'reference.log'}")
        return 1
    reference = _files(reference_dir)
    print(f"reference: {len(reference)} files in {duration:.1f} s")

    failures = kill = attempts = 0
    while kill < args.kills:
        attempts += 1
        if attempts > 3 * args.kills:
            print(f"kill_loop: error: only {kill} of {attempts - 1} runs were killed before they finished")
            return 1
        data = work / f"kill{kill + 1:02d}"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir()
        log = work / f"kill{kill + 1:02d}.log"
        delay = rng.uniform(0.2, 0.9 * duration)
        killed_code, _ = _run(command(inputs, data), log, kill_after=delay)
        if killed_code != -signal.SIGKILL:  # it finished first: not a kill; another delay, a fresh folder
            print(f"(a run finished before its kill at {delay:.1f} s: drawn again)")
            continue
        kill += 1
        code, rerun = _run(command(inputs, data), log)
        files = _files(data)
        problems = []
        if code != 0:
            problems.append(f"rerun exit {code} (log {log})")
        temporaries = [p for p in files if any(mark in Path(p).name for mark in TEMPORARY_MARKS)]
        problems += [f"temporary left: {p}" for p in temporaries]
        problems += [f"missing: {p}" for p in sorted(set(reference) - set(files))]
        problems += [f"added: {p}" for p in sorted(set(files) - set(reference)) if p not in temporaries]
        problems += [f"differs: {p}" for p in sorted(set(reference) & set(files)) if reference[p] != files[p]]
        verdict = "identical" if not problems else f"{len(problems)} problems"
        print(f"kill {kill:2d}: at {delay:5.1f} s; rerun {rerun:5.1f} s: {verdict}")
        for problem in problems[:20]:
            print(f"    {problem}")
        failures += bool(problems)
        if not problems:
            shutil.rmtree(data)
    print(f"{args.kills - failures} of {args.kills} reruns byte-identical with no temporary left ({work})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
