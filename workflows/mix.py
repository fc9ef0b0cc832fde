"""The mixture tasks: the corpora of a recipe mixed into one dataset at the shard level.

    luigi --module workflows PretrainMix128 --data-dir D --recipe wiki-books.toml   (and 384, 512)

Each source of the recipe is split by its own binding's tasks (`workflows.wiki`, `workflows.text`),
the very tasks a single-source run (`Pretrain128`, `PretrainText128`) makes with the same data folder,
shard count, seed and minimum document length: what such a run has done is complete here, not done
again. The mixture's own stages start at the splits: MixSplit (every source's pieces, each source's
`repeat` times) -> MixSentenceShard (bucket i of every piece of every source) -> (MixSentenceShards ->
MixTrainVocab, without --vocab-file: one vocabulary over the mixture) -> MixPretrainShard ->
MixPretrainDataset, in DATA/NAME/ (NAME: the recipe's name), files mix_00000.tfrecord ...
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import luigi

from shardkit.atomic import read_receipt, write_json, write_receipt
from shardkit.errors import PrepError
from wikiprep.dataset import differences
from wikiprep.mixture import Member, Mixture, Recipe, RecipeSource, read_recipe
from wikiprep.text.source import check_name

from . import bert, slurm, text, wiki


# The recipe a mixture's folder was made from, as `recipe_description` gives it: its sentence shards hold the
# sources' buckets as that recipe listed them.
RECIPE_COPY = "recipe.json"


# Each kind of source a recipe may hold (wikiprep.mixture.KINDS) as its own corpus' SentenceShards task: the task's
# class, and the task parameter each of the kind's recipe keys gives. A new kind of corpus adds a row here.
MEMBER_TASKS = {
    "wikipedia": (wiki.SentenceShards, {"wiki": "wiki", "dump_date": "dump_date", "dump_url": "dump_url",
                                        "multistream": "multistream"}),
    "text": (text.TextSentenceShards, {"path": "text_dir", "format": "text_format", "text_field": "text_field",
                                       "name": "name"}),
}


def recipe_description(recipe: Recipe) -> dict:
    return {"name": recipe.name, "sources": {str(n + 1): {"kind": s.kind, "repeat": s.repeat, **s.params}
                                             for n, s in enumerate(recipe.sources)}}


@functools.lru_cache(maxsize=8)
def _recipe(path: str, mtime_ns: int, size: int) -> Recipe:
    return read_recipe(path)


class MixTask(bert.CorpusTask):
    """Base of the mixture's tasks: the recipe, and each of its sources bound by its own corpus' tasks."""

    stages = {}

    recipe = luigi.Parameter(description="the mixture's recipe, a TOML file (docs/tasks.md, mixtures)")

    def read_recipe(self) -> Recipe:
        """The recipe, read once per version of the file (every task asks for it in complete())."""
        try:
            st = Path(self.recipe).stat()
        except OSError:
            return read_recipe(self.recipe)  # names the problem
        return _recipe(str(self.recipe), st.st_mtime_ns, st.st_size)

    def member_task(self, spec: RecipeSource) -> bert.CorpusTask:
        """The source's own SentenceShards task with this mixture's split parameters: its binding's stages
        (its `stage`, `piece_task`, `pieces`) are those of the single-source run."""
        split = {"data_dir": self.data_dir, "num_shards": self.num_shards, "seed": self.seed,
                 "min_doc_chars": self.min_doc_chars}
        task, parameter = MEMBER_TASKS[spec.kind]
        return task(**split, **{parameter[key]: value for key, value in spec.params.items()})

    def members(self) -> list[tuple[bert.CorpusTask, int]]:
        return [(self.member_task(spec), spec.repeat) for spec in self.read_recipe().sources]

    def source(self) -> Mixture:
        recipe = self.read_recipe()
        check_name(recipe.name)
        return Mixture(recipe.name, tuple(Member(spec.kind, task.source(), spec.repeat, task.identity())
                                          for spec, (task, _) in zip(recipe.sources, self.members())))

    def check_before_work(self) -> None:
        """The recipe and every source's own parameters (a changed text corpus, say), before any work; a recipe
        other than the one DATA/NAME was made from is refused, naming what changed (`recipe.json` there)."""
        recipe = self.read_recipe()
        check_name(recipe.name)
        for task, _ in self.members():
            task.check_before_work()
        made = self.work_dir / RECIPE_COPY
        now = recipe_description(recipe)
        held = read_receipt(made) is not None
        if held:
            changed = differences("recipe", json.loads(made.read_text(encoding="utf-8")), now, ())
            if changed:
                raise PrepError(f"--recipe {self.recipe}: {self.work_dir} was made from another recipe "
                                f"({'; '.join(changed)}); give the mixture another name, or remove {self.work_dir} "
                                f"to build it again")
        super().check_before_work()
        if not held and not bert.DRY_RUN:
            made.parent.mkdir(parents=True, exist_ok=True)
            write_json(made, now)
            write_receipt(made)

    @property
    def work_dir(self) -> Path:
        return Path(self.data_dir) / self.read_recipe().name

    def split_tasks(self) -> list[tuple[int, luigi.Task]]:
        """(source number, split task) of every piece of every source, each source's `repeat` times, in recipe order."""
        out = []
        for n, (task, repeat) in enumerate(self.members()):
            out += [(n, t) for t in task.piece_splits() * repeat]
        return out

    def split_sources(self) -> list[int]:
        return [n for n, _ in self.split_tasks()]

    def _members_tasks(self, tasks_of) -> list[luigi.Task]:
        """`tasks_of(member task)` of every source, in recipe order, each task once (a source may be listed twice)."""
        return list(dict.fromkeys(t for task, _ in self.members() for t in tasks_of(task)))

    # The Slurm chain's (workflows.slurm): every source's own download, sentence models and splits.

    def corpus_inputs(self) -> list[luigi.Task]:
        return self._members_tasks(lambda task: task.corpus_inputs())

    def punkt_tasks(self) -> list[luigi.Task]:
        return self._members_tasks(lambda task: task.punkt_tasks())

    def piece_splits(self) -> list[luigi.Task]:
        return self._members_tasks(lambda task: task.piece_splits())

    def read_for_plan(self) -> str:
        return "; ".join(f"source {n + 1}: {task.read_for_plan()}" for n, (task, _) in enumerate(self.members()))

    def upstream_stats(self) -> list[dict]:
        return [stats for task, repeat in self.members() for stats in task.upstream_stats() * repeat]

    def corpus_figures(self) -> dict:
        """Documents and sentences per source (times its repeat), from the splits' receipts; a text source's
        skipped files."""
        per_source = [{"documents": 0, "sentences": 0} for _ in self.members()]
        for n, split in self.split_tasks():
            stats = split.output().receipt()["stats"]
            per_source[n]["documents"] += stats["documents"]
            per_source[n]["sentences"] += stats["sentences"]
        sources = []
        for n, ((task, repeat), spec) in enumerate(zip(self.members(), self.read_recipe().sources)):
            figures = task.corpus_figures()
            sources.append({"source": task.source().name, "kind": spec.kind, "repeat": repeat, **per_source[n],
                            **({"skipped_files": figures["skipped_files"]} if "skipped_files" in figures else {})})
        return {"sources": sources}


class MixSentenceShards(MixTask, bert.SentenceShards):
    """bert.SentenceShards of the mixture."""


class MixSplit(MixTask, bert.SplitCorpus):
    """Every piece of every source split by that source's own task, and judged together (bert.SplitCorpus)."""

    def requires(self):
        return [t for _, t in self.split_tasks()]


class MixSentenceShard(MixTask, bert.SentenceShard):
    """bert.SentenceShard: bucket i of every piece of every source, in recipe order, each source `repeat` times."""


class MixTrainVocab(MixTask, bert.TrainVocab):
    """bert.TrainVocab over the mixture's sentence shards: one vocabulary for every source."""


class MixPretrainShard(MixTask, bert.PretrainShard):
    """bert.PretrainShard: mix_{i:05d}.tfrecord + .index, or mix_{i:05d}.hdf5."""


class MixPretrainPlan(MixTask, bert.PretrainPlan):
    """bert.PretrainPlan: how a Parquet dataset's staged shards are dealt over its balanced files."""


class MixPretrainPart(MixTask, bert.PretrainPart):
    """bert.PretrainPart: mix_{i:05d}.parquet, or mix_{i:05d}.parquet_{bin} of every bin."""


class MixPretrainDataset(MixTask, bert.PretrainDataset):
    """bert.PretrainDataset in DATA/NAME/seq{L}_mask{M}_dup{D}[_shards{N}][_seed{S}][_wwm][_hdf5|_remask]/
    (dataset.folder_name), NAME the recipe's name."""


class PretrainMix128(MixPretrainDataset, bert.Pretrain128):
    """A mixture's dataset of sequences of 128 tokens, 20 predictions (`make mix-128`)."""


class PretrainMix384(MixPretrainDataset, bert.Pretrain384):
    """A mixture's dataset of sequences of 384 tokens, 56 predictions (`make mix-384`)."""


class PretrainMix512(MixPretrainDataset, bert.Pretrain512):
    """A mixture's dataset of sequences of 512 tokens, 76 predictions (`make mix-512`)."""


class SlurmMixStage128(slurm.SlurmStage, PretrainMix128):
    """One element of one stage of a mixture's Slurm chain (workflows.slurm; `make slurm-mix-128`): the download
    and sentence-model jobs run every source's, the pieces array every source's pieces."""

    dataset_class = PretrainMix128


class SlurmMixStage384(slurm.SlurmStage, PretrainMix384):
    dataset_class = PretrainMix384


class SlurmMixStage512(slurm.SlurmStage, PretrainMix512):
    dataset_class = PretrainMix512
