"""Does a dataset teach? The small BERT (and CNN) pre-trained for minutes, against what frequencies alone give.

    .venv/bin/python benchmarks/bench_train.py                          # builds bench_pipeline's 24 MB dump
    .venv/bin/python benchmarks/bench_train.py --dataset DIR/seq128_mask20_dup5 --steps 600
    .venv/bin/python benchmarks/bench_train.py --python-docs --steps 5000 --hidden 64 --learning-rate 1e-3   # real prose
    .venv/bin/python benchmarks/bench_train.py --imagenet                # the CNN on sample ImageNet too

A model that only learns token frequencies reaches the masked tokens' unigram entropy and no
lower, and a next-sentence head that learns nothing stays at the majority label's share. So
`trainers.bert.train_bert` trains on every shard of a seq-128 dataset but the last, which it holds
out (its documents are in no other shard), and the held-out figures are set against:

- `unigram_entropy`: the entropy, in nats, of the masked tokens' own distribution over the very
  held-out slots evaluated (weighted by masked_lm_weights). No context-free predictor does better
  on those slots: it is the cross-entropy of the best one, fitted on the answers themselves.
- `train_unigram_cross_entropy`: the cross-entropy on those slots of the training shards' unigram
  distribution (add-one smoothed): what a frequency model actually trained on our data scores.
- `majority_token_accuracy` and `nsp_majority`: accuracy of always answering the commonest
  masked token / next-sentence label of the held-out slots.

With --python-docs the dataset is made from real prose: Python's documentation, as Debian's
python3.11-doc package ships it, turned into a dump by `realtext.py` and run through the same
Pretrain128. The synthetic dump's sentences come from a grammar whose articles differ little in
what they say, which leaves a next-sentence head little to learn; real text shows what it learns.

Otherwise the dataset is bench_pipeline's (`--dataset` for another): its synthetic dump of 24 MB of XML through
`Pretrain128 --num-shards 16` (seq 128, 20 masks, dupe 5, the reference bert-base-uncased vocabulary).
With --imagenet, `train_imagenet` trains on the sample ImageNet tree (ten coloured-shape classes,
imagenet_prep.samples) converted by `imagenet-prep convert`, and is scored on its validation
shards against chance (0.1). Prints one JSON report (and writes it with --json), the machine's load
average included: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # realtext.py (benchmarks/ is not a package)

from wikiprep.dataset import folder_name  # noqa: E402
from wikiprep.options import GenerationOptions  # noqa: E402


def manifests(run: Path, num_shards: int) -> list[Path]:
    """The MANIFEST.json of bench_pipeline's dataset of `num_shards` shards under its work folder `run`, if made."""
    name = folder_name(GenerationOptions(dupe_factor=5), num_shards=num_shards)  # seq128_mask20_dup5_shards16
    return sorted(run.glob(f"*-*/{name}/MANIFEST.json"))


def build_dataset(work: Path, xml_mb: float, num_shards: int) -> Path:
    """bench_pipeline's Pretrain128 run on its synthetic dump (reused when already there)."""
    found = manifests(work / "ours", num_shards)
    if not found:
        r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_pipeline.py"), "--xml-mb", str(xml_mb),
                            "--num-shards", str(num_shards), "--skip-anchors", "--skip-stages", "--work", str(work)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench_train.py: error: bench_pipeline.py failed: {r.stderr.strip().splitlines()[-1:]}")
        found = manifests(work / "ours", num_shards)
    return found[0].parent


def build_python_docs_dataset(work: Path, num_shards: int) -> Path:
    """Pretrain128 on real prose: Python's documentation as a dump (`realtext.py`), through bench_pipeline."""
    found = manifests(work / "pydocs" / "run" / "ours", num_shards)
    if not found:
        from realtext import write_python_docs_dump

        site = work / "pydocs" / "site"
        if not (site / "enwiki" / "20260101" / "dumpstatus.json").exists():
            print(json.dumps(write_python_docs_dump(site, work / "pydocs" / "deb-cache")), file=sys.stderr)
        r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_pipeline.py"),
                            "--dump-dir", str(site / "enwiki" / "20260101"), "--num-shards", str(num_shards),
                            "--skip-anchors", "--skip-stages", "--work", str(work / "pydocs" / "run")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench_train.py: error: bench_pipeline.py failed: {r.stderr.strip().splitlines()[-1:]}")
        found = manifests(work / "pydocs" / "run" / "ours", num_shards)
    return found[0].parent


def masked_token_counts(files: list[Path], seq: int, max_pred: int, mask_id: int | None,
                        limit: int | None = None) -> tuple[Counter, Counter, Counter]:
    """Weighted counts of the masked tokens, of those shown as [MASK], and of the next-sentence labels
    of `files`, read in order (the first `limit` records: the ones the trainer evaluates)."""
    import numpy as np
    import tensorflow as tf

    spec = {"input_ids": tf.io.FixedLenFeature([seq], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([max_pred], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([max_pred], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([max_pred], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    ds = tf.data.TFRecordDataset([str(p) for p in files])
    if limit is not None:
        ds = ds.take(limit)
    ds = ds.batch(4096).map(lambda b: tf.io.parse_example(b, spec))
    tokens, mask_tokens, labels = Counter(), Counter(), Counter()
    for batch in ds:
        ids, w = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
        shown = np.take_along_axis(batch["input_ids"].numpy(), batch["masked_lm_positions"].numpy(), axis=1)
        for counts, keep in ((tokens, w > 0), (mask_tokens, (w > 0) & (shown == mask_id))):
            for t, x in zip(ids[keep].tolist(), w[keep].tolist()):
                counts[t] += x
        labels.update(batch["next_sentence_labels"].numpy().ravel().tolist())
    return tokens, mask_tokens, labels


def entropy(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values() if c > 0)


def cross_entropy(truth: Counter, model: Counter, vocab_size: int) -> float:
    """Cross-entropy of the add-one-smoothed distribution of `model` counts on the `truth` counts."""
    total_truth, denom = sum(truth.values()), sum(model.values()) + vocab_size
    return -sum(c / total_truth * math.log((model.get(t, 0) + 1) / denom) for t, c in truth.items())


def bert_run(args) -> dict:
    from shardkit.records import find_files
    from trainers.bert import SHARD_GLOB, _mask_token_id, split_holdout, train_bert

    if args.dataset:
        dataset = args.dataset
    elif args.python_docs:
        dataset = build_python_docs_dataset(args.work, args.num_shards)
    else:
        dataset = build_dataset(args.work, args.xml_mb, args.num_shards)
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = train_bert(dataset, args.work / "train_bert", steps=args.steps, batch_size=args.batch_size,
                        seed=args.seed, learning_rate=args.learning_rate, warmup_fraction=args.warmup_fraction,
                        hidden=args.hidden, layers=args.layers, heads=args.heads, holdout_files=1,
                        eval_batches=args.eval_batches, compact_vocab=True, jit_compile=not args.no_jit,
                        sinusoid_positions=args.sinusoid_positions, overwrite=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    train_files, held_out = split_holdout(find_files(Path(dataset), SHARD_GLOB), 1, Path(dataset))
    seq, max_pred = result["seq_length"], result["max_predictions_per_seq"]
    mask_id = _mask_token_id(Path(dataset))
    eval_tokens, eval_mask_tokens, eval_labels = masked_token_counts(held_out, seq, max_pred, mask_id,
                                                                     limit=result["eval_examples"])
    train_tokens, _, _ = masked_token_counts(train_files, seq, max_pred, mask_id)
    baseline = {
        "unigram_entropy": entropy(eval_tokens),
        "unigram_entropy_mask_slots": entropy(eval_mask_tokens) if eval_mask_tokens else None,
        "train_unigram_cross_entropy": cross_entropy(eval_tokens, train_tokens, result["vocab_size"]),
        "train_unigram_entropy": entropy(train_tokens),
        "majority_token_accuracy": max(eval_tokens.values()) / sum(eval_tokens.values()),
        "nsp_majority": max(eval_labels.values()) / sum(eval_labels.values()),
        "masked_tokens": round(sum(eval_tokens.values()), 3), "distinct_masked_tokens": len(eval_tokens),
    }
    keep = ("steps", "batch_size", "hidden", "layers", "heads", "learning_rate", "warmup_fraction", "weight_decay",
            "seq_length", "max_predictions_per_seq", "vocab_size", "files", "first_loss", "last_loss",
            "last_mlm_loss", "last_nsp_loss", "last_mlm_accuracy", "last_nsp_accuracy", "eval_files",
            "eval_examples", "eval_masked_tokens", "eval_mlm_loss", "eval_mlm_accuracy", "eval_nsp_loss",
            "eval_nsp_accuracy", "eval_mask_slot_tokens", "eval_mlm_loss_mask_slots",
            "eval_mlm_accuracy_mask_slots", "model_vocab_size", "seconds_per_step", "examples_per_s", "metrics_csv")
    report = {"dataset": str(dataset), "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
              "jit_compile": not args.no_jit, "sinusoid_positions": args.sinusoid_positions, **{k: result[k] for k in keep if k in result},
              "baseline": baseline}
    report["mlm_below_unigram_entropy_by"] = baseline["unigram_entropy"] - result["eval_mlm_loss"]
    if baseline["unigram_entropy_mask_slots"] is not None and "eval_mlm_loss_mask_slots" in result:
        report["mask_slots_below_their_unigram_entropy_by"] = (baseline["unigram_entropy_mask_slots"]
                                                               - result["eval_mlm_loss_mask_slots"])
    report["nsp_above_majority_by"] = result["eval_nsp_accuracy"] - baseline["nsp_majority"]
    return report


def imagenet_run(args) -> dict:
    from imagenet_prep.samples import write_sample_tree
    from trainers.cnn import train_imagenet

    root = args.work / "imagenet"
    out = root / "shards"
    if not (out / "MANIFEST.json").is_file():
        tree = write_sample_tree(root / "raw", classes=10, per_class=args.images_per_class,
                                 val_per_class=args.images_per_class // 4, seed=1, quirks=False)
        tool = Path(sys.executable).with_name("imagenet-prep")
        cmd = [str(tool)] if tool.exists() else [sys.executable, "-m", "imagenet_prep"]
        r = subprocess.run(cmd + ["convert", "--train-dir", tree["train_dir"], "--validation-dir", tree["validation_dir"],
                                  "--val-labels", tree["val_labels"], "--output-dir", str(out),
                                  "--train-shards", "8", "--validation-shards", "2"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench_train.py: error: imagenet-prep convert failed: {r.stderr.strip()[-500:]}")
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = train_imagenet(out, args.work / "train_imagenet", steps=args.cnn_steps, batch_size=32, image_size=32,
                            seed=args.seed, evaluate_validation=True, overwrite=True)
    keep = ("steps", "batch_size", "image_size", "files", "first_loss", "last_loss", "last_accuracy",
            "validation_files", "validation_examples", "validation_loss", "validation_accuracy", "seconds_per_step",
            "examples_per_s", "metrics_csv")
    return {"dataset": str(out), "wall_seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - cpu0, 1), **{k: result[k] for k in keep if k in result},
            "chance_accuracy": 0.1, "classes": 10}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, help="a seq-128 dataset folder (default: bench_pipeline's)")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "work" / "train")
    parser.add_argument("--python-docs", action="store_true",
                        help="real prose: Python's documentation (Debian's python3.11-doc) as a dump (realtext.py)")
    parser.add_argument("--xml-mb", type=float, default=24.0)
    parser.add_argument("--num-shards", type=int, default=16)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--eval-batches", type=int, default=100)
    parser.add_argument("--sinusoid-positions", action="store_true",
                        help="start the learned position embeddings at the sine/cosine code")
    parser.add_argument("--no-jit", action="store_true", help="trace the step without XLA (jit_compile=False)")
    parser.add_argument("--progress", action="store_true", help="print the trainer's progress line every 100 steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-bert", action="store_true")
    parser.add_argument("--imagenet", action="store_true", help="also train the CNN on the sample ImageNet tree")
    parser.add_argument("--images-per-class", type=int, default=80)
    parser.add_argument("--cnn-steps", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.progress:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    report = {"cpus": len(os.sched_getaffinity(0)), "load_average_before": os.getloadavg()}
    if not args.skip_bert:
        report["bert"] = bert_run(args)
    if args.imagenet:
        report["imagenet"] = imagenet_run(args)
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
