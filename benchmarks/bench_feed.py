"""Feed throughput: sequences per second our seq-128 shards deliver to a trainer, on 1 and 2 cores.

    .venv/bin/python benchmarks/bench_feed.py                         # bench_pipeline's dataset, 4 shards
    .venv/bin/python benchmarks/bench_feed.py --dataset DIR/seq128_mask20_dup5 --shards 8

Set against what one A100 consumes in BERT-Large phase-1 pre-training (seq 128): about 415
sequences/s (NVIDIA's published DeepLearningExamples BERT training tables); the goal is one core
feeding 20 of them, >= 8,000 sequences/s. Each reader runs in its own process pinned to the cores
(`sched_setaffinity` before TensorFlow loads, TF's thread pools sized to them), reads the shards
once and turns them into batches of --batch-size, the way its trainer does:

- `tfdata_batched`: TFRecordDataset -> batch -> `tf.io.parse_example` on the batch -> int32 casts
  (how TF2 trainers such as Graphcore's and TF Model Garden's parse: one parse call per batch).
- `tfdata_per_record`: google-research/bert's `run_pretraining.py` `input_fn`: parse each record
  with `parse_single_example`, cast, then batch (its `map_and_batch`).
- `tfdata_read_only`: the records framed and CRC-checked, not parsed: the reading floor.
- `h5py_nvidia`: NVIDIA's `pretraining_dataset`: `np.asarray(f[key][:])` of the six datasets of a
  file (gzip inflated by h5py), then per instance `__getitem__` (int64 casts, the -1-filled
  `masked_lm_labels` from the positions up to the first 0) and a collate (stack) per batch. PyTorch
  is not installed here, so numpy stands in for `torch.from_numpy` and `default_collate` (the same
  per-instance array work; torch's per-op overhead is not smaller). On 2 cores, two processes
  (DataLoader workers) each take half the files.
- `h5py_load_only`: only the `f[key][:]` loads: the inflate floor.

The HDF5 shards are written from the same TFRecord shards with `wikiprep.layouts.hdf5.HDF5Writer` (NVIDIA's
dtypes, gzip, our chunking). Prints one JSON report (and writes it with --json); the machine's load
average is in it, as the machine may be shared. Each measurement runs --repeat times; the best counts.
The clock starts once the reader's libraries are loaded (TensorFlow's import, ~4.5 CPU-s, is paid once
per trainer, not per epoch; reported apart as `import_seconds`). `sequences_per_s` is wall-clock, what
the cores gave while shared; `sequences_per_cpu_s` (the process's CPU time, all its threads) is what a
core of its own gives.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
A100_PHASE1_SEQ_PER_S = 415  # BERT-Large, seq 128, one A100 (NVIDIA's published training throughput)
GOAL = 8000
READERS = ("tfdata_batched", "tfdata_per_record", "tfdata_read_only", "h5py_nvidia", "h5py_load_only")


def write_hdf5(tfrecords: list[Path], out: Path) -> list[Path]:
    """The same instances in NVIDIA's HDF5 layout, a file per shard (reused when already there)."""
    import h5py
    import tensorflow as tf

    from wikiprep.layouts.hdf5 import HDF5_DTYPES, HDF5Writer
    from wikiprep.schema import BERT_INSTANCE

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for src in tfrecords:
        dst = out / (src.stem + ".hdf5")
        paths.append(dst)
        if dst.exists():
            continue
        dims = dataset_dims(src)
        spec = BERT_INSTANCE.tf_spec(tf, dims)
        batches = [tf.io.parse_example(b, spec) for b in tf.data.TFRecordDataset([str(src)]).batch(8192)]
        rows = sum(int(b["input_ids"].shape[0]) for b in batches)
        tmp = dst.with_suffix(".tmp")
        with h5py.File(tmp, "w") as f:
            writer = HDF5Writer(tmp, f, dims, rows)
            for b in batches:
                block = {}
                for name, dtype in HDF5_DTYPES.items():
                    a = b[name].numpy()
                    block[name] = (a[:, 0] if name == "next_sentence_labels" else a).astype(dtype)
                writer.write(block)
        tmp.rename(dst)
    return paths


def dataset_dims(path: Path) -> dict:
    """Seq length and max predictions of a TFRecord shard, from its first record."""
    from shardkit.records import read_records
    from wikiprep.schema import BERT_INSTANCE

    return BERT_INSTANCE.dims_of(next(iter(read_records(path))))


def _pin(cores: int) -> None:
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))


def _tfdata(kind: str, files: list[str], cores: int, batch: int) -> int:
    import tensorflow as tf

    from wikiprep.schema import BERT_INSTANCE

    tf.config.threading.set_intra_op_parallelism_threads(cores)
    tf.config.threading.set_inter_op_parallelism_threads(cores)
    spec = BERT_INSTANCE.tf_spec(tf, dataset_dims(Path(files[0])))  # google-research/bert's feature spec

    def cast(ex):
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}

    ds = tf.data.TFRecordDataset(files, num_parallel_reads=cores)
    if kind == "tfdata_batched":
        ds = ds.batch(batch).map(lambda b: cast(tf.io.parse_example(b, spec)), num_parallel_calls=cores,
                                 deterministic=True)
    elif kind == "tfdata_per_record":
        ds = ds.map(lambda r: cast(tf.io.parse_single_example(r, spec)), num_parallel_calls=cores,
                    deterministic=True).batch(batch)
    else:
        ds = ds.batch(batch)
    options = tf.data.Options()
    options.threading.private_threadpool_size = cores
    ds = ds.with_options(options).prefetch(2)
    n = 0
    for b in ds:
        n += int((b["input_ids"] if isinstance(b, dict) else b).shape[0])
    return n


def _h5py_worker(kind: str, files: list[str], batch: int) -> int:
    import h5py
    import numpy as np

    keys = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels"]
    n = 0
    for path in files:
        with h5py.File(path, "r") as f:  # pretraining_dataset.__init__
            inputs = [np.asarray(f[key][:]) for key in keys]
        if kind == "h5py_load_only":
            n += len(inputs[0])
            continue
        max_pred = inputs[3].shape[1]
        samples = []
        for index in range(len(inputs[0])):  # pretraining_dataset.__getitem__
            input_ids, input_mask, segment_ids, positions, ids, nsp = [a[index].astype(np.int64) for a in inputs]
            labels = np.ones(input_ids.shape, dtype=np.int64) * -1
            padded = (positions == 0).nonzero()[0]
            end = padded[0] if len(padded) else max_pred
            labels[positions[:end]] = ids[:end]
            samples.append((input_ids, segment_ids, input_mask, labels, nsp))
            if len(samples) == batch:  # default_collate
                _ = [np.stack(column) for column in zip(*samples)]
                n += batch
                samples = []
        n += len(samples)
    return n


def child(argv: list[str]) -> None:
    """`bench_feed.py _child KIND CORES BATCH files...`: one measurement, pinned; prints JSON."""
    kind, cores, batch, files = argv[0], int(argv[1]), int(argv[2]), argv[3:]
    _pin(cores)
    # The libraries load before the clock starts: TensorFlow's import alone costs ~4.5 CPU-s here, more than
    # reading 50,000 sequences, and a trainer pays it once, not per epoch. It is reported apart.
    t0, c0 = time.perf_counter(), time.process_time()
    if kind.startswith("tfdata"):
        import tensorflow  # noqa: F401
    else:
        import h5py  # noqa: F401
        import numpy  # noqa: F401
    import_s, import_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    if kind.startswith("tfdata"):
        n = _tfdata(kind, files, cores, batch)
    else:
        n = _h5py_worker(kind, files, batch)
    print(json.dumps({"sequences": n, "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                      "import_seconds": import_s, "import_cpu_seconds": import_cpu}))


def measure(kind: str, files: list[Path], cores: int, batch: int, repeat: int) -> dict:
    """Best of `repeat` runs. h5py on 2 cores: 2 worker processes, one core and half the files each."""
    best = None
    for _ in range(repeat):
        if kind.startswith("h5py") and cores > 1:
            groups = [files[i::cores] for i in range(cores)]
            t0 = time.perf_counter()
            procs = [subprocess.Popen([sys.executable, __file__, "_h5core", str(i), kind, "1", str(batch),
                                       *map(str, g)], stdout=subprocess.PIPE, text=True) for i, g in enumerate(groups)]
            outs = [json.loads(p.communicate()[0]) for p in procs]
            run = {"sequences": sum(o["sequences"] for o in outs), "seconds": time.perf_counter() - t0,
                   "cpu_seconds": sum(o["cpu_seconds"] for o in outs)}
        else:
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "_child", kind, str(cores), str(batch), *map(str, files)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"bench_feed.py: error: {kind} on {cores} cores failed: {out.stderr.strip()[-300:]}")
            run = json.loads(out.stdout.strip().splitlines()[-1])
            run["process_seconds"] = time.perf_counter() - t0  # TensorFlow's import included
        run["sequences_per_s"] = run["sequences"] / run["seconds"]
        run["sequences_per_cpu_s"] = run["sequences"] / run["cpu_seconds"]  # what a core of its own would give
        if best is None or run["sequences_per_s"] > best["sequences_per_s"]:
            best = run
    best["a100s_fed"] = best["sequences_per_s"] / A100_PHASE1_SEQ_PER_S
    best["a100s_fed_per_cpu_s"] = best["sequences_per_cpu_s"] / A100_PHASE1_SEQ_PER_S
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in best.items()}


def main(argv=None) -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        child(sys.argv[2:])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "_h5core":  # one h5py worker pinned to one core of its own
        core = sorted(os.sched_getaffinity(0))[int(sys.argv[2]) % len(os.sched_getaffinity(0))]
        os.sched_setaffinity(0, {core})
        child(sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, help="a seq-128 dataset folder (default: bench_pipeline's)")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "work" / "feed")
    parser.add_argument("--shards", type=int, default=4, help="how many of the dataset's shards to read")
    parser.add_argument("--batch-size", type=int, default=64, help="NVIDIA's phase-1 per-GPU micro-batch")
    parser.add_argument("--cores", default="1,2")
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.dataset is None:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from bench_train import build_dataset

        args.dataset = build_dataset(REPO / "benchmarks" / "work" / "train", 24.0, 16)
    from shardkit.records import find_files

    tfrecords = find_files(args.dataset, "wiki_*.tfrecord")[:args.shards]
    readers = args.readers.split(",")
    hdf5 = write_hdf5(tfrecords, args.work / "hdf5") if any(r.startswith("h5py") for r in readers) else []
    report = {"dataset": str(args.dataset), "shards": len(tfrecords), "batch_size": args.batch_size,
              "tfrecord_mb": round(sum(p.stat().st_size for p in tfrecords) / 1e6, 1),
              "hdf5_mb": round(sum(p.stat().st_size for p in hdf5) / 1e6, 1),
              "a100_phase1_sequences_per_s": A100_PHASE1_SEQ_PER_S, "goal_one_core": GOAL,
              "load_average_before": os.getloadavg(), "results": {}}
    for kind in readers:
        files = hdf5 if kind.startswith("h5py") else tfrecords
        for cores in map(int, args.cores.split(",")):
            report["results"][f"{kind}/{cores}core"] = measure(kind, files, cores, args.batch_size, args.repeat)
            print(kind, cores, report["results"][f"{kind}/{cores}core"], file=sys.stderr, flush=True)
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
