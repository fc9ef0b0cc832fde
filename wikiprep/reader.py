"""Reading BERT record files back, in any layout: finding them, their layout and dimensions, reading them.

`verify`, `stats` and `inspect` all read through here, so they see the same files the same way.
`open_records` finds a folder's record files (or takes one file) and their layout: the one the
folder's description names (dataset.json, or MANIFEST.json's "dataset"), else the one the files
hold (`layouts.of_file`: their suffix, then their contents). Each layout reads its own files
(`Layout.batches`, `Layout.instances`) as the same standard-layout numpy batches, so one set of
checks and one set of counts serve them all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from shardkit.errors import PrepError
from shardkit.manifest import MANIFEST

from . import layouts
from .layouts import Layout
from .schema import BERT_INSTANCE

BATCH = layouts.BATCH  # instances per batch


@dataclass(frozen=True)
class RecordFiles:
    """The record files of a dataset folder (or one file): their layout, dimensions and the folder's description."""

    path: Path                      # what was asked for: a folder or a file
    layout: Layout
    files: list[Path]
    dims: dict[str, int]
    description: dict = field(default_factory=dict)  # the folder's dataset.json, when it has one
    vocab: Path | None = None       # the vocab.txt given, else the one beside the files (a layout of text tokens reads it)


def find_record_files(folder: str | Path) -> list[Path]:
    """A folder's record files: those named with a layout's suffix (`*.tfrecord`, `*.hdf5`, `*.h5`), sorted.
    PrepError when it holds none, or files of two kinds (TFRecord and HDF5)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder")
    suffixes = layouts.suffixes()
    files = sorted(p for p in folder.iterdir() if p.is_file() and layouts.suffix_of(p) in suffixes)
    if not files:
        raise PrepError(f"{folder}: no {', '.join('*' + s for s in suffixes[:-1])} or *{suffixes[-1]} files")
    kinds: dict[str, Path] = {}  # the first file of each kind, in the registry's order of kinds
    for layout in layouts.LAYOUTS.values():
        first = next((p for p in files if layouts.suffix_of(p) in layout.suffixes), None)
        if first is not None:
            kinds.setdefault(layout.file_kind, first)
    if len(kinds) > 1:
        (kind, one), (other_kind, other) = list(kinds.items())[:2]
        raise PrepError(f"{folder}: holds both {kind} ({one.name}) and {other_kind} ({other.name}) files; give one "
                        f"file, or a folder of one format")
    return files


def _description(folder: Path) -> dict:
    """The folder's dataset.json (else MANIFEST.json's "dataset"), or {} when it has none or it cannot be read
    (the records themselves then say)."""
    for name, key in (("dataset.json", None), (MANIFEST, "dataset")):
        try:
            d = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if key is not None:
            d = d.get(key) if isinstance(d, dict) else None
        if isinstance(d, dict):
            return d
    return {}


def _described_dims(description: dict) -> dict[str, int] | None:
    try:
        return {name: int(description[name]) for name in BERT_INSTANCE.dimensions}
    except (KeyError, TypeError, ValueError):
        return None


def _vocab_beside(folder: Path, vocab: str | Path | None) -> Path | None:
    """`vocab` when given, else the vocab.txt in `folder` when there is one."""
    if vocab is not None:
        return Path(vocab)
    beside = folder / "vocab.txt"
    return beside if beside.is_file() else None


def open_records(path: str | Path, vocab: str | Path | None = None) -> RecordFiles:
    """The record files at `path` (a dataset folder, or one record file), their layout and dims.

    In a folder, the description's layout and dimensions win over the first file's (a record of other
    dimensions then fails to read, naming it); one file is described by itself alone. `vocab`: the vocab.txt
    to read tokens held as text with (default: the one in the folder, or beside the file).
    """
    path = Path(path)
    if path.is_dir():
        files = find_record_files(path)
        description = _description(path)
    elif path.is_file():
        files, description = [path], {}
    else:
        raise PrepError(f"{path}: no such file or folder")
    layout, dims = layouts.of_file(files[0])
    named = layouts.described(description)
    if named is not None:
        if layouts.suffix_of(files[0]) not in named.suffixes:
            raise PrepError(f"{path}: its description says {named.title}, but it holds {files[0].name}")
        layout = named
    return RecordFiles(path, layout, files, _described_dims(description) or dims, description,
                       _vocab_beside(path if path.is_dir() else path.parent, vocab))


def dataset_file(path: str | Path, vocab: str | Path | None = None) -> RecordFiles:
    """One record file of a dataset folder, read as `open_records(folder)` reads it, from the folder's
    dataset.json alone (its dimensions, its layout): what the writer of a shard reads its own shard back
    with, the other shards written or not, an empty shard as well. PrepError when the folder has no dataset.json."""
    path = Path(path)
    description = _description(path.parent)
    dims = _described_dims(description)
    if dims is None:
        raise PrepError(f"{path.parent / 'dataset.json'}: missing or without the dataset's dimensions")
    return RecordFiles(path, layouts.from_description(description), [path], dims, description,
                       _vocab_beside(path.parent, vocab))


def batches(records: RecordFiles) -> Iterator[tuple[Path, dict]]:
    """(file, batch) for every instance of `records`, in file order: standard-layout numpy batches (BERT_INSTANCE's
    features and shapes, int64 and float32), whatever the layout. PrepError naming the file and record that breaks
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
    return records.layout.batches(path, records.dims, tensorflow=tensorflow, vocab=records.vocab)


def file_instances(records: RecordFiles, path: Path, n: int) -> Iterator[tuple[str, dict]]:
    """('record i (B bytes)' or 'instance i', {feature: values}) of the first `n` instances of one file of
    `records`, in the standard layout (BERT_INSTANCE's features, padded), read without TensorFlow: the records
    as they are, whichever tool wrote them."""
    return records.layout.instances(path, records.dims, n, vocab=records.vocab)
