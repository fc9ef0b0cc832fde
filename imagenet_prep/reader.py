"""Reading a shard folder back: finding its shards, and parsing their records with TensorFlow.

`verify` and `stats` both read through here, so they see the same shards and parse them with
the same spec: `IMAGENET_IMAGE.tf_spec(tf)`, the schema TF-official, TPU and Graphcore readers
parse build_imagenet_data.py records with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from shardkit.errors import PrepError
from shardkit.example import decode_example_kinds
from shardkit.records import read_records
from shardkit.tf import error_text

from . import convert
from .schema import IMAGENET_IMAGE

BATCH = 256  # records per tf.io.parse_example call


def find_shards(folder: Path) -> dict[str, list[Path]]:
    """{split: shard paths in index order}; PrepError for a gap, mixed counts or a stray `train*` file."""
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder")
    found: dict[str, dict[int, tuple[int, Path]]] = {}
    for p in sorted(folder.iterdir()):
        if not p.name.startswith(convert.SPLITS):
            continue
        m = convert.SHARD_RE.fullmatch(p.name)
        if m is None:
            raise PrepError(f"{p}: stray file; readers glob '{p.name.split('-')[0]}*' in this folder and Graphcore's "
                            f"demands exactly the shards (move it elsewhere)")
        found.setdefault(m.group(1), {})[int(m.group(2))] = (int(m.group(3)), p)
    if not found:
        raise PrepError(f"{folder}: no train-*-of-* or validation-*-of-* shards")
    out = {}
    for split, by_index in found.items():
        totals = {n for n, _ in by_index.values()}
        if len(totals) != 1:
            raise PrepError(f"{folder}: {split} shards disagree on the shard count ({sorted(totals)})")
        total = totals.pop()
        for i in range(total):
            if i not in by_index:
                raise PrepError(f"{folder / convert.shard_name(split, i, total)}: missing shard")
        extra = sorted(set(by_index) - set(range(total)))
        if extra:
            raise PrepError(f"{by_index[extra[0]][1]}: shard index beyond the shard count")
        out[split] = [by_index[i][1] for i in range(total)]
    return out


def iter_parsed(tf, shard: Path, check_crc: bool = True) -> Iterator[tuple[int, dict]]:
    """The records of `shard`, parsed BATCH at a time: (index of the batch's first record, {feature: values}).

    Fixed-length features come as one array per batch; the bounding-box lists as one array per record.
    A record that does not parse is a PrepError naming its index and what is wrong, never TensorFlow's op text.
    """
    spec = IMAGENET_IMAGE.tf_spec(tf)

    def parse(first, payloads):
        try:
            parsed = tf.io.parse_example(tf.constant(payloads), spec)
        except (tf.errors.InvalidArgumentError, ValueError):  # ValueError: TF's message quoting non-UTF-8 bytes
            raise _parse_error(tf, spec, shard, first, payloads) from None
        out = {}
        for k, v in parsed.items():
            if isinstance(v, tf.SparseTensor):
                rows = v.indices.numpy()[:, 0]
                vals = v.values.numpy()
                out[k] = [vals[rows == r] for r in range(len(payloads))]
            else:
                out[k] = v.numpy()
        return out

    batch, first = [], 0
    for data in read_records(shard, check_crc=check_crc):
        batch.append(data)
        if len(batch) == BATCH:
            yield first, parse(first, batch)
            first += len(batch)
            batch = []
    if batch:
        yield first, parse(first, batch)


def _parse_error(tf, spec: dict, shard: Path, first: int, payloads: list[bytes]) -> PrepError:
    """Which record of a batch TensorFlow could not parse, and why, in the schema's words where they suffice."""
    what = "does not parse with the 15-key ImageNet schema"
    for k, data in enumerate(payloads, start=first):
        try:
            decoded = decode_example_kinds(data)
        except (ValueError, IndexError):
            return PrepError(f"{shard}: record {k}: not a tf.train.Example")
        problem = IMAGENET_IMAGE.problem(decoded, {})
        if problem:
            return PrepError(f"{shard}: record {k}: {what}: {problem}")
        try:
            tf.io.parse_example(tf.constant([data]), spec)
        except (tf.errors.InvalidArgumentError, ValueError) as e:
            return PrepError(f"{shard}: record {k}: {what} ({error_text(e)})")
    return PrepError(f"{shard}: records {first}..{first + len(payloads) - 1}: {what}")
