"""The no-clobber commit (shardkit.atomic): identical accepted, different refused naming both, nothing
existing ever changed; files and folders, with every rename method; real processes racing for one path.

Each method of `_rename_noreplace` is pinned in turn (renameat2 RENAME_NOREPLACE, link + unlink,
rename(2) after a check): the fallbacks run where the kernel or file system lacks the first, and
this machine has it, so only pinning them tests them.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit import atomic, records
from shardkit.errors import PrepError

FILE_METHODS = {"renameat2": atomic._renameat2_noreplace, "link": atomic._link_noreplace,
                "checked-rename": atomic._checked_rename}
FOLDER_METHODS = {"renameat2": atomic._renameat2_noreplace, "rename": atomic._checked_rename}
# The checked rename of a file is the last resort, atomic against nothing: it is not raced.
RACED_FILE_METHODS = ["renameat2", "link"]


@pytest.fixture(params=list(FILE_METHODS))
def file_method(request, monkeypatch):
    monkeypatch.setattr(atomic, "_FILE_METHODS", (FILE_METHODS[request.param],))
    return request.param


@pytest.fixture(params=list(FOLDER_METHODS))
def folder_method(request, monkeypatch):
    monkeypatch.setattr(atomic, "_FOLDER_METHODS", (FOLDER_METHODS[request.param],))
    return request.param


def _state(path: Path) -> tuple:
    """What would show that `path` was touched: its inode, its change time, its bytes."""
    st = path.stat()
    return st.st_ino, st.st_ctime_ns, path.read_bytes()


def _no_temporaries(folder: Path) -> None:
    left = [p for p in folder.rglob("*") if atomic.TMP_MARK in p.name]
    assert not left, f"temporaries left: {left}"


def test_renameat2_is_what_runs_here(tmp_path):
    """The first method works on this machine's kernel and file system (else the others would do all)."""
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    assert atomic._renameat2_noreplace(tmp_path / "a", tmp_path / "b") is False
    assert atomic._renameat2_noreplace(tmp_path / "a", tmp_path / "c") is True
    assert (tmp_path / "c").read_bytes() == b"a" and (tmp_path / "b").read_bytes() == b"b"


def test_an_identical_file_is_accepted_and_left_as_it_is(tmp_path, file_method):
    path = tmp_path / "out.bin"
    atomic.write_bytes(path, b"same bytes")
    before = _state(path)
    atomic.write_bytes(path, b"same bytes")
    assert _state(path) == before
    _no_temporaries(tmp_path)


def test_a_different_file_is_refused_naming_both_and_left_as_it_is(tmp_path, file_method):
    path = tmp_path / "out.bin"
    atomic.write_bytes(path, b"made before")
    before = _state(path)
    with pytest.raises(PrepError) as e:
        atomic.write_bytes(path, b"made by this run")
    there, here = (hashlib.sha256(b).hexdigest()[:16] for b in (b"made before", b"made by this run"))
    assert str(e.value) == (f"{path}: exists with other content than this run's (sha256 {there} there, {here} "
                            f"from this run); left as it is: remove it to write it again")
    assert _state(path) == before
    _no_temporaries(tmp_path)


def test_overwrite_replaces(tmp_path):
    path = tmp_path / "out.bin"
    atomic.write_bytes(path, b"old")
    atomic.write_bytes(path, b"new", overwrite=True)
    assert path.read_bytes() == b"new"
    _no_temporaries(tmp_path)


def _make_folder(path: Path, files: dict[str, bytes], overwrite: bool = False) -> None:
    with atomic.atomic_dir(path, overwrite=overwrite) as tmp:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)


def test_folders_identical_accepted_different_refused_naming_the_first_difference(tmp_path, folder_method):
    path = tmp_path / "split"
    files = {"a.txt": b"a", "sub/b.txt": b"b", "c.txt": b"c"}
    _make_folder(path, files)
    before = {rel: _state(path / rel) for rel in files}
    _make_folder(path, files)  # the same files, the same bytes
    assert {rel: _state(path / rel) for rel in files} == before

    for other, what in [({**files, "sub/b.txt": b"B"}, f"sub/b.txt: sha256 {hashlib.sha256(b'b').hexdigest()[:16]} "
                                                       f"there, {hashlib.sha256(b'B').hexdigest()[:16]} from this run"),
                        ({"a.txt": b"a", "c.txt": b"c"}, "sub/b.txt: only there"),
                        ({**files, "d.txt": b"d", "a.txt": b"A"}, "a.txt: sha256 "),
                        ({}, "a.txt: only there; 2 more files differ")]:
        with pytest.raises(PrepError, match=f"^{path}: exists with other content than this run's") as e:
            _make_folder(path, other)
        assert what in str(e.value)
        assert {rel: _state(path / rel) for rel in files} == before
        assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) == ["a.txt", "c.txt", "sub",
                                                                                  "sub/b.txt"]
    _no_temporaries(tmp_path)
    _make_folder(path, {"new.txt": b"n"}, overwrite=True)
    assert [p.name for p in path.iterdir()] == ["new.txt"]


def test_a_file_where_a_folder_is_committed_is_refused(tmp_path, folder_method):
    path = tmp_path / "out"
    tmp = atomic.temp_path(path)
    tmp.mkdir()
    (tmp / "x").write_bytes(b"x")
    path.write_bytes(b"a file")
    with pytest.raises(PrepError, match=r"a file there, a folder from this run"):
        atomic.commit(tmp, path)
    assert path.read_bytes() == b"a file" and not tmp.exists()


def test_records_and_index_none_committed_when_one_differs(tmp_path, file_method):
    from shardkit import records

    out, index = tmp_path / "x.tfrecord", tmp_path / "x.index"
    records.write_records(out, [b"r1", b"r2"], index)
    records.write_records(out, [b"r1", b"r2"], index)  # a duplicate: accepted
    before = _state(out), _state(index)
    index.unlink()
    with pytest.raises(PrepError, match=f"{out}: exists with other content"):
        records.write_records(out, [b"other"], index)
    assert not index.exists() and _state(out) == before[0]  # the index, absent, was not committed either
    _no_temporaries(tmp_path)


# ---------------------------------------------------------------------------------------------
# Receipts: no-clobber-or-identical too

def test_receipts_identical_accepted_other_info_refused_stale_replaced(tmp_path):
    path = tmp_path / "out.bin"
    atomic.write_bytes(path, b"data")
    first = atomic.write_receipt(path, stats={"records": 3})
    rp = atomic.receipt_path(path)
    before = _state(rp)
    assert atomic.write_receipt(path, stats={"records": 3}) == first and _state(rp) == before
    with pytest.raises(PrepError) as e:
        atomic.write_receipt(path, stats={"records": 4})
    assert str(e.value) == (f'{rp}: the receipt of out.bin there says stats {{"records": 3}}, this run\'s says '
                            f'{{"records": 4}}; left as it is: remove it to write it again')
    assert _state(rp) == before
    # The output was removed and made again with other bytes: its old receipt describes nothing there.
    path.unlink()
    atomic.write_bytes(path, b"other data")
    assert atomic.write_receipt(path, stats={"records": 4})["sha256"] == hashlib.sha256(b"other data").hexdigest()
    assert json.loads(rp.read_text())["stats"] == {"records": 4}
    _no_temporaries(tmp_path)


# ---------------------------------------------------------------------------------------------
# Real processes racing for one path

def _commit_after_barrier(barrier, answers, k: int, path: str, data: bytes, folder: bool, method: str) -> None:
    """In a forked process: write `data` (as a file, or a folder holding it), meet the other writer at the
    barrier with the temporary complete, then commit. Puts (k, 'ok' or the error line) on `answers`."""
    methods = FOLDER_METHODS if folder else FILE_METHODS
    setattr(atomic, "_FOLDER_METHODS" if folder else "_FILE_METHODS", (methods[method],))
    try:
        if folder:
            with atomic.atomic_dir(path) as tmp:
                (tmp / "part.txt").write_bytes(data)
                barrier.wait(timeout=30)
        else:
            with atomic.atomic_write(path) as f:
                f.write(data)
                barrier.wait(timeout=30)
    except PrepError as e:
        answers.put((k, str(e)))
        return
    answers.put((k, "ok"))


def _race(tmp_path: Path, data: list[bytes], folder: bool, method: str, rounds: int) -> None:
    ctx = multiprocessing.get_context("fork")
    for n in range(rounds):
        path = tmp_path / f"out{n}"
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_commit_after_barrier, args=(barrier, queue, k, str(path), d, folder, method))
                 for k, d in enumerate(data)]
        for proc in procs:
            proc.start()
        answers = dict(queue.get(timeout=60) for _ in procs)
        for proc in procs:
            proc.join(timeout=60)
            assert proc.exitcode == 0
        answers = [answers[0], answers[1]]
        committed = (path / "part.txt" if folder else path).read_bytes()
        if data[0] == data[1]:
            assert answers == ["ok", "ok"], answers
            assert committed == data[0]
        else:
            # Exactly one won, whole; the other was refused with a line naming the path.
            winner = data.index(committed)
            assert answers[winner] == "ok", answers
            assert answers[1 - winner].startswith(f"{path}: exists with other content than this run's"), answers
        _no_temporaries(tmp_path)


@pytest.mark.parametrize("method", RACED_FILE_METHODS)
def test_two_processes_committing_the_same_file(tmp_path, method):
    _race(tmp_path, [b"x" * 100_000, b"x" * 100_000], folder=False, method=method, rounds=8)
    _race(tmp_path / "differ", [b"x" * 100_000, b"y" * 100_000], folder=False, method=method, rounds=8)


@pytest.mark.parametrize("method", list(FOLDER_METHODS))
def test_two_processes_committing_the_same_folder(tmp_path, method):
    _race(tmp_path, [b"x" * 1000, b"x" * 1000], folder=True, method=method, rounds=8)
    _race(tmp_path / "differ", [b"x" * 1000, b"y" * 1000], folder=True, method=method, rounds=8)


# ---------------------------------------------------------------------------------------------
# Temporaries: a task removes only its own dead writers'

def test_a_task_removes_only_dead_writers_temporaries(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a racing writer, say
    try:
        host = socket.gethostname()
        path = tmp_path / "shard.tfrecord"
        dead_tmp = tmp_path / f"shard.tfrecord.tmp-{host}-{int(dead.stdout)}"
        dead_dir = tmp_path / f"shard.tfrecord.tmp-{host}-{int(dead.stdout)}.spill"
        live_tmp = tmp_path / f"shard.tfrecord.tmp-{host}-{live.pid}"
        other_host = tmp_path / "shard.tfrecord.tmp-node17-12"  # whether its writer runs, nothing here can tell
        sibling = tmp_path / f"shard2.tfrecord.tmp-{host}-{int(dead.stdout)}"  # another output's
        for p in (dead_tmp, live_tmp, other_host, sibling):
            p.write_bytes(b"half")
        dead_dir.mkdir()
        atomic.remove_stale_temps(path)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live_tmp, other_host, sibling))
        atomic.remove_all_stale_temps(tmp_path)  # the final sweep: the same rule for every output
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live_tmp, other_host))
    finally:
        live.kill()
        live.wait()
    atomic.remove_all_stale_temps(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [other_host.name]


def _victim(tmp_path: Path) -> Path:
    """A file outside the output folder that a planted link points to: it must never change."""
    victim = tmp_path / "elsewhere" / "precious"
    victim.parent.mkdir()
    victim.write_bytes(b"out.bin's bytes")
    return victim


def _unchanged(victim: Path, before: tuple) -> None:
    assert _state(victim) == before and victim.read_bytes() == b"out.bin's bytes"


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_at_a_temporarys_name_is_never_written_through(tmp_path, overwrite):
    out = tmp_path / "out"
    out.mkdir()
    victim = _victim(tmp_path)
    before = _state(victim)
    path = out / "out.bin"
    atomic.temp_path(path).symlink_to(victim)  # this process's temporary of out.bin, planted
    with pytest.raises(PrepError, match=r"^[^\n]*: cannot write: its temporary out\.bin\.tmp-[^ ]+ is a symbolic "
                                        r"link \(to [^\n]*precious\), not written through: remove it$") as e:
        atomic.write_bytes(path, b"out.bin's bytes", overwrite=overwrite)
    assert str(e.value).startswith(f"{path}: ")
    _unchanged(victim, before)
    assert not path.exists() and atomic.temp_path(path).is_symlink()
    folder = out / "folder"
    atomic.temp_path(folder).symlink_to(victim.parent)
    with pytest.raises(PrepError, match="is a symbolic link"):
        with atomic.atomic_dir(folder, overwrite=overwrite) as tmp:
            (tmp / "x").write_bytes(b"x")
    assert [p.name for p in victim.parent.iterdir()] == ["precious"] and not folder.exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_at_an_output_is_refused_neither_written_through_nor_replaced(tmp_path, overwrite):
    out = tmp_path / "out"
    out.mkdir()
    victim = _victim(tmp_path)
    before = _state(victim)
    path = out / "out.bin"
    path.symlink_to(victim)  # the same bytes as this run's: still not taken as the output
    with pytest.raises(PrepError) as e:
        atomic.write_bytes(path, b"out.bin's bytes", overwrite=overwrite)
    assert str(e.value) == (f"{path}: is a symbolic link (to {victim}); not written through nor replaced: remove it "
                            f"to write it again")
    with pytest.raises(PrepError, match="is a symbolic link"):  # the index of a record file, committed last
        with records.RecordWriter(out / "r.tfrecord", path, overwrite=overwrite) as w:
            w.write(b"r")
    (out / "d").symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(PrepError, match="is a symbolic link"):
        with atomic.atomic_dir(out / "d", overwrite=overwrite) as tmp:
            (tmp / "precious").write_bytes(b"x")
    _unchanged(victim, before)
    assert path.is_symlink() and not (out / "r.tfrecord").exists()
    assert sorted(p.name for p in out.iterdir()) == ["d", "out.bin"]


def test_a_link_planted_at_the_destination_after_the_temporary_opened_is_refused(tmp_path, file_method):
    """The check that counts is the one at the commit: a link made while the output was being written."""
    victim = _victim(tmp_path)
    before = _state(victim)
    path = tmp_path / "out.bin"
    with pytest.raises(PrepError, match="is a symbolic link"):
        with atomic.atomic_write(path) as f:
            f.write(b"out.bin's bytes")
            path.symlink_to(victim)
    _unchanged(victim, before)
    assert path.is_symlink() and not [p for p in tmp_path.iterdir() if atomic.TMP_MARK in p.name]
    atomic.write_bytes(tmp_path / "f.bin", b"f")
    receipt = atomic.receipt_path(tmp_path / "f.bin")
    receipt.parent.mkdir(exist_ok=True)
    receipt.symlink_to(victim)
    with pytest.raises(PrepError, match="is a symbolic link"):
        atomic.write_receipt(tmp_path / "f.bin")
    _unchanged(victim, before)
