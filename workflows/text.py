"""The text-corpus tasks: a folder of text files to BERT pre-training shards.

    luigi --module workflows PretrainText128 --data-dir D --text-dir PATH --text-format books|sentences|lines|jsonl
          [--text-field text] [--name NAME]        (and PretrainText384, PretrainText512)

The BERT stages of `workflows.bert`, bound to a `wikiprep.text.source.TextSource`: TextTrainPunkt ->
TextSplitPiece -> TextSplit -> TextSentenceShard -> (TextSentenceShards -> TextTrainVocab, without
--vocab-file) -> TextPretrainShard -> TextPretrainDataset, in DATA/NAME/ (NAME: --name, else the text
folder's own name). A piece is a run of small files (`--file-index` to `--last-file`), or a byte range of a
large one (`--file-index`, `--slice`, `--slices`). The `sentences` format is split already: it has no Punkt model.
"""

from __future__ import annotations

from pathlib import Path

import luigi

from wikiprep.text import readers
from wikiprep.text.source import TextPiece, TextSource

from . import bert, slurm
from .base import BoolParameter, ChoiceParameter, FloatParameter, IntParameter


class TextTask(bert.CorpusTask):
    """Base of the text-corpus tasks: the folder they read, in which format, and where its work goes."""

    stages = {}

    text_dir = luigi.Parameter(description="the folder of text files (read recursively, in sorted path order)")
    text_format = ChoiceParameter(choices=readers.FORMATS,
                                  description="books (a document per file), sentences (a sentence per line, a blank "
                                              "line between documents), lines (a document per line), jsonl")
    text_field = luigi.Parameter(default="text", description="--text-format jsonl: the field holding the text")
    name = luigi.OptionalParameter(default=None, description="the corpus' folder under --data-dir (default: the "
                                                             "text folder's name)")
    text_strict_utf8 = BoolParameter(default=False, description="a file that is not UTF-8 is an error, not skipped")
    text_piece_mb = FloatParameter(
        default=64.0, min_value=0.0, significant=False,
        description="split uncompressed files of the sentences, lines and jsonl formats in byte ranges of about "
                    "this many MB, in parallel (0: whole files). The outputs are the same bytes either way")

    def source(self) -> TextSource:
        return TextSource(self.data_dir, self.text_dir, self.text_format, self.name or "", self.text_field,
                          self.text_strict_utf8, self.text_piece_mb, plan=bert.DRY_RUN)

    def check_before_work(self) -> None:
        """The corpus read once (its inventory) or checked against it: a changed folder is refused here."""
        super().check_before_work()
        self.source().inventory()

    @property
    def work_dir(self) -> Path:
        return self.source().work_dir

    def piece_task(self, cls, piece: TextPiece):
        return self.clone(cls, file_index=piece.index, last_file=piece.last, slice=piece.slice, slices=piece.slices)

    def needs_punkt(self) -> bool:
        return self.source().needs_punkt()

    def read_for_plan(self) -> str:
        source = self.source()
        held = source.inventory()
        where = (f"the inventory {source.inventory_path}" if source.inventory_path.is_file()
                 else f"{self.text_dir}, read now and not saved")
        skipped = sum(1 for f in held["files"] if f.get("skipped"))
        return f"files: {len(held['files'])} ({skipped} skipped), pieces: {len(source.pieces())}, from {where}"

    def corpus_figures(self) -> dict:
        return self.source().figures()


class TextTrainPunkt(TextTask, bert.TrainPunkt):
    """bert.TrainPunkt on the corpus' first files."""


class TextSentenceShards(TextTask, bert.SentenceShards):
    """bert.SentenceShards of the corpus."""


class TextSplitPiece(TextTask, bert.SplitPiece):
    """One file (or byte range of one) read, split into sentences and spread over the shards (bert.SplitPiece)."""

    file_index = IntParameter(min_value=0, description="the (first) file, by its place in the corpus' sorted order")
    last_file = luigi.OptionalIntParameter(default=None, description="a run of files: the last one")
    slice = IntParameter(default=0, min_value=0)
    slices = IntParameter(default=1, min_value=1)

    @property
    def piece(self) -> TextPiece:
        return self.source().piece(self.file_index, self.slice, self.slices, self.last_file)


class TextSplit(TextTask, bert.SplitCorpus):
    """Every piece of the corpus split, and judged (bert.SplitCorpus)."""


class TextSentenceShard(TextTask, bert.SentenceShard):
    """bert.SentenceShard: byte ranges partition their file in order, so the shards are the same bytes
    whatever --text-piece-mb."""


class TextTrainVocab(TextTask, bert.TrainVocab):
    """bert.TrainVocab on the corpus' sentence shards."""


class TextPretrainShard(TextTask, bert.PretrainShard):
    """bert.PretrainShard: text_{i:05d}.tfrecord + .index, or text_{i:05d}.hdf5."""


class TextPretrainPlan(TextTask, bert.PretrainPlan):
    """bert.PretrainPlan: how a Parquet dataset's staged shards are dealt over its balanced files."""


class TextPretrainPart(TextTask, bert.PretrainPart):
    """bert.PretrainPart: text_{i:05d}.parquet, or text_{i:05d}.parquet_{bin} of every bin."""


class TextPretrainDataset(TextTask, bert.PretrainDataset):
    """bert.PretrainDataset in DATA/NAME/seq{L}_mask{M}_dup{D}[_shards{N}][_seed{S}][_wwm][_hdf5|_remask]/
    (dataset.folder_name)."""


class PretrainText128(TextPretrainDataset, bert.Pretrain128):
    """A text corpus' dataset of sequences of 128 tokens, 20 predictions (`make text-128`)."""


class PretrainText384(TextPretrainDataset, bert.Pretrain384):
    """A text corpus' dataset of sequences of 384 tokens, 56 predictions (`make text-384`)."""


class PretrainText512(TextPretrainDataset, bert.Pretrain512):
    """A text corpus' dataset of sequences of 512 tokens, 76 predictions (`make text-512`)."""


class SlurmTextStage128(slurm.SlurmStage, PretrainText128):
    """One element of one stage of a text corpus' Slurm chain (workflows.slurm; `make slurm-text-128`)."""

    dataset_class = PretrainText128


class SlurmTextStage384(slurm.SlurmStage, PretrainText384):
    dataset_class = PretrainText384


class SlurmTextStage512(slurm.SlurmStage, PretrainText512):
    dataset_class = PretrainText512
