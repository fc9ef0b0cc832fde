"""A BERT pre-training dataset folder, from sentence shards: what defines it, its shards, its closing files.

Three steps, each a plain function so that a Luigi task can wrap each one (as `imagenet_prep.convert`):

1. `describe` says what defines the dataset's content: the generation options, the dump and
   sentence-split parameters, and the vocabulary's sha256. It goes to `dataset.json` (first
   use of the folder, `claim_folder`) and to MANIFEST.json, so a folder made with other values
   is never mixed with this one.
2. `write_shard` writes `wiki_{i:05d}.tfrecord` and its index from sentence shard i, seeded by
   `shard_seed(seed, i)`: shards are independent, so any number of workers, in any order, give
   the same bytes. The same call writes `wiki_{i:05d}.hdf5` (NVIDIA's layout) when the output is
   named so, or Graphcore's static-mask TFRecords with `layout="remask"`: the same instances, in
   a sibling folder (`folder_name`).
3. `finalize` adds `vocab.txt` and `stats.json`, then MANIFEST.json, once every shard is written.
"""

from __future__ import annotations

import json
from pathlib import Path

from shardkit.atomic import remove_leftover_temps, sha256_file, write_bytes, write_json
from shardkit.errors import PrepError
from shardkit.manifest import write_manifest
from shardkit.progress import Progress
from shardkit.records import index_path_for

from . import instances, remask
from .options import GenerationOptions
from .schema import PAD_POSITION_VALUE
from .sentences import stable_hash
from .vocab import check_vocab_file

DESCRIPTION = "dataset.json"


def folder_name(options: GenerationOptions, output_format: str = instances.TFRECORD,
                layout: str = remask.STANDARD) -> str:
    """'seq128_mask20_dup5': the folder of a dataset within its dump's work folder; the HDF5 and remask
    datasets made with the same options are its siblings, '..._hdf5' and '..._remask'."""
    base = f"seq{options.max_seq_length}_mask{options.max_predictions_per_seq}_dup{options.dupe_factor}"
    if output_format == instances.HDF5:
        return base + "_hdf5"
    return base + ("_remask" if layout == remask.REMASK else "")


def shard_name(shard: int, output_format: str = instances.TFRECORD) -> str:
    return f"wiki_{shard:05d}.{'hdf5' if output_format == instances.HDF5 else 'tfrecord'}"


def shard_index(out_path: str | Path) -> Path | None:
    """The index file `write_shard` writes beside shard `out_path` (`wiki_00000.index`, the `tfrecord2idx`
    name); None for an HDF5 shard, which has none."""
    if instances.output_format([out_path]) == instances.HDF5:
        return None
    return index_path_for(out_path)


def shard_seed(seed: int, shard: int) -> int:
    """The generation seed of shard `shard`, from the global seed: the same whatever the worker count
    or task order. A non-negative int64 (the top bit of `stable_hash` dropped)."""
    return stable_hash(seed, "instances", shard) >> 1


# In the description, but never a reason to refuse a folder: it changes how the work is cut, not a byte.
SAME_BYTES = ("extract_slice_mb",)

# How the instances are written, recorded only when not these defaults: the standard TFRecord dataset's
# description stays what it was before other layouts existed (its dataset.json and MANIFEST.json bytes).
# A missing key means the default, in a held description as in a new one.
WRITTEN_AS = {"output_format": instances.TFRECORD, "layout": remask.STANDARD}


def describe(options: GenerationOptions, vocab_path: str | Path | None, *, wiki: str, dump_date: str,
             multistream: bool, extract_slice_mb: float, num_shards: int, min_doc_chars: int, vocab_size: int,
             output_format: str = instances.TFRECORD, layout: str = remask.STANDARD,
             pad_position_value: int = PAD_POSITION_VALUE) -> dict:
    """What defines a dataset's content, as dataset.json and MANIFEST.json record it.

    The nine generation options, `random_seed` named `seed` (the global seed every shard's seed
    derives from), the dump and sentence-split parameters, and `vocab_sha256`. An HDF5 or remask
    dataset adds `output_format` and `layout`, and a remask one its `pad_position_value` (the
    standard TFRecord dataset's description has none of the three, as before they existed). PrepError when
    `options` fail `GenerationOptions.check` or `vocab_path` is not a usable BERT vocabulary.
    `vocab_path` None (a vocabulary not trained yet) leaves `vocab_sha256` out: enough to compare
    with a folder before any work starts.
    """
    options.check()  # before a description of values that make no dataset is compared or written
    description = options.as_dict()
    description["seed"] = description.pop("random_seed")
    description.update(wiki=wiki, dump_date=dump_date, multistream=multistream, extract_slice_mb=extract_slice_mb,
                       num_shards=num_shards, min_doc_chars=min_doc_chars, vocab_size=vocab_size)
    if (output_format, layout) != (instances.TFRECORD, remask.STANDARD):
        description.update(output_format=output_format, layout=layout)
        if layout == remask.REMASK:
            description["pad_position_value"] = pad_position_value
    if vocab_path is not None:
        check_vocab_file(vocab_path)
        description["vocab_sha256"] = sha256_file(vocab_path)
    return description


def _held_description(folder: Path) -> dict | None:
    """The description in `folder`'s dataset.json, or None when the folder holds no dataset yet."""
    path = folder / DESCRIPTION
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        raise PrepError(f"{path}: not valid JSON; remove {folder} to rebuild the dataset") from None
    if not isinstance(held, dict):
        raise PrepError(f"{path}: not a dataset description; remove {folder} to rebuild the dataset")
    return held


def check_folder(folder: str | Path, description: dict) -> None:
    """Refuse a folder that holds a dataset made with other content parameters, naming each with both values.

    Only the keys of `description` are compared (one made before the vocabulary exists has no
    `vocab_sha256`), and never SAME_BYTES; WRITTEN_AS always, a missing one taken as its default
    (so a standard run never takes an HDF5 or remask folder for its own). Meant to run before any work starts.
    """
    folder = Path(folder)
    held = _held_description(folder)
    if held is None:
        return
    held = {**WRITTEN_AS, **held}
    description = {**WRITTEN_AS, **description}
    differ = [f"{key} {held.get(key)!r} there, {value!r} here" for key, value in sorted(description.items())
              if key not in SAME_BYTES and held.get(key) != value]
    if differ:
        raise PrepError(f"{folder}: holds a dataset made with other parameters ({'; '.join(differ)}); "
                        f"give another --data-dir, or remove {folder} to rebuild it")


def claim_folder(folder: str | Path, description: dict) -> None:
    """Write dataset.json on first use; refuse a folder that holds a dataset made with other parameters."""
    check_folder(folder, description)
    path = Path(folder) / DESCRIPTION
    if not path.exists():
        write_json(path, description)


def write_shard(sentence_shard: str | Path, vocab_path: str | Path, out_path: str | Path, options: GenerationOptions,
                description: dict, *, layout: str = remask.STANDARD,
                pad_position_value: int = PAD_POSITION_VALUE, progress: Progress | None = None) -> dict:
    """The instances of one sentence shard at `out_path` (+ its `.index`), in the folder `description` claims.

    `options.random_seed` is the shard's own seed (`shard_seed`). An `out_path` named `.hdf5`
    (`shard_name(i, "hdf5")`) holds NVIDIA's HDF5 layout and has no index; `layout="remask"`
    writes Graphcore's static-mask records (which need `options.fixed_mask_count`). Returns the
    generation stats; a killed run's temporaries of this shard are removed first, nothing is left
    half-written. `progress(done, total)` as `instances.write_pretraining_files`'.
    """
    out_path = Path(out_path)
    options.check()  # before claim_folder writes dataset.json
    index = shard_index(out_path)
    index = None if index is None else str(index)
    instances.check_output_layout([out_path], [index], options, layout, pad_position_value)
    claim_folder(out_path.parent, description)
    # This shard's dead writers' temporaries (records, index, spill) go as its writers open their own.
    return instances.create_pretraining_file([str(sentence_shard)], str(vocab_path), str(out_path), index, options,
                                             layout=layout, pad_position_value=pad_position_value,
                                             progress=progress)


def finalize(folder: str | Path, description: dict, vocab_path: str | Path, shard_stats: list[dict],
             sentence_stats: dict, output_format: str = instances.TFRECORD, *,
             known_files: dict[str, dict] | None = None) -> dict:
    """Close a dataset whose shards are all written: vocab.txt, stats.json, then MANIFEST.json (returned).

    `shard_stats[i]` is what `write_shard` returned for shard i (`shard_name(i, output_format)`);
    `sentence_stats` holds what `sentences.merge_shard` returned for each sentence shard (`shards`)
    and the documents dropped by reason (`dropped`, as `sentences.judge_splits` sums them).
    stats.json holds the totals of every numeric stat, each shard's stats, and the dropped
    documents. Temporaries left by a lost node or a duplicate run are removed first (all shards are
    committed by now). PrepError when the folder holds another dataset, or when no shard has an instance.
    `known_files` ({name: {"sha256", "size"}}, the shard and index files as their writers hashed them)
    spares reading them again for MANIFEST.json (`build_manifest`); files not in it are hashed here.
    """
    folder = Path(folder)
    claim_folder(folder, description)
    # Every shard is committed: a temporary still here was left by a lost node or a duplicate run.
    remove_leftover_temps(folder)
    write_bytes(folder / "vocab.txt", Path(vocab_path).read_bytes())
    shards, totals, counts = [], {}, {}
    for i, st in enumerate(shard_stats):
        counts[shard_name(i, output_format)] = st["instances"]
        shards.append({"shard": i, "file": shard_name(i, output_format),
                       "sentence_documents": sentence_stats["shards"][i]["documents"], **st})
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                totals[k] = totals.get(k, 0) + v
    if totals.get("instances", 0) == 0:
        raise PrepError(f"{folder}: the corpus gave no instances; is the dump empty or --min-doc-chars too high?")
    write_json(folder / "stats.json",
               {"total": totals, "shards": shards, "dropped_documents": sentence_stats["dropped"]})
    return write_manifest(folder, counts, extra={"dataset": description}, known_files=known_files)
