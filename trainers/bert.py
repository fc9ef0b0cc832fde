"""A thin BERT pre-training loop over a dataset folder, to show the records train end to end.

`train_bert` reads the `wiki_*.tfrecord` files that `Pretrain{128,384,512}` write, with
TensorFlow's own reader and the parse spec of `BERT_INSTANCE` (so a record TF cannot parse fails
here, not on a TPU pod later), trains a tiny BERT (two transformer layers) on masked-LM +
next-sentence loss, and writes `metrics.csv` (a row per step) and `loss.png`. It is a smoke test
of the data, not a model anyone should keep: the point is that the loss falls.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from shardkit.errors import PrepError
from shardkit.example import decode_example, decode_example_kinds
from shardkit.records import find_files, read_records
from wikiprep.schema import BERT_INSTANCE, PRED, SEQ

from .loop import check_params, find_bad_file, first_line, first_record, set_seeds, train_and_record

BERT_COLUMNS = ("step", "loss", "mlm_loss", "nsp_loss")
SHARD_GLOB = "wiki_*.tfrecord"


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


def build_tiny_bert(vocab_size: int, seq_len: int, hidden: int = 64, layers: int = 2, heads: int = 2,
                    intermediate: int = 256):
    """A tiny BERT: token+position+segment embeddings, `layers` post-LN encoder blocks,
    a masked-LM head (gathered at the masked positions, decoder tied to the token embeddings)
    and a next-sentence head on [CLS]. Inputs: dict of input_ids, input_mask, segment_ids,
    masked_lm_positions; outputs (mlm_logits [B, P, V], nsp_logits [B, 2])."""
    import keras
    import tensorflow as tf

    class TinyBert(keras.Model):
        def __init__(self):
            super().__init__(name="tiny_bert")
            init = keras.initializers.TruncatedNormal(stddev=0.02)
            self.tok = keras.layers.Embedding(vocab_size, hidden, embeddings_initializer=init, name="token_emb")
            self.pos = keras.layers.Embedding(seq_len, hidden, embeddings_initializer=init, name="pos_emb")
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


def train_bert(dataset_dir: str | os.PathLike, out_dir: str | os.PathLike, steps: int = 300,
               batch_size: int = 32, seed: int = 0, learning_rate: float = 1e-3) -> dict:
    """Train a tiny BERT on the `wiki_*.tfrecord` files of `dataset_dir` for `steps` steps.

    Writes `out_dir/metrics.csv` (step,loss,mlm_loss,nsp_loss) and `out_dir/loss.png`, and
    returns first/last loss (means over the first/last 10 steps), timings and the shapes read.
    Bad input (missing folder, no records, a record that does not parse) raises PrepError.
    """
    dataset_dir = Path(dataset_dir)
    check_params(steps, batch_size)
    steps, batch_size = int(steps), int(batch_size)
    files = find_files(dataset_dir, SHARD_GLOB)

    import tensorflow as tf
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
    vocab_size, vocab_source = bert_vocab_size(dataset_dir, files)

    set_seeds(seed)
    spec = BERT_INSTANCE.tf_spec(tf, dims)

    def parse(serialized):
        ex = tf.io.parse_example(serialized, spec)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}

    # Shuffle the file order with the seed, read several files at once (deterministically),
    # then shuffle records: a dataset's shards are in generation order.
    ds = tf.data.Dataset.from_tensor_slices([str(p) for p in files])
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 4), block_length=16)
    ds = ds.shuffle(2048, seed=seed).batch(batch_size, drop_remainder=True)
    ds = ds.map(parse, num_parallel_calls=2, deterministic=True).prefetch(2)

    model = build_tiny_bert(vocab_size, seq)
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
    # Create every variable eagerly, before the step function is traced.
    model({"input_ids": tf.zeros([1, seq], tf.int32), "input_mask": tf.ones([1, seq], tf.int32),
           "segment_ids": tf.zeros([1, seq], tf.int32), "masked_lm_positions": tf.zeros([1, pred], tf.int32)})
    optimizer.build(model.trainable_variables)

    @tf.function
    def train_step(batch):
        with tf.GradientTape() as tape:
            mlm_logits, nsp_logits = model(batch, training=True)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["masked_lm_ids"], logits=mlm_logits)
            w = batch["masked_lm_weights"]
            mlm_loss = tf.reduce_sum(ce * w) / (tf.reduce_sum(w) + 1e-5)  # as BERT's run_pretraining.py
            nsp_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=batch["next_sentence_labels"][:, 0], logits=nsp_logits))
            loss = mlm_loss + nsp_loss
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss}

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

    return train_and_record(train_step, ds, steps, BERT_COLUMNS, on_error, out_dir,
                            title=f"tiny BERT on {dataset_dir.name}", batch_size=batch_size, seq_length=seq,
                            max_predictions_per_seq=pred, vocab_size=vocab_size, vocab_source=vocab_source,
                            files=len(files))
