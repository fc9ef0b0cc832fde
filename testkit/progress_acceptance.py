"""The acceptance run of the whole run's progress (issue #30), too long for the test suite: a Pretrain128 of a
synthetic dump of about 100 MB of XML, with its stderr on a terminal (tmux) or in a log file.

    python -m testkit.progress_acceptance tmux WORK_DIR [--xml-mb 100]   # capture-pane every second
    python -m testkit.progress_acceptance log WORK_DIR [--xml-mb 100]    # stderr to WORK_DIR/run.log

`tmux` runs the command in a detached tmux session of 120 x 30 and reads the pane's last row every 0.5 s;
`log` reads the log as it grows. Each prints how often the progress changed (the largest gap between two
different progress lines), how many showed an estimate of the time left, the first and last ones, and the
run's last line; it exits 1 when the largest gap is above 2 s (tmux) or 30 s (log), or no estimate showed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testkit.synthetic_dump import write_synthetic_dump

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WIKI, DATE = "enwiki", "20260101"
VOCAB = REPO / "tests" / "fixtures" / "google-reference" / "bert-base-uncased-vocab.txt"
# The largest gap allowed between two different progress lines; read every 0.5 s, so give or take that.
LIMITS = {"tmux": 2.0, "log": 30.5}


def command(site: Path, data: Path) -> list[str]:
    return [str(BIN / "luigi"), "--module", "workflows", "Pretrain128", "--data-dir", str(data),
            "--dump-url", site.as_uri(), "--wiki", WIKI, "--dump-date", DATE, "--num-shards", "16",
            "--vocab-file", str(VOCAB), "--local-scheduler", "--workers", "2"]


def watch_tmux(argv: list[str], work: Path) -> tuple[list[tuple[float, str]], str]:
    session = f"wikiprep-progress-{int(time.time())}"
    done = work / "exit-status"
    done.unlink(missing_ok=True)
    script = f"cd {shlex.quote(str(REPO))} && {shlex.join(argv)} > /dev/null; echo $? > {shlex.quote(str(done))}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "30", "bash", "-c",
                    script + "; sleep 3600"], check=True)
    seen: list[tuple[float, str]] = []
    try:
        while not done.exists():
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                                  check=True).stdout.rstrip("\n").split("\n")
            bottom = pane[-1] if len(pane) >= 30 else ""
            if "tasks done" in bottom:
                seen.append((time.monotonic(), bottom.strip()))
            time.sleep(0.5)
        pane = subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", session], capture_output=True, text=True,
                              check=True).stdout  # wrapped lines joined
        last = [text for text in pane.splitlines() if text.strip()][-1]
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    return seen, last


def watch_log(argv: list[str], work: Path) -> tuple[list[tuple[float, str]], str]:
    log = work / "run.log"
    seen: list[tuple[float, str]] = []
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=out)
    with open(log) as reader:
        while True:
            ended = proc.poll() is not None
            for text in reader.readlines():
                if text.startswith("INFO: progress: "):
                    seen.append((time.monotonic(), text.strip()))
            if ended:
                break
            time.sleep(0.5)
    return seen, log.read_text().rstrip("\n").rsplit("\n", 1)[-1]


def main() -> int:
    parser = argparse.ArgumentParser(prog="progress_acceptance", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=sorted(LIMITS))
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("--xml-mb", type=float, default=100.0)
    args = parser.parse_args()
    site = args.work_dir / "site"
    if not (site / WIKI / DATE / "dumpstatus.json").exists():
        write_synthetic_dump(site, WIKI, DATE, xml_mb=args.xml_mb, parts=2)
    data = args.work_dir / f"data-{args.mode}"
    shutil.rmtree(data, ignore_errors=True)  # this script's own: every run starts from nothing
    argv = command(site.resolve(), data.resolve())
    start = time.monotonic()
    seen, last = (watch_tmux if args.mode == "tmux" else watch_log)(argv, args.work_dir)
    changes = [seen[0]] + [b for a, b in zip(seen, seen[1:]) if b[1] != a[1]] if seen else []
    gaps = [b[0] - a[0] for a, b in zip(changes, changes[1:])]
    estimates = [text for _, text in seen if " left" in text]
    print(f"run: {time.monotonic() - start:.0f} s; {len(seen)} progress lines read, {len(changes)} different, "
          f"largest gap between changes {max(gaps, default=float('nan')):.1f} s, {len(estimates)} with an estimate")
    for what, (_, text) in (("first", changes[0]), ("last", changes[-1])) if changes else ():
        print(f"{what}: {text}")
    if estimates:
        print(f"an estimate: {estimates[len(estimates) // 2]}")
    print(f"last line: {last}")
    return 0 if gaps and max(gaps) <= LIMITS[args.mode] and estimates else 1


if __name__ == "__main__":
    sys.exit(main())
