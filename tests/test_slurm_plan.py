"""Which task each Slurm job runs (workflows.slurm), without Slurm: the real-Slurm tests are
cluster/slurm/test/test_slurm.py, run by `make test-slurm`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.errors import PrepError
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions
from wikiprep.wikipedia.samples import write_sample_dump
from workflows import DEMO_DATE, DEMO_WIKI, Pretrain384
from workflows.slurm import STAGES, SlurmStage384, array_spec, plan, stage_elements

REPO = Path(__file__).resolve().parents[1]


def seq128(num_shards: int) -> str:
    """The folder of a default seq-128 dataset of `num_shards` shards: seq128_mask20_dup5_shards2 ..."""
    return folder_name(GenerationOptions(dupe_factor=5), num_shards=num_shards)


@pytest.fixture
def dataset(tmp_path):
    write_sample_dump(tmp_path / "site", DEMO_WIKI, DEMO_DATE)
    return Pretrain384(data_dir=str(tmp_path / "data"), dump_url=(tmp_path / "site").as_uri(), wiki=DEMO_WIKI,
                       dump_date=DEMO_DATE, num_shards=3, vocab_size=8000)


def _stand_in_sbatch(tmp_path: Path) -> dict:
    """The environment of a submit.sh run whose sbatch only logs its arguments (to tmp_path/log) and gives job
    ids 1, 2, ...; squeue says nothing is queued."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "$@" >>"$SBATCH_LOG"\nwc -l <"$SBATCH_LOG"\n')
    (bin_dir / "squeue").write_text("#!/bin/sh\n")
    for tool in ("sbatch", "squeue"):
        (bin_dir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "SBATCH_LOG": str(tmp_path / "log"),
            "WIKIPREP_VENV": str(Path(sys.executable).parents[1])}


def test_array_spec():
    assert array_spec([]) == ""
    assert array_spec([4]) == "4"
    assert array_spec([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"


def test_each_element_is_one_task_of_its_stage(dataset, tmp_path):
    elements = stage_elements(dataset)
    assert list(elements) == list(STAGES)
    families = {stage: [t.get_task_family() for t in tasks] for stage, tasks in elements.items()}
    assert families == {"download": ["DownloadDump"], "punkt": ["TrainPunkt"], "pieces": ["SplitPart"] * 2,
                        "sentences": ["SentenceShard"] * 3, "vocab": ["TrainVocab"],
                        "shards": ["PretrainShard"] * 3, "parts": [], "finalize": ["Pretrain384"]}
    assert [t.shard for t in elements["sentences"]] == [t.shard for t in elements["shards"]] == [0, 1, 2]
    # Shard i's instances need sentence shard i, and the vocabulary, which needs every sentence shard.
    assert elements["shards"][2].requires() == {"sentences": elements["sentences"][2], "vocab": elements["vocab"][0]}
    assert elements["vocab"][0].requires().requires() == elements["sentences"]
    # With a vocabulary given, there is none to train: the vocab stage has no element, hence no job.
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    with_vocab = dataset.clone(vocab_file=str(vocab))
    assert stage_elements(with_vocab)["vocab"] == []
    assert plan(with_vocab)["TODO_vocab"] == ""
    assert list(stage_elements(with_vocab)["shards"][1].requires()) == ["sentences"]
    # The element task sees the same graph as the dataset task.
    element = SlurmStage384(**{**dataset.param_kwargs, "stage": "shards", "index": 2})
    assert element.dataset() == dataset and element.requires() == elements["shards"][2]
    # Parquet has a finishing step: a part per shard index, each after the plan, which needs every shard.
    parquet = dataset.clone(output_format="parquet", bin_size=128)
    parts = stage_elements(parquet)["parts"]
    assert [t.get_task_family() for t in parts] == ["PretrainPart"] * 3 and [t.part for t in parts] == [0, 1, 2]
    assert parts[1].requires().requires() == stage_elements(parquet)["shards"]
    assert plan(parquet)["TODO_parts"] == "0-2"


def test_plan_before_anything_ran(dataset):
    todo = plan(dataset)
    assert todo == {"DATASET_DIR": str(dataset.dataset_dir.resolve()), "TODO_download": "0", "TODO_punkt": "0",
                    "TODO_pieces": "0-1", "TODO_sentences": "0-2", "TODO_vocab": "0", "TODO_shards": "0-2",
                    "TODO_parts": "", "TODO_finalize": "0"}


def test_slurm_plan_command_and_its_errors(dataset):
    args = [sys.executable, "-m", "workflows", "slurm-plan", "Pretrain384", "--data-dir", dataset.data_dir,
            "--dump-url", dataset.dump_url, "--dump-date", DEMO_DATE, "--num-shards", "3"]
    r = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "TODO_shards=0-2\n" in r.stdout and "TODO_pieces=0-1\n" in r.stdout and "TODO_sentences=0-2\n" in r.stdout
    r = subprocess.run(args[:-1] + ["three"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == \
        "wikiprep: error: --num-shards 'three': expected a whole number", r.stderr
    r = subprocess.run(args[:4] + ["DownloadDump"] + args[5:-2], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "give a Pretrain task (Pretrain128, PretrainText128" in r.stderr, r.stderr


def test_the_vocab_stage_without_a_vocabulary_to_train_is_refused_in_one_line(dataset, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    element = SlurmStage384(**{**dataset.param_kwargs, "vocab_file": str(vocab), "stage": "vocab", "index": 0})
    with pytest.raises(PrepError, match=r"^stage vocab: nothing to run with these parameters \(a --vocab-file is given\)$"):
        element.complete()


@pytest.mark.parametrize("extra, folder, shard", [
    (["--output-format", "hdf5"], "seq384_mask56_dup5_shards3_hdf5", "wiki_00002.hdf5"),
    (["--layout", "remask", "--max-predictions-per-seq", "58"], "seq384_mask58_dup5_shards3_remask",
     "wiki_00002.tfrecord"),
])
def test_the_chain_passes_the_output_format_and_layout_through(dataset, extra, folder, shard):
    """submit.sh hands every parameter to slurm-plan and, through job.env, to each job's SlurmStage."""
    args = [sys.executable, "-m", "workflows", "slurm-plan", "Pretrain384", "--data-dir", dataset.data_dir,
            "--dump-url", dataset.dump_url, "--dump-date", DEMO_DATE, "--num-shards", "3", *extra]
    r = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"DATASET_DIR={Path(dataset.data_dir).resolve() / f'{DEMO_WIKI}-{DEMO_DATE}' / folder}\n" in r.stdout
    values = dict(zip([a[2:].replace("-", "_") for a in extra[::2]], extra[1::2]))
    element = SlurmStage384(**{**dataset.param_kwargs, **values, "stage": "shards", "index": 2})
    assert element.requires().output().path.name == shard
    assert element.requires().output().path.parent.name == folder


@pytest.mark.parametrize("fmt, punkt", [("books", "0"), ("sentences", "")])
def test_a_text_corpus_has_its_own_chain(tmp_path, fmt, punkt):
    """No download; a Punkt model but for the sentences format, which comes split; an element per file."""
    from workflows import PretrainText128, SlurmTextStage128
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"{i}.txt").write_text(f"Document {i}. It has two sentences.\n", encoding="utf-8")
    dataset = PretrainText128(data_dir=str(tmp_path / "data"), text_dir=str(corpus), text_format=fmt, num_shards=2,
                              text_piece_mb=0)  # a piece per file
    families = {stage: [t.get_task_family() for t in tasks] for stage, tasks in stage_elements(dataset).items()}
    assert families["download"] == [] and families["pieces"] == ["TextSplitPiece"] * 3
    assert families["punkt"] == (["TextTrainPunkt"] if punkt else [])
    todo = plan(dataset)
    assert (todo["TODO_download"], todo["TODO_punkt"], todo["TODO_pieces"]) == ("", punkt, "0-2")
    assert todo["DATASET_DIR"] == str((tmp_path / "data" / "corpus" / seq128(2)).resolve())
    element = SlurmTextStage128(**{**dataset.param_kwargs, "stage": "pieces", "index": 1})
    assert element.requires() == stage_elements(dataset)["pieces"][1]


def test_submit_sh_chains_a_text_corpus(tmp_path):
    """cluster/slurm/submit.sh text-128 with a stand-in sbatch that records its arguments: the stages with work
    (no download, no Punkt for sentences), and the job.env the jobs read, naming the text tasks."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("One sentence.\nAnother one.\n\nA second document.\n", encoding="utf-8")
    (corpus / "b.txt").write_text("A third document.\n", encoding="utf-8")
    env = _stand_in_sbatch(tmp_path)
    out = subprocess.run([str(REPO / "cluster/slurm/submit.sh"), "text-128", "--data-dir", str(tmp_path / "data"),
                          "--text-dir", str(corpus), "--text-format", "sentences", "--num-shards", "1"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stages = [line.split()[0] for line in out.stdout.splitlines()[:-1]]
    assert stages == ["pieces", "sentences", "vocab", "shards", "finalize"]
    job_env = (tmp_path / "data" / "corpus" / "slurm" / seq128(1) / "job.env").read_text()
    assert "TASK=PretrainText128" in job_env and "STAGE_TASK=SlurmTextStage128" in job_env
    assert f"--text-dir {corpus}" in job_env


def _mixture(tmp_path: Path, repeat: int = 2) -> Path:
    """A recipe of the sample dump and a books folder of three files; the recipe's path."""
    write_sample_dump(tmp_path / "site", DEMO_WIKI, DEMO_DATE)
    books = tmp_path / "books"
    books.mkdir()
    for i in range(3):
        (books / f"{i}.txt").write_text(f"Book {i} begins here. It has two sentences.\n\nAnd a paragraph.\n",
                                        encoding="utf-8")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(f'name = "wiki-books"\n[[source]]\nkind = "wikipedia"\nwiki = "{DEMO_WIKI}"\n'
                      f'dump_date = "{DEMO_DATE}"\ndump_url = "{(tmp_path / "site").as_uri()}"\n'
                      f'[[source]]\nkind = "text"\npath = "{books}"\nformat = "books"\nrepeat = {repeat}\n',
                      encoding="utf-8")
    return recipe


def test_a_mixture_has_its_own_chain(tmp_path):
    """Every source's download and sentence model in the single jobs, every source's pieces once (whatever its
    repeat) in the pieces array; the stages after are the mixture's. What Pretrain128's stages did in the data
    folder is complete, so the chain leaves it out."""
    import luigi

    from workflows import SlurmMixStage128, SplitDump
    from workflows.mix import PretrainMix128
    recipe = _mixture(tmp_path)
    dataset = PretrainMix128(data_dir=str(tmp_path / "data"), recipe=str(recipe), num_shards=2)
    families = {stage: [t.get_task_family() for t in tasks] for stage, tasks in stage_elements(dataset).items()}
    assert families == {"download": ["DownloadDump"], "punkt": ["TrainPunkt", "TextTrainPunkt"],
                        "pieces": ["SplitPart"] * 2 + ["TextSplitPiece"], "sentences": ["MixSentenceShard"] * 2,
                        "vocab": ["MixTrainVocab"], "shards": ["MixPretrainShard"] * 2, "parts": [],
                        "finalize": ["PretrainMix128"]}
    assert plan(dataset) == {"DATASET_DIR": str((tmp_path / "data" / "wiki-books" / seq128(2)).resolve()),
                             "TODO_download": "0", "TODO_punkt": "0", "TODO_pieces": "0-2", "TODO_sentences": "0-1",
                             "TODO_vocab": "0", "TODO_shards": "0-1", "TODO_parts": "", "TODO_finalize": "0"}
    # The single job of a stage runs all of its tasks: both sources' sentence models.
    punkt = SlurmMixStage128(**{**dataset.param_kwargs, "stage": "punkt", "index": 0})
    assert punkt.requires() == stage_elements(dataset)["punkt"]
    with pytest.raises(PrepError, match=r"^--index 1: stage punkt has elements 0 to 0$"):
        SlurmMixStage128(**{**dataset.param_kwargs, "stage": "punkt", "index": 1}).complete()
    # The dump split as Pretrain128 splits it (same data folder, shards, seed): the chain has only the books to do.
    wiki = stage_elements(dataset)["pieces"][0]
    assert luigi.build([SplitDump(**{k: v for k, v in wiki.param_kwargs.items() if k in SplitDump.get_param_names()})],
                       local_scheduler=True, log_level="WARNING")
    todo = plan(dataset)
    assert (todo["TODO_download"], todo["TODO_punkt"], todo["TODO_pieces"]) == ("", "0", "2")
    pieces = SlurmMixStage128(**{**dataset.param_kwargs, "stage": "pieces", "index": 2})
    assert pieces.requires().get_task_family() == "TextSplitPiece"


def test_submit_sh_chains_a_mixture(tmp_path):
    """cluster/slurm/submit.sh mix-128 (make slurm-mix-128) with a stand-in sbatch: the whole chain, and a job.env
    naming the mixture's tasks, with the recipe's path made absolute."""
    recipe = _mixture(tmp_path)
    env = _stand_in_sbatch(tmp_path)
    out = subprocess.run([str(REPO / "cluster/slurm/submit.sh"), "mix-128", "--data-dir", "data",
                          "--recipe", recipe.name, "--num-shards", "2"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stages = [line.split()[0] for line in out.stdout.splitlines()[:-1]]
    assert stages == ["download", "punkt", "pieces", "sentences", "vocab", "shards", "finalize"]
    assert "pieces 3 --array=0-2\n" in out.stdout
    job_env = (tmp_path / "data" / "wiki-books" / "slurm" / seq128(2) / "job.env").read_text()
    assert "TASK=PretrainMix128" in job_env and "STAGE_TASK=SlurmMixStage128" in job_env
    assert f"--recipe {recipe}" in job_env
