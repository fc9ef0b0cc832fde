"""A BERT pre-training dataset folder, from sentence shards: what defines it, its shards, its closing files.

Three steps, each a plain function so that a Luigi task can wrap each one (as `imagenet_prep.convert`):

1. `describe` says what defines the dataset's content: the generation options, the corpus' own
   description and the sentence-split parameters, the layout's keys, and the vocabulary's sha256.
   It goes to `dataset.json` (first use of the folder, `claim_folder`) and to MANIFEST.json, so a
   folder made with other values is never mixed with this one. A `DatasetSpec` bundles it with
   the layout, the shards' file prefix and the keys that change no byte: what the steps take.
2. `write_shard` writes `{prefix}_{i:05d}{suffix}` (`wiki_00000.tfrecord` and its index, or
   `wiki_00000.hdf5`...) from sentence shard i, seeded by `shard_seed(seed, i)`: shards are
   independent, so any number of workers, in any order, give the same bytes. Each layout's dataset
   holds the same instances, in a sibling folder (`folder_name`).
3. `finalize` adds `vocab.txt` and `stats.json`, then MANIFEST.json, once every shard is written.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from shardkit.atomic import remove_leftover_temps, sha256_file, write_bytes, write_json
from shardkit.errors import PrepError
from shardkit.manifest import write_manifest
from shardkit.progress import Progress

from . import instances, layouts
from .layouts import Layout
from .options import DEFAULT_NUM_SHARDS, DEFAULT_SEED, GenerationOptions
from .sentences import stable_hash
from .tokenization import Vocab
from .vocab import check_vocab_file

DESCRIPTION = "dataset.json"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset folder is: `description` (its dataset.json, `describe`), the `layout` its shards are
    written in, their file `prefix` ("wiki": `wiki_00000.tfrecord`), and the description's keys that change
    how the work is cut but not a byte (`same_bytes`: never a reason to refuse a folder)."""

    description: dict
    layout: Layout
    prefix: str
    same_bytes: tuple[str, ...] = ()

    def shard_name(self, shard: int) -> str:
        return shard_name(self.prefix, shard, self.layout)


def folder_name(options: GenerationOptions, layout: Layout = layouts.DEFAULT, *, num_shards: int) -> str:
    """'seq128_mask20_dup5': the folder of a dataset within its corpus' work folder, named by what may differ
    between datasets made from the same sentence split or the same corpus: the sequence length, masks and dupe
    factor; `_shards16`, `_seed7` when the shard count or seed is not the default (`DEFAULT_NUM_SHARDS`,
    `DEFAULT_SEED`), `_wwm` with whole-word masking; then the layout's suffix ('_hdf5', '_remask'). Each such
    dataset is a sibling of the others, in a folder of its own; a default run's name is that of every version."""
    return _name(_named_values(options, num_shards), layout)


def _named_values(options: GenerationOptions, num_shards: int) -> dict:
    """What `_name` reads, under dataset.json's keys (`describe`: the seed as `seed`)."""
    return {**options.as_dict(), "seed": options.random_seed, "num_shards": num_shards}


# The keys of a dataset's description its folder's name says since it says more than the sequence length, masks and
# dupe factor (`folder_name`): a folder named before (`_name`'s `legacy`) may hold a dataset of any of their values.
NAMED_SINCE = ("num_shards", "seed", "do_whole_word_mask")


def _name(values: dict, layout: Layout, legacy: bool = False) -> str:
    """`folder_name` of a description's `values` (dataset.json's keys); `legacy`: the name a dataset folder had
    before it said the `NAMED_SINCE` keys."""
    name = f"seq{values['max_seq_length']}_mask{values['max_predictions_per_seq']}_dup{values['dupe_factor']}"
    if not legacy:
        name += "" if values["num_shards"] == DEFAULT_NUM_SHARDS else f"_shards{values['num_shards']}"
        name += "" if values["seed"] == DEFAULT_SEED else f"_seed{values['seed']}"
        name += "_wwm" if values["do_whole_word_mask"] else ""
    return name + layout.folder_suffix


def dataset_folder(work_dir: str | Path, options: GenerationOptions, layout: Layout = layouts.DEFAULT, *,
                   num_shards: int) -> Path:
    """The folder of the dataset these parameters make, within its corpus' work folder `work_dir`: `folder_name`'s,
    unless a dataset made before folder names said the shard count, seed and whole-word masking holds its place.

    That is: the name differs from the one it had then (`legacy`), nothing was written under the new name yet
    (no dataset.json), and the folder of the old name (or, for a layout with a finishing step, its staged shards'
    folder) holds a dataset of this shard count, seed and masking. That folder is then this dataset's, as it was,
    so that a finished dataset stays complete and a half-built one resumes; `check_folder` judges the rest of its
    parameters as before. Said once per process, with where new datasets of these parameters go.
    """
    work_dir = Path(work_dir)
    values = _named_values(options, num_shards)
    folder, before = work_dir / _name(values, layout), work_dir / _name(values, layout, legacy=True)
    if folder == before or any((claim / DESCRIPTION).exists() for claim in _claims(folder, layout)):
        return folder
    held = next(filter(None, map(_held_description, _claims(before, layout))), None)
    if held is None or any(held.get(key) != values[key] for key in NAMED_SINCE):
        return folder
    _say_legacy(before, folder.name)
    return before


def _claims(folder: Path, layout: Layout) -> list[Path]:
    """The folders whose dataset.json says which dataset `folder` holds: itself, and for a layout with a finishing
    step its staged shards' folder, claimed first (its dataset folder only when its files are written)."""
    return [folder, staged_folder(folder)] if layout.finishing else [folder]


@functools.cache
def _say_legacy(folder: Path, name: str) -> None:
    log.info("%s: made before a dataset folder's name said its shard count, seed and whole-word masking, holds a "
             "dataset of these: this run takes it as it is; new datasets of these parameters go to %s", folder, name)


def staged_folder(folder: str | Path) -> Path:
    """Where a layout with a finishing step (`Layout.finishing`) stages the shards of dataset folder `folder`:
    `staged/<its name>` beside it."""
    folder = Path(folder)
    return folder.parent / "staged" / folder.name


def shard_name(prefix: str, shard: int, layout: Layout = layouts.DEFAULT) -> str:
    """'wiki_00000.tfrecord': shard `shard` of a dataset in `layout`, its files named from `prefix`; for a layout with
    a finishing step, the staged shard's name (`Layout.staged`)."""
    return f"{prefix}_{shard:05d}{layout.staged.shard_suffix}"


def shard_seed(seed: int, shard: int) -> int:
    """The generation seed of shard `shard`, from the global seed: the same whatever the worker count
    or task order. A non-negative int64 (the top bit of `stable_hash` dropped)."""
    return stable_hash(seed, "instances", shard) >> 1


def describe(options: GenerationOptions, vocab_path: str | Path | None, *, corpus: dict, num_shards: int,
             min_doc_chars: int, vocab_size: int, layout: Layout = layouts.DEFAULT) -> dict:
    """What defines a dataset's content, as dataset.json and MANIFEST.json record it.

    The nine generation options, `random_seed` named `seed` (the global seed every shard's seed
    derives from), the corpus' description (`corpus`: for Wikipedia the dump and how it was cut),
    the sentence-split parameters, what the layout adds (`Layout.description`: nothing for the
    standard TFRecords, as before other layouts existed), and `vocab_sha256`. PrepError when
    `vocab_path` is not a usable BERT vocabulary.
    `vocab_path` None (a vocabulary not trained yet) leaves `vocab_sha256` out: enough to compare
    with a folder before any work starts.
    """
    description = options.as_dict()
    description["seed"] = description.pop("random_seed")
    own = dict(num_shards=num_shards, min_doc_chars=min_doc_chars, vocab_size=vocab_size, **layout.description())
    clash = sorted(set(corpus) & (set(description) | set(own) | {"vocab_sha256"}))
    if clash:
        raise ValueError(f"the corpus' description cannot hold {', '.join(clash)}: the dataset's own keys")
    description.update(corpus)
    description.update(own)
    if vocab_path is not None:
        check_vocab_file(vocab_path, options.do_lower_case)
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


def check_folder(folder: str | Path, spec: DatasetSpec) -> None:
    """Refuse a folder that holds a dataset made with other content parameters, naming each with both values.

    Only the keys of `spec.description` are compared (one made before the vocabulary exists has no
    `vocab_sha256`), and never `spec.same_bytes`; the layout's flag keys always, a missing one taken as the
    default layout's (so a standard run never takes another layout's folder for its own). Meant to run
    before any work starts. The line says which parameters give a dataset a folder of its own, or, for a
    folder named before its name said the shard count, seed and whole-word masking and holding other ones,
    the name it would have now: renamed so, it stays beside this run's.
    """
    folder = Path(folder)
    held = _held_description(folder)
    if held is None:
        return
    held = {**layouts.DEFAULT_DESCRIPTION, **held}
    description = {**layouts.DEFAULT_DESCRIPTION, **spec.description}
    differ = []
    for key, value in sorted(description.items()):
        if key not in spec.same_bytes:
            differ += differences(key, held.get(key), value, spec.same_bytes)
    if not differ:
        return
    differ = "; ".join(differ)
    named_there = {key: held.get(key) for key in NAMED_SINCE}
    if folder.name == _name(description, spec.layout, legacy=True) and \
            any(named_there[key] != description[key] for key in NAMED_SINCE) and \
            all(type(named_there[key]) is type(description[key]) for key in NAMED_SINCE):
        now = _name({**description, **named_there}, spec.layout)
        raise PrepError(f"{folder}: holds a dataset made with other parameters ({differ}), named before a folder's "
                        f"name said its shard count, seed and whole-word masking; rename it to {now} to keep both, "
                        f"give another --data-dir, or remove {folder} to rebuild it")
    raise PrepError(f"{folder}: holds a dataset made with other parameters ({differ}); give another --data-dir, "
                    f"or remove {folder} to rebuild it (another shard count, seed, dupe factor, sequence length, "
                    f"mask count, whole-word masking or layout gives a dataset of its own folder)")


def differences(key: str, held, value, same_bytes: tuple[str, ...]) -> list[str]:
    """How `held` (a folder's dataset.json value) differs from `value`, each as "<key> <held> there, <value> here";
    within two tables (a text corpus' files, a mixture's sources) only the entries that differ, by their dotted
    key, `same_bytes` keys left out at every depth."""
    if not (isinstance(held, dict) and isinstance(value, dict)):
        return [] if held == value else [f"{key} {held!r} there, {value!r} here"]
    found = []
    for sub in sorted(set(held) | set(value)):
        if sub not in same_bytes:
            found += differences(f"{key}.{sub}", held.get(sub), value.get(sub), same_bytes)
    return found


def claim_folder(folder: str | Path, spec: DatasetSpec) -> None:
    """Write dataset.json on first use; refuse a folder that holds a dataset made with other parameters."""
    check_folder(folder, spec)
    path = Path(folder) / DESCRIPTION
    if not path.exists():
        write_json(path, spec.description)


def write_shard(sentence_shard: str | Path, vocab_path: str | Path, out_path: str | Path, options: GenerationOptions,
                spec: DatasetSpec, *, progress: Progress | None = None, source_starts: Sequence[int] = ()) -> dict:
    """The instances of one sentence shard at `out_path` (`spec.shard_name(i)`, + its index when the layout
    has one), in `spec.layout` (for a layout with a finishing step, its staged shard: `Layout.staged`), in the
    folder `spec` claims.

    `options.random_seed` is the shard's own seed (`shard_seed`). Returns the generation stats; a killed
    run's temporaries of this shard are removed first, nothing is left half-written. `progress(done,
    total)` and `source_starts` (a mixture's shard: where each source's documents start, from
    `sentences.merge_shard`) as `instances.write_pretraining_files`'.
    """
    out_path, layout = Path(out_path), spec.layout.staged
    index = layout.index_path(out_path)
    index = None if index is None else str(index)
    instances.check_layout(layout, [out_path], [index], options)
    claim_folder(out_path.parent, spec)
    # This shard's dead writers' temporaries (records, index, spill) go as its writers open their own.
    return instances.create_pretraining_file([str(sentence_shard)], str(vocab_path), str(out_path), index, options,
                                             layout=layout, progress=progress, source_starts=source_starts)


def finalize(folder: str | Path, spec: DatasetSpec, vocab_path: str | Path, shard_stats: list[dict],
             sentence_stats: dict, *, known_files: dict[str, dict] | None = None,
             files: dict[str, int] | None = None, balance: dict | None = None, corpus: dict | None = None) -> dict:
    """Close a dataset whose shards are all written: vocab.txt, stats.json, then MANIFEST.json (returned).

    `shard_stats[i]` is what `write_shard` returned for shard i (`spec.shard_name(i)`);
    `sentence_stats` holds what `sentences.merge_shard` returned for each sentence shard (`shards`)
    and the documents dropped by reason (`dropped`, as `sentences.judge_splits` sums them).
    stats.json holds the totals of every numeric stat, each shard's stats, and the dropped
    documents. Temporaries left by a lost node or a duplicate run are removed first (all shards are
    committed by now). PrepError when the folder holds another dataset, or when no shard has an instance.
    `known_files` ({name: {"sha256", "size"}}, the shard and index files as their writers hashed them)
    spares reading them again for MANIFEST.json (`build_manifest`); files not in it are hashed here.
    For a layout with a finishing step, `files` ({name: instances}) are the dataset's files (its shards were
    staged elsewhere) and `balance` how the plan dealt them (`Layout.plan_parts`: the bins, the instances
    dropped): stats.json's total of instances is then what the files hold.
    `corpus`: the corpus' own figures (files skipped, documents per source), in stats.json as "corpus" when
    there are any; when every shard counted its instances per source (`write_shard`'s `source_starts`), each of
    the corpus' `sources` gets its total (`with_source_instances`).
    """
    folder = Path(folder)
    claim_folder(folder, spec)
    # Every shard is committed: a temporary still here was left by a lost node or a duplicate run.
    remove_leftover_temps(folder)
    # A trained one is checked against its receipt as it is read; a tokenizer.json is kept as its vocab.txt.
    write_bytes(folder / "vocab.txt", Vocab.load(vocab_path).vocab_txt)
    shards, totals, counts = [], {}, {}
    for i, st in enumerate(shard_stats):
        counts[spec.shard_name(i)] = st["instances"]
        shards.append({"shard": i, "file": spec.shard_name(i),
                       "sentence_documents": sentence_stats["shards"][i]["documents"], **st})
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                totals[k] = totals.get(k, 0) + v
    if totals.get("instances", 0) == 0:
        raise PrepError(f"{folder}: the corpus gave no instances; is the dump empty or --min-doc-chars too high?")
    closing = {"total": totals, "shards": shards, "dropped_documents": sentence_stats["dropped"]}
    if files is not None:
        counts = files
        totals["generated_instances"] = totals["instances"]
        totals["instances"] = sum(files.values())
        closing["balance"] = balance
    if corpus:
        closing["corpus"] = with_source_instances(corpus, shard_stats)
    write_json(folder / "stats.json", closing)
    return write_manifest(folder, counts, extra={"dataset": spec.description}, known_files=known_files)


def with_source_instances(corpus: dict, shard_stats: list[dict]) -> dict:
    """`corpus` with each of its `sources` (a mixture's, in recipe order) given its instances, summed over the
    shards' `instances_per_source`; as it is when a shard has none (one merged before shards counted them)
    or there are no sources. These are the instances the generator made (before a finishing layout's balance
    drops any), each its segment A's document's source's."""
    sources = corpus.get("sources")
    if not sources or any(len(st.get("instances_per_source", ())) != len(sources) for st in shard_stats):
        return corpus
    return {**corpus, "sources": [{**source, "instances": sum(st["instances_per_source"][k] for st in shard_stats)}
                                  for k, source in enumerate(sources)]}
