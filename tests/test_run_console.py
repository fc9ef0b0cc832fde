"""What a Luigi run prints (issue #30): the whole run's progress, and its last line, the answer.

Real runs of `luigi --module workflows Pretrain128` on a small synthetic dump, as users start them:
interrupted by a real SIGINT sent to the whole process group (what a terminal's Ctrl-C does) or a SIGTERM
sent to the run's process (`kill`), with their stderr on a pipe (a log) and on a pseudo-terminal, and
against a real luigid. The error line of a failed run being the last line is asserted by every row of
the bad-input table (tests/test_bad_input.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from test_luigid import BIN, DATASET, DATE, REPO, WIKI, Luigid, env, pretrain_args, wait_for
from test_progress import run_on_terminal
from testkit.synthetic_dump import write_synthetic_dump
from workflows.progress import RunProgress, line

LUIGI = [str(BIN / "luigi"), "--module", "workflows"]
PROGRESS_LINE = re.compile(r"^INFO: progress: (\d+)/(\d+) tasks done, \d+ running · .* in\b")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    write_synthetic_dump(root, WIKI, DATE, xml_mb=2.0, parts=2)
    return root


@pytest.fixture(scope="module")
def long_site(tmp_path_factory) -> Path:
    """A dump whose run lasts several seconds on 2 cores, for what is shown while a run goes on (a terminal's
    row redrawn each second, luigid's view of the root task): the small one's run ends within about 2 s."""
    root = tmp_path_factory.mktemp("long_site")
    write_synthetic_dump(root, WIKI, DATE, xml_mb=8.0, parts=2)
    return root


def command(site: Path, data: Path, *extra: str, workers: int = 2) -> list[str]:
    return [*LUIGI, *pretrain_args(site, data), "--local-scheduler", "--workers", str(workers), *extra]


def as_at_a_terminal() -> None:
    """SIGINT as a terminal's program gets it (its default): a suite started in the background by a shell without job
    control inherits it ignored, and so would the run under test, which would never see the Ctrl-C sent to it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass
class Run:
    dataset: dict[str, bytes]  # the dataset folder's files
    log: list[tuple[float, str]]  # stderr's lines, each with the time it came


@pytest.fixture(scope="module")
def reference(site, tmp_path_factory) -> Run:
    """An uninterrupted run, whose log goes to a pipe with a progress line every 0.2 s (it takes a few seconds)."""
    data = tmp_path_factory.mktemp("reference") / "data"
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(command(site, data, "--progress-interval", "0.2"), cwd=REPO, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for text in proc.stderr:
        lines.append((time.monotonic(), text.rstrip("\n")))
    assert proc.wait(timeout=60) == 0, "\n".join(t for _, t in lines[-40:])
    return Run(files(data / DATASET), lines)


def test_a_log_gets_a_progress_line_every_interval_and_ends_with_the_dataset(site, reference):
    lines = reference.log
    progress = [(t, text) for t, text in lines if PROGRESS_LINE.match(text)]
    assert len(progress) >= 3, "\n".join(text for _, text in lines[-40:])
    gaps = [b[0] - a[0] for a, b in zip(progress, progress[1:])]
    assert max(gaps) < 2, gaps  # every 0.2 s, give or take a loaded machine
    done = [int(PROGRESS_LINE.match(text).group(1)) for _, text in progress]
    assert done == sorted(done) and done[-1] <= int(PROGRESS_LINE.match(progress[-1][1]).group(2))
    assert not any("\x1b" in text or "\r" in text for _, text in lines)  # a log holds no control character
    last = lines[-1][1]
    assert last.startswith("wikiprep: done: ") and str(DATASET) in last and "report.html" in last, last


@pytest.mark.parametrize("sig, workers, whole_group", [(signal.SIGINT, 2, True), (signal.SIGTERM, 1, False)],
                         ids=["ctrl-c-two-workers", "sigterm-one-worker"])
def test_an_interrupted_run_says_so_in_one_line_and_the_rerun_gives_the_same_bytes(site, reference, tmp_path, sig,
                                                                                   workers, whole_group):
    data = tmp_path / "data"
    argv = command(site, data, workers=workers)
    proc = subprocess.Popen(argv, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=as_at_a_terminal)
    # The interrupt comes while a task is writing: a temporary is open.
    wait_for(lambda: data.exists() and any(".tmp-" in p.name for p in data.rglob("*")), "a temporary",
             timeout=120, alive=[proc])
    if whole_group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)

    assert proc.returncode == 128 + sig, err[-3000:]
    assert "Traceback" not in err, err[-5000:]
    how = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    interrupted = [text for text in err.splitlines() if text.startswith("wikiprep: interrupted")]
    assert len(interrupted) == 1 and err.splitlines()[-1] == interrupted[0], err[-3000:]
    assert interrupted[0].startswith(f"wikiprep: interrupted ({how}) while running ")
    assert "nothing half-written was kept" in interrupted[0]
    assert interrupted[0].endswith("run the same command again: " + " ".join(argv)), interrupted[0]
    assert not [p for p in data.rglob("*") if ".tmp-" in p.name]

    rerun = subprocess.run(argv, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert files(data / DATASET) == reference.dataset


def test_make_names_itself_as_the_command_that_resumes(site, tmp_path):
    """Under make, the resume command is the make command (Makefile's RESUME_COMMAND), not the Luigi one."""
    data = tmp_path / "data"
    # As a user's make: none of the variables of a make that started the suite (make test-pythons gives VENV and
    # PYTHON), this interpreter's environment (BIN), its setup taken as done.
    argv = ["make", "--no-print-directory", "-o", "setup", "-C", str(REPO), "wiki-128", f"BIN={BIN}",
            f"DATA_DIR={data}", f"DUMP_URL={site.as_uri()}", f"DUMP_DATE={DATE}", "NUM_SHARDS=2", "WORKERS=1"]
    user_env = {k: v for k, v in env().items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    proc = subprocess.Popen(argv, env=user_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_at_a_terminal)
    wait_for(lambda: data.exists() and any(".tmp-" in p.name for p in data.rglob("*")), "a temporary",
             timeout=120, alive=[proc])
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    interrupted = [text for text in err.splitlines() if text.startswith("wikiprep: interrupted")]
    assert len(interrupted) == 1, err[-3000:]
    resume = interrupted[0].partition("run the same command again: ")[2]
    given = argv[argv.index("wiki-128") + 1:]
    assert resume.startswith("make wiki-128 ") and sorted(resume.split()[2:]) == sorted(given), interrupted[0]
    assert "Traceback" not in err, err[-3000:]


def test_a_terminal_gets_one_live_line_on_its_last_row(long_site, tmp_path):
    status, written = run_on_terminal(command(long_site, tmp_path / "data"))
    assert status == 0, written[-3000:]
    # The line is drawn on row 24 of the 24-row terminal, cursor saved and restored around it.
    draws = re.findall(r"\x1b7\x1b\[24;1H\x1b\[2K([^\x1b]*)\x1b8", written)
    assert len(draws) >= 2, written[-3000:]
    # redrawn at least every 2 s: the run's time in each draw ("1s in", "1m05s in") never jumps more than that
    seconds = [sum(int(n) * (60 if unit == "m" else 1) for n, unit in re.findall(r"(\d+)([ms])", d.split(" in")[0]
                                                                                   .rsplit("· ", 1)[-1]))
               for d in draws]
    assert all(0 <= b - a <= 2 for a, b in zip(seconds, seconds[1:])), draws
    assert all(re.match(r"\d+/\d+ tasks done, \d+ running · ", d) for d in draws), draws[:5]
    assert "\x1b[1;23r" in written  # the rows above it scroll; the last row is the line's
    reset = written.rindex("\x1b[r")  # and the whole terminal scrolls again at the end,
    assert written.rindex("wikiprep: done: ") > reset  # before the answer


def test_the_estimate_counts_running_tasks_by_their_rate_and_waiting_ones_by_their_kind():
    now = [0.0]
    run = RunProgress(workers=2, clock=lambda: now[0])
    for i in range(4):
        run.scheduled(f"shard{i}", "PretrainShard", "PENDING")
    run.scheduled("dataset", "PretrainDataset", "PENDING")
    run.started("shard0", "PretrainShard")
    now[0] = 10.0
    run.stage("shard0", "instances wiki_00000.tfrecord", 25_000_000, 100_000_000, "B")
    f = run.figures()
    assert f["left"] == pytest.approx(30 / 2) and f["left_unknown"]  # nothing has finished: a lower bound,
    assert line(f).startswith("0/5 tasks done, 1 running · 25.0 MB processed (2.5 MB/s) · 10s in · instances")  # unshown
    now[0] = 100.0
    assert "10s in" not in line(run.figures()) and ", more than " in line(run.figures())  # 1m15s left at least
    now[0] = 40.0
    run.stage("shard0", "instances wiki_00000.tfrecord", 100_000_000, 100_000_000, "B")
    run.scheduled("shard0", "PretrainShard", "DONE")  # 40 s a shard
    run.started("shard1", "PretrainShard")
    run.started("shard2", "PretrainShard")
    now[0] = 50.0
    run.stage("shard1", "instances wiki_00001.tfrecord", 50_000_000, 100_000_000, "B")  # half in 10 s: 10 s left
    f = run.figures()
    # shard1: 10 s left by its own rate; shard2: 40 - 10 by the mean of its kind; shard3 waits: 40; the dataset,
    # no task of its kind finished yet: the mean of all finished tasks, 40; over 2 workers
    assert not f["left_unknown"] and f["left"] == pytest.approx((10 + 30 + 40 + 40) / 2)
    assert (f["done"], f["tasks"], f["pending"]) == (1, 5, 2)
    assert "about 1m00s left" in line(f) and "150.0 MB processed" in line(f)


def test_luigid_shows_the_whole_run_on_the_root_task(long_site, tmp_path):
    luigid = Luigid(tmp_path / "luigid", REPO / "luigi.cfg")
    luigid.start()
    seen: list[tuple[str, float]] = []
    try:
        proc = subprocess.Popen([*LUIGI, *pretrain_args(long_site, tmp_path / "data"), "--workers", "2",
                                 "--scheduler-host", "127.0.0.1", "--scheduler-port", str(luigid.port)],
                                cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
        reader.start()
        while proc.poll() is None:
            try:
                for task in luigid.api("task_list", status="PENDING", upstream_status="",
                                       search="Pretrain128").values():
                    if task["name"] == "Pretrain128" and (task.get("status_message") or "").startswith("run: "):
                        seen.append((task["status_message"], task["progress_percentage"]))
            except OSError:
                pass
            time.sleep(0.5)
        reader.join(timeout=60)
        assert proc.returncode == 0, "".join(stderr[-40:])
    finally:
        luigid.stop()
    assert seen, "luigid never showed the run's progress on its root task"
    message, percentage = seen[-1]
    assert re.match(r"run: \d+/\d+ tasks done, \d+ running · ", message), message
    assert 0 <= percentage <= 100


def test_make_refuses_a_variable_close_to_one_of_its_own():
    """NUM_SHARD=3 would silently build the default 256 shards: make stops first, naming NUM_SHARDS; a name close
    to none of its own (V=1) is left alone."""
    r = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(REPO), "plan-128", "DUMP_DATE=20261101",
                        "NUM_SHARD=3"], env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert re.fullmatch(r"Makefile:\d+: \*\*\* NUM_SHARD is not a variable of this Makefile: did you mean "
                        r"NUM_SHARDS\?\.  Stop\.\n", r.stderr), r.stderr
    r = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(REPO), "plan-128", "DUMP_DATE=20261101",
                        "NUM_SHARDS=3", "V=1"], env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--num-shards 3" in r.stdout, r.stdout + r.stderr
