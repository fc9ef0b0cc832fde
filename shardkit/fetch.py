"""Download one file over http(s) or file://, resumed, retried, verified and committed with a receipt.

For any source that downloads: it names the URL, where the file goes and what the file must be
(`Expected`: its size when known, one or more hashes, the magic bytes of its format); what the
server sends is checked against that and nothing else. ``http://``, ``https://`` and ``file://``
URLs take exactly the same code path: ``file://`` goes through a small transport adapter for
``requests`` (`FileAdapter`), mounted by `make_session` only when asked, so a local copy of a site
exercises what a real download does.

`fetch_file` brings one file to ``<name>.part``, resuming a broken transfer with
``Range``/``If-Range`` (the validator, ETag or Last-Modified, kept beside it in
``<name>.part.json``), retrying 429/5xx/connection errors/timeouts with back-off (`Backoff`,
honouring ``Retry-After``), never accepting an HTML error page, and verifying size and hashes
before it renames the file into place and commits its receipt (`shardkit.atomic`). A file with a
valid receipt is not fetched again; one renamed into place by a run killed before its receipt is
kept only if it verifies. The ``.part`` file is resumed across runs, so two processes fetching the
same file at once (two runs of one pipeline, two Slurm jobs) take turns: the second waits on a lock
(``<name>.part.lock``, ``flock``) and finds the file committed.

`read_small` fetches a small file (a status or checksum listing) whole, with the same retries,
never reading more than its cap and one byte; `read_small_file` reads a local copy the same way.

What a server sends is not trusted:

- Redirects are followed here (`_get`), not by ``requests``: at most ``MAX_REDIRECTS``, each to an
  ``http://`` or ``https://`` URL; one to any other scheme is refused, naming it. The ``file://``
  adapter is mounted only on a session made for a ``file://`` URL, so no server can make a local
  file part of a download.
- Small files are read with a cap, never more than the cap and one byte, ``file://`` included.
- An error line quotes what a server sent only as a short escaped excerpt
  (``shardkit.errors.excerpt``).

Memory stays bounded: bodies are streamed to disk in chunks and hashed on the way (sha256 too, for
the receipt, so the committed file is not read again); when a transfer resumes, the bytes already
on disk are hashed first.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import socket
import stat
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import requests
import requests.adapters
import requests.structures
import urllib3

from .atomic import commit, make_parent_folder, read_receipt, receipt_path, write_error, write_json, write_receipt
from .errors import PrepError, excerpt
from .progress import Bar, Progress, Stage

log = logging.getLogger(__name__)

PART_SUFFIX = ".part"
SIDECAR_SUFFIX = ".part.json"  # the validator (ETag / Last-Modified) that If-Range sends back
LOCK_SUFFIX = ".part.lock"  # held while one process fetches the file (see `_fetch_lock`)
RECEIPT_HASH = "sha256"  # the receipt's own hash (shardkit.atomic), computed while the file arrives

MAX_REDIRECTS = 10  # mirrors redirect once or twice; requests' own default is 30
REDIRECT_SCHEMES = ("http", "https")

# How long a transfer may take. Every request has a connect timeout and a read timeout (no byte for that long
# ends the attempt); an attempt whose body arrives slower than MIN_RATE bytes/s over RATE_WINDOW seconds is
# ended too (a server trickling a byte a second never trips a read timeout); and a download gives up when the
# furthest byte it holds has not advanced for STALL_BUDGET seconds, whatever its retry count: under these
# defaults a server that accepts and never answers fails in about two minutes. Retries count only attempts
# that brought no byte past the furthest one held, so a server that ignores Range and drops the connection at
# the same place every time is given up on after `retries` attempts.
CONNECT_TIMEOUT = 20.0
READ_TIMEOUT = 30.0
MIN_RATE = 1024  # bytes per second
RATE_WINDOW = 60.0
STALL_BUDGET = 120.0

# The most bytes a file whose size nobody states may have (Expected.max_size's default): a body past it is
# refused, so an endless body cannot fill the disk. The largest file Wikimedia publishes (enwiki's
# multistream dump, all in one file) is about 24 GB in 2024; 64 GiB leaves room for years of growth.
MAX_SIZE = 64 << 30

_CONTENT_RANGE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+|\*)$")


# ---------------------------------------------------------------------------------------------
# What a file must be


@dataclass(frozen=True)
class Magic:
    """The first bytes of every file of a format, and the format's name as an error line gives it."""

    format: str
    prefix: bytes


BZ2 = Magic("bz2", b"BZh")


@dataclass(frozen=True)
class Expected:
    """What a downloaded file must be: its size in bytes (None: unknown), hashes as {hashlib name: hex}
    (at least one; lowercase hex, as hexdigest() gives), the magic it starts with (None: not checked), and the
    most bytes it may have when its size is unknown (`max_size`, default MAX_SIZE).
    `source` names where size and hashes come from in error lines ('… bytes of x, <source> says …')."""

    size: int | None
    hashes: dict[str, str]
    magic: Magic | None = None
    source: str = "its listing"
    max_size: int = MAX_SIZE  # the cap on a body when `size` is None (see MAX_SIZE)

    def __post_init__(self):
        for algo, hexdigest in self.hashes.items():
            digits = hashlib.new(algo).digest_size * 2  # ValueError for a name hashlib does not know
            if not (isinstance(hexdigest, str) and len(hexdigest) == digits and re.fullmatch(r"[0-9a-f]*", hexdigest)):
                raise ValueError(f"{algo} must be {digits} lowercase hex digits, not {excerpt(hexdigest)}")


class ServerRefused(PrepError):
    """The server's final answer for a file (404, another 4xx, any status that is neither a success
    nor worth retrying): not retried. Carries `url`, `name` and `status`, so that a caller can word it."""

    def __init__(self, url: str, name: str, status: int, reason: str | None):
        self.url, self.name, self.status = url, name, status
        if status == 404:
            super().__init__(f"missing {name}: {url}: 404")
        else:
            super().__init__(f"{url}: HTTP {status} {_said(reason)} for {name}")


# ---------------------------------------------------------------------------------------------
# Sessions, the file:// adapter, GET


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


# The status line and headers of an answer must arrive within the attempt's read timeout (at most what is left of
# the stall budget). requests' timeouts are per read, so a server sending its headers a byte a second would never
# trip one: a watchdog (`_AnswerWatch`) shuts the connection's socket down when the time is up, which ends the
# blocked read at once. The connection classes below arm it for the answer being read, on this thread.
_watching = threading.local()


class _AnswerWatch:
    """Shuts down the socket of the answer being read when `seconds` pass before its headers are all there."""

    def __init__(self, seconds: float):
        self.seconds, self.fired, self._lock, self._timer = seconds, False, threading.Lock(), None

    def arm(self, sock) -> None:
        def fire():
            with self._lock:
                if self._timer is None:  # the headers came in time
                    return
                self.fired = True
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

        self._timer = threading.Timer(self.seconds, fire)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()


class _WatchedAnswers:
    """A urllib3 connection whose `getresponse` (the status line and headers) runs under this thread's watch."""

    def getresponse(self, *args, **kwargs):
        watch = getattr(_watching, "watch", None)
        if watch is None or self.sock is None:
            return super().getresponse(*args, **kwargs)
        watch.arm(self.sock)
        try:
            return super().getresponse(*args, **kwargs)
        finally:
            watch.disarm()


class _WatchedHTTPConnection(_WatchedAnswers, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedAnswers, urllib3.connection.HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(requests.adapters.HTTPAdapter):
    """requests' HTTP adapter, its connections (direct, or through an HTTP proxy) watched (`_AnswerWatch`)."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if type(manager) is urllib3.ProxyManager:  # a SOCKS proxy's manager keeps its own pools
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


def make_session(user_agent: str, *, local_files: bool = False) -> requests.Session:
    """A requests session sending `user_agent`; file:// support only with `local_files`.

    The User-Agent is the caller's: servers (Wikimedia's among them) block generic ones such as
    `python-requests`, and only the caller knows its name and contact. `local_files` is for a file://
    source alone: on the session of an http(s) one, no answer of a server can lead to a local file.
    """
    s = requests.Session()
    s.headers["User-Agent"] = user_agent
    # Ranges and hashes are over the stored bytes: never let a transfer encoding change them.
    s.headers["Accept-Encoding"] = "identity"
    for scheme in REDIRECT_SCHEMES:
        s.mount(f"{scheme}://", _WatchedAdapter())
    if local_files:
        s.mount("file://", FileAdapter())
    return s


def _said(text: str | None, limit: int = 80) -> str:
    """A server's short text (a reason phrase, a header) for an error line: as it is when short and
    printable, else its escaped excerpt. Also a transport exception's message (limit 300), which is
    mostly our own words (host, port, the cause) but may carry a few bytes the server sent."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit and text.isprintable() else excerpt(text, limit)


def _get(session: requests.Session, url: str, *, timeout: float | tuple[float, float], headers: dict | None = None
         ) -> requests.Response:
    """GET `url` streamed, following at most MAX_REDIRECTS redirects, each to an http(s) URL.

    `timeout` is requests' (connect, read), or one value for both. The read timeout also bounds the whole status
    line and headers of each answer (`_AnswerWatch`), which requests bounds only per read: a server trickling
    them is a requests.Timeout.

    requests would follow a Location to any scheme the session has an adapter for, and read each
    redirect's body whole; here a redirect elsewhere than http:// or https:// is a PrepError
    naming `url` and the scheme, and a redirect's body is never read. The caller closes the answer.
    """
    current = url
    answer_within = timeout[1] if isinstance(timeout, tuple) else timeout
    for _ in range(MAX_REDIRECTS + 1):
        _watching.watch = watch = _AnswerWatch(answer_within)
        try:
            resp = session.get(current, headers=headers, stream=True, timeout=timeout, allow_redirects=False)
        except requests.RequestException:
            if watch.fired:
                raise requests.Timeout(f"no status line and headers within {answer_within:.3g} s from {current}") from None
            raise
        finally:
            _watching.watch = None
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


# ---------------------------------------------------------------------------------------------
# Retries


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


class Backoff:
    """Exponential back-off (base * 2**n), or the server's Retry-After, never above `max_wait`."""

    def __init__(self, base: float = 1.0, max_wait: float = 60.0):
        self.base, self.max_wait, self.n = base, max_wait, 0

    def sleep(self, retry_after: float | None = None, limit: float | None = None) -> None:
        """Sleep the next wait, never more than `limit` seconds (what is left of a budget) when given."""
        wait = retry_after if retry_after is not None else self.base * (2**self.n)
        self.n += 1
        wait = min(wait, self.max_wait) if limit is None else min(wait, self.max_wait, limit)
        time.sleep(max(0.0, wait))

    def reset(self) -> None:
        self.n = 0


def _is_retryable(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def _is_html(resp: requests.Response) -> bool:
    return resp.headers.get("Content-Type", "").split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


class _Budget:
    """Seconds left of a budget, on the monotonic clock; `reset` starts it again (progress was made)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.reset()

    def reset(self) -> None:
        self.since = time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.since)

    def timeouts(self, connect: float, read: float) -> tuple[float, float]:
        """requests' (connect, read) timeouts, neither past what is left of the budget."""
        left = max(self.left(), 0.01)
        return min(connect, left), min(read, left)


def _reader(resp: requests.Response):
    """`read(n)` of the raw body returning as soon as any byte is there (read1: a trickle never has to fill a
    block before a check), undoing a content encoding as requests would; urllib3's errors become requests'."""
    raw = resp.raw
    decode = {"decode_content": True} if isinstance(raw, urllib3.response.BaseHTTPResponse) else {}
    read = raw.read1 if hasattr(raw, "read1") else raw.read

    def read_some(n: int) -> bytes:
        try:
            return read(n, **decode)
        except urllib3.exceptions.HTTPError as e:  # a read timeout, a connection cut short
            raise requests.ConnectionError(e) from None

    return read_some


# ---------------------------------------------------------------------------------------------
# Links: never written through


def _refuse_link(path: Path) -> PrepError:
    return PrepError(f"{path} is a symbolic link: refusing to write through it (remove it to download again)")


def _open_regular(path: Path, flags: int) -> int:
    """os.open(path, flags) never through a symbolic link (O_NOFOLLOW, O_CREAT included), checked on the
    descriptor to be a regular file: a link is a PrepError naming `path`, as is a FIFO, a device or a folder."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK):
            raise _refuse_link(path) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise PrepError(f"{path} is not a regular file: refusing to use it")
    return fd


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# ---------------------------------------------------------------------------------------------
# Small files, read whole


def _too_large(source: str, cap: int, kind: str | None) -> PrepError:
    limit = f"{cap >> 20} MiB" if cap and cap % (1 << 20) == 0 else f"{cap:,} bytes"
    return PrepError(f"{source} is larger than {limit}" + (f": not {kind}" if kind else ""))


def _read_capped(resp: requests.Response, url: str, cap: int, kind: str | None, budget: _Budget | None = None) -> bytes:
    """The body of `resp`, when it has at most `cap` bytes; never reads more than cap + 1 bytes.

    Read from the raw stream, each read asking for no more than what is left to the cap's next
    byte (requests' iter_content reads in fixed blocks, and dropping its iterator to change the
    block size closes a chunked transfer). A broken transfer is a requests.ConnectionError, retried
    like any other. With a `budget`, a body still arriving when it runs out is a requests.Timeout.
    """
    length = resp.headers.get("Content-Length", "")
    too_big = length.isdigit() and int(length) > cap
    read = _reader(resp)
    body = bytearray()
    while not too_big and len(body) <= cap:
        block = read(min(1 << 16, cap + 1 - len(body)))
        if not block:
            break
        body += block
        if budget is not None and budget.left() <= 0:
            raise requests.Timeout(f"the body was still arriving after {budget.seconds:g} s ({len(body)} bytes)")
    if too_big or len(body) > cap:
        raise _too_large(url, cap, kind)
    return bytes(body)


def read_small_file(path: Path, *, cap: int, kind: str | None = None) -> bytes:
    """A local copy of a small file, read as `read_small` reads one: never more than cap + 1 bytes.
    PrepError '<path> is larger than <cap>: not <kind>' past the cap; OSErrors as they are."""
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise _too_large(str(path), cap, kind)
    return data


def read_small(session: requests.Session, url: str, *, cap: int, kind: str | None = None, retries: int = 5,
               timeout: float = READ_TIMEOUT, backoff: Backoff | None = None, connect_timeout: float = CONNECT_TIMEOUT,
               stall_budget: float = STALL_BUDGET) -> tuple[int, bytes]:
    """GET a small file with retries; returns (status, body) for 200 (a body of at most `cap` bytes)
    and (status, b"") for a final answer of any other status, whose body is not read.

    429/5xx and transport errors are retried with back-off, `retries` times; then a PrepError naming
    `url` and the last failure. A body over the cap is a PrepError naming `url` and `kind` (what the
    file should have been, as 'not <kind>'), refused on its Content-Length when the server sends one.
    Each request has `connect_timeout` and `timeout` (read); all of it, retries and waits included, ends
    within `stall_budget` seconds: then a PrepError naming `url` and the last failure.
    """
    backoff = Backoff() if backoff is None else backoff
    budget = _Budget(stall_budget)
    last = ""
    for attempt in range(retries + 1):
        if budget.left() <= 0:
            raise PrepError(f"giving up on {url}: no answer in {stall_budget:g} s: {last}")
        retry_after = None
        try:
            with _get(session, url, timeout=budget.timeouts(connect_timeout, timeout)) as resp:
                if not _is_retryable(resp.status_code):
                    return resp.status_code, _read_capped(resp, url, cap, kind, budget) if resp.status_code == 200 else b""
                last = f"HTTP {resp.status_code} {_said(resp.reason)}"
                retry_after = _retry_after(resp)
        except requests.RequestException as e:
            last = f"{type(e).__name__}: {_said(e, 300)}"
        if attempt < retries:
            log.info("%s: %s; retrying", url, last)
            backoff.sleep(retry_after, limit=max(0.0, budget.left()))
            if budget.left() <= 0:
                raise PrepError(f"giving up on {url}: no answer in {stall_budget:g} s: {last}")
    raise PrepError(f"giving up on {url} after {retries} retries: {last}")


# ---------------------------------------------------------------------------------------------
# One file, resumed and verified


class _Mismatch(Exception):
    """The content of one transfer is wrong (HTML page, bad magic, size or hash): discard and refetch."""


class _Transient(Exception):
    """A failure worth retrying with back-off (429/5xx, a dropped or timed-out transfer)."""


class _Slow(_Transient):
    """An attempt whose body arrived slower than its minimum rate: never counted as progress."""


class _TooLarge(PrepError):
    """A body past the cap of a file of unknown size: refused at once, the `.part` discarded."""


def _size_text(n: int) -> str:
    return f"{n >> 30} GiB" if n and n % (1 << 30) == 0 else f"{n >> 20} MiB" if n and n % (1 << 20) == 0 else f"{n:,} bytes"


def _hashers(expected: Expected) -> dict[str, "hashlib._Hash"]:
    """The expected hashes, then the receipt's sha256 when it is not one of them."""
    return {algo: hashlib.new(algo) for algo in {**expected.hashes, RECEIPT_HASH: None}}


def _digests(hashers: dict) -> dict[str, str]:
    return {algo: h.hexdigest() for algo, h in hashers.items()}


def _hash_stream(f, hashers: dict, chunk: int) -> int:
    n = 0
    while block := f.read(chunk):
        for h in hashers.values():
            h.update(block)
        n += len(block)
    return n


def _hash_file(path: Path, hashers: dict, chunk: int) -> int:
    with os.fdopen(_open_regular(path, os.O_RDONLY), "rb") as f:
        return _hash_stream(f, hashers, chunk)


def _check_hashes(expected: Expected, digests: dict[str, str]) -> str | None:
    for algo, want in expected.hashes.items():
        if digests.get(algo) != want:
            return f"{algo} {digests.get(algo)} instead of {want}"
    return None


def _write_receipt(final: Path, url: str, expected: Expected, sha256: str) -> dict:
    """The receipt: size and sha256 (shardkit.atomic's), the URL asked, the expected hashes."""
    info = {algo: hexdigest for algo, hexdigest in expected.hashes.items() if algo != RECEIPT_HASH}
    return write_receipt(final, sha256=sha256, url=url, **info)


def _committed(final: Path, expected: Expected, url: str, chunk: int) -> dict | None:
    """The receipt of an already-downloaded `final`, or None when it must be downloaded.

    A file renamed into place by a run killed before its receipt is kept (and its receipt
    written) only if it verifies; otherwise it is removed.
    """
    receipt = read_receipt(final)
    if receipt is not None and not all(isinstance(receipt.get(algo, ""), str) for algo in expected.hashes):
        receipt = None  # not the shape _write_receipt gives: checked as a file without a receipt, and replaced
    if receipt is not None:
        clash = [algo for algo, want in expected.hashes.items() if receipt.get(algo) and receipt[algo] != want]
        if expected.size is not None and receipt.get("size") != expected.size:
            clash.append("size")
        if clash:
            raise PrepError(
                f"{final} is already downloaded but its {'/'.join(clash)} differs from {expected.source}; "
                f"delete it and {receipt_path(final)} to download it again"
            )
        return receipt
    if not final.exists():
        return None
    hashers = _hashers(expected)
    size = _hash_file(final, hashers, chunk)
    digests = _digests(hashers)
    if (expected.size is None or size == expected.size) and not _check_hashes(expected, digests):
        return _write_receipt(final, url, expected, digests[RECEIPT_HASH])
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
        with os.fdopen(_open_regular(sidecar, os.O_RDONLY), "rb") as f:
            data = json.loads(f.read(1 << 16).decode("utf-8"))
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


def _check_magic_length(magic: Magic | None, have: int, url: str, name: str) -> None:
    """A whole body shorter than its format's magic (an empty one, say) never had its magic checked: wrong content."""
    if magic is not None and have < len(magic.prefix):
        raise _Mismatch(f"{url} sent {have} bytes of {name}: too short to be a {magic.format} file")


def _transfer(session, url: str, name: str, expected: Expected, partfile: Path, sidecar: Path, *,
              retries, timeout, connect_timeout, min_rate, rate_window, stall_budget, backoff, chunk, bar
              ) -> tuple[dict[str, str], tuple[int, int]]:
    """Bring `partfile` to the whole body of `url`, resuming; return its digests and its (st_dev, st_ino).

    `partfile` is opened once, never through a link (`_open_regular`). Transport failures (429, 5xx,
    connection errors, timeouts, a body slower than `min_rate` bytes/s over `rate_window` s) are retried
    with back-off, at most `retries` in a row without progress: an attempt progresses when it brings a
    byte past the furthest one held, and was not too slow. With no progress for `stall_budget` seconds
    the download is given up whatever the count. Wrong content raises `_Mismatch`; a body past
    `expected.max_size` when the size is unknown, `_TooLarge`.
    """
    size, magic = expected.size, expected.magic
    cap = size if size is not None else expected.max_size
    with os.fdopen(_open_regular(partfile, os.O_RDWR | os.O_CREAT), "r+b") as f:
        ident = _ident(f.fileno())
        hashers = _hashers(expected)
        if os.fstat(f.fileno()).st_size > cap:
            f.truncate(0)
            have = 0
        else:
            have = _hash_stream(f, hashers, chunk)  # resume: hash what is already there
        known = _read_sidecar(sidecar)
        # A validator is only meaningful for the URL that produced it; elsewhere (another mirror)
        # resume without If-Range: the final hash check catches a spliced file.
        validator = known.get("validator") if known.get("url") == url else None
        bar.update(have)
        budget = _Budget(stall_budget)
        furthest, failures, last = have, 0, ""
        while True:
            if size is not None and have == size:
                _check_magic_length(magic, have, url, name)
                return _digests(hashers), ident
            if budget.left() <= 0:
                raise PrepError(f"giving up on {name} from {url}: no progress for {stall_budget:g} s: {last}")
            headers = {}
            if have:
                headers["Range"] = f"bytes={have}-"
                if validator:
                    headers["If-Range"] = validator
            progressed = slow = False
            retry_after = None
            try:
                with _get(session, url, headers=headers, timeout=budget.timeouts(connect_timeout, timeout)) as resp:
                    code = resp.status_code
                    if code == 416:  # our .part is longer than the server's file: start again
                        f.seek(0)
                        f.truncate()
                        hashers, have0, have = _hashers(expected), have, 0
                        raise _Transient(f"HTTP 416 for bytes={have0}-")
                    if _is_retryable(code):
                        retry_after = _retry_after(resp)
                        raise _Transient(f"HTTP {code} {_said(resp.reason)}")
                    if code not in (200, 206):
                        raise ServerRefused(url, name, code, resp.reason)
                    if _is_html(resp):
                        raise _Mismatch(f"{url} served an HTML page (Content-Type "
                                        f"{_said(resp.headers.get('Content-Type'))}) instead of {name}")
                    start = 0
                    if code == 206:
                        m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
                        if not m or int(m.group(1)) != have:
                            raise _Mismatch(f"{url} answered bytes={have}- with Content-Range "
                                            f"{excerpt(resp.headers.get('Content-Range', ''))}")
                        start = have
                    length = resp.headers.get("Content-Length")
                    if length is not None and length.isdigit():
                        if size is not None and start + int(length) != size:
                            raise _Mismatch(f"{url} serves {start + int(length)} bytes of {name}, "
                                            f"{expected.source} says {size}")
                        if size is None and start + int(length) > cap:
                            raise _TooLarge(f"{url} serves {start + int(length)} bytes of {name}, more than the "
                                            f"{_size_text(cap)} a file may have when {expected.source} gives no size")
                    if code == 200:  # whole body: a changed file, or a server that ignores ranges
                        if have:
                            log.info("%s: the server sent the whole file (changed or no ranges); restarting", name)
                        hashers, have = _hashers(expected), 0
                        f.seek(0)
                        f.truncate()
                        write_json(sidecar, {"url": url, "validator": _validator(resp)}, overwrite=True)
                        validator = _validator(resp)
                        bar.update(0)
                    else:
                        f.seek(have)
                    read = _reader(resp)
                    head = b""
                    window_start, window_bytes = time.monotonic(), 0
                    while block := read(chunk):
                        if magic is not None and start == 0 and len(head) < len(magic.prefix):
                            head = (head + block)[: len(magic.prefix)]
                            if len(head) == len(magic.prefix) and head != magic.prefix:
                                raise _Mismatch(f"{url} does not start with the {magic.format} magic "
                                                f"{magic.prefix.decode('latin-1')!r} (starts {head!r})")
                        if have + len(block) > cap:
                            if size is not None:
                                raise _Mismatch(f"{url} sent more than the {size} bytes of {name}")
                            raise _TooLarge(f"{url} sent more than {_size_text(cap)} of {name}, the most a file "
                                            f"may have when {expected.source} gives no size")
                        f.write(block)
                        for h in hashers.values():
                            h.update(block)
                        have += len(block)
                        if have > furthest:
                            furthest, progressed = have, True
                        bar.update(have)
                        window_bytes += len(block)
                        elapsed = time.monotonic() - window_start
                        if elapsed >= rate_window:
                            if window_bytes < min_rate * elapsed:
                                raise _Slow(f"slower than {min_rate} bytes/s for {rate_window:g} s "
                                            f"({window_bytes} bytes in {elapsed:.1f} s)")
                            window_start, window_bytes = time.monotonic(), 0
                if size is not None and have != size:
                    raise _Transient(f"connection closed at byte {have} of {size}")
                _check_magic_length(magic, have, url, name)
                return _digests(hashers), ident
            except _Transient as e:
                last, slow = str(e), isinstance(e, _Slow)
            except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                    requests.exceptions.MissingSchema) as e:
                raise PrepError(f"bad URL {url}: {_said(e, 300)}") from None
            except (requests.RequestException, ConnectionError, TimeoutError) as e:
                # Network only: other OSErrors (a full disk) propagate as they are.
                last = f"{type(e).__name__}: {_said(e, 300)}"
            finally:
                f.flush()  # what arrived is resumed by the next attempt, or the next run
            if progressed and not slow:
                failures = 0
                backoff.reset()
                budget.reset()
            failures += 1
            if failures > retries:
                raise PrepError(f"giving up on {name} from {url} after {retries} retries: {last}")
            log.info("%s: %s; retry %d of %d from byte %d", name, last, failures, retries, have)
            backoff.sleep(retry_after, limit=max(0.0, budget.left()))


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
        fd = _open_regular(lock_path, os.O_RDWR | os.O_CREAT)  # never through a link
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
            now = os.stat(lock_path, follow_symlinks=False)
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


def fetch_file(
    session: requests.Session,
    url: str,
    dest: Path,
    expected: Expected,
    *,
    retries: int = 5,
    timeout: float = READ_TIMEOUT,
    backoff: Backoff | None = None,
    verify_attempts: int = 3,
    connect_timeout: float = CONNECT_TIMEOUT,
    min_rate: int = MIN_RATE,
    rate_window: float = RATE_WINDOW,
    stall_budget: float = STALL_BUDGET,
    chunk: int = 1 << 16,  # a dropped connection loses at most one chunk
    progress: Progress | None = None,
    progress_bar: bool | None = None,
) -> dict:
    """Download `url` to `dest`, verified against `expected` and committed with a receipt; return the receipt.

    The transfer goes to `<dest>.part` (resumed with Range/If-Range across calls and retries).
    Once size and hashes match, it is fsynced and renamed to `dest` (never replacing another
    file: `shardkit.atomic.commit`), then its receipt is written: size, sha256, `url` and the
    expected hashes. A `dest` with a valid receipt is returned as it is (a PrepError when the
    receipt disagrees with `expected`). Wrong content (an HTML page, a wrong magic, size or hash)
    discards the `.part` and fetches again, at most `verify_attempts` times in all. Transport
    failures (429/5xx honouring Retry-After, dropped connections, timeouts) are retried with
    `backoff`, at most `retries` in a row without progress (a retry that brought bytes resets the
    count; a restart from byte 0 counts as progress only past the furthest byte held before). Each
    request has `connect_timeout` and `timeout` (no byte for that long); an attempt slower than
    `min_rate` bytes/s over `rate_window` s is ended and counts as no progress; with no progress for
    `stall_budget` s the download is given up (module constants: CONNECT_TIMEOUT, READ_TIMEOUT,
    MIN_RATE, RATE_WINDOW, STALL_BUDGET). A file of unknown size is refused past `expected.max_size`.
    Nothing is opened through a symbolic link: a link at `dest`, `<dest>.part`, `<dest>.part.json` or
    `<dest>.part.lock` is a PrepError naming it, and nothing is written. A write that fails (a full
    disk, a read-only folder) is a PrepError naming `dest` and why; the bytes already fetched stay in
    `<dest>.part` for the next call to resume.
    Any other status is a `ServerRefused` at once; redirects are followed as `_get` allows.
    `progress(bytes_done, bytes_total)` is called as bytes arrive; `progress_bar` (default: when
    stderr is a terminal) shows a tqdm bar. `session` (see `make_session`) is the caller's to close.
    """
    dest = Path(dest)
    name = dest.name
    if not expected.hashes:
        raise PrepError(f"no hash for {name}: cannot verify the download")
    make_parent_folder(dest)
    partfile = dest.with_name(name + PART_SUFFIX)
    for path in (dest, partfile, dest.with_name(name + SIDECAR_SUFFIX), dest.with_name(name + LOCK_SUFFIX)):
        if path.is_symlink():
            raise _refuse_link(path)
    try:
        return _fetch_locked(session, url, dest, expected, retries=retries, timeout=timeout, backoff=backoff,
                             verify_attempts=verify_attempts, connect_timeout=connect_timeout, min_rate=min_rate,
                             rate_window=rate_window, stall_budget=stall_budget, chunk=chunk, progress=progress,
                             progress_bar=progress_bar)
    except OSError as e:
        if isinstance(e, requests.RequestException):  # requests' errors are OSErrors too: not a write
            raise
        # A full disk, a read-only or vanished folder: one line naming the file. What arrived stays in the .part,
        # which the next run resumes once the disk has room.
        error = write_error(dest, e)
        with contextlib.suppress(OSError):
            if partfile.stat().st_size:
                error = PrepError(f"{error}; the {partfile.stat().st_size} bytes fetched so far stay in "
                                  f"{partfile.name}, resumed by the next run")
        raise error from None


def _fetch_locked(session: requests.Session, url: str, dest: Path, expected: Expected, *, retries, timeout, backoff,
                  verify_attempts, connect_timeout, min_rate, rate_window, stall_budget, chunk, progress,
                  progress_bar) -> dict:
    """fetch_file's work, under the fetch lock; OSErrors of the file system as they are."""
    name = dest.name
    partfile = dest.with_name(name + PART_SUFFIX)
    sidecar = dest.with_name(name + SIDECAR_SUFFIX)
    lock = dest.with_name(name + LOCK_SUFFIX)
    stage = Stage(log, f"download {name}")
    with _fetch_lock(lock):
        done = _committed(dest, expected, url, chunk)
        if done is not None:
            if progress is not None:
                progress(done["size"], done["size"])
            return done

        backoff = Backoff() if backoff is None else backoff
        bar = _ProgressBar(name, expected.size, progress, progress_bar)
        try:
            for attempt in range(1, verify_attempts + 1):
                try:
                    digests, ident = _transfer(
                        session, url, name, expected, partfile, sidecar, retries=retries, timeout=timeout,
                        connect_timeout=connect_timeout, min_rate=min_rate, rate_window=rate_window,
                        stall_budget=stall_budget, backoff=backoff, chunk=chunk, bar=bar)
                    wrong = _check_hashes(expected, digests)
                    if wrong:
                        raise _Mismatch(f"{name} from {url} has {wrong}")
                except _Mismatch as e:
                    _discard(partfile, sidecar)
                    if attempt == verify_attempts:
                        raise PrepError(f"{e} (tried {verify_attempts} times; the file was discarded)") from None
                    log.warning("%s; fetching it again (%d of %d)", e, attempt + 1, verify_attempts)
                    backoff.sleep()
                    continue
                except _TooLarge as e:
                    _discard(partfile, sidecar)
                    raise PrepError(f"{e}; the file was discarded") from None
                break
        finally:
            bar.close()

        fd = _open_regular(partfile, os.O_RDWR)
        try:
            if _ident(fd) != ident:
                raise PrepError(f"{partfile} was replaced while {name} was downloaded: not committed")
            os.fsync(fd)
        finally:
            os.close(fd)
        if dest.is_symlink():
            raise _refuse_link(dest)
        commit(partfile, dest)  # never replaces: unlocked (`_fetch_lock`), a racer's verified copy may be there
        _discard(sidecar)
        receipt = _write_receipt(dest, url, expected, digests[RECEIPT_HASH])
        stage.finish(1, "file", receipt["size"])
        return receipt
