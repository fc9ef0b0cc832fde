"""CPU of NVIDIA LDDL's own preprocessing against ours, side by side, on the same sentence-split text and cores.

    .venv/bin/python benchmarks/bench_lddl.py --sizes 10          # builds /work/lddl-env first when missing
    .venv/bin/python benchmarks/bench_lddl.py --setup-only        # only the LDDL environment

LDDL (github.com/NVIDIA/LDDL, commit e4006d2b, read from a git directory: `--lddl-git`, a clone or the bare
mirror) runs in an environment of its own (`--env`), built here from PyPI the first time, because its pins predate
this project's Python: Python 3.9 (`--python`, pyenv's by default), its `setup.py` requirements that the BERT
preprocessing imports (dask and distributed 2021.7.1, dask-mpi, pyarrow 14.0.1, transformers 4.16.2), numpy < 2
and pandas < 1.4 (which that dask needs), `nltk` (which it imports but does not list), `mpi4py` 3.1.3 built
without build isolation against Debian's OpenMPI (`apt-get install openmpi-bin libopenmpi-dev`), and LDDL itself
without its other requirements (news-please, wikiextractor, cchardet, awscli, gdown: the downloaders'). Its
`nltk.download('punkt')` cannot work offline: the Punkt model it splits sentences with is trained here with
nltk's own `PunktTrainer` on the benchmark's text and installed where `sent_tokenize` looks (`NLTK_DATA`).

Per size and masking, like for like (static with `--masking`, dynamic without), bins of `--bin-size`:
  LDDL: `mpirun -np RANKS preprocess_bert_pretrain --schedule mpi` (dask-mpi: rank 0 the scheduler, rank 1 the
        client, the others workers: 2 workers for the 2 cores by default) on the text as LDDL's downloader lays it
        out (a document per line after its id; LDDL splits the sentences again itself, with nltk), sample ratio 1,
        then `mpirun -np 2 balance_dask_output` into K shards per bin. K is the smallest count from 4 up to the
        files of a bin (--num-blocks) that no bin's total divides by: LDDL's balancer loops forever on a bin whose
        total is a multiple of the shard count (a larger file can never hold exactly one more than a smaller
        one), and fails on more shards than a bin has files; when none fits, the preprocessing runs again.
  ours: `create_pretraining_file` (dupe 5, as LDDL's; seq 128, 20 predictions) into one staged shard (our
        bins, our masking) and the finishing step (`plan_parts`, `write_part`) into the same K files per bin, in a
        fresh process, twice: the bytes compared;
        and again from LDDL's own input (a document per line) through our sentence stages first (TrainPunkt's
        training, SplitPart's splitting, merge), as LDDL splits the sentences again itself.
CPU seconds are user + system of every process of the run (mpirun's children included: RUSAGE_CHILDREN).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
VOCAB = REPO / "tests" / "fixtures" / "google-reference" / "bert-base-uncased-vocab.txt"
LDDL_COMMIT = "e4006d2b"
# What LDDL's BERT preprocessing and balancer import, at its setup.py's pins where it pins them.
LDDL_REQUIREMENTS = ["dask[complete]==2021.7.1", "distributed==2021.7.1", "dask-mpi==2021.11.0", "bokeh==2.4.3",
                     "pyarrow==14.0.1", "transformers==4.16.2", "numpy<2", "pandas<1.4", "nltk==3.8.1", "requests",
                     "tqdm", "setuptools<70", "wheel", "Cython<3"]
MPI4PY = "mpi4py==3.1.3"


def _python() -> str:
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9.*/bin/python")))
    return found[-1] if found else (shutil.which("python3.9") or "")


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def setup_env(env: Path, lddl_git: Path, python: str) -> None:
    """LDDL's environment at `env` (stamp: env/.installed), from PyPI and the git directory of LDDL."""
    if (env / ".installed").exists():
        return
    if not python:
        raise SystemExit("no Python 3.9 (pyenv's ~/.pyenv/versions/3.9.*, or python3.9): give --python")
    if not shutil.which("mpicc"):
        raise SystemExit("no mpicc: apt-get install -y openmpi-bin libopenmpi-dev")
    _run([python, "-m", "venv", "--clear", env])
    pip = [env / "bin" / "python", "-m", "pip", "install", "--quiet"]
    _run(pip + ["--upgrade", "pip"])
    _run(pip + LDDL_REQUIREMENTS)
    _run(pip + ["--no-build-isolation", "--no-binary", "mpi4py", MPI4PY], env=dict(os.environ, MPICC="mpicc"))
    src = env / "src" / "lddl"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "--git-dir", str(lddl_git), "archive", LDDL_COMMIT], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    _run(pip + ["--no-deps", src])
    (env / ".installed").write_text(f"LDDL {LDDL_COMMIT}\n")


# Trains nltk's Punkt on LDDL's input and installs it as nltk's English model (run in LDDL's environment).
TRAIN_PUNKT = """
import os, pickle, sys
from nltk.tokenize.punkt import PunktSentenceTokenizer
with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read(2_000_000)
model = PunktSentenceTokenizer(text)
for folder in ("punkt", "punkt/PY3"):
    os.makedirs(os.path.join(sys.argv[2], "tokenizers", folder), exist_ok=True)
    with open(os.path.join(sys.argv[2], "tokenizers", folder, "english.pickle"), "wb") as f:
        pickle.dump(model, f)
"""
_BIN = re.compile(r"\.parquet_(\d+)$")


def lddl_input(text: Path, folder: Path) -> Path:
    """Our sentence text (a sentence a line, blank lines between documents) as LDDL's Wikipedia downloader lays it
    out: `folder/en/wiki.txt`, a document per line, its id first, its sentences joined by spaces."""
    (folder / "en").mkdir(parents=True, exist_ok=True)
    with open(text, encoding="utf-8") as f, open(folder / "en" / "wiki.txt", "w", encoding="utf-8") as out:
        doc: list[str] = []
        n = 0
        for line in f:
            line = line.strip()
            if line:
                doc.append(line)
                continue
            if doc:
                out.write(f"doc{n} {' '.join(doc)}\n")
                n, doc = n + 1, []
        if doc:
            out.write(f"doc{n} {' '.join(doc)}\n")
    return folder


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list, **kwargs) -> tuple[float, float]:
    """(CPU s of every process `cmd` made, wall s)."""
    cpu, wall = children_cpu(), time.perf_counter()
    _run(cmd, **kwargs)
    return children_cpu() - cpu, time.perf_counter() - wall


def bin_totals(folder: Path) -> tuple[dict[int, int], int]:
    """Rows per bin of the Parquet files under `folder` (from their footers), and the fewest files a bin has."""
    import pyarrow.parquet as pq

    totals: dict[int, int] = {}
    files: dict[int, int] = {}
    for path in folder.rglob("*.parquet_*"):
        found = _BIN.search(path.name)
        if found:
            totals[int(found[1])] = totals.get(int(found[1]), 0) + pq.ParquetFile(path).metadata.num_rows
            files[int(found[1])] = files.get(int(found[1]), 0) + 1
    return dict(sorted(totals.items())), min(files.values(), default=0)


def shard_count(totals: dict[int, int], files: int) -> int | None:
    """The smallest K from 4 to `files` that no bin's total divides by, or None. LDDL's balancer loops forever on a
    bin whose total is a multiple of K, and fails (a TypeError in its `_load`) when K passes the files of a bin."""
    return next((k for k in range(4, files + 1) if all(t % k and t >= k for t in totals.values())), None)


def run_lddl(args, text: Path, work: Path, masking: bool, env: dict) -> dict:
    sink = work / ("lddl-static" if masking else "lddl-dynamic")
    shutil.rmtree(sink, ignore_errors=True)
    bin_ = env["LDDL_ENV"] + "/bin/"
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    for attempt in range(3):  # its counts differ from run to run: a run no K can balance is run again
        shutil.rmtree(sink, ignore_errors=True)
        pre_cpu, pre_wall = timed(mpirun + ["-np", args.ranks, bin_ + "preprocess_bert_pretrain", "--schedule",
                                            "mpi", "--vocab-file", VOCAB, "--wikipedia", text, "--sink", sink,
                                            "--target-seq-length", 128, "--bin-size", args.bin_size,
                                            "--num-blocks", args.num_blocks, "--sample-ratio", 1.0,
                                            "--duplicate-factor", 5, "--seed", 12345]
                                  + (["--masking"] if masking else []), env=env)
        totals, files = bin_totals(sink)
        k = shard_count(totals, files)
        if k is not None:
            break
    else:
        raise SystemExit(f"no shard count LDDL's balancer can take for bins of {totals} in {files} files each")
    bal_cpu, bal_wall = timed(mpirun + ["-np", 2, bin_ + "balance_dask_output", "--indir", sink,
                                        "--num-shards", k], env=env)
    return {"preprocess_cpu": pre_cpu, "balance_cpu": bal_cpu, "cpu": pre_cpu + bal_cpu,
            "wall": pre_wall + bal_wall, "instances": sum(totals.values()), "bins": totals, "shards": k}


def _split_documents(wiki: Path, work: Path) -> Path:
    """LDDL's input (a document per line) through our sentence stages, as a dump's articles go: Punkt trained on a
    sample (TrainPunkt), the documents split (SplitPart, one bucket), the bucket merged (merge): a sentence file."""
    from wikiprep import sentences
    from wikiprep.corpus import Document

    def documents():
        with open(wiki / "en" / "wiki.txt", encoding="utf-8") as f:
            for n, line in enumerate(f):
                doc_id, _, text = line.rstrip("\n").partition(" ")
                yield Document(id=n, paragraphs=[text] if text.strip() else [])

    punkt = work / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([documents()]), punkt)
    sentences.split_piece(documents(), punkt, work / "split", num_shards=1, seed=12345)
    merged = work / "sentences.txt"
    sentences.merge_shard([work / "split" / sentences.bucket_name(0)], merged)
    return merged


def _ours_child(args) -> None:
    """In a fresh process: one staged shard (or TFRecord file), then the finishing step into K files a bin;
    with --documents, from LDDL's input through our sentence stages first."""
    from wikiprep import layouts
    from wikiprep.instances import create_pretraining_file
    from wikiprep.options import GenerationOptions
    from wikiprep.schema import PRED, SEQ
    from wikiprep.tokenization import Vocab

    params, work = json.loads(args.params), Path(args.workdir)
    layout = layouts.get(args.child).with_parameters(**params)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    staged = work / f"staged{layout.staged.shard_suffix}"
    start = time.process_time()
    text = _split_documents(Path(args.documents), work) if args.documents else Path(args.input)
    stats = create_pretraining_file([str(text)], str(VOCAB), str(staged),
                                    str(staged.with_suffix(".index")) if layout.indexed else None,
                                    GenerationOptions(dupe_factor=5), layout=layout.staged, overwrite=True)
    files, staged_cpu = [staged], time.process_time() - start
    if layout.finishing:
        dims = {SEQ: 128, PRED: 20}
        plan = layout.plan_parts([stats], dims, args.shards)
        files = []
        for part in range(args.shards):
            paths = [work / n for n in layout.part_names("wiki", part, dims)]
            for path in paths:
                path.unlink(missing_ok=True)
            layout.write_part(plan, part, [staged], paths, dims, Vocab.load(VOCAB))
            files += paths
    cpu = time.process_time() - start
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + path.read_bytes())
    print(json.dumps({"cpu": cpu, "staged_cpu": staged_cpu, "instances": stats["instances"],
                      "sha256": digest.hexdigest()}))


def run_ours(kind: str, params: dict, text: Path, work: Path, shards: int, documents: Path | None = None) -> dict:
    runs = []
    for attempt in range(2):
        start = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--child", kind, "--params", json.dumps(params), "--input",
                            str(text), "--workdir", str(work / f"ours{attempt}"), "--shards", str(shards)]
                           + (["--documents", str(documents)] if documents else []),
                           check=True, capture_output=True, text=True)
        runs.append({**json.loads(r.stdout.strip().splitlines()[-1]), "wall": time.perf_counter() - start})
    best = min(runs, key=lambda r: r["cpu"])
    return {**best, "deterministic": runs[0]["sha256"] == runs[1]["sha256"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=float, nargs="+", default=[10], help="MB of input text per run")
    p.add_argument("--env", type=Path, default=Path("/work/lddl-env"), help="LDDL's environment (built if missing)")
    p.add_argument("--lddl-git", type=Path, default=Path("/work/.mirror/NVIDIA+LDDL/repo"),
                   help="a git directory of github.com/NVIDIA/LDDL holding commit " + LDDL_COMMIT)
    p.add_argument("--python", default=_python(), help="the Python 3.9 LDDL's environment is made with")
    p.add_argument("--ranks", type=int, default=4, help="mpirun -np for LDDL's preprocessor: a scheduler, a client, the rest Dask's workers")
    p.add_argument("--bin-size", type=int, default=64)
    p.add_argument("--num-blocks", type=int, default=8, help="LDDL's --num-blocks (its Dask partitions)")
    p.add_argument("--setup-only", action="store_true")
    p.add_argument("--child")
    p.add_argument("--params")
    p.add_argument("--input")
    p.add_argument("--workdir")
    p.add_argument("--shards", type=int)
    p.add_argument("--documents")
    args = p.parse_args()
    if args.child:
        _ours_child(args)
        return
    setup_env(args.env, args.lddl_git, args.python)
    if args.setup_only:
        return
    from bench_instances import build_input

    env = dict(os.environ, LDDL_ENV=str(args.env), PATH=f"{args.env / 'bin'}:{os.environ['PATH']}",
               NLTK_DATA=str(args.env / "nltk_data"), OMPI_MCA_btl_vader_single_copy_mechanism="none",
               PYTHONHASHSEED="0", TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")
    results = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        for size in args.sizes:
            text = work / f"input{size:g}.txt"
            build_input(text, size)
            wiki = lddl_input(text, work / f"wiki{size:g}")
            _run([args.env / "bin" / "python", "-c", TRAIN_PUNKT, wiki / "en" / "wiki.txt", args.env / "nltk_data"])
            row = {"size_mb": size}
            for masking in ("static", "dynamic"):
                lddl = run_lddl(args, wiki, work, masking == "static", env)
                params = {"masking": masking, "bin_size": args.bin_size}
                ours = run_ours("parquet", params, text, work, lddl["shards"])
                split = run_ours("parquet", params, text, work, lddl["shards"], documents=wiki)
                row[masking] = {"lddl": lddl, "ours": ours, "ours_split": split}
            row["tfrecord"] = run_ours("tfrecord", {}, text, work, 1)
            results.append(row)
            print(json.dumps(row), flush=True)
    for row in results:
        print(f"\n{row['size_mb']:g} MB of sentence text, seq 128, dupe 5, bins of {args.bin_size}; CPU s (user + "
              f"system, every process)")
        print("| masking | LDDL preprocess | LDDL balance | LDDL total (instances) | ours: staged + finishing "
              "(instances) | LDDL / ours | ours with our sentence stages | LDDL / that | ours deterministic |\n"
              "|---|---|---|---|---|---|---|---|---|")
        for masking in ("static", "dynamic"):
            lddl, ours, split = row[masking]["lddl"], row[masking]["ours"], row[masking]["ours_split"]
            print(f"| {masking} | {lddl['preprocess_cpu']:.1f} | {lddl['balance_cpu']:.1f} | {lddl['cpu']:.1f} "
                  f"({lddl['instances']:,}; {lddl['shards']} shards a bin) | {ours['cpu']:.2f} = "
                  f"{ours['staged_cpu']:.2f} + {ours['cpu'] - ours['staged_cpu']:.2f} ({ours['instances']:,}) | "
                  f"{lddl['cpu'] / ours['cpu']:.1f}x | {split['cpu']:.2f} "
                  f"({split['instances']:,}) | {lddl['cpu'] / split['cpu']:.1f}x | "
                  f"{ours['deterministic'] and split['deterministic']} |")
        tf = row["tfrecord"]
        print(f"| (our TFRecords, one file) | | | | {tf['cpu']:.2f} ({tf['instances']:,}) | "
              f"{row['static']['lddl']['cpu'] / tf['cpu']:.1f}x static, "
              f"{row['dynamic']['lddl']['cpu'] / tf['cpu']:.1f}x dynamic | | | {tf['deterministic']} |")


if __name__ == "__main__":
    main()
