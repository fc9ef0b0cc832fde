"""Interrupted and failed writes leave nothing behind: SIGTERM, a dead writer's temporary, a full disk.

Real processes, real signals, real file-size limits (RLIMIT_FSIZE makes a write fail as a full
disk does, EFBIG instead of ENOSPC, through the same code path).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardkit import atomic
from shardkit.errors import PrepError

REPO = Path(__file__).resolve().parents[1]
WIKIPREP = [sys.executable, "-c", "import sys; from wikiprep.cli import main; sys.exit(main())"]

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "and", "river", "city", "old", "new", "."]


def _corpus(folder: Path, documents: int) -> tuple[Path, Path]:
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(WORDS) + "\n")
    text = folder / "corpus.txt"
    with open(text, "w") as f:
        for d in range(documents):
            for s in range(8):
                f.write(" ".join(WORDS[5 + (d * 7 + s * 3 + k) % 9] for k in range(12)) + " .\n")
            f.write("\n")
    return text, vocab


def _create(folder: Path, text: Path, vocab: Path, out: Path, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(WIKIPREP + ["create-pretraining-data", f"--input_file={text}", f"--vocab_file={vocab}",
                                        f"--output_file={out}", f"--index_file={out.with_suffix('.index')}",
                                        "--dupe_factor=40", "--max_seq_length=64", "--max_predictions_per_seq=10"],
                            cwd=folder, env=env, stderr=subprocess.PIPE, text=True, **kw)


def test_sigterm_leaves_no_temporary_and_a_rerun_gives_the_same_bytes(tmp_path):
    text, vocab = _corpus(tmp_path, 3000)
    reference = tmp_path / "ref" / "out.tfrecord"
    reference.parent.mkdir()
    assert _create(tmp_path, text, vocab, reference).wait(timeout=600) == 0

    out = tmp_path / "run" / "out.tfrecord"
    out.parent.mkdir()
    proc = _create(tmp_path, text, vocab, out)
    deadline = time.monotonic() + 300
    while not list(out.parent.glob("*.tmp-*")):  # SIGTERM while a temporary is open
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before writing"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    assert list(out.parent.iterdir()) == []  # no temporary, no output

    assert _create(tmp_path, text, vocab, out).wait(timeout=600) == 0
    assert out.read_bytes() == reference.read_bytes()
    assert out.with_suffix(".index").read_bytes() == reference.with_suffix(".index").read_bytes()


def test_a_sigterm_swallowed_where_python_cannot_raise_still_ends_the_command_as_one():
    """Python runs the SIGTERM handler wherever the main thread is; in a __del__ (or a weakref callback, an
    at-fork hook) its Terminated cannot leave and the code runs on. The command then fails or stops at its next
    check: it must say terminated, in one line with status 143, not print the swallowed exception's traceback."""
    code = f"""
import argparse, os, signal, sys
sys.path.insert(0, {str(REPO)!r})
from shardkit.cli import run
from shardkit.errors import PrepError

class Doomed:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):  # the handler runs in this loop, inside __del__
            pass

def command(args):
    Doomed()
    print("ran on")  # reached only because the Terminated was swallowed
    raise PrepError("train-00003-of-00008: the worker process writing it ended without a result (exit status 143)")

parser = argparse.ArgumentParser(prog="prog")
parser.add_subparsers(dest="command").add_parser("go")
sys.exit(run("prog", parser, {{"go": command}}, ["go"]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (128 + signal.SIGTERM, "ran on\n"), r.stderr
    assert r.stderr == "prog: terminated (SIGTERM); nothing half-written is left, run the same command again\n"


# A child started by each of the two places that fork one: a plain multiprocessing child under held_for_fork (as
# shardkit.pool.forked_each starts its writers) and the Luigi worker's task process (workflows.worker).
FORKS = {
    "held_for_fork": """
from shardkit.signals import held_for_fork, release_in_child

def sleeper():
    release_in_child()
    time.sleep(60)

child = multiprocessing.get_context("fork").Process(target=sleeper, daemon=True)
def start():
    with held_for_fork():
        child.start()
""",
    "luigi-task-process": """
import luigi, luigi.worker
from workflows.worker import _TaskProcess

class Sleeper(luigi.Task):
    def run(self):
        time.sleep(60)

child = luigi.worker.ContextManagedTaskProcess(None, Sleeper(), "worker", multiprocessing.Queue(), None,
                                               use_multiprocessing=True)
child.__class__ = _TaskProcess
start = child.start
""",
}


@pytest.mark.parametrize("fork", sorted(FORKS))
def test_ctrl_c_taken_by_another_thread_during_a_fork_lands_once_the_child_is_recorded(fork):
    """A signal sent to a process goes to any thread that does not block it (luigi's keep-alive thread, a progress
    display), and Python then runs its handler in the main thread wherever that is: half-way through
    multiprocessing's start(), after the fork and before the child is recorded, the child would never be stopped
    or waited for, and would finish its task after the run said it was interrupted (seen once in CI). Here the
    Ctrl-C reaches another thread at the fork itself; it must land once start() is over, with the child
    recorded, stoppable by SIGTERM through the handler its parent had."""
    code = f"""
import functools, multiprocessing, os, signal, sys, threading, time
sys.path.insert(0, {str(REPO)!r})
from shardkit.signals import raise_on_sigterm
raise_on_sigterm()
{FORKS[fork]}
other = threading.Thread(target=time.sleep, args=(60,), daemon=True)
other.start()
# Before the fork: SIGINT to the other thread, then wait until it has taken it (Python's C handler writes to the
# wakeup fd). The wait is C code (no bytecode, so no Python handler runs in it): the handler runs in the main
# thread once os.fork() is back in multiprocessing's start(). Hooks run last-registered first.
arrived, wakeup = os.pipe()
os.set_blocking(wakeup, False)
signal.set_wakeup_fd(wakeup)
os.register_at_fork(before=functools.partial(os.read, arrived, 1))
os.register_at_fork(before=functools.partial(signal.pthread_kill, other.ident, signal.SIGINT))
try:
    start()
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted, the child recorded:", child.pid is not None and child.is_alive())
    t0 = time.monotonic()
    child.terminate()
    child.join(30)
    print("stopped by SIGTERM:", child.exitcode is not None and time.monotonic() - t0 < 20)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout == "interrupted, the child recorded: True\nstopped by SIGTERM: True\n", r.stdout + r.stderr


def test_a_dead_writers_temporary_is_removed_a_live_ones_is_not(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # that process has exited
    host = socket.gethostname()
    path = tmp_path / "shard.tfrecord"
    dead_tmp = tmp_path / f"shard.tfrecord.tmp-{host}-{dead_pid}"
    dead_spill = tmp_path / f"shard.tfrecord.tmp-{host}-{dead_pid}.spill"  # instances' scratch file
    live_tmp = tmp_path / f"shard.tfrecord.tmp-{host}-1"  # pid 1 runs: maybe a racing writer
    other_host = tmp_path / "shard.tfrecord.tmp-elsewhere-12"  # another node's: not ours to judge
    for p in (dead_tmp, dead_spill, live_tmp, other_host):
        p.write_bytes(b"half")
    atomic.write_bytes(path, b"whole")
    assert path.read_bytes() == b"whole"
    assert not dead_tmp.exists() and not dead_spill.exists() and live_tmp.exists() and other_host.exists()


def test_a_full_disk_removes_the_temporary_and_names_the_file(tmp_path):
    code = f"""
import resource, sys
sys.path.insert(0, {str(REPO)!r})
from shardkit import atomic
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    with atomic.atomic_write({str(tmp_path / 'big.bin')!r}) as f:
        for _ in range(100):
            f.write(b"x" * 1000)
except Exception as e:
    print(type(e).__name__, e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == f"PrepError {tmp_path / 'big.bin'}: cannot write: file too large for this file system " \
                               f"or limit", r.stdout + r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_in_a_large_record_names_the_record_file_and_leaves_nothing(tmp_path):
    """Records of an image's size go to the file by writev, not through the buffer: the same one line, from a
    write cut short at the limit (the first writev writes what fits, the next fails)."""
    code = f"""
import resource, sys
sys.path.insert(0, {str(REPO)!r})
from shardkit import records
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
try:
    with records.RecordWriter({str(tmp_path / 'train-00000-of-00001')!r}, {str(tmp_path / 'idx')!r}) as w:
        for _ in range(10):
            w.write_parts((b"head", b"x" * 100_000, b"tail"))
except Exception as e:
    print(type(e).__name__, e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == f"PrepError {tmp_path / 'train-00000-of-00001'}: cannot write: file too large for this " \
                               f"file system or limit", r.stdout + r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: None, None),
])
def test_a_folder_where_the_file_goes_is_named(tmp_path, make, expected):
    path = tmp_path / "out.bin"
    make(path)
    if expected is None:
        atomic.write_bytes(path, b"ok")
        assert path.read_bytes() == b"ok"
        return
    with pytest.raises(PrepError, match=expected):
        atomic.write_bytes(path, b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from its third field (the state) on: [0] the state, [19] the start time."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _writer_killed_unreaped(path: Path) -> tuple[subprocess.Popen, Path]:
    """A process that opens its temporary of `path` as a writer does, then SIGKILLs itself; not reaped (a
    zombie, as a pool's killed worker is until its parent waits for it)."""
    code = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from shardkit import atomic
tmp = atomic.temp_path(Path({str(path)!r}))
tmp.write_bytes(b"half")
print(tmp, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    tmp = Path(proc.stdout.readline().strip())
    deadline = time.monotonic() + 30
    while _stat_fields(proc.pid)[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc, tmp


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told by /proc")
def test_a_killed_writer_not_yet_reaped_is_dead_its_temporary_goes(tmp_path):
    path = tmp_path / "shard.tfrecord"
    proc, tmp = _writer_killed_unreaped(path)
    other, other_tmp = _writer_killed_unreaped(tmp_path / "other.tfrecord")
    try:
        assert tmp.exists() and atomic.TMP_MARK in tmp.name
        atomic.write_bytes(path, b"whole")  # the rerun's write of the same output
        assert path.read_bytes() == b"whole" and not tmp.exists()
        assert atomic.remove_leftover_temps(tmp_path) == [other_tmp.name]  # a dataset's finalize
        assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.tfrecord"]
    finally:
        for p in (proc, other):
            assert p.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="start times are read from /proc")
def test_a_pid_now_another_processs_is_not_the_writer(tmp_path):
    """A temporary named with a pid that runs, but started at another time than the name says: its writer
    died and the pid went to another process (here a sleeping one, and this test's own)."""
    host = socket.gethostname()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = int(_stat_fields(other.pid)[19])
        own = int(_stat_fields(os.getpid())[19])
        path = tmp_path / "shard.tfrecord"
        reused = tmp_path / f"shard.tfrecord.tmp-{host}-{other.pid}.{started - 1}"
        reused_spill = tmp_path / f"shard.tfrecord.tmp-{host}-{other.pid}.{started - 1}.spill"
        reused_own = tmp_path / f"shard.tfrecord.tmp-{host}-{os.getpid()}.{own - 1}"
        live = tmp_path / f"shard.tfrecord.tmp-{host}-{other.pid}.{started}"  # that process's own: a racer
        old_name = tmp_path / f"shard.tfrecord.tmp-{host}-{other.pid}"  # no start time: judged by the pid
        for p in (reused, reused_spill, reused_own, live, old_name):
            p.write_bytes(b"half")
        atomic.write_bytes(path, b"whole")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["shard.tfrecord", live.name, old_name.name])
        assert atomic.temp_path(path).name == f"shard.tfrecord.tmp-{host}-{os.getpid()}.{own}"
    finally:
        other.kill()
        other.wait()


def test_a_kill_between_the_record_files_and_the_index_renames_leaves_no_index_without_records(tmp_path):
    """SIGKILL right after the first rename of a record file and its index: what is there is the record
    file alone, without receipt (not done), never an index naming records that are not there; the rerun
    commits the index beside the same record file and leaves no temporary."""
    code = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from shardkit import atomic, records
kill = {kill}
if kill:
    commit = atomic._commit
    def _commit_then_die(tmp, path, overwrite):
        commit(tmp, path, overwrite)
        os.kill(os.getpid(), signal.SIGKILL)  # between the renames
    atomic._commit = _commit_then_die
with records.RecordWriter({out!r}, {index!r}) as w:
    for k in range(100):
        w.write(b"record %d" % k)
atomic.write_receipt({out!r})
atomic.write_receipt({index!r})
"""
    out, index = tmp_path / "run" / "wiki_00000.tfrecord", tmp_path / "run" / "wiki_00000.index"
    ref_out, ref_index = tmp_path / "ref" / out.name, tmp_path / "ref" / index.name

    def run(out, index, kill):
        return subprocess.run([sys.executable, "-c", code.format(repo=str(REPO), out=str(out), index=str(index),
                                                                 kill=kill)], capture_output=True, text=True,
                              timeout=60)
    assert run(ref_out, ref_index, False).returncode == 0
    killed = run(out, index, True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not index.exists(), "the index was committed without its records"
    assert out.read_bytes() == ref_out.read_bytes()
    assert atomic.read_receipt(out) is None and atomic.read_receipt(index) is None
    rerun = run(out, index, False)
    assert rerun.returncode == 0, rerun.stderr
    assert (out.read_bytes(), index.read_bytes()) == (ref_out.read_bytes(), ref_index.read_bytes())
    assert atomic.read_receipt(out) is not None and atomic.read_receipt(index) is not None
    assert not [p for p in out.parent.iterdir() if atomic.TMP_MARK in p.name]
