"""A thin ImageNet classification loop over a folder of shards, to show the records train end to end.

`train_imagenet` reads the `train-*-of-*` shards that the `ImageNet` task writes with
TensorFlow's reader and the parse spec of `IMAGENET_IMAGE` (the two features it needs), decodes
the JPEGs with `tf.io.decode_jpeg` (as every ImageNet trainer does), shrinks them, and trains a
tiny CNN with 1000 outputs on `image/class/label - 1` (labels run 1..1000, 0 being the unused
background class of build_imagenet_data.py), with Adam under a linear warm-up and decay. It writes
`metrics.csv` (step, loss, accuracy, examples/s) and `loss.png`, and with `evaluate_validation`
scores the `validation-*-of-*` shards, which it never trains on.
"""

from __future__ import annotations

import os
from pathlib import Path

from imagenet_prep.schema import IMAGENET_IMAGE
from shardkit.errors import PrepError
from shardkit.tf import import_quietly
from shardkit.example import decode_example_kinds
from shardkit.progress import Progress
from shardkit.records import find_files

from .loop import (check_outputs_free, check_params, find_bad_file, first_line, first_record, set_seeds,
                   train_and_record, warmup_then_decay)

NUM_CLASSES = 1000
IMAGENET_COLUMNS = ("step", "loss", "accuracy", "examples_per_s")
TRAINED_FEATURES = ("image/encoded", "image/class/label")  # of the 15: all the classifier reads
# Shard names as build_imagenet_data.py writes them; the glob alone would also take temporaries.
TRAIN_SHARD_GLOB = "train-*-of-*"
TRAIN_SHARD_RE = r"train-\d+-of-\d+"
VALIDATION_SHARD_GLOB = "validation-*-of-*"
VALIDATION_SHARD_RE = r"validation-\d+-of-\d+"


def _check_first_record(path: Path, data: bytes) -> None:
    try:
        decoded = decode_example_kinds(data)
    except (ValueError, IndexError) as e:
        raise PrepError(f"{path}: first record is not a tf.train.Example: {first_line(e)}") from None
    problem = IMAGENET_IMAGE.problem(decoded, {}, names=TRAINED_FEATURES)
    if problem:
        raise PrepError(f"{path}: {problem}")
    (label,) = decoded["image/class/label"][1]
    if not 1 <= label <= NUM_CLASSES:
        raise PrepError(f"{path}: image/class/label is {label}, expected 1..{NUM_CLASSES}")


def build_tiny_cnn(image_size: int):
    """Three 3x3 conv layers, global average pooling, 1000 logits."""
    import keras

    return keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(NUM_CLASSES),
    ], name="tiny_cnn")


def train_imagenet(dataset_dir: str | os.PathLike, out_dir: str | os.PathLike, steps: int = 300,
                   batch_size: int = 32, image_size: int = 32, seed: int = 0,
                   learning_rate: float = 1e-3, warmup_fraction: float = 0.1, evaluate_validation: bool = False,
                   eval_batches: int = 50, overwrite: bool = False, progress: Progress | None = None) -> dict:
    """Train a tiny CNN on the `train-*-of-*` shards of `dataset_dir` for `steps` steps.

    Writes `out_dir/metrics.csv` (`IMAGENET_COLUMNS`) and `out_dir/loss.png` (never over an earlier
    run's without `overwrite`: `loop.write_metrics`), and returns first/last
    loss (means over the first/last 10 steps), the last steps' accuracy and timings. With
    `evaluate_validation`, up to `eval_batches` batches of the `validation-*-of-*` shards are scored
    after training (`validation_*` keys). Bad input raises PrepError.
    """
    dataset_dir = Path(dataset_dir)
    check_params(steps, batch_size)
    check_outputs_free(out_dir, overwrite)
    if int(image_size) < 8:
        raise PrepError(f"--image-size must be at least 8, got {image_size}")
    steps, batch_size, image_size = int(steps), int(batch_size), int(image_size)
    files = find_files(dataset_dir, TRAIN_SHARD_GLOB, TRAIN_SHARD_RE)
    val_files = find_files(dataset_dir, VALIDATION_SHARD_GLOB, VALIDATION_SHARD_RE) if evaluate_validation else []

    tf = import_quietly()
    import keras

    nonempty = 0
    for path in [*files, *val_files]:
        data = first_record(path)
        if data is not None:
            _check_first_record(path, data)
            nonempty += path in files
    if not nonempty:
        raise PrepError(f"{dataset_dir}: the {TRAIN_SHARD_GLOB} shards hold no records")

    set_seeds(seed)
    spec = IMAGENET_IMAGE.tf_spec(tf, names=TRAINED_FEATURES)

    def decode(serialized):
        ex = tf.io.parse_single_example(serialized, spec)
        image = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        image = tf.image.resize(image, [image_size, image_size], antialias=True) / 255.0
        return image, tf.cast(ex["image/class/label"], tf.int32) - 1

    ds = tf.data.Dataset.from_tensor_slices([str(p) for p in files])
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 4), block_length=8)
    ds = ds.shuffle(1024, seed=seed)
    ds = ds.map(decode, num_parallel_calls=2, deterministic=True)
    ds = ds.batch(batch_size, drop_remainder=True).prefetch(2)

    model = build_tiny_cnn(image_size)
    optimizer = keras.optimizers.Adam(learning_rate=warmup_then_decay(float(learning_rate), steps,
                                                                      float(warmup_fraction)))
    optimizer.build(model.trainable_variables)

    @tf.function
    def train_step(batch):
        images, labels = batch
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss, "accuracy": _hits(tf, logits, labels) / tf.cast(tf.shape(labels)[0], tf.float32)}

    def evaluate() -> dict:
        """The validation shards, in order, once (up to `eval_batches` batches): mean loss and accuracy."""
        if not val_files:
            return {}
        val_ds = tf.data.TFRecordDataset([str(p) for p in val_files]).map(decode).batch(batch_size)

        @tf.function
        def val_step(images, labels):
            logits = model(images)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            return tf.reduce_sum(ce), _hits(tf, logits, labels)

        ce = hits = n = 0.0
        try:
            for images, labels in val_ds.take(int(eval_batches)):
                batch_ce, batch_hits = val_step(images, labels)
                ce, hits, n = ce + float(batch_ce), hits + float(batch_hits), n + int(labels.shape[0])
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            on_error(e)
        if not n:
            raise PrepError(f"{dataset_dir}: the {VALIDATION_SHARD_GLOB} shards hold no records")
        return {"validation_files": len(val_files), "validation_examples": int(n), "validation_loss": ce / n,
                "validation_accuracy": hits / n}

    def check_one(data: bytes) -> None:
        image, label = decode(tf.constant(data))
        if not 0 <= int(label) < NUM_CLASSES:
            raise ValueError(f"image/class/label {int(label) + 1} is outside 1..{NUM_CLASSES}")

    def on_error(e):
        if isinstance(e, (tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
            find_bad_file([*files, *val_files], parse=check_one)
            raise PrepError(f"{dataset_dir}: bad record: {first_line(e)}") from None
        raise PrepError(f"{dataset_dir}: ran out of records: {first_line(e)}") from None

    return train_and_record(train_step, ds, steps, IMAGENET_COLUMNS, on_error, out_dir, overwrite=overwrite,
                            title=f"tiny CNN on {dataset_dir.name}", evaluate=evaluate, progress=progress,
                            batch_size=batch_size,
                            image_size=image_size, files=len(files))


def _hits(tf, logits, labels):
    return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32))
