"""Both Slurm modes on a real Slurm (docs/cluster.md, "Slurm"); `make test-slurm` brings one up on this machine.

Not part of `make test`: pytest collects tests/ only (pyproject.toml, testpaths). Without a
reachable Slurm every test here skips and says why; `make test-slurm` sets WIKIPREP_REQUIRE_SLURM=1,
so that there a skip is a failure, never a pass.

The embedded sample dump, 4 shards, a trained vocabulary of 8000; --dupe-factor 100 so that a shard
takes a few seconds to write, long enough to be cancelled in the middle.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VENV = Path(sys.executable).parent.parent  # not resolved: a venv's python is a symlink
WIKI, DATE = "enwiki", "20260101"  # workflows.DEMO_WIKI, DEMO_DATE
STAGES = ["download", "punkt", "pieces", "sentences", "vocab", "shards", "finalize"]  # a vocabulary is trained
DATASET = Path(f"{WIKI}-{DATE}") / "seq128_mask20_dup100_shards4"  # dataset.folder_name of params()
TIMEOUT = 900


def _slurm_missing() -> str | None:
    if not shutil.which("sbatch"):
        return "sbatch not found: no Slurm here (make test-slurm installs one and starts it)"
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        return f"no Slurm controller answers (SLURM_CONF={os.environ.get('SLURM_CONF')}): {(r.stderr.strip().splitlines() or [''])[-1]}"
    return None


@pytest.fixture(scope="module", autouse=True)
def slurm():
    reason = _slurm_missing()
    if reason:
        if os.environ.get("WIKIPREP_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)


def env() -> dict:
    return dict(os.environ, WIKIPREP_VENV=str(VENV), PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    sys.path.insert(0, str(REPO))
    from wikiprep.wikipedia.samples import write_sample_dump
    root = tmp_path_factory.mktemp("site")
    write_sample_dump(root, WIKI, DATE)
    return root


def params(site: Path, data: Path) -> list[str]:
    return ["--data-dir", str(data), "--dump-url", site.as_uri(), "--wiki", WIKI, "--dump-date", DATE,
            "--num-shards", "4", "--vocab-size", "8000", "--dupe-factor", "100"]


@pytest.fixture(scope="module")
def serial_manifest(site, tmp_path_factory) -> bytes:
    """The reference: one process, the local scheduler, one worker."""
    data = tmp_path_factory.mktemp("serial") / "data"
    r = subprocess.run([str(VENV / "bin" / "luigi"), "--module", "workflows", "Pretrain128", *params(site, data),
                        "--local-scheduler", "--workers", "1"], cwd=REPO, env=env(), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    return (data / DATASET / "MANIFEST.json").read_bytes()


# ---------------------------------------------------------------------------------------------
# Slurm helpers

def submit_chain(site: Path, data: Path, **more_env: str) -> dict[str, tuple[str, str]]:
    """make slurm-wiki-128, as the Makefile runs it: {stage: (job id, --array spec or '')}."""
    r = subprocess.run([str(REPO / "cluster/slurm/submit.sh"), "128", *params(site, data)], cwd=REPO,
                       env=dict(env(), **more_env), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = {}
    for line in r.stdout.splitlines():
        m = re.fullmatch(r"(\w+) (\d+)(?: --array=(\S+))?", line)
        if m:
            jobs[m[1]] = (m[2], m[3] or "")
    return jobs


def sbatch(*args: str) -> str:
    r = subprocess.run(["sbatch", "--parsable", *args], cwd=REPO, env=env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def wait_gone(ids: list[str], timeout: float = TIMEOUT) -> None:
    """Until none of these jobs is pending or running."""
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(ids)], capture_output=True, text=True)
        if not r.stdout.strip():
            return
        assert time.monotonic() < deadline, f"jobs still queued after {timeout} s:\n{r.stdout}"
        time.sleep(0.5)


def states(job: str) -> dict[str, str]:
    """{array index or '': state} of a job Slurm still remembers (MinJobAge, 300 s by default)."""
    r = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        index = re.search(r"\bArrayTaskId=(\S+)", line)
        out[index[1] if index else ""] = re.search(r"\bJobState=(\S+)", line)[1]
    return out


def wait_for_temporary(folder: Path, job_ids: list[str]) -> Path:
    """The first shard temporary to appear in `folder`: a shard being written right now."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        found = sorted(folder.glob("wiki_*.tfrecord.tmp-*"))
        if found:
            return found[0]
        assert time.monotonic() < deadline, "no shard was ever being written"
        if int(time.monotonic()) % 5 == 0:
            r = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids)], capture_output=True, text=True)
            assert r.stdout.strip(), "the jobs ended before any shard was written"
        time.sleep(0.02)


def leftovers(data: Path) -> list[str]:
    return [str(p) for p in data.rglob("*") if ".tmp-" in p.name or "-luigi-tmp-" in p.name]


# ---------------------------------------------------------------------------------------------

def test_job_array_chain_resumes_after_a_shard_element_is_cancelled(site, serial_manifest, tmp_path):
    data = tmp_path / "data"
    dataset = data / DATASET
    jobs = submit_chain(site, data)
    assert list(jobs) == STAGES, jobs
    assert jobs["pieces"][1] == "0-1" and jobs["sentences"][1] == "0-3" and jobs["shards"][1] == "0-3", jobs
    ids = [job for job, _ in jobs.values()]

    # Cancel the element of the first shard being written, in the middle of its write.
    tmp = wait_for_temporary(dataset, ids)
    shard = int(tmp.name[len("wiki_"):len("wiki_00000")])
    shards_job = jobs["shards"][0]
    subprocess.run(["scancel", f"{shards_job}_{shard}"], check=True)
    wait_gone(ids)

    assert states(shards_job)[str(shard)] == "CANCELLED", states(shards_job)
    # Each sentence shard was merged by its own element.
    assert states(jobs["sentences"][0]) == {str(i): "COMPLETED" for i in range(4)}, states(jobs["sentences"][0])
    assert states(jobs["vocab"][0]) == {"": "COMPLETED"}
    assert states(jobs["finalize"][0])[""] == "CANCELLED"  # --kill-on-invalid-dep: not pending forever
    assert not (dataset / ".receipts" / f"{tmp.name.split('.tmp-')[0]}.json").exists(), "cancelled too late"
    assert not (dataset / "MANIFEST.json").exists()
    assert not leftovers(data), "the cancelled element left temporaries"  # SIGTERM unwinds the write

    # The same command again submits only what is missing: that element, then finalize.
    again = submit_chain(site, data)
    assert list(again) == ["shards", "finalize"] and again["shards"][1] == str(shard), again
    wait_gone([job for job, _ in again.values()])
    assert states(again["shards"][0]) == {str(shard): "COMPLETED"}
    assert states(again["finalize"][0]) == {"": "COMPLETED"}
    log = dataset.parent / "slurm" / dataset.name / "logs" / f"wikiprep-finalize-{again['finalize'][0]}.out"
    assert f"OK {dataset}: " in log.read_text(), log.read_text()[-3000:]

    assert (dataset / "MANIFEST.json").read_bytes() == serial_manifest
    assert not leftovers(data)
    # Nothing left to do: a third submission submits nothing.
    assert submit_chain(site, data) == {}


def test_a_requeued_shard_element_runs_again_and_the_chain_goes_on(site, serial_manifest, tmp_path):
    """What preemption with PreemptMode=REQUEUE and a node failure do to an element (--requeue)."""
    data = tmp_path / "data"
    dataset = data / DATASET
    jobs = submit_chain(site, data)
    ids = [job for job, _ in jobs.values()]
    tmp = wait_for_temporary(dataset, ids)
    element = f"{jobs['shards'][0]}_{int(tmp.name[len('wiki_'):len('wiki_00000')])}"
    subprocess.run(["scontrol", "requeue", element], check=True)
    # Slurm holds a requeued job back for two minutes (BeginTime); once it is pending again, let it start now.
    deadline = time.monotonic() + 120
    while "JobState=PENDING" not in subprocess.run(["scontrol", "-o", "show", "job", element],
                                                   capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the requeued element never became pending"
        time.sleep(0.2)
    subprocess.run(["scontrol", "update", f"JobId={element}", "StartTime=now"], check=True)
    wait_gone(ids)

    r = subprocess.run(["scontrol", "-o", "show", "job", element], capture_output=True, text=True, check=True)
    assert "Restarts=1" in r.stdout and "JobState=COMPLETED" in r.stdout, r.stdout
    assert states(jobs["finalize"][0]) == {"": "COMPLETED"}  # no resubmission needed
    assert (dataset / "MANIFEST.json").read_bytes() == serial_manifest
    assert not leftovers(data)


def test_an_element_started_before_its_stage_is_refused_at_once(site, tmp_path):
    """An element submitted by hand out of order fails in one line; it never redoes earlier stages."""
    data = tmp_path / "data"
    jobs = submit_chain(site, data, SBATCH_ARGS="--hold")  # only for its job.env
    subprocess.run(["scancel", *[job for job, _ in jobs.values()]], check=True)
    job_env = data / DATASET.parent / "slurm" / DATASET.name / "job.env"
    # A fresh data folder: the shard element has nothing before it.
    other = tmp_path / "other"
    text = job_env.read_text().replace(str(data), str(other))
    (tmp_path / "other.env").write_text(text)
    log = tmp_path / "early.out"
    job = sbatch("--array=1", f"--output={log}", "cluster/slurm/shards.sbatch", str(tmp_path / "other.env"))
    wait_gone([job])
    assert states(job) == {"1": "FAILED"}
    assert "wikiprep: error: stage shards needs stage download complete first" in log.read_text()
    assert not list(other.rglob("*.bz2")), "the element downloaded what the download job does"


def test_one_allocation_drains_on_the_warning_signal_and_a_resubmission_finishes(site, serial_manifest, tmp_path):
    data = tmp_path / "data"
    dataset = data / DATASET
    log = tmp_path / "wiki-%j.out"
    args = ["--nodes=1", "--cpus-per-task=2", "--mem-per-cpu=1G", f"--output={log}", "cluster/slurm/wiki.sbatch",
            "Pretrain128", *params(site, data)]
    job = sbatch(*args)

    # What `#SBATCH --signal=B:USR1@300` sends before the time limit, sent now, mid-shard.
    wait_for_temporary(dataset, [job])
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
    wait_gone([job])
    text = Path(str(log).replace("%j", job)).read_text()
    assert states(job) == {"": "FAILED"}, text[-3000:]  # verify fails: the dataset is not finished
    assert "warning signal (USR1)" in text
    receipts = list((dataset / ".receipts").glob("wiki_*.tfrecord.json"))
    assert len(receipts) < 4, "the workers kept taking new shards after the warning"
    assert not (dataset / "MANIFEST.json").exists()
    assert not leftovers(data)

    job = sbatch(*args)  # the same command again
    wait_gone([job])
    text = Path(str(log).replace("%j", job)).read_text()
    assert states(job) == {"": "COMPLETED"}, text[-3000:]
    assert f"OK {dataset}: " in text
    assert (dataset / "MANIFEST.json").read_bytes() == serial_manifest
    assert not leftovers(data)


def test_a_mixtures_chain_writes_what_one_process_writes(site, tmp_path):
    """make slurm-mix-128: the sample dump and a books folder (twice; short books, so --min-doc-chars 0), every job
    of the chain completed, and the same MANIFEST.json as PretrainMix128 with the local scheduler."""
    books = tmp_path / "books"
    books.mkdir()
    for i in range(6):
        (books / f"{i}.txt").write_text(f"Book {i} opens on a quiet morning. The river ran high after the rain.\n\n"
                                        f"Nobody in the settlement had seen book {i}'s stranger before.\n",
                                        encoding="utf-8")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(f'name = "wiki-books"\n[[source]]\nkind = "wikipedia"\nwiki = "{WIKI}"\ndump_date = "{DATE}"\n'
                      f'dump_url = "{site.as_uri()}"\n[[source]]\nkind = "text"\npath = "{books}"\nformat = "books"\n'
                      f'repeat = 2\n', encoding="utf-8")
    mix = ["--recipe", str(recipe), "--num-shards", "2", "--vocab-size", "8000", "--min-doc-chars", "0"]
    serial = tmp_path / "serial"
    r = subprocess.run([str(VENV / "bin" / "luigi"), "--module", "workflows", "PretrainMix128", "--data-dir",
                        str(serial), *mix, "--local-scheduler", "--workers", "1"], cwd=REPO, env=env(),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    data = tmp_path / "data"
    r = subprocess.run([str(REPO / "cluster/slurm/submit.sh"), "mix-128", "--data-dir", str(data), *mix], cwd=REPO,
                       env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = dict(re.fullmatch(r"(\w+) (\d+)(?: --array=\S+)?", line).groups()
                for line in r.stdout.splitlines() if re.fullmatch(r"\w+ \d+(?: --array=\S+)?", line))
    assert list(jobs) == STAGES, r.stdout
    wait_gone(list(jobs.values()))
    for stage, job in jobs.items():
        assert set(states(job).values()) == {"COMPLETED"}, (stage, states(job))
    dataset = Path("wiki-books") / "seq128_mask20_dup5_shards2"
    assert (data / dataset / "MANIFEST.json").read_bytes() == (serial / dataset / "MANIFEST.json").read_bytes()
    assert not leftovers(data)
