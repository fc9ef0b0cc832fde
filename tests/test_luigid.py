"""Cluster mode against a real luigid on 127.0.0.1: a worker killed, luigid killed, eight workers at once.

Real luigid and worker processes through Luigi's command line, as `make luigid` and
`make wiki-128 SCHEDULER=host:port` run them: cluster/luigi-cluster.cfg, with its timers shortened
so that a dead worker is noticed in seconds instead of minutes. Each process has its own process
group (as on a node of its own), killed as a whole. The tests poll luigid's HTTP API and the files
instead of sleeping, and every daemon is killed at the end, pass or fail.

Each task's executions are counted from the workers' logs: Luigi logs `running   Task(...)` when a
worker starts a task, and `new requirements   Task(...)` when one stops to wait for a dynamic
dependency (TrainPunkt), to start again later.
"""

from __future__ import annotations

import collections
import configparser
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from testkit.synthetic_dump import write_synthetic_dump
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
from fixture_paths import REFERENCE_VOCAB as VOCAB  # noqa: E402
WIKI, DATE = "enwiki", "20260101"
DATASET = Path(f"{WIKI}-{DATE}") / folder_name(GenerationOptions(dupe_factor=5), num_shards=4)

# Luigi's timers, shortened for a test; the shipped values and their reasons are in the cluster config.
FAST = {"worker": {"ping_interval": "0.5", "wait_interval": "0.3", "wait_jitter": "0.3"},
        "scheduler": {"worker_disconnect_delay": "8", "retry_delay": "1",
                      # luigid prunes dead workers on every request for work, not only once a minute
                      "prune_on_get_work": "true"},
        # A luigid restart takes a few seconds on a loaded machine: retry every second for a minute.
        "core": {"rpc_retry_attempts": "60", "rpc_retry_wait": "1"}}

EVENT = re.compile(r"\] Worker Worker\([^)]*\) (running|new requirements|done)\s+(\S.*)$")


def env(config: Path | None = None) -> dict:
    e = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    e.pop("LUIGI_CONFIG_PATH", None)
    if config is not None:
        e["LUIGI_CONFIG_PATH"] = str(config)
    return e


def pretrain_args(site: Path, data: Path) -> list[str]:
    return ["Pretrain128", "--data-dir", str(data), "--dump-url", site.as_uri(), "--wiki", WIKI, "--dump-date", DATE,
            "--num-shards", "4", "--vocab-file", str(VOCAB)]


def wait_for(condition, what: str, timeout: float = 180, alive=()):
    """Poll `condition` until it returns something true; fail if a process in `alive` ends first."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        for proc in alive:
            assert proc.poll() is None, f"{proc.args[:4]} ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp-" in p.name]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Luigid:
    """A luigid on 127.0.0.1 with its state in `folder`, started and killed as the tests need."""

    def __init__(self, folder: Path, config: Path):
        self.folder, self.config = folder, config
        self.state = folder / "state.pickle"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "stderr.log", "ab") as log:
            self.proc = subprocess.Popen([str(BIN / "luigid"), "--address", "127.0.0.1", "--port", str(self.port),
                                          "--state-path", str(self.state), "--logdir", str(self.folder)],
                                         cwd=REPO, env=env(self.config), stdout=log, stderr=log,
                                         start_new_session=True)
        wait_for(self._answers, "luigid to answer", timeout=60, alive=[self.proc])

    def _answers(self) -> bool:
        try:
            self.api("ping", worker="test")
            return True
        except OSError:
            return False

    def api(self, method: str, **data):
        query = urllib.parse.urlencode({"data": json.dumps(data)})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/{method}?{query}", timeout=10) as r:
            return json.loads(r.read())["response"]

    def done(self, family: str) -> list[str]:
        """The ids of the tasks of `family` luigid lists as done."""
        try:
            return [t for t in self.api("task_list", status="DONE", upstream_status="", search=family)
                    if t.startswith(family + "_")]
        except OSError:
            return []

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)


class Workers:
    """Luigi worker processes, each in its own process group, with its log in a file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], config: Path, name: str) -> subprocess.Popen:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([str(BIN / "luigi"), "--module", "workflows", *args], cwd=REPO, env=env(config),
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        proc.name = name
        self.procs.append(proc)
        return proc

    def log(self, proc: subprocess.Popen) -> str:
        return (self.folder / f"{proc.name}.log").read_text(errors="replace")

    def executions(self, procs=None) -> collections.Counter:
        """Task -> times a worker started it, less the times it stopped for a dynamic dependency."""
        counts = collections.Counter()
        for proc in procs or self.procs:
            for line in self.log(proc).splitlines():
                m = EVENT.search(line)
                if m and m[1] != "done":
                    counts[m[2]] += 1 if m[1] == "running" else -1
        return counts

    def unfinished(self, proc: subprocess.Popen) -> set[str]:
        """The tasks `proc` started and did not finish: what it was running when it died."""
        events = [m for m in map(EVENT.search, self.log(proc).splitlines()) if m]
        return {m[2] for m in events} - {m[2] for m in events if m[1] == "done"}

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    write_synthetic_dump(root, WIKI, DATE, xml_mb=2.0, parts=4)
    return root


@pytest.fixture(scope="module")
def serial(site, tmp_path_factory) -> tuple[bytes, set[str]]:
    """MANIFEST.json of a serial --local-scheduler run, and the names of the tasks it ran."""
    data = tmp_path_factory.mktemp("serial")
    r = subprocess.run([str(BIN / "luigi"), "--module", "workflows", *pretrain_args(site, data), "--local-scheduler",
                        "--workers", "1"], cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    tasks = {m[2].replace(str(data), "DATA") for m in map(EVENT.search, r.stderr.splitlines()) if m and m[1] == "done"}
    return (data / DATASET / "MANIFEST.json").read_bytes(), tasks


def own_work(tasks: set[str]) -> set[str]:
    """The tasks a cluster worker executes: SplitDump's outputs are its requirements' (it only judges
    their receipts), so it is complete as soon as they are, and a ClusterWorker, which asks complete()
    before running a task, reports it done where the serial run executed its run()."""
    return {task for task in tasks if not task.startswith("SplitDump(")}


def cluster_config(path: Path, **changes: dict[str, str]) -> Path:
    """Write cluster/luigi-cluster.cfg with the test's timers and `changes` (section -> {key: value}) to `path`."""
    config = configparser.ConfigParser()
    config.read(REPO / "cluster" / "luigi-cluster.cfg")
    for section, values in [*FAST.items(), *changes.items()]:
        for key, value in values.items():
            config.set(section, key, value)
    with open(path, "w") as f:
        config.write(f)
    return path


@pytest.fixture
def cluster(tmp_path):
    """A luigid (not started) and the workers' launcher, all killed at the end whatever happened."""
    config = cluster_config(tmp_path / "luigi-test.cfg")
    luigid = Luigid(tmp_path / "luigid", config)
    workers = Workers(tmp_path / "logs")
    try:
        yield luigid, workers, config
    finally:
        workers.kill_all()
        luigid.stop()


def scheduler_args(luigid: Luigid, processes: int) -> list[str]:
    # what `make wiki-128 SCHEDULER=127.0.0.1:PORT WORKERS=N` adds
    return ["--workers", str(processes), "--scheduler-host", "127.0.0.1", "--scheduler-port", str(luigid.port),
            "--no-lock"]


def test_a_worker_killed_mid_shard_the_survivor_and_a_rerun_finish(site, serial, cluster, tmp_path):
    luigid, workers, config = cluster
    data = tmp_path / "data"
    luigid.start()
    command = pretrain_args(site, data) + scheduler_args(luigid, processes=2)
    pair = [workers.start(command, config, "a"), workers.start(command, config, "b")]

    def shard_being_written():
        for tmp in (data / DATASET).glob("wiki_*.tfrecord.tmp-*"):
            m = re.search(r"\.tmp-.+-(\d+)(\.|$)", tmp.name)
            try:
                group = os.getpgid(int(m[1]))
            except ProcessLookupError:
                continue
            for proc in pair:
                if group == proc.pid:
                    return proc, tmp
    victim, temporary = wait_for(shard_being_written, "a shard's temporary", alive=pair)
    os.killpg(victim.pid, signal.SIGKILL)  # the worker and the task processes it forked
    victim.wait(timeout=60)
    assert temporary.exists()  # killed in the middle of the write
    survivor = pair[1 - pair.index(victim)]

    assert survivor.wait(timeout=240) == 0, workers.log(survivor)[-5000:]
    rerun = workers.start(command, config, "rerun")
    assert rerun.wait(timeout=240) == 0, workers.log(rerun)[-5000:]
    assert workers.executions([rerun]) == {}  # everything was complete

    assert (data / DATASET / "MANIFEST.json").read_bytes() == serial[0]
    assert temporaries(data) == []
    # The killed shard ran again; only what the victim was running when it died ran twice.
    shard = int(re.match(r"wiki_(\d+)", temporary.name)[1])
    ran = workers.executions()
    assert any(re.search(rf"\bPretrainShard\(.*\bshard={shard}[,)]", task) for task in workers.executions([survivor])), \
        workers.log(survivor)[-5000:]
    assert {task for task, n in ran.items() if n > 1} <= workers.unfinished(victim)
    assert {task.replace(str(data), "DATA") for task in ran} == own_work(serial[1])


def test_luigid_killed_and_restarted_mid_run_the_workers_finish(site, serial, cluster, tmp_path):
    """The reported failure, and two more restarts: luigid restarted empty (killed before it ever saved
    its state), restarted after a clean stop (state kept), and killed again (back to that older state)."""
    luigid, workers, config = cluster
    data = tmp_path / "data"
    luigid.start()
    command = pretrain_args(site, data) + scheduler_args(luigid, processes=1)
    a, b = workers.start(command, config, "a"), workers.start(command, config, "b")

    # 1. Right after the first part is extracted: one worker's process group and luigid SIGKILLed;
    #    luigid restarted on the same state path, where nothing was ever saved.
    wait_for(lambda: luigid.done("ExtractPart"), "the first extracted part", alive=[a, b])
    os.killpg(b.pid, signal.SIGKILL)
    b.wait(timeout=60)  # reaped, as its parent on a node would: a zombie's pid still counts as a live writer
    luigid.signal(signal.SIGKILL)
    assert not luigid.state.exists()
    luigid.start()

    # 2. Once the sentence model is trained: luigid stopped cleanly (it saves its state) and started again from it.
    wait_for(lambda: luigid.done("TrainPunkt"), "the sentence model", alive=[a])
    luigid.signal(signal.SIGTERM)
    assert luigid.state.exists()
    luigid.start()

    # 3. In the middle of a shard: luigid SIGKILLed and started again from the state saved in 2.
    wait_for(lambda: list((data / DATASET).glob("wiki_*.tfrecord.tmp-*")), "a shard's temporary", alive=[a])
    luigid.signal(signal.SIGKILL)
    luigid.start()

    assert a.wait(timeout=240) == 0, workers.log(a)[-5000:]
    assert "luigid lists no pending task for this worker" in workers.log(a)  # after 1: its tasks added again
    assert (data / DATASET / "MANIFEST.json").read_bytes() == serial[0]
    assert temporaries(data) == []


def test_eight_workers_on_one_luigid_run_every_task_once(site, serial, cluster, tmp_path):
    luigid, workers, config = cluster
    # No kill here: a worker must not be taken for dead while eight share two cores.
    cluster_config(config, scheduler={"worker_disconnect_delay": "120"})
    data = tmp_path / "data"
    luigid.start()
    command = pretrain_args(site, data) + scheduler_args(luigid, processes=1)
    eight = [workers.start(command, config, f"w{i}") for i in range(8)]
    for proc in eight:
        assert proc.wait(timeout=300) == 0, workers.log(proc)[-5000:]

    ran = workers.executions()
    assert {task.replace(str(data), "DATA") for task in ran} == own_work(serial[1])
    assert {task: n for task, n in ran.items() if n != 1} == {}
    assert sum(1 for proc in eight if workers.executions([proc])) >= 2, "the work was not shared"
    assert len(luigid.api("task_list", status="DONE", upstream_status="")) == len(serial[1])  # luigid saw it all
    assert (data / DATASET / "MANIFEST.json").read_bytes() == serial[0]
    assert temporaries(data) == []


def test_a_luigid_that_stays_away_ends_the_worker_with_one_line_saying_to_run_again(site, tmp_path):
    config = cluster_config(tmp_path / "luigi-test.cfg", core={"rpc_retry_attempts": "2", "rpc_retry_wait": "0"})
    r = subprocess.run([str(BIN / "luigi"), "--module", "workflows", *pretrain_args(site, tmp_path / "data"),
                        "--scheduler-host", "127.0.0.1", "--scheduler-port", str(free_port()), "--no-lock"],
                       cwd=REPO, env=env(config), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "luigid did not answer" in lines[0] and "run the same command again" in lines[0], lines[0]
    assert "Traceback" not in r.stderr


class MalformingProxy:
    """An HTTP proxy on 127.0.0.1 in front of a luigid: every request goes to it as it is, and luigid's answers go
    back as they are, except the first answers to `get_work` that hand out a task, each replaced by one of
    `malform`'s functions (the answer in, what the worker receives out)."""

    def __init__(self, upstream: int, malform: list):
        import http.server
        import threading

        self.malform, self.sent = list(malform), []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._forward(None)

            def do_POST(self):
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def _forward(self, body):
                request = urllib.request.Request(f"http://127.0.0.1:{upstream}{self.path}", data=body,
                                                 headers={"Content-Type": self.headers.get("Content-Type", "")})
                with urllib.request.urlopen(request, timeout=30) as r:
                    data = r.read()
                if self.path.startswith("/api/get_work"):
                    answer = json.loads(data)
                    if isinstance(answer.get("response"), dict) and answer["response"].get("task_id") and proxy.malform:
                        answer["response"] = proxy.malform.pop(0)(answer["response"])
                        proxy.sent.append(answer["response"])
                        data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _unknown_family(answer: dict) -> dict:
    return {**answer, "task_id": "NoSuchTask__99914b932b", "task_family": "NoSuchTask", "task_params": {}}


def _params_of_another_task(answer: dict) -> dict:
    return {**answer, "task_id": answer["task_id"] + "0"}  # an id this worker does not know


def _keys_missing(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k not in ("running_tasks", "n_pending_tasks", "task_params")}


def test_a_malformed_luigid_answer_skips_a_task_and_the_worker_goes_on(cluster, tmp_path):
    """A luigid (behind a proxy that malforms its answers) hands out a task of an unknown family, one whose parameters
    make another task than its id, answers without running_tasks, n_pending_tasks and parameters, and answers with
    an array: each is logged as a scheduler fault, the task skipped, and the worker finishes the dump's download."""
    from workflows import DEMO_DATE, DEMO_WIKI
    from workflows.wiki import write_sample_dump

    luigid, workers, config = cluster
    write_sample_dump(tmp_path / "site", wiki=DEMO_WIKI, date=DEMO_DATE)
    luigid.start()
    with MalformingProxy(luigid.port, [_unknown_family, _params_of_another_task, _keys_missing,
                                       lambda answer: []]) as proxy:
        worker = workers.start(["DownloadDump", "--data-dir", str(tmp_path / "data"), "--dump-url",
                                (tmp_path / "site").as_uri(), "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE,
                                "--workers", "1", "--scheduler-host", "127.0.0.1", "--scheduler-port", str(proxy.port),
                                "--no-lock"], config, "malformed")
        worker.wait(timeout=300)
        log = workers.log(worker)
        assert worker.returncode == 0, log[-4000:]
        assert len(proxy.sent) == 4
    assert "Traceback" not in log, log[-4000:]
    faults = [line for line in log.splitlines() if "luigid's answer to a request for work is malformed" in line]
    assert any("task 'NoSuchTask__99914b932b' skipped: NoSuchTask with these parameters makes no task here" in line
               for line in faults), faults
    assert any("skipped: its parameters make the task DownloadPart_" in line for line in faults), faults
    assert any("n_pending_tasks is None, not a count" in line for line in faults), faults
    assert any("not an object: []" in line for line in faults), faults
    parts = sorted(p.name for p in (tmp_path / "site" / DEMO_WIKI / DEMO_DATE).glob("*.bz2"))
    downloads = tmp_path / "data" / "downloads" / DEMO_WIKI / DEMO_DATE
    assert all((downloads / name).read_bytes() == (tmp_path / "site" / DEMO_WIKI / DEMO_DATE / name).read_bytes()
               for name in parts)
