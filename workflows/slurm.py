"""Slurm job arrays: which task each job of the chain runs (docs/cluster.md, "Slurm").

`cluster/slurm/submit.sh` submits one job per stage, each waiting for the one before
(`--dependency=afterok`); the stages that fan out are job arrays with one element per dump piece
or per shard. Every job, and every element of an array, runs

    luigi --module workflows SlurmStage128 --stage STAGE --index $SLURM_ARRAY_TASK_ID \\
          <the parameters of Pretrain128> --local-scheduler --no-lock

which runs exactly that element's task (a single job, every task of its stage: a mixture has a download
and a sentence model per source): the stages before it must be complete already. An
element started out of order fails at once with one line naming what is missing, rather than
redoing work that other elements are redoing at the same time.

`python -m workflows slurm-plan Pretrain128 <parameters>` prints, per stage, the elements
still to run (what the submit script puts in `--array=`), and where the dataset goes.
"""

from __future__ import annotations

import luigi
from luigi.task import flatten

from shardkit.errors import PrepError

from .base import IntParameter
from .bert import PretrainDataset, PretrainPart, PretrainShard, SentenceShard
from .wiki import Pretrain128, Pretrain384, Pretrain512

# In chain order. `pieces`, `sentences`, `shards` and `parts` are job arrays; the others are single jobs (index 0).
# `vocab` has no element (and no job) when a --vocab-file is given, `parts` none for a layout without a
# finishing step (all but Parquet).
STAGES = ("download", "punkt", "pieces", "sentences", "vocab", "shards", "parts", "finalize")
# The stages submitted as one job, which runs every task of the stage (its one element, index 0).
SINGLE_JOBS = ("download", "punkt", "vocab", "finalize")


def stage_elements(dataset: PretrainDataset) -> dict[str, list[luigi.Task]]:
    """The task of each element of each stage: element i of a stage is what array index i runs.

    - download: every part file (at most 2 at once: the `wikimedia_http` resource), of every dump of a mixture;
    - punkt: the sentence model, with the extraction of the first piece(s) it reads; every
      piece needs it, so it runs once, before them (a mixture's: one per source that needs one);
    - pieces: one dump part (or multistream slice) extracted, cleaned and split (a mixture's: every piece of
      every source, once whatever its repeat);
    - sentences: one sentence shard, merged from its bucket of every piece; each element first
      judges the splits' counts (SplitDump: their receipts, no text), so a dump that leaves a shard
      empty fails every element with the same line before any shard is written;
    - vocab: the vocabulary, when one is trained: every shard's instances need it, and it reads
      every sentence shard up to its cap (200 M characters), so it runs once, between the arrays;
    - shards: one shard's instances;
    - parts: for a layout with a finishing step (Parquet), file i of every bin, dealt from the staged shards;
      each element first makes the plan of the deal if no element has yet (PretrainPlan: the shards' receipts);
    - finalize: vocab.txt, stats.json and MANIFEST.json.
    """
    vocab = dataset.vocab_task()
    return {
        "download": dataset.corpus_inputs(),
        "punkt": dataset.punkt_tasks(),
        "pieces": dataset.piece_splits(),
        "sentences": [dataset.stage(SentenceShard, shard=i) for i in range(dataset.num_shards)],
        "vocab": [vocab] if vocab is not None else [],
        "shards": [dataset.stage(PretrainShard, shard=i) for i in range(dataset.num_shards)],
        "parts": [dataset.stage(PretrainPart, part=i) for i in range(dataset.num_shards)]
        if dataset.output_layout.finishing else [],
        "finalize": [dataset],
    }


def array_spec(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8': the form of sbatch's --array."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def job_elements(dataset: PretrainDataset) -> dict[str, list]:
    """What each element of each stage's job runs: a task of an array stage, or all the tasks of a single job's
    stage as its one element (none when the stage has no task)."""
    return {stage: ([tasks] if tasks else []) if stage in SINGLE_JOBS else tasks
            for stage, tasks in stage_elements(dataset).items()}


def _complete(element) -> bool:
    return all(task.complete() for task in flatten(element))


def plan(dataset: PretrainDataset) -> dict[str, str]:
    """Per stage, the elements not complete yet as an --array spec ('' when the stage is done; '0' for a single
    job with work), and the dataset folder. Reads the dump's status (fetched once) and the receipts, nothing else."""
    todo = {stage: array_spec([i for i, element in enumerate(elements) if not _complete(element)])
            for stage, elements in job_elements(dataset).items()}
    return {"DATASET_DIR": str(dataset.dataset_dir.resolve()), **{f"TODO_{s}": todo[s] for s in STAGES}}


class SlurmStage(PretrainDataset):
    """One element of one stage of the Slurm chain: exactly the task `stage_elements` gives it.

    Complete when that task is. Before anything runs, every task of the earlier stages must be
    complete: the element never redoes another stage's work.
    """

    dataset_class: type[PretrainDataset] = PretrainDataset

    stage = luigi.ChoiceParameter(choices=STAGES, description="the stage of the chain this job runs")
    index = IntParameter(default=0, description="the element of an array stage: $SLURM_ARRAY_TASK_ID")

    def dataset(self) -> PretrainDataset:
        return self.clone(self.dataset_class)

    def check_before_work(self) -> None:
        super().check_before_work()
        elements = job_elements(self.dataset())
        if not elements[self.stage]:
            why = {"vocab": "a --vocab-file is given", "punkt": "the corpus comes split into sentences",
                   "download": "the corpus is on disk already"}.get(self.stage, "the layout has no finishing step")
            raise PrepError(f"stage {self.stage}: nothing to run with these parameters ({why})")
        if not 0 <= self.index < len(elements[self.stage]):
            raise PrepError(f"--index {self.index}: stage {self.stage} has elements 0 to "
                            f"{len(elements[self.stage]) - 1}")
        for stage in STAGES[:STAGES.index(self.stage)]:
            missing = [i for i, element in enumerate(elements[stage]) if not _complete(element)]
            if missing:
                raise PrepError(f"stage {self.stage} needs stage {stage} complete first (incomplete: "
                                f"--array={array_spec(missing)}); submit the chain again "
                                f"(the same make slurm-... command), it runs only what is missing")

    def requires(self):
        return job_elements(self.dataset())[self.stage][self.index]

    def output(self):
        return luigi.task.getpaths(self.requires())

    def run(self):
        pass


class SlurmStage128(SlurmStage, Pretrain128):
    dataset_class = Pretrain128


class SlurmStage384(SlurmStage, Pretrain384):
    dataset_class = Pretrain384


class SlurmStage512(SlurmStage, Pretrain512):
    dataset_class = Pretrain512
