"""`imagenet-prep inspect`: ImageNet records as a person reads them.

Each record of a shard (ours, or one written by TensorFlow's build_imagenet_data.py: the same
15 keys, `IMAGENET_IMAGE`, in protobuf's own feature order) is decoded without TensorFlow and
printed as

    --- record 0 (110412 bytes): n01440764_10026.JPEG
    label 1, synset n01440764: tench, Tinca tinca
    375x500 (height x width), JPEG, RGB, 3 channels; 110338 bytes encoded
    boxes (1): label 1 x 0.050-0.930 y 0.120-0.870

The text fields are shown as the record holds them, with anything unprintable escaped, so a
strange record cannot move the cursor or clear the terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from shardkit.errors import PrepError
from shardkit.example import decode_example_kinds
from shardkit.records import read_records

from .schema import IMAGENET_IMAGE

BOX_EDGES = ("xmin", "xmax", "ymin", "ymax")


def printable(value: bytes) -> str:
    """A bytes field as text: UTF-8 (invalid bytes as \\x..), control characters escaped."""
    text = value.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _one(record: dict, name: str):
    return record[name][0]


def record_lines(what: str, record: dict) -> list[str]:
    """The text of one decoded record ({feature: values}, every feature of IMAGENET_IMAGE present)."""
    label = _one(record, "image/class/label")
    edges = [record[f"image/object/bbox/{e}"] for e in BOX_EDGES]
    box_labels = record["image/object/bbox/label"]
    boxes = []
    for k, (xmin, xmax, ymin, ymax) in enumerate(zip(*edges)):
        box_label = box_labels[k] if k < len(box_labels) else "none"
        boxes.append(f"label {box_label} x {xmin:.3f}-{xmax:.3f} y {ymin:.3f}-{ymax:.3f}")
    counts = {len(v) for v in edges} | {len(box_labels)}
    if len(counts) > 1:
        boxes.append(f"(the box lists disagree: {', '.join(f'{e} {len(v)}' for e, v in zip(BOX_EDGES, edges))}, "
                     f"label {len(box_labels)})")
    return [
        f"--- {what}: {printable(_one(record, 'image/filename'))}",
        f"label {label}, synset {printable(_one(record, 'image/class/synset'))}: "
        f"{printable(_one(record, 'image/class/text'))}",
        f"{_one(record, 'image/height')}x{_one(record, 'image/width')} (height x width), "
        f"{printable(_one(record, 'image/format'))}, {printable(_one(record, 'image/colorspace'))}, "
        f"{_one(record, 'image/channels')} channels; {len(_one(record, 'image/encoded'))} bytes encoded",
        f"boxes ({max(counts)}): " + (" | ".join(boxes) if boxes else "none"),
    ]


def inspect_lines(path: str | Path, n: int) -> Iterator[str]:
    """The first `n` records of the shard `path` as text lines, after one header line."""
    path = Path(path)
    if path.is_dir():
        raise PrepError(f"{path}: a folder; give one of its shards (train-00000-of-01024, ...)")
    if not path.is_file():
        raise PrepError(f"{path}: no such shard")
    yield f"{path}: TFRecord, ImageNet records (build_imagenet_data.py's {len(IMAGENET_IMAGE.features)} keys)"
    shown = 0
    for index, data in enumerate(read_records(path)):
        if index >= n:
            break
        try:
            decoded = decode_example_kinds(data)
        except (ValueError, IndexError) as e:
            raise PrepError(f"{path}: record {index}: not a tf.train.Example ({e})") from None
        problem = IMAGENET_IMAGE.problem(decoded, {})
        if problem:
            raise PrepError(f"{path}: record {index}: {problem}")
        yield from record_lines(f"record {index} ({len(data)} bytes)",
                                {name: values for name, (_, values) in decoded.items()})
        shown += 1
    if shown == 0:
        yield f"{path}: no records"
