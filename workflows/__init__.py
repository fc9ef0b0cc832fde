"""Luigi tasks: one per stage, parameters in, one library call, an atomic output with a receipt.

    luigi --module workflows Pretrain128 --data-dir DATA --dump-url URL --wiki enwiki --dump-date 20260101
    luigi --module workflows ImageNet --train-dir ... --validation-dir ... --val-labels ... --output-dir OUT
    luigi --module workflows Demo --out-dir demo

The files are the state: a task is complete when its receipt exists, so running the same
command again after a kill finishes the work and gives identical bytes. All logic lives in
`wikiprep` and `imagenet_prep`; this module only wires stages together.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import luigi

from wikiprep import dataset, download, extract, sentences, vocab
from shardkit.atomic import (atomic_dir, read_dir_receipt, read_receipt, receipt_path, remove_stale_temps,
                             write_dir_receipt, write_json, write_receipt)
from shardkit.cli import error_line
from shardkit.errors import PrepError
from wikiprep.options import GenerationOptions

logger = logging.getLogger("luigi-interface")


# ---------------------------------------------------------------------------------------------
# One clear line for bad input. A PrepError can surface in a task's run(), requires() or
# complete(). Each is printed once, as `PROG: error: <message>` on stderr, PROG being the
# task's `prog`: on Luigi's FAILURE event (run()), on its BROKEN_TASK event (requires(),
# deps()), and by `PrepTask.complete` itself, since Luigi fires no event carrying the exception
# of a failing complete() (worker._add logs only its formatted traceback). Luigi's own log
# records of such a failure keep their first line, given the message, and lose the traceback;
# at `--log-level DEBUG` they keep it, for whoever debugs the code rather than the input.

# The errors printed in this process, by message: the same bad input often fails several tasks.
_reported: dict[str, PrepError] = {}


def report_error(prog: str, error: PrepError) -> None:
    """Print `PROG: error: <message>` on stderr, unless this process printed that message already."""
    if str(error) not in _reported:
        print(error_line(prog, error), file=sys.stderr, flush=True)
    _reported[str(error)] = error


def _exception_line(error: BaseException) -> str:
    """The line that ends the error's formatted traceback: 'shardkit.errors.PrepError: <message>'."""
    return "".join(traceback.format_exception_only(error))


def _logged_prep_error(record: logging.LogRecord) -> PrepError | None:
    """The PrepError whose traceback a log record carries, if any.

    Luigi logs a run() failure with the exception as the record's exc_info; a requires()/deps()
    failure as traceback text, while handling the exception (so `sys.exc_info()` has it); a
    complete() failure as traceback text after `PrepTask.complete` reported the error. The text
    is only matched against those exceptions' own last line, never read for a message.
    """
    if record.exc_info:
        error = record.exc_info[1]
        return error if isinstance(error, PrepError) else None
    handled = sys.exc_info()[1]
    candidates = ([handled] if isinstance(handled, PrepError) else []) + list(_reported.values())
    text = record.getMessage()
    return next((e for e in candidates if text.endswith(_exception_line(e))), None)


class _PrepErrorTracebacks(logging.Filter):
    """Cut the traceback of a PrepError from Luigi's log record, leaving its first line and the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if logger.isEnabledFor(logging.DEBUG):
            return True
        error = _logged_prep_error(record)
        if error is not None:
            first_line = record.getMessage().split("\n", 1)[0].rstrip(":")
            record.msg, record.args, record.exc_info = f"{first_line}: {error}", (), None
        return True


logger.addFilter(_PrepErrorTracebacks())


class ReceiptTarget(luigi.Target):
    """Complete when `path` (a file or a folder) has a receipt that still matches it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def exists(self) -> bool:
        if self.path.is_dir():
            return read_dir_receipt(self.path) is not None
        return read_receipt(self.path) is not None

    def receipt(self) -> dict:
        with open(receipt_path(self.path), encoding="utf-8") as f:
            return json.load(f)


class PrepTask(luigi.Task):
    """Base of every task: a PrepError is printed as one `{prog}: error: ...` line and carried to luigid.

    Tasks define output(), never complete(): this complete() is where its PrepErrors are reported.
    """

    prog = "wikiprep"  # the program that names itself in the error line

    def complete(self):
        try:
            return super().complete()
        except PrepError as error:
            report_error(self.prog, error)
            raise

    def on_failure(self, exception):
        if isinstance(exception, PrepError):
            return str(exception)
        return super().on_failure(exception)


@PrepTask.event_handler(luigi.Event.FAILURE)
@PrepTask.event_handler(luigi.Event.BROKEN_TASK)
def _report_failure(task: PrepTask, exception: BaseException) -> None:
    """run() failed (FAILURE), or requires() / deps() did (BROKEN_TASK)."""
    if isinstance(exception, PrepError):
        report_error(task.prog, exception)


# ---------------------------------------------------------------------------------------------
# Download

class DumpTask(PrepTask):
    data_dir = luigi.Parameter(description="root of all outputs")
    dump_url = luigi.Parameter(default="https://dumps.wikimedia.org",
                               description="base of a dumps-site layout (http://, https:// or file://)")
    wiki = luigi.Parameter(default="enwiki")
    dump_date = luigi.Parameter(description="a dated dump, YYYYMMDD (never 'latest')")
    multistream = luigi.BoolParameter(default=False, description="take the multistream variant of the dump")
    extract_slice_mb = luigi.FloatParameter(
        default=100.0, significant=False,
        description="multistream dumps: extract and split each part in slices of about this many MB of bz2, in "
                    "parallel (0: whole parts). The outputs are the same bytes either way")

    @property
    def dump_params(self) -> dict:
        return dict(data_dir=self.data_dir, dump_url=self.dump_url, wiki=self.wiki, dump_date=self.dump_date,
                    multistream=self.multistream, extract_slice_mb=self.extract_slice_mb)

    @property
    def download_dir(self) -> Path:
        return Path(self.data_dir) / "downloads" / self.wiki / self.dump_date

    @property
    def work_dir(self) -> Path:
        return Path(self.data_dir) / f"{self.wiki}-{self.dump_date}"

    def parts(self) -> list[download.Part]:
        """The dump's part files, from the local copy of dumpstatus.json (fetched once, at scheduling)."""
        return download.dump_parts(self.dump_url, self.wiki, self.dump_date, self.download_dir,
                                   multistream=self.multistream)

    def pieces(self) -> list[extract.Piece]:
        """The units of extraction and splitting, in dump order: whole parts, or slices of multistream ones."""
        return extract.pieces(self.parts(), multistream=self.multistream, slice_mb=self.extract_slice_mb)

    def piece_params(self, piece: extract.Piece) -> dict:
        return dict(part=piece.part, slice=piece.slice, slices=piece.slices)


class DownloadPart(DumpTask):
    """One part file of the dump, verified against its checksum. At most 2 at once per dumps host."""

    part = luigi.Parameter()
    resources = {"wikimedia_http": 1}

    def output(self):
        return ReceiptTarget(self.download_dir / self.part)

    def run(self):
        by_name = {p.name: p for p in self.parts()}
        if self.part not in by_name:
            raise PrepError(f"--part {self.part}: not a file of {self.wiki} {self.dump_date}")

        def progress(done: int, total: int) -> None:
            if total:
                self.set_progress_percentage(round(100 * done / total, 1))
            self.set_status_message(f"{self.part}: {done / 1e6:.1f} of {total / 1e6:.1f} MB")

        download.fetch_part(self.dump_url, self.wiki, self.dump_date, by_name[self.part], self.download_dir,
                            progress=progress)


class DownloadDump(DumpTask):
    """Every part of a dated dump under DATA/downloads/{wiki}/{date}/."""

    def requires(self):
        return [DownloadPart(part=p.name, **self.dump_params) for p in self.parts()]

    def output(self):
        return self.input()


# ---------------------------------------------------------------------------------------------
# Extraction and sentences

class ExtractPart(DumpTask):
    """WikiExtractor over one dump part (or one slice of a multistream part): articles as JSON lines,
    clock magic words pinned to the dump date."""

    part = luigi.Parameter()
    slice = luigi.IntParameter(default=0)
    slices = luigi.IntParameter(default=1)

    def requires(self):
        return DownloadPart(part=self.part, **self.dump_params)

    def output(self):
        return ReceiptTarget(self.work_dir / "extracted" / f"{self.piece.name}.jsonl")

    @property
    def piece(self) -> extract.Piece:
        return extract.Piece(self.part, self.slice, self.slices)

    def run(self):
        out = self.output().path
        remove_stale_temps(out)
        part = self.input().path
        stats = extract.extract_part(part, out, self.dump_date, byte_range=self.piece.byte_range(part))
        write_receipt(out, stats=stats)


class SentenceParams(DumpTask):
    num_shards = luigi.IntParameter(default=256, description="number of output shards")
    seed = luigi.IntParameter(default=12345, description="global seed: shard mixing and instance generation")
    min_doc_chars = luigi.IntParameter(default=200, description="drop cleaned documents shorter than this")

    @property
    def sentence_params(self) -> dict:
        return dict(self.dump_params, num_shards=self.num_shards, seed=self.seed, min_doc_chars=self.min_doc_chars)

    @property
    def split_name(self) -> str:
        return sentences.split_name(self.num_shards, self.seed, self.min_doc_chars)


class TrainPunkt(DumpTask):
    """The Punkt sentence model, trained unsupervised on the dump itself (offline; no nltk.download).

    It needs only the first ~2 M characters of text, so it waits for the first part (or slice)
    alone and asks for the next ones (dynamic dependencies) only while the sample is short:
    training overlaps the extraction of the rest.
    """

    min_doc_chars = luigi.IntParameter(default=200)

    def requires(self):
        return ExtractPart(**self.piece_params(self.pieces()[0]), **self.dump_params)

    def output(self):
        return ReceiptTarget(self.work_dir / f"punkt_min{self.min_doc_chars}.json")

    def run(self):
        sample = sentences.PunktSample(min_chars=self.min_doc_chars)
        for piece in self.pieces():
            sample.add((yield ExtractPart(**self.piece_params(piece), **self.dump_params)).path)
            if sample.full:
                break
        stats = sentences.train_punkt(sample.texts, self.output().path, source=sample.source)
        write_receipt(self.output().path, stats=stats)


class SplitPart(SentenceParams):
    """One extracted part (or slice) cleaned, split into sentences and spread over the shards by
    hash(seed, page id)."""

    part = luigi.Parameter()
    slice = luigi.IntParameter(default=0)
    slices = luigi.IntParameter(default=1)

    def requires(self):
        return {"part": ExtractPart(part=self.part, slice=self.slice, slices=self.slices, **self.dump_params),
                "punkt": TrainPunkt(min_doc_chars=self.min_doc_chars, **self.dump_params)}

    def output(self):
        return ReceiptTarget(self.work_dir / "split" / self.split_name / extract.Piece(self.part, self.slice, self.slices).name)

    def run(self):
        if self.num_shards < 1:
            raise PrepError(f"--num-shards {self.num_shards}: must be at least 1")
        stats = sentences.split_part(self.input()["part"].path, self.input()["punkt"].path, self.output().path,
                                     num_shards=self.num_shards, seed=self.seed, min_chars=self.min_doc_chars)
        write_dir_receipt(self.output().path, stats=stats)


class SentenceShards(SentenceParams):
    """All sentence shards: shard i is bucket i of every part (or slice), in dump order. Slices partition
    their part in page order, so the shards are the same bytes whether parts were sliced or not."""

    def requires(self):
        return [SplitPart(**self.piece_params(piece), **self.sentence_params) for piece in self.pieces()]

    def output(self):
        return ReceiptTarget(self.work_dir / "sentences" / self.split_name)

    def run(self):
        splits = self.input()
        # Documents dropped at extraction (redirects, other namespaces...) are counted with those dropped at cleaning.
        extracted = [ExtractPart(**self.piece_params(piece), **self.dump_params).output().receipt()["stats"]
                     for piece in self.pieces()]
        stats = sentences.merge_splits([t.path for t in splits], self.output().path, num_shards=self.num_shards,
                                       split_stats=[t.receipt()["stats"] for t in splits], extract_stats=extracted,
                                       source=f"{self.wiki} {self.dump_date}")
        write_dir_receipt(self.output().path, stats=stats)


class TrainVocab(SentenceParams):
    """A WordPiece vocabulary trained (deterministically) on the sentence shards."""

    vocab_size = luigi.IntParameter(default=30522)
    do_lower_case = luigi.BoolParameter(default=True, parsing=luigi.BoolParameter.EXPLICIT_PARSING)

    def requires(self):
        return SentenceShards(**self.sentence_params)

    def output(self):
        case = "uncased" if self.do_lower_case else "cased"
        return ReceiptTarget(self.work_dir / "vocab" / f"{self.split_name}_{case}_{self.vocab_size}.txt")

    def run(self):
        shards = sorted(self.input().path.glob("shard_*.txt"))
        stats = vocab.build_vocab(shards, self.output().path, vocab_size=self.vocab_size,
                                  lowercase=self.do_lower_case)
        write_receipt(self.output().path, stats=stats)


# ---------------------------------------------------------------------------------------------
# Pre-training instances

class PretrainParams(SentenceParams):
    vocab_file = luigi.OptionalParameter(default=None, description="BERT vocab.txt; trained on the corpus when absent")
    vocab_size = luigi.IntParameter(default=30522, description="size of the trained vocabulary")
    do_lower_case = luigi.BoolParameter(default=True, parsing=luigi.BoolParameter.EXPLICIT_PARSING)
    max_seq_length = luigi.IntParameter(default=128)
    max_predictions_per_seq = luigi.IntParameter(default=20)
    dupe_factor = luigi.IntParameter(default=5)
    masked_lm_prob = luigi.FloatParameter(default=0.15)
    short_seq_prob = luigi.FloatParameter(default=0.1)
    do_whole_word_mask = luigi.BoolParameter(default=False)
    fixed_mask_count = luigi.BoolParameter(default=False,
                                           description="Graphcore's fixed count: a full sequence gets exactly "
                                                       "max_predictions_per_seq masks")

    @property
    def pretrain_params(self) -> dict:
        return dict(self.sentence_params, vocab_file=self.vocab_file, vocab_size=self.vocab_size,
                    do_lower_case=self.do_lower_case, max_seq_length=self.max_seq_length,
                    max_predictions_per_seq=self.max_predictions_per_seq, dupe_factor=self.dupe_factor,
                    masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
                    do_whole_word_mask=self.do_whole_word_mask, fixed_mask_count=self.fixed_mask_count)

    @property
    def options(self) -> GenerationOptions:
        """The generation options, with the global seed (each shard's own derives from it)."""
        return GenerationOptions.from_object(self, random_seed=self.seed)

    @property
    def dataset_dir(self) -> Path:
        return self.work_dir / dataset.folder_name(self.options)

    def vocab_task(self):
        return None if self.vocab_file else TrainVocab(vocab_size=self.vocab_size, do_lower_case=self.do_lower_case,
                                                       **self.sentence_params)

    def vocab_path(self) -> Path:
        return Path(self.vocab_file) if self.vocab_file else self.vocab_task().output().path

    def description(self) -> dict:
        """What defines the dataset's content; a folder made with other values is never mixed with this one."""
        return dataset.describe(self.options, self.vocab_path(), wiki=self.wiki, dump_date=self.dump_date,
                                multistream=self.multistream, extract_slice_mb=self.extract_slice_mb,
                                num_shards=self.num_shards, min_doc_chars=self.min_doc_chars,
                                vocab_size=self.vocab_size)


class PretrainShard(PretrainParams):
    """Instances of one sentence shard, seeded by dataset.shard_seed(seed, shard): wiki_{i:05d}.tfrecord + .index."""

    shard = luigi.IntParameter()

    def requires(self):
        deps = {"sentences": SentenceShards(**self.sentence_params)}
        if self.vocab_task() is not None:
            deps["vocab"] = self.vocab_task()
        return deps

    def output(self):
        return ReceiptTarget(self.dataset_dir / dataset.shard_name(self.shard))

    def run(self):
        out = self.output().path
        seed = dataset.shard_seed(self.seed, self.shard)
        stats = dataset.write_shard(self.input()["sentences"].path / sentences.shard_name(self.shard),
                                    self.vocab_path(), out, GenerationOptions.from_object(self, random_seed=seed),
                                    self.description())
        write_receipt(out, seed=seed, stats=stats)


class PretrainDataset(PretrainParams):
    """Every shard, then vocab.txt, stats.json and MANIFEST.json: the dataset is complete when MANIFEST.json is."""

    def requires(self):
        return [PretrainShard(shard=i, **self.pretrain_params) for i in range(self.num_shards)]

    def output(self):
        return ReceiptTarget(self.dataset_dir / "MANIFEST.json")

    def run(self):
        dataset.finalize(self.dataset_dir, self.description(), self.vocab_path(),
                         [t.receipt()["stats"] for t in self.input()],
                         SentenceShards(**self.sentence_params).output().receipt()["stats"])
        write_receipt(self.output().path)


class Pretrain128(PretrainDataset):
    max_seq_length = luigi.IntParameter(default=128)
    max_predictions_per_seq = luigi.IntParameter(default=20)


class Pretrain384(PretrainDataset):
    max_seq_length = luigi.IntParameter(default=384)
    max_predictions_per_seq = luigi.IntParameter(default=56)


class Pretrain512(PretrainDataset):
    max_seq_length = luigi.IntParameter(default=512)
    max_predictions_per_seq = luigi.IntParameter(default=76)


# ---------------------------------------------------------------------------------------------
# ImageNet

class ImageNetParams(PrepTask):
    prog = "imagenet-prep"
    train_dir = luigi.Parameter(description="train/<wnid>/*.JPEG")
    validation_dir = luigi.Parameter(description="flat validation images, or <wnid>/ folders")
    val_labels = luigi.OptionalParameter(default=None, description="TF labels .txt, Kaggle LOC_val_solution.csv "
                                                                    "or devkit ground truth; omit for <wnid>/ folders")
    output_dir = luigi.Parameter()
    synsets_file = luigi.OptionalParameter(default=None)
    metadata_file = luigi.OptionalParameter(default=None)
    bbox_dir = luigi.OptionalParameter(default=None)
    train_shards = luigi.IntParameter(default=1024)
    validation_shards = luigi.IntParameter(default=128)
    seed = luigi.IntParameter(default=12345)

    @property
    def imagenet_params(self) -> dict:
        return dict(train_dir=self.train_dir, validation_dir=self.validation_dir, val_labels=self.val_labels,
                    output_dir=self.output_dir, synsets_file=self.synsets_file, metadata_file=self.metadata_file,
                    bbox_dir=self.bbox_dir, train_shards=self.train_shards,
                    validation_shards=self.validation_shards, seed=self.seed)


class ImageNetPlan(ImageNetParams):
    """Which image goes to which shard: sorted inputs, labels by sorted synset, a seeded shuffle."""

    def output(self):
        # In a hidden folder: the plan names the input paths, which differ between machines, so it
        # stays out of MANIFEST.json (and out of the way of readers that glob the output folder).
        return ReceiptTarget(Path(self.output_dir) / ".work" / "plan.json")

    def run(self):
        from imagenet_prep import convert

        plan = convert.make_plan(self.train_dir, self.validation_dir, self.val_labels,
                                 synsets_file=self.synsets_file, metadata_file=self.metadata_file,
                                 bbox_dir=self.bbox_dir, train_shards=self.train_shards,
                                 validation_shards=self.validation_shards, seed=self.seed)
        convert.write_plan(plan, self.output().path)
        write_receipt(self.output().path)


class ImageNetShard(ImageNetParams):
    split = luigi.ChoiceParameter(choices=["train", "validation"])
    index = luigi.IntParameter()

    def requires(self):
        return ImageNetPlan(**self.imagenet_params)

    def output(self):
        n = self.train_shards if self.split == "train" else self.validation_shards
        return ReceiptTarget(Path(self.output_dir) / f"{self.split}-{self.index:05d}-of-{n:05d}")

    def run(self):
        from imagenet_prep import convert

        remove_stale_temps(self.output().path)
        plan = convert.read_plan(self.input().path)
        result = convert.write_shard(plan, self.split, self.index, self.output_dir)
        write_receipt(self.output().path, result=result)


class ImageNet(ImageNetParams):
    """ImageNet as TFRecord shards: train-*/validation-* + idx/ + MANIFEST.json in --output-dir."""

    def requires(self):
        return {"plan": ImageNetPlan(**self.imagenet_params),
                "shards": [ImageNetShard(split=split, index=i, **self.imagenet_params)
                           for split, n in (("train", self.train_shards), ("validation", self.validation_shards))
                           for i in range(n)]}

    def output(self):
        return ReceiptTarget(Path(self.output_dir) / "MANIFEST.json")

    def run(self):
        from imagenet_prep import convert

        plan = convert.read_plan(self.input()["plan"].path)
        results = [t.receipt()["result"] for t in self.input()["shards"]]
        convert.finalize(plan, self.output_dir, results)
        write_receipt(self.output().path)


# ---------------------------------------------------------------------------------------------
# The thin trainers

class TrainBert(PrepTask):
    """A tiny BERT trained on a pre-training dataset folder: OUT/metrics.csv (a loss per step) and OUT/loss.png."""

    dataset_dir = luigi.Parameter()
    steps = luigi.IntParameter(default=300)
    out_dir = luigi.Parameter()

    def output(self):
        return ReceiptTarget(Path(self.out_dir) / "metrics.csv")

    def run(self):
        from wikiprep import train

        result = train.train_bert(self.dataset_dir, self.out_dir, steps=self.steps)
        write_receipt(self.output().path, result=result)


class TrainImageNet(TrainBert):
    """A tiny CNN trained on ImageNet shards: OUT/metrics.csv and OUT/loss.png."""

    prog = "imagenet-prep"

    def run(self):
        from imagenet_prep import train

        result = train.train_imagenet(self.dataset_dir, self.out_dir, steps=self.steps)
        write_receipt(self.output().path, result=result)


# ---------------------------------------------------------------------------------------------
# The demo: everything end to end on the embedded samples

DEMO_WIKI, DEMO_DATE = "enwiki", "20260101"


class DemoSamples(PrepTask):
    """The embedded samples: a small dumps site (2 bz2 parts) and a small ImageNet tree, generated by code."""

    out_dir = luigi.Parameter(default="demo")

    def output(self):
        return {"dump": ReceiptTarget(Path(self.out_dir) / "dumps-site"),
                "imagenet": ReceiptTarget(Path(self.out_dir) / "imagenet-raw")}

    def run(self):
        from imagenet_prep import samples as imagenet_samples
        from wikiprep import samples as wiki_samples

        site = self.output()["dump"].path
        if not self.output()["dump"].exists():
            with atomic_dir(site) as tmp:
                wiki_samples.write_sample_dump(tmp, wiki=DEMO_WIKI, date=DEMO_DATE)
            write_dir_receipt(site)
        raw = self.output()["imagenet"].path
        if not self.output()["imagenet"].exists():
            with atomic_dir(raw) as tmp:
                layout = imagenet_samples.write_sample_tree(tmp)
            write_dir_receipt(raw, layout={k: Path(v).relative_to(tmp).as_posix() for k, v in layout.items()})


class Demo(PrepTask):
    """Sample dump -> Pretrain128 -> TrainBert, and sample ImageNet -> ImageNet -> TrainImageNet."""

    out_dir = luigi.Parameter(default="demo")
    steps = luigi.IntParameter(default=300)

    def requires(self):
        return DemoSamples(out_dir=self.out_dir)

    def output(self):
        return ReceiptTarget(Path(self.out_dir) / "summary.json")

    def pretrain(self):
        root = Path(self.out_dir).resolve()
        return Pretrain128(data_dir=str(root / "data"), dump_url=(root / "dumps-site").as_uri(), wiki=DEMO_WIKI,
                           dump_date=DEMO_DATE, num_shards=4, vocab_size=8000, min_doc_chars=200)

    def imagenet(self):
        root = Path(self.out_dir).resolve()
        samples = self.input()["imagenet"]
        layout = {k: str(samples.path / v) for k, v in samples.receipt()["layout"].items()}
        return ImageNet(output_dir=str(root / "imagenet"), train_shards=4, validation_shards=2, **layout)

    def run(self):
        root = Path(self.out_dir).resolve()
        pretrain, imagenet = self.pretrain(), self.imagenet()
        yield [pretrain, imagenet]
        bert = TrainBert(dataset_dir=str(pretrain.dataset_dir), steps=self.steps, out_dir=str(root / "train-bert"))
        cnn = TrainImageNet(dataset_dir=imagenet.output_dir, steps=self.steps, out_dir=str(root / "train-imagenet"))
        yield [bert, cnn]
        summary = {
            "bert_dataset": str(pretrain.dataset_dir),
            "imagenet_dataset": imagenet.output_dir,
            "train_bert": {"out_dir": bert.out_dir, **bert.output().receipt()["result"]},
            "train_imagenet": {"out_dir": cnn.out_dir, **cnn.output().receipt()["result"]},
        }
        write_json(self.output().path, summary)
        write_receipt(self.output().path)
