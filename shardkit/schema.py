"""One declarative feature table per record type, and everything derived from it.

A `Schema` lists a record type's features once: name, kind (int64, float, bytes) and shape.
From that one table come the encoder (`encode`), TensorFlow's parse spec (`tf_spec`), the
shape check of a decoded record (`problem`), and the dimensions a file's first record implies
(`dims_of`). Writers, `verify`, `inspect` and the trainers' readers all use these, so a
feature is named, typed and sized in exactly one place (as TFDS's FeaturesDict does).

Shapes are tuples: `()` a scalar (one value), `(n,)` a fixed-length vector whose length is an
int or the name of a dimension given at use (`"max_seq_length"`), `None` a list of any length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from .example import BYTES, FLOAT, INT64, decode_example_kinds, encode_example

Dims = Mapping[str, int]


@dataclass(frozen=True)
class Feature:
    name: str
    kind: str                          # INT64, FLOAT or BYTES
    shape: tuple | None = ()           # () scalar, (n,) fixed (n an int or a dimension name), None any length
    doc: str = ""

    def length(self, dims: Dims) -> int | None:
        """How many values the feature holds (None: any number)."""
        if self.shape is None:
            return None
        if self.shape == ():
            return 1
        (n,) = self.shape
        return dims[n] if isinstance(n, str) else n

    def tf_feature(self, tf, dims: Dims):
        dtype = {INT64: tf.int64, FLOAT: tf.float32, BYTES: tf.string}[self.kind]
        if self.shape is None:
            return tf.io.VarLenFeature(dtype)
        return tf.io.FixedLenFeature([] if self.shape == () else [self.length(dims)], dtype)


class Schema:
    """The features of one record type, in the order a person reads them."""

    def __init__(self, name: str, features: Sequence[Feature]):
        self.name = name
        self.features = tuple(features)
        self.by_name = {f.name: f for f in self.features}
        self.dimensions = tuple(dict.fromkeys(
            f.shape[0] for f in self.features if f.shape and isinstance(f.shape[0], str)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    def encode(self, values: Mapping[str, Sequence]) -> bytes:
        """The `tf.train.Example` bytes of one record: `values` holds every feature's values, nothing else."""
        if set(values) != set(self.by_name):
            raise ValueError(f"{self.name}: features {sorted(values)} differ from the schema's {sorted(self.by_name)}")
        return encode_example([(f.name, f.kind, values[f.name]) for f in self.features])

    def tf_spec(self, tf, dims: Dims | None = None, names: Sequence[str] | None = None) -> dict:
        """The `tf.io.parse_example` spec of the features `names` (default: all)."""
        return {n: self.by_name[n].tf_feature(tf, dims or {}) for n in (names or self.names)}

    def dims_of(self, record: bytes) -> dict[str, int]:
        """The dimensions one serialized record implies, e.g. {"max_seq_length": 128, ...}."""
        decoded = decode_example_kinds(record)
        dims = {}
        for f in self.features:
            if f.shape and isinstance(f.shape[0], str) and f.shape[0] not in dims and f.name in decoded:
                dims[f.shape[0]] = len(decoded[f.name][1])
        return dims

    def problem(self, decoded: Mapping[str, tuple[str, list]], dims: Dims,
                names: Sequence[str] | None = None) -> str | None:
        """The first way a decoded record (`example.decode_example_kinds`) breaks the features `names`
        (default: all) of the schema, or None."""
        for f in (self.by_name[n] for n in (names or self.names)):
            if f.name not in decoded:
                return f"no {f.name} feature (not a {self.name} record)"
            kind, values = decoded[f.name]
            if kind != f.kind:
                return f"feature {f.name} is {kind}, expected {f.kind}"
            n = f.length(dims)
            if n is not None and len(values) != n:
                return f"feature {f.name} has {len(values)} values, expected {n}"
        return None

    def first_problem(self, records: Iterable[bytes], dims: Dims) -> tuple[int, str] | None:
        """(index, problem) of the first serialized record that is not an Example or breaks the schema.

        What a TensorFlow parse error means in the user's terms: TensorFlow's message names its
        graph's ops and nodes, not the record.
        """
        for i, data in enumerate(records):
            try:
                decoded = decode_example_kinds(data)
            except (ValueError, IndexError) as e:
                return i, f"not a tf.train.Example ({e})"
            problem = self.problem(decoded, dims)
            if problem:
                return i, problem
        return None
