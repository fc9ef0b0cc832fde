"""Atomic, no-clobber commits of output files and folders, and their receipts.

Every output is written to a temporary in its final folder (`NAME.tmp-HOST-PID.START`), flushed and
fsynced, then renamed into place by `commit`, which never replaces what is there: when the path
already exists (a duplicate run racing this one, such as two `--local-scheduler` runs or two Slurm
elements doing the same task, or a run killed between its commit and its receipt), an identical
output (the same sha256; for a folder, the same files with the same sha256) is accepted and our
temporary discarded, and a different one is a PrepError naming it, left untouched. The receipt
(JSON, in the folder's `.receipts/`) is committed the same way, last: a file whose receipt exists
(and matches its size) is complete. Receipts hold only what the output determines (sizes, hashes,
counts, parameters), never times, hosts or pids, so a duplicate run's receipt is the same bytes.

`overwrite=True` replaces instead. It is an explicit parameter of every writer, never a global:
the commands a user names an output for, whose original tool overwrites (`wikiprep
create-pretraining-data --output_file` like google-research/bert's script, `imagenet-prep convert`
like build_imagenet_data.py, the `stats` reports), and files that mirror something that changes (a
dump's status), pass it; everything a Luigi task writes is no-clobber.

Temporaries carry the host, pid and start time of their writer, so two writers never share one, and
so that the next write of the same path (and a task, when it starts: `remove_stale_temps`) can tell a
dead writer's temporary (this host, and no such process, or a zombie not yet reaped, or another process
that got its pid: SIGKILL, an OOM kill) from a live one and remove it (`_writer_state`). A live
writer's (maybe a racing duplicate) is never removed, and neither is another host's: nothing here can
tell whether that host's writer still runs. Such a leftover (a node lost mid-write)
stays until the step that closes its folder, once every output there is committed, removes it
(`remove_leftover_temps`, called by a dataset's finalize); elsewhere `verify` names it.

A write that fails (a full disk, a folder where the file should be) removes its temporary
and raises a PrepError naming the file it was writing, never the temporary.

Nothing is written through a symbolic link, nor a link replaced: a temporary is created with
O_CREAT|O_EXCL|O_NOFOLLOW (a link planted at its name is refused, never followed), and an output,
or a receipt, whose path is a link is a PrepError naming it (`_refuse_link`), `overwrite` or not.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import IO, Callable, Iterator

from .errors import PrepError

RECEIPTS_DIR = ".receipts"  # receipts live apart, so globs such as `train*` or `wiki_*` never see them
TMP_MARK = _TMP_MARK = ".tmp-"  # in every temporary's name, and in no committed file's


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of process `pid` from /proc/<pid>/stat: its third field (`Z` a zombie, `X` dead) and
    its 22nd (`starttime`, clock ticks since boot). None where there is no /proc (not Linux), or where it hides
    that process (`hidepid`), or when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()  # after the command's name, which may hold spaces and ')'
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


_own_start: tuple[int, int | None] | None = None  # (pid, start time) of this process; a forked child has its own


def _start_time() -> int | None:
    """This process's start time (`_proc_stat`), or None where /proc does not give it."""
    global _own_start
    pid = os.getpid()
    if _own_start is None or _own_start[0] != pid:
        stat = _proc_stat(pid)
        _own_start = (pid, stat[1] if stat is not None else None)
    return _own_start[1]


# The one place that knows the name of a temporary, after its `.tmp-`: `HOST-PID.START[.PURPOSE]`, START the
# writer's start time (`_proc_stat`), so that a pid used again by another process is not taken for the writer.
# Names without START (`HOST-PID[.PURPOSE]`, written before it was added, or where there is no /proc) are read too.
_WRITER = re.compile(r"(?P<host>.+)-(?P<pid>\d+)(?:\.(?P<start>\d+))?(?:\.(?P<purpose>[A-Za-z_][\w-]*))?")


def temp_path(path: Path, purpose: str = "") -> Path:
    """`NAME.tmp-HOST-PID.START` (`NAME.tmp-HOST-PID.START.PURPOSE` for a scratch file beside an output, such
    as a spill): this process's temporary of `path`, which the next write of `path` removes if we die.
    START is this process's start time, where /proc gives it (see `_writer_state`)."""
    if purpose and not re.fullmatch(r"[A-Za-z_][\w-]*", purpose):
        raise ValueError(f"a temporary's purpose is a word starting with a letter, not {purpose!r}")
    start = _start_time()
    return path.with_name(f"{path.name}{_TMP_MARK}{socket.gethostname()}-{os.getpid()}"
                          + (f".{start}" if start is not None else "") + (f".{purpose}" if purpose else ""))


def _temp_writer(tmp: Path) -> tuple[str, int, int | None] | None:
    """(host, pid, start time or None) of the writer named in temporary `tmp`'s name; None when it names none."""
    writer = _WRITER.fullmatch(tmp.name.rpartition(_TMP_MARK)[2])
    if writer is None:
        return None
    return writer["host"], int(writer["pid"]), int(writer["start"]) if writer["start"] is not None else None


_DEAD, _ALIVE, _UNKNOWN = "dead", "alive", "unknown"


def _writer_state(tmp: Path) -> str:
    """Whether the writer of temporary `tmp` is dead, alive or unknown: only a dead writer's temporary is
    certainly ours to remove.

    Unknown: another host's, or a name that names no writer. Dead: a process of this host that no longer
    runs, or is a zombie (killed, not yet reaped by its parent), or whose pid another process now has (its
    start time is not the one in the name). Alive: a running process of this host with that pid (and start
    time, when the name has one), this one included. A name without a start time is judged by the pid alone.
    """
    writer = _temp_writer(tmp)
    if writer is None or writer[0] != socket.gethostname():
        return _UNKNOWN
    _, pid, start = writer
    if pid == os.getpid():
        return _ALIVE if start is None or start == _start_time() else _DEAD
    stat = _proc_stat(pid)
    if stat is None:  # no /proc, a process it hides from us, or one gone since: the kernel says whether it runs
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return _DEAD
        except PermissionError:  # alive, another user's
            return _ALIVE
        return _ALIVE
    state, started = stat
    if state in ("Z", "X") or (start is not None and start != started):
        return _DEAD
    return _ALIVE


def remove_stale_temps(path: str | os.PathLike) -> None:
    """Remove the temporaries of `path` (files, folders, spills) whose writer died on this host.

    What a task calls when it starts, and every write before it opens its own temporary. Never a
    live process's (a duplicate run may be writing the same output right now: its commit is
    harmless, removing its temporary would fail it) nor another host's (its writer may still run;
    see the module's docstring). Only `path`'s own: a sibling task may be writing its own beside it.
    """
    path = Path(path)
    for p in path.parent.glob(f"{glob.escape(path.name)}{_TMP_MARK}*"):
        if _writer_state(p) == _DEAD:
            remove_output(p)


def remove_leftover_temps(folder: str | os.PathLike) -> list[str]:
    """Remove every temporary in `folder` except a live writer's of this host; returns their names.

    Only for a final step that runs once every output of `folder` is committed (the dataset's
    finalize, after all its shards): a temporary of another host is then a leftover of a node lost
    mid-write (its job requeued elsewhere and finished), or of a duplicate whose output is already
    committed, which its own commit would only have found identical. Left there, it would make
    the folder fail `verify` (every file must be listed) until removed by hand.
    """
    removed = []
    for p in sorted(Path(folder).glob(f"*{_TMP_MARK}*")):
        if _writer_state(p) != _ALIVE:
            remove_output(p)
            removed.append(p.name)
    return removed


def remove_all_stale_temps(folder: str | os.PathLike) -> None:
    """`remove_stale_temps` for every output of `folder`: the temporaries of dead writers of this host.

    A final step's sweep (after its pool of writers stopped). A live writer's temporary is left even
    there: a duplicate run may still be writing an output that this one has finished.
    """
    for p in Path(folder).glob(f"*{_TMP_MARK}*"):
        if _writer_state(p) == _DEAD:
            remove_output(p)


_REASONS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large for this file system or limit", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EIO: "input/output error"}


def _first_non_folder(path: Path) -> Path | None:
    """The first ancestor of `path` (or `path` itself) that exists and is not a folder."""
    for p in reversed([path, *path.parents]):
        if p.exists() and not p.is_dir():
            return p
    return None


def make_parent_folder(path: Path) -> None:
    """Create `path`'s folder; PrepError naming the file in the way when a parent is a file, or `path` and the
    reason when the folder cannot be made (a read-only file system, a full disk: `write_error`)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = _first_non_folder(path.parent)
        raise PrepError(f"{blocker or path.parent}: not a folder; cannot create {path} under it") from None
    except OSError as e:
        raise write_error(path, e) from None


def check_output_root(path: str | os.PathLike, flag: str) -> None:
    """Refuse, before any work, a root of outputs (`--data-dir`) that is, or lies under, a file."""
    path = Path(path)
    blocker = _first_non_folder(path)
    if blocker == path:
        raise PrepError(f"{flag} {path}: is a file, not a folder")
    if blocker is not None:
        raise PrepError(f"{flag} {path}: {blocker} is a file, not a folder")


def write_error(path: Path, e: OSError) -> PrepError:
    """The one line for a failed write of `path`, never naming our temporary."""
    reason = _REASONS.get(e.errno, e.strerror or str(e))
    return PrepError(f"{path}: cannot write: {reason}")


def _is_own_write_error(e: BaseException, tmp: Path) -> bool:
    """An OSError of writing `tmp` itself (a full disk: no file name), not one of reading some input."""
    return (isinstance(e, OSError) and not isinstance(e, PrepError)
            and (e.filename is None or Path(e.filename) == tmp or Path(e.filename).is_relative_to(tmp)))


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range = getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None)  # Linux only
if _sync_file_range is not None:
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    _sync_file_range.restype = ctypes.c_int


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing `nbytes` of `fd` from `offset` to the disk, without waiting for it.

    Not a durability step (the fsync before the commit is): a hint, so that a large file being written
    goes to the disk while its writer works on, instead of all at its fsync. Left alone, the kernel
    starts only once a tenth of the memory is dirty, or after 30 s. Does nothing where the call is
    missing or refused (not Linux, a file system without it).
    """
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def remove_output(p: Path) -> None:
    """Remove a file, or a folder with what it holds; a symbolic link is removed, never followed. Nothing there is
    no error."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


# ---------------------------------------------------------------------------------------------
# The no-clobber rename. Each method returns True when it renamed, False when the destination
# exists (nothing changed), None when this kernel or file system lacks it (then the next is tried).

_AT_FDCWD, _RENAME_NOREPLACE = -100, 1
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # glibc 2.28+; not on macOS
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    _renameat2.restype = ctypes.c_int
# What renameat2 answers where RENAME_NOREPLACE is not supported: an old kernel (ENOSYS), a file
# system without it (EINVAL: NFS, some FUSE and cluster file systems).
_NO_RENAMEAT2 = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}
# What link answers on a file system without hard links (FAT, some FUSE mounts).
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS}


def _renameat2_noreplace(src: Path, dst: Path) -> bool | None:
    """One atomic step: the kernel renames only if `dst` does not exist, for files and folders alike."""
    if _renameat2 is None:
        return None
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        return False
    if err in _NO_RENAMEAT2:
        return None
    raise OSError(err, os.strerror(err), os.fspath(src), None, os.fspath(dst))


def _link_noreplace(src: Path, dst: Path) -> bool | None:
    """For a file: link(2) fails atomically when `dst` exists (NFS included), then the temporary's name
    goes. A kill between the two leaves the temporary as a second name, removed as a dead writer's."""
    try:
        os.link(src, dst)
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno in _NO_LINKS:
            return None
        raise
    os.unlink(src)
    return True


def _checked_rename(src: Path, dst: Path) -> bool:
    """rename(2) after a check that `dst` is absent. For a folder, safe on its own terms: rename never
    replaces a non-empty folder (ENOTEMPTY, EEXIST) nor a file (ENOTDIR), and a non-empty folder is what
    a racing writer commits (only two empty ones could swap, and they are identical). For a file, the
    last resort where neither renameat2 nor hard links exist: a file committed by a racer between the
    check and the rename is replaced, by a duplicate of the same task, unnoticed."""
    if os.path.lexists(dst):
        return False
    try:
        os.rename(src, dst)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            return False
        raise
    return True


# In the order tried. Module attributes so that a test can pin each method and race it.
_FILE_METHODS: tuple[Callable[[Path, Path], bool | None], ...] = (_renameat2_noreplace, _link_noreplace,
                                                                 _checked_rename)
_FOLDER_METHODS: tuple[Callable[[Path, Path], bool | None], ...] = (_renameat2_noreplace, _checked_rename)


def _rename_noreplace(src: Path, dst: Path) -> bool:
    """Rename `src` to `dst` unless `dst` exists; False (and nothing changed) when it does."""
    for method in _FOLDER_METHODS if src.is_dir() else _FILE_METHODS:
        done = method(src, dst)
        if done is not None:
            return done
    raise AssertionError("the last method always answers")


def _digests(path: Path) -> str | dict[str, str]:
    """The sha256 of a file; of a folder, {relative path: sha256} of every file below it."""
    if not path.is_dir():
        return sha256_file(path)
    return {p.relative_to(path).as_posix(): sha256_file(p) for p in sorted(path.rglob("*")) if p.is_file()}


def _difference(existing: Path, ours: Path) -> str | None:
    """None when `existing` holds exactly what our temporary `ours` holds; else what differs, in words.

    This run's differing result is named by its sha256 (beside the existing one's), not kept beside
    as a rejected copy: the error promises to change nothing, a copy next to a dataset would be
    caught by the globs its readers use (`train-*`) and by `verify`, and could be as large as the
    output (a 20 GB shard set); the run is deterministic, so the same command elsewhere (another
    --data-dir) makes the same bytes again for whoever wants to compare them.
    """
    if existing.is_dir() != ours.is_dir():
        return f"a {'folder' if existing.is_dir() else 'file'} there, a {'folder' if ours.is_dir() else 'file'} " \
               f"from this run"
    there, here = _digests(existing), _digests(ours)
    if there == here:
        return None
    if isinstance(there, str):
        return f"sha256 {there[:16]} there, {here[:16]} from this run"
    differ = [rel for rel in sorted(set(there) | set(here)) if there.get(rel) != here.get(rel)]
    rel = differ[0]
    what = ("only there" if rel not in here else "not there, made by this run" if rel not in there
            else f"sha256 {there[rel][:16]} there, {here[rel][:16]} from this run")
    more = f"; {len(differ) - 1} more files differ" if len(differ) > 1 else ""
    return f"{rel}: {what}{more}"


def _clash(path: Path, what: str) -> PrepError:
    return PrepError(f"{path}: exists with other content than this run's ({what}); left as it is: remove it "
                     f"to write it again")


def _commit(tmp: Path, path: Path, overwrite: bool) -> None:
    """`commit` without the fsync of the folder (for callers that commit several files of one folder)."""
    if overwrite:
        try:
            _refuse_link(path)
        except PrepError:
            remove_output(tmp)
            raise
        if tmp.is_dir() and path.is_dir():
            shutil.rmtree(path)  # rename replaces only an empty folder
        os.replace(tmp, path)
        return
    if _rename_noreplace(tmp, path):
        return
    try:
        _refuse_link(path)
        what = _difference(path, tmp)
    finally:
        remove_output(tmp)
    if what is not None:
        raise _clash(path, what)


def commit(tmp: str | os.PathLike, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Rename the finished, fsynced temporary `tmp` (a file or a folder) to `path`, then fsync the folder.

    Without `overwrite`, nothing is ever replaced: when `path` exists, an identical one is accepted
    (our temporary is removed: a duplicate run is harmless) and a different one raises a PrepError
    naming it and what differs, leaving it untouched. The rename is atomic against a racing writer:
    renameat2(RENAME_NOREPLACE) where the kernel and file system have it; else link + unlink for a
    file and rename(2), which never replaces a non-empty folder, for a folder.
    """
    tmp, path = Path(tmp), Path(path)
    _commit(tmp, path, overwrite)
    fsync_dir(path.parent)


# ---------------------------------------------------------------------------------------------
# Writing

def _refuse_link(path: Path) -> None:
    """A PrepError when `path` itself is a symbolic link: an output is never written through one, nor one replaced."""
    if path.is_symlink():
        raise PrepError(f"{path}: is a symbolic link (to {os.readlink(path)}); not written through nor replaced: "
                        f"remove it to write it again")


def _refuse_temp_link(path: Path, tmp: Path) -> None:
    """A PrepError when the temporary's name `tmp` is a symbolic link: someone else's, never followed nor removed."""
    if tmp.is_symlink():
        raise PrepError(f"{path}: cannot write: its temporary {tmp.name} is a symbolic link (to {os.readlink(tmp)}), "
                        f"not written through: remove it")


def _create_new(p: str | bytes, flags: int) -> int:
    """open()'s opener for a temporary: a new file, never an existing one, never through a link."""
    return os.open(p, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)


def _open_new(path: Path, tmp: Path, mode: str, encoding: str | None) -> IO:
    """`tmp` created and opened; what is at its name is removed first, unless it is a link (a PrepError)."""
    for _ in range(2):
        try:
            return open(tmp, mode, encoding=encoding, opener=_create_new)
        except FileExistsError:
            _refuse_temp_link(path, tmp)
            remove_output(tmp)  # this process's own name: a temporary of an earlier write of this path left behind
    raise PrepError(f"{path}: cannot write: its temporary {tmp.name} is made again as it is removed")


def _open_temp(path: Path, mode: str = "wb", encoding: str | None = None) -> tuple[Path, IO]:
    """The temporary of `path`, opened: its folder made, dead writers' temporaries of it removed."""
    _refuse_link(path)
    if path.is_dir():
        raise PrepError(f"{path}: is a folder; cannot write a file there")
    make_parent_folder(path)
    remove_stale_temps(path)
    tmp = temp_path(path)
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    try:
        return tmp, _open_new(path, tmp, mode, encoding)
    except BaseException as e:
        # open() may fail after creating the file: SIGTERM (an exception, `shardkit.signals`) can land
        # while it sets up the text layer, which runs Python code.
        if not isinstance(e, PrepError):  # a link at the temporary's name is left as it is
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        if isinstance(e, OSError):
            raise write_error(path, e) from e
        raise


def _discard(opened: list[tuple[Path, IO]]) -> None:
    for tmp, f in opened:
        # close() flushes what is buffered, and fails again on a full disk: the temporary goes regardless.
        with contextlib.suppress(OSError):
            f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def _atomic_write(path: Path, mode: str, encoding: str | None,
                  commit_temp: Callable[[Path, Path], None]) -> Iterator[IO]:
    tmp, f = _open_temp(path, mode, encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        commit_temp(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        _discard([(tmp, f)])
        if _is_own_write_error(e, tmp):
            raise write_error(path, e) from e
        raise


def atomic_write(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None, *,
                 overwrite: bool = False) -> contextlib.AbstractContextManager[IO]:
    """Open a temporary sibling of `path` for writing; on success fsync it and `commit` it to `path`.

    On any exception (SIGTERM included, once `shardkit.signals` turned it into one) the
    temporary is removed and `path` is left as it was; an OSError of the write itself (a full
    disk) becomes a PrepError naming `path`. Dead writers' temporaries of `path` are removed first.
    Without `overwrite` an existing `path` is never replaced (`commit`).
    """
    return _atomic_write(Path(path), mode, encoding, lambda tmp, dst: _commit(tmp, dst, overwrite))


def write_bytes(path: str | os.PathLike, data: bytes, *, overwrite: bool = False) -> None:
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        f.write(data)


def write_text(path: str | os.PathLike, text: str, *, overwrite: bool = False) -> None:
    with atomic_write(path, "w", overwrite=overwrite) as f:
        f.write(text)


def _json_text(obj) -> str:
    """Canonical JSON (sorted keys, fixed indent, trailing newline) so equal data gives equal bytes."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_json(path: str | os.PathLike, obj, *, overwrite: bool = False) -> None:
    """Canonical JSON (sorted keys, fixed indent, trailing newline) so equal data gives equal bytes."""
    write_text(path, _json_text(obj), overwrite=overwrite)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Build a folder under a temporary sibling name; on success fsync its files and `commit` it to `path`.

    Without `overwrite` an existing `path` is never replaced: an identical folder is accepted, a
    different one refused. With it, an existing folder is removed first (not atomically).
    """
    path = Path(path)
    _refuse_link(path)
    if path.exists() and not path.is_dir():
        raise PrepError(f"{path}: is a file; a folder is written there")
    make_parent_folder(path)
    remove_stale_temps(path)
    tmp = temp_path(path)
    _refuse_temp_link(path, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
    except BaseException as e:  # SIGTERM lands right after the mkdir as well as anywhere
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise write_error(path, e) from e
        raise
    try:
        yield tmp
        for p in sorted(tmp.rglob("*"), reverse=True):  # files before the folders holding them
            if p.is_symlink():  # its name is fsynced with its folder; what it points to is not ours
                continue
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(tmp)
        commit(tmp, path, overwrite=overwrite)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if _is_own_write_error(e, tmp):
            raise write_error(path, e) from e
        raise


@contextlib.contextmanager
def atomic_write_together(paths: list[str | os.PathLike], *, overwrite: bool = False
                          ) -> Iterator[list[IO[bytes]]]:
    """`atomic_write` for several files that are only valid together (records and their index, the
    outputs of one run): one binary temporary per path, all opened before the block runs, and committed,
    in the order given, only once the block has finished and every one is fsynced.

    On any exception before the commits every temporary is removed and every path left as it was,
    and an OSError of a write becomes a PrepError naming its file, as in `atomic_write`. Without
    `overwrite`, every path that exists is compared first: when one differs, none is committed;
    the identical ones are kept as they are. Put last the files readers look for: a commit that fails
    midway (the path became a folder, a racer committed different content) leaves the earlier ones
    committed. `paths` must be distinct.
    """
    paths = [Path(p) for p in paths]
    opened: list[tuple[Path, IO[bytes]]] = []
    try:
        for path in paths:
            opened.append(_open_temp(path))
        yield [f for _, f in opened]
        for _, f in opened:
            f.flush()
            os.fsync(f.fileno())
            f.close()
        pending = []
        for (tmp, _), path in zip(opened, paths):
            _refuse_link(path)
            if not overwrite and os.path.lexists(path):
                what = _difference(path, tmp)
                if what is not None:
                    raise _clash(path, what)
                tmp.unlink()  # identical: already committed, by a duplicate run or a killed one
            else:
                pending.append((tmp, path))
        for tmp, path in pending:
            _commit(tmp, path, overwrite)
    except BaseException as e:
        _discard(opened)
        for (tmp, _), path in zip(opened, paths):
            if _is_own_write_error(e, tmp):  # a full disk (no file name) is put on the first of them
                raise write_error(path, e) from e
        raise
    for folder in dict.fromkeys(path.parent for path in paths):
        fsync_dir(folder)


# ---------------------------------------------------------------------------------------------
# Receipts

def receipt_path(path: str | os.PathLike) -> Path:
    """`folder/name` -> `folder/.receipts/name.json`."""
    path = Path(path)
    return path.parent / RECEIPTS_DIR / (path.name + ".json")


def _same_output(a, b: dict) -> bool:
    """Receipts `a` and `b` describe the same bytes (a file's size and sha256, a folder's files)."""
    return isinstance(a, dict) and all(a.get(k) == b.get(k) for k in ("size", "sha256", "files"))


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _is_size(value) -> bool:
    return type(value) is int and value >= 0


def is_file_receipt(receipt) -> bool:
    """The shape `write_receipt` gives: an object whose `size` is a byte count and `sha256` 64 hex digits.
    Anything else (a list, a string, a key missing or of another type: a receipt edited, damaged, or
    written by something else) is no receipt: its output is checked again (made again and compared) instead
    of being trusted, and the receipt replaced."""
    return isinstance(receipt, dict) and _is_size(receipt.get("size")) and isinstance(receipt.get("sha256"), str) \
        and _SHA256.fullmatch(receipt["sha256"]) is not None


def is_folder_receipt(receipt) -> bool:
    """The shape `write_dir_receipt` gives: an object whose `files` maps each relative path to its size and sha256."""
    files = receipt.get("files") if isinstance(receipt, dict) else None
    return isinstance(files, dict) and all(
        isinstance(entry, dict) and _is_size(entry.get("size")) and isinstance(entry.get("sha256"), str)
        for entry in files.values())


def _json_type(value) -> str:
    """A value's JSON type: object, array, string, number (int or float), boolean or null."""
    if isinstance(value, bool) or value is None:
        return repr(value) if value is None else "boolean"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def _malformed_for(held, receipt: dict) -> bool:
    """`held` is not a receipt of this writer's shape: not an object, or lacking one of `receipt`'s keys, or holding
    one as another JSON type. Such a receipt is damaged, not a clash: it is replaced."""
    return not isinstance(held, dict) or any(key not in held or _json_type(held[key]) != _json_type(value)
                                             for key, value in receipt.items())


def _commit_receipt(tmp: Path, rp: Path, receipt: dict, overwrite: bool) -> None:
    """Commit a receipt no-clobber-or-identical. An existing receipt that describes other bytes than the
    output now there is stale (that output was removed and made again) and is replaced; one that
    describes the same bytes but says something else is refused, naming the first difference."""
    if overwrite:
        try:
            _refuse_link(rp)
        except PrepError:
            remove_output(tmp)
            raise
        os.replace(tmp, rp)
        return
    if _rename_noreplace(tmp, rp):
        return
    try:
        _refuse_link(rp)
        try:
            held = json.loads(rp.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            held = None
        if held == receipt:
            return
        if not _same_output(held, receipt) or _malformed_for(held, receipt):
            os.replace(tmp, rp)
            return
        key = next(k for k in sorted(set(held) | set(receipt)) if held.get(k) != receipt.get(k))
        raise PrepError(f"{rp}: the receipt of {rp.name[:-5]} there says {key} {_short(held.get(key))}, this run's "
                        f"says {_short(receipt.get(key))}; left as it is: remove it to write it again")
    finally:
        remove_output(tmp)


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _write_receipt(path: Path, receipt: dict, overwrite: bool) -> dict:
    rp = receipt_path(path)
    with _atomic_write(rp, "w", None, lambda tmp, dst: _commit_receipt(tmp, dst, receipt, overwrite)) as f:
        f.write(_json_text(receipt))
    return receipt


def write_receipt(path: str | os.PathLike, *, sha256: str | None = None, overwrite: bool = False, **info) -> dict:
    """Commit the receipt of an already-committed `path`: its size and sha256 plus `info`.

    Pass `sha256` when it was computed while writing, to spare re-reading a large file. `info` must
    be what the output determines: no time, host or pid (a duplicate run's receipt must be the same
    bytes; see `_commit_receipt`).
    """
    path = Path(path)
    receipt = {"file": path.name, "size": path.stat().st_size, "sha256": sha256 or sha256_file(path), **info}
    return _write_receipt(path, receipt, overwrite)


def read_receipt(path: str | os.PathLike) -> dict | None:
    """The receipt of `path`, or None when there is none, when it has not the shape a receipt has
    (`is_file_receipt`), or when the file no longer matches its size."""
    path = Path(path)
    rp = receipt_path(path)
    try:
        receipt = json.loads(rp.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError, RecursionError):
        return None
    if not is_file_receipt(receipt):
        return None
    try:
        if path.stat().st_size != receipt.get("size"):
            return None
    except FileNotFoundError:
        return None
    return receipt


def _files_below(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and RECEIPTS_DIR not in p.relative_to(folder).parts)


def write_dir_receipt(folder: str | os.PathLike, *, overwrite: bool = False, **info) -> dict:
    """Commit the receipt of a committed folder: every file's size and sha256, plus `info`."""
    folder = Path(folder)
    files = {rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)}
             for rel in _files_below(folder)}
    return _write_receipt(folder, {"folder": folder.name, "files": files, **info}, overwrite)


def read_dir_receipt(folder: str | os.PathLike) -> dict | None:
    """The receipt of a committed folder, or None when missing or when its files no longer match it."""
    folder = Path(folder)
    try:
        receipt = json.loads(receipt_path(folder).read_text(encoding="utf-8"))
        names = _files_below(folder)
    except (FileNotFoundError, ValueError, NotADirectoryError, IsADirectoryError, RecursionError):
        return None
    if not is_folder_receipt(receipt):
        return None
    if names != sorted(receipt["files"]):
        return None
    if any((folder / n).stat().st_size != e["size"] for n, e in receipt["files"].items()):
        return None
    return receipt
