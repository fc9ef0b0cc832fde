"""A small BERT pre-training loop over a dataset folder, to show the records teach.

`train_bert` reads the `*.tfrecord` shards that `Pretrain{128,384,512}` write (the default layout's), with
TensorFlow's own reader and the parse spec of `BERT_INSTANCE` (so a record TF cannot parse fails
here, not on a TPU pod later), and pre-trains a small BERT (two transformer layers) with BERT's
recipe shrunk: masked-LM + next-sentence loss, AdamW with linear warm-up and decay. It writes
`metrics.csv` (a row per step: losses, accuracies, examples/s) and `loss.png`, and evaluates
held-out shards on request. Not a model anyone should keep: `benchmarks/bench_train.py` uses it
to show that a dataset teaches more than token frequencies (MLM loss below the unigram entropy of
the masked tokens, next-sentence accuracy above chance).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from shardkit.errors import PrepError
from shardkit.tf import import_quietly
from shardkit.example import decode_example, decode_example_kinds
from shardkit.progress import Progress
from shardkit.records import find_files, read_records
from wikiprep import layouts
from wikiprep.schema import BERT_INSTANCE, PRED, SEQ

from .loop import (check_outputs_free, check_params, find_bad_file, first_line, first_record, set_seeds,
                   train_and_record, warmup_then_decay)

BERT_COLUMNS = ("step", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "examples_per_s")
SHARD_GLOB = "*" + layouts.DEFAULT.shard_suffix  # the shards of a dataset in the standard layout, BERT_INSTANCE's


def _record_dims(path: Path, data: bytes) -> dict[str, int]:
    """The dimensions (seq length, max predictions) one serialized record implies, checked against BERT_INSTANCE."""
    try:
        dims = BERT_INSTANCE.dims_of(data)
        problem = BERT_INSTANCE.problem(decode_example_kinds(data), dims)
    except (ValueError, IndexError) as e:
        raise PrepError(f"{path}: first record is not a tf.train.Example: {first_line(e)}") from None
    if problem:
        raise PrepError(f"{path}: {problem}")
    if dims[SEQ] < 2 or dims[PRED] < 1:
        raise PrepError(f"{path}: record has seq length {dims[SEQ]} and {dims[PRED]} predictions")
    return dims


def _find_vocab_size_key(obj, depth: int = 0) -> int | None:
    if depth > 3:
        return None
    if isinstance(obj, dict):
        v = obj.get("vocab_size")
        if isinstance(v, int) and v > 0:
            return v
        for value in obj.values():
            found = _find_vocab_size_key(value, depth + 1)
            if found:
                return found
    return None


def bert_vocab_size(dataset_dir: Path, files: Sequence[Path], sample_records: int = 2000) -> tuple[int, str]:
    """The vocabulary size and where it came from.

    `vocab.txt` in the folder (a line per token) wins; then a `vocab_size` key in
    `dataset.json` / `stats.json` / `MANIFEST.json`; else the largest token id in the first
    `sample_records` records, plus one.
    """
    vocab = dataset_dir / "vocab.txt"
    if vocab.is_file():
        with open(vocab, "rb") as f:
            n = sum(1 for line in f if line.strip())
        if n > 0:
            return n, str(vocab)
    for name in ("dataset.json", "stats.json", "MANIFEST.json"):
        p = dataset_dir / name
        if p.is_file():
            try:
                found = _find_vocab_size_key(json.loads(p.read_text(encoding="utf-8")))
            except (ValueError, OSError):
                found = None
            if found:
                return found, f"{p} vocab_size"
    top, seen = 0, 0
    for path in files:
        for i, data in enumerate(read_records(path)):
            try:
                ex = decode_example(data)
            except (ValueError, IndexError) as e:
                raise PrepError(f"{path}: record {i} is not a tf.train.Example: {first_line(e)}") from None
            top = max(top, max(ex.get("input_ids", ()), default=0), max(ex.get("masked_lm_ids", ()), default=0))
            seen += 1
            if seen >= sample_records:
                break
        if seen >= sample_records:
            break
    return top + 1, f"largest token id in {seen} records + 1"


def _gelu(x):
    import keras

    return keras.activations.gelu(x, approximate=True)


def _sinusoid_table(seq_len: int, hidden: int, scale: float):
    """The Transformer's sine/cosine position code, [seq_len, hidden], each column scaled to std `scale`:
    position i+1's vector is a fixed rotation of position i's, so attending to a neighbour is one bilinear
    form for every position, there from the first step instead of learned position by position."""
    import numpy as np

    pos = np.arange(seq_len)[:, None]
    rates = 1.0 / 10000 ** (np.arange(0, hidden, 2) / hidden)
    table = np.zeros((seq_len, hidden), np.float32)
    table[:, 0::2] = np.sin(pos * rates)[:, : (hidden + 1) // 2]
    table[:, 1::2] = np.cos(pos * rates)[:, : hidden // 2]
    return table * (scale * np.sqrt(2.0))  # sin/cos have std 1/sqrt(2)


def build_tiny_bert(vocab_size: int, seq_len: int, hidden: int = 64, layers: int = 2, heads: int = 2,
                    intermediate: int = 256, sinusoid_positions: bool = False):
    """A tiny BERT: token+position+segment embeddings, `layers` post-LN encoder blocks,
    a masked-LM head (gathered at the masked positions, decoder tied to the token embeddings)
    and a next-sentence head on [CLS]. Inputs: dict of input_ids, input_mask, segment_ids,
    masked_lm_positions; outputs (mlm_logits [B, P, V], nsp_logits [B, 2])."""
    tf = import_quietly()
    import keras

    class TinyBert(keras.Model):
        def __init__(self):
            super().__init__(name="tiny_bert")
            init = keras.initializers.TruncatedNormal(stddev=0.02)
            self.tok = keras.layers.Embedding(vocab_size, hidden, embeddings_initializer=init, name="token_emb")
            # Learned position embeddings, as BERT's; `sinusoid_positions` only starts them at the sine code.
            pos_init = (keras.initializers.Constant(_sinusoid_table(seq_len, hidden, 0.02)) if sinusoid_positions
                        else init)
            self.pos = keras.layers.Embedding(seq_len, hidden, embeddings_initializer=pos_init, name="pos_emb")
            self.seg = keras.layers.Embedding(2, hidden, embeddings_initializer=init, name="segment_emb")
            self.emb_norm = keras.layers.LayerNormalization(epsilon=1e-12)
            self.blocks = []
            for i in range(layers):
                self.blocks.append((
                    keras.layers.MultiHeadAttention(heads, hidden // heads, kernel_initializer=init, name=f"attn{i}"),
                    keras.layers.LayerNormalization(epsilon=1e-12),
                    keras.layers.Dense(intermediate, activation=_gelu, kernel_initializer=init, name=f"ffn_in{i}"),
                    keras.layers.Dense(hidden, kernel_initializer=init, name=f"ffn_out{i}"),
                    keras.layers.LayerNormalization(epsilon=1e-12),
                ))
            self.mlm_transform = keras.layers.Dense(hidden, activation=_gelu, kernel_initializer=init)
            self.mlm_norm = keras.layers.LayerNormalization(epsilon=1e-12)
            self.mlm_bias = self.add_weight(shape=(vocab_size,), initializer="zeros", name="mlm_bias")
            self.pooler = keras.layers.Dense(hidden, activation="tanh", kernel_initializer=init)
            self.nsp = keras.layers.Dense(2, kernel_initializer=init, name="nsp")

        def call(self, inputs, training=False):
            ids = inputs["input_ids"]
            positions = tf.range(tf.shape(ids)[1])
            x = self.tok(ids) + self.pos(positions)[tf.newaxis] + self.seg(inputs["segment_ids"])
            x = self.emb_norm(x)
            mask = tf.cast(inputs["input_mask"], tf.bool)
            attn_mask = mask[:, tf.newaxis, :] & mask[:, :, tf.newaxis]
            for attn, norm1, ffn_in, ffn_out, norm2 in self.blocks:
                x = norm1(x + attn(x, x, attention_mask=attn_mask, training=training))
                x = norm2(x + ffn_out(ffn_in(x)))
            masked = tf.gather(x, inputs["masked_lm_positions"], batch_dims=1)  # [B, P, H]
            h = self.mlm_norm(self.mlm_transform(masked))
            mlm_logits = tf.matmul(h, self.tok.embeddings, transpose_b=True) + self.mlm_bias
            nsp_logits = self.nsp(self.pooler(x[:, 0]))
            return mlm_logits, nsp_logits

    return TinyBert()


def _mask_token_id(dataset_dir: Path) -> int | None:
    """The id of [MASK] in the folder's vocab.txt, if it has one."""
    vocab = dataset_dir / "vocab.txt"
    if not vocab.is_file():
        return None
    with open(vocab, "rb") as f:
        for i, line in enumerate(f):
            if line.strip() == b"[MASK]":
                return i
    return None


def _used_token_ids(tf, files: Sequence[Path], spec: dict, on_error) -> list[int]:
    """The sorted token ids of the text in `files`: input_ids with every weighted masked slot given back
    its original token. The tokens BERT's masking put in at random (10% of the masked slots, drawn from
    the whole vocabulary) are not text and are left out."""
    import numpy as np

    ids_spec = {k: spec[k] for k in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")}
    ds = tf.data.TFRecordDataset([str(p) for p in files]).batch(4096)
    ds = ds.map(lambda b: tf.io.parse_example(b, ids_spec), num_parallel_calls=2)
    seen = np.zeros(0, np.int64)
    try:
        for batch in ds:
            text = batch["input_ids"].numpy()
            positions, answers = batch["masked_lm_positions"].numpy(), batch["masked_lm_ids"].numpy()
            weighted = batch["masked_lm_weights"].numpy() > 0
            rows = np.nonzero(weighted)[0]
            text[rows, positions[weighted]] = answers[weighted]
            seen = np.union1d(seen, np.unique(text))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        on_error(e)
    return seen.tolist()


def split_holdout(files: Sequence[Path], holdout_files: int, dataset_dir: Path) -> tuple[list[Path], list[Path]]:
    """The training files and the held-out ones: the last `holdout_files` files that hold records.

    A dataset's shards come from disjoint documents (one sentence shard each, random next sentences
    drawn within it), so a held-out shard shares no document with the training ones."""
    if holdout_files < 0:
        raise PrepError(f"--holdout-files must be at least 0, got {holdout_files}")
    if not holdout_files:
        return list(files), []
    nonempty = [p for p in files if first_record(p) is not None]
    if len(nonempty) <= holdout_files:
        raise PrepError(f"{dataset_dir}: {len(nonempty)} {SHARD_GLOB} files hold records; holding out "
                        f"{holdout_files} leaves none to train on")
    held = nonempty[-holdout_files:]
    return [p for p in files if p not in held], held


def train_bert(dataset_dir: str | os.PathLike, out_dir: str | os.PathLike, steps: int = 300,
               batch_size: int = 32, seed: int = 0, learning_rate: float = 1e-3, warmup_fraction: float = 0.1,
               weight_decay: float = 0.01, hidden: int = 64, layers: int = 2, heads: int = 2,
               holdout_files: int = 0, eval_batches: int = 50, compact_vocab: bool = False,
               jit_compile: bool = False, sinusoid_positions: bool = False, overwrite: bool = False,
               progress: Progress | None = None) -> dict:
    """Pre-train a small BERT on the `*.tfrecord` files of `dataset_dir` for `steps` steps.

    The recipe is BERT's, shrunk: masked-LM + next-sentence loss, the MLM decoder tied to the token
    embeddings, MLM loss and accuracy over the masked slots only, weighted by `masked_lm_weights`
    (padding slots weigh 0), AdamW (weight decay on matrices only, as google-research/bert's
    AdamWeightDecayOptimizer) with linear warm-up over `warmup_fraction` of the steps and linear
    decay to 0. With `holdout_files` the last that many non-empty files are not trained on: after
    training, up to `eval_batches` batches of them are evaluated (`eval_*` keys of the result).
    With `compact_vocab` the model's vocabulary is the token ids of the files' text (found by reading
    them all once), renumbered densely, plus one id for the random tokens masking put in that are not
    in the text: a dataset that uses a few thousand of a vocabulary's 30,522 ids trains several times
    faster (the tied output layer is most of a small model's cost); every answer is in the text.

    Writes `out_dir/metrics.csv` (`BERT_COLUMNS`, a row per step) and `out_dir/loss.png` (never over an
    earlier run's without `overwrite`: `loop.write_metrics`), and
    returns first/last loss and the last steps' means of the other columns (means over 10 steps),
    timings and the shapes read. Bad input (missing folder, no records, a record that does not
    parse) raises PrepError.
    """
    dataset_dir = Path(dataset_dir)
    check_params(steps, batch_size)
    check_outputs_free(out_dir, overwrite)
    steps, batch_size = int(steps), int(batch_size)
    if not 0 <= float(warmup_fraction) < 1:
        raise PrepError(f"--warmup-fraction must be in [0, 1), got {warmup_fraction}")
    if int(hidden) < 1 or int(heads) < 1 or int(hidden) % int(heads) or int(layers) < 1:
        raise PrepError(f"--hidden {hidden} must be a positive multiple of --heads {heads}, and --layers >= 1")
    files = find_files(dataset_dir, SHARD_GLOB)

    tf = import_quietly()
    import keras

    # Check each file's first record up front, so a wrong file is named before training starts.
    dims, dims_file = None, None
    for path in files:
        data = first_record(path)
        if data is None:
            continue  # an empty shard is legal (more shards than instances)
        record_dims = _record_dims(path, data)
        if dims is None:
            dims, dims_file = record_dims, path
        elif record_dims != dims:
            raise PrepError(f"{path}: seq length/max predictions {record_dims[SEQ], record_dims[PRED]} differ "
                            f"from {dims_file.name}'s {dims[SEQ], dims[PRED]}")
    if dims is None:
        raise PrepError(f"{dataset_dir}: the {SHARD_GLOB} files hold no records")
    seq, pred = dims[SEQ], dims[PRED]
    train_files, eval_files = split_holdout(files, int(holdout_files), dataset_dir)
    vocab_size, vocab_source = bert_vocab_size(dataset_dir, files)

    set_seeds(seed)
    spec = BERT_INSTANCE.tf_spec(tf, dims)
    def on_error(e):
        if isinstance(e, tf.errors.DataLossError):
            find_bad_file(files)
            raise PrepError(f"{dataset_dir}: corrupt record: {first_line(e)}") from None
        if isinstance(e, tf.errors.InvalidArgumentError):
            if "indices" not in str(e):  # a parse failure, not a token id past the vocabulary
                find_bad_file(files, parse=lambda d: tf.io.parse_single_example(d, spec))
            raise PrepError(f"{dataset_dir}: records do not fit the model (vocab size {vocab_size} from "
                            f"{vocab_source}): {first_line(e)}") from None
        raise PrepError(f"{dataset_dir}: ran out of records: {first_line(e)}") from None

    model_vocab, renumber = vocab_size, None
    mask_id = _mask_token_id(dataset_dir)
    if compact_vocab:
        used = _used_token_ids(tf, files, spec, on_error)
        if mask_id is not None and mask_id < vocab_size:
            used = sorted(set(used) | {mask_id})  # shown in place of the text, so its own id
        if used[-1] >= vocab_size:
            raise PrepError(f"{dataset_dir}: records do not fit the model (vocab size {vocab_size} from "
                            f"{vocab_source}): token id {used[-1]} is not in [0, {vocab_size})")
        model_vocab = len(used) + 1  # the last id stands for every token that is not in the text
        table = [len(used)] * vocab_size
        for i, token in enumerate(used):
            table[token] = i
        renumber = tf.constant(table, tf.int32)
    if mask_id is not None and renumber is not None:
        mask_id = table[mask_id]

    def parse(serialized):
        ex = tf.io.parse_example(serialized, spec)
        ex = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}
        if renumber is not None:
            for k in ("input_ids", "masked_lm_ids"):
                ex[k] = tf.gather(renumber, ex[k])
        return ex

    # Shuffle the file order with the seed, read several files at once (deterministically),
    # then shuffle records: a dataset's shards are in generation order.
    ds = tf.data.Dataset.from_tensor_slices([str(p) for p in train_files])
    ds = ds.shuffle(len(train_files), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(train_files), 4), block_length=16)
    ds = ds.shuffle(2048, seed=seed).batch(batch_size, drop_remainder=True)
    ds = ds.map(parse, num_parallel_calls=2, deterministic=True).prefetch(2)

    model = build_tiny_bert(model_vocab, seq, hidden=int(hidden), layers=int(layers), heads=int(heads),
                            intermediate=4 * int(hidden), sinusoid_positions=bool(sinusoid_positions))
    optimizer = keras.optimizers.AdamW(learning_rate=warmup_then_decay(float(learning_rate), steps,
                                                                       float(warmup_fraction)),
                                       weight_decay=float(weight_decay), beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                                       global_clipnorm=1.0)
    # Create every variable eagerly, before the step function is traced.
    model({"input_ids": tf.zeros([1, seq], tf.int32), "input_mask": tf.ones([1, seq], tf.int32),
           "segment_ids": tf.zeros([1, seq], tf.int32), "masked_lm_positions": tf.zeros([1, pred], tf.int32)})
    # Biases and LayerNorm scales/offsets are not decayed (BERT's optimization.py excludes them).
    optimizer.exclude_from_weight_decay(var_list=[v for v in model.trainable_variables if len(v.shape) <= 1])
    optimizer.build(model.trainable_variables)

    def heads_out(batch, training):
        """Losses, and the sums accuracy is made of, of one batch."""
        mlm_logits, nsp_logits = model(batch, training=training)
        labels, w = batch["masked_lm_ids"], batch["masked_lm_weights"]
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=mlm_logits)
        hits = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), labels), tf.float32)
        nsp_labels = batch["next_sentence_labels"][:, 0]
        nsp_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=nsp_logits)
        nsp_hits = tf.cast(tf.equal(tf.argmax(nsp_logits, -1, output_type=tf.int32), nsp_labels), tf.float32)
        sums = {"mlm_ce": tf.reduce_sum(ce * w), "mlm_hits": tf.reduce_sum(hits * w), "mlm_weight": tf.reduce_sum(w),
                "nsp_ce": tf.reduce_sum(nsp_ce), "nsp_hits": tf.reduce_sum(nsp_hits),
                "examples": tf.cast(tf.shape(nsp_labels)[0], tf.float32)}
        if mask_id is not None:  # the slots whose input is [MASK] (80%), not the kept or random 20%
            shown = tf.gather(batch["input_ids"], batch["masked_lm_positions"], batch_dims=1)
            wm = w * tf.cast(tf.equal(shown, mask_id), tf.float32)
            sums.update(mask_ce=tf.reduce_sum(ce * wm), mask_hits=tf.reduce_sum(hits * wm), mask_weight=tf.reduce_sum(wm))
        return sums

    @tf.function(jit_compile=bool(jit_compile))
    def train_step(batch):
        with tf.GradientTape() as tape:
            sums = heads_out(batch, training=True)
            mlm_loss = sums["mlm_ce"] / (sums["mlm_weight"] + 1e-5)  # as BERT's run_pretraining.py
            nsp_loss = sums["nsp_ce"] / sums["examples"]
            loss = mlm_loss + nsp_loss
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        out = {"loss": loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss,
               "mlm_accuracy": tf.math.divide_no_nan(sums["mlm_hits"], sums["mlm_weight"]),
               "nsp_accuracy": sums["nsp_hits"] / sums["examples"]}
        if "mask_ce" in sums:  # the progress line's: what the context teaches, the slots shown as [MASK]
            out["mask_slot_loss"] = tf.math.divide_no_nan(sums["mask_ce"], sums["mask_weight"])
        return out

    def evaluate() -> dict:
        """The held-out files, in order, once: MLM loss/accuracy per weighted slot, NSP per example."""
        if not eval_files:
            return {}
        eval_ds = tf.data.TFRecordDataset([str(p) for p in eval_files]).batch(batch_size).map(parse)
        eval_step = tf.function(lambda b: heads_out(b, training=False))
        totals: dict[str, float] = {}
        try:
            for batch in eval_ds.take(int(eval_batches)):
                for k, v in eval_step(batch).items():
                    totals[k] = totals.get(k, 0.0) + float(v)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            on_error(e)
        return {"eval_files": len(eval_files), "eval_examples": int(totals["examples"]),
                "eval_masked_tokens": round(totals["mlm_weight"], 3),
                "eval_mlm_loss": totals["mlm_ce"] / totals["mlm_weight"],
                "eval_mlm_accuracy": totals["mlm_hits"] / totals["mlm_weight"],
                "eval_nsp_loss": totals["nsp_ce"] / totals["examples"],
                "eval_nsp_accuracy": totals["nsp_hits"] / totals["examples"],
                **({"eval_mask_slot_tokens": round(totals["mask_weight"], 3),
                    "eval_mlm_loss_mask_slots": totals["mask_ce"] / totals["mask_weight"],
                    "eval_mlm_accuracy_mask_slots": totals["mask_hits"] / totals["mask_weight"]}
                   if totals.get("mask_weight") else {})}

    return train_and_record(train_step, ds, steps, BERT_COLUMNS, on_error, out_dir, overwrite=overwrite,
                            title=f"small BERT on {dataset_dir.name}", evaluate=evaluate, progress=progress,
                            batch_size=batch_size,
                            seq_length=seq, max_predictions_per_seq=pred, vocab_size=vocab_size,
                            vocab_source=vocab_source, model_vocab_size=model_vocab, files=len(train_files),
                            hidden=int(hidden),
                            layers=int(layers), heads=int(heads), learning_rate=float(learning_rate),
                            warmup_fraction=float(warmup_fraction), weight_decay=float(weight_decay))
