"""A real HTTP server for tests: serves a folder (a dumps site, or any files) on 127.0.0.1 and injects faults.

    with DumpServer(root) as srv:
        srv.add_fault("/enwiki/20240101/x.bz2", "drop", after=1000)    # once by default
        ...fetch from srv.url...
        srv.log_for("/enwiki/20240101/x.bz2")                          # what the server saw

It speaks HTTP/1.1 with keep-alive, sends ETag (from the content) and Last-Modified, and
honours `Range: bytes=N-` / `bytes=N-M` and `If-Range` the way nginx does: a matching (or
absent) If-Range gives 206 with Content-Range, a stale one the whole file with 200; a start
past the end gives 416.

Faults, per URL path, each applying to the next `times` requests (None = every request):
- "drop", after=N: send the headers and N bytes of the body, then close the connection.
- "stall", after=N, seconds=S: send N bytes, then wait S seconds before the rest.
- "corrupt", at=OFFSET: flip the byte at file offset OFFSET (when the response covers it).
- "html": answer 200 with an HTML error page (Content-Type text/html).
- "status", code=503, headers={"Retry-After": "1"}, reason=None: answer with that status, headers
  and reason phrase (the standard one by default).
- "replace", data=BYTES: answer this request from the current file, but overwrite it first
  (its ETag changes) so that every later request sees the new bytes.
- "redirect", location=URL, code=302: answer with that status and a Location header (and a
  short body), as a mirror that moved files, or a hostile one, does.
- "endless", byte=b"\0", prefix=b"": answer 200, chunked, with `prefix` then that byte repeated until the
  client hangs up (a body with no end, as a misconfigured server streaming a device would send).
- "norange": ignore Range and If-Range, answer 200 with the whole file (combine with "drop").
- "trickle", interval=I, seconds=S: send the headers, then one byte of the body every I seconds, for S
  seconds at most, then close the connection.
- "slowheaders", interval=I, seconds=S: send the status line and headers one byte every I seconds, for S seconds
  at most, then close the connection (requests' per-read timeouts never fire on it).
- "silent", seconds=S: read the request and answer nothing for S seconds (or until the server stops), then
  close the connection (a server that accepts and never answers).
- "barrier", barrier=threading.Barrier(N), seconds=S: hold the answer until N requests wait at
  the barrier (at most S seconds, then answer anyway): N clients that started at different times
  go on together (two runs racing for the same outputs, from a known point).
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HTML_PAGE = b"<!DOCTYPE html><html><head><title>503</title></head><body>Service busy, try later</body></html>\n"
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Fault:
    kind: str
    times: int | None = 1
    params: dict = field(default_factory=dict)


@dataclass
class Seen:
    """One request as the server saw it, and what it answered."""

    path: str
    headers: dict
    status: int = 0
    range_start: int | None = None
    body_sent: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def do_GET(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        seen = Seen(path=path, headers=dict(self.headers.items()))
        faults = self.server.owner._take_faults(path)
        owner = self.server.owner
        owner._record(seen)  # before answering: the client may act on the answer at once
        with owner._lock:
            owner.active += 1
            owner.max_active = max(owner.max_active, owner.active)
        try:
            self._serve(path, faults, seen)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with owner._lock:
                owner.active -= 1

    def _start(self, seen: Seen, code: int, headers: dict, length: int, reason: str | None = None) -> None:
        seen.status = code
        self.send_response(code, reason)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, seen: Seen, code: int, body: bytes, headers: dict, reason: str | None = None) -> None:
        self._start(seen, code, headers, len(body), reason)
        self.wfile.write(body)
        seen.body_sent = len(body)

    def _endless(self, seen: Seen, byte: bytes, prefix: bytes = b"") -> None:
        seen.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block = byte * (1 << 16)
        self.close_connection = True
        if prefix:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(prefix), prefix))
        while True:  # until the client closes: BrokenPipeError / ConnectionResetError end it
            self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            seen.body_sent += len(block)

    def _serve(self, path: str, faults: list[Fault], seen: Seen) -> None:
        kinds = {f.kind: f for f in faults}
        if "barrier" in kinds:
            with contextlib.suppress(threading.BrokenBarrierError):
                kinds["barrier"].params["barrier"].wait(timeout=kinds["barrier"].params.get("seconds", 60))
        if "redirect" in kinds:
            f = kinds["redirect"]
            self._send(seen, f.params.get("code", 302), b"moved\n",
                       {"Content-Type": "text/plain", "Location": f.params["location"]})
            return
        if "endless" in kinds:
            self._endless(seen, kinds["endless"].params.get("byte", b"\0"), kinds["endless"].params.get("prefix", b""))
            return
        if "slowheaders" in kinds:
            f = kinds["slowheaders"]
            seen.status = 200
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1\r\n\r\n"
            until = time.monotonic() + f.params.get("seconds", 30)
            self.close_connection = True
            for i in range(len(head)):
                if time.monotonic() >= until or self.server.owner._closing.is_set():
                    break
                self.wfile.write(head[i : i + 1])
                self.wfile.flush()
                time.sleep(f.params.get("interval", 1.0))
            return
        if "silent" in kinds:
            until = time.monotonic() + kinds["silent"].params.get("seconds", 30)
            while time.monotonic() < until and not self.server.owner._closing.is_set():
                time.sleep(0.02)
            self.close_connection = True
            return
        if "status" in kinds:
            f = kinds["status"]
            self._send(seen, f.params.get("code", 503), b"try again later\n",
                       {"Content-Type": "text/plain", **f.params.get("headers", {})}, f.params.get("reason"))
            return
        if "html" in kinds:
            self._send(seen, 200, HTML_PAGE, {"Content-Type": "text/html; charset=utf-8"})
            return
        file = self.server.owner._file(path)
        if file is None or not file.is_file():
            self._send(seen, 404, b"<html><body>404 Not Found</body></html>\n", {"Content-Type": "text/html"})
            return
        data = file.read_bytes()
        if "replace" in kinds:  # this answer keeps the old bytes; every later one sees the new file
            file.write_bytes(kinds["replace"].params["data"])
        etag = '"' + hashlib.sha1(data).hexdigest()[:16] + '"'
        last_modified = email.utils.formatdate(file.stat().st_mtime, usegmt=True)
        ctype = {".json": "application/json", ".txt": "text/plain"}.get(file.suffix, "application/octet-stream")
        headers = {"Content-Type": ctype, "ETag": etag, "Last-Modified": last_modified, "Accept-Ranges": "bytes"}
        start, end, code = 0, len(data) - 1, 200
        m = None if "norange" in kinds else _RANGE.match(self.headers.get("Range", "").strip())
        if_range = self.headers.get("If-Range")
        if m and (if_range is None or if_range in (etag, last_modified)):
            start = int(m.group(1))
            end = min(int(m.group(2)), len(data) - 1) if m.group(2) else len(data) - 1
            seen.range_start = start
            if start >= len(data) or start > end:
                self._send(seen, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            code = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        elif m:
            seen.range_start = int(m.group(1))  # asked, but the validator was stale: whole file
        body = bytearray(data[start : end + 1])
        if "corrupt" in kinds:
            at = kinds["corrupt"].params.get("at", 0) - start
            if 0 <= at < len(body):
                body[at] ^= 0xFF
        self._start(seen, code, headers, len(body))
        if "drop" in kinds:
            n = kinds["drop"].params["after"]
            self.wfile.write(body[:n])
            self.wfile.flush()
            seen.body_sent = min(n, len(body))
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "trickle" in kinds:
            f = kinds["trickle"]
            until = time.monotonic() + f.params.get("seconds", 30)
            self.close_connection = True
            for i in range(len(body)):
                if time.monotonic() >= until or self.server.owner._closing.is_set():
                    break
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                seen.body_sent = i + 1
                time.sleep(f.params.get("interval", 1.0))
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "stall" in kinds:
            n = kinds["stall"].params["after"]
            self.wfile.write(body[:n])
            self.wfile.flush()
            seen.body_sent = min(n, len(body))
            time.sleep(kinds["stall"].params["seconds"])
            self.close_connection = True
            self.wfile.write(body[n:])
            seen.body_sent = len(body)
            return
        self.wfile.write(body)
        seen.body_sent = len(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "DumpServer"


class DumpServer:
    """Serves `root` (a dumps-site folder, or any other) at `self.url` on 127.0.0.1, on a free port."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._lock = threading.Lock()
        self._faults: dict[str, list[Fault]] = {}
        self.log: list[Seen] = []
        self.active = self.max_active = 0  # requests being answered at once, and the most seen
        self._closing = threading.Event()  # set on exit: "silent" and "trickle" answers end
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "DumpServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def add_fault(self, path: str, kind: str, times: int | None = 1, **params) -> None:
        with self._lock:
            self._faults.setdefault(path, []).append(Fault(kind, times, params))

    def log_for(self, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.log if s.path == path]

    def _take_faults(self, path: str) -> list[Fault]:
        with self._lock:
            active = []
            for f in self._faults.get(path, []):
                if f.times is None or f.times > 0:
                    active.append(f)
                    if f.times is not None:
                        f.times -= 1
            return active

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.log.append(seen)

    def _file(self, path: str) -> Path | None:
        p = (self.root / path.lstrip("/")).resolve()
        return p if p.is_relative_to(self.root) else None
