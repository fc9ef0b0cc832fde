"""Downloads against a real HTTP server on 127.0.0.1 (tests/dumpserver.py) and file:// URLs: a Wikipedia dump
through wikiprep.wikipedia.dump (the user-facing path, with its error lines), then the machinery under it,
shardkit.fetch, called directly as any other source calls it (a plain file, a size and a sha256)."""

from __future__ import annotations

import bz2
import email.utils
import hashlib
import json
import multiprocessing
import random
import re
import time
import tracemalloc
from pathlib import Path

import pytest

from dumpserver import DumpServer
from wikiprep import __version__
from shardkit import fetch
from shardkit.atomic import read_receipt, receipt_path
from wikiprep.wikipedia.dump import (
    SMALL_FILE_CAP,
    Part,
    check_dump_id,
    default_user_agent,
    dump_parts,
    fetch_dump_status,
    fetch_part,
    list_parts,
    make_session,
    read_dump_status,
)
from shardkit.errors import PrepError

WIKI, DATE = "testwiki", "20240101"
P = f"{WIKI}-{DATE}-"
SPLIT = [f"{P}pages-articles1.xml-p1p10.bz2", f"{P}pages-articles2.xml-p11p20.bz2", f"{P}pages-articles10.xml-p21p30.bz2"]
RECOMBINED = f"{P}pages-articles.xml.bz2"
MULTI = [f"{P}pages-articles-multistream.xml.bz2", f"{P}pages-articles-multistream-index.txt.bz2"]
BIG = SPLIT[0]  # ~200 KB, so faults can cut it in the middle
FAST = dict(backoff_base=0.001, max_wait=0.05, chunk_size=16 * 1024, progress_bar=False)
FAST_STATUS = dict(backoff_base=0.001, max_wait=0.05)


def _content(name: str, size: int) -> bytes:
    # Random payload so bz2 cannot shrink it; seeded by name so files differ.
    rng = random.Random(name)
    return bz2.compress(b"<mediawiki>" + rng.randbytes(size) + b"</mediawiki>")


def _entry(name: str, data: bytes, hashes: bool) -> dict:
    e = {"size": len(data), "url": f"/{WIKI}/{DATE}/{name}"}
    if hashes:
        e["sha1"] = hashlib.sha1(data).hexdigest()
        e["md5"] = hashlib.md5(data).hexdigest()
    return e


def make_dump(root: Path, *, status: str = "done", hashes_in_status: bool = True, sums=("sha1", "md5")) -> dict[str, bytes]:
    """A dumps-site folder root/WIKI/DATE with split, recombined and multistream jobs; returns name -> bytes."""
    folder = root / WIKI / DATE
    folder.mkdir(parents=True)
    files = {name: _content(name, 200_000 if name == BIG else 3_000) for name in SPLIT + [RECOMBINED] + MULTI}
    for name, data in files.items():
        (folder / name).write_bytes(data)

    def job(names, st=status):
        return {"status": st, "updated": "2024-01-02 03:04:05",
                "files": {n: _entry(n, files[n], hashes_in_status) for n in names}}

    doc = {"version": "0.8", "jobs": {
        "articlesdump": job(SPLIT),
        "articlesdumprecombine": job([RECOMBINED]),
        "articlesmultistreamdump": job(MULTI),
        "xmlstubsdump": {"status": "done", "updated": "2024-01-02 03:04:05", "files": {}},
    }}
    (folder / "dumpstatus.json").write_text(json.dumps(doc))
    for h in sums:
        lines = [f"{hashlib.new(h, files[n]).hexdigest()}  {n}\n" for n in sorted(files)]
        (folder / f"{P}{h}sums.txt").write_text("".join(lines))
    return files


def url_path(name: str) -> str:
    return f"/{WIKI}/{DATE}/{name}"


def assert_clean(dest: Path, name: str, data: bytes | None) -> None:
    """Either the committed, verified bytes with a receipt, or nothing at all under the final name."""
    final = dest / name
    if data is None:
        assert not final.exists(), f"{final} left behind"
        assert not receipt_path(final).exists()
    else:
        assert final.read_bytes() == data
        r = read_receipt(final)
        assert r is not None and r["sha256"] == hashlib.sha256(data).hexdigest() and r["size"] == len(data)
        assert not (dest / f"{name}.part").exists() and not (dest / f"{name}.part.json").exists()
    assert not (dest / f"{name}.part.lock").exists()
    assert not [p for p in dest.glob("*.tmp-*")], "temporary files left behind"


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    files = make_dump(root)
    with DumpServer(root) as srv:
        yield srv, files, tmp_path / "dl"


def _status_and_parts(srv, dest, **kw):
    fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    return {p.name: p for p in list_parts(dest, WIKI, DATE, **kw)}


def test_plain_download_then_committed_part_returns_at_once(site):
    srv, files, dest = site
    status_path = fetch_dump_status(srv.url, WIKI, DATE, dest)
    assert status_path == dest / "dumpstatus.json"
    assert read_receipt(status_path)["url"] == f"{srv.url}/{WIKI}/{DATE}/dumpstatus.json"
    assert (dest / f"{P}sha1sums.txt").is_file() and (dest / f"{P}md5sums.txt").is_file()

    parts = list_parts(dest, WIKI, DATE)
    assert [p.name for p in parts] == SPLIT  # split parts, natural order (2 before 10)
    seen = []
    for part in parts:
        receipt = fetch_part(srv.url, WIKI, DATE, part, dest, progress=lambda d, t: seen.append((d, t)), **FAST)
        assert receipt["sha1"] == hashlib.sha1(files[part.name]).hexdigest()
        assert receipt["url"] == f"{srv.url}/{WIKI}/{DATE}/{part.name}"
        assert_clean(dest, part.name, files[part.name])
    assert seen[-1] == (len(files[SPLIT[-1]]), len(files[SPLIT[-1]]))
    big = [s for s in seen if s[1] == len(files[BIG])]
    assert len(big) > 5 and big == sorted(big)  # chunked progress, monotone

    n = len(srv.log)
    again = fetch_part(srv.url, WIKI, DATE, parts[0], dest, **FAST)
    assert again == read_receipt(dest / BIG)
    assert len(srv.log) == n, "a committed part was requested again"


def test_corrupt_body_is_fetched_again_then_fails_naming_the_file(site):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path(BIG), "corrupt", at=123_456)
    fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, **FAST)
    assert_clean(dest, BIG, files[BIG])
    assert [s.status for s in srv.log_for(url_path(BIG))] == [200, 200]  # discarded, whole file again

    name = SPLIT[1]
    srv.add_fault(url_path(name), "corrupt", times=None, at=1000)
    with pytest.raises(PrepError, match=rf"^{name} from http://.* has sha1 [0-9a-f]{{40}} instead of [0-9a-f]{{40}} "
                                        r"\(tried 3 times; the file was discarded\)$"):
        fetch_part(srv.url, WIKI, DATE, parts[name], dest, **FAST)
    assert len(srv.log_for(url_path(name))) == 3
    assert_clean(dest, name, None)
    assert not (dest / f"{name}.part").exists()


def test_html_page_with_200_is_never_accepted(site):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path(BIG), "html", times=1)
    fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, **FAST)
    assert_clean(dest, BIG, files[BIG])

    name = SPLIT[1]
    srv.add_fault(url_path(name), "html", times=None)
    with pytest.raises(PrepError, match=rf"served an HTML page \(Content-Type text/html; charset=utf-8\) instead of {name}"):
        fetch_part(srv.url, WIKI, DATE, parts[name], dest, **FAST)
    assert_clean(dest, name, None)
    assert not (dest / f"{name}.part").exists()


def test_non_bz2_body_is_rejected_by_its_magic(site, tmp_path):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    name = SPLIT[1]
    # Same size as announced, served as octet-stream, but not bz2 (e.g. a mirror's placeholder).
    (tmp_path / "site" / WIKI / DATE / name).write_bytes(b"\0" * len(files[name]))
    with pytest.raises(PrepError, match=rf"{name} does not start with the bz2 magic 'BZh'"):
        fetch_part(srv.url, WIKI, DATE, parts[name], dest, **FAST)
    assert_clean(dest, name, None)


def test_wrong_size_on_the_server_is_rejected(site, tmp_path):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    name = SPLIT[1]
    (tmp_path / "site" / WIKI / DATE / name).write_bytes(files[name][:-10])
    with pytest.raises(PrepError, match=rf"serves {len(files[name]) - 10} bytes of {name}, dumpstatus.json says {len(files[name])}"):
        fetch_part(srv.url, WIKI, DATE, parts[name], dest, **FAST)
    assert_clean(dest, name, None)


def test_status_fetch_retries_503(site):
    srv, files, dest = site
    srv.add_fault(url_path("dumpstatus.json"), "status", code=503)
    fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    assert [s.status for s in srv.log_for(url_path("dumpstatus.json"))] == [503, 200]


def test_sums_files_used_when_status_has_no_hashes(tmp_path):
    root = tmp_path / "site"
    files = make_dump(root, hashes_in_status=False, sums=("sha1",))
    dest = tmp_path / "dl"
    with DumpServer(root) as srv:
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
        assert not (dest / f"{P}md5sums.txt").exists()  # 404 on the server: optional
        parts = list_parts(dest, WIKI, DATE)
        assert [p.sha1 for p in parts] == [hashlib.sha1(files[n]).hexdigest() for n in SPLIT]
        assert all(p.md5 is None for p in parts)
        fetch_part(srv.url, WIKI, DATE, parts[1], dest, **FAST)
        assert_clean(dest, SPLIT[1], files[SPLIT[1]])
        # Wrong sums on the server would now fail the download: the fallback hash is really checked.
        bad = Part(parts[2].name, parts[2].url, parts[2].size, "0" * 40, None)
        with pytest.raises(PrepError, match=rf"{SPLIT[2]} from .* has sha1 [0-9a-f]{{40}} instead of 0{{40}}"):
            fetch_part(srv.url, WIKI, DATE, bad, dest, verify_attempts=1, **FAST)
        assert_clean(dest, SPLIT[2], None)


def test_md5sums_only(tmp_path):
    root = tmp_path / "site"
    files = make_dump(root, hashes_in_status=False, sums=("md5",))
    with DumpServer(root) as srv:
        dest = tmp_path / "dl"
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
        part = list_parts(dest, WIKI, DATE)[0]
        assert part.sha1 is None and part.md5 == hashlib.md5(files[BIG]).hexdigest()
        receipt = fetch_part(srv.url, WIKI, DATE, part, dest, **FAST)
        assert receipt["md5"] == part.md5 and "sha1" not in receipt
        assert (dest / BIG).read_bytes() == files[BIG]


def test_no_hashes_anywhere_fails(tmp_path):
    root = tmp_path / "site"
    make_dump(root, hashes_in_status=False, sums=())
    with DumpServer(root) as srv:
        dest = tmp_path / "dl"
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
        with pytest.raises(PrepError, match=rf"^no sha1 or md5 for {SPLIT[0]}: not in .*dumpstatus.json "
                                            rf"nor in {P}sha1sums.txt / -md5sums.txt$"):
            list_parts(dest, WIKI, DATE)
        with pytest.raises(PrepError, match=rf"no sha1 or md5 for {BIG}"):
            fetch_part(srv.url, WIKI, DATE, Part(BIG, "", 10, None, None), dest, **FAST)
        assert_clean(dest, BIG, None)


def test_job_in_progress_is_refused(tmp_path):
    root = tmp_path / "site"
    make_dump(root, status="in-progress")
    with DumpServer(root) as srv:
        dest = tmp_path / "dl"
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
        with pytest.raises(PrepError) as e:
            list_parts(dest, WIKI, DATE)
        assert str(e.value) == f"articlesdump is 'in-progress' in {WIKI} {DATE}: the dump is not finished; pick an earlier date"
        with pytest.raises(PrepError, match="^articlesmultistreamdump is 'in-progress'"):
            list_parts(dest, WIKI, DATE, multistream=True)


def test_job_selection_recombined_and_multistream(tmp_path):
    root = tmp_path / "site"
    files = make_dump(root)
    doc = json.loads((root / WIKI / DATE / "dumpstatus.json").read_text())
    assert [p.name for p in list_parts(doc, WIKI, DATE, multistream=True)] == sorted(MULTI)
    doc["jobs"]["articlesdump"]["files"] = {}  # a dump (or mirror) without split parts
    (part,) = list_parts(doc, WIKI, DATE)
    assert part == Part(RECOMBINED, f"{WIKI}/{DATE}/{RECOMBINED}", len(files[RECOMBINED]),
                        hashlib.sha1(files[RECOMBINED]).hexdigest(), hashlib.md5(files[RECOMBINED]).hexdigest())
    del doc["jobs"]["articlesdumprecombine"]
    with pytest.raises(PrepError, match=f"no files for articlesdump or articlesdumprecombine in dumpstatus.json of {WIKI} {DATE}"):
        list_parts(doc, WIKI, DATE)
    doc["jobs"]["articlesdump"]["files"] = {"../../etc/passwd": {"size": 1, "sha1": "0" * 40}}
    with pytest.raises(PrepError, match="lists '../../etc/passwd', not a file of"):
        list_parts(doc, WIKI, DATE)


def test_missing_dump_names_the_url(site):
    srv, files, dest = site
    with pytest.raises(PrepError) as e:
        fetch_dump_status(srv.url, WIKI, "20200101", dest, **FAST_STATUS)
    assert str(e.value) == f"no dump for {WIKI} 20200101 at {srv.url}/{WIKI}/20200101/dumpstatus.json: 404"
    assert not (dest / "dumpstatus.json").exists()


def test_html_instead_of_dumpstatus_is_refused(site):
    srv, files, dest = site
    srv.add_fault(url_path("dumpstatus.json"), "html")
    with pytest.raises(PrepError, match=r"dumpstatus.json is not JSON .*not a dumps site\?"):
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    assert not (dest / "dumpstatus.json").exists()


def test_missing_part_404_names_the_file(site, tmp_path):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    (tmp_path / "site" / WIKI / DATE / SPLIT[2]).unlink()
    with pytest.raises(PrepError) as e:
        fetch_part(srv.url, WIKI, DATE, parts[SPLIT[2]], dest, **FAST)
    assert str(e.value) == f"missing part {SPLIT[2]}: {srv.url}/{WIKI}/{DATE}/{SPLIT[2]}: 404"
    assert_clean(dest, SPLIT[2], None)
    assert not (dest / f"{SPLIT[2]}.part").exists() or (dest / f"{SPLIT[2]}.part").stat().st_size == 0


def test_file_url_dump(tmp_path, capsys):
    root = tmp_path / "site"
    files = make_dump(root)
    dest = tmp_path / "dl"
    url = root.as_uri()
    fetch_dump_status(url, WIKI, DATE, dest)
    parts = list_parts(dest, WIKI, DATE)
    for part in parts:
        receipt = fetch_part(url, WIKI, DATE, part, dest, **FAST)
        assert receipt["url"] == f"{url}/{WIKI}/{DATE}/{part.name}"
        assert_clean(dest, part.name, files[part.name])
    # Resume from a local .part works the same way (Range served by the file:// adapter).
    dest2 = tmp_path / "dl2"
    dest2.mkdir()
    (dest2 / f"{BIG}.part").write_bytes(files[BIG][:30_000])
    calls = []
    fetch_part(url, WIKI, DATE, parts[0], dest2, **{**FAST, "progress_bar": True}, progress=lambda d, t: calls.append(d))
    assert_clean(dest2, BIG, files[BIG])
    assert calls[0] == 30_000 and calls[1] > 30_000 and calls[-1] == len(files[BIG])  # went on from the .part
    assert BIG[:20] in capsys.readouterr().err  # the tqdm bar
    # A corrupt local copy is caught by the same verification.
    (root / WIKI / DATE / SPLIT[1]).write_bytes(files[SPLIT[1]][:-1] + b"x")
    with pytest.raises(PrepError, match=rf"^{SPLIT[1]} from file://.* has sha1"):
        fetch_part(url, WIKI, DATE, parts[1], tmp_path / "dl3", **FAST)
    assert_clean(tmp_path / "dl3", SPLIT[1], None)
    with pytest.raises(PrepError, match=rf"^no dump for {WIKI} 19990101 at file://.*: 404$"):
        fetch_dump_status(url, WIKI, "19990101", tmp_path / "dl4")


def test_user_agent_names_project_version_and_contact(site, monkeypatch):
    srv, files, dest = site
    monkeypatch.setenv("WIKIPREP_CONTACT", "data-team@example.org")
    expected = f"wikiprep/{__version__} (+https://github.com/wikiprep/wikiprep; contact: data-team@example.org)"
    assert default_user_agent() == expected
    parts = _status_and_parts(srv, dest)
    fetch_part(srv.url, WIKI, DATE, parts[SPLIT[1]], dest, **FAST)
    assert {s.headers.get("User-Agent") for s in srv.log} == {expected}
    assert default_user_agent("me@example.com").endswith("; contact: me@example.com)")
    fetch_part(srv.url, WIKI, DATE, parts[SPLIT[2]], dest, user_agent="custom/1.0 (x@y)", **FAST)
    assert srv.log[-1].headers["User-Agent"] == "custom/1.0 (x@y)"


def test_committed_part_that_disagrees_with_dumpstatus_fails_loudly(site):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    fetch_part(srv.url, WIKI, DATE, parts[SPLIT[1]], dest, **FAST)
    other = Part(SPLIT[1], parts[SPLIT[1]].url, parts[SPLIT[1]].size, "f" * 40, None)
    with pytest.raises(PrepError, match=rf"{SPLIT[1]} is already downloaded but its sha1 differs from dumpstatus.json; "
                                        rf"delete it and .*\.receipts/{SPLIT[1]}\.json to download it again"):
        fetch_part(srv.url, WIKI, DATE, other, dest, **FAST)
    assert_clean(dest, SPLIT[1], files[SPLIT[1]])  # left as it was


def test_forbidden_user_agent_is_explained(site):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path(SPLIT[1]), "status", code=403)
    with pytest.raises(PrepError, match=rf"403 Forbidden for {SPLIT[1]} \(a blocked User-Agent\? set WIKIPREP_CONTACT\)"):
        fetch_part(srv.url, WIKI, DATE, parts[SPLIT[1]], dest, **FAST)
    assert len(srv.log_for(url_path(SPLIT[1]))) == 1  # not retried
    assert_clean(dest, SPLIT[1], None)


# ---------------------------------------------------------------------------------------------
# Bad input from the server (#13): redirects, sizes, types, what error lines quote


def _secret(tmp_path) -> Path:
    """A local file no server may make part of a download or quote: its bytes are a valid part's."""
    path = tmp_path / "secret" / "local.bz2"
    path.parent.mkdir()
    return path


# (id, the path answered with a redirect, its Location given the server URL and a local file, what the error says)
REDIRECTS = [
    ("status-to-local-file", "dumpstatus.json", lambda srv, local: local.as_uri(), "file"),
    ("status-to-etc-hostname", "dumpstatus.json", lambda srv, local: "file:///etc/hostname", "file"),
    ("sums-to-dev-zero", f"{P}sha1sums.txt", lambda srv, local: "file:///dev/zero", "file"),
    ("part-to-local-copy", BIG, lambda srv, local: local.as_uri(), "file"),
    ("part-to-ftp", BIG, lambda srv, local: f"ftp://127.0.0.1/{BIG}", "ftp"),
    ("part-to-data-url", BIG, lambda srv, local: "data:application/octet-stream;base64,QlpoOTFBWSZTWQ==", "data"),
]


@pytest.mark.parametrize("path, location, scheme", [r[1:] for r in REDIRECTS], ids=[r[0] for r in REDIRECTS])
def test_redirect_out_of_http_is_refused(site, tmp_path, path, location, scheme):
    srv, files, dest = site
    local = _secret(tmp_path)
    # The local file holds exactly the bytes dumpstatus.json announces for BIG: followed, it would verify.
    local.write_bytes(files[BIG])
    target = location(srv, local)
    if path == BIG:
        parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path(path), "redirect", times=None, location=target)
    with pytest.raises(PrepError) as e:
        if path == BIG:
            fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, **FAST)
        else:
            fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    message = str(e.value)
    assert message == (f"{srv.url}{url_path(path)}: the server redirects to a {scheme}: URL ({target[:60]!r}"
                       f"{'...' if len(target) > 60 else ''}); only redirects to http:// and https:// are followed")
    assert [s.status for s in srv.log_for(url_path(path))] == [302]  # refused at once, not retried
    if path == BIG:
        assert_clean(dest, BIG, None)
        assert not (dest / f"{BIG}.part").exists() or (dest / f"{BIG}.part").stat().st_size == 0
    else:
        assert not dest.exists(), "a refused status left files behind"


def test_redirect_within_http_is_followed_and_resumed(site, tmp_path):
    srv, files, dest = site
    # A mirror that moved its files: every request of the old path is redirected, once relative,
    # once absolute; a transfer broken on the new path resumes through the redirect with Range.
    moved = tmp_path / "site" / "moved"
    moved.mkdir()
    for name in (BIG, "dumpstatus.json"):
        (moved / name).write_bytes((tmp_path / "site" / WIKI / DATE / name).read_bytes())
    srv.add_fault(url_path("dumpstatus.json"), "redirect", code=301, location="/moved/dumpstatus.json")
    srv.add_fault(url_path(BIG), "redirect", times=None, code=307, location=f"{srv.url}/moved/{BIG}")
    srv.add_fault(f"/moved/{BIG}", "drop", after=70_000)
    parts = _status_and_parts(srv, dest)
    fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, **FAST)
    assert_clean(dest, BIG, files[BIG])
    first, second = srv.log_for(f"/moved/{BIG}")
    assert first.status == 200 and second.status == 206 and second.headers["Range"] == f"bytes={second.range_start}-"
    assert read_receipt(dest / BIG)["url"] == f"{srv.url}{url_path(BIG)}"  # the URL asked, not where it led


def test_redirect_loop_gives_up(site):
    srv, files, dest = site
    srv.add_fault(url_path("dumpstatus.json"), "redirect", times=None, location=url_path("dumpstatus.json"))
    with pytest.raises(PrepError, match=rf"^{srv.url}{url_path('dumpstatus.json')}: more than 10 redirects$"):
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    assert len(srv.log_for(url_path("dumpstatus.json"))) == 11
    assert not dest.exists()


def test_file_adapter_only_for_a_file_dump_url(tmp_path, monkeypatch):
    monkeypatch.setenv("WIKIPREP_CONTACT", "tests@example.invalid")
    assert "file://" not in make_session().adapters
    local = make_session(local_files=True)
    assert isinstance(local.adapters["file://"], fetch.FileAdapter) and local.headers["User-Agent"] == default_user_agent()
    assert "file://" not in fetch.make_session("any/1").adapters


def _pad_status(path: Path, size: int) -> None:
    """Rewrite a dumpstatus.json with trailing spaces to exactly `size` bytes: still valid JSON."""
    data = path.read_bytes().rstrip()
    path.write_bytes(data + b" " * (size - len(data)))


def test_status_at_the_cap_is_read_one_byte_more_is_refused(tmp_path):
    root = tmp_path / "site"
    make_dump(root)
    status = root / WIKI / DATE / "dumpstatus.json"
    _pad_status(status, SMALL_FILE_CAP)
    fetch_dump_status(root.as_uri(), WIKI, DATE, tmp_path / "dl")  # file://: read to its end
    assert (tmp_path / "dl" / "dumpstatus.json").stat().st_size == SMALL_FILE_CAP
    _pad_status(status, SMALL_FILE_CAP + 1)
    with DumpServer(root) as srv:  # http: refused on its Content-Length, unread
        with pytest.raises(PrepError) as e:
            fetch_dump_status(srv.url, WIKI, DATE, tmp_path / "dl2", **FAST_STATUS)
    assert str(e.value) == (f"{srv.url}{url_path('dumpstatus.json')} is larger than 8 MiB: "
                            "not a dumps site's status or checksum file")
    assert not (tmp_path / "dl2").exists()


@pytest.mark.parametrize("name", ["dumpstatus.json", f"{P}md5sums.txt"])
def test_endless_small_file_is_refused_with_bounded_memory(tmp_path, name):
    """/dev/zero behind a file:// dump URL, and an endless chunked answer over http: refused after
    the cap and one byte, with memory near the cap."""
    root = tmp_path / "site"
    make_dump(root)
    target = root / WIKI / DATE / name
    target.unlink()
    target.symlink_to("/dev/zero")
    tracemalloc.start()
    try:
        with pytest.raises(PrepError, match=rf"^{re.escape(target.as_uri())} is larger than 8 MiB"):
            fetch_dump_status(root.as_uri(), WIKI, DATE, tmp_path / "dl")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * SMALL_FILE_CAP, f"peak {peak} bytes"
    assert not (tmp_path / "dl").exists()
    target.unlink()
    target.write_text("{}")
    with DumpServer(root) as srv:
        srv.add_fault(url_path(name), "endless", times=None)
        with pytest.raises(PrepError, match=rf"^{srv.url}{url_path(name)} is larger than 8 MiB"):
            fetch_dump_status(srv.url, WIKI, DATE, tmp_path / "dl", **FAST_STATUS)
    assert not (tmp_path / "dl").exists()


def _set(doc: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


_F = ("jobs", "articlesdump", "files", BIG)
# (id, where in dumpstatus.json, the wrong value, what the error line says of it)
STATUS_TYPES = [
    ("jobs-array", ("jobs",), [], "jobs is an array, not an object"),
    ("jobs-null", ("jobs",), None, "jobs is null, not an object"),
    ("job-array", ("jobs", "articlesdump"), [1, 2], "jobs.articlesdump is an array, not an object"),
    ("job-string", ("jobs", "articlesdumprecombine"), "done", "jobs.articlesdumprecombine is the string 'done', not an object"),
    ("multistream-job-number", ("jobs", "articlesmultistreamdump"), 7, "jobs.articlesmultistreamdump is the number 7, not an object"),
    ("status-number", ("jobs", "articlesdump", "status"), 1, "jobs.articlesdump.status is the number 1, not a string"),
    ("status-null", ("jobs", "articlesdump", "status"), None, "jobs.articlesdump.status is null, not a string"),
    ("files-array", ("jobs", "articlesdump", "files"), [BIG], "jobs.articlesdump.files is an array, not an object"),
    ("files-null", ("jobs", "articlesdump", "files"), None, "jobs.articlesdump.files is null, not an object"),
    ("file-array", _F, [], f"jobs.articlesdump.files['{BIG}'] is an array, not an object"),
    ("file-null", _F, None, f"jobs.articlesdump.files['{BIG}'] is null, not an object"),
    ("size-string", _F + ("size",), "200", f"files['{BIG}'].size is the string '200', not a size in bytes"),
    ("size-negative", _F + ("size",), -1, f"files['{BIG}'].size is the number -1, not a size in bytes"),
    ("size-float", _F + ("size",), 1.5, f"files['{BIG}'].size is the number 1.5, not a size in bytes"),
    ("size-bool", _F + ("size",), True, f"files['{BIG}'].size is true, not a size in bytes"),
    ("size-object", _F + ("size",), {"bytes": 1}, f"files['{BIG}'].size is an object, not a size in bytes"),
    ("url-number", _F + ("url",), 5, f"files['{BIG}'].url is the number 5, not a string"),
    ("sha1-array", _F + ("sha1",), ["a"], f"files['{BIG}'].sha1 is an array, not 40 hex digits"),
    ("sha1-not-hex", _F + ("sha1",), "z" * 40, f"files['{BIG}'].sha1 is the string '{'z' * 40}', not 40 hex digits"),
    ("md5-sha1-length", _F + ("md5",), "0" * 40, f"files['{BIG}'].md5 is the string '{'0' * 40}', not 32 hex digits"),
    ("name-too-long", ("jobs", "articlesdump", "files", P + "x" * 5000), {}, f"articlesdump in {{where}} lists '{P}xxx"),
]


@pytest.mark.parametrize("path, value, expect", [r[1:] for r in STATUS_TYPES], ids=[r[0] for r in STATUS_TYPES])
def test_dumpstatus_of_the_wrong_types_is_one_line(site, tmp_path, path, value, expect):
    srv, files, dest = site
    status = tmp_path / "site" / WIKI / DATE / "dumpstatus.json"
    doc = json.loads(status.read_text())
    _set(doc, path, value)
    status.write_text(json.dumps(doc))
    url = f"{srv.url}{url_path('dumpstatus.json')}"
    with pytest.raises(PrepError) as e:  # checked before anything is written
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    assert expect.format(where=url) in str(e.value) and url in str(e.value)
    assert len(str(e.value)) < 400
    assert not dest.exists()
    with pytest.raises(PrepError) as e:  # the same check on a parsed document
        list_parts(doc, WIKI, DATE, multistream=True)
    assert expect.format(where="dumpstatus.json") in str(e.value)


@pytest.mark.parametrize("body, expect", [
    (b"\xff\xfe" + b"0" * 100, "is not a text checksum file (starts b'\\xff\\xfe000"),
    (("0" * 40 + "  " + BIG + "\n").encode(), "line 1 has 40 hex digits, not the 32 of md5"),
    (b"\x1b]0;owned\x07" + b"A" * 100_000 + b"\n", "line 1 is not '<hex> <filename>': '\\x1b]0;owned\\x07AAA"),
], ids=["not-utf8", "sha1-in-md5sums", "control-characters"])
def test_bad_checksum_file_is_one_short_line(site, tmp_path, body, expect):
    srv, files, dest = site
    (tmp_path / "site" / WIKI / DATE / f"{P}md5sums.txt").write_bytes(body)
    with pytest.raises(PrepError) as e:
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    message = str(e.value)
    assert message.startswith(f"{srv.url}{url_path(f'{P}md5sums.txt')}") and expect in message
    assert message.isprintable() and len(message) < 300
    assert not dest.exists()


def test_error_lines_quote_a_server_only_by_a_short_escaped_excerpt(site, tmp_path):
    srv, files, dest = site
    hostile = "\x1b[2J" + "B" * 10_000
    (tmp_path / "site" / WIKI / DATE / "dumpstatus.json").write_text(hostile)
    with pytest.raises(PrepError) as e:
        fetch_dump_status(srv.url, WIKI, DATE, dest, **FAST_STATUS)
    assert "(starts b'\\x1b[2JBBB" in str(e.value) and str(e.value).isprintable() and len(str(e.value)) < 250
    # A reason phrase with control characters, ten thousand long.
    srv.add_fault(url_path("dumpstatus.json"), "status", times=None, code=503, reason="\x07" + "C" * 10_000)
    with pytest.raises(PrepError) as e:
        fetch_dump_status(srv.url, WIKI, DATE, dest, retries=1, **FAST_STATUS)
    assert str(e.value).endswith("after 1 retries: HTTP 503 '\\x07" + "C" * 79 + "'...")
    assert not dest.exists()


@pytest.mark.parametrize("wiki, date, expect", [
    ("../../escape", DATE, "--wiki '../../escape': not a wiki database name"),
    ("en/wiki", DATE, "--wiki 'en/wiki'"),
    (".hidden", DATE, "--wiki '.hidden'"),
    ("", DATE, "--wiki ''"),
    ("enwiki\n", DATE, "--wiki 'enwiki\\n'"),
    (WIKI, "../2024", "--dump-date '../2024': give the date of a dump as YYYYMMDD"),
    (WIKI, "latest", "--dump-date 'latest'"),
    (WIKI, "20241301", "--dump-date '20241301'"),
    (WIKI, "２０２４０１０１", "--dump-date '２０２４０１０１'"),
])
def test_wiki_and_date_must_be_plain_names_before_anything_is_fetched(site, tmp_path, wiki, date, expect):
    srv, files, dest = site
    for call in (lambda: dump_parts(srv.url, wiki, date, dest / "x"),
                 lambda: fetch_dump_status(srv.url, wiki, date, dest / "x", **FAST_STATUS),
                 lambda: list_parts(dest / "x", wiki, date),
                 lambda: fetch_part(srv.url, wiki, date, Part(BIG, "", 1, "0" * 40, None), dest / "x", **FAST)):
        with pytest.raises(PrepError) as e:
            call()
        assert str(e.value).startswith(expect)
    assert srv.log == [] and not dest.exists()
    check_dump_id("zh_yuewiki", "20240229")  # a real wiki name, a leap day


# ---------------------------------------------------------------------------------------------
# shardkit.fetch, called as any source calls it: a plain file (no dumps-site layout, no dumpstatus.json,
# not bz2) with a size and a sha256


PLAIN = "releases/corpus-2024.tar"
PLAIN_NAME = Path(PLAIN).name
USER_AGENT = "corpus-tests/1.0 (tests@example.invalid)"


def expect(data: bytes, **kw) -> fetch.Expected:
    return fetch.Expected(size=len(data), hashes={"sha256": hashlib.sha256(data).hexdigest()}, **kw)


def fast(**kw) -> dict:
    return {"backoff": fetch.Backoff(0.001, 0.05), "chunk": 16 * 1024, "progress_bar": False, **kw}


@pytest.fixture
def plain(tmp_path):
    """A server of a plain file, a session with the caller's User-Agent, the file's bytes, the URL and where it goes."""
    root = tmp_path / "files"
    data = random.Random(PLAIN).randbytes(200_000)
    (root / PLAIN).parent.mkdir(parents=True)
    (root / PLAIN).write_bytes(data)
    with DumpServer(root) as srv, fetch.make_session(USER_AGENT) as session:
        yield srv, session, data, f"{srv.url}/{PLAIN}", tmp_path / "out" / PLAIN_NAME


def test_any_source_fetches_a_plain_file_resumed_with_range(plain):
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "drop", after=70_000)
    receipt = fetch.fetch_file(session, url, dest, expect(data), **fast())
    assert receipt == read_receipt(dest) == {"file": PLAIN_NAME, "size": len(data),
                                             "sha256": hashlib.sha256(data).hexdigest(), "url": url}
    assert_clean(dest.parent, PLAIN_NAME, data)
    first, second = srv.log_for(f"/{PLAIN}")
    assert first.status == 200 and first.body_sent == 70_000
    # The client resumes from what it wrote: whole chunks of what arrived (urllib3 drops the
    # partial chunk that was being read when the connection broke).
    start = second.range_start
    assert 70_000 - fast()["chunk"] < start <= 70_000
    assert second.headers.get("Range") == f"bytes={start}-"
    assert second.headers.get("If-Range") == '"' + hashlib.sha1(data).hexdigest()[:16] + '"'
    assert second.status == 206 and second.body_sent == len(data) - start  # the rest, not the whole file
    assert {s.headers["User-Agent"] for s in srv.log} == {USER_AGENT}

    n = len(srv.log)
    assert fetch.fetch_file(session, url, dest, expect(data), **fast()) == receipt
    assert len(srv.log) == n, "a committed file was requested again"


def test_interrupted_fetch_resumes_in_the_next_call(plain):
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "drop", after=50_000)
    with pytest.raises(PrepError, match=rf"^giving up on {PLAIN_NAME} from {url} after 0 retries"):
        fetch.fetch_file(session, url, dest, expect(data), **fast(retries=0))
    had = dest.with_name(f"{PLAIN_NAME}.part").read_bytes()
    assert 0 < len(had) <= 50_000 and data.startswith(had)
    assert_clean(dest.parent, PLAIN_NAME, None)

    fetch.fetch_file(session, url, dest, expect(data), **fast())  # a new call hashes the .part and resumes
    assert_clean(dest.parent, PLAIN_NAME, data)
    first, last = srv.log_for(f"/{PLAIN}")
    assert last.headers.get("Range") == f"bytes={len(had)}-" and "If-Range" in last.headers and last.status == 206
    assert last.body_sent == len(data) - len(had)


def test_changed_file_restarts_from_scratch(plain):
    srv, session, old, url, dest = plain
    new = old[:10] + bytes(b ^ 0x55 for b in old[10:])  # same size, other bytes from byte 10 on
    # The old file is cut after 60 000 bytes, then replaced on the server (new ETag).
    srv.add_fault(f"/{PLAIN}", "drop", after=60_000)
    srv.add_fault(f"/{PLAIN}", "replace", data=new)
    fetch.fetch_file(session, url, dest, expect(new), **fast())
    assert_clean(dest.parent, PLAIN_NAME, new)
    first, second = srv.log_for(f"/{PLAIN}")
    assert 0 < second.range_start <= 60_000 and second.headers["If-Range"] == '"' + hashlib.sha1(old).hexdigest()[:16] + '"'
    assert second.status == 200 and second.body_sent == len(new)  # stale validator: whole new file


def test_timeout_is_retried_and_resumed(plain):
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "stall", after=40_000, seconds=1.5)
    fetch.fetch_file(session, url, dest, expect(data), **fast(timeout=0.3))
    assert_clean(dest.parent, PLAIN_NAME, data)
    first, last = srv.log_for(f"/{PLAIN}")
    start = last.range_start
    assert 40_000 - fast()["chunk"] < start <= 40_000 and last.status == 206
    assert last.body_sent == len(data) - start


@pytest.mark.parametrize("code, retry_after, waits", [
    (503, "1", 0.95),
    (429, email.utils.formatdate(time.time() - 60, usegmt=True), 0),  # an HTTP date already past: no wait
])
def test_503_with_retry_after_is_retried(plain, code, retry_after, waits):
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "status", code=code, headers={"Retry-After": retry_after})
    t0 = time.monotonic()
    fetch.fetch_file(session, url, dest, expect(data), **fast(backoff=fetch.Backoff(3, 5)))
    elapsed = time.monotonic() - t0
    assert waits <= elapsed < 2.5, "Retry-After was not honoured (the back-off base would wait 3 s)"
    assert [s.status for s in srv.log_for(f"/{PLAIN}")] == [code, 200]
    assert_clean(dest.parent, PLAIN_NAME, data)


def test_persistent_503_gives_up(plain):
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "status", times=None, code=503)
    with pytest.raises(PrepError, match=rf"^giving up on {PLAIN_NAME} from {url} after 2 retries: HTTP 503 Service Unavailable$"):
        fetch.fetch_file(session, url, dest, expect(data), **fast(retries=2))
    assert len(srv.log_for(f"/{PLAIN}")) == 3
    assert_clean(dest.parent, PLAIN_NAME, None)


def test_final_file_without_receipt_is_verified_not_refetched(plain):
    srv, session, data, url, dest = plain
    dest.parent.mkdir(parents=True)
    dest.write_bytes(data)  # renamed into place, killed before the receipt
    receipt = fetch.fetch_file(session, url, dest, expect(data), **fast())
    assert srv.log == [] and receipt["sha256"] == hashlib.sha256(data).hexdigest()
    assert_clean(dest.parent, PLAIN_NAME, data)
    other = dest.with_name("other.tar")
    other.write_bytes(b"half")  # a wrong file under the final name is replaced
    fetch.fetch_file(session, url, other, expect(data), **fast())
    assert_clean(dest.parent, "other.tar", data)


def _fetch_in_a_process(queue, url, dest, expected) -> None:
    with fetch.make_session(USER_AGENT) as session:
        queue.put(fetch.fetch_file(session, url, dest, expected, **fast()))


def test_two_processes_fetching_one_file_take_turns(plain):
    """A duplicate run's fetch of the same file waits for the first (a flock on <name>.part.lock), then finds
    it committed: one transfer, never two writers in one .part."""
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "stall", after=50_000, seconds=1.5)  # the first transfer is slow
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    first = ctx.Process(target=_fetch_in_a_process, args=(queue, url, dest, expect(data)))
    first.start()
    deadline = time.monotonic() + 30
    while not srv.log_for(f"/{PLAIN}"):  # the first is transferring, holding the lock
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = ctx.Process(target=_fetch_in_a_process, args=(queue, url, dest, expect(data)))
    second.start()
    receipts = [queue.get(timeout=60), queue.get(timeout=60)]
    for proc in (first, second):
        proc.join(timeout=30)
        assert proc.exitcode == 0
    assert receipts[0] == receipts[1] == read_receipt(dest)
    assert len(srv.log_for(f"/{PLAIN}")) == 1, "the second process fetched the file again"
    assert_clean(dest.parent, PLAIN_NAME, data)


def test_a_source_words_its_expectations_and_refusals(plain):
    """Error lines name where the expected values come from (`source`), a magic by its format; a final status is
    a ServerRefused the caller can tell apart (the dump words 404 and 403 its own way)."""
    srv, session, data, url, dest = plain
    with pytest.raises(PrepError, match=rf"^{url} serves {len(data)} bytes of {PLAIN_NAME}, SHA256SUMS says 5 "):
        fetch.fetch_file(session, url, dest, fetch.Expected(5, {"sha256": "0" * 64}, source="SHA256SUMS"),
                         **fast(verify_attempts=1))
    gzip = fetch.Magic("gzip", b"\x1f\x8b")
    with pytest.raises(PrepError, match=rf"^{url} does not start with the gzip magic '\\x1f\\x8b' "):
        fetch.fetch_file(session, url, dest, expect(data, magic=gzip), **fast(verify_attempts=1))
    receipt = fetch.fetch_file(session, url, dest, fetch.Expected(None, {"md5": hashlib.md5(data).hexdigest()}), **fast())
    assert receipt["md5"] == hashlib.md5(data).hexdigest() and receipt["sha256"] == hashlib.sha256(data).hexdigest()
    assert_clean(dest.parent, PLAIN_NAME, data)

    missing = f"{srv.url}/releases/gone.tar"
    with pytest.raises(fetch.ServerRefused) as e:
        fetch.fetch_file(session, missing, dest.with_name("gone.tar"), expect(data), **fast())
    assert (e.value.status, e.value.url, str(e.value)) == (404, missing, f"missing gone.tar: {missing}: 404")
    srv.add_fault("/releases/gone.tar", "status", code=410)
    with pytest.raises(fetch.ServerRefused, match=rf"^{missing}: HTTP 410 Gone for gone.tar$"):
        fetch.fetch_file(session, missing, dest.with_name("gone.tar"), expect(data), **fast())
    assert_clean(dest.parent, "gone.tar", None)

    with pytest.raises(PrepError, match="^no hash for x.tar: cannot verify the download$"):
        fetch.fetch_file(session, url, dest.with_name("x.tar"), fetch.Expected(len(data), {}), **fast())
    with pytest.raises(ValueError, match="sha256 must be 64 lowercase hex digits"):
        fetch.Expected(1, {"sha256": "A" * 64})


def test_read_small_reads_under_its_cap_and_refuses_past_it(plain, tmp_path):
    srv, session, data, url, dest = plain
    assert fetch.read_small(session, url, cap=len(data)) == (200, data)
    assert fetch.read_small(session, f"{srv.url}/releases/none", cap=10) == (404, b"")
    with pytest.raises(PrepError, match=rf"^{url} is larger than 199,999 bytes$"):
        fetch.read_small(session, url, cap=len(data) - 1)
    local = tmp_path / "files" / PLAIN
    assert fetch.read_small_file(local, cap=len(data)) == data
    with pytest.raises(PrepError, match=rf"^{local} is larger than 1,000 bytes: not a release listing$"):
        fetch.read_small_file(local, cap=1000, kind="a release listing")


# ---------------------------------------------------------------------------------------------
# Issue #27: never through a link, and every transfer bounded


@pytest.mark.parametrize("suffix, dangling", [("", False), (".part", False), (".part", True), (".part.json", False),
                                              (".part.lock", False), (".part.lock", True)])
def test_a_link_in_the_download_folder_is_refused_never_written_through(site, tmp_path, suffix, dangling):
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    outside = tmp_path / "outside.txt"
    if not dangling:
        outside.write_bytes(b"precious")
    link = dest / (BIG + suffix)
    link.symlink_to(outside)
    with pytest.raises(PrepError) as e:
        fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, **FAST)
    assert str(e.value) == f"{link} is a symbolic link: refusing to write through it (remove it to download again)"
    assert (outside.read_bytes() == b"precious") if not dangling else not outside.exists()
    assert link.is_symlink() and (suffix == "" or not (dest / BIG).exists())
    assert not receipt_path(dest / BIG).exists()


def test_a_part_file_swapped_for_a_link_is_not_followed(plain, tmp_path):
    """The check on the descriptor: a link planted where the .part is opened (after the up-front checks)."""
    srv, session, data, url, dest = plain
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    part = dest.with_name(PLAIN_NAME + ".part")
    part.parent.mkdir(parents=True)
    real = fetch._fetch_lock

    @__import__("contextlib").contextmanager
    def plant(lock_path):
        with real(lock_path):
            part.symlink_to(outside)
            yield

    fetch._fetch_lock = plant
    try:
        with pytest.raises(PrepError, match=r"\.part is a symbolic link: refusing to write through it"):
            fetch.fetch_file(session, url, dest, expect(data), **fast())
    finally:
        fetch._fetch_lock = real
    assert outside.read_bytes() == b"precious" and not dest.exists()


def test_a_server_ignoring_range_and_dropping_every_time_is_given_up(site):
    """(a) Each attempt restarts from byte 0 and is cut at the same place: no progress, so the retries run out."""
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path(BIG), "norange", times=20)
    srv.add_fault(url_path(BIG), "drop", times=20, after=50_000)
    with pytest.raises(PrepError, match=rf"^giving up on {re.escape(BIG)} from .* after 3 retries: ") as e:
        fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, retries=3, **FAST)
    assert "\n" not in str(e.value)
    assert len(srv.log_for(url_path(BIG))) == 4  # one that brought bytes, then 3 retries without progress
    assert_clean(dest, BIG, None)


def test_a_trickling_server_is_timed_out_by_its_rate(plain):
    """(b) One byte every 50 ms never trips a read timeout; the minimum rate ends each attempt, the retries run out."""
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "trickle", times=3, interval=0.05, seconds=5)
    t0 = time.monotonic()
    with pytest.raises(PrepError, match=rf"^giving up on {PLAIN_NAME} from {url} after 2 retries: "
                                        r"slower than 1000 bytes/s for 0.3 s \("):
        fetch.fetch_file(session, url, dest, expect(data), **fast(retries=2, timeout=1, min_rate=1000, rate_window=0.3))
    assert time.monotonic() - t0 < 3
    assert len(srv.log_for(f"/{PLAIN}")) == 3


def test_a_trickle_is_given_up_within_the_stall_budget_whatever_the_retries(plain):
    srv, session, data, url, dest = plain
    srv.add_fault(f"/{PLAIN}", "trickle", times=None, interval=0.05, seconds=5)
    t0 = time.monotonic()
    with pytest.raises(PrepError, match=rf"^giving up on {PLAIN_NAME} from {url}: no progress for 1.2 s: slower"):
        fetch.fetch_file(session, url, dest, expect(data),
                         **fast(retries=1000, timeout=1, min_rate=1000, rate_window=0.2, stall_budget=1.2))
    assert time.monotonic() - t0 < 3


def test_a_server_that_never_answers_fails_within_the_budget(site):
    """(c) Accepts, never answers: the plan's status read and a part's download each end within the stall budget."""
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path("dumpstatus.json"), "silent", times=None, seconds=10)
    srv.add_fault(url_path(BIG), "silent", times=None, seconds=10)
    t0 = time.monotonic()
    with pytest.raises(PrepError, match=r"^giving up on http://.*/dumpstatus\.json: no answer in 1.5 s: .*Timeout") as e:
        read_dump_status(srv.url, WIKI, DATE, retries=1000, timeout=0.4, stall_budget=1.5, **FAST_STATUS)
    assert "\n" not in str(e.value) and time.monotonic() - t0 < 3
    t0 = time.monotonic()
    with pytest.raises(PrepError, match=rf"^giving up on {re.escape(BIG)} from .*: no progress for 1.5 s: .*Timeout"):
        fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, retries=1000, timeout=0.4, stall_budget=1.5, **FAST)
    assert time.monotonic() - t0 < 3
    # The defaults: a server that never answers fails in about two minutes, connect and read timeouts within it.
    assert fetch.STALL_BUDGET <= 120 and max(fetch.CONNECT_TIMEOUT, fetch.READ_TIMEOUT) < fetch.STALL_BUDGET


def test_a_server_trickling_its_headers_fails_within_the_budget(site):
    """(b) for the answer's head: the status line and headers a byte every 50 ms trip no per-read timeout; the
    watchdog ends each attempt after the read timeout, and the stall budget ends the download, the status read too."""
    srv, files, dest = site
    parts = _status_and_parts(srv, dest)
    srv.add_fault(url_path("dumpstatus.json"), "slowheaders", times=None, interval=0.05, seconds=20)
    srv.add_fault(url_path(BIG), "slowheaders", times=None, interval=0.05, seconds=20)
    t0 = time.monotonic()
    with pytest.raises(PrepError, match=r"^giving up on http://.*/dumpstatus\.json: no answer in 1.5 s: Timeout: "
                                        r"no status line and headers within 0\.\d+ s from ") as e:
        read_dump_status(srv.url, WIKI, DATE, retries=1000, timeout=0.4, stall_budget=1.5, **FAST_STATUS)
    assert "\n" not in str(e.value) and time.monotonic() - t0 < 4
    t0 = time.monotonic()
    with pytest.raises(PrepError, match=rf"^giving up on {re.escape(BIG)} from .*: no progress for 1.5 s: Timeout: "
                                        r"no status line and headers within 0\.\d+ s from "):
        fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, retries=1000, timeout=0.4, stall_budget=1.5, **FAST)
    assert time.monotonic() - t0 < 4
    assert_clean(dest, BIG, None)


def test_an_endless_body_without_a_size_is_refused_at_the_cap(tmp_path):
    """(d) dumpstatus.json without sizes: the body is capped (MAX_PART_SIZE by default), the .part discarded."""
    root = tmp_path / "site"
    files = make_dump(root)
    status = root / WIKI / DATE / "dumpstatus.json"
    doc = json.loads(status.read_text())
    for entry in doc["jobs"]["articlesdump"]["files"].values():
        del entry["size"]
    status.write_text(json.dumps(doc))
    dest = tmp_path / "dl"
    with DumpServer(root) as srv:
        parts = _status_and_parts(srv, dest)
        assert parts[BIG].size is None
        srv.add_fault(url_path(BIG), "endless", times=None, prefix=b"BZh91AY&SY", byte=b"x")
        with pytest.raises(PrepError, match=rf"^http://.* sent more than 1 MiB of {re.escape(BIG)}, the most a file may "
                                            r"have when dumpstatus.json gives no size; the file was discarded$"):
            fetch_part(srv.url, WIKI, DATE, parts[BIG], dest, max_size=1 << 20, **FAST)
        assert_clean(dest, BIG, None)
        assert not (dest / f"{BIG}.part").exists()
        # Within the cap, a part without a size downloads as before.
        fetch_part(srv.url, WIKI, DATE, parts[SPLIT[1]], dest, max_size=1 << 20, **FAST)
        assert_clean(dest, SPLIT[1], files[SPLIT[1]])
    assert dl_max_default() == 64 << 30


def dl_max_default() -> int:
    from wikiprep.wikipedia.dump import MAX_PART_SIZE
    return MAX_PART_SIZE
