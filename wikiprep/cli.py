"""`wikiprep`: BERT pre-training data from the command line.

    wikiprep create-pretraining-data --input_file=a.txt,b*.txt --output_file=out.tfrecord --vocab_file=vocab.txt ...
    wikiprep create-pretraining-data --flagfile=flags.txt
    wikiprep inspect FILE [-n N] [--vocab-file V]
    wikiprep verify PATH [--jobs N]
    wikiprep stats DIR --out REPORT_DIR

`create-pretraining-data` is a drop-in for google-research/bert's create_pretraining_data.py:
the same flags, spellings and defaults (absl style: `--flag=value`, `--flag value`, bare
`--flag` / `--noflag` for booleans, `--flagfile=FILE` files of flags), the same instances in the
same order. An `--output_file` ending in `.hdf5` or `.h5` holds them in NVIDIA's HDF5 layout, as
NVIDIA's create_pretraining_data.py writes it; one ending in `.parquet` in LDDL's Parquet layout
(`--masking static|dynamic`; round-robin files, not binned). It adds `--fixed_mask_count` (Graphcore's mask
count), `--remask` (Graphcore's static-mask layout; implies the fixed count) with
`--pad_position_value`, and `--index_file` (an `offset length` index per output file).
`--input_file` is a comma-separated list of globs, each expanded in sorted order; a glob
matching nothing is an error (the original silently skipped it). Refused before anything is
written: flags outside `GenerationOptions`' bounds, outputs and flags that name no layout
(`layouts.from_output_names`) or a layout the options cannot fill (`instances.check_layout`), an
empty name in `--output_file` or `--index_file`, and an output or index that is an input, the vocab
or another output.

`verify` stops at the first problem with one line and exit status 1; `stats` writes report.html
(plots inside), stats.json, report.txt and the plots' PNGs into REPORT_DIR. The three read the
files of every layout alike. Each command is argparse and one call into the library (`instances`, `reader`,
`verify`, `stats`), run by `shardkit.cli.run`: errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from dataclasses import fields
from pathlib import Path

from shardkit.cli import add_version, at_least_one, error_line, run, warn
from shardkit import progress
from shardkit.errors import PrepError, excerpt
from shardkit.manifest import check_report_folder, unfinished_note

from . import inspection, instances, layouts, stats, verify
from .options import GenerationOptions
from .tokenization import Vocab

PROG = "wikiprep"


# ---------------------------------------------------------------------------------------------
# create-pretraining-data

_TRUE, _FALSE = {"true", "t", "1", "yes", "y"}, {"false", "f", "0", "no", "n"}


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


class _Given(argparse.Action):
    """Store the value and note the flag as given (`namespace.given`), so a default can be told from a choice."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if values is None or values == [] else values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def _add_bool(parser: argparse.ArgumentParser, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(f"--{name}", type=_parse_bool, nargs="?", const=True, default=default, metavar="BOOL",
                        action=_Given, help=f"{help_text} (default {default})")
    parser.add_argument(f"--no{name}", dest=name, nargs=0, const=False, action=_Given, help=argparse.SUPPRESS)


# ---------------------------------------------------------------------------------------------
# --flagfile, as absl reads it (absl/flags/_flagvalues.py, `read_flags_from_files`)

def _flagfile_lines(filename: str, stack: list[str]) -> list[str]:
    """The flags of one flag file, nested `--flagfile=` lines expanded in place.

    As absl: blank lines and lines starting with `#` or `//` are skipped, every other line is
    one argument (stripped), a nested flag file's path is taken as written (relative to the
    working folder, `~` expanded), an empty name is ignored, and a file already being read (a
    cycle) is skipped with a warning. Unlike absl, a line that is not a flag is refused with its
    file and line number (absl would hand it to the program as a positional argument, which the
    original ignores: a typo that silently drops a flag).
    """
    if not filename:
        return []
    if filename in stack:
        print(f"{PROG}: warning: --flagfile={filename} is already being read (a cycle); ignored, as absl does",
              file=sys.stderr)
        return []
    try:
        with open(filename, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise PrepError(f"--flagfile={filename}: no such file") from None
    except IsADirectoryError:
        raise PrepError(f"--flagfile={filename}: a folder, not a file of flags") from None
    except UnicodeDecodeError:
        raise PrepError(f"--flagfile={filename}: not UTF-8 text") from None
    except OSError as e:
        raise PrepError(f"--flagfile={filename}: cannot read ({e.strerror})") from None
    stack.append(filename)
    flags: list[str] = []
    for number, line in enumerate(lines, 1):
        arg = line.strip()
        if not arg or arg.startswith(("#", "//")):
            continue
        if arg.startswith(("--flagfile=", "-flagfile=")):
            flags += _flagfile_lines(os.path.expanduser(arg.partition("=")[2].strip()), stack)
        elif not arg.startswith("-"):
            raise PrepError(f"--flagfile={filename}, line {number}: {excerpt(arg)} is not a flag (--name=value)")
        else:
            flags.append(arg)
    stack.pop()
    return flags


def expand_flagfiles(args: list[str]) -> list[str]:
    """`args` with every `--flagfile=FILE` (or `--flagfile FILE`, `-flagfile...`) replaced, in place, by the
    flags FILE holds, so that later flags win as in absl; nothing after `--` is expanded."""
    out: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--flagfile", "-flagfile"):
            if not rest:
                raise PrepError("--flagfile with no file name")
            out += _flagfile_lines(os.path.expanduser(rest.pop(0)), [])
        elif arg.startswith(("--flagfile=", "-flagfile=")):
            out += _flagfile_lines(os.path.expanduser(arg.partition("=")[2].strip()), [])
        else:
            out.append(arg)
            if arg == "--":
                out += rest
                break
    return out


def expand_input_patterns(spec: str) -> list[str]:
    """The original's `--input_file`: comma-separated globs, in the order given, each sorted."""
    files: list[str] = []
    for pattern in spec.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise PrepError(f"--input_file: {pattern} matches no file")
        for path in matches:
            if not os.path.isfile(path):
                raise PrepError(f"{path}: input file not found" if not os.path.exists(path)
                                else f"{path}: not a regular file")
        files.extend(matches)
    if not files:
        raise PrepError("--input_file: no input file given")
    return files


def _split_list(flag: str, spec: str | None) -> list[str]:
    """The comma-separated file names of `--flag` (none when not given). PrepError for an empty name
    (`,`, `a,,b`, a trailing comma): the original would try to write a file named ''."""
    if not spec:
        return []
    names = [s.strip() for s in spec.split(",")]
    if not any(names):
        raise PrepError(f"--{flag}={spec}: names no file")
    if not all(names):
        raise PrepError(f"--{flag}={spec}: an empty file name in the list")
    return names


def _create(args: argparse.Namespace) -> None:
    for flag in ("input_file", "output_file", "vocab_file"):
        if not getattr(args, flag):
            raise PrepError(f"--{flag} is required")
    # --remask implies Graphcore's fixed mask count; an explicit --fixed_mask_count=False is left to refuse.
    layout_flag = layouts.create_layout_flag(args)
    implied = layouts.implies_fixed_mask_count(layout_flag) and "fixed_mask_count" not in getattr(args, "given", ())
    # Flags first (GenerationOptions refuses values that make no dataset): before the inputs are globbed and read.
    options = GenerationOptions.from_object(args, fixed_mask_count=args.fixed_mask_count or implied)
    inputs = expand_input_patterns(args.input_file)
    outputs = _split_list("output_file", args.output_file)
    index_files = _split_list("index_file", args.index_file)
    if index_files and len(index_files) != len(outputs):
        raise PrepError(f"--index_file lists {len(index_files)} files for {len(outputs)} --output_file files")
    layout = layouts.from_output_names(outputs, layout_flag, pad_position_value=args.pad_position_value,
                                       masking=args.masking)
    instances.check_layout(layout, outputs, index_files or [None] * len(outputs), options)
    Vocab.load(args.vocab_file).check_case(options.do_lower_case, "--do_lower_case")  # a tokenizer.json says
    print("*** Reading from input files ***", file=sys.stderr)
    for path in inputs:
        print(f"  {path}", file=sys.stderr)
    # The original overwrites the files it is told to write: so does this command (a Luigi task never does).
    with progress.bar("instances", "B") as bar:
        written = instances.write_pretraining_files(inputs, args.vocab_file, outputs, index_files or None, options,
                                                    layout=layout, overwrite=True, progress=bar)
    print("*** Writing to output files ***", file=sys.stderr)
    for path in outputs:
        print(f"  {path}", file=sys.stderr)
    print(f"Wrote {written['instances']} total instances ({written['documents']} documents, "
          f"{written['sentences']} sentences, {written['tokens']} tokens; {written['random_next']} random next, "
          f"{written['full_length']} full length)", file=sys.stderr)


# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Wikipedia text to BERT pre-training TFRecords.")
    add_version(p, PROG)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("create-pretraining-data", allow_abbrev=False,
                       help="drop-in for google-research/bert create_pretraining_data.py",
                       description="Same flags, defaults and output as google-research/bert's "
                                   "create_pretraining_data.py.")
    c.add_argument("--input_file", help="Input raw text file (or comma-separated list of files / globs).")
    c.add_argument("--output_file", help="Output TF example file (or comma-separated list of files).")
    c.add_argument("--vocab_file", help="The vocabulary file that the BERT model was trained on.")
    for f in fields(GenerationOptions):  # the original's flags: its spelling, defaults and help
        if f.type is bool:
            _add_bool(c, f.name, f.default, f.metadata["help"])
        else:
            c.add_argument(f"--{f.name}", type=f.type, default=f.default,
                           help=f"{f.metadata['help']} (default {f.default})")
    c.add_argument("--index_file", help="index file(s) to write, comma-separated, one per output file "
                                        "(default: none)")
    layouts.add_create_flags(c)
    c.add_argument("--flagfile", metavar="FILE",
                   help="read flags from FILE, one --flag=value a line, # comments, nested --flagfile (absl's)")

    i = sub.add_parser("inspect", help="print the first instances of a TFRecord or HDF5 file as text: A and B with "
                                       "their masks, the original tokens, the next-sentence label, the lengths")
    i.add_argument("file", help="a .tfrecord or .hdf5 file of instances")
    i.add_argument("-n", type=at_least_one, default=3, help="instances to show (default 3)")
    i.add_argument("--vocab-file", "--vocab_file", metavar="V",
                   help="the vocab.txt the records were made with (default: vocab.txt beside FILE; without one, "
                        "token ids are shown)")

    v = sub.add_parser("verify", help="check a dataset folder, or any record file or folder without a manifest; "
                                      "one line and exit 1 on the first problem")
    v.add_argument("path", help="a dataset folder (with MANIFEST.json), or record files or a folder of them")
    v.add_argument("--jobs", type=at_least_one, default=1,
                   help="worker processes checking files in parallel, each with its own TensorFlow (default 1; "
                        "the output and the first error do not depend on it)")

    s = sub.add_parser("stats", help="counts and histograms of a dataset folder")
    s.add_argument("dir", help="a finished dataset folder (seq128_mask20_dup5/ ...)")
    s.add_argument("--out", required=True, help="report folder: report.html (one self-contained page), stats.json, "
                                                "report.txt and the plots as PNG files")
    return p


def _inspect(args: argparse.Namespace) -> None:
    for line in inspection.inspect_lines(args.file, args.n, args.vocab_file):
        print(line)


def _verify(args: argparse.Namespace) -> None:
    with progress.bar("verify", "B") as bar:
        summary = verify.verify(args.path, jobs=args.jobs, progress=bar)
    print(f"OK {args.path}: {summary['records']} records in {summary['files']} files, "
          f"{summary['bytes']} bytes, seq {summary['max_seq_length']}, "
          f"{summary['max_predictions_per_seq']} predictions ({layouts.get(summary['layout']).title})"
          + ("" if summary["manifest"] else "; no MANIFEST.json: records checked, not checksums"))


def _stats(args: argparse.Namespace) -> None:
    check_report_folder(Path(args.out), Path(args.dir), stats.STARTED_BY)  # a report replaces only a report
    with progress.bar("stats", "files") as bar:
        text = stats.write_report(args.dir, args.out, overwrite=True, progress=bar)  # a new report replaces the last
    sys.stdout.write(text)
    warn(PROG, unfinished_note(Path(args.dir), stats.STARTED_BY))
    print(f"wrote {Path(args.out) / 'report.html'} (open it in a browser), stats.json, report.txt and the plots "
          f"as PNG files")


COMMANDS = {"create-pretraining-data": _create, "inspect": _inspect, "verify": _verify, "stats": _stats}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["create-pretraining-data"]:
        try:
            argv[1:] = expand_flagfiles(argv[1:])
        except PrepError as e:
            print(error_line(PROG, e), file=sys.stderr)
            return 1
    return run(PROG, build_parser(), COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
