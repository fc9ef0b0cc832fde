"""The BERT stages of any corpus: its documents to sentence shards, a vocabulary, and a dataset folder.

TrainPunkt -> SplitPiece -> SplitCorpus -> SentenceShard -> (SentenceShards -> TrainVocab, without
--vocab-file) -> PretrainShard -> (PretrainPlan -> PretrainPart, for a layout with a finishing step)
-> PretrainDataset (Pretrain128, Pretrain384, Pretrain512). What fans out is one task per piece of the
corpus (splitting) or per shard (merging, instances, finishing parts); what does not (Punkt, the
vocabulary, the finishing plan) reads a bounded sample or the shards' receipts, never the whole corpus.

These tasks know a corpus only through `CorpusTask`'s few methods: its `wikiprep.corpus.Source`, the
folder its work goes to, the parameters that name one piece, and the task (if any) that makes a piece's
input. A corpus binds them in its own module by subclassing, a line per stage:

    class WikiTask(CorpusTask): <the dump's parameters and CorpusTask's methods>
    class TrainPunkt(WikiTask, bert.TrainPunkt): ...
    class SplitPart(WikiTask, bert.SplitPiece): ...

and the stages find each other through `stage`, which gives the corpus' own class of a generic stage.
The generic classes live in the Luigi namespace `bert` and are never run themselves. Each parameter is
declared once, on the first stage that needs it; the stages after it take it with `luigi.util.inherits`
and build their requirements with `clone`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import ClassVar, TypeVar

import luigi
from luigi.task import flatten
from luigi.util import inherits

from shardkit.atomic import (check_output_root, read_receipt, receipt_path, remove_stale_temps, sha256_file,
                             write_dir_receipt, write_json, write_receipt)
from shardkit.errors import PrepError
from wikiprep import dataset, layouts, reader, sentences, vocab
from wikiprep import stats as record_stats  # `stats` is what the tasks call the figures their steps return
from wikiprep.corpus import Piece, Source
from wikiprep.options import DEFAULT_NUM_SHARDS, DEFAULT_SEED, GenerationOptions
from wikiprep.schema import PRED, SEQ
from wikiprep.tokenization import Vocab

from .base import (BoolParameter, ChoiceParameter, FloatParameter, IndexedTarget, IntParameter, MalformedReceipt,
                   ManifestTarget, OptionalParameter, PrepTask, ReceiptTarget, commit_report, report_target)

luigi.namespace("bert", scope=__name__)

# Set by the dry run (workflows.plan) before it asks any task anything: a source then reads what it must
# to say what would run, and writes nothing.
DRY_RUN = False

Stage = TypeVar("Stage", bound="CorpusTask")


class LanguageParameter(OptionalParameter):
    """--language: a language code (`sentences.check_language`: "zh", "ja", "zh-yue"), or none."""

    def normalize(self, x):
        x = super().normalize(x)
        if x is None:
            return None
        try:
            return sentences.check_language(x)
        except PrepError as e:
            raise self._error(str(e)) from None


class CorpusTask(PrepTask):
    """Base of the BERT stages. A corpus subclasses it once (its parameters, the methods below, and an empty
    `stages` table), then binds each generic stage with a subclass of both; `stage` then finds them."""

    data_dir = luigi.Parameter(description="root of all outputs")
    language = LanguageParameter(default=None, description="the text's language (zh, ja, ...), instead of the "
                                                            "corpus' own (a dump's header): chooses how sentences "
                                                            "are split; its sentence shards get a folder of their own")

    # The corpus' own class of each generic stage, filled as the corpus' module defines them.
    stages: ClassVar[dict[type, type]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__ or "stages" in cls.__dict__ or not hasattr(cls, "stages"):
            return  # a generic stage, a corpus' base, or a generic task of another module (workflows.slurm)
        for generic in cls.__mro__[1:]:
            if generic.__module__ == __name__ and issubclass(generic, CorpusTask) and generic is not CorpusTask:
                cls.stages.setdefault(generic, cls)

    def stage(self, generic: type[Stage], **params) -> Stage:
        """This corpus' task of stage `generic` (SentenceShard, ...), with this task's parameters and `params`."""
        try:
            bound = self.stages[generic]
        except KeyError:  # a binding that forgot a stage: say which, not a bare KeyError
            raise TypeError(f"{type(self).__module__}: no task binds bert.{generic.__name__} for this corpus "
                            f"(a subclass of its base class and of bert.{generic.__name__})") from None
        return self.clone(bound, **params)

    # What a corpus defines.

    def source(self) -> Source:
        """The corpus; raises PrepError for parameters that make none (checked before anything runs)."""
        raise NotImplementedError

    @property
    def work_dir(self) -> Path:
        """The corpus' folder under --data-dir: its sentence shards, vocabulary and datasets."""
        raise NotImplementedError

    def piece_task(self, cls: type[Stage], piece: Piece) -> Stage:
        """Task `cls` of one piece (SplitPiece's class, ...): the parameters that name the piece set."""
        raise NotImplementedError

    @property
    def piece(self) -> Piece:
        """The piece a piece task's parameters name."""
        raise NotImplementedError

    def piece_input(self, piece: Piece) -> luigi.Task | None:
        """The task that makes a piece readable (Wikipedia's extraction), or None when the source reads it as it is."""
        return None

    def corpus_inputs(self) -> list[luigi.Task]:
        """The tasks that fetch the corpus (Wikipedia's download), for the first job of the Slurm chain."""
        return []

    def punkt_tasks(self) -> list[luigi.Task]:
        """The sentence models the pieces' splits need (none when the corpus comes split), for the Slurm chain."""
        return [self.stage(TrainPunkt)] if self.needs_punkt() else []

    def piece_splits(self) -> list[luigi.Task]:
        """The split of every piece (SplitPiece's task of each), in corpus order."""
        return [self.piece_task(self.stages[SplitPiece], piece) for piece in self.pieces()]

    def read_for_plan(self) -> str:
        """Make the pieces known to a dry run (workflows.plan) without writing anything; the plan's line that
        says how many there are and where they were read from."""
        return f"pieces: {len(self.pieces())}"

    def upstream_stats(self) -> list[dict]:
        """The figures of the corpus' own steps before splitting (each with the documents it dropped by reason,
        `dropped`), judged with the splits' (sentences.judge_splits); PrepError for a corpus they refuse."""
        return []

    def needs_punkt(self) -> bool:
        """Whether the pieces' documents are split into sentences with Punkt (not when they come split already)."""
        return True

    def identity(self) -> dict:
        """What names the corpus' content when it is one source of a mixture (its dataset.json): its description,
        and whatever more pins its bytes (a dump's part checksums)."""
        return self.source().description()

    def corpus_figures(self) -> dict:
        """Figures of the corpus for the dataset's stats.json, under "corpus" (files skipped, documents per
        source of a mixture); nothing for a corpus that has none."""
        return {}

    def split_sources(self) -> list[int] | None:
        """For a corpus of several sources (a mixture): the source of each split SplitCorpus requires, in order,
        so that each shard's instances are counted per source; None for one source."""
        return None

    # Shared by every stage.

    def check_before_work(self) -> None:
        """The corpus' parameters and the data folder, the first thing Luigi asks, before any path is made of them."""
        super().check_before_work()
        self.source()
        check_output_root(self.data_dir, "--data-dir")

    def pieces(self) -> list[Piece]:
        return self.source().pieces()

    def corpus_language(self) -> str | None:
        """The language the corpus' sentences are split for: --language, or the source's own (`Source.language`)."""
        return self.language or self.source().language()


class TrainPunkt(CorpusTask):
    """The Punkt sentence model, trained unsupervised on the corpus itself (offline; no nltk.download).

    It needs only the first ~2 M characters of text, so it waits for the first piece alone and asks for
    the next ones (dynamic dependencies) only while the sample is short: training overlaps the making of
    the rest.
    """

    min_doc_chars = IntParameter(default=200, min_value=0, description="drop cleaned documents shorter than this")

    def requires(self):
        first = self.piece_input(self.pieces()[0])
        return [] if first is None else first

    def output(self):
        return ReceiptTarget(self.work_dir / f"punkt_min{self.min_doc_chars}.json")

    def run(self):
        source = self.source()
        sample = sentences.PunktSample()
        for piece in source.pieces():
            made = self.piece_input(piece)
            if made is not None:
                yield made
            sample.add(piece.name, source.documents(piece, min_chars=self.min_doc_chars))
            if made is not None:  # the sample read part of it: the rest is hashed against its receipt too
                made.output().verify()
            if sample.full:
                break
        stats = sentences.train_punkt(sample.texts, self.output().path, source=sample.source)
        write_receipt(self.output().path, stats=stats)


# SentenceShards comes before SplitPiece, SplitCorpus and SentenceShard, which take its parameters.

@inherits(TrainPunkt)
class SentenceShards(CorpusTask):
    """Every sentence shard (SentenceShard): what the vocabulary is trained on. Nothing of its own to run."""

    num_shards = IntParameter(default=DEFAULT_NUM_SHARDS, min_value=1, description="number of output shards")
    seed = IntParameter(default=DEFAULT_SEED, description="global seed: shard mixing and instance generation")

    def requires(self):
        return [self.stage(SentenceShard, shard=i) for i in range(self.num_shards)]

    def output(self):
        return self.input()

    def stats(self) -> dict:
        """Each shard's documents and sentences, and the documents dropped by reason, for stats.json:
        read from the shards' receipts (one small JSON file each)."""
        receipts = [t.receipt() for t in self.output()]
        return {"shards": [r["stats"] for r in receipts], "dropped": receipts[0]["corpus"]["dropped"]}


def split_name(task: SentenceShards) -> str:
    """'n256_seed12345_min200': the name of one way of splitting the corpus, from a task with SentenceShards' parameters."""
    return sentences.split_name(task.num_shards, task.seed, task.min_doc_chars, task.language)


@inherits(SentenceShards)
class SplitPiece(CorpusTask):
    """The documents of one piece split into sentences and spread over the shards by hash(seed, document id)."""

    def requires(self):
        deps = {"punkt": self.stage(TrainPunkt)} if self.needs_punkt() else {}
        made = self.piece_input(self.piece)
        if made is not None:
            deps["piece"] = made
        return deps

    def output(self):
        return ReceiptTarget(self.work_dir / "split" / split_name(self) / self.piece.name, {"stats": dict})

    def run(self):
        source, piece = self.source(), self.piece
        punkt = self.input().get("punkt")
        stats = sentences.split_piece(source.documents(piece, min_chars=self.min_doc_chars),
                                      None if punkt is None else punkt.path, self.output().path, num_shards=self.num_shards,
                                      seed=self.seed, size=source.piece_size(piece),
                                      language=self.corpus_language(), progress=self.progress(f"split {piece.name}", "B"))
        write_dir_receipt(self.output().path, stats=stats)


@inherits(SentenceShards)
class SplitCorpus(CorpusTask):
    """Every piece split, and the corpus they make judged from their receipts (sentences.judge_splits):
    a corpus with no document left, or too few documents for every shard, is refused here, once, with one
    line, before any sentence shard is written. No corpus text is read."""

    def check_before_work(self) -> None:
        """Once every piece has its split receipt, complete() judges them too: a rerun is refused before
        any work."""
        super().check_before_work()
        if all(t.exists() for t in self.output()):
            try:
                self.corpus()
            except MalformedReceipt:  # a damaged receipt of a step below: SentenceShard makes it again, then judges
                pass

    def requires(self):
        return self.piece_splits()

    def output(self):
        return self.input()

    def corpus(self) -> dict:
        """sentences.judge_splits of the split receipts, with the corpus' own steps' (`upstream_stats`)."""
        upstream = self.upstream_stats()
        return sentences.judge_splits([t.receipt()["stats"] for t in self.output()], upstream,
                                      num_shards=self.num_shards, source=self.source().name)

    def run(self):
        self.corpus()


def _read_folder_receipt(path: Path) -> dict:
    """A folder receipt, parsed once per version of the file: every shard of the folder asks for it."""
    st = path.stat()
    return _parsed_json(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _parsed_json(path: str, mtime_ns: int, size: int) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


class SentenceShardTarget(ReceiptTarget):
    """A sentence shard: complete with its own receipt, or in a data folder whose sentence shards were
    all merged by one task (before each shard was its own task), with that folder's receipt listing it
    at its size. Either receipt gives the shard's `stats` and the corpus' dropped documents."""

    def __init__(self, path: Path, shard: int):
        super().__init__(path, {"stats": dict, "corpus": dict})
        self.shard = shard

    def _folder_receipt(self) -> dict | None:
        """The whole folder's receipt, when it lists this shard at the size it has."""
        try:
            receipt = _read_folder_receipt(receipt_path(self.path.parent))
            return receipt if receipt["files"][self.path.name]["size"] == self.path.stat().st_size else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def exists(self) -> bool:
        return self._has_keys(read_receipt(self.path)) or self._folder_receipt() is not None

    def receipt(self) -> dict:
        if self._has_keys(read_receipt(self.path)):
            return super().receipt()
        folder = self._folder_receipt()
        if folder is None:
            return super().receipt()  # FileNotFoundError: not complete
        shards = folder["stats"]["shards"]
        return {"file": self.path.name, **folder["files"][self.path.name], "stats": shards[self.shard],
                "corpus": {"documents": sum(s["documents"] for s in shards), "dropped": folder["stats"]["dropped"]}}


class BinSizeParameter(IntParameter):
    """--bin-size: a whole number, or `none` (0: not binned), as DeepLearningExamples' BIN_SIZE spells it."""

    def parse(self, x):
        return 0 if str(x).strip().lower() == "none" else super().parse(x)


class ShardParameter(IntParameter):
    """--shard: from 0 to --num-shards - 1 (checked against --num-shards once both are known)."""

    def __init__(self, **kwargs):
        super().__init__(min_value=0, description="the shard, from 0 to --num-shards - 1", **kwargs)


@inherits(SplitCorpus)
class SentenceShard(CorpusTask):
    """Sentence shard i: bucket i of every piece, in corpus order (sentences.merge_shard). Each shard is its
    own task, so merging spreads over the workers like the shards' instances."""

    shard = ShardParameter()

    def check_before_work(self) -> None:
        super().check_before_work()
        sentences.check_shard(self.shard, self.num_shards)

    def requires(self):
        return self.stage(SplitCorpus)

    def output(self):
        return SentenceShardTarget(self.work_dir / "sentences" / split_name(self) / sentences.shard_name(self.shard),
                                   self.shard)

    def run(self):
        out = self.output().path
        # Before shards were merged one per task, the folder was built whole under a temporary name.
        remove_stale_temps(out.parent)
        # The corpus is judged from the receipts of the steps below SplitCorpus, complete as SplitCorpus is unless a
        # receipt was damaged since: that step then runs again first (a dynamic dependency), its receipt not trusted.
        yield from _made_again([self.piece_input(piece) for piece in self.pieces()])
        corpus = self.requires().corpus()
        stats = sentences.merge_shard([t.path / sentences.bucket_name(self.shard) for t in self.input()], out,
                                      progress=self.progress(f"merge {out.name}", "B"), sources=self.split_sources())
        write_receipt(out, stats=stats, corpus={"documents": corpus["documents"], "dropped": corpus["dropped"]})


@inherits(SentenceShards)
class TrainVocab(CorpusTask):
    """A WordPiece vocabulary trained (deterministically) on the sentence shards, in shard order. It counts
    at most vocab.build_vocab's max_chars (200 M characters), whatever the size of the corpus."""

    vocab_size = IntParameter(default=30522, min_value=vocab.MIN_VOCAB_SIZE, below=vocab.TOO_SMALL,
                              description="size of the trained vocabulary")
    do_lower_case = BoolParameter(default=True, parsing=luigi.BoolParameter.EXPLICIT_PARSING)

    def requires(self):
        return self.stage(SentenceShards)

    def output(self):
        case = "uncased" if self.do_lower_case else "cased"
        return ReceiptTarget(self.work_dir / "vocab" /
                             f"{split_name(self)}_{case}_{self.vocab_size}.txt")

    def run(self):
        shards = sorted(t.path for t in self.input())
        stats = vocab.build_vocab(shards, self.output().path, vocab_size=self.vocab_size,
                                  lowercase=self.do_lower_case,
                                  progress=self.progress("count words for the vocabulary", "characters"))
        write_receipt(self.output().path, stats=stats)


# ---------------------------------------------------------------------------------------------
# Pre-training instances

@inherits(TrainVocab)
class PretrainTask(CorpusTask):
    """Base of the tasks that write one dataset folder: the generation parameters, and the folder,
    vocabulary and description they give."""

    vocab_file = luigi.OptionalParameter(default=None, description="BERT vocab.txt; trained on the corpus when absent")
    max_seq_length = IntParameter(default=128)
    max_predictions_per_seq = IntParameter(default=20)
    dupe_factor = IntParameter(default=5)
    masked_lm_prob = FloatParameter(default=0.15)
    short_seq_prob = FloatParameter(default=0.1)
    do_whole_word_mask = BoolParameter(default=False)
    fixed_mask_count = BoolParameter(default=False,
                                     description="Graphcore's fixed count: a full sequence gets exactly "
                                                 "max_predictions_per_seq masks (implied by --layout remask)")
    output_format = ChoiceParameter(default=layouts.OUTPUT_FORMATS[0], choices=layouts.OUTPUT_FORMATS,
                                    description="tfrecord (google-research/bert, Graphcore), hdf5 (NVIDIA's "
                                                "PyTorch BERT layout, in the sibling folder ..._hdf5), or parquet "
                                                "(LDDL's layout, in ..._parquet...)")
    layout = ChoiceParameter(default=layouts.LAYOUT_FLAGS[0], choices=layouts.LAYOUT_FLAGS,
                             description="standard, or remask: Graphcore's static-mask TFRecords (sibling folder "
                                         "..._remask), with Graphcore's fixed mask count")
    pad_position_value = IntParameter(default=layouts.PAD_POSITION_VALUE,
                                      description="with --layout remask: the input_position of an empty slot")
    masking = ChoiceParameter(default=layouts.MASKINGS[0], choices=layouts.MASKINGS,
                              description="with --output-format parquet: static (masks stored, as in every other "
                                          "layout) or dynamic (LDDL's loader masks each epoch)")
    bin_size = BinSizeParameter(default=0, min_value=0,
                                description="with --output-format parquet: LDDL's sequence-length bins of this "
                                            "many tokens, a set of balanced files each; 0 or none: not binned")

    def check_before_work(self) -> None:
        """What no single parameter says alone, before any work: a bad combination fails before the download."""
        super().check_before_work()
        options = self.options  # GenerationOptions refuses values that make no dataset
        self.output_layout.check(options)  # the flags name a layout (PrepError else), whose instances fit it
        self.output_layout.check_shards(self.num_shards)

    @property
    def output_layout(self) -> layouts.Layout:
        """The layout --output-format, --layout and their parameters name (`layouts.from_flags`)."""
        return layouts.from_flags(self.output_format, self.layout, pad_position_value=self.pad_position_value,
                                  masking=self.masking, bin_size=self.bin_size)

    @property
    def options(self) -> GenerationOptions:
        """The generation options, with the global seed (each shard's own derives from it). The remask
        layout implies Graphcore's fixed mask count, as `create-pretraining-data --remask` does: only
        with it does a full-length sequence fit (`layouts.implies_fixed_mask_count`)."""
        fixed = self.fixed_mask_count or layouts.implies_fixed_mask_count(self.layout)
        return GenerationOptions.from_object(self, random_seed=self.seed, fixed_mask_count=fixed)

    @functools.cached_property
    def dataset_dir(self) -> Path:
        """The dataset's folder (`dataset.dataset_folder`: by its parameters' name, or an older version's folder
        that holds it), decided once per task: its outputs stay where its completeness was judged."""
        return dataset.dataset_folder(self.work_dir, self.options, self.output_layout, num_shards=self.num_shards)

    @property
    def shards_dir(self) -> Path:
        """Where PretrainShard writes: the dataset folder, or for a layout with a finishing step the staged shards'
        folder (`staged/<the dataset folder's name>`), which its finishing parts read."""
        return dataset.staged_folder(self.dataset_dir) if self.output_layout.finishing else self.dataset_dir

    @property
    def dims(self) -> dict[str, int]:
        return {SEQ: self.max_seq_length, PRED: self.max_predictions_per_seq}

    def vocab_task(self) -> TrainVocab | None:
        return None if self.vocab_file else self.stage(TrainVocab)

    def vocab_path(self) -> Path:
        return Path(self.vocab_file) if self.vocab_file else self.vocab_task().output().path

    def description(self, with_vocab: bool = True) -> dict:
        """What defines the dataset's content (dataset.describe); a folder made with other values is never
        mixed with this one. `with_vocab` False leaves out the vocabulary's hash."""
        corpus = self.source().description()
        language = self.corpus_language()
        if not sentences.is_english(language):  # English datasets keep the description they had before languages
            corpus["language"] = language
        return dataset.describe(self.options, self.vocab_path() if with_vocab else None,
                                corpus=corpus, num_shards=self.num_shards,
                                min_doc_chars=self.min_doc_chars, vocab_size=self.vocab_size, layout=self.output_layout)

    def dataset_spec(self, with_vocab: bool = True) -> dataset.DatasetSpec:
        """The description (`description`), the layout, the shards' prefix and the corpus' keys that change no byte."""
        source = self.source()
        return dataset.DatasetSpec(self.description(with_vocab), self.output_layout, source.shard_prefix,
                                   source.same_bytes)


class PretrainShard(PretrainTask):
    """Instances of one sentence shard, seeded by dataset.shard_seed(seed, shard): {prefix}_{i:05d}.tfrecord +
    .index, or {prefix}_{i:05d}.hdf5; for a layout with a finishing step (Parquet), a staged shard."""

    shard = ShardParameter()

    def check_before_work(self) -> None:
        super().check_before_work()
        sentences.check_shard(self.shard, self.num_shards)

    def requires(self):
        deps = {"sentences": self.stage(SentenceShard)}
        if self.vocab_task() is not None:
            deps["vocab"] = self.vocab_task()
        return deps

    def output(self):
        return IndexedTarget(self.shards_dir / dataset.shard_name(self.source().shard_prefix, self.shard,
                                                                  self.output_layout), {"stats": dict})

    def run(self):
        out = self.output().path
        seed = dataset.shard_seed(self.seed, self.shard)
        sentence_shard = self.input()["sentences"]
        stats = dataset.write_shard(sentence_shard.path,
                                    self.vocab_path(), out, dataclasses.replace(self.options, random_seed=seed),
                                    self.dataset_spec(), progress=self.progress(f"instances {out.name}", "B"),
                                    source_starts=sentence_shard.receipt()["stats"].get("source_starts", ()))
        # The index's hash too, taken here where the shard was written, so that PretrainDataset's
        # manifest reads neither file again (HDF5 shards have no index).
        index = self.output_layout.index_path(out)
        written = {} if index is None else \
            {"index": {"file": index.name, "size": index.stat().st_size, "sha256": sha256_file(index)}}
        if self.output_layout.finishing:  # a staged shard: its finishing part reads the dataset's files back
            write_receipt(out, seed=seed, stats=stats)
            return
        # The report's figures of this shard, read back here, in parallel with the other shards, so that
        # PretrainDataset's report only adds them up (wikiprep.stats.file_stats: a few hundred kB at most).
        self.set_status_message(f"reading {out.name} back for the report")
        report_stats = read_back_stats(out, self.vocab_path())
        write_receipt(out, seed=seed, stats=stats, report_stats=report_stats, **written)


def read_back_stats(path: Path, vocab_path: Path) -> dict:
    """The report's figures of one file of a dataset, read back by the task that wrote it, in parallel with the
    others, so that PretrainDataset's report only adds them up (wikiprep.stats.file_stats: a few hundred kB)."""
    return record_stats.file_stats(reader.dataset_file(path, vocab_path), path, Vocab.load(vocab_path),
                                   tensorflow=False)


class PretrainPlan(PretrainTask):
    """A finishing layout's plan (`Layout.plan_parts`): which rows of which staged shards each finishing part
    writes, from every shard's receipt (no record read). parts.json beside the staged shards."""

    def requires(self):
        return [self.stage(PretrainShard, shard=i) for i in range(self.num_shards)]

    def output(self):
        return ReceiptTarget(self.shards_dir / "parts.json")

    def run(self):
        plan = self.output_layout.plan_parts([t.receipt()["stats"] for t in self.input()], self.dims,
                                             self.num_shards)
        write_json(self.output().path, plan)
        write_receipt(self.output().path)


class PretrainPart(PretrainTask):
    """Finishing part i of a layout with a finishing step: file i of each bin (`Layout.part_names`), from the
    staged shards as PretrainPlan deals them, committed together, each with a receipt holding its report's figures,
    counted from the instances as they are written (`stats.FileFigures`)."""

    part = IntParameter(min_value=0, description="the finishing part, from 0 to --num-shards - 1")

    def check_before_work(self) -> None:
        super().check_before_work()
        sentences.check_shard(self.part, self.num_shards)

    def requires(self):
        return self.stage(PretrainPlan)

    def output(self):
        return [ReceiptTarget(self.dataset_dir / name)
                for name in self.output_layout.part_names(self.source().shard_prefix, self.part, self.dims)]

    def run(self):
        plan = json.loads(self.input().path.read_text(encoding="utf-8"))
        # The staged shards it reads, made again first if one is gone (removed, or found damaged by a part): the
        # same bytes, so the plan stands.
        yield [self.stage(PretrainShard, shard=i) for i in self.output_layout.part_shards(plan, self.part)]
        spec = self.dataset_spec()
        dataset.claim_folder(self.dataset_dir, spec)
        staged = [self.shards_dir / spec.shard_name(i) for i in range(self.num_shards)]
        paths = [t.path for t in self.output()]
        vocab = Vocab.load(self.vocab_path())
        figures = [record_stats.FileFigures(self.dims, vocab, path) for path in paths]
        counts = self.output_layout.write_part(plan, self.part, staged, paths, self.dims, vocab,
                                               progress=self.progress(f"part {self.part}", "files"),
                                               observe=lambda i, batch: figures[i].add(batch))
        for path, count, file_figures in zip(paths, counts, figures):
            write_receipt(path, records=count, report_stats=file_figures.result())


class PretrainDataset(PretrainTask):
    """Every shard, then vocab.txt, stats.json and MANIFEST.json, then the report (`report/`: report.html, its
    plots and figures, outside the manifest): complete when both MANIFEST.json and the report are. A dataset
    finished before reports existed gets its report on the next run, its files unchanged. Nothing here is
    proportional to the corpus: the manifest and the report take the shards' hashes and figures from their
    receipts (`written_files`, `report_stats`)."""

    def check_before_work(self) -> None:
        """A dataset folder that holds another dataset is refused before anything runs. A vocabulary still
        to be trained has no hash yet, but the parameters it is trained with are in the description.
        Checked here once, not per shard: Luigi asks this task first, and nothing runs when it refuses."""
        super().check_before_work()  # the corpus' parameters first: the folder's path is made of them
        dataset.check_folder(self.dataset_dir, self.dataset_spec(with_vocab=bool(self.vocab_file)))

    def requires(self):
        if self.output_layout.finishing:
            files = [self.stage(PretrainPart, part=i) for i in range(self.num_shards)]
        else:
            files = [self.stage(PretrainShard, shard=i) for i in range(self.num_shards)]
        # The vocabulary too (when trained), which finalize copies: one found damaged there is removed, and made
        # again by the rerun even though every shard is complete.
        vocab = self.vocab_task()
        return {"files": files, **({} if vocab is None else {"vocab": vocab})}

    def output(self):
        return {"manifest": ManifestTarget(self.dataset_dir / "MANIFEST.json"), "report": report_target(self.dataset_dir)}

    def dataset_files(self) -> list[ReceiptTarget]:
        """The targets of the dataset's record files: the shards, or the finishing parts' files."""
        return flatten(self.input()["files"])

    def run(self):
        manifest = self.output()["manifest"]
        if not manifest.exists():
            # stats.json takes the sentence shards' figures from their receipts; a damaged one is checked again first.
            yield from _made_again([self.stage(SentenceShards)])
            # Their report figures dropped as each is read: the report, below, takes them one at a time.
            receipts = [{k: v for k, v in t.receipt().items() if k != "report_stats"} for t in self.dataset_files()]
            finished = {}
            if self.output_layout.finishing:  # the generation's figures are the staged shards'
                plan = json.loads(self.stage(PretrainPlan).output().path.read_text(encoding="utf-8"))
                finished = {"files": {r["file"]: r["records"] for r in receipts},
                            "balance": {key: plan[key] for key in ("bins", "dropped")}}
                shard_stats = [self.stage(PretrainShard, shard=i).output().receipt()["stats"]
                               for i in range(self.num_shards)]
            else:
                shard_stats = [r["stats"] for r in receipts]
            # A manifest made again (a file of the finished dataset was damaged) hashes every file: the damage
            # may have reached a receipt too, whose hash the manifest must never copy.
            repairing = receipt_path(manifest.path).exists()  # the dataset was finished once
            dataset.finalize(self.dataset_dir, self.dataset_spec(), self.vocab_path(), shard_stats,
                             self.stage(SentenceShards).stats(),
                             known_files=None if repairing else written_files(receipts),
                             corpus=self.corpus_figures(), **finished)
            write_receipt(manifest.path)
        if self.output()["report"].exists():  # only the manifest was missing: the report stands
            return
        # The shards' figures and hashes from their receipts: no record read, no file hashed here. A shard
        # whose receipt predates report_stats (a dataset finished before) is read here, that shard alone.
        read_back, hashes = {}, []
        for target in self.dataset_files():  # one receipt at a time: each holds up to ~1 MB of token counts
            receipt = target.receipt()
            if "report_stats" in receipt:
                read_back[receipt["file"]] = record_stats.compact(receipt.pop("report_stats"))
            hashes.append(receipt)
        self.set_status_message(f"the report, from {len(read_back)} of {len(hashes)} shard receipts")
        commit_report(self.dataset_dir, lambda out: record_stats.write_report(
            self.dataset_dir, out, name=self.dataset_dir.name, read_back=read_back,
            known_files=written_files(hashes)))


def _made_again(tasks: list[luigi.Task | None]):
    """Yield (as Luigi's dynamic dependencies) those of `tasks` whose receipts cannot be read (missing, or not of a
    receipt's shape): tasks whose receipts a task reads though they are not its own requirements. Only their
    receipts are asked for: what they describe (a sentence shard removed once its records were made, say) is not."""
    def unreadable(task: luigi.Task) -> bool:
        for target in luigi.task.flatten(task.output()):
            try:
                target.receipt()
            except (OSError, MalformedReceipt):
                return True
        return False

    needed = [task for task in tasks if task is not None and unreadable(task)]
    if needed:
        yield needed


def written_files(shard_receipts: list[dict]) -> dict[str, dict]:
    """{name: {"sha256", "size"}} of every shard file and index file, as the PretrainShard receipts give them.

    MANIFEST.json takes these instead of hashing the whole dataset again in this one task (214 GB,
    minutes, for English Wikipedia). Trust: they are what every shard's complete() already relies on
    (a receipt is committed after its file, and read_receipt checks the file still has the size it
    names), and build_manifest checks each size again. `wikiprep verify` hashes every file against
    the manifest independently. A receipt written before indexes were recorded names no index: that
    index is hashed by finalize, as before.
    """
    files = {}
    for r in shard_receipts:
        files[r["file"]] = {"sha256": r["sha256"], "size": r["size"]}
        if "index" in r:
            files[r["index"]["file"]] = {"sha256": r["index"]["sha256"], "size": r["index"]["size"]}
    return files


class Pretrain128(PretrainDataset):
    """PretrainDataset at its defaults: sequences of 128 tokens, 20 predictions."""


class Pretrain384(PretrainDataset):
    """Sequences of 384 tokens, 56 predictions."""

    max_seq_length = IntParameter(default=384)
    max_predictions_per_seq = IntParameter(default=56)


class Pretrain512(PretrainDataset):
    """Sequences of 512 tokens, 76 predictions."""

    max_seq_length = IntParameter(default=512)
    max_predictions_per_seq = IntParameter(default=76)
