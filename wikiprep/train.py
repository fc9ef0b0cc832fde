"""A thin BERT pre-training loop over a dataset folder, to show the records train end to end.

`train_bert` reads the `wiki_*.tfrecord` files that `Pretrain{128,384,512}` write, with
TensorFlow's own reader (so a record TF cannot parse fails here, not on a TPU pod later),
trains a tiny BERT (two transformer layers) on masked-LM + next-sentence loss, and writes
`metrics.csv` (a row per step) and `loss.png`. It is a smoke test of the data, not a
model anyone should keep: the point is that the loss falls.

`write_metrics` and `loss_summary` are shared with `imagenet_prep.train`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Sequence

from shardkit.atomic import atomic_write
from shardkit.errors import PrepError
from shardkit.records import read_records

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

METRICS_FILE = "metrics.csv"
PLOT_FILE = "loss.png"
BERT_COLUMNS = ("step", "loss", "mlm_loss", "nsp_loss")
SUMMARY_WINDOW = 10  # first/last loss are means over this many steps: one step's loss is noisy


# --------------------------------------------------------------------------------------------
# Shared by both trainers: metrics file, plot, summary.


def write_metrics(out_dir: str | os.PathLike, rows: Sequence[dict], columns: Sequence[str],
                  title: str = "training loss") -> tuple[Path, Path]:
    """Commit `out_dir/metrics.csv` (a header, then a row per step) and `out_dir/loss.png`.

    Every column but `step` is drawn against `step`. Both files are written atomically.
    """
    out_dir = Path(out_dir)
    csv_path, png_path = out_dir / METRICS_FILE, out_dir / PLOT_FILE
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_format_cell(row[c]) for c in columns])
    with atomic_write(csv_path, "w") as f:
        f.write(text.getvalue())
    with atomic_write(png_path, "wb") as f:
        f.write(_plot_png(rows, columns, title))
    return csv_path, png_path


def _format_cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _plot_png(rows: Sequence[dict], columns: Sequence[str], title: str) -> bytes:
    # The object API with an explicit Agg canvas: no pyplot global state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    steps = [r["step"] for r in rows]
    for name in columns:
        if name == "step":
            continue
        ax.plot(steps, [r[name] for r in rows], label=name, linewidth=1.6 if name == "loss" else 0.9)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def loss_summary(rows: Sequence[dict], column: str = "loss", window: int = SUMMARY_WINDOW) -> dict:
    """Mean of the first and of the last `window` values of `column`."""
    values = [float(r[column]) for r in rows]
    n = max(1, min(window, len(values) // 2 or 1))
    return {"first_loss": sum(values[:n]) / n, "last_loss": sum(values[-n:]) / n, "summary_window": n}


def dataset_files(dataset_dir: str | os.PathLike, pattern: str, name_regex: str | None = None) -> list[Path]:
    """The files matching `pattern` (and `name_regex`, when given) in `dataset_dir`, sorted.

    PrepError when the folder is missing or holds no such file. The regex keeps out siblings
    the glob would catch, such as receipts or a killed run's temporary files.
    """
    folder = Path(dataset_dir)
    if not folder.is_dir():
        raise PrepError(f"{folder}: dataset folder does not exist")
    files = sorted(p for p in folder.glob(pattern)
                   if p.is_file() and (name_regex is None or re.fullmatch(name_regex, p.name)))
    if not files:
        raise PrepError(f"{folder}: no {pattern} files in the dataset folder")
    return files


def first_record(path: Path) -> bytes | None:
    """The payload of the first record of `path` (None for an empty file); PrepError naming the file."""
    try:
        for data in read_records(path):
            return data
    except OSError as e:
        raise PrepError(f"{path}: cannot read: {e}") from None
    return None


def check_params(steps: int, batch_size: int) -> None:
    if int(steps) < 1:
        raise PrepError(f"--steps must be at least 1, got {steps}")
    if int(batch_size) < 1:
        raise PrepError(f"--batch-size must be at least 1, got {batch_size}")


def find_bad_file(files: Sequence[Path], parse=None) -> None:
    """Re-read every file to name the one TensorFlow choked on: raises PrepError naming it.

    Checks framing and CRCs, and with `parse` (a function of one payload) each record's schema.
    Returns quietly when every file is sound.
    """
    for path in files:
        for i, data in enumerate(read_records(path)):  # raises PrepError naming the file
            if parse is not None:
                try:
                    parse(data)
                except Exception as e:  # noqa: BLE001 - any parse failure is the file's fault
                    raise PrepError(f"{path}: record {i} does not parse: {first_line(e)}") from None


_TF_NOISE = ("Graph execution error", "Detected at node", "File ", "[[", "Stack trace", "Traceback")


def first_line(e: BaseException) -> str:
    """The line of an exception's message that says what went wrong.

    TensorFlow's graph errors open with "Graph execution error:" and the Python stack of the
    node; the cause (e.g. "indices[3,7] = 5000 is not in [0, 100)") comes after them.
    """
    msg = getattr(e, "message", None) or str(e)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(_TF_NOISE):
            return ln.split("\t [[")[0].strip()
    return lines[0] if lines else type(e).__name__


def run_steps(train_step, batches, steps: int, columns: Sequence[str], on_error) -> tuple[list[dict], float, float]:
    """Run `train_step(batch) -> dict of scalar tensors` for `steps` batches, one row per step.

    Returns the rows, the seconds of the first step (graph tracing included) and the mean
    seconds of the others. TensorFlow errors go to `on_error(exc)`, which raises a PrepError.
    """
    import tensorflow as tf

    rows: list[dict] = []
    iterator = iter(batches)
    t0 = time.perf_counter()
    first_step_s = 0.0
    try:
        for step in range(1, steps + 1):
            out = train_step(next(iterator))
            row = {"step": step}
            for name in columns:
                if name != "step":
                    row[name] = float(out[name])
            if not all(math.isfinite(row[c]) for c in columns if c != "step"):
                raise PrepError(f"training diverged at step {step}: loss is {row.get('loss')}")
            rows.append(row)
            if step == 1:
                first_step_s = time.perf_counter() - t0
                t1 = time.perf_counter()
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError,
            StopIteration) as e:
        on_error(e)
        raise  # on_error always raises; this keeps the type checker and readers sure of it
    rest = (time.perf_counter() - t1) / (steps - 1) if steps > 1 else first_step_s
    return rows, first_step_s, rest


def set_seeds(seed: int) -> None:
    import keras

    keras.utils.set_random_seed(int(seed))


# --------------------------------------------------------------------------------------------
# BERT.

_INT_KEYS = ("input_ids", "input_mask", "segment_ids")
_PRED_INT_KEYS = ("masked_lm_positions", "masked_lm_ids")


def _bert_shapes(path: Path, data: bytes) -> tuple[int, int]:
    """(seq length, max predictions) from one serialized record, checked against the BERT schema."""
    import tensorflow as tf

    try:
        ex = tf.train.Example.FromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends
        raise PrepError(f"{path}: first record is not a tf.train.Example: {first_line(e)}") from None
    feats = ex.features.feature
    want = {k: "int64_list" for k in _INT_KEYS + _PRED_INT_KEYS + ("next_sentence_labels",)}
    want["masked_lm_weights"] = "float_list"
    for key, kind in want.items():
        if key not in feats:
            raise PrepError(f"{path}: record has no {key} feature (not a BERT pre-training record)")
        if feats[key].WhichOneof("kind") != kind:
            raise PrepError(f"{path}: feature {key} is {feats[key].WhichOneof('kind')}, expected {kind}")
    seq = len(feats["input_ids"].int64_list.value)
    pred = len(feats["masked_lm_positions"].int64_list.value)
    if seq < 2 or pred < 1:
        raise PrepError(f"{path}: record has seq length {seq} and {pred} predictions")
    for key in _INT_KEYS:
        if len(feats[key].int64_list.value) != seq:
            raise PrepError(f"{path}: {key} has {len(feats[key].int64_list.value)} values, input_ids {seq}")
    for key in ("masked_lm_ids", "masked_lm_weights"):
        n = len(getattr(feats[key], want[key]).value)
        if n != pred:
            raise PrepError(f"{path}: {key} has {n} values, masked_lm_positions {pred}")
    return seq, pred


def _bert_feature_spec(seq: int, pred: int) -> dict:
    import tensorflow as tf

    spec = {k: tf.io.FixedLenFeature([seq], tf.int64) for k in _INT_KEYS}
    spec.update({k: tf.io.FixedLenFeature([pred], tf.int64) for k in _PRED_INT_KEYS})
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([pred], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


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
    import tensorflow as tf

    top, seen = 0, 0
    for path in files:
        for data in read_records(path):
            feats = tf.train.Example.FromString(data).features.feature
            top = max(top, max(feats["input_ids"].int64_list.value, default=0),
                      max(feats["masked_lm_ids"].int64_list.value, default=0))
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
    files = dataset_files(dataset_dir, "wiki_*.tfrecord")

    import tensorflow as tf
    import keras

    # Check each file's first record up front, so a wrong file is named before training starts.
    seq = pred = None
    for path in files:
        data = first_record(path)
        if data is None:
            continue  # an empty shard is legal (more shards than instances)
        shapes = _bert_shapes(path, data)
        if seq is None:
            seq, pred = shapes
        elif shapes != (seq, pred):
            raise PrepError(f"{path}: seq length/max predictions {shapes} differ from {files[0].name}'s {(seq, pred)}")
    if seq is None:
        raise PrepError(f"{dataset_dir}: the wiki_*.tfrecord files hold no records")
    vocab_size, vocab_source = bert_vocab_size(dataset_dir, files)

    set_seeds(seed)
    spec = _bert_feature_spec(seq, pred)

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

    rows, first_step_s, step_s = run_steps(train_step, ds, steps, BERT_COLUMNS, on_error)
    csv_path, png_path = write_metrics(out_dir, rows, BERT_COLUMNS, title=f"tiny BERT on {dataset_dir.name}")
    return {
        **loss_summary(rows),
        "steps": steps,
        "batch_size": batch_size,
        "seq_length": seq,
        "max_predictions_per_seq": pred,
        "vocab_size": vocab_size,
        "vocab_source": vocab_source,
        "files": len(files),
        "first_step_seconds": first_step_s,
        "seconds_per_step": step_s,
        "metrics_csv": str(csv_path),
        "loss_png": str(png_path),
    }
