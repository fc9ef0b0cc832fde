"""The output layouts of BERT pre-training instances: one `Layout` each, the registry, and the flags that choose one.

The generator makes the same instances whatever the output; a layout is how they are stored
(`base.Layout`: its names, folder and file suffixes, index or none, checks, description keys,
encoder, writers, read-back, and the compiled generator's code for it, or none). As TensorFlow
Datasets' file adapters (`core/file_adapters.py`: a FileAdapter per format, ADAPTER_FOR_FORMAT), a
layout is one module here (a `Layout` value named `LAYOUT`) and one line in `LAYOUTS`:

- `tfrecord`: google-research/bert's TFRecords (the default, and the standard layout everything is read back to);
- `remask`: Graphcore's static-mask TFRecords (`--layout remask`, create-pretraining-data's `--remask`);
- `hdf5`: NVIDIA's HDF5 files (`--output-format hdf5`, an `--output_file` named `.hdf5` or `.h5`);
- `parquet`: LDDL's Parquet files (`--output-format parquet`, an `--output_file` named `.parquet`), with
  `--masking` and `--bin-size`.

Nothing outside this package names a layout (tests/test_layout.py holds the code to it). The flags
are a contract, mapped here to one `Layout` value where they enter, which is then passed whole:

- the Luigi tasks' `--output-format` (`OUTPUT_FORMATS`) and `--layout` (`LAYOUT_FLAGS`), make's
  FORMAT= and LAYOUT=: `from_flags`;
- create-pretraining-data's outputs' names and `--remask` (`add_create_flags`, `create_layout_flag`):
  `from_output_names`;
- a dataset's description (dataset.json, MANIFEST.json's "dataset"), for its readers: `described`,
  `from_description`; a record file without one: `of_file`, from its suffix and contents.
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path
from typing import Any, Sequence

from shardkit.errors import PrepError

from .base import BATCH, FLAG_KEYS, Layout  # noqa: F401  (BATCH, Layout: the package's interface)

def _registry(*modules: str) -> dict[str, Layout]:
    """{name: layout} of the `LAYOUT` of each module of this package, in the order given."""
    found = [importlib.import_module(f"{__name__}.{module}").LAYOUT for module in modules]
    return {layout.name: layout for layout in found}


# The registry, by name: a line per layout, its module's name. The first is the default: what the flags choose
# when they are not given.
LAYOUTS: dict[str, Layout] = _registry(
    "tfrecord",  # google-research/bert's TFRecords
    "remask",    # Graphcore's static-mask TFRecords
    "hdf5",      # NVIDIA's HDF5
    "parquet",   # LDDL's Parquet
)
DEFAULT = next(iter(LAYOUTS.values()))
_STATIC_MASK = LAYOUTS["remask"]  # what create-pretraining-data's --remask chooses

# The values of the Luigi tasks' --output-format and --layout, the default first.
OUTPUT_FORMATS = tuple(dict.fromkeys(layout.flags[0] for layout in LAYOUTS.values()))
LAYOUT_FLAGS = tuple(dict.fromkeys(layout.flags[1] for layout in LAYOUTS.values()))
PAD_POSITION_VALUE = _STATIC_MASK.pad_position_value  # the default of --pad-position-value
MASKINGS = LAYOUTS["parquet"].maskings  # the values of --masking, the default first

# A description's flag keys when it has none: the default layout's (whose description records none).
DEFAULT_DESCRIPTION = dict(zip(FLAG_KEYS, DEFAULT.flags))


def get(name: str) -> Layout:
    """The registered layout `name` ("tfrecord", "remask", "hdf5"), with its parameters' defaults."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise PrepError(f"layout {name!r}: expected one of {', '.join(LAYOUTS)}") from None


def suffixes() -> tuple[str, ...]:
    """The suffixes of every layout's files, in registry order."""
    return tuple(dict.fromkeys(s for layout in LAYOUTS.values() for s in layout.suffixes))


def suffix_of(path: str | os.PathLike) -> str:
    """The layout suffix a file is named with (`.parquet` for LDDL's bin files `x.parquet_3`), else its own suffix."""
    path = Path(path)
    return next((s for s in (layout.suffix_of(path) for layout in LAYOUTS.values()) if s), path.suffix.lower())


def _file_kind(output_format: str) -> str:
    return next(layout.file_kind for layout in LAYOUTS.values() if layout.flags[0] == output_format)


def from_flags(output_format: str, layout: str, *, what: str | None = None, **parameters: Any) -> Layout:
    """The layout `--output-format output_format --layout layout` name, with its `parameters` (those it takes:
    `pad_position_value` for remask). PrepError for a combination that names none, saying why (`what` starts
    the line; the flags by default)."""
    what = what or f"--output-format {output_format} --layout {layout}"
    for candidate in LAYOUTS.values():
        if candidate.flags == (output_format, layout):
            _refuse_parameters(candidate, parameters)
            return candidate.with_parameters(**parameters)
    notes = [candidate.flags_note for candidate in LAYOUTS.values() if candidate.flags[1] == layout] + \
            [candidate.flags_note for candidate in LAYOUTS.values() if candidate.flags[0] == output_format]
    notes = [note for note in notes if note]
    if output_format in OUTPUT_FORMATS and layout in LAYOUT_FLAGS and notes:
        raise PrepError(f"{what}: {'; '.join(notes)}")
    raise PrepError(f"{what}: no such layout (output formats: {', '.join(OUTPUT_FORMATS)}; layouts: "
                    f"{', '.join(LAYOUT_FLAGS)})")


def _refuse_parameters(layout: Layout, parameters: dict[str, Any]) -> None:
    """PrepError for a parameter of another layout given a value other than its default (`--bin-size 64` with
    TFRecords): it would change nothing, silently."""
    for name, value in parameters.items():
        owner = next((o for o in LAYOUTS.values() if name in o.parameters), None)
        if name in layout.parameters or owner is None or value is None or value == getattr(owner, name):
            continue
        flag = "--" + name.replace("_", "-")
        raise PrepError(f"{flag} {value}: only {owner.title} takes it (--output-format {owner.flags[0]}"
                        f"{'' if owner.flags[1] == DEFAULT.flags[1] else ' --layout ' + owner.flags[1]}), "
                        f"not {layout.title}")


def implies_fixed_mask_count(layout: str) -> bool:
    """Whether `--layout layout` (create-pretraining-data's `--remask`) implies Graphcore's fixed mask count:
    the layout needs it (only with it does a full-length sequence fit)."""
    return any(candidate.implies_fixed_mask_count for candidate in LAYOUTS.values() if candidate.flags[1] == layout)


# ---------------------------------------------------------------------------------------------
# create-pretraining-data

def add_create_flags(parser: argparse.ArgumentParser) -> None:
    """create-pretraining-data's layout flags besides the outputs' names: Graphcore's (its --remask and
    --pad_position_value, spelled as its create_pretraining_data.py spells them), and LDDL's --masking. LDDL's
    bins are not among them: balancing files per bin is a dataset's finishing step (the Luigi tasks')."""
    parser.add_argument("--remask", action="store_true",
                        help="Graphcore's static-mask layout (masked tokens first), as its --remask writes it; implies "
                             "--fixed_mask_count")
    parser.add_argument("--pad_position_value", "--pad-position-value", type=int, default=PAD_POSITION_VALUE,
                        help=f"with --remask, the input_position of an empty slot (default {PAD_POSITION_VALUE})")
    parser.add_argument("--masking", choices=MASKINGS, default=None,
                        help="with an --output_file named .parquet (LDDL's layout): static (default: the masks "
                             "stored) or dynamic (the pairs unmasked; LDDL's loader masks them)")


def create_layout_flag(args: argparse.Namespace) -> str:
    """The `--layout` value create-pretraining-data's flags (`add_create_flags`) give."""
    return _STATIC_MASK.flags[1] if args.remask else DEFAULT.flags[1]


def from_output_names(output_files: Sequence[str | os.PathLike], layout: str, **parameters: Any) -> Layout:
    """The layout create-pretraining-data writes to `output_files` with `--layout layout` (`create_layout_flag`):
    the format as NVIDIA's create_pretraining_data.py decides it, HDF5 when the names end in `.hdf5` or
    `.h5` (a layout's `named_outputs` and `suffixes`), Parquet when in `.parquet`, the default format when they
    end otherwise. PrepError
    for a mix (one run spills its instances in one form) and for a format and layout that make none."""
    def format_of(path) -> str:
        suffix = suffix_of(path)
        return next((candidate.flags[0] for candidate in LAYOUTS.values()
                     if candidate.named_outputs and suffix in candidate.suffixes), DEFAULT.flags[0])

    formats = [format_of(p) for p in output_files]
    named = next((i for i, f in enumerate(formats) if f != DEFAULT.flags[0]), None)
    if named is None:
        output_format = DEFAULT.flags[0]
    else:
        output_format = formats[named]
        other = next((i for i, f in enumerate(formats) if f != output_format), None)
        if other is not None:
            raise PrepError(f"output files {os.fspath(output_files[named])} ({_file_kind(output_format)}) and "
                            f"{os.fspath(output_files[other])} ({_file_kind(formats[other])}): one run writes one "
                            f"format; run twice with the same flags for both")
    what = f"output file {os.fspath(output_files[0])}" if output_files else None
    return from_flags(output_format, layout, what=what, **parameters)


# ---------------------------------------------------------------------------------------------
# Reading what exists

def described(description: dict) -> Layout | None:
    """The layout a dataset's description names, or None when it names none (the default layout's, or a
    description written by hand); its parameters as the description records them (None when it does not:
    not checked on reading back)."""
    if not any(key in description for key in FLAG_KEYS):
        return None
    return from_description(description)


def from_description(description: dict) -> Layout:
    """The layout of the dataset `description` describes (dataset.json, MANIFEST.json's "dataset"): a missing
    flag key is the default's (the default layout's description records none)."""
    flags = {**DEFAULT_DESCRIPTION, **{key: description[key] for key in FLAG_KEYS if key in description}}
    named = ", ".join(f"{key} {flags[key]!r}" for key in FLAG_KEYS)
    layout = from_flags(*(str(flags[key]) for key in FLAG_KEYS), what=f"a dataset described with {named}")
    return layout.with_parameters(**{name: description.get(name) for name in layout.parameters})


def of_file(path: Path) -> tuple[Layout, dict[str, int]]:
    """The layout a record file holds, and the dimensions it implies: among the layouts whose files have its
    suffix (the default's kind of file for any other suffix), the one its contents fit (`Layout.recognize`)."""
    suffix = suffix_of(path)
    family = [layout for layout in LAYOUTS.values() if suffix in layout.suffixes] or \
             [layout for layout in LAYOUTS.values() if layout.file_kind == DEFAULT.file_kind]
    return family[0].recognize(path, family)
