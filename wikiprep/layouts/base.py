"""`Layout`: what every output layout of BERT pre-training instances says about itself, and does.

The generator (`wikiprep.instances`) makes the same instances whatever the output; a layout is how
they are stored. It names itself (`name`, `title`), says which flags choose it and what it adds to a
dataset's description, where its files go (`folder_suffix`, `suffixes`, an index or none), refuses
what it cannot hold (`check`, `check_outputs`), encodes each instance as the generator emits it
(`encoder`, or the compiled generator's own code for it, `compiled_code`), writes the spilled
encodings to its files (`writers`), and reads its files back as standard-layout batches (`batches`,
`instances`, `count`, `recognize`). Subclasses fill these in: `framed.FramedLayout` for TFRecords
(framed records, an index beside each file), `hdf5.HDF5Layout` for files written in columns from rows,
`parquet.ParquetLayout` for LDDL's Parquet files, which also has a finishing step (`finishing`): its
shards are staged (in the layout `staged` names), and their instances dealt over balanced files once every
shard is written (`plan_parts`, `write_part`, the files of each part named by `part_names`).
A new layout of columnar files may spill the rows HDF5 spills (`hdf5.InstanceRows`, and the compiled
generator's code for them) and write its own files from blocks of them; one whose encoder the
compiled generator does not know gives `compiled_code` None, and the Python generator runs with it.
"""

from __future__ import annotations

import dataclasses
import os
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Iterator, Protocol, Sequence

from shardkit.progress import Progress
from shardkit.records import index_path_for

BATCH = 512  # instances per batch read back (a tf.io.parse_example call, an h5py read)

# The dataset description's keys of the flags that name a layout (`--output-format`, `--layout`).
FLAG_KEYS = ("output_format", "layout")


class Encoder(Protocol):
    """An instance's bytes in a layout, from the generator's emit arguments (`instances.Emit`: tokens as varints)."""

    def encode(self, tokens: list[bytes], len_a: int, len_b: int, positions: list[int], labels: list[bytes],
               is_random: bool) -> bytes: ...


class Outputs(Protocol):
    """A layout's files of one run, opened (their temporaries) before the work and committed together on exit."""

    def __enter__(self) -> "Outputs": ...

    def __exit__(self, exc_type, exc, tb): ...

    def copy(self, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
        """Spilled encoding `order[k]` (bytes offsets[i]:offsets[i + 1] of `fd`) to output k mod n, in that order."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """One output layout. A frozen value, passed whole from where the flags are read to every step that writes,
    checks or reads: nothing re-derives it from a file name. Per-run parameters (`parameters`) are fields of
    the value too (`with_parameters`)."""

    name: str                       # the registry's key; also what stats.json calls the format
    title: str                      # how messages and reports name it: "TFRecord, Graphcore static mask"
    file_kind: str                  # the kind of file it writes: "TFRecord", "HDF5"
    flags: tuple[str, str]          # the (--output-format, --layout) values that choose it
    folder_suffix: str              # a dataset folder's name after the options': "" or "_remask"
    suffixes: tuple[str, ...]       # of its files; the first is its shards'
    indexed: bool                   # an `offset length` index beside each file (tfrecord2idx's)
    framed: bool                    # its encodings are spilled framed (as TFRecords: a CRC32C each)
    compiled_code: int | None       # the compiled generator's code of its encoder (_speedups.c, LAYOUT_*); None:
    #                                 the compiled generator does not know it, and the Python one runs
    implies_fixed_mask_count: bool = False  # choosing it implies Graphcore's fixed mask count (it needs it)
    named_outputs: bool = False     # create-pretraining-data writes it to outputs named with its suffixes
    flags_note: str = ""            # why the flags choosing it combine with no other (a refusal says it)

    # The names of its per-run parameters (fields of a subclass), as dataset.json records them.
    parameters: ClassVar[tuple[str, ...]] = ()

    @property
    def shard_suffix(self) -> str:
        return self.suffixes[0]

    def with_parameters(self, **values: Any) -> "Layout":
        """This layout with its own parameters among `values` set (those of other layouts ignored)."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if k in self.parameters})

    def description(self) -> dict:
        """What it adds to a dataset's description (dataset.json, MANIFEST.json): its flags and parameters."""
        return {**dict(zip(FLAG_KEYS, self.flags)), **{name: getattr(self, name) for name in self.parameters}}

    # -- writing ----------------------------------------------------------------------------------

    def check(self, options) -> None:
        """Refuse, with one PrepError line, generation options whose instances it cannot hold."""

    def check_shards(self, num_shards: int) -> None:
        """Refuse, with one PrepError line, a dataset of `num_shards` shards it cannot lay out."""

    def check_outputs(self, output_files: Sequence[str | os.PathLike],
                      index_files: Sequence[str | os.PathLike | None]) -> None:
        """Refuse, with one PrepError line, outputs (and their index files) it cannot write."""

    def index_path(self, path: str | os.PathLike) -> Path | None:
        """The index written beside the file `path` (`wiki_00000.index`), or None when it has none."""
        return index_path_for(path) if self.indexed else None

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int, vocab=None) -> Encoder:
        """Its encoder of the generator's instances; `vocab` (a `tokenization.Vocab`) for a layout that writes
        tokens as text."""
        raise NotImplementedError

    def compiled_arguments(self, vocab=None) -> dict | None:
        """The keyword arguments that make `_speedups.Generator` encode this layout (its code, framing and
        parameters; `vocab` as `encoder`'s), or None when it has no compiled code: the generator's Python path
        runs then, never another layout's compiled encoder."""
        if self.compiled_code is None:
            return None
        return {"layout": self.compiled_code, "framed": self.framed, "pad_position": b"\x00"}

    def writers(self, paths: Sequence[Path], index_paths: Sequence[str | os.PathLike | None], dims: dict[str, int],
                *, overwrite: bool = False, vocab=None) -> ContextManager[Outputs]:
        """Its files at `paths` (and index files), opened together; `overwrite` as `shardkit.atomic`'s. `vocab`
        (a `tokenization.Vocab`): the vocabulary, for a layout that writes tokens as text."""
        raise NotImplementedError

    # -- a finishing step: files made from every shard, once all are written -------------------------

    @property
    def finishing(self) -> bool:
        """Whether its dataset's shards are staged and its files made from all of them by finishing parts (one
        per shard index: `part_names`, `plan_parts`, `write_part`); else the shards are its files."""
        return False

    @property
    def staged(self) -> "Layout":
        """The layout a dataset's shards are written in: this one, or for a layout with a finishing step the staged
        shards its finishing parts read."""
        return self

    def part_names(self, prefix: str, part: int, dims: dict[str, int]) -> list[str]:
        """The names of the files finishing part `part` writes."""
        raise NotImplementedError

    def part_shards(self, plan: dict, part: int) -> list[int]:
        """The staged shards finishing part `part` of `plan` reads."""
        raise NotImplementedError

    def plan_parts(self, shard_stats: list[dict], dims: dict[str, int], num_parts: int) -> dict:
        """From the staged shards' writer stats (in shard order), what each finishing part writes (JSON-able)."""
        raise NotImplementedError

    def write_part(self, plan: dict, part: int, staged: Sequence[Path], paths: Sequence[Path],
                   dims: dict[str, int], vocab, *, progress: Progress | None = None,
                   observe: Callable[[int, dict], None] | None = None) -> list[int]:
        """Write part `part` of `plan` to `paths` (`part_names`) from the staged shards, committed together;
        the instances of each file. `vocab`: as `writers`'. `observe(i, batch)`: the standard-layout batches of
        file i as written (what `batches` gives reading it back)."""
        raise NotImplementedError

    # -- reading back -----------------------------------------------------------------------------

    def suffix_of(self, path: Path) -> str | None:
        """Which of its suffixes the file at `path` is named with, or None."""
        suffix = path.suffix.lower()
        return suffix if suffix in self.suffixes else None

    def check_counts(self, counts: dict[Path, int]) -> None:
        """Refuse, with one PrepError line, a dataset whose files hold these instance counts (its readers' rules)."""

    def recognize(self, path: Path, family: list["Layout"]) -> tuple["Layout", dict[str, int]]:
        """The layout of `family` (this one and those whose files have the same suffixes) that the file at
        `path` holds, from its contents, and the dimensions it implies; PrepError when it holds none of them."""
        return self, self.file_dims(path)

    def file_dims(self, path: Path) -> dict[str, int]:
        """The dimensions (max_seq_length, max_predictions_per_seq) the file at `path` implies."""
        raise NotImplementedError

    def count(self, path: Path) -> int:
        """The instances of one file without parsing them (checked against its index when it has one)."""
        raise NotImplementedError

    def batches(self, path: Path, dims: dict[str, int], *, tensorflow: bool = True,
                vocab: Path | None = None) -> Iterator[dict]:
        """The instances of one file as standard-layout numpy batches (BERT_INSTANCE's features and shapes, int64
        and float32, as TensorFlow parses them), BATCH at a time; PrepError naming the file and record that
        breaks the layout. `tensorflow` False: read without importing TensorFlow while the records allow it.
        `vocab`: the vocab.txt, for a layout that holds tokens as text."""
        raise NotImplementedError

    def instances(self, path: Path, dims: dict[str, int], n: int, vocab: Path | None = None
                  ) -> Iterator[tuple[str, dict]]:
        """('record i (B bytes)' or 'instance i', {feature: values}) of the first `n` instances of one file, in
        the standard layout (BERT_INSTANCE's features, padded), read without TensorFlow."""
        raise NotImplementedError
