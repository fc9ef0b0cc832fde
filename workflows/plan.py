"""A dry run: what `luigi --module workflows Pretrain128 ...` would run, and what is already complete.

    python -m workflows plan [--all] Pretrain128 --data-dir DATA --dump-url URL --wiki enwiki --dump-date D ...
    make plan-128 DUMP_DATE=D   (plan-384, plan-512; the variables of make wiki-128)

`plan_tasks` walks the task graph from the root as Luigi's worker does when it schedules: each
task's `requires()`, and its `complete()` (its receipts, and the checks each task makes before
any work, so a run that would be refused is refused here with the same one line). Every task of
the graph is visited, complete or not, so the counts cover the whole dataset; a task *runs*
when it is incomplete and every task between it and the root is too (Luigi does not look
below a complete task: a download removed after its extraction is not fetched again).

Nothing is written and nothing downloaded but the dump's `dumpstatus.json`, and that only when
DATA holds no usable copy: the number of parts (so of download, extraction and split tasks)
is in it. It is read into memory (`wiki.PLANNED_STATUS`), not saved, and the checksum files a
run fetches with it are not fetched. Luigi's own `luigi.tools.deps_tree` prints the same graph
as a tree, one line per task (thousands for 256 shards) and fetches what `requires()` needs,
which here would write the dump's status into DATA.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import luigi
from luigi.task import flatten

from .base import ReceiptTarget
from . import bert
from .bert import PretrainDataset

SHOWN_PER_KIND = 3  # tasks to run named per kind, unless --all


@dataclass
class PlannedTask:
    task: luigi.Task
    complete: bool
    runs: bool = False


def plan_tasks(root: luigi.Task) -> list[PlannedTask]:
    """Every task of the graph below `root`, requirements before the tasks that need them, each with whether
    it is complete and whether a run would run it."""
    planned: dict[str, PlannedTask] = {}
    requires: dict[str, list[str]] = {}
    order: list[str] = []

    def visit(task: luigi.Task) -> None:
        if task.task_id in planned:
            return
        planned[task.task_id] = PlannedTask(task, bool(task.complete()))
        deps = flatten(task.requires())
        requires[task.task_id] = [d.task_id for d in deps]
        for dep in deps:
            visit(dep)
        order.append(task.task_id)

    visit(root)
    frontier = [root.task_id] if not planned[root.task_id].complete else []
    while frontier:
        task_id = frontier.pop()
        if planned[task_id].runs:
            continue
        planned[task_id].runs = True
        frontier += [d for d in requires[task_id] if not planned[d].complete]
    return [planned[task_id] for task_id in order]


def describe(task: luigi.Task, data_dir: Path) -> str:
    """What a task makes: its output paths under DATA, or its name when it makes nothing of its own."""
    inputs = {t.path for t in flatten(task.input()) if isinstance(t, ReceiptTarget)}
    own = [t for t in flatten(task.output()) if isinstance(t, ReceiptTarget) and t.path not in inputs]
    if not own:
        return f"nothing of its own (complete when its {len(flatten(task.requires()))} requirements are)"
    paths = []
    for t in own:
        try:
            paths.append(str(t.path.relative_to(data_dir)))
        except ValueError:
            paths.append(str(t.path))
    return ", ".join(paths)


def plan_lines(dataset: PretrainDataset, all_tasks: bool = False) -> list[str]:
    """The plan of `dataset` as text: a table of tasks per kind (complete, to run), then the tasks to run."""
    bert.DRY_RUN = True
    dataset.check_before_work()
    pieces = dataset.read_for_plan()
    tasks = plan_tasks(dataset)
    kinds = list(dict.fromkeys(p.task.get_task_family() for p in tasks))
    total, done, runs = Counter(), Counter(), Counter()
    for p in tasks:
        family = p.task.get_task_family()
        total[family] += 1
        done[family] += p.complete
        runs[family] += p.runs
    skipped = sum(total.values()) - sum(done.values()) - sum(runs.values())
    width = max(len(k) for k in kinds + ["total"])
    lines = [f"{dataset.get_task_family()}: {dataset.source().name}, {dataset.num_shards} shards, into "
             f"{dataset.dataset_dir}",
             pieces,
             "",
             f"{'task':<{width}}  {'tasks':>6}  {'complete':>8}  {'to run':>6}"]
    for k in kinds:
        lines.append(f"{k:<{width}}  {total[k]:>6}  {done[k]:>8}  {runs[k]:>6}")
    lines.append(f"{'total':<{width}}  {sum(total.values()):>6}  {sum(done.values()):>8}  {sum(runs.values()):>6}")
    if skipped:
        lines.append(f"({skipped} incomplete {'task' if skipped == 1 else 'tasks'} will not run: a complete task "
                     f"after {'it' if skipped == 1 else 'them'} holds what {'it makes' if skipped == 1 else 'they make'})")
    lines.append("")
    if not sum(runs.values()):
        lines.append("nothing to run: the dataset is complete")
        return lines
    lines.append("to run:")
    data_dir = Path(dataset.data_dir)
    for k in kinds:
        todo = [p.task for p in tasks if p.runs and p.task.get_task_family() == k]
        shown = todo if all_tasks else todo[:SHOWN_PER_KIND]
        for task in shown:
            lines.append(f"  {k}: {describe(task, data_dir)}")
        if len(todo) > len(shown):
            lines.append(f"  {k}: ... and {len(todo) - len(shown)} more (--all lists every one)")
    return lines
