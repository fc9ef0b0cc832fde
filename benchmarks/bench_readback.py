"""A shard's read-back, as each `PretrainShard` makes it: `stats.file_stats(..., tensorflow=False)` on one file.

    taskset -c 1 .venv/bin/python benchmarks/bench_readback.py SHARD [--repeat 5] [--python] [--tensorflow]

SHARD is one .tfrecord of a dataset folder (its dataset.json and vocab.txt beside it, as a Pretrain run leaves
them). Times the read-back with the compiled batch decoder (`shardkit/_examples.c`; the line says when it is not
built), and with --python also on the Python path (SHARDKIT_PURE_PYTHON=1), with --tensorflow also through
TensorFlow's `parse_example` (`tensorflow=True`, its import not counted), each the fastest of --repeat runs, and
checks that every path gives the same figures. Prints one JSON object. Single process: pin it to one core.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from shardkit import example
from wikiprep import reader, stats
from wikiprep.tokenization import Vocab


def best_of(repeat: int, run) -> tuple[float, dict]:
    times, figures = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        figures = run()
        times.append(time.perf_counter() - start)
    return min(times), figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shard", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python", action="store_true", help="also time the Python path of the decoder")
    parser.add_argument("--tensorflow", action="store_true", help="also time the read-back through TensorFlow")
    args = parser.parse_args()
    found = reader.dataset_file(args.shard)
    vocab_path = args.shard.parent / "vocab.txt"
    vocab = Vocab(vocab_path) if vocab_path.is_file() else None
    paths = {"compiled" if example._compiled is not None else "python (the extension is not built)": "0"}
    if args.python:
        paths["python"] = "1"
    out = {"shard": str(args.shard), "bytes": args.shard.stat().st_size, "seconds": {}}
    first = None
    for name, pure in paths.items():
        os.environ[example.PURE_PYTHON_ENV] = pure
        seconds, figures = best_of(args.repeat, lambda: stats.file_stats(found, args.shard, vocab, tensorflow=False))
        out["seconds"][name] = round(seconds, 4)
        first = first or figures
        assert figures == first, f"{name}: other figures"
    os.environ.pop(example.PURE_PYTHON_ENV, None)
    if args.tensorflow:
        from shardkit.tf import import_tensorflow

        import_tensorflow()
        seconds, figures = best_of(args.repeat, lambda: stats.file_stats(found, args.shard, vocab, tensorflow=True))
        out["seconds"]["tensorflow"] = round(seconds, 4)
        assert figures == first, "tensorflow: other figures"
    out["records"] = first["records"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
