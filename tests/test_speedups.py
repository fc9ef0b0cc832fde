"""wikiprep._speedups against the Python paths it stands in for: the same bytes, layout by layout, option by option.

Each comparison runs the real writer twice on the same input, once with WIKIPREP_PURE_PYTHON=1 (the Python
generator, encoders, tokenizer loop and copy-out) and once without (the C extension), and compares every
output and index file byte for byte; the reference fixtures pin both to google-research/bert's instances.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import random
import shlex
import shutil
import sysconfig
import types
from array import array
from pathlib import Path

import crc32c as crc32c_package
import pytest

from shardkit.errors import PrepError
from shardkit.records import read_records
from testkit.instances import encode_features
from testkit.reference_bert import reference_instances_per_source
from wikiprep import instances, layouts, speedups
from wikiprep.instances import write_pretraining_files
from wikiprep.options import GenerationOptions as Opts
from wikiprep.tokenization import FullTokenizer, Vocab

from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
CASES = json.loads((FIXTURES / "cases.json").read_text())["cases"]
SAMPLE, SYNTHETIC = FIXTURES / "inputs" / "sample_text.txt", FIXTURES / "inputs" / "synthetic_docs.txt"

needs_extension = pytest.mark.skipif(not speedups.built(), reason="wikiprep._speedups is not built (no C compiler)")


def _cc_found() -> bool:
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")[:1]
    return bool(cc) and shutil.which(cc[0]) is not None


@pytest.mark.skipif(not _cc_found(), reason="no C compiler here: the Python paths are what an install gives")
def test_the_extension_is_built_where_a_compiler_is():
    # pip skips an optional extension that fails to compile, with a warning nobody reads: here it fails instead.
    assert speedups.built(), "make setup (pip install -e .) did not build wikiprep/_speedups.c"


@needs_extension
def test_the_environment_variable_forces_python(monkeypatch):
    monkeypatch.setenv(speedups.PURE_PYTHON_ENV, "1")
    assert speedups.compiled() is None and "WIKIPREP_PURE_PYTHON" in speedups.python_reason()
    monkeypatch.setenv(speedups.PURE_PYTHON_ENV, "0")
    assert speedups.compiled() is not None and speedups.python_reason() is None
    assert speedups.compiled_rng(type("Mine", (random.Random,), {})(1)) is None  # a subclass may draw differently


def _write(monkeypatch, pure: bool, folder: Path, inputs: list, vocab, opts: Opts, names: list[str],
           indexed: bool = True, **kwargs) -> tuple[dict[str, bytes], dict]:
    """Run the writer on one path; every file it wrote, by name, and its stats."""
    if pure:
        monkeypatch.setenv(speedups.PURE_PYTHON_ENV, "1")
    else:
        monkeypatch.delenv(speedups.PURE_PYTHON_ENV, raising=False)

        def python_generator(*args, **kwargs):
            raise AssertionError("the compiled run reached the Python generator")

        monkeypatch.setattr(instances, "generate", python_generator)  # so the bytes compared are the C side's
    folder.mkdir(parents=True)
    outputs = [folder / n for n in names]
    indexes = [folder / (n + ".index") for n in names] if indexed else None
    stats = write_pretraining_files([str(p) for p in inputs], str(vocab), outputs, indexes, opts, **kwargs)
    monkeypatch.undo()
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}, stats


def _both(monkeypatch, tmp_path: Path, inputs: list, vocab, opts: Opts, names=("a.tfrecord", "b.tfrecord"),
          **kwargs) -> dict[str, bytes]:
    pure = _write(monkeypatch, True, tmp_path / "pure", inputs, vocab, opts, list(names), **kwargs)
    fast = _write(monkeypatch, False, tmp_path / "compiled", inputs, vocab, opts, list(names), **kwargs)
    assert fast[0].keys() == pure[0].keys()
    for name in pure[0]:
        assert fast[0][name] == pure[0][name], f"{name} differs"
    assert fast[1] == pure[1]  # the stats
    return fast[0]


# ---------------------------------------------------------------------------------------------
# The reference fixtures, both paths

@needs_extension
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_both_paths_write_the_fixture_instances(monkeypatch, tmp_path, case):
    with gzip.open(FIXTURES / "expected" / f"{case['name']}.jsonl.gz", "rt", encoding="utf-8") as f:
        expected = [encode_features(json.loads(line)) for line in f]
    files = _both(monkeypatch, tmp_path, [FIXTURES / p for p in case["input_files"]], VOCAB, Opts(**case["flags"]),
                  names=["only.tfrecord"])
    (tmp_path / "check.tfrecord").write_bytes(files["only.tfrecord"])
    assert list(read_records(tmp_path / "check.tfrecord")) == expected


# ---------------------------------------------------------------------------------------------
# Options and inputs the fixtures do not cover

def _odd_input(path: Path) -> Path:
    """Documents of one sentence, of one word, a long one, and text that is not printable ASCII."""
    docs = ["Only one sentence here.", "Word", "x",
            "\n".join(f"Sentence {i} of the long document, with a few more words than most." for i in range(60)),
            "Ünïcödé wörds, CJK 漢字 and\ttabs\u00a0nbsp.\nA second line — with a dash.",
            "one more\ntwo lines", "Résumé café naïve.", "last"]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def _tiny_vocab(path: Path, duplicate: bool = False) -> Path:
    words = ["the", "old", "city", "river", "a", "of", "##s", "##ed", "##ing", "##e", "se", "##nt", "."]
    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words] + (["the", "##s"] if duplicate else [])
    path.write_text("\n".join(lines) + "\n")
    return path


OPTION_SETS = {
    "whole_word_128": dict(do_whole_word_mask=True, dupe_factor=2, random_seed=1),
    "fixed_384": dict(max_seq_length=384, max_predictions_per_seq=56, fixed_mask_count=True, random_seed=2,
                      short_seq_prob=0.0),
    "short_always_64": dict(max_seq_length=64, max_predictions_per_seq=10, short_seq_prob=1.0, masked_lm_prob=0.5,
                            random_seed=3, dupe_factor=3),
    "cased_whole_word_512": dict(max_seq_length=512, max_predictions_per_seq=76, do_whole_word_mask=True,
                                 do_lower_case=False, random_seed=4, dupe_factor=3),
    "shortest_5": dict(max_seq_length=5, max_predictions_per_seq=20, random_seed=5),
    "no_masks": dict(max_predictions_per_seq=0, masked_lm_prob=1.0, random_seed=6),
    "every_token_fixed": dict(max_seq_length=32, max_predictions_per_seq=40, masked_lm_prob=1.0,
                              fixed_mask_count=True, random_seed=7),
}


@needs_extension
@pytest.mark.parametrize("name", OPTION_SETS)
def test_both_paths_agree_on_every_option(monkeypatch, tmp_path, name):
    inputs = [SAMPLE, _odd_input(tmp_path / "odd.txt"), SAMPLE]
    files = _both(monkeypatch, tmp_path, inputs, VOCAB, Opts(**OPTION_SETS[name]), names=["a.tfrecord", "b.tfrecord",
                                                                                         "c.tfrecord"])
    assert all(files[n] for n in files)


@needs_extension
@pytest.mark.parametrize("flags", [dict(max_seq_length=384, max_predictions_per_seq=56, random_seed=2),
                                   dict(max_seq_length=32, max_predictions_per_seq=29, masked_lm_prob=1.0,
                                        random_seed=7, short_seq_prob=0.5)])
def test_both_paths_agree_on_the_remask_layout(monkeypatch, tmp_path, flags):
    opts = Opts(fixed_mask_count=True, **flags)
    _both(monkeypatch, tmp_path, [SYNTHETIC, _odd_input(tmp_path / "odd.txt")], VOCAB, opts,
          layout=layouts.get("remask").with_parameters(pad_position_value=-1))


@needs_extension
@pytest.mark.parametrize("name", ["whole_word_128", "short_always_64"])
def test_both_paths_agree_on_hdf5(monkeypatch, tmp_path, name):
    files = _both(monkeypatch, tmp_path, [SAMPLE, SYNTHETIC], VOCAB, Opts(**OPTION_SETS[name]),
                  names=["a.hdf5", "b.hdf5"], indexed=False, layout=layouts.get("hdf5"))
    assert files["a.hdf5"].startswith(b"\x89HDF")


def _long_words(path: Path) -> Path:
    """Words whose WordPiece token is 16 bytes or longer: `row_columns` copies a shorter token's text 16 bytes at
    a time, a longer one byte by byte."""
    path.write_text("Telecommunications and interdisciplinary responsibilities are unconstitutional.\n"
                    "A telecommunication line, interdisciplinary again.\n\n"
                    "Another document.\nWith telecommunications.\n", encoding="utf-8")
    return path


@needs_extension
@pytest.mark.parametrize("params", [{}, {"masking": "dynamic"}, {"bin_size": 16}], ids=["static", "dynamic", "bin16"])
@pytest.mark.parametrize("name", ["whole_word_128", "short_always_64", "no_masks"])
def test_both_paths_agree_on_parquet(monkeypatch, tmp_path, name, params):
    """LDDL's Parquet: framed rows from the compiled generator or `InstanceRows`, columns from `row_columns` in C or
    Python, the same files; the long tokens come out whole. A dataset's staged shards too (the rows grouped by bin,
    their marks), and the files a finishing part writes from them, with the figures it counts."""
    import pyarrow.parquet as pq

    from wikiprep.schema import PRED, SEQ
    from wikiprep.stats import FileFigures

    layout = layouts.get("parquet").with_parameters(**params)
    inputs = [SAMPLE, _odd_input(tmp_path / "odd.txt"), _long_words(tmp_path / "long.txt")]
    opts = Opts(**OPTION_SETS[name])
    files = _both(monkeypatch, tmp_path, inputs, VOCAB, opts, names=["a.parquet", "b.parquet"], indexed=False,
                  layout=layout)
    words = set()
    for file in files:
        table = pq.read_table(tmp_path / "compiled" / file)
        for column in {"A", "B", "masked_lm_labels"} & set(table.column_names):
            words.update(w for text in table.column(column).to_pylist() for w in text.split(" "))
    assert {"telecommunications", "interdisciplinary", "unconstitutional"} <= words
    _both(monkeypatch, tmp_path / "staged", inputs, VOCAB, opts, names=["a.rows", "b.rows"], indexed=False,
          layout=layout.staged)
    dims, vocab = {SEQ: opts.max_seq_length, PRED: opts.max_predictions_per_seq}, Vocab.load(VOCAB)
    staged = [tmp_path / "staged" / "compiled" / n for n in ("a.rows", "b.rows")]
    stats = [json.loads(json.dumps(write_pretraining_files([str(p) for p in inputs], str(VOCAB), [p], None, opts,
                                                           layout=layout.staged, overwrite=True)))
             for p in staged]  # the same files again: their stats, as the receipts hold them
    plan = layout.plan_parts(stats, dims, 2)
    written = {}
    for pure in (True, False):
        monkeypatch.setenv(speedups.PURE_PYTHON_ENV, "1") if pure else monkeypatch.delenv(speedups.PURE_PYTHON_ENV,
                                                                                          raising=False)
        folder = tmp_path / f"parts-{pure}"
        folder.mkdir()
        for part in range(2):
            paths = [folder / n for n in layout.part_names("wiki", part, dims)]
            figures = [FileFigures(dims, vocab, p) for p in paths]
            layout.write_part(plan, part, staged, paths, dims, vocab, observe=lambda i, b: figures[i].add(b))
            written.update({(pure, p.name): (p.read_bytes(), json.dumps(f.result())) for p, f in zip(paths, figures)})
    monkeypatch.undo()
    assert {k[1]: v for k, v in written.items() if k[0]} == {k[1]: v for k, v in written.items() if not k[0]}


def _framed_rows(rows: list[tuple]) -> bytes:
    """(tokens, len_a, positions, labels, random next) rows as the generator spills them for Parquet: `InstanceRows`
    rows framed as TFRecords."""
    from shardkit.records import frame_record
    from wikiprep.layouts.hdf5 import InstanceRows

    table = instances.varint_table(40000)
    encode = InstanceRows(128, 20).encode
    return b"".join(frame_record(encode([table[t] for t in tokens], len_a, len(tokens) - len_a - 3, positions,
                                        [table[t] for t in labels], is_random))
                    for tokens, len_a, positions, labels, is_random in rows)


def test_row_columns_in_c_and_python_agree_and_refuse_a_damaged_row():
    from wikiprep.layouts.parquet import BATCH_ARRAYS, npy_headers, row_columns, token_text

    vocab = Vocab.load(VOCAB)
    cls, sep, the, tele, city, s, mask, river = (vocab.ids[w] for w in ["[CLS]", "[SEP]", "the", "telecommunications",
                                                                         "city", "##s", "[MASK]", "river"])
    rows = [([cls, the, tele, sep, city, s, mask, river, sep], 2, [1, 4], [city, river], True),
            ([cls, tele, sep, s, sep], 1, [3], [the], False),
            ([cls, the, tele, city, sep, s, mask, river, sep], 3, [], [], True)]
    data, text, headers = _framed_rows(rows), token_text(vocab), npy_headers(20)
    expected = {  # masks: A and B as they are (after masking), and the mask columns; without, unmasked
        True: ([b"the telecommunications", b"telecommunications", b"the telecommunications city"],
               [b"city ##s [MASK] river", b"##s", b"##s [MASK] river"]),
        False: ([b"city telecommunications", b"telecommunications", b"the telecommunications city"],
                [b"river ##s [MASK] river", b"the", b"##s [MASK] river"])}
    splits = [row_columns] + ([speedups.compiled().row_columns] if speedups.built() else [])
    for masks in (True, False):
        got = [split(data, 0, 3, *text, *headers, masks, (10, 4)) for split in splits]
        assert all(g == got[0] for g in got)
        columns, arrays = got[0]
        assert len(columns) == (10 if masks else 6)
        assert array("H", columns[0]).tolist() == [9, 5, 9] and columns[1] == bytes([0b101])
        for (ends, joined), want in zip([columns[2:4], columns[4:6]], expected[masks]):
            ends = array("i", ends).tolist()
            assert [joined[i:j] for i, j in zip(ends, ends[1:])] == want
        if masks:
            header_of = {m: headers[0][headers[1][m - 1] if m else 0:headers[1][m]] for m in (0, 1, 2)}
            assert columns[7] == b"".join(header_of[len(p)] + array("H", p).tobytes() for p in ([1, 4], [3], []))
            assert columns[9] == b"city river" + b"the"
        batch = dict(zip(BATCH_ARRAYS, arrays))
        assert array("q", batch["input_ids"])[10:20].tolist() == (
            [cls, tele, sep, s, sep] if masks else [cls, tele, sep, the, sep]) + [0] * 5
        assert array("q", batch["input_mask"])[10:20].tolist() == [1] * 5 + [0] * 5
        assert array("q", batch["segment_ids"])[10:20].tolist() == [0, 0, 0, 1, 1] + [0] * 5
        assert array("q", batch["masked_lm_positions"])[:4].tolist() == ([1, 4, 0, 0] if masks else [0] * 4)
        assert array("q", batch["masked_lm_ids"])[:4].tolist() == ([city, river, 0, 0] if masks else [0] * 4)
        assert array("f", batch["masked_lm_weights"])[:4].tolist() == ([1.0, 1.0, 0, 0] if masks else [0] * 4)
        assert array("q", batch["next_sentence_labels"]).tolist() == [1, 0, 1]
        # Rows 1 and 2 alone: the row before them passed, their columns as in the whole block's.
        assert all(split(data, 1, 2, *text, *headers, masks) == split(data[len(_framed_rows(rows[:1])):], 0, 2, *text,
                                                                      *headers, masks) for split in splits)
    flipped = bytearray(data)
    flipped[30] ^= 1  # inside the first row's payload
    beyond = _framed_rows([([cls, 39999, sep, s, sep], 1, [], [], False)])  # an id past the vocabulary
    for split in splits:
        for bad, what in [(data[:-1], "cut short"), (data, "cut short"), (bytes(flipped), "checksum does not match"),
                          (beyond, "vocabulary")]:
            with pytest.raises(ValueError, match=what):
                split(bad, 0, 4 if bad is data else 1 if bad is beyond else 3, *text, *headers, True)
        with pytest.raises(ValueError, match="longer than the batch"):
            split(data, 0, 3, *text, *headers, True, (8, 4))


# ---------------------------------------------------------------------------------------------
# The compiled generator is chosen by the layout, never by default

def _python_run(monkeypatch, folder: Path, layout, names: list[str]) -> dict[str, bytes]:
    """Every file a run of `layout` wrote, the extension built and allowed; asserts the Python generator ran."""
    monkeypatch.delenv(speedups.PURE_PYTHON_ENV, raising=False)
    ran = []
    generate = instances.generate
    monkeypatch.setattr(instances, "generate", lambda *args, **kwargs: (ran.append(1), generate(*args, **kwargs)))
    folder.mkdir(parents=True)
    write_pretraining_files([str(SAMPLE)], str(VOCAB), [folder / n for n in names], None,
                            Opts(fixed_mask_count=True, dupe_factor=2, random_seed=3), layout=layout)
    monkeypatch.undo()
    assert ran, "the compiled generator ran for a layout that gives it no code"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@needs_extension
@pytest.mark.parametrize("name", list(layouts.LAYOUTS))
def test_a_layout_without_compiled_code_is_written_by_the_python_generator(monkeypatch, tmp_path, name):
    """Each registered layout with its compiled code taken away: the Python generator with the layout's own
    encoder writes it, the same bytes as the compiled one."""
    layout = layouts.get(name)
    names = [f"a{layout.shard_suffix}", f"b{layout.shard_suffix}"]
    compiled, _ = _write(monkeypatch, False, tmp_path / "compiled", [SAMPLE], VOCAB,
                         Opts(fixed_mask_count=True, dupe_factor=2, random_seed=3), names, indexed=False, layout=layout)
    python = _python_run(monkeypatch, tmp_path / "python", dataclasses.replace(layout, compiled_code=None), names)
    assert python == compiled


@dataclasses.dataclass(frozen=True, kw_only=True)
class _MarkedLayout(layouts.tfrecord.TFRecordLayout):
    """A layout the compiled generator does not know: the standard records, each after a marker."""

    def encoder(self, max_seq_length, max_predictions_per_seq, vocab=None):
        standard = super().encoder(max_seq_length, max_predictions_per_seq)
        return types.SimpleNamespace(encode=lambda *emitted: b"marked:" + standard.encode(*emitted))


@needs_extension
def test_a_new_layout_unknown_to_the_compiled_generator_never_gets_another_layouts_bytes(monkeypatch, tmp_path):
    marked = _MarkedLayout(name="marked", title="TFRecord, marked", file_kind="TFRecord", flags=("tfrecord", "marked"),
                           folder_suffix="_marked", suffixes=(".tfrecord",), schema=layouts.DEFAULT.schema,
                           compiled_code=None)
    monkeypatch.setitem(layouts.LAYOUTS, marked.name, marked)  # registered, as a new layout's module would be
    files = _python_run(monkeypatch, tmp_path / "marked", layouts.get("marked"), ["a.tfrecord"])
    (tmp_path / "check.tfrecord").write_bytes(files["a.tfrecord"])
    records = list(read_records(tmp_path / "check.tfrecord"))
    assert records and all(r.startswith(b"marked:") for r in records)


@needs_extension
@pytest.mark.parametrize("duplicate", [False, True])
def test_both_paths_agree_on_a_tiny_vocabulary_and_one_document(monkeypatch, tmp_path, duplicate):
    # Odd replacement counts (18 and 20 words) and ## pieces everywhere; one document, so a random next sentence
    # is drawn from the same document after 10 tries.
    vocab = _tiny_vocab(tmp_path / "vocab.txt", duplicate)
    rng = random.Random(9)
    words = ["the", "old", "city", "river", "a", "of", "olds", "cited", "rivering", "sent", "oldse", "zebra"]
    text = tmp_path / "one.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) + " ."
                              for _ in range(80)) + "\n")
    for whole_word in (False, True):
        opts = Opts(max_seq_length=48, max_predictions_per_seq=7, do_whole_word_mask=whole_word, dupe_factor=4,
                    short_seq_prob=0.3, random_seed=11)
        _both(monkeypatch, tmp_path / str(whole_word), [text], vocab, opts)


@needs_extension
def test_a_word_the_vocabulary_cannot_spell_is_the_same_error(monkeypatch, tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n")  # no [UNK]
    text = tmp_path / "text.txt"
    text.write_text("the the\nthe zebra\n")
    messages = []
    for pure in (True, False):
        with pytest.raises(PrepError) as e:
            _write(monkeypatch, pure, tmp_path / str(pure), [text], vocab, Opts(), ["x.tfrecord"])
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "[UNK]" in messages[0]


# ---------------------------------------------------------------------------------------------
# The pieces: the random numbers, the tokenizer's loop, the CRC

@needs_extension
@pytest.mark.parametrize("n", [0, 1, 2, 3, 623, 624, 625, 5000])
def test_shuffle_draws_as_random_shuffle_and_leaves_the_same_state(n):
    fast = speedups.compiled()
    for seed in (0, 12345):
        ours, theirs = random.Random(seed), random.Random(seed)
        for warm in range(3):  # start mid-way through the twister's 624 words, and right at their end
            ours.getrandbits(32 * warm + 7)
            theirs.getrandbits(32 * warm + 7)
            items, expected = array("q", range(n)), list(range(n))
            version, state, gauss = ours.getstate()
            ours.setstate((version, fast.shuffle(state, items), gauss))
            theirs.shuffle(expected)
            assert items.tolist() == expected
            assert ours.getstate() == theirs.getstate()
            assert ours.random() == theirs.random()


@needs_extension
def test_the_tokenizer_loop_gives_the_python_loop_ids_whatever_its_table_holds(tmp_path):
    edge = ["Der Große Preis, ΟΔΟΣ ΣΟΦΟΣ; Σ.", "\u200b", "\x1c", "nbsp\u00a0space, tab\tsep, NUL\x00in, bad\ufffd.",
            "漢字とかなの混じった文。", "ﬁne İstanbul Œuvre naïve café", "x" * 201 + " " + "y" * 200, "a\rb\x0b c\x85d"]
    lines = edge + [""] + SAMPLE.read_text().split("\n") + SYNTHETIC.read_text()[:60000].split("\n")
    lines += ["", "  spaced   out  ", "\t", "a" * 70000, "   ", "end"]  # a chunk too long to keep in the table
    vocab = Vocab(VOCAB)
    for lower in (True, False):
        for cache_size in (5, 300_000):  # a table emptied again and again, and one that keeps everything
            python = FullTokenizer(vocab, lower, cache_size=cache_size)
            for in_c in (False, True):  # printable-ASCII misses asked of chunk_packed, or computed in C
                compiled = FullTokenizer(vocab, lower, cache_size=cache_size)
                wordpiece = dict(vocab_ids=vocab.ids, do_lower_case=lower, max_len=compiled.max_len,
                                 unk_id=vocab.unk_id) if in_c else {}
                loop = speedups.compiled().LineTokenizer(compiled.chunk_packed, compiled.fill, compiled.cache,
                                                         compiled.clean_table, cache_size, **wordpiece)
                for start in (0, 17):  # counting on from a corpus so far
                    expected = instances._tokenize_lines(lines, python.encode_packed, 100, start, 3)
                    assert loop.tokenize(lines, 100, start, 3) == expected
                    assert loop.tokenize(lines, 100, start, 3) == expected  # from a filled table


@needs_extension
def test_crc32c_is_the_castagnoli_crc_with_and_without_the_instruction():
    fast = speedups.compiled()
    data = random.Random(4).randbytes(5000)
    for n in [*range(0, 40), 255, 4096, 4999, 5000]:
        for offset in (0, 3):
            piece = data[offset:offset + n]
            assert fast.crc32c(piece) == fast.crc32c(piece, True) == crc32c_package.crc32c(piece), (n, offset)


def _random_ascii_chunk(rng: random.Random, alphabet: str) -> str:
    """A printable-ASCII chunk (no space): letters, digits and punctuation runs, now and then a word over 200 characters."""
    if rng.random() < 0.03:
        return "".join(rng.choice("abAB") for _ in range(rng.choice((199, 200, 201, 250))))
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


PUNCTUATION = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())


@needs_extension
@pytest.mark.parametrize("lower", [True, False])
def test_the_compiled_tokenizer_computes_a_printable_ascii_chunk_as_chunk_packed(tmp_path, lower):
    """Chunks missing from the table are computed in C (lower-casing, punctuation split, WordPiece): the same
    ids as FullTokenizer.chunk_packed, over a tiny vocabulary ([UNK]s, `##` pieces, upper-case tokens, a long
    token widening the window), the BERT one (the fixtures'), and a table emptied again and again."""
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "ab", "abab", "##a", "##b",
                               "##ab", "##ba", "##bab", "A", "AB", "##B", "##Ab", "1", "##1", "12", "##2", "-", ".",
                               "!", "##!", "~", "a" * 30, "##" + "b" * 28]) + "\n")  # two tokens of the longest length (30): the windows meet their edges
    vocabs = [Vocab(tiny), Vocab(VOCAB)]
    rng = random.Random(15)
    alphabets = ["abAB12" + PUNCTUATION, "ab", "aB!", "xyz" + PUNCTUATION[:5], "abcdefghijklmnopqrstuvwxyz0123456789"]
    chunks = [_random_ascii_chunk(rng, rng.choice(alphabets)) for _ in range(4000)]
    chunks += [PUNCTUATION, "a" * 200, "a" * 201, "b" + "a" * 199, "ABAB", "Ab", "##", "#a", "~~~", "[UNK]", "[CLS]"]
    chunks += ["a" * 30 + "b" * 28, "a" * 31, "a" + "b" * 28 + "a", "a" + "b" * 29, "a" * 29 + "b" * 28 + "ab"]
    for vocab in vocabs:
        python = FullTokenizer(vocab, lower)
        for max_entries in (7, 300_000):
            compiled = FullTokenizer(vocab, lower)
            loop = speedups.compiled().LineTokenizer(
                compiled.chunk_packed, compiled.fill, compiled.cache, compiled.clean_table, max_entries,
                vocab_ids=vocab.ids, do_lower_case=lower, max_len=compiled.max_len, unk_id=vocab.unk_id)
            for _ in range(2):  # computed, then (what the table still holds) looked up
                ids, ends, _docs = loop.tokenize(chunks, 0, 0, 0)
                expected = [python.chunk_packed(c) for c in chunks]
                assert ids == b"".join(expected)
                assert array("q", ends).tolist() == list(itertools.accumulate(len(e) // 4 for e in expected))
                # the same chunks inside a line that is not printable ASCII (cleaned and split by str)
                line = "é\t" + " ".join(chunks[:300])
                assert loop.tokenize([line], 0, 0, 0)[0] == python.encode_packed(line)
            assert list(compiled.cache) == ["é"]  # the one chunk that is not printable ASCII went back to Python


@needs_extension
@pytest.mark.parametrize("lower", [True, False])
def test_the_compiled_tokenizer_without_unk_raises_the_python_error(tmp_path, lower):
    path = tmp_path / "no-unk.txt"
    path.write_text("[CLS]\n[SEP]\n[MASK]\na\n##b\n.\n")
    vocab = Vocab(path)
    for chunk in ["ab.c", "A" + "b" * 250, "a" * 201, "ab,", "Abab"]:
        python = FullTokenizer(vocab, lower)
        with pytest.raises(PrepError) as expected:
            python.chunk_packed(chunk)
        compiled = FullTokenizer(vocab, lower)
        loop = speedups.compiled().LineTokenizer(
            compiled.chunk_packed, compiled.fill, compiled.cache, compiled.clean_table, 100,
            vocab_ids=vocab.ids, do_lower_case=lower, max_len=compiled.max_len, unk_id=vocab.unk_id)
        assert loop.tokenize(["ab. a.", "ab"], 0, 0, 0)[0] == python.encode_packed("ab. a.") + python.encode_packed("ab")
        with pytest.raises(PrepError) as got:
            loop.tokenize(["ab", "a " + chunk], 0, 0, 0)
        assert str(got.value) == str(expected.value)
        assert "\n" not in str(got.value)


# ---------------------------------------------------------------------------------------------
# Instances per source (a mixture's sentence shard)

@needs_extension
def test_instances_are_counted_per_source_as_the_original_makes_them(monkeypatch, tmp_path):
    """A shard of three sources: A, an empty one, and C, whose first document gives no tokens (the generator drops
    it, so source boundaries cannot be counted in documents). Both paths count each source's instances as the
    ported original makes them, and write the same bytes as without counting."""
    docs = SYNTHETIC.read_text(encoding="utf-8").split("\n\n")
    a = "\n\n".join(docs[:40]) + "\n\n"
    c = "\u200b\n\n" + "\n\n".join(docs[40:80]) + "\n\n" + SAMPLE.read_text(encoding="utf-8")
    shard = tmp_path / "shard.txt"
    shard.write_text(a + c, encoding="utf-8")
    starts = [0, len(a.encode()), len(a.encode())]
    flags = dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2, random_seed=3)
    opts = Opts(**flags)
    plain, plain_stats = _write(monkeypatch, False, tmp_path / "plain", [shard], VOCAB, opts, ["a.tfrecord"])
    assert "instances_per_source" not in plain_stats
    expected = reference_instances_per_source(shard, VOCAB, starts, **flags)
    assert expected[0] > 0 and expected[1] == 0 and expected[2] > 0
    assert sum(expected) == plain_stats["instances"]
    for pure in (True, False):
        files, stats = _write(monkeypatch, pure, tmp_path / f"pure{pure}", [shard], VOCAB, opts, ["a.tfrecord"],
                              source_starts=starts)
        assert files == plain
        assert stats.pop("instances_per_source") == expected
        assert stats == plain_stats
