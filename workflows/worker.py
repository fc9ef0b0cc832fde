"""Luigi workers that outlive their luigid: what `luigi --module workflows ... --scheduler-host H` runs.

luigid knows what to run only from what the workers told it, and keeps that in memory: it is
pickled to --state-path on a clean stop (SIGTERM, SIGINT) and read back at start, never
written on SIGKILL, an OOM kill or a lost node. Started again after such a death, luigid
comes back empty, or with the state of its last clean stop. Luigi's worker does not notice.
It asks for work (`Scheduler.get_work`), and luigid answers with the pending tasks of its
record of that worker (`count_pending`: the tasks the worker added as runnable), which is now
empty. So `n_pending_tasks` is 0, `Worker._keep_alive` is False even with keep_alive set,
and the worker leaves its loop. The tasks it had added as PENDING were never run by it, so
its summary says "N was not granted run permission by the scheduler" and the run exits
`[retcode] not_run` (25) with the dataset unfinished.

`ClusterWorker` closes that gap, and makes a worker's exit status say whether its dataset is complete:

- **lost work is added again.** Before it quits because luigid lists nothing pending or running
  for it, the worker asks its root tasks' complete(). If one is not complete, it adds the whole
  graph again, as at start: complete tasks are reported DONE, the rest PENDING, and the loop
  goes on. Once per such answer, so a run whose remaining tasks were disabled after too many
  failures (also "nothing pending") still ends.
- **running tasks are claimed again.** get_work's answer lists this worker's tasks that luigid
  believes RUNNING. A task this worker is running that the list does not show was forgotten,
  so the worker tells luigid it is RUNNING here again and adds its roots again. Another
  worker cannot then start the same task, and the resource caps (`wikimedia_http`) count it.
- **a complete task is not run again.** luigid may hand out a task whose output another
  worker has already committed: a restored state still shows it PENDING, or a late PENDING
  claim arrived after `stable_done_cooldown_secs`. Luigi never checks a task's own complete()
  before run(), so the worker checks it here and reports DONE without running it.
- **tasks running elsewhere are waited for.** With keep_alive, Luigi's worker stays only while
  luigid counts PENDING or FAILED tasks for it, and quits while the last ones run on other
  workers. Here a task of its graph running elsewhere counts too: if that worker dies, this
  one can run the task again.
- **work done by others counts as done.** Every worker adds the whole graph and runs a part of
  it; Luigi's summary lists the rest as "not granted run permission" or "run by another
  worker", so every worker of a finished run exits 25 or 10. Once the roots are complete,
  those tasks are shown as complete ones, and the worker exits 0.

- **a malformed answer is a scheduler fault, not the worker's death.** What luigid answers to a
  request for work is checked before Luigi reads it (`_CheckedAnswers`): an answer that is not an
  object, a count that is not a number, a running task without its id, a task of a family this
  worker does not know (or of a module it has not imported), whose parameters do not make a task,
  or make one with another id than the answer's: each is logged as a WARNING, the task is skipped
  (reported FAILED to luigid, with why, as Luigi does for a family it cannot load) and the worker
  goes on asking. Luigi itself would raise KeyError or TypeError, or run the task under an id its
  result then does not match, and the worker would die.

A luigid that stays away longer than the RPC retries allow (`[core] rpc_retry_attempts` x
`rpc_retry_wait`, 5 minutes with cluster/luigi-cluster.cfg) ends the worker with one line,
`wikiprep: error: ... run the same command again`, and a non-zero exit (`unhandled_exception`,
40). Nothing is lost: the files are the state.

Luigi's command line has no setting for the worker class. `interface._run` always builds its
worker with `interface._WorkerSchedulerFactory().create_worker`. `install()`, called when
`luigi --module workflows` imports this package, replaces that one method so it returns a
ClusterWorker whenever the scheduler is a remote luigid, and a `Worker` (this module's base of it)
for a `--local-scheduler` run.

`Worker`, the base of both, is Luigi's worker with what every run of these tasks needs:

- **the run's progress** (`workflows.progress`): it opens the run's `workflows.channel` before any task
  process is forked, tells `RunProgress` what it schedules and starts, and starts the thread that shows it;
- **interrupts reported once**: a task process it forks ignores SIGINT (Ctrl-C reaches the terminal's
  whole process group) and is stopped by SIGTERM when the interrupt reaches this process, which Luigi
  sends each running task process as the worker stops; this process then prints one line
  (`workflows.console`). A SIGTERM that ends a task run in this process (`--workers 1`) ends the run too:
  Luigi counts any exception of a task as its failure and would go on with the next task.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings

import luigi.interface
import luigi.rpc
import luigi.worker
from luigi.scheduler import DONE, FAILED, PENDING, RUNNING
from luigi.task import UnconsumedParameterWarning
from luigi.task_register import load_task

from shardkit.errors import PrepError, excerpt
from shardkit.signals import Terminated, held_for_fork, received, release_in_child

from . import channel, console
from .progress import Display, RunProgress

logger = logging.getLogger("luigi-interface")

CLAIM_AGAIN_SECONDS = 30.0
TASK_STOP_SECONDS = 30.0  # how long an interrupted run waits for each of its task processes to stop


def _complete(task: luigi.Task) -> bool:
    """task.complete(), False when it cannot say (its error is reported by PrepTask.complete)."""
    try:
        return bool(task.complete())
    except Exception:
        return False


def _unreachable(error: luigi.rpc.RPCError) -> PrepError:
    """The one line a worker ends with when luigid stays away longer than the RPC retries."""
    # prog: printed by base._PrepErrorTracebacks when Luigi logs the uncaught error
    return PrepError(f"luigid did not answer: {error}. Nothing finished is lost: once luigid answers again, "
                     f"run the same command again to resume", prog="wikiprep")


class _TaskProcess(luigi.worker.ContextManagedTaskProcess):
    """Luigi's task process, which, forked, leaves Ctrl-C to the worker's process (module docstring)."""

    def start(self):
        # Held back while the process is forked, until it has set its own handlers; and in this process until
        # the worker has it recorded, so that an interrupt stops it and waits for it (shardkit.signals).
        with held_for_fork():
            super().start()

    def run(self):
        if os.getpid() != self._parent_pid:  # forked; else Luigi runs the task in the worker's own process
            release_in_child()
        super().run()


class Worker(luigi.worker.Worker):
    """Luigi's worker, showing the run's progress and reporting an interrupt once (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_progress = RunProgress(self.worker_processes)
        self._display: Display | None = None

    def __enter__(self):
        channel.open_channel()
        super().__enter__()
        luigid = None
        scheduler = getattr(self._scheduler, "checked", self._scheduler)  # a ClusterWorker's, behind its checks
        if isinstance(scheduler, luigi.rpc.RemoteScheduler):
            # Its own connection, tried once: a luigid that does not answer costs the progress an update, never
            # the worker's requests their retries.
            luigid = luigi.rpc.RemoteScheduler(scheduler._url)
            luigid._rpc_retry_attempts = 1
        self._display = Display(self.run_progress, on_error=console.defer, luigid=luigid)
        return self

    def __exit__(self, type, value, traceback):
        if isinstance(value, (KeyboardInterrupt, Terminated)):
            console.note_interrupted(self.run_progress.running())
        try:
            return super().__exit__(type, value, traceback)  # SIGTERM to the task processes still running
        finally:
            # Gone before the run's last line is printed: a task process stopping (or finishing as it was stopped)
            # logs no line after it. They remove their temporaries and exit at once on SIGTERM.
            for process in list(self._running_tasks.values()):
                if process.is_alive():
                    process.join(TASK_STOP_SECONDS)
            if self._display is not None:
                if self._display.is_alive():
                    self._display.stop()
                else:
                    self._display.drain()
            channel.close_channel()

    def _add_task(self, *args, **kwargs):
        super()._add_task(*args, **kwargs)
        task = self._scheduled_tasks.get(kwargs["task_id"])
        if task is not None:
            self.run_progress.scheduled(task.task_id, task.task_family, kwargs["status"])

    def run(self):
        if self._display is not None and self._first_task is not None:
            self._display.root_id = self._first_task
            self._display.start()
        return super().run()

    def _create_task_process(self, task):
        process = super()._create_task_process(task)
        process.__class__ = _TaskProcess  # the same process, with the two methods above
        return process

    def _get_work(self):
        if received():  # a SIGTERM whose Terminated was swallowed (see shardkit.signals): stop here
            raise Terminated()
        return super()._get_work()

    def _run_task(self, task_id):
        task = self._scheduled_tasks.get(task_id)
        if task is not None and task_id not in self._running_tasks:
            self.run_progress.started(task_id, task.task_family)
        super()._run_task(task_id)
        if received():  # the task ran here and SIGTERM ended it: Luigi took that for its failure, and would go on
            raise Terminated()


class _CheckedAnswers:
    """The worker's luigid, whose answers to `get_work` and `count_pending` are checked (`check`) before the worker
    reads them; every other call passes through as it is."""

    # The counts of an answer, each a number (luigid's own defaults where it may leave one out).
    COUNTS = {"n_pending_tasks": None, "n_unique_pending": None, "n_pending_last_scheduled": 0}

    def __init__(self, scheduler, worker: "ClusterWorker"):
        self._scheduler, self._worker = scheduler, worker

    def __getattr__(self, name):
        return getattr(self._scheduler, name)

    @property
    def checked(self):
        """The scheduler whose answers are checked (luigid's `RemoteScheduler`)."""
        return self._scheduler

    def get_work(self, **kwargs):
        return self.check(self._scheduler.get_work(**kwargs))

    def count_pending(self, **kwargs):
        return self.check(self._scheduler.count_pending(**kwargs))

    def check(self, answer) -> dict:
        """`answer` with what is malformed in it taken out, each fault logged: a count not a number is 0, a
        running task without a string id and its worker left out, a task the worker cannot make as the answer
        names it skipped (reported FAILED to luigid, with why), a batch (which these tasks never are) dropped."""
        faults = []
        if not isinstance(answer, dict):
            faults.append(f"not an object: {excerpt(answer)}")
            answer = {}
        checked = {"worker_state": answer.get("worker_state") if isinstance(answer.get("worker_state"), str)
                   else "active"}
        for key, default in self.COUNTS.items():
            value = answer.get(key, default)
            if type(value) is not int:
                faults.append(f"{key} is {excerpt(value)}, not a count")
                value = 0
            checked[key] = value
        running = answer.get("running_tasks", [])
        if not isinstance(running, list):
            faults.append(f"running_tasks is {excerpt(running)}, not a list")
            running = []
        checked["running_tasks"] = [r for r in running if isinstance(r, dict) and isinstance(r.get("task_id"), str)
                                    and "worker" in r]
        if len(checked["running_tasks"]) != len(running):
            faults.append(f"{len(running) - len(checked['running_tasks'])} running tasks without a task_id or worker")
        if "batch_id" in answer:
            faults.append("a batch of tasks, which these tasks never are")
        task_id = answer.get("task_id")
        if task_id is not None:
            problem = self._task_problem(task_id, answer)
            if problem is None:
                # known to the worker now (`_task_problem`): Luigi does not read the rest
                checked.update(task_id=task_id, task_family=answer.get("task_family"),
                               task_params=answer.get("task_params"), task_module=answer.get("task_module"))
            else:
                faults.append(f"task {excerpt(task_id)} skipped: {problem}")
                if isinstance(task_id, str):
                    self._scheduler.add_task(worker=self._worker._id, task_id=task_id, status=FAILED, runnable=False,
                                             expl=json.dumps(f"not run: luigid's answer was malformed: {problem}"))
        for fault in faults:
            logger.warning("luigid's answer to a request for work is malformed: %s; going on", fault)
        return checked

    def _task_problem(self, task_id, answer: dict) -> str | None:
        """What keeps the worker from running the task `answer` names, or None (the task made and known)."""
        if not isinstance(task_id, str):
            return f"its id is {excerpt(task_id)}, not a string"
        if task_id in self._worker._scheduled_tasks:  # one of this worker's own tasks: known by its id
            return None
        family, params, module = answer.get("task_family"), answer.get("task_params"), answer.get("task_module")
        if not isinstance(family, str) or not isinstance(params, dict) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in params.items()):
            return "no task family and parameters (strings) to make it from"
        if module is not None and module not in sys.modules:  # never imported on a scheduler's word
            return f"its module {excerpt(module)} is not one this worker has imported"
        try:
            task = load_task(module=None, task_name=family, params_str=params)
        except Exception as error:  # an unknown family, parameters that make no task: whatever Luigi raises
            return f"{family} with these parameters makes no task here ({type(error).__name__}: {excerpt(str(error))})"
        if task.task_id != task_id:
            return f"its parameters make the task {task.task_id}, not this one"
        self._worker._scheduled_tasks[task_id] = task
        return None


class ClusterWorker(Worker):
    """A Luigi worker that adds its tasks again when luigid has forgotten them (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scheduler = _CheckedAnswers(self._scheduler, self)
        self._roots: list[luigi.Task] = []  # the tasks given on the command line
        self._in_run = False
        self._added_again = False  # since luigid last listed pending work for this worker
        self._claimed_again: dict[str, float] = {}  # running task id -> when it was last claimed again

    # -- registration -------------------------------------------------------------------------

    def add(self, task, *args, **kwargs):
        if not self._in_run:  # in run(), add() is Luigi adding dynamic dependencies, or us adding again
            self._roots.append(task)
        try:
            return super().add(task, *args, **kwargs)
        except luigi.rpc.RPCError as error:
            raise _unreachable(error) from None

    def _log_unexpected_error(self, task):
        if not isinstance(sys.exc_info()[1], luigi.rpc.RPCError):  # that one becomes one line, not a traceback
            super()._log_unexpected_error(task)

    def _add_again(self, running: list[str]) -> None:
        """Tell luigid again who this worker is, which tasks it is running, and (unless draining) its whole graph."""
        self._scheduler.add_worker(self._id, self._worker_info)
        for task_id in running:
            task = self._scheduled_tasks[task_id]
            self._scheduler.add_task(worker=self._id, task_id=task_id, status=RUNNING, runnable=True,
                                     priority=task.priority, resources=task.process_resources(),
                                     params=task.to_str_params(), param_visibilities=task._get_param_visibilities(),
                                     family=task.task_family, module=task.task_module)
        if not self._stop_requesting_work:  # SIGUSR1: this worker takes no new task, so it claims none
            for root in self._roots:
                self.add(root)

    # -- the run loop -------------------------------------------------------------------------

    def run(self):
        self._in_run = True
        try:
            succeeded = super().run()
        except luigi.rpc.RPCError as error:
            raise _unreachable(error) from None
        self._count_others_work()
        return succeeded

    def _count_others_work(self) -> None:
        """Once the roots are complete, list the tasks other workers ran as complete ones (module docstring).

        Luigi's summary (execution_summary._summary_dict) is made of this worker's history: a task
        only ever added as PENDING becomes "complete ones were encountered" when its one entry says
        DONE, and a task seen RUNNING on another worker leaves "run by another worker" when no
        answer of get_work lists it any more. Tasks this worker ran or saw fail keep their entries.
        """
        if not all(_complete(root) for root in self._roots):
            return
        done = {task_id for task_id, task in self._scheduled_tasks.items() if _complete(task)}
        statuses: dict[str, set[str]] = {}
        for task, status, _ in self._add_task_history:
            statuses.setdefault(task.task_id, set()).add(status)
        history = self._add_task_history
        for i, (task, _, _) in enumerate(history):
            if task.task_id in done and statuses[task.task_id] == {PENDING}:
                history[i] = (task, DONE, False)
        for response in self._get_work_response_history:
            response["running_tasks"] = [r for r in response["running_tasks"] if r.get("task_id") not in done]

    def _get_work(self):
        response = super()._get_work()
        if self._stop_requesting_work:  # draining (SIGUSR1): Luigi asked luigid nothing
            return response
        listed = {t.get("task_id") for t in response.running_tasks}
        now = time.monotonic()
        # Each task at most once per CLAIM_AGAIN_SECONDS: count_pending leaves out a running task
        # whose upstream luigid has disabled, and that must not make every get_work add the graph.
        forgotten = sorted(task_id for task_id in self._running_tasks if task_id not in listed
                           and now - self._claimed_again.get(task_id, -CLAIM_AGAIN_SECONDS) >= CLAIM_AGAIN_SECONDS)
        if forgotten:
            self._claimed_again.update((task_id, now) for task_id in forgotten)
            logger.warning("luigid does not know that this worker is running %s (luigid restarted, or took this "
                           "worker for dead): telling it again", ", ".join(forgotten))
            self._add_again(forgotten)
            if response.task_id is None:  # now luigid knows this worker's pending tasks again
                response = super()._get_work()
        if response.task_id is not None or response.n_pending_tasks:
            self._added_again = False
        return response

    def _keep_alive(self, get_work_response):
        # A task of this worker's graph that another worker is running counts as pending: with
        # keep_alive, wait for it rather than quit. If that worker dies, this one can run it again,
        # and when it ends the roots are complete and this worker's exit status says so.
        running_elsewhere = len(get_work_response.running_tasks)
        if super()._keep_alive(get_work_response._replace(
                n_pending_tasks=get_work_response.n_pending_tasks + running_elsewhere)):
            return True
        # Luigi quits here. When luigid lists nothing pending or running for this worker but a root
        # is not complete, luigid has forgotten the worker's tasks: add them again, once.
        if self._stop_requesting_work or get_work_response.n_pending_tasks or running_elsewhere or self._added_again:
            return False
        incomplete = [root for root in self._roots if not _complete(root)]
        if not incomplete:
            return False
        logger.warning("luigid lists no pending task for this worker, but %s is not complete (luigid restarted, or "
                       "took this worker for dead): adding its tasks again", incomplete[0])
        self._added_again = True
        self._add_again([])
        return True

    def _run_task(self, task_id):
        task = self._scheduled_tasks.get(task_id)
        if task is not None and task_id not in self._running_tasks and _complete(task):
            logger.info("[pid %s] Worker %s skipped   %s: complete already (another worker committed it)",
                        os.getpid(), self._id, task)
            self._add_task(worker=self._id, task_id=task_id, status=DONE, runnable=None, expl=json.dumps(""),
                           resources=task.process_resources(), params=task.to_str_params(),
                           family=task.task_family, module=task.task_module)
            return
        super()._run_task(task_id)


def _create_worker(self, scheduler, worker_processes, assistant=False):
    """interface._WorkerSchedulerFactory.create_worker, with a ClusterWorker for a remote luigid."""
    cls = ClusterWorker if isinstance(scheduler, luigi.rpc.RemoteScheduler) else Worker
    return cls(scheduler=scheduler, worker_processes=worker_processes, assistant=assistant)


def install() -> None:
    """Make `luigi --module workflows ...` (and luigi.build without a factory) build ClusterWorkers for a luigid,
    and Workers for a local scheduler."""
    luigi.interface._WorkerSchedulerFactory.create_worker = _create_worker
    # The [core] rpc-* keys of cluster/luigi-cluster.cfg are read by luigi/rpc.py, not by the `core`
    # config class, which warns that it does not consume them.
    warnings.filterwarnings("ignore", r".*'rpc_(retry_attempts|retry_wait|connect_timeout)'.*",
                            UnconsumedParameterWarning)
