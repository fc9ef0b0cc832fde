"""Download a dated Wikipedia dump from the dumps site (or a mirror, or a local copy).

What is Wikimedia's is here: dump ids, the dumps-site layout, ``dumpstatus.json`` and the checksum
files, the articles and multistream jobs, the User-Agent Wikimedia asks for. Moving bytes (resume,
back-off, the ``file://`` adapter, redirect checks, capped reads, verification, the lock, the
commit with a receipt) is ``shardkit.fetch``'s, which any source that downloads shares.

A dump URL is the base of a dumps-site layout: ``{url}/{wiki}/{date}/dumpstatus.json``,
``{wiki}-{date}-sha1sums.txt`` / ``-md5sums.txt`` and the part files. ``http://``, ``https://``
and ``file://`` URLs take exactly the same code path (``shardkit.fetch``), so the demo exercises
what a real run does. A mirror is just another dump URL; only a ``file://`` one (or a plain
folder) gets a session that reads local files.

The three steps, each usable on its own (the Luigi tasks in ``workflows/`` call them):

1. ``fetch_dump_status`` copies ``dumpstatus.json`` and the checksum files into the local
   download folder, atomically, so the rest of the run reads a pinned local copy.
2. ``list_parts`` reads that copy and returns the files to fetch, refusing a dump whose
   articles job is not ``done`` (files of unfinished jobs are partial or absent).
   ``dump_parts`` does both: it fetches the status when there is no copy, and once more when
   the copy predates the end of the dump.
3. ``fetch_part`` downloads one file with ``shardkit.fetch.fetch_file``: resumed, retried,
   never an HTML page, verified against the size and sha1 (or md5) of ``dumpstatus.json`` and
   the bz2 magic, committed with its receipt; two runs fetching the same file take turns.

What a server sends is not trusted (``shardkit.fetch`` says how redirects, sizes and quotes are
bounded); here:

- ``--wiki`` and ``--dump-date`` become folder names, so ``check_dump_id`` admits only a wiki
  database name (letters, digits, ``_``) and a ``YYYYMMDD`` date, before anything is fetched
  or written. A part's name becomes a file name: only a plain one is fetched.
- ``dumpstatus.json`` and the checksum files are read with a cap, ``SMALL_FILE_CAP`` (8 MiB, far
  above any real one: they hold one entry or line of a few hundred bytes per file of the dump).
- ``parse_status`` and ``parse_sums`` are the one place their content is checked: every value
  this module reads must have its JSON type and form, or one PrepError names the file and the
  value.

User-Agent. Wikimedia blocks requests without a descriptive User-Agent (a bare library name
such as ``python-requests`` is "generic"), and its servers allow 3 connections per (IP,
User-Agent); the Luigi tasks use at most 2. Every request sends::

    wikiprep/<version> (+<PROJECT_URL>; contact: <contact>)

where ``<contact>`` (an e-mail address or a URL where you can be reached) comes from the
``contact`` argument of ``default_user_agent`` or the environment variable
``WIKIPREP_CONTACT``. Set it before downloading from wikimedia.org: without it the
``contact:`` field is left out and a warning is logged. ``user_agent=`` replaces the whole
string.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import requests

from wikiprep import __version__
from shardkit import fetch
from shardkit.atomic import make_parent_folder, receipt_path, write_bytes, write_receipt
from shardkit.errors import PrepError, excerpt
from shardkit.progress import Progress

log = logging.getLogger(__name__)

PROJECT_URL = "https://github.com/wikiprep/wikiprep"
CONTACT_ENV = "WIKIPREP_CONTACT"
STATUS_FILE = "dumpstatus.json"
HASH_TYPES = ("sha1", "md5")  # preference order; dumps publish both

# Articles jobs (operations-dumps xmldumps-backup/dumps/dumpitemlist.py): the split job first,
# its recombined single file when the split job lists no files.
ARTICLES_JOBS = ("articlesdump", "articlesdumprecombine")
MULTISTREAM_JOBS = ("articlesmultistreamdump", "articlesmultistreamdumprecombine")

# dumpstatus.json and the checksum files hold one entry or line per file of the dump, a few hundred
# bytes each: this cap is far above any real one, and a body past it is refused, unread.
SMALL_FILE_CAP = 8 << 20
SMALL_FILE_KIND = "a dumps site's status or checksum file"

# A part whose size dumpstatus.json does not give is refused past this many bytes, so an endless body cannot
# fill the disk: the largest file of any Wikimedia dump (enwiki's multistream dump in one file) is about 24 GB
# in 2024. A part with a size is held to that size.
MAX_PART_SIZE = fetch.MAX_SIZE  # what a body past the cap is said not to be

# Wiki database names (enwiki, zh_yuewiki, be_x_oldwiki): they become folder names.
_WIKI_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
# A part's name becomes a file name, with suffixes (.part.json, .tmp-<host>-<pid>): kept well
# under the 255 bytes a file name may have.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_SUMS_LINE = re.compile(r"^([0-9a-fA-F]{32}|[0-9a-fA-F]{40})\s+\*?(\S+)$")
HEX_DIGITS = {"sha1": 40, "md5": 32}

_warned_no_contact = False


# ---------------------------------------------------------------------------------------------
# User-Agent, URLs, sessions


def default_user_agent(contact: str | None = None) -> str:
    """The descriptive User-Agent: project, version, project URL and a contact (argument or $WIKIPREP_CONTACT)."""
    global _warned_no_contact
    contact = (contact or os.environ.get(CONTACT_ENV, "")).strip()
    if not contact:
        if not _warned_no_contact:
            log.warning("%s is not set: the User-Agent carries no contact; Wikimedia asks for one", CONTACT_ENV)
            _warned_no_contact = True
        return f"wikiprep/{__version__} (+{PROJECT_URL})"
    return f"wikiprep/{__version__} (+{PROJECT_URL}; contact: {contact})"


def normalise_dump_url(dump_url: str) -> str:
    """`dump_url` without a trailing slash; a plain local folder becomes a file:// URL."""
    dump_url = str(dump_url).strip()
    scheme = urllib.parse.urlsplit(dump_url).scheme.lower()
    if scheme in ("http", "https", "file"):
        return dump_url.rstrip("/")
    if not scheme and dump_url:
        return Path(dump_url).resolve().as_uri().rstrip("/")
    raise PrepError(f"dump URL must start with http://, https:// or file://: {dump_url!r}")


def check_dump_id(wiki: str, date: str) -> None:
    """Refuse a wiki that is not a wiki database name, or a date that is not a YYYYMMDD date.

    Both become folder names under the data and download folders and parts of URLs, so
    anything else ('../..', '/abs', '.x', '') could write or read outside them. PrepError
    naming the flag and the value.
    """
    if not isinstance(wiki, str) or not _WIKI_NAME.fullmatch(wiki):
        raise PrepError(f"--wiki {excerpt(wiki)}: not a wiki database name (letters, digits and '_', "
                        "like enwiki, dewiki or zh_yuewiki)")
    valid = isinstance(date, str) and len(date) == 8 and date.isascii() and date.isdigit()
    if valid:
        try:
            dt.datetime.strptime(date, "%Y%m%d")
        except ValueError:
            valid = False
    if not valid:
        raise PrepError(f"--dump-date {excerpt(date)}: give the date of a dump as YYYYMMDD (never 'latest')")


def dump_file_url(dump_url: str, wiki: str, date: str, name: str) -> str:
    return f"{normalise_dump_url(dump_url)}/{wiki}/{date}/{urllib.parse.quote(name)}"


def is_local(dump_url: str) -> bool:
    """Is this a file:// dump URL (or a plain folder)? Only then are local files read."""
    return normalise_dump_url(dump_url).lower().startswith("file:")


def make_session(user_agent: str | None = None, *, local_files: bool = False) -> requests.Session:
    """A session (`shardkit.fetch.make_session`) with the project's User-Agent, or `user_agent`;
    file:// support only with `local_files`, which is for a file:// dump URL alone."""
    return fetch.make_session(user_agent or default_user_agent(), local_files=local_files)


def _get_small(session, url: str, *, retries, timeout, backoff, **limits) -> tuple[int, bytes]:
    """(status, body) of a status or checksum file on the server, read under SMALL_FILE_CAP (`fetch.read_small`;
    `limits`: its connect_timeout and stall_budget)."""
    return fetch.read_small(session, url, cap=SMALL_FILE_CAP, kind=SMALL_FILE_KIND, retries=retries,
                            timeout=timeout, backoff=backoff, **limits)


def _read_local_small(path: Path) -> bytes:
    """The local copy of a status or checksum file, read under the same cap."""
    return fetch.read_small_file(path, cap=SMALL_FILE_CAP, kind=SMALL_FILE_KIND)


# ---------------------------------------------------------------------------------------------
# dumpstatus.json and checksum files


def _sums_names(wiki: str, date: str) -> dict[str, str]:
    return {h: f"{wiki}-{date}-{h}sums.txt" for h in HASH_TYPES}


def _what(value) -> str:
    """A JSON value as an error line names it: its type, and a short excerpt of a scalar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {excerpt(value)}"
    if isinstance(value, str):
        return f"the string {excerpt(value)}"
    return "an array" if isinstance(value, list) else "an object"


def _field(obj: dict, key: str) -> str:
    return _what(obj[key]) if key in obj else "missing"


def parse_sums(text: str | bytes, source: str, htype: str | None = None) -> dict[str, str]:
    """`<hex>  <filename>` lines -> {filename: hex}; anything else is a PrepError naming `source`.

    Bytes are decoded as UTF-8. With `htype` ("sha1", "md5") every hash must have that hash's length.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise PrepError(f"{source} is not a text checksum file (starts {excerpt(text, 40)})") from None
    sums = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _SUMS_LINE.match(line.strip())
        if not m:
            raise PrepError(f"{source}: line {n} is not '<hex>  <filename>': {excerpt(line)}")
        if htype is not None and len(m.group(1)) != HEX_DIGITS[htype]:
            raise PrepError(f"{source}: line {n} has {len(m.group(1))} hex digits, not the {HEX_DIGITS[htype]} of {htype}")
        sums[m.group(2)] = m.group(1).lower()
    return sums


@dataclass(frozen=True)
class Job:
    """One articles job of dumpstatus.json: its status, and its files (without `.inprog` ones), each
    as {"size": bytes or None, "sha1": hex or None, "md5": hex or None}."""

    status: str
    files: dict[str, dict]


@dataclass(frozen=True)
class DumpStatus:
    """What this module reads of a dumpstatus.json: the articles jobs it has, checked, and the names of all its jobs."""

    jobs: dict[str, Job]
    job_names: tuple[str, ...]


def _file_entry(value, at: str, where: str) -> dict:
    if not isinstance(value, dict):
        raise PrepError(f"{where}: {at} is {_what(value)}, not an object")
    size = value.get("size")
    if size is not None and (type(size) is not int or size < 0):
        raise PrepError(f"{where}: {at}.size is {_what(size)}, not a size in bytes")
    if value.get("url") is not None and not isinstance(value["url"], str):
        raise PrepError(f"{where}: {at}.url is {_what(value['url'])}, not a string")
    entry = {"size": size}
    for h in HASH_TYPES:
        digest = value.get(h)
        if digest in (None, ""):
            digest = None
        elif not (isinstance(digest, str) and re.fullmatch(rf"[0-9a-fA-F]{{{HEX_DIGITS[h]}}}", digest)):
            raise PrepError(f"{where}: {at}.{h} is {_what(digest)}, not {HEX_DIGITS[h]} hex digits")
        entry[h] = digest.lower() if digest else None
    return entry


def parse_status(data: bytes | dict, where: str, wiki: str, date: str) -> DumpStatus:
    """dumpstatus.json (its bytes, or the parsed document) checked: the one place its content is.

    Every value list_parts reads, in the articles and multistream jobs present, must have its
    JSON type and form: `jobs` and each job an object, `status` a string, `files` an object
    (absent: none yet) of plain file names of `wiki` `date`, each an object whose `size` is a
    byte count, `url` a string, `sha1` / `md5` hex digests of their length (each may be absent
    or null). Other jobs are not read, so not judged. PrepError naming `where` and the value.
    """
    doc = data
    if isinstance(data, (bytes, bytearray)):
        try:
            doc = json.loads(bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise PrepError(f"{where} is not JSON (starts {excerpt(bytes(data), 40)}): not a dumps site?") from None
    if not isinstance(doc, dict) or "jobs" not in doc:
        raise PrepError(f"{where} has no 'jobs' object: not a dumpstatus.json")
    jobs_doc = doc["jobs"]
    if not isinstance(jobs_doc, dict):
        raise PrepError(f"{where}: jobs is {_what(jobs_doc)}, not an object")
    jobs = {}
    for job in ARTICLES_JOBS + MULTISTREAM_JOBS:
        if job not in jobs_doc:
            continue
        info = jobs_doc[job]
        if not isinstance(info, dict):
            raise PrepError(f"{where}: jobs.{job} is {_what(info)}, not an object")
        if not isinstance(info.get("status"), str):
            raise PrepError(f"{where}: jobs.{job}.status is {_field(info, 'status')}, not a string")
        files_doc = info.get("files", {})
        if not isinstance(files_doc, dict):
            raise PrepError(f"{where}: jobs.{job}.files is {_what(files_doc)}, not an object")
        files = {}
        for name, value in files_doc.items():
            if name.endswith(".inprog"):  # being written by a job still running
                continue
            if not _SAFE_NAME.match(name) or not name.startswith(f"{wiki}-{date}-"):
                raise PrepError(f"{job} in {where} lists {excerpt(name)}, not a file of {wiki} {date}")
            files[name] = _file_entry(value, f"jobs.{job}.files[{name!r}]", where)
        jobs[job] = Job(status=info["status"], files=files)
    return DumpStatus(jobs=jobs, job_names=tuple(sorted(jobs_doc)))


def _get_status(session, url: str, wiki: str, date: str, *, retries, timeout, backoff, **limits) -> bytes:
    """The body of dumpstatus.json at `url`, checked (`parse_status`); PrepError for a missing dump or a bad answer."""
    status, body = _get_small(session, url, retries=retries, timeout=timeout, backoff=backoff, **limits)
    if status == 404:
        raise PrepError(f"no dump for {wiki} {date} at {url}: 404")
    if status != 200:
        raise PrepError(f"cannot fetch the status of {wiki} {date} from {url}: HTTP {status}")
    parse_status(body, url, wiki, date)
    return body


def read_dump_status(dump_url: str, wiki: str, date: str, *, user_agent: str | None = None, retries: int = 5,
                     timeout: float = fetch.READ_TIMEOUT, backoff_base: float = 1.0, max_wait: float = 60.0,
                     connect_timeout: float = fetch.CONNECT_TIMEOUT, stall_budget: float = fetch.STALL_BUDGET) -> dict:
    """dumpstatus.json of a dump, fetched and checked but written nowhere, and nothing else fetched (no checksum
    files): what a plan (`python -m workflows plan`) reads to know the parts, leaving the data folder as it was.
    A server that does not answer fails it within `stall_budget` seconds (`fetch.read_small`)."""
    check_dump_id(wiki, date)
    url = dump_file_url(dump_url, wiki, date, STATUS_FILE)
    with make_session(user_agent, local_files=is_local(dump_url)) as s:
        body = _get_status(s, url, wiki, date, retries=retries, timeout=timeout,
                           backoff=fetch.Backoff(backoff_base, max_wait), connect_timeout=connect_timeout,
                           stall_budget=stall_budget)
    return json.loads(body.decode("utf-8"))


def fetch_dump_status(
    dump_url: str,
    wiki: str,
    date: str,
    dest_dir: Path,
    *,
    user_agent: str | None = None,
    retries: int = 5,
    timeout: float = fetch.READ_TIMEOUT,
    backoff_base: float = 1.0,
    max_wait: float = 60.0,
    connect_timeout: float = fetch.CONNECT_TIMEOUT,
    stall_budget: float = fetch.STALL_BUDGET,
) -> Path:
    """Fetch dumpstatus.json (and the sha1sums/md5sums files when published) into dest_dir; return its path.

    Each file is checked (`parse_status`, `parse_sums`) before anything is written, then
    committed atomically with a receipt naming its URL. Checksum files the server does not have
    are removed locally, so the folder always mirrors one fetch: these copies are replaced
    (`overwrite`), unlike every other output, since a dump's status changes until it is done.
    Each file is given up on when the server has not answered it whole within `stall_budget` seconds.
    """
    check_dump_id(wiki, date)
    dest_dir = Path(dest_dir)
    backoff = fetch.Backoff(backoff_base, max_wait)
    url = dump_file_url(dump_url, wiki, date, STATUS_FILE)
    limits = dict(connect_timeout=connect_timeout, stall_budget=stall_budget)
    with make_session(user_agent, local_files=is_local(dump_url)) as s:
        body = _get_status(s, url, wiki, date, retries=retries, timeout=timeout, backoff=backoff, **limits)
        sums = {}
        for htype, name in _sums_names(wiki, date).items():
            surl = dump_file_url(dump_url, wiki, date, name)
            sstatus, sbody = _get_small(s, surl, retries=retries, timeout=timeout, backoff=backoff, **limits)
            if sstatus == 404:
                continue
            if sstatus != 200:
                raise PrepError(f"cannot fetch {surl}: HTTP {sstatus}")
            parse_sums(sbody, surl, htype)
            sums[name] = (surl, sbody)
    make_parent_folder(dest_dir / STATUS_FILE)  # a read-only or full disk: one line
    for name in _sums_names(wiki, date).values():
        path = dest_dir / name
        if name in sums:
            write_bytes(path, sums[name][1], overwrite=True)
            write_receipt(path, url=sums[name][0], overwrite=True)
        else:
            for p in (receipt_path(path), path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
    path = dest_dir / STATUS_FILE
    write_bytes(path, body, overwrite=True)
    write_receipt(path, url=url, overwrite=True)
    return path


@dataclass(frozen=True)
class Part:
    """One file of a dump: its name on the server, its path relative to the dump URL, size and hashes."""

    name: str
    url: str
    size: int | None
    sha1: str | None
    md5: str | None

    @property
    def is_index(self) -> bool:
        """A multistream job's index file (offset:page id:title lines), not XML."""
        return "-multistream-index" in self.name


def _natural_key(name: str):
    # pages-articles2.xml-... before pages-articles10.xml-...
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def list_parts(source: Path | str | dict, wiki: str, date: str, *, multistream: bool = False,
               need_hashes: bool = True) -> list[Part]:
    """The files of the articles dump of `wiki` `date`, in natural part order, each with size and hash.

    `source` is the download folder written by `fetch_dump_status` (or its dumpstatus.json),
    or an already-parsed dumpstatus dict (then only hashes inside it are used). Split parts
    (`articlesdump`) are taken when the dump has them, else the recombined file; with
    `multistream=True` the multistream job's files, including its index files. The job must
    be `done`. Hashes come from dumpstatus.json, else the sha1sums/md5sums file; a part with neither is
    refused unless `need_hashes` is False (a plan, which names the parts but downloads none).
    """
    check_dump_id(wiki, date)
    sums_dir = None
    where = "dumpstatus.json"
    if isinstance(source, dict):
        status = parse_status(source, where, wiki, date)
    else:
        path = Path(source)
        if path.is_dir():
            path = path / STATUS_FILE
        sums_dir = path.parent
        where = str(path)
        try:
            data = _read_local_small(path)
        except FileNotFoundError:
            raise PrepError(f"no {STATUS_FILE} at {path}: fetch the dump status first") from None
        except OSError as e:
            raise PrepError(f"cannot read {path}: {e.strerror}") from None
        status = parse_status(data, where, wiki, date)

    candidates = MULTISTREAM_JOBS if multistream else ARTICLES_JOBS
    chosen = None
    for job in candidates:
        info = status.jobs.get(job)
        if info is None:
            continue
        if info.status != "done":
            raise PrepError(
                f"{job} is {excerpt(info.status)} in {wiki} {date}: the dump is not finished; pick an earlier date"
            )
        if info.files:
            chosen = (job, info.files)
            break
    if chosen is None:
        jobs = excerpt(", ".join(status.job_names), 80) if status.job_names else "none"
        raise PrepError(f"no files for {' or '.join(candidates)} in {where} of {wiki} {date} (jobs: {jobs})")
    job, files = chosen

    sums: dict[str, dict[str, str]] = {}
    if sums_dir is not None:
        for htype, name in _sums_names(wiki, date).items():
            p = sums_dir / name
            if p.is_file():
                sums[htype] = parse_sums(_read_local_small(p), str(p), htype)

    parts = []
    for name in sorted(files, key=_natural_key):
        entry = files[name]
        if entry["size"] == 0:  # a job that failed writing it: no part of a dump is empty
            raise PrepError(f"{job} in {where} lists {name} as 0 bytes: an empty dump part, so a broken dump; "
                            f"pick another --dump-date")
        hashes = {h: entry[h] or sums.get(h, {}).get(name) for h in HASH_TYPES}
        if need_hashes and not any(hashes.values()):
            raise PrepError(
                f"no sha1 or md5 for {name}: not in {where} nor in {wiki}-{date}-sha1sums.txt / -md5sums.txt"
            )
        parts.append(Part(name=name, url=f"{wiki}/{date}/{name}", size=entry["size"], sha1=hashes["sha1"],
                          md5=hashes["md5"]))
    return parts


def dump_parts(dump_url: str, wiki: str, date: str, download_dir: Path, *, multistream: bool = False,
               **settings) -> list[Part]:
    """The part files of a dated dump, from the local copy of its status in `download_dir`.

    The status is fetched when there is no copy yet, so a run reads one pinned copy. When the
    copy gives no parts (it may date from before the dump finished), the status is fetched once
    more and that answer decides. PrepError for a wiki that is not a database name or a date
    that is not YYYYMMDD (never "latest"), before anything is fetched (`check_dump_id`). `settings` are
    `fetch_dump_status`'s (retries, timeouts, stall budget).
    """
    check_dump_id(wiki, date)
    download_dir = Path(download_dir)
    if not (download_dir / STATUS_FILE).exists():
        fetch_dump_status(dump_url, wiki, date, download_dir, **settings)
    try:
        return list_parts(download_dir, wiki, date, multistream=multistream)
    except PrepError:
        fetch_dump_status(dump_url, wiki, date, download_dir, **settings)
        return list_parts(download_dir, wiki, date, multistream=multistream)


# ---------------------------------------------------------------------------------------------
# One part


def fetch_part(
    dump_url: str,
    wiki: str,
    date: str,
    part: Part,
    dest_dir: Path,
    *,
    user_agent: str | None = None,
    retries: int = 5,
    progress: Progress | None = None,
    timeout: float = fetch.READ_TIMEOUT,
    verify_attempts: int = 3,
    backoff_base: float = 1.0,
    max_wait: float = 60.0,
    chunk_size: int = 1 << 16,  # a dropped connection loses at most one chunk
    progress_bar: bool | None = None,
    connect_timeout: float = fetch.CONNECT_TIMEOUT,
    min_rate: int = fetch.MIN_RATE,
    rate_window: float = fetch.RATE_WINDOW,
    stall_budget: float = fetch.STALL_BUDGET,
    max_size: int = MAX_PART_SIZE,
) -> dict:
    """Download `part` into dest_dir, verified and committed with a receipt; return the receipt.

    `shardkit.fetch.fetch_file` does the work, checking the size and sha1 (or md5) of `part`
    (from dumpstatus.json or the checksum files) and, for a `.bz2` file, the bz2 magic: the
    transfer goes to `<name>.part`, resumed with Range/If-Range across calls and retries; once it
    verifies, it is renamed to `<name>` and its receipt written. Wrong content discards the
    `.part` and fetches again, at most `verify_attempts` times in all. Transport failures are
    retried with back-off `backoff_base * 2**n` capped at `max_wait` (or the server's
    Retry-After), at most `retries` in a row without progress (a byte past the furthest held, at no less
    than `min_rate` bytes/s over `rate_window` s); with no progress for `stall_budget` s, or no answer
    within `connect_timeout` / `timeout` (read) on every try, it is given up. A part without a size in
    dumpstatus.json is refused past `max_size` bytes (MAX_PART_SIZE). A symbolic link at the part's
    path, or its `.part`, `.part.json` or `.part.lock`, is refused, never written through.
    404 and other 4xx fail at once
    with a PrepError naming the file. `progress(bytes_done, bytes_total)` is called as bytes
    arrive; `progress_bar` (default: when stderr is a terminal) shows a tqdm bar.
    """
    check_dump_id(wiki, date)
    if not _SAFE_NAME.match(part.name):
        raise PrepError(f"refusing to download {excerpt(part.name)}: not a plain file name")
    if not (part.sha1 or part.md5):
        raise PrepError(f"no sha1 or md5 for {part.name}: cannot verify the download")
    expected = fetch.Expected(
        size=part.size,
        hashes={h: getattr(part, h) for h in HASH_TYPES if getattr(part, h)},
        magic=fetch.BZ2 if part.name.endswith(".bz2") else None,
        source=STATUS_FILE,
        max_size=max_size,
    )
    url = dump_file_url(dump_url, wiki, date, part.name)
    try:
        with make_session(user_agent, local_files=is_local(dump_url)) as session:
            return fetch.fetch_file(
                session, url, Path(dest_dir) / part.name, expected,
                retries=retries, timeout=timeout, backoff=fetch.Backoff(backoff_base, max_wait),
                verify_attempts=verify_attempts, chunk=chunk_size, progress=progress, progress_bar=progress_bar,
                connect_timeout=connect_timeout, min_rate=min_rate, rate_window=rate_window,
                stall_budget=stall_budget,
            )
    except fetch.ServerRefused as e:
        if e.status == 404:
            raise PrepError(f"missing part {part.name}: {url}: 404") from None
        if e.status == 403:
            raise PrepError(f"{url}: 403 Forbidden for {part.name} (a blocked User-Agent? set {CONTACT_ENV})") from None
        raise
