"""Reading BERT record files back: finding a folder's shards, their dimensions, parsing and showing records.

`verify`, `stats` and `inspect` all read through here, so they see the same files, and the first two
parse them with the same spec: `BERT_INSTANCE.tf_spec(tf, dims)`, the schema of google-research/bert's
run_pretraining.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from shardkit.errors import PrepError
from shardkit.example import decode_example
from shardkit.records import find_files, read_records
from shardkit.tf import error_text

from .schema import BERT_INSTANCE, PRED, SEQ
from .tokenization import Vocab

BATCH = 512  # records per tf.io.parse_example call

# The features holding token ids, each with the feature whose non-zero values mark its real (unpadded) entries.
TOKEN_ID_FEATURES = {"input_ids": "input_mask", "masked_lm_ids": "masked_lm_weights"}


def find_record_files(folder: str | Path) -> list[Path]:
    """A dataset's `wiki_*.tfrecord` shards or, in a folder without them, its `*.tfrecord` files; sorted."""
    folder = Path(folder)
    return find_files(folder, "wiki_*.tfrecord" if any(folder.glob("wiki_*.tfrecord")) else "*.tfrecord")


def dataset_dims(folder: Path, first_file: Path) -> dict[str, int]:
    """{max_seq_length, max_predictions_per_seq}: from the folder's dataset.json, else from the first record."""
    description = folder / "dataset.json"
    if description.is_file():
        try:
            d = json.loads(description.read_text(encoding="utf-8"))
            return {name: int(d[name]) for name in BERT_INSTANCE.dimensions}
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable description: the records themselves say
    for data in read_records(first_file):
        try:
            dims = BERT_INSTANCE.dims_of(data)
        except (ValueError, IndexError):
            dims = {}
        if set(dims) != set(BERT_INSTANCE.dimensions):
            raise PrepError(f"{first_file}: first record is not a BERT pre-training example")
        return dims
    raise PrepError(f"{first_file}: no records to infer the feature shapes from")


def parsed_batches(tf, files: list[Path], dims: dict[str, int]) -> Iterator[tuple[Path, dict]]:
    """(file, numpy feature dict) per batch of BATCH records, parsed by TensorFlow with the BERT schema."""
    spec = BERT_INSTANCE.tf_spec(tf, dims)
    for path in files:
        ds = tf.data.TFRecordDataset(str(path)).batch(BATCH).map(lambda b: tf.io.parse_example(b, spec))
        try:
            for batch in ds.as_numpy_iterator():
                yield path, batch
        except tf.errors.OpError as e:
            found = BERT_INSTANCE.first_problem(read_records(path, check_crc=False), dims)
            what = f"record {found[0]}: {found[1]}" if found else error_text(e)
            raise PrepError(f"{path}: TensorFlow cannot parse it with the BERT schema "
                            f"(seq {dims[SEQ]}, {dims[PRED]} predictions): {what}") from None


def describe_records(path: str | Path, n: int) -> Iterator[str]:
    """The first `n` records of `path` as text lines, a `name: values` line per feature.

    With a vocab.txt beside the file, token ids are shown as tokens, without their padding.
    """
    path = Path(path)
    if not path.is_file():
        raise PrepError(f"{path}: no such record file")
    vocab_path = path.parent / "vocab.txt"
    vocab = Vocab(vocab_path) if vocab_path.is_file() else None
    shown = 0
    for data in read_records(path):
        if shown >= n:
            break
        try:
            ex = decode_example(data)
        except (ValueError, IndexError) as e:
            raise PrepError(f"{path}: record {shown} is not a tf.train.Example ({e})") from None
        yield f"--- record {shown} ({len(data)} bytes)"
        for name in sorted(ex):
            values = ex[name]
            if vocab is not None and name in TOKEN_ID_FEATURES:
                real = ex.get(TOKEN_ID_FEATURES[name])
                if real:
                    values = values[:sum(1 for v in real if v)]
                yield f"{name}: {' '.join(vocab.tokens(values))}"
            else:
                yield f"{name}: {' '.join(str(v) for v in values)}"
        shown += 1
    if shown == 0:
        yield f"{path}: no records"
