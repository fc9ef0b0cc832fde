"""The two doors of the house, and what stands at them.

- A corpus is a `wikiprep.corpus.Source` bound to the BERT stages of `workflows.bert` by a subclass per
  stage: here a corpus unknown to the project (one document per line of the text files of a folder) goes
  through the whole pipeline, Punkt, sentence shards, instances, manifest and report, with nothing but
  the dozen lines below, and its dataset passes `wikiprep verify`.
- Importing `workflows` changes no process state; `workflows.setup()` does, once, and Luigi's command line
  calls it.
- Parameter bounds hold for constructor values as for command-line ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import luigi
import pytest

from fixture_paths import REFERENCE_INPUTS, REFERENCE_VOCAB
from shardkit.errors import PrepError
from wikiprep.corpus import Document, Source
from wikiprep.verify import verify
from workflows import bert, wiki

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# A corpus the project does not know: one source class and one binding, nothing else.

@dataclass(frozen=True)
class FilePiece:
    path: Path

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass(frozen=True)
class LinesSource(Source):
    """Every line of every .txt file of a folder is a document; a file is a piece."""

    folder: str

    shard_prefix = "lines"

    @property
    def name(self) -> str:
        return f"the lines of {self.folder}"

    def description(self) -> dict:
        return {"text_dir": self.folder}

    def pieces(self) -> list[FilePiece]:
        return [FilePiece(p) for p in sorted(Path(self.folder).glob("*.txt"))]

    def piece_size(self, piece: FilePiece) -> int:
        return piece.path.stat().st_size

    def documents(self, piece: FilePiece, *, min_chars: int):
        read = 0
        with open(piece.path, "rb") as f:
            for n, line in enumerate(f):
                read += len(line)
                text = line.decode("utf-8").strip()
                if len(text) < max(min_chars, 1):
                    yield Document(f"{piece.name}:{n}", [], "too_short", read)
                else:
                    yield Document(f"{piece.name}:{n}", [text], None, read)


class LinesTask(bert.CorpusTask):
    stages = {}
    text_dir = luigi.Parameter()

    def source(self) -> LinesSource:
        return LinesSource(self.text_dir)

    @property
    def work_dir(self) -> Path:
        return Path(self.data_dir) / "lines"

    def piece_task(self, cls, piece):
        return self.clone(cls, piece_file=str(piece.path))


class SeamTrainPunkt(LinesTask, bert.TrainPunkt): pass
class SeamSentenceShards(LinesTask, bert.SentenceShards): pass
class SeamSplitPiece(LinesTask, bert.SplitPiece):
    piece_file = luigi.Parameter()
    piece = property(lambda self: FilePiece(Path(self.piece_file)))
class SeamSplitCorpus(LinesTask, bert.SplitCorpus): pass
class SeamSentenceShard(LinesTask, bert.SentenceShard): pass
class SeamTrainVocab(LinesTask, bert.TrainVocab): pass
class SeamPretrainShard(LinesTask, bert.PretrainShard): pass
class SeamPretrainPlan(LinesTask, bert.PretrainPlan): pass
class SeamPretrainPart(LinesTask, bert.PretrainPart): pass
class SeamPretrainDataset(LinesTask, bert.PretrainDataset): pass
class SeamPretrain128(SeamPretrainDataset, bert.Pretrain128): pass


def test_a_new_corpus_is_a_source_and_a_binding(tmp_path):
    texts = tmp_path / "texts"
    texts.mkdir()
    lines = [line for line in (REFERENCE_INPUTS / "sample_text.txt").read_text(encoding="utf-8").splitlines() if line]
    (texts / "a.txt").write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")
    (texts / "b.txt").write_text("\n".join(lines[len(lines) // 2:]) + "\n", encoding="utf-8")
    task = SeamPretrain128(data_dir=str(tmp_path / "data"), text_dir=str(texts), vocab_file=str(REFERENCE_VOCAB),
                           num_shards=2, min_doc_chars=0)
    assert luigi.build([task], local_scheduler=True, workers=1, log_level="WARNING")

    folder = task.dataset_dir
    assert folder == tmp_path / "data" / "lines" / "seq128_mask20_dup5_shards2"
    assert sorted(p.name for p in folder.glob("lines_*")) == [
        "lines_00000.index", "lines_00000.tfrecord", "lines_00001.index", "lines_00001.tfrecord"]
    description = json.loads((folder / "dataset.json").read_text(encoding="utf-8"))
    assert description["text_dir"] == str(texts) and description["num_shards"] == 2
    stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    assert stats["total"]["instances"] > 0
    assert (folder / "report" / "report.html").is_file()
    checked = verify(folder)
    assert checked["records"] == stats["total"]["instances"] and checked["files"] == 2
    # Both pieces were split, each on its own, and every sentence shard came from both.
    assert sorted(p.name for p in (tmp_path / "data" / "lines" / "split" / "n2_seed12345_min0").glob("[!.]*")) == ["a", "b"]


def test_the_generic_stages_are_in_their_own_namespace_and_each_binding_finds_its_own():
    assert bert.TrainPunkt.get_task_family() == "bert.TrainPunkt"
    assert wiki.TrainPunkt.get_task_family() == "TrainPunkt"
    assert wiki.WikiTask.stages[bert.SplitPiece] is wiki.SplitPart
    assert LinesTask.stages[bert.SplitPiece] is SeamSplitPiece
    task = SeamPretrain128(data_dir="d", text_dir="t", num_shards=3)
    assert type(task.stage(bert.SentenceShard, shard=2)) is SeamSentenceShard


# ---------------------------------------------------------------------------------------------
# A quiet import, one explicit setup

# numpy adds warning filters of its own when first imported: imported before, so that what changes is ours.
STATE = """
import logging, signal, warnings
import luigi.configuration, luigi.interface, numpy
def state():
    config = luigi.configuration.get_config()
    return (signal.getsignal(signal.SIGTERM), list(logging.getLogger("luigi-interface").filters),
            {name: list(logging.getLogger(name).handlers) for name in ("shardkit", "wikiprep", "trainers")},
            config.has_section("retcode"), luigi.interface._WorkerSchedulerFactory.create_worker,
            len(warnings.filters))
"""


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", STATE + code], capture_output=True, text=True, cwd="/",
                         env={**os.environ, "LUIGI_CONFIG_PATH": "/nonexistent.cfg"})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_workflows_changes_no_process_state():
    assert _run("before = state()\nimport workflows\nprint(state() == before)") == "True"


def test_setup_changes_it_once():
    assert _run("import workflows\nbefore = state()\nworkflows.setup()\nonce = state()\nworkflows.setup()\n"
                "print(once != before, state() == once)") == "True True"


def test_luigi_command_line_runs_setup(tmp_path):
    """A parameter out of bounds, through Luigi's own command line from a folder without luigi.cfg: its one
    error line, no traceback, and the project's exit status for it ([retcode] unhandled_exception, 40, where
    Luigi's own default is 4), which outside the project root only setup() sets."""
    out = subprocess.run([str(Path(sys.executable).parent / "luigi"), "--module", "workflows", "Pretrain128",
                          "--data-dir", str(tmp_path), "--dump-date", "20260101", "--num-shards", "0",
                          "--local-scheduler"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 40, out.stderr
    assert "wikiprep: error: --num-shards 0: must be at least 1" in out.stderr.splitlines()
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------------------------------------
# Bounds where values enter

@pytest.mark.parametrize("params, message", [
    ({"num_shards": 0}, "--num-shards 0: must be at least 1"),
    ({"vocab_size": 5}, "--vocab-size 5: must be more than the 5 special tokens"),
    ({"min_doc_chars": -1}, "--min-doc-chars -1: must be at least 0"),
    ({"extract_slice_mb": -2.0}, "--extract-slice-mb -2.0: must be at least 0.0"),
])
def test_bounds_hold_for_constructor_values(params, message):
    with pytest.raises(PrepError, match=f"^{message}$"):
        wiki.Pretrain128(data_dir="d", dump_date="20260101", **params)


def test_generation_options_are_valid_by_construction():
    from wikiprep.options import GenerationOptions
    with pytest.raises(PrepError, match="dupe_factor=0"):
        GenerationOptions(dupe_factor=0)
