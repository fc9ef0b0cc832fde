"""Download a dated Wikipedia dump from the dumps site (or a mirror, or a local copy).

A dump URL is the base of a dumps-site layout: ``{url}/{wiki}/{date}/dumpstatus.json``,
``{wiki}-{date}-sha1sums.txt`` / ``-md5sums.txt`` and the part files. ``http://``, ``https://``
and ``file://`` URLs take exactly the same code path (``file://`` goes through a small
transport adapter for ``requests``), so the demo exercises what a real run does. A mirror is
just another dump URL.

The three steps, each usable on its own (the Luigi tasks in ``workflows/`` call them):

1. ``fetch_dump_status`` copies ``dumpstatus.json`` and the checksum files into the local
   download folder, atomically, so the rest of the run reads a pinned local copy.
2. ``list_parts`` reads that copy and returns the files to fetch, refusing a dump whose
   articles job is not ``done`` (files of unfinished jobs are partial or absent).
   ``dump_parts`` does both: it fetches the status when there is no copy, and once more when
   the copy predates the end of the dump.
3. ``fetch_part`` downloads one file to ``<name>.part``, resuming a broken transfer with
   ``Range``/``If-Range``, retrying 429/5xx/connection errors/timeouts with back-off, never
   accepting an HTML error page, and verifying size and sha1 (or md5) before it renames the
   file into place and commits its receipt (``shardkit.atomic``). A file with a valid receipt
   is not fetched again.

User-Agent. Wikimedia blocks requests without a descriptive User-Agent (a bare library name
such as ``python-requests`` is "generic"), and its servers allow 3 connections per (IP,
User-Agent); the Luigi tasks use at most 2. Every request sends::

    wikiprep/<version> (+<PROJECT_URL>; contact: <contact>)

where ``<contact>`` (an e-mail address or a URL where you can be reached) comes from the
``contact`` argument of ``default_user_agent`` or the environment variable
``WIKIPREP_CONTACT``. Set it before downloading from wikimedia.org: without it the
``contact:`` field is left out and a warning is logged. ``user_agent=`` replaces the whole
string.

Memory stays bounded: bodies are streamed to disk in chunks and hashed on the way; when a
transfer resumes, the bytes already on disk are hashed first.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import io
import json
import logging
import os
import re
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests
import requests.adapters
import requests.structures

from wikiprep import __version__
from shardkit.atomic import fsync_dir, read_receipt, receipt_path, write_bytes, write_json, write_receipt
from shardkit.errors import PrepError

log = logging.getLogger(__name__)

PROJECT_URL = "https://github.com/wikiprep/wikiprep"
CONTACT_ENV = "WIKIPREP_CONTACT"
STATUS_FILE = "dumpstatus.json"
HASH_TYPES = ("sha1", "md5")  # preference order; dumps publish both
BZ2_MAGIC = b"BZh"
PART_SUFFIX = ".part"
SIDECAR_SUFFIX = ".part.json"  # the validator (ETag / Last-Modified) that If-Range sends back

# Articles jobs (operations-dumps xmldumps-backup/dumps/dumpitemlist.py): the split job first,
# its recombined single file when the split job lists no files.
ARTICLES_JOBS = ("articlesdump", "articlesdumprecombine")
MULTISTREAM_JOBS = ("articlesmultistreamdump", "articlesmultistreamdumprecombine")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SUMS_LINE = re.compile(r"^([0-9a-fA-F]{32}|[0-9a-fA-F]{40})\s+\*?(\S+)$")
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")

Progress = Callable[[int, int], None]
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


def dump_file_url(dump_url: str, wiki: str, date: str, name: str) -> str:
    return f"{normalise_dump_url(dump_url)}/{wiki}/{date}/{urllib.parse.quote(name)}"


class FileAdapter(requests.adapters.BaseAdapter):
    """`file://` for requests, with the HTTP semantics the downloader relies on.

    GET only; 404 for a missing file; ETag/Last-Modified from size and mtime; `Range: bytes=N-`
    honoured (206) unless an `If-Range` validator no longer matches (200, whole file).
    """

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        parts = urllib.parse.urlsplit(request.url)
        path = Path(urllib.request.url2pathname(urllib.parse.unquote(parts.path)))
        resp = requests.Response()
        resp.url = request.url
        resp.request = request
        resp.headers = requests.structures.CaseInsensitiveDict()
        resp.raw = io.BytesIO(b"")
        if request.method not in ("GET", "HEAD"):
            resp.status_code, resp.reason = 405, "Method Not Allowed"
            return resp
        try:
            f = open(path, "rb")
            st = os.fstat(f.fileno())
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            resp.status_code, resp.reason = 404, "Not Found"
            return resp
        except PermissionError:
            resp.status_code, resp.reason = 403, "Forbidden"
            return resp
        etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
        last_modified = email.utils.formatdate(st.st_mtime, usegmt=True)
        resp.headers.update(
            {"ETag": etag, "Last-Modified": last_modified, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        )
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", request.headers.get("Range", "").strip())
        if_range = request.headers.get("If-Range")
        if m and (if_range is None or if_range in (etag, last_modified)):
            start = int(m.group(1))
            if start >= st.st_size:
                f.close()
                resp.status_code, resp.reason = 416, "Range Not Satisfiable"
                resp.headers["Content-Range"] = f"bytes */{st.st_size}"
                return resp
            resp.headers["Content-Range"] = f"bytes {start}-{st.st_size - 1}/{st.st_size}"
            resp.status_code, resp.reason = 206, "Partial Content"
        else:
            resp.status_code, resp.reason = 200, "OK"
        resp.headers["Content-Length"] = str(st.st_size - start)
        f.seek(start)
        if stream:
            resp.raw = f
        else:  # requests will not close a non-streamed raw body: read it now
            with f:
                resp.raw = io.BytesIO(f.read())
        return resp

    def close(self):
        pass


def make_session(user_agent: str | None = None) -> requests.Session:
    """A requests session with the project's User-Agent and file:// support."""
    s = requests.Session()
    s.headers["User-Agent"] = user_agent or default_user_agent()
    # Ranges and hashes are over the stored bytes: never let a transfer encoding change them.
    s.headers["Accept-Encoding"] = "identity"
    s.mount("file://", FileAdapter())
    return s


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    with contextlib.suppress(TypeError, ValueError, IndexError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    return None


class _Backoff:
    """Exponential back-off (base * 2**n), or the server's Retry-After, never above `max_wait`."""

    def __init__(self, base: float, max_wait: float):
        self.base, self.max_wait, self.n = base, max_wait, 0

    def sleep(self, retry_after: float | None = None) -> None:
        wait = retry_after if retry_after is not None else self.base * (2**self.n)
        self.n += 1
        time.sleep(max(0.0, min(wait, self.max_wait)))

    def reset(self) -> None:
        self.n = 0


def _is_retryable(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def _is_html(resp: requests.Response) -> bool:
    return resp.headers.get("Content-Type", "").split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


def _get_small(session, url, *, retries, timeout, backoff) -> tuple[int, bytes]:
    """GET a small file with retries; returns (status, body) for 200 and for final 4xx answers."""
    last = ""
    for attempt in range(retries + 1):
        try:
            resp = session.get(url, timeout=timeout)
        except requests.RequestException as e:
            last = f"{type(e).__name__}: {e}"
            retry_after = None
        else:
            if not _is_retryable(resp.status_code):
                return resp.status_code, resp.content
            last = f"HTTP {resp.status_code} {resp.reason}"
            retry_after = _retry_after(resp)
        if attempt < retries:
            log.info("%s: %s; retrying", url, last)
            backoff.sleep(retry_after)
    raise PrepError(f"giving up on {url} after {retries} retries: {last}")


# ---------------------------------------------------------------------------------------------
# dumpstatus.json and checksum files


def _sums_names(wiki: str, date: str) -> dict[str, str]:
    return {h: f"{wiki}-{date}-{h}sums.txt" for h in HASH_TYPES}


def parse_sums(text: str, source: str) -> dict[str, str]:
    """`<hex>  <filename>` lines -> {filename: hex}; anything else is a PrepError naming `source`."""
    sums = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _SUMS_LINE.match(line.strip())
        if not m:
            raise PrepError(f"{source}: line {n} is not '<hex>  <filename>': {line[:80]!r}")
        sums[m.group(2)] = m.group(1).lower()
    return sums


def fetch_dump_status(
    dump_url: str,
    wiki: str,
    date: str,
    dest_dir: Path,
    *,
    user_agent: str | None = None,
    retries: int = 5,
    timeout: float = 60,
    backoff_base: float = 1.0,
    max_wait: float = 60.0,
) -> Path:
    """Fetch dumpstatus.json (and the sha1sums/md5sums files when published) into dest_dir; return its path.

    Each file is committed atomically with a receipt naming its URL. Checksum files the
    server does not have are removed locally, so the folder always mirrors one fetch.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    backoff = _Backoff(backoff_base, max_wait)
    url = dump_file_url(dump_url, wiki, date, STATUS_FILE)
    with make_session(user_agent) as s:
        status, body = _get_small(s, url, retries=retries, timeout=timeout, backoff=backoff)
        if status == 404:
            raise PrepError(f"no dump for {wiki} {date} at {url}: 404")
        if status != 200:
            raise PrepError(f"cannot fetch the status of {wiki} {date} from {url}: HTTP {status}")
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise PrepError(f"{url} is not JSON (starts {body[:40]!r}): not a dumps site?") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), dict):
            raise PrepError(f"{url} has no 'jobs' object: not a dumpstatus.json")
        sums = {}
        for name in _sums_names(wiki, date).values():
            surl = dump_file_url(dump_url, wiki, date, name)
            sstatus, sbody = _get_small(s, surl, retries=retries, timeout=timeout, backoff=backoff)
            if sstatus == 404:
                continue
            if sstatus != 200:
                raise PrepError(f"cannot fetch {surl}: HTTP {sstatus}")
            try:
                parse_sums(sbody.decode("utf-8"), surl)
            except UnicodeDecodeError:
                raise PrepError(f"{surl} is not a text checksum file") from None
            sums[name] = (surl, sbody)
    for name in _sums_names(wiki, date).values():
        path = dest_dir / name
        if name in sums:
            write_bytes(path, sums[name][1])
            write_receipt(path, url=sums[name][0])
        else:
            for p in (receipt_path(path), path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
    path = dest_dir / STATUS_FILE
    write_bytes(path, body)
    write_receipt(path, url=url)
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


def list_parts(source: Path | str | dict, wiki: str, date: str, *, multistream: bool = False) -> list[Part]:
    """The files of the articles dump of `wiki` `date`, in natural part order, each with size and hash.

    `source` is the download folder written by `fetch_dump_status` (or its dumpstatus.json),
    or an already-parsed dumpstatus dict (then only hashes inside it are used). Split parts
    (`articlesdump`) are taken when the dump has them, else the recombined file; with
    `multistream=True` the multistream job's files, including its index files. The job must
    be `done`. Hashes come from dumpstatus.json, else the sha1sums/md5sums file.
    """
    sums_dir = None
    where = "dumpstatus.json"
    if isinstance(source, dict):
        doc = source
    else:
        path = Path(source)
        if path.is_dir():
            path = path / STATUS_FILE
        sums_dir = path.parent
        where = str(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PrepError(f"no {STATUS_FILE} at {path}: fetch the dump status first") from None
        except (UnicodeDecodeError, ValueError):
            raise PrepError(f"{path} is not valid JSON") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, dict):
        raise PrepError(f"{where} has no 'jobs' object: not a dumpstatus.json")

    candidates = MULTISTREAM_JOBS if multistream else ARTICLES_JOBS
    chosen = None
    for job in candidates:
        info = jobs.get(job)
        if info is None:
            continue
        status = info.get("status")
        if status != "done":
            raise PrepError(
                f"{job} is {status!r} in {wiki} {date}: the dump is not finished; pick an earlier date"
            )
        files = {n: f for n, f in (info.get("files") or {}).items() if not n.endswith(".inprog")}
        if files:
            chosen = (job, files)
            break
    if chosen is None:
        raise PrepError(
            f"no files for {' or '.join(candidates)} in {where} of {wiki} {date} (jobs: {', '.join(sorted(jobs)) or 'none'})"
        )
    job, files = chosen

    sums: dict[str, dict[str, str]] = {}
    if sums_dir is not None:
        for htype, name in _sums_names(wiki, date).items():
            p = sums_dir / name
            if p.is_file():
                sums[htype] = parse_sums(p.read_text(encoding="utf-8"), str(p))

    parts = []
    for name in sorted(files, key=_natural_key):
        if not _SAFE_NAME.match(name) or not name.startswith(f"{wiki}-{date}-"):
            raise PrepError(f"{job} in {where} lists {name!r}, not a file of {wiki} {date}")
        entry = files[name] if isinstance(files[name], dict) else {}
        size = entry.get("size")
        if size is not None and (not isinstance(size, int) or size < 0):
            raise PrepError(f"{where}: bad size {size!r} for {name}")
        hashes = {h: (entry.get(h) or sums.get(h, {}).get(name)) for h in HASH_TYPES}
        hashes = {h: v.lower() if isinstance(v, str) else None for h, v in hashes.items()}
        if not any(hashes.values()):
            raise PrepError(
                f"no sha1 or md5 for {name}: not in {where} nor in {wiki}-{date}-sha1sums.txt / -md5sums.txt"
            )
        parts.append(Part(name=name, url=f"{wiki}/{date}/{name}", size=size, sha1=hashes["sha1"], md5=hashes["md5"]))
    return parts


def dump_parts(dump_url: str, wiki: str, date: str, download_dir: Path, *, multistream: bool = False) -> list[Part]:
    """The part files of a dated dump, from the local copy of its status in `download_dir`.

    The status is fetched when there is no copy yet, so a run reads one pinned copy. When the
    copy gives no parts (it may date from before the dump finished), the status is fetched once
    more and that answer decides. PrepError for a date that is not YYYYMMDD (never "latest").
    """
    if not (len(date) == 8 and date.isdigit()):
        raise PrepError(f"--dump-date {date!r}: give the date of a dump as YYYYMMDD (never 'latest')")
    download_dir = Path(download_dir)
    if not (download_dir / STATUS_FILE).exists():
        fetch_dump_status(dump_url, wiki, date, download_dir)
    try:
        return list_parts(download_dir, wiki, date, multistream=multistream)
    except PrepError:
        fetch_dump_status(dump_url, wiki, date, download_dir)
        return list_parts(download_dir, wiki, date, multistream=multistream)


# ---------------------------------------------------------------------------------------------
# One part


class _Mismatch(Exception):
    """The content of one transfer is wrong (HTML page, bad magic, size or hash): discard and refetch."""


class _Transient(Exception):
    """A failure worth retrying with back-off (429/5xx, a dropped or timed-out transfer)."""


def _hashers(part: Part) -> dict[str, "hashlib._Hash"]:
    return {h: hashlib.new(h) for h in HASH_TYPES if getattr(part, h)}


def _hash_file(path: Path, hashers: dict, chunk: int) -> int:
    n = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            for h in hashers.values():
                h.update(block)
            n += len(block)
    return n


def _check_hashes(part: Part, digests: dict[str, str]) -> str | None:
    for h in HASH_TYPES:
        want = getattr(part, h)
        if want and digests.get(h) != want:
            return f"{h} {digests.get(h)} instead of {want}"
    return None


def _committed(final: Path, part: Part, url: str, info: dict, chunk: int) -> dict | None:
    """The receipt of an already-downloaded `final`, or None when it must be downloaded.

    A file renamed into place by a run killed before its receipt is kept (and its receipt
    written) only if it verifies; otherwise it is removed.
    """
    receipt = read_receipt(final)
    if receipt is not None:
        clash = [h for h in HASH_TYPES if getattr(part, h) and receipt.get(h) and receipt[h] != getattr(part, h)]
        if part.size is not None and receipt.get("size") != part.size:
            clash.append("size")
        if clash:
            raise PrepError(
                f"{final} is already downloaded but its {'/'.join(clash)} differs from dumpstatus.json; "
                f"delete it and {receipt_path(final)} to download it again"
            )
        return receipt
    if not final.exists():
        return None
    hashers = _hashers(part)
    size = _hash_file(final, hashers, chunk)
    if (part.size is None or size == part.size) and not _check_hashes(part, {h: x.hexdigest() for h, x in hashers.items()}):
        return write_receipt(final, url=url, **info)
    _discard(final, receipt_path(final))
    return None


class _ProgressBar:
    """tqdm on a terminal (bytes, rate, ETA), nothing otherwise; plus the caller's callback."""

    def __init__(self, name: str, total: int | None, callback: Progress | None, bar: bool | None):
        self.callback, self.total = callback, total
        if bar is None:
            bar = sys.stderr.isatty()
        self.tqdm = None
        if bar:
            from tqdm import tqdm

            self.tqdm = tqdm(total=total, desc=name, unit="B", unit_scale=True, unit_divisor=1024, leave=False, file=sys.stderr)

    def update(self, done: int) -> None:
        if self.tqdm is not None:
            if done < self.tqdm.n:  # restarted from the beginning
                self.tqdm.reset(total=self.total)
            self.tqdm.update(done - self.tqdm.n)
        if self.callback is not None:
            self.callback(done, self.total if self.total is not None else done)

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


def _read_sidecar(sidecar: Path) -> dict:
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return {}


def _validator(resp: requests.Response) -> str | None:
    """The If-Range validator: a strong ETag, else Last-Modified (If-Range never takes a weak ETag)."""
    etag = resp.headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return resp.headers.get("Last-Modified")


def _discard(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _transfer(session, url: str, part: Part, partfile: Path, sidecar: Path, *, retries, timeout, backoff, chunk, bar) -> dict[str, str]:
    """Bring `partfile` to the whole body of `url`, resuming; return its digests.

    Transport failures (429, 5xx, connection errors, timeouts) are retried with back-off, at
    most `retries` in a row without progress. Wrong content raises `_Mismatch`.
    """
    hashers = _hashers(part)
    have = 0
    if partfile.exists():
        have = partfile.stat().st_size
        if part.size is not None and have > part.size:
            partfile.write_bytes(b"")
            have = 0
        else:
            have = _hash_file(partfile, hashers, chunk)  # resume: hash what is already there
    known = _read_sidecar(sidecar)
    # A validator is only meaningful for the URL that produced it; elsewhere (another mirror)
    # resume without If-Range: the final hash check catches a spliced file.
    validator = known.get("validator") if known.get("url") == url else None
    bar.update(have)
    failures, last = 0, ""
    while True:
        if part.size is not None and have == part.size:
            return {h: x.hexdigest() for h, x in hashers.items()}
        headers = {}
        if have:
            headers["Range"] = f"bytes={have}-"
            if validator:
                headers["If-Range"] = validator
        progressed = False
        retry_after = None
        try:
            with session.get(url, headers=headers, stream=True, timeout=timeout) as resp:
                code = resp.status_code
                if code == 404:
                    raise PrepError(f"missing part {part.name}: {url}: 404")
                if code == 416:  # our .part is longer than the server's file: start again
                    partfile.write_bytes(b"")
                    hashers, have0, have = _hashers(part), have, 0
                    raise _Transient(f"HTTP 416 for bytes={have0}-")
                if _is_retryable(code):
                    retry_after = _retry_after(resp)
                    raise _Transient(f"HTTP {code} {resp.reason}")
                if code == 403:
                    raise PrepError(
                        f"{url}: 403 Forbidden for {part.name} (a blocked User-Agent? set {CONTACT_ENV})"
                    )
                if code not in (200, 206):
                    raise PrepError(f"{url}: HTTP {code} {resp.reason} for {part.name}")
                if _is_html(resp):
                    raise _Mismatch(f"{url} served an HTML page (Content-Type {resp.headers.get('Content-Type')}) instead of {part.name}")
                start = 0
                if code == 206:
                    m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
                    if not m or int(m.group(1)) != have:
                        raise _Mismatch(f"{url} answered bytes={have}- with Content-Range {resp.headers.get('Content-Range')!r}")
                    start = have
                length = resp.headers.get("Content-Length")
                if part.size is not None and length is not None and length.isdigit() and start + int(length) != part.size:
                    raise _Mismatch(
                        f"{url} serves {start + int(length)} bytes of {part.name}, dumpstatus.json says {part.size}"
                    )
                if code == 200:  # whole body: a changed file, or a server that ignores ranges
                    if have:
                        log.info("%s: the server sent the whole file (changed or no ranges); restarting", part.name)
                    hashers, have = _hashers(part), 0
                    mode = "wb"
                else:
                    mode = "ab"
                with open(partfile, mode) as f:
                    if code == 200:
                        write_json(sidecar, {"url": url, "validator": _validator(resp)})
                        validator = _validator(resp)
                        bar.update(0)
                    head = b""
                    for block in resp.iter_content(chunk):
                        if not block:
                            continue
                        if start == 0 and len(head) < len(BZ2_MAGIC):
                            head = (head + block)[: len(BZ2_MAGIC)]
                            if part.name.endswith(".bz2") and len(head) == len(BZ2_MAGIC) and head != BZ2_MAGIC:
                                raise _Mismatch(f"{url} does not start with the bz2 magic 'BZh' (starts {head!r})")
                        if part.size is not None and have + len(block) > part.size:
                            raise _Mismatch(f"{url} sent more than the {part.size} bytes of {part.name}")
                        f.write(block)
                        for h in hashers.values():
                            h.update(block)
                        have += len(block)
                        progressed = True
                        bar.update(have)
            if part.size is not None and have != part.size:
                raise _Transient(f"connection closed at byte {have} of {part.size}")
            return {h: x.hexdigest() for h, x in hashers.items()}
        except _Transient as e:
            last = str(e)
        except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema) as e:
            raise PrepError(f"bad URL {url}: {e}") from None
        except (requests.RequestException, ConnectionError, TimeoutError) as e:
            # Network only: other OSErrors (a full disk) propagate as they are.
            last = f"{type(e).__name__}: {e}"
        if progressed:
            failures = 0
            backoff.reset()
        failures += 1
        if failures > retries:
            raise PrepError(f"giving up on {part.name} from {url} after {retries} retries: {last}")
        log.info("%s: %s; retry %d of %d from byte %d", part.name, last, failures, retries, have)
        backoff.sleep(retry_after)


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
    timeout: float = 60,
    verify_attempts: int = 3,
    backoff_base: float = 1.0,
    max_wait: float = 60.0,
    chunk_size: int = 1 << 16,  # a dropped connection loses at most one chunk
    progress_bar: bool | None = None,
) -> dict:
    """Download `part` into dest_dir, verified and committed with a receipt; return the receipt.

    The transfer goes to `<name>.part` (resumed with Range/If-Range across calls and
    retries). Once size and sha1 (or md5) match, it is fsynced and renamed to `<name>`, then
    `<name>.receipt.json` is written. Wrong content (an HTML page, no bz2 magic, wrong size or
    hash) discards the `.part` and fetches again, at most `verify_attempts` times in all.
    Transport failures (429/5xx honouring Retry-After, dropped connections, timeouts) are
    retried with back-off `backoff_base * 2**n` capped at `max_wait`, at most `retries` in a
    row without progress (a retry that brought bytes resets the count). 404 and other 4xx
    fail at once with a PrepError naming the file.
    `progress(bytes_done, bytes_total)` is called as bytes arrive; `progress_bar` (default:
    when stderr is a terminal) shows a tqdm bar.
    """
    if not _SAFE_NAME.match(part.name):
        raise PrepError(f"refusing to download {part.name!r}: not a plain file name")
    if not (part.sha1 or part.md5):
        raise PrepError(f"no sha1 or md5 for {part.name}: cannot verify the download")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    url = dump_file_url(dump_url, wiki, date, part.name)
    final = dest_dir / part.name
    partfile = dest_dir / (part.name + PART_SUFFIX)
    sidecar = dest_dir / (part.name + SIDECAR_SUFFIX)
    info = {h: getattr(part, h) for h in HASH_TYPES if getattr(part, h)}

    done = _committed(final, part, url, info, chunk_size)
    if done is not None:
        if progress is not None:
            progress(done["size"], done["size"])
        return done

    backoff = _Backoff(backoff_base, max_wait)
    bar = _ProgressBar(part.name, part.size, progress, progress_bar)
    try:
        with make_session(user_agent) as session:
            for attempt in range(1, verify_attempts + 1):
                try:
                    digests = _transfer(
                        session, url, part, partfile, sidecar,
                        retries=retries, timeout=timeout, backoff=backoff, chunk=chunk_size, bar=bar,
                    )
                    wrong = _check_hashes(part, digests)
                    if wrong:
                        raise _Mismatch(f"{part.name} from {url} has {wrong}")
                except _Mismatch as e:
                    _discard(partfile, sidecar)
                    if attempt == verify_attempts:
                        raise PrepError(f"{e} (tried {verify_attempts} times; the file was discarded)") from None
                    log.warning("%s; fetching it again (%d of %d)", e, attempt + 1, verify_attempts)
                    backoff.sleep()
                    continue
                break
    finally:
        bar.close()

    with open(partfile, "rb+") as f:
        os.fsync(f.fileno())
    os.rename(partfile, final)
    fsync_dir(dest_dir)
    _discard(sidecar)
    return write_receipt(final, url=url, **info)

