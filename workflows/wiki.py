"""The Wikipedia tasks: a dated dump to BERT pre-training shards.

DownloadPart -> ExtractPart -> then the BERT stages of `workflows.bert`, bound to the dump here:
TrainPunkt -> SplitPart -> SplitDump -> SentenceShard -> (SentenceShards -> TrainVocab, without
--vocab-file) -> PretrainShard -> PretrainDataset (Pretrain128, Pretrain384, Pretrain512).

The dump's parameters are WikiTask's; a piece of the dump (a part, or a slice of a multistream part) is
named by ExtractPart's `part`, `slice` and `slices`. The corpus itself is a
`wikiprep.wikipedia.source.WikipediaSource`: its pieces and the cleaned documents of each.
"""

from __future__ import annotations

from pathlib import Path

import luigi
from luigi.util import inherits, requires

from shardkit.atomic import remove_stale_temps, write_receipt
from shardkit import fetch
from shardkit.errors import PrepError
from wikiprep.wikipedia import dump, extract
from wikiprep.wikipedia.samples import write_sample_dump  # noqa: F401  the demo's dump, laid out like the dumps site
from wikiprep.wikipedia.source import WikipediaSource

from . import bert
from .base import BoolParameter, FloatParameter, IntParameter, ReceiptTarget

# The dumps' status as a plan (workflows.plan) read it, by (dump_url, wiki, dump_date), when DATA holds no
# usable copy: a plan writes nothing, so its tasks take their parts from memory. Empty in every run.
PLANNED_STATUS: dict[tuple[str, str, str], dict] = {}


class download(luigi.Config):
    """How long a dumps server may take, for every download and status read of a run: `[download]` in luigi.cfg,
    or `--download-retries 3` (...) on the command line. Under the defaults a server that never answers fails
    the run within about two minutes (`stall_budget`), one that trickles or drops without progress sooner."""

    retries = IntParameter(default=5, min_value=0, description="attempts without progress before giving up")
    timeout = FloatParameter(default=fetch.READ_TIMEOUT, min_value=0.001, description="seconds a read may wait")
    connect_timeout = FloatParameter(default=fetch.CONNECT_TIMEOUT, min_value=0.001,
                                     description="seconds a connection may take")
    stall_budget = FloatParameter(default=fetch.STALL_BUDGET, min_value=0.001,
                                  description="seconds without progress after which a download is given up")

    def settings(self) -> dict:
        return {"retries": self.retries, "timeout": self.timeout, "connect_timeout": self.connect_timeout,
                "stall_budget": self.stall_budget}


class WikiTask(bert.CorpusTask):
    """Base of the Wikipedia tasks: the dated dump they read, where its files go, its parts and pieces."""

    stages = {}

    dump_url = luigi.Parameter(default="https://dumps.wikimedia.org",
                               description="base of a dumps-site layout (http://, https:// or file://)")
    wiki = luigi.Parameter(default="enwiki")
    dump_date = luigi.Parameter(description="a dated dump, YYYYMMDD (never 'latest')")
    multistream = BoolParameter(default=False, description="take the multistream variant of the dump")
    extract_slice_mb = FloatParameter(
        default=100.0, min_value=0.0, significant=False,
        description="multistream dumps: extract and split each part in slices of about this many MB of bz2, in "
                    "parallel (0: whole parts). The outputs are the same bytes either way")

    def source(self) -> WikipediaSource:
        return WikipediaSource(self.data_dir, self.dump_url, self.wiki, self.dump_date, self.multistream,
                               self.extract_slice_mb, PLANNED_STATUS.get((self.dump_url, self.wiki, self.dump_date)),
                               download().settings(), self.language)

    @property
    def download_dir(self) -> Path:
        return self.source().download_dir

    @property
    def work_dir(self) -> Path:
        return self.source().work_dir

    def parts(self) -> list[dump.Part]:
        return self.source().parts()

    def piece_task(self, cls, piece: extract.Piece):
        return self.clone(cls, part=piece.part, slice=piece.slice, slices=piece.slices)

    def piece_input(self, piece: extract.Piece) -> ExtractPart:
        return self.piece_task(ExtractPart, piece)

    def corpus_inputs(self) -> list[luigi.Task]:
        return [self.clone(DownloadDump)]

    def read_for_plan(self) -> str:
        """The dump's parts without writing anything. A usable copy of dumpstatus.json in DATA (what a run
        fetched) is read as the run reads it; otherwise it alone is fetched into memory (PLANNED_STATUS), and
        the tasks read it from there; the checksum files a run fetches with it are not fetched."""
        local = self.download_dir / dump.STATUS_FILE
        if local.is_file():
            try:
                parts = dump.list_parts(self.download_dir, self.wiki, self.dump_date, multistream=self.multistream)
                return f"dump parts: {len(parts)}, from the copy in {local}"
            except PrepError:
                pass  # a copy from before the dump was done, say: a run would fetch the status again
        PLANNED_STATUS[(self.dump_url, self.wiki, self.dump_date)] = dump.read_dump_status(
            self.dump_url, self.wiki, self.dump_date, **download().settings())
        url = dump.dump_file_url(self.dump_url, self.wiki, self.dump_date, dump.STATUS_FILE)
        return f"dump parts: {len(self.parts())}, from {url}, fetched now and not saved"

    def identity(self) -> dict:
        """The dump's description and its parts' checksums ({name: sha1 or md5}), as dumpstatus.json gives them."""
        return {**self.source().description(),
                "parts": {p.name: p.sha1 or p.md5 for p in self.parts() if not p.is_index}}

    def upstream_stats(self) -> list[dict]:
        """The extraction's figures of every piece (pages dropped there: redirects, other namespaces...); a part
        that yields no article is refused (a sliced part is judged whole)."""
        extracted = [self.piece_input(piece).output().receipt()["stats"] for piece in self.pieces()]
        extract.check_parts(extracted)
        return extracted


# ---------------------------------------------------------------------------------------------
# Download and extraction

class DownloadPart(WikiTask):
    """One part file of the dump, verified against its checksum. At most 2 at once per dumps host."""

    part = luigi.Parameter()
    resources = {"wikimedia_http": 1}

    def output(self):
        return ReceiptTarget(self.download_dir / self.part)

    def run(self):
        by_name = {p.name: p for p in self.parts()}
        if self.part not in by_name:
            raise PrepError(f"--part {self.part}: not a file of {self.wiki} {self.dump_date}")
        dump.fetch_part(self.dump_url, self.wiki, self.dump_date, by_name[self.part], self.download_dir,
                        progress=self.progress(f"download {self.part}", "B"), **download().settings())


class DownloadDump(WikiTask):
    """Every part of a dated dump under DATA/downloads/{wiki}/{date}/."""

    def requires(self):
        return [self.clone(DownloadPart, part=p.name) for p in self.parts()]

    def output(self):
        return self.input()


@requires(DownloadPart)
class ExtractPart(WikiTask):
    """WikiExtractor over one dump part (or one slice of a multistream part): articles as JSON lines,
    clock magic words pinned to the dump date."""

    slice = IntParameter(default=0, min_value=0)
    slices = IntParameter(default=1, min_value=1)

    @property
    def piece(self) -> extract.Piece:
        return extract.Piece(self.part, self.slice, self.slices)

    def output(self):
        return ReceiptTarget(self.source().extracted_path(self.piece), {"stats": dict})

    def run(self):
        out = self.output().path
        remove_stale_temps(out)
        part = self.input().path
        # A part damaged since its download was verified is named and removed to be fetched again, not blamed on
        # the dump (extract.PartReader checks it against its receipt before an error about its content).
        stats = extract.extract_part(part, out, self.dump_date, byte_range=self.piece.byte_range(part),
                                     progress=self.progress(f"extract {self.piece.name}", "B"))
        write_receipt(out, stats=stats)


# ---------------------------------------------------------------------------------------------
# The BERT stages, bound to the dump

class TrainPunkt(WikiTask, bert.TrainPunkt):
    """bert.TrainPunkt on the extracted articles: it waits for the first part (or slice) alone."""


class SentenceShards(WikiTask, bert.SentenceShards):
    """bert.SentenceShards of the dump."""


@inherits(ExtractPart)
class SplitPart(WikiTask, bert.SplitPiece):
    """One extracted part (or slice) cleaned, split into sentences and spread over the shards (bert.SplitPiece)."""

    piece = ExtractPart.piece


class SplitDump(WikiTask, bert.SplitCorpus):
    """Every piece of the dump split, and judged with the extraction's figures (bert.SplitCorpus)."""


class SentenceShard(WikiTask, bert.SentenceShard):
    """bert.SentenceShard: slices partition their part in page order, so the shards are the same bytes whether
    parts were sliced or not."""


class TrainVocab(WikiTask, bert.TrainVocab):
    """bert.TrainVocab on the dump's sentence shards."""


class PretrainShard(WikiTask, bert.PretrainShard):
    """bert.PretrainShard: wiki_{i:05d}.tfrecord + .index, or wiki_{i:05d}.hdf5."""


class PretrainPlan(WikiTask, bert.PretrainPlan):
    """bert.PretrainPlan: how a Parquet dataset's staged shards are dealt over its balanced files."""


class PretrainPart(WikiTask, bert.PretrainPart):
    """bert.PretrainPart: wiki_{i:05d}.parquet, or wiki_{i:05d}.parquet_{bin} of every bin."""


class PretrainDataset(WikiTask, bert.PretrainDataset):
    """bert.PretrainDataset in DATA/{wiki}-{date}/seq{L}_mask{M}_dup{D}[_shards{N}][_seed{S}][_wwm][_hdf5|_remask|
    _parquet...]/ (dataset.folder_name)."""


class Pretrain128(PretrainDataset, bert.Pretrain128):
    """A dump's dataset of sequences of 128 tokens, 20 predictions (`make wiki-128`)."""


class Pretrain384(PretrainDataset, bert.Pretrain384):
    """A dump's dataset of sequences of 384 tokens, 56 predictions (`make wiki-384`)."""


class Pretrain512(PretrainDataset, bert.Pretrain512):
    """A dump's dataset of sequences of 512 tokens, 76 predictions (`make wiki-512`)."""
