"""DownloadDump through the `luigi` command line against a real HTTP server: the connection cap and resume."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dumpserver import DumpServer
from test_download import DATE, SPLIT, WIKI, make_dump, url_path

REPO = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))


def download(srv, data_dir, workers, config=None, extra=()):
    env = dict(os.environ, WIKIPREP_CONTACT="tests@example.invalid")
    env.pop("LUIGI_CONFIG_PATH", None)
    if config:
        env["LUIGI_CONFIG_PATH"] = str(config)
    return subprocess.run([LUIGI, "--module", "workflows", "DownloadDump", "--data-dir", str(data_dir),
                           "--dump-url", srv.url, "--wiki", WIKI, "--dump-date", DATE, "--local-scheduler",
                           "--workers", str(workers), *extra], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_at_most_two_connections_to_the_dumps_host(tmp_path):
    files = make_dump(tmp_path / "site")
    with DumpServer(tmp_path / "site") as srv:
        for name in SPLIT:  # every part takes a while, so that the three tasks would overlap
            srv.add_fault(url_path(name), "stall", times=None, after=1000, seconds=1.0)
        r = download(srv, tmp_path / "data", workers=3)
        assert r.returncode == 0, r.stderr[-3000:]
        assert srv.max_active == 2
    dest = tmp_path / "data" / "downloads" / WIKI / DATE
    for name in SPLIT:
        assert (dest / name).read_bytes() == files[name]

    # The same run with the cap raised to 3 does open 3 connections: the limit above is luigi.cfg's doing.
    cfg = tmp_path / "three.cfg"
    cfg.write_text("[resources]\nwikimedia_http = 3\n")
    make_dump(tmp_path / "site3")
    with DumpServer(tmp_path / "site3") as srv:
        for name in SPLIT:
            srv.add_fault(url_path(name), "stall", times=None, after=1000, seconds=1.0)
        r = download(srv, tmp_path / "data3", workers=3, config=cfg)
        assert r.returncode == 0, r.stderr[-3000:]
        assert srv.max_active == 3


def test_killed_download_resumes_with_range_on_rerun(tmp_path):
    files = make_dump(tmp_path / "site")
    big = SPLIT[0]
    dest = tmp_path / "data" / "downloads" / WIKI / DATE
    with DumpServer(tmp_path / "site") as srv:
        # The server sends 150 kB of the 200 kB part, then hangs; we kill the whole run there.
        srv.add_fault(url_path(big), "stall", times=1, after=150_000, seconds=60)
        env = dict(os.environ, WIKIPREP_CONTACT="tests@example.invalid")
        proc = subprocess.Popen([LUIGI, "--module", "workflows", "DownloadPart", "--part", big,
                                 "--data-dir", str(tmp_path / "data"), "--dump-url", srv.url, "--wiki", WIKI,
                                 "--dump-date", DATE, "--local-scheduler"], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        part = dest / f"{big}.part"
        deadline = time.time() + 60
        while not (part.exists() and part.stat().st_size >= 65536) and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        had = part.stat().st_size
        assert had >= 65536 and not (dest / big).exists()

        r = download(srv, tmp_path / "data", workers=2)
        assert r.returncode == 0, r.stderr[-3000:]
        last = srv.log_for(url_path(big))[-1]
        assert last.range_start == had and last.status == 206 and last.body_sent == len(files[big]) - had
        assert (dest / big).read_bytes() == files[big] and not part.exists()


def test_missing_dump_is_one_line(tmp_path):
    make_dump(tmp_path / "site")
    with DumpServer(tmp_path / "site") as srv:
        r = subprocess.run([LUIGI, "--module", "workflows", "DownloadDump", "--data-dir", str(tmp_path / "d2"),
                            "--dump-url", srv.url, "--wiki", WIKI, "--dump-date", "20990101", "--local-scheduler"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert errors and "20990101" in errors[0] and "404" in errors[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_unfinished_dump_is_refused_then_taken_once_done(tmp_path):
    files = make_dump(tmp_path / "site", status="in-progress")
    status_file = tmp_path / "site" / WIKI / DATE / "dumpstatus.json"
    with DumpServer(tmp_path / "site") as srv:
        r = download(srv, tmp_path / "data", workers=1)
        assert r.returncode != 0
        errors = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
        assert errors and "articlesdump is 'in-progress'" in errors[0], r.stderr[-2000:]
        # The dump finishes on the server; the same command now takes it (the old local copy is refreshed).
        status_file.write_text(status_file.read_text().replace('"in-progress"', '"done"'))
        r = download(srv, tmp_path / "data", workers=2)
        assert r.returncode == 0, r.stderr[-3000:]
    dest = tmp_path / "data" / "downloads" / WIKI / DATE
    assert all((dest / name).read_bytes() == files[name] for name in SPLIT)


def test_download_settings_from_the_command_line_and_luigi_cfg_bound_an_unanswering_server(tmp_path):
    """A dumps server that accepts and never answers, through Luigi's command line: `--download-stall-budget`
    (or `[download] stall_budget` in luigi.cfg) ends the run in seconds, with one error line, not minutes."""
    make_dump(tmp_path / "site")
    with DumpServer(tmp_path / "site") as srv:
        srv.add_fault(url_path("dumpstatus.json"), "silent", times=None, seconds=60)
        started = time.monotonic()
        r = download(srv, tmp_path / "data", 1, extra=["--download-stall-budget", "2", "--download-retries", "1"])
        assert time.monotonic() - started < 30
        assert r.returncode != 0
        errors = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
        assert errors and all("no answer in 2" in line for line in errors), r.stderr[-2000:]

        config = tmp_path / "luigi.cfg"
        config.write_text("[download]\nstall_budget = 2\nretries = 1\n")
        started = time.monotonic()
        r = download(srv, tmp_path / "data", 1, config=config)
        assert time.monotonic() - started < 30 and r.returncode != 0
        assert any(line.startswith("wikiprep: error:") and "no answer in 2" in line for line in r.stderr.splitlines())


def test_a_download_damaged_in_place_is_blamed_removed_and_fetched_again(tmp_path):
    """A byte of a verified part flipped on the disk keeps its size, so its receipt still holds: extraction fails on
    it. The error then blames the download (its sha256 against its receipt's, which the listing's sha1 verified), not
    the dump, and removes it, so that the
    same command fetches it again and finishes."""
    from wikiprep.wikipedia.samples import write_sample_dump
    from workflows import DEMO_DATE, DEMO_WIKI

    write_sample_dump(tmp_path / "site", wiki=DEMO_WIKI, date=DEMO_DATE)
    part = sorted(p.name for p in (tmp_path / "site" / DEMO_WIKI / DEMO_DATE).glob("*.bz2"))[0]
    env = dict(os.environ, WIKIPREP_CONTACT="tests@example.invalid")
    env.pop("LUIGI_CONFIG_PATH", None)
    extract = [LUIGI, "--module", "workflows", "ExtractPart", "--part", part, "--data-dir", str(tmp_path / "data"),
               "--dump-url", (tmp_path / "site").as_uri(), "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE,
               "--local-scheduler"]
    download_part = extract[:3] + ["DownloadPart"] + extract[4:]
    r = subprocess.run(download_part, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    local = tmp_path / "data" / "downloads" / DEMO_WIKI / DEMO_DATE / part
    good = local.read_bytes()
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 0xFF
    local.write_bytes(bytes(damaged))

    r = subprocess.run(extract, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert len(lines) == 1 and f"{local}: damaged since it was committed: sha256 " in lines[0], r.stderr[-3000:]
    assert "its receipt says" in lines[0] and "removed with its receipt" in lines[0]
    assert not local.exists() and not (local.parent / ".receipts" / f"{part}.json").exists()

    r = subprocess.run(extract, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert local.read_bytes() == good
