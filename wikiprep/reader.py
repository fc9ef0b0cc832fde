"""Reading BERT record files back, in any of the three layouts: finding them, their dimensions, parsing, showing.

`verify`, `stats` and `inspect` all read through here, so they see the same files the same way.
`open_records` finds a folder's shards (or takes one file) and tells their kind:

- `tfrecord`: google-research/bert's records, parsed by TensorFlow with `BERT_INSTANCE.tf_spec`;
- `remask`: Graphcore's static-mask records, parsed with `REMASK_INSTANCE.tf_spec`, then
  rearranged back (`remask.to_standard`, which checks every invariant of the layout);
- `hdf5`: NVIDIA's HDF5 files, read with h5py (`hdf5.read_batches`).

`batches` gives every kind as the same standard-layout numpy batches, so one set of checks and
one set of counts serve all three.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Iterator

from shardkit.errors import PrepError
from shardkit.example import NotPlainExample, decode_batch, decode_example, decode_example_kinds
from shardkit.records import read_records
from shardkit.tf import error_text, import_tensorflow

from . import hdf5, remask
from .schema import BERT_INSTANCE, PRED, REMASK_INSTANCE, SEQ

BATCH = 512  # records per tf.io.parse_example call
TFRECORD, REMASK, HDF5 = "tfrecord", remask.REMASK, "hdf5"
KIND_NAMES = {TFRECORD: "TFRecord", REMASK: "TFRecord, Graphcore static mask", HDF5: "HDF5, NVIDIA's layout"}
SCHEMAS = {TFRECORD: BERT_INSTANCE, REMASK: REMASK_INSTANCE}


@dataclass(frozen=True)
class RecordFiles:
    """The record files of a dataset folder (or one file): their kind, dimensions and the folder's description."""

    path: Path                      # what was asked for: a folder or a file
    kind: str                       # TFRECORD, REMASK or HDF5
    files: list[Path]
    dims: dict[str, int]
    description: dict = field(default_factory=dict)  # the folder's dataset.json, when it has one


def _candidates(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """A dataset's `wiki_*` shards with one of `suffixes` or, in a folder without them, every such file; sorted."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    shards = [p for p in files if p.name.startswith("wiki_")]
    return shards or files


def find_record_files(folder: str | Path) -> list[Path]:
    """A folder's record files: its `wiki_*.tfrecord` or `wiki_*.hdf5` shards or, in a folder without them, its
    `*.tfrecord` or `*.hdf5`/`*.h5` files; sorted. PrepError when it holds none, or both formats."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder")
    tfrecords = _candidates(folder, (".tfrecord",))
    hdf5_files = _candidates(folder, hdf5.SUFFIXES)
    if tfrecords and hdf5_files:
        raise PrepError(f"{folder}: holds both TFRecord ({tfrecords[0].name}) and HDF5 ({hdf5_files[0].name}) "
                        f"files; give one file, or a folder of one format")
    if not tfrecords and not hdf5_files:
        raise PrepError(f"{folder}: no *.tfrecord, *.hdf5 or *.h5 files")
    return tfrecords or hdf5_files


def _first_record(path: Path) -> bytes | None:
    for data in read_records(path):
        return data
    return None


def _tfrecord_kind_and_dims(path: Path) -> tuple[str, dict[str, int]]:
    """(TFRECORD or REMASK, dims) from the first record of `path`."""
    data = _first_record(path)
    if data is None:
        raise PrepError(f"{path}: no records to infer the feature shapes from")
    try:
        kind = REMASK if "input_position" in decode_example(data) else TFRECORD
        dims = SCHEMAS[kind].dims_of(data)
    except (ValueError, IndexError):
        kind, dims = TFRECORD, {}
    if set(dims) != set(BERT_INSTANCE.dimensions):
        raise PrepError(f"{path}: first record is not a BERT pre-training example")
    return kind, dims


def _description(folder: Path) -> dict:
    """The folder's dataset.json, or {} when it has none or it cannot be read (the records themselves then say)."""
    try:
        d = json.loads((folder / "dataset.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return d if isinstance(d, dict) else {}


def open_records(path: str | Path) -> RecordFiles:
    """The record files at `path` (a dataset folder, or one TFRecord or HDF5 file), their kind and dims.

    In a folder, dataset.json's dimensions win over the first record's (a record of other
    dimensions then fails to parse, naming it); one file is described by itself alone.
    """
    path = Path(path)
    if path.is_dir():
        files = find_record_files(path)
        description = _description(path)
    elif path.is_file():
        files, description = [path], {}
    else:
        raise PrepError(f"{path}: no such file or folder")
    first = files[0]
    if hdf5.is_hdf5_path(first):
        kind, dims = HDF5, hdf5.file_dims(first)
    else:
        kind, dims = _tfrecord_kind_and_dims(first)
    try:
        dims = {name: int(description[name]) for name in BERT_INSTANCE.dimensions}
    except (KeyError, TypeError, ValueError):
        pass  # no dataset.json, or an unreadable one: the records themselves say
    return RecordFiles(path, kind, files, dims, description)


def dataset_file(path: str | Path) -> RecordFiles:
    """One record file of a dataset folder, read as `open_records(folder)` reads it, from the folder's
    dataset.json alone (its dimensions, its layout): what the writer of a shard reads its own shard back
    with, the other shards written or not, an empty shard as well. PrepError when the folder has no dataset.json."""
    path = Path(path)
    description = _description(path.parent)
    try:
        dims = {name: int(description[name]) for name in BERT_INSTANCE.dimensions}
    except (KeyError, TypeError, ValueError):
        raise PrepError(f"{path.parent / 'dataset.json'}: missing or without the dataset's dimensions") from None
    if hdf5.is_hdf5_path(path):
        kind = HDF5
    else:
        kind = REMASK if description.get("layout") == remask.REMASK else TFRECORD
    return RecordFiles(path, kind, [path], dims, description)


def count_records(records: RecordFiles, path: Path) -> int:
    """Instances in one file of `records`, without parsing them: HDF5's row count, or the TFRecord framing."""
    if records.kind == HDF5:
        return hdf5.count_instances(path)
    return sum(1 for _ in read_records(path))


# ---------------------------------------------------------------------------------------------
# Batches in the standard layout, from every kind

def _parsed_batches(tf, records: RecordFiles, path: Path, names=None, *, skip: int = 0) -> Iterator[dict]:
    """Batches of one TFRecord file parsed by TensorFlow with its kind's schema (sparse features made dense, -1 pad),
    from batch `skip` on."""
    schema, dims = SCHEMAS[records.kind], records.dims
    spec = schema.tf_spec(tf, dims, names)

    def parse(batch):
        parsed = tf.io.parse_example(batch, spec)
        return {k: tf.sparse.to_dense(v, default_value=-1) if isinstance(v, tf.sparse.SparseTensor) else v
                for k, v in parsed.items()}

    ds = tf.data.TFRecordDataset(str(path)).batch(BATCH).skip(skip).map(parse)
    try:
        yield from ds.as_numpy_iterator()
    except tf.errors.OpError as e:
        found = schema.first_problem(read_records(path, check_crc=False), dims)
        what = f"record {found[0]}: {found[1]}" if found else error_text(e)
        raise PrepError(f"{path}: TensorFlow cannot parse it with the {schema.name} schema "
                        f"(seq {dims[SEQ]}, {dims[PRED]} predictions): {what}") from None


def _plain_batches(records: RecordFiles, path: Path, state: dict) -> Iterator[dict]:
    """The batches `_parsed_batches` gives, decoded without TensorFlow (`example.decode_batch`) for as long as the
    records are in the plain form it takes and the file reads without a framing or checksum error. Counts the
    batches given in state["batches"]; state["whole"] says whether they are the whole file."""
    schema, dims = SCHEMAS[records.kind], records.dims
    features = [(f.name, f.kind, f.length(dims)) for f in schema.features]
    scalars = [f.name for f in schema.features if f.shape == ()]  # FixedLenFeature([]): one value a record, [B]
    payloads = read_records(path)
    try:
        while batch := list(islice(payloads, BATCH)):  # the last one shorter
            decoded = _squeezed(decode_batch(batch, features), scalars)
            state["batches"] += 1
            yield decoded
    except (NotPlainExample, PrepError):
        return
    state["whole"] = True


def _squeezed(batch: dict, names: list[str]) -> dict:
    for name in names:
        batch[name] = batch[name].reshape(-1)
    return batch


def _record_batches(records: RecordFiles, path: Path, tensorflow: bool) -> Iterator[dict]:
    """The batches of one TFRecord file in its kind's schema: TensorFlow's, or decoded without it first."""
    state = {"batches": 0, "whole": False}
    if not tensorflow:
        yield from _plain_batches(records, path, state)
        if state["whole"]:
            return
    yield from _parsed_batches(import_tensorflow(), records, path, skip=state["batches"])


def batches(records: RecordFiles) -> Iterator[tuple[Path, dict]]:
    """(file, batch) for every instance of `records`, in file order: standard-layout numpy batches (BERT_INSTANCE's
    features and shapes, int64 and float32), whatever the kind. PrepError naming the file and record that breaks
    its layout."""
    for path in records.files:
        for b in file_batches(records, path):
            yield path, b


def file_batches(records: RecordFiles, path: Path, *, tensorflow: bool = True) -> Iterator[dict]:
    """The batches of one file of `records` (see `batches`): one file alone, so files can be read in parallel.

    `tensorflow=False` decodes TFRecords with `example.decode_batch` (numpy: the arrays TensorFlow's
    `parse_example` gives) and imports TensorFlow only from the first batch that decoder does not take (records
    in another form than the plain one, or a damaged file, whose error is then TensorFlow's, as with True). For
    a shard's writer reading back its own shard: TensorFlow's import costs 3-5 CPU-s, in each shard's process."""
    if records.kind == HDF5:
        if hdf5.file_dims(path) != records.dims:
            raise PrepError(f"{path}: seq {hdf5.file_dims(path)[SEQ]}, {hdf5.file_dims(path)[PRED]} predictions; "
                            f"expected seq {records.dims[SEQ]}, {records.dims[PRED]} predictions")
        yield from hdf5.read_batches(path, BATCH)
        return
    if records.kind == REMASK:
        pad_position = records.description.get("pad_position_value")
        done = 0
        for b in _record_batches(records, path, tensorflow):
            try:
                yield remask.to_standard(b, records.dims[PRED], pad_position)
            except ValueError as e:
                raise PrepError(f"{path}: batch from record {done}: {e}") from None
            done += len(b["input_ids"])
    else:
        yield from _record_batches(records, path, tensorflow)


# ---------------------------------------------------------------------------------------------
# The first instances of one file, without TensorFlow (inspect)

def _standard_from_example(records: RecordFiles, path: Path, index: int, data: bytes) -> dict:
    """One record decoded by `example.decode_example_kinds` and checked against its kind's schema, as the
    standard layout's {feature: values}; a remask record rearranged back by `remask.to_standard`."""
    import numpy as np

    schema = SCHEMAS[records.kind]
    try:
        decoded = decode_example_kinds(data)
    except (ValueError, IndexError) as e:
        raise PrepError(f"{path}: record {index}: not a tf.train.Example ({e})") from None
    problem = schema.problem(decoded, records.dims)
    if problem:
        raise PrepError(f"{path}: record {index}: {problem}")
    ex = {name: values for name, (_, values) in decoded.items() if name in schema.by_name}
    if records.kind != REMASK:
        return ex
    batch = {name: np.array([values], np.float32 if name == "masked_lm_weights" else np.int64)
             for name, values in ex.items() if name != "masked_lm_positions"}
    positions = np.full((1, max(len(ex["masked_lm_positions"]), 1)), -1, np.int64)
    positions[0, :len(ex["masked_lm_positions"])] = ex["masked_lm_positions"]
    batch["masked_lm_positions"] = positions
    try:
        standard = remask.to_standard(batch, records.dims[PRED], records.description.get("pad_position_value"))
    except ValueError as e:
        raise PrepError(f"{path}: record {index}: {str(e).removeprefix('record 0 of the batch: ')}") from None
    return {name: values[0].tolist() for name, values in standard.items()}


def file_instances(records: RecordFiles, path: Path, n: int) -> Iterator[tuple[str, dict]]:
    """('record i (B bytes)' or 'instance i', {feature: values}) of the first `n` instances of one file of
    `records`, in the standard layout (BERT_INSTANCE's features, padded), read without TensorFlow: the records
    as they are, whichever tool wrote them (the original's protobuf orders features its own way)."""
    if records.kind == HDF5:
        shown = 0
        for b in hdf5.read_batches(path, min(n, hdf5.READ_ROWS)):
            for i in range(len(b["input_ids"])):
                if shown >= n:
                    return
                yield f"instance {shown}", {name: b[name][i].tolist() for name in BERT_INSTANCE.names}
                shown += 1
        return
    for index, data in enumerate(read_records(path)):
        if index >= n:
            return
        yield f"record {index} ({len(data)} bytes)", _standard_from_example(records, path, index, data)
