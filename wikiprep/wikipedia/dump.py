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
   is not fetched again. The ``.part`` file is resumed across runs, so two runs fetching the
   same file at once (two ``--local-scheduler`` runs, two Slurm jobs) take turns: the second
   waits on a lock (``<name>.part.lock``, ``flock``) and finds the file committed.

What a server sends is not trusted:

- ``--wiki`` and ``--dump-date`` become folder names, so ``check_dump_id`` admits only a wiki
  database name (letters, digits, ``_``) and a ``YYYYMMDD`` date, before anything is fetched
  or written.
- Redirects are followed here (``_get``), not by ``requests``: at most ``MAX_REDIRECTS``, each
  to an ``http://`` or ``https://`` URL; one to any other scheme is refused, naming it. The
  ``file://`` adapter is mounted only on the session of a ``file://`` dump URL, so no server
  can make a local file part of a download.
- ``dumpstatus.json`` and the checksum files are read with a cap, ``SMALL_FILE_CAP`` (8 MiB, far
  above any real one: they hold one entry or line of a few hundred bytes per file of the dump),
  never more than the cap and one byte, ``file://`` included.
- ``parse_status`` and ``parse_sums`` are the one place their content is checked: every value
  this module reads must have its JSON type and form, or one PrepError names the file and the
  value.
- An error line quotes what a server sent only as a short escaped excerpt
  (``shardkit.errors.excerpt``).

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
import datetime as dt
import email.utils
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import requests
import requests.adapters
import requests.structures
import urllib3

from wikiprep import __version__
from shardkit.atomic import commit, read_receipt, receipt_path, write_bytes, write_json, write_receipt
from shardkit.errors import PrepError, excerpt
from shardkit.progress import Bar, Progress, Stage

log = logging.getLogger(__name__)

PROJECT_URL = "https://github.com/wikiprep/wikiprep"
CONTACT_ENV = "WIKIPREP_CONTACT"
STATUS_FILE = "dumpstatus.json"
HASH_TYPES = ("sha1", "md5")  # preference order; dumps publish both
BZ2_MAGIC = b"BZh"
PART_SUFFIX = ".part"
SIDECAR_SUFFIX = ".part.json"  # the validator (ETag / Last-Modified) that If-Range sends back
LOCK_SUFFIX = ".part.lock"  # held while one process fetches the file (see `_fetch_lock`)

# Articles jobs (operations-dumps xmldumps-backup/dumps/dumpitemlist.py): the split job first,
# its recombined single file when the split job lists no files.
ARTICLES_JOBS = ("articlesdump", "articlesdumprecombine")
MULTISTREAM_JOBS = ("articlesmultistreamdump", "articlesmultistreamdumprecombine")

# dumpstatus.json and the checksum files hold one entry or line per file of the dump, a few hundred
# bytes each: this cap is far above any real one, and a body past it is refused, unread.
SMALL_FILE_CAP = 8 << 20
MAX_REDIRECTS = 10  # mirrors redirect once or twice; requests' own default is 30
REDIRECT_SCHEMES = ("http", "https")

# Wiki database names (enwiki, zh_yuewiki, be_x_oldwiki): they become folder names.
_WIKI_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
# A part's name becomes a file name, with suffixes (.part.json, .tmp-<host>-<pid>): kept well
# under the 255 bytes a file name may have.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_SUMS_LINE = re.compile(r"^([0-9a-fA-F]{32}|[0-9a-fA-F]{40})\s+\*?(\S+)$")
HEX_DIGITS = {"sha1": 40, "md5": 32}
_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")

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


def make_session(user_agent: str | None = None, *, local_files: bool = False) -> requests.Session:
    """A requests session with the project's User-Agent; file:// support only with `local_files`.

    `local_files` is for a file:// dump URL alone: on the session of an http(s) one, no answer of
    a server can lead to a local file.
    """
    s = requests.Session()
    s.headers["User-Agent"] = user_agent or default_user_agent()
    # Ranges and hashes are over the stored bytes: never let a transfer encoding change them.
    s.headers["Accept-Encoding"] = "identity"
    if local_files:
        s.mount("file://", FileAdapter())
    return s


def _said(text: str | None, limit: int = 80) -> str:
    """A server's short text (a reason phrase, a header) for an error line: as it is when short and
    printable, else its escaped excerpt. Also a transport exception's message (limit 300), which is
    mostly our own words (host, port, the cause) but may carry a few bytes the server sent."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit and text.isprintable() else excerpt(text, limit)


def _get(session: requests.Session, url: str, *, timeout: float, headers: dict | None = None) -> requests.Response:
    """GET `url` streamed, following at most MAX_REDIRECTS redirects, each to an http(s) URL.

    requests would follow a Location to any scheme the session has an adapter for, and read each
    redirect's body whole; here a redirect elsewhere than http:// or https:// is a PrepError
    naming `url` and the scheme, and a redirect's body is never read. The caller closes the answer.
    """
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        resp = session.get(current, headers=headers, stream=True, timeout=timeout, allow_redirects=False)
        if not resp.is_redirect:
            return resp
        location = resp.headers["Location"]
        resp.close()
        target = urllib.parse.urljoin(current, location)
        scheme = urllib.parse.urlsplit(target).scheme.lower()
        if scheme not in REDIRECT_SCHEMES:
            raise PrepError(f"{url}: the server redirects to a {_said(scheme or 'relative', 20)}: URL "
                            f"({excerpt(location)}); only redirects to http:// and https:// are followed")
        current = requests.utils.requote_uri(target)
    raise PrepError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _read_small(resp: requests.Response, url: str, cap: int = SMALL_FILE_CAP) -> bytes:
    """The body of `resp`, when it has at most `cap` bytes; never reads more than cap + 1 bytes.

    Read from the raw stream, each read asking for no more than what is left to the cap's next
    byte (requests' iter_content reads in fixed blocks, and dropping its iterator to change the
    block size closes a chunked transfer). A broken transfer is a requests.ConnectionError, retried
    like any other.
    """
    length = resp.headers.get("Content-Length", "")
    too_big = length.isdigit() and int(length) > cap
    # urllib3 answers (http, https) undo a content encoding when asked; the file:// adapter's is a file.
    decode = {"decode_content": True} if isinstance(resp.raw, urllib3.response.BaseHTTPResponse) else {}
    body = bytearray()
    try:
        while not too_big and len(body) <= cap:
            block = resp.raw.read(min(1 << 16, cap + 1 - len(body)), **decode)
            if not block:
                break
            body += block
    except urllib3.exceptions.HTTPError as e:
        raise requests.ConnectionError(e) from None
    if too_big or len(body) > cap:
        raise PrepError(f"{url} is larger than {cap >> 20} MiB: not a dumps site's status or checksum file")
    return bytes(body)


def _read_local_small(path: Path, cap: int = SMALL_FILE_CAP) -> bytes:
    """A local copy of a small file, read the same way: never more than cap + 1 bytes."""
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise PrepError(f"{path} is larger than {cap >> 20} MiB: not a dumps site's status or checksum file")
    return data


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
    """GET a small file with retries; returns (status, body) for 200 (a body of at most
    SMALL_FILE_CAP bytes) and (status, b"") for final 4xx answers, whose bodies are not read."""
    last = ""
    for attempt in range(retries + 1):
        retry_after = None
        try:
            with _get(session, url, timeout=timeout) as resp:
                if not _is_retryable(resp.status_code):
                    return resp.status_code, _read_small(resp, url) if resp.status_code == 200 else b""
                last = f"HTTP {resp.status_code} {_said(resp.reason)}"
                retry_after = _retry_after(resp)
        except requests.RequestException as e:
            last = f"{type(e).__name__}: {_said(e, 300)}"
        if attempt < retries:
            log.info("%s: %s; retrying", url, last)
            backoff.sleep(retry_after)
    raise PrepError(f"giving up on {url} after {retries} retries: {last}")


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


def _get_status(session, url: str, wiki: str, date: str, *, retries, timeout, backoff) -> bytes:
    """The body of dumpstatus.json at `url`, checked (`parse_status`); PrepError for a missing dump or a bad answer."""
    status, body = _get_small(session, url, retries=retries, timeout=timeout, backoff=backoff)
    if status == 404:
        raise PrepError(f"no dump for {wiki} {date} at {url}: 404")
    if status != 200:
        raise PrepError(f"cannot fetch the status of {wiki} {date} from {url}: HTTP {status}")
    parse_status(body, url, wiki, date)
    return body


def read_dump_status(dump_url: str, wiki: str, date: str, *, user_agent: str | None = None, retries: int = 5,
                     timeout: float = 60, backoff_base: float = 1.0, max_wait: float = 60.0) -> dict:
    """dumpstatus.json of a dump, fetched and checked but written nowhere, and nothing else fetched (no checksum
    files): what a plan (`python -m workflows plan`) reads to know the parts, leaving the data folder as it was."""
    check_dump_id(wiki, date)
    url = dump_file_url(dump_url, wiki, date, STATUS_FILE)
    with make_session(user_agent, local_files=is_local(dump_url)) as s:
        body = _get_status(s, url, wiki, date, retries=retries, timeout=timeout,
                           backoff=_Backoff(backoff_base, max_wait))
    return json.loads(body.decode("utf-8"))


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

    Each file is checked (`parse_status`, `parse_sums`) before anything is written, then
    committed atomically with a receipt naming its URL. Checksum files the server does not have
    are removed locally, so the folder always mirrors one fetch: these copies are replaced
    (`overwrite`), unlike every other output, since a dump's status changes until it is done.
    """
    check_dump_id(wiki, date)
    dest_dir = Path(dest_dir)
    backoff = _Backoff(backoff_base, max_wait)
    url = dump_file_url(dump_url, wiki, date, STATUS_FILE)
    with make_session(user_agent, local_files=is_local(dump_url)) as s:
        body = _get_status(s, url, wiki, date, retries=retries, timeout=timeout, backoff=backoff)
        sums = {}
        for htype, name in _sums_names(wiki, date).items():
            surl = dump_file_url(dump_url, wiki, date, name)
            sstatus, sbody = _get_small(s, surl, retries=retries, timeout=timeout, backoff=backoff)
            if sstatus == 404:
                continue
            if sstatus != 200:
                raise PrepError(f"cannot fetch {surl}: HTTP {sstatus}")
            parse_sums(sbody, surl, htype)
            sums[name] = (surl, sbody)
    dest_dir.mkdir(parents=True, exist_ok=True)
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
        hashes = {h: entry[h] or sums.get(h, {}).get(name) for h in HASH_TYPES}
        if need_hashes and not any(hashes.values()):
            raise PrepError(
                f"no sha1 or md5 for {name}: not in {where} nor in {wiki}-{date}-sha1sums.txt / -md5sums.txt"
            )
        parts.append(Part(name=name, url=f"{wiki}/{date}/{name}", size=entry["size"], sha1=hashes["sha1"],
                          md5=hashes["md5"]))
    return parts


def dump_parts(dump_url: str, wiki: str, date: str, download_dir: Path, *, multistream: bool = False) -> list[Part]:
    """The part files of a dated dump, from the local copy of its status in `download_dir`.

    The status is fetched when there is no copy yet, so a run reads one pinned copy. When the
    copy gives no parts (it may date from before the dump finished), the status is fetched once
    more and that answer decides. PrepError for a wiki that is not a database name or a date
    that is not YYYYMMDD (never "latest"), before anything is fetched (`check_dump_id`).
    """
    check_dump_id(wiki, date)
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
    """The shared bar (`shardkit.progress.Bar`: tqdm on a terminal, nothing otherwise), plus the caller's callback."""

    def __init__(self, name: str, total: int | None, callback: Progress | None, bar: bool | None):
        self.callback, self.total = callback, total
        self.bar = Bar(name, "B", enabled=bar)
        self.bar(0, total)

    def update(self, done: int) -> None:
        self.bar(done, self.total)  # a transfer restarted from the beginning resets it
        if self.callback is not None:
            self.callback(done, self.total if self.total is not None else done)

    def close(self) -> None:
        self.bar.close()


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
            with _get(session, url, headers=headers, timeout=timeout) as resp:
                code = resp.status_code
                if code == 404:
                    raise PrepError(f"missing part {part.name}: {url}: 404")
                if code == 416:  # our .part is longer than the server's file: start again
                    partfile.write_bytes(b"")
                    hashers, have0, have = _hashers(part), have, 0
                    raise _Transient(f"HTTP 416 for bytes={have0}-")
                if _is_retryable(code):
                    retry_after = _retry_after(resp)
                    raise _Transient(f"HTTP {code} {_said(resp.reason)}")
                if code == 403:
                    raise PrepError(
                        f"{url}: 403 Forbidden for {part.name} (a blocked User-Agent? set {CONTACT_ENV})"
                    )
                if code not in (200, 206):
                    raise PrepError(f"{url}: HTTP {code} {_said(resp.reason)} for {part.name}")
                if _is_html(resp):
                    raise _Mismatch(f"{url} served an HTML page (Content-Type {_said(resp.headers.get('Content-Type'))}) "
                                    f"instead of {part.name}")
                start = 0
                if code == 206:
                    m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
                    if not m or int(m.group(1)) != have:
                        raise _Mismatch(f"{url} answered bytes={have}- with Content-Range "
                                        f"{excerpt(resp.headers.get('Content-Range', ''))}")
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
                        write_json(sidecar, {"url": url, "validator": _validator(resp)}, overwrite=True)
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
            raise PrepError(f"bad URL {url}: {_said(e, 300)}") from None
        except (requests.RequestException, ConnectionError, TimeoutError) as e:
            # Network only: other OSErrors (a full disk) propagate as they are.
            last = f"{type(e).__name__}: {_said(e, 300)}"
        if progressed:
            failures = 0
            backoff.reset()
        failures += 1
        if failures > retries:
            raise PrepError(f"giving up on {part.name} from {url} after {retries} retries: {last}")
        log.info("%s: %s; retry %d of %d from byte %d", part.name, last, failures, retries, have)
        backoff.sleep(retry_after)


@contextlib.contextmanager
def _fetch_lock(lock_path: Path):
    """Hold an exclusive `flock` on `lock_path` while one file is fetched.

    The `.part` file is shared on purpose (a later run resumes it), so two processes fetching the
    same file at once (a duplicate run, two Slurm jobs) must not both write into it: the second
    waits here, then finds the file committed. The kernel releases a flock when its holder dies
    (on NFS, when the client's lease ends), so a killed fetcher blocks nobody. The holder removes the
    lock file when done; a waiter that wakes up holding the removed file locks the new one instead.
    On a file system without locks (ENOLCK, EOPNOTSUPP: some Lustre mounts) the fetch goes on
    unlocked; the no-clobber commit of the verified file still keeps either copy whole.
    """
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("%s: another process is fetching it; waiting for it", lock_path.name[:-len(LOCK_SUFFIX)])
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            fd = None
            break
        except BaseException:  # SIGTERM while waiting
            os.close(fd)
            raise
        try:
            held = os.fstat(fd)
            now = os.stat(lock_path)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(FileNotFoundError):
                lock_path.unlink()
            os.close(fd)


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
    fail at once with a PrepError naming the file. Redirects are followed as `_get` allows.
    `progress(bytes_done, bytes_total)` is called as bytes arrive; `progress_bar` (default:
    when stderr is a terminal) shows a tqdm bar.
    """
    check_dump_id(wiki, date)
    if not _SAFE_NAME.match(part.name):
        raise PrepError(f"refusing to download {excerpt(part.name)}: not a plain file name")
    if not (part.sha1 or part.md5):
        raise PrepError(f"no sha1 or md5 for {part.name}: cannot verify the download")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    url = dump_file_url(dump_url, wiki, date, part.name)
    final = dest_dir / part.name
    partfile = dest_dir / (part.name + PART_SUFFIX)
    sidecar = dest_dir / (part.name + SIDECAR_SUFFIX)
    info = {h: getattr(part, h) for h in HASH_TYPES if getattr(part, h)}

    stage = Stage(log, f"download {part.name}")
    with _fetch_lock(dest_dir / (part.name + LOCK_SUFFIX)):
        done = _committed(final, part, url, info, chunk_size)
        if done is not None:
            if progress is not None:
                progress(done["size"], done["size"])
            return done

        backoff = _Backoff(backoff_base, max_wait)
        bar = _ProgressBar(part.name, part.size, progress, progress_bar)
        try:
            with make_session(user_agent, local_files=is_local(dump_url)) as session:
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
        commit(partfile, final)  # never replaces: unlocked (`_fetch_lock`), a racer's verified copy may be there
        _discard(sidecar)
        receipt = write_receipt(final, url=url, **info)
        stage.finish(1, "file", receipt["size"])
        return receipt

