"""wikiprep.instances and wikiprep.tokenization against google-research/bert's reference output.

The fixtures (tests/fixtures/google-reference) hold the instances the original
create_pretraining_data.py wrote for 9 flag combinations; every feature of every instance must
match. `testkit/reference_bert.py` holds a plain port of the original (strings, character by
character) used here as an independent oracle for inputs and flags the fixtures do not cover.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.errors import PrepError
from testkit import reference_bert as reference
from testkit.instances import encode_features, generate_instances
from wikiprep.instances import create_pretraining_file, read_corpus, write_pretraining_files
from wikiprep.options import GenerationOptions as Opts
from shardkit.records import check_index, read_records
from wikiprep.tokenization import FullTokenizer, Vocab

from fixture_paths import GOOGLE_REFERENCE as FIXTURES  # noqa: E402
CASES = json.loads((FIXTURES / "cases.json").read_text())
CASE_NAMES = [c["name"] for c in CASES["cases"]]


@pytest.fixture(scope="module")
def fixtures() -> Path:
    return FIXTURES


def _case(name: str) -> dict:
    return next(c for c in CASES["cases"] if c["name"] == name)


def _inputs(case: dict) -> list[str]:
    return [str(FIXTURES / p) for p in case["input_files"]]


def _vocab() -> str:
    return str(FIXTURES / CASES["vocab_file"])


def _expected(name: str) -> list[dict]:
    with gzip.open(FIXTURES / "expected" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _first_difference(got: list[dict], expected: list[dict]) -> str | None:
    if len(got) != len(expected):
        return f"{len(got)} instances, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            names = [n for n in e if g.get(n) != e[n]]
            return f"instance {k}: {names} differ, e.g. {names[0]}: {g.get(names[0])} != {e[names[0]]}"
    return None


# ---------------------------------------------------------------------------------------------
# The 9 reference runs

@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_feature_of_every_instance_matches_the_original(fixtures, name):
    case = _case(name)
    got = list(generate_instances(_inputs(case), _vocab(), Opts(**case["flags"])))
    assert len(got) == case["count"]
    assert _first_difference(got, _expected(name)) is None


@pytest.mark.parametrize("name,outputs", [("two_files_128_seed9", 3), ("sample_128_wwm_seed1", 1),
                                          ("synthetic_64_mask10_short05_seed42", 2)])
def test_written_records_are_the_reference_instances_round_robin(fixtures, tmp_path, name, outputs):
    case = _case(name)
    paths = [tmp_path / f"out_{i}.tfrecord" for i in range(outputs)]
    indexes = [tmp_path / f"out_{i}.index" for i in range(outputs)]
    stats = write_pretraining_files(_inputs(case), _vocab(), [str(p) for p in paths], [str(p) for p in indexes],
                                    Opts(**case["flags"]))
    files = [list(read_records(p)) for p in paths]
    for p, i in zip(paths, indexes):
        assert check_index(p, i) == len(list(read_records(p)))
    merged = [files[k % outputs][k // outputs] for k in range(sum(map(len, files)))]
    # encode_features is records.encode_example: the written bytes are the canonical encoding
    assert merged == [encode_features(e) for e in _expected(name)]
    assert stats["instances"] == case["count"]
    assert stats["random_next"] == sum(e["next_sentence_labels"][0] for e in _expected(name))
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in paths + indexes)  # no temporary left


TF_PARSE = r"""
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"; os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
import tensorflow as tf
path, seq, pred = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = {n: tf.io.FixedLenFeature([seq], tf.int64) for n in ("input_ids", "input_mask", "segment_ids")}
spec.update({n: tf.io.FixedLenFeature([pred], tf.int64) for n in ("masked_lm_positions", "masked_lm_ids")})
spec["masked_lm_weights"] = tf.io.FixedLenFeature([pred], tf.float32)
spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
for raw in tf.data.TFRecordDataset(path):
    ex = tf.io.parse_single_example(raw, spec)
    print(json.dumps({k: v.numpy().tolist() for k, v in sorted(ex.items())}))
"""


def test_tensorflow_parses_the_file_with_the_contract_schema(fixtures, tmp_path):
    name = "synthetic_384_mask56_dup2_seed3"
    case = _case(name)
    out = tmp_path / "wiki_00000.tfrecord"
    create_pretraining_file(_inputs(case), _vocab(), str(out), str(tmp_path / "wiki_00000.index"), Opts(**case["flags"]))
    res = subprocess.run([sys.executable, "-c", TF_PARSE, str(out), "384", "56"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    parsed = [json.loads(line) for line in res.stdout.splitlines()]
    assert _first_difference(parsed, _expected(name)) is None


# ---------------------------------------------------------------------------------------------
# Beyond the fixtures: the ported original as oracle

EDGE_INPUT = "\n".join([
    "Der Große Preis von Österreich fand 1970 statt.",
    "ΟΔΟΣ ΣΟΦΟΣ είναι ένα όνομα; Σ.",
    "\u200b",                     # a line of only a format character: no tokens, no document break
    "\x1c",                       # stripped to nothing by str.strip(): a document break
    "Zero\u200bwidth, soft\u00adhyphen, NUL\x00inside, bad\ufffdchar, nbsp\u00a0space, tab\tsep.",
    "漢字とかなの混じった文。中文字符测试。",
    "ﬁne ligature ﬂow, İstanbul, Œuvre, naïve café, résumé!",
    "x" * 201 + " " + "y" * 200 + " supercalifragilisticexpialidocious",
    "",
    "",
    "A document after two blank lines: $5 ^up^ `tick` ~tilde~ |pipe| {brace} [bracket].",
    "One more sentence with numbers 3.14159 and 2,718 and e-mail a.b@c.org.",
    "",
    "Single sentence document.",
    "",
    " ".join(f"word{i}" for i in range(400)) + ".",   # far longer than any sequence
    "Short tail.",
    "A carriage\rreturn inside a line, and a CRLF ending.\r",
]) + "\n"


@pytest.mark.parametrize("flags", [
    dict(max_seq_length=32, max_predictions_per_seq=5, masked_lm_prob=0.15, random_seed=77, dupe_factor=3,
         short_seq_prob=0.3, do_whole_word_mask=True, do_lower_case=True),
    dict(max_seq_length=48, max_predictions_per_seq=8, masked_lm_prob=0.2, random_seed=5, dupe_factor=2,
         do_lower_case=False),
])
def test_edge_case_input_matches_the_ported_original(fixtures, tmp_path, flags):
    text = tmp_path / "edge.txt"
    text.write_bytes(EDGE_INPUT.encode("utf-8") + b"invalid \xff\xfe utf-8 bytes are dropped\n")
    files = [str(text), str(FIXTURES / "inputs" / "sample_text.txt")]
    ours = list(generate_instances(files, _vocab(), Opts(**flags)))
    theirs = reference.reference_instances(files, _vocab(), **flags)
    assert ours and _first_difference(ours, theirs) is None


def test_the_ported_original_reproduces_a_fixture(fixtures):
    case = _case("sample_128_wwm_seed1")  # the oracle above is only as good as this
    assert _first_difference(reference.reference_instances(_inputs(case), _vocab(), **case["flags"]),
                             _expected(case["name"])) is None


# ---------------------------------------------------------------------------------------------
# Sequence settings: every combination the original accepts, in memory linear in the length

def _long_documents(path: Path, vocab_path: Path, docs: int, seed: int = 0) -> None:
    """A tiny vocabulary and `docs` documents of ~150 sentences of 5-400 tokens: instances of every length."""
    words = ["the", "old", "city", "river", "north", "south", "new", "walk", "a", "of", "##s", "##ed", "##ing"]
    vocab_path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, "."]) + "\n")
    rng = random.Random(seed)
    body = ["\n".join(" ".join(rng.choice(words[:10]) + rng.choice(["", "", "s", "ed", "ing"])
                               for _ in range(rng.randint(5, 400))) + " ." for _ in range(150))
            for _ in range(docs)]
    path.write_text("\n\n".join(body) + "\n")


@pytest.mark.parametrize("seq,pred", [(5, 20), (128, 200), (16, 16), (6, 0), (7, 1)])
@pytest.mark.parametrize("whole_word", [False, True])
def test_odd_sequence_settings_give_the_original_instances(fixtures, tmp_path, seq, pred, whole_word):
    # More predictions than positions, none, the shortest sequence the original can make: it pads
    # masked_lm_* to max_predictions_per_seq whatever max_seq_length is, and so does the writer.
    flags = dict(max_seq_length=seq, max_predictions_per_seq=pred, do_whole_word_mask=whole_word, dupe_factor=2,
                 random_seed=3, short_seq_prob=0.3)
    files = [str(FIXTURES / "inputs" / "sample_text.txt")]
    theirs = reference.reference_instances(files, _vocab(), **flags)
    assert _first_difference(list(generate_instances(files, _vocab(), Opts(**flags))), theirs) is None
    out = tmp_path / "odd.tfrecord"
    write_pretraining_files(files, _vocab(), [str(out)], [str(tmp_path / "odd.index")], Opts(**flags))
    assert list(read_records(out)) == [encode_features(e) for e in theirs]


def test_long_sequences_give_the_original_instances(tmp_path):
    # Above 1024 positions or 256 predictions the encoder's tables are built on demand: the same bytes.
    text, vocab = tmp_path / "long.txt", tmp_path / "vocab.txt"
    _long_documents(text, vocab, docs=3)
    flags = dict(max_seq_length=3000, max_predictions_per_seq=400, short_seq_prob=0.5, dupe_factor=2,
                 do_whole_word_mask=True, random_seed=8)
    theirs = reference.reference_instances([str(text)], str(vocab), **flags)
    lengths = {sum(e["input_mask"]) for e in theirs}
    assert 3000 in lengths and any(1024 < n < 3000 for n in lengths)  # full length, and other long ones
    out = tmp_path / "long.tfrecord"
    write_pretraining_files([str(text)], str(vocab), [str(out)], None, Opts(**flags))
    assert list(read_records(out)) == [encode_features(e) for e in theirs]


@pytest.mark.parametrize("seq", [3, 4])
def test_sequences_too_short_for_the_original_are_refused(fixtures, seq):
    files = [str(FIXTURES / "inputs" / "sample_text.txt")]
    with pytest.raises(AssertionError):  # the original's assertion: A or B truncated to nothing
        reference.reference_instances(files, _vocab(), max_seq_length=seq, short_seq_prob=0.0, dupe_factor=1)
    with pytest.raises(PrepError, match=f"max_seq_length={seq}: must be at least 5"):
        list(generate_instances(files, _vocab(), Opts(max_seq_length=seq)))


def test_options_are_refused_where_they_are_made():
    """GenerationOptions are valid by construction: what the library is given can make a dataset, so nothing
    downstream checks them again. `dataclasses.replace` (each shard's own seed) makes them anew, checked too."""
    import dataclasses

    with pytest.raises(PrepError, match="masked_lm_prob=2.0"):
        Opts(masked_lm_prob=2.0)
    with pytest.raises(PrepError, match="max_seq_length=4"):
        dataclasses.replace(Opts(), max_seq_length=4)


def test_the_layout_is_given_never_read_from_the_output_names(fixtures, tmp_path):
    """`layout` says how the outputs are written: a name only another layout's files have is refused before
    anything is written, never taken as a choice (create-pretraining-data maps its names to a layout, where
    its flags enter)."""
    from wikiprep import layouts

    good = [str(FIXTURES / "inputs" / "sample_text.txt")]
    for layout, name in ((layouts.DEFAULT, "x.hdf5"), (layouts.get("hdf5"), "x.tfrecord")):
        with pytest.raises(PrepError, match=f"output file .*{name}: named as "):
            write_pretraining_files(good, _vocab(), [str(tmp_path / name)], None, Opts(dupe_factor=1), layout=layout)
    assert not any(tmp_path.iterdir())

MEMORY_RUN = r"""
import sys, tracemalloc
from wikiprep.instances import write_pretraining_files
from wikiprep.options import GenerationOptions
text, vocab, out, seq = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tracemalloc.start()
stats = write_pretraining_files([text], vocab, [out], None, GenerationOptions(
    max_seq_length=seq, max_predictions_per_seq=seq // 8, short_seq_prob=1.0, dupe_factor=2))
print(tracemalloc.get_traced_memory()[1], len(stats["sequence_length_histogram"]))
"""


def test_memory_is_linear_in_the_sequence_length(tmp_path):
    # A table of padding runs per length took seq**2 bytes (422 MB at seq 20000); shuffle steps
    # cached per candidate-list length grew the same way. Every instance here has its own random
    # target length, so a table per length would show.
    text, vocab = tmp_path / "long.txt", tmp_path / "vocab.txt"
    _long_documents(text, vocab, docs=4)
    peaks = {}
    for seq in (2000, 20000):
        out = tmp_path / f"o{seq}.tfrecord"
        res = subprocess.run([sys.executable, "-c", MEMORY_RUN, str(text), str(vocab), str(out),
                              str(seq)], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        peak, lengths = map(int, res.stdout.split())
        assert lengths > 40  # many distinct instance lengths
        peaks[seq] = peak
    # The corpus and a few records dominate; ten times the length adds well under 10 MB (not 400).
    assert peaks[20000] - peaks[2000] < 10e6, peaks


# ---------------------------------------------------------------------------------------------
# Tokenization

def _tiny_vocab(tmp_path: Path, words: list[str]) -> Vocab:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n", encoding="utf-8")
    return Vocab(path)


def test_greek_final_sigma_is_lowercased_as_python_does(tmp_path):
    final, medial = "\u03c2", "\u03c3"  # ς, σ
    vocab = _tiny_vocab(tmp_path, ["\u03bf\u03b4\u03bf" + final, "\u03c3\u03bf\u03c6\u03bf" + medial])
    tok = FullTokenizer(vocab)
    # str.lower() ends a word with the final form ς; HF tokenizers gives σ
    assert tok.tokenize("\u039f\u0394\u039f\u03a3") == ["\u03bf\u03b4\u03bf" + final]   # ΟΔΟΣ -> οδος
    assert tok.tokenize("\u03a3\u039f\u03a6\u039f\u03a3") == ["[UNK]"]  # ΣΟΦΟΣ -> σοφος, not σοφοσ


def test_words_over_200_characters_are_unknown(tmp_path):
    tok = FullTokenizer(_tiny_vocab(tmp_path, ["a", "##a"]))
    assert tok.tokenize("a" * 200) == ["a"] + ["##a"] * 199
    assert tok.tokenize("a" * 201) == ["[UNK]"]  # HF tokenizers cuts at 100 characters


def test_greedy_longest_match_first_and_unknown_pieces(tmp_path):
    tok = FullTokenizer(_tiny_vocab(tmp_path, ["un", "una", "##aff", "##able", "##ffable", "aff"]))
    assert tok.tokenize("unaffable") == ["una", "##ffable"]  # longest first piece wins, not the best split
    assert tok.tokenize("unaffablex") == ["[UNK]"]  # one missing piece makes the whole word unknown
    assert tok.tokenize("UnAffable aff") == ["una", "##ffable", "aff"]


def test_cleaning_spacing_accents_and_punctuation(fixtures):
    lower = FullTokenizer(Vocab(_vocab()), do_lower_case=True)
    cased = FullTokenizer(Vocab(_vocab()), do_lower_case=False)
    assert lower.tokenize("th\x00e ca\ufffdt wo\u200brld hel\u00adlo") == ["the", "cat", "world", "hello"]  # dropped
    assert lower.tokenize("a\u00a0b\u2003c\td") == ["a", "b", "c", "d"]  # Zs and tab are spaces
    assert lower.tokenize("中文") == ["中", "文"]
    assert lower.tokenize("Café Naïve") == ["cafe", "naive"]
    assert cased.tokenize("the") == ["the"] and "cafe" not in cased.tokenize("Café")  # no lower case, no NFD
    assert lower.tokenize("a$b^c`d~e") == ["a", "$", "b", "^", "c", "`", "d", "~", "e"]  # ASCII non-alnum
    assert lower.tokenize("«quote»") == ["«", "quote", "»"]  # Unicode P*


def test_symbols_are_not_punctuation(tmp_path):
    tok = FullTokenizer(_tiny_vocab(tmp_path, ["x", "y", "→", "##→", "##y", "€", "##€"]))
    assert tok.tokenize("x→y") == ["x", "##→", "##y"]  # Sm stays inside the word
    assert tok.tokenize("x€") == ["x", "##€"]  # Sc too (only ASCII symbols split)


def test_fast_paths_equal_the_character_by_character_original(fixtures):
    rng = random.Random(1234)
    alphabet = ("abcXYZ019 .,;!?'\"()[]$^`~-_\t\x00\x07\x1c\x7f\x85\u00a0\u00ad\u200b\u2028\ufffd"
                "éÉïÖßΣσςΑΩİıŒæﬁﬂ中文字日本ひらカタ한국«»—…→€¿¡\u0301\u0308")
    vocab_file = _vocab()
    for lower in (True, False):
        ours = FullTokenizer(Vocab(vocab_file), do_lower_case=lower)
        theirs = reference.ReferenceTokenizer(vocab_file, do_lower_case=lower)
        for _ in range(1500):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
            if rng.random() < 0.1:
                text += "q" * rng.choice((199, 200, 201))
            assert ours.tokenize(text) == theirs.tokenize(text), repr(text)


def test_lines_are_read_as_tensorflow_gfile_reads_them(fixtures, tmp_path):
    text = tmp_path / "crlf.txt"
    text.write_bytes(b"Hello wor\rld.\r\n\r\nSecond doc\xff here.\r\nlast line without an end")
    vocab = Vocab(_vocab())
    corpus = read_corpus([str(text)], vocab)
    sentences = [vocab.tokens(corpus.tokens[a:b])
                 for a, b in zip(corpus.sentence_starts, corpus.sentence_starts[1:])]
    # TensorFlow's ReadLine drops every '\r' (it does not end a line); bad UTF-8 bytes are dropped
    assert sentences == [["hello", "world", "."], ["second", "doc", "here", "."], ["last", "line", "without", "an",
                                                                                  "end"]]
    assert corpus.num_documents == 2 and corpus.bytes_read == text.stat().st_size


def test_vocab_duplicates_follow_the_original_ordered_dict(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nhello\n", encoding="utf-8")
    vocab = Vocab(path)
    assert vocab.ids["hello"] == 7  # the last line wins the id
    assert vocab.words == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]  # first position kept
    assert vocab.word_ids() == [0, 1, 2, 3, 4, 7, 6]


# ---------------------------------------------------------------------------------------------
# Options, determinism, errors

def test_fixed_mask_count_gives_full_sequences_exactly_max_predictions(fixtures):
    case = _case("synthetic_128_dup5_seed12345")
    flags = dict(case["flags"], dupe_factor=1)
    seq, pred, prob = flags["max_seq_length"], flags["max_predictions_per_seq"], flags["masked_lm_prob"]
    plain = list(generate_instances(_inputs(case), _vocab(), Opts(**flags)))
    fixed = list(generate_instances(_inputs(case), _vocab(), Opts(fixed_mask_count=True, **flags)))
    full = 0
    for ex in fixed:
        n, m = sum(ex["input_mask"]), int(sum(ex["masked_lm_weights"]))
        assert m == max(min(pred, max(1, round(n * prob))), n - seq + pred)
        if n == seq:
            full += 1
            assert m == pred
    assert full > 100
    assert {int(sum(e["masked_lm_weights"])) for e in plain if sum(e["input_mask"]) == seq} == {19}


def test_same_inputs_and_seed_give_byte_identical_files(fixtures, tmp_path):
    case = _case("two_files_128_seed9")
    digests, stats = [], []
    for run in ("a", "b"):
        out = tmp_path / run / "wiki_00000.tfrecord"
        stats.append(create_pretraining_file(_inputs(case), _vocab(), str(out), str(out.with_suffix(".index")),
                                             Opts(**case["flags"])))
        digests.append([hashlib.sha256(p.read_bytes()).hexdigest() for p in (out, out.with_suffix(".index"))])
    assert digests[0] == digests[1]
    assert stats[0] == stats[1]
    other = tmp_path / "c" / "wiki_00000.tfrecord"
    create_pretraining_file(_inputs(case), _vocab(), str(other), None, Opts(**dict(case["flags"], random_seed=10)))
    assert hashlib.sha256(other.read_bytes()).hexdigest() != digests[0][0]


def test_stats_describe_the_instances(fixtures, tmp_path):
    case = _case("sample_512_mask76_dup2_seed7")
    expected = _expected(case["name"])
    st = create_pretraining_file(_inputs(case), _vocab(), str(tmp_path / "x.tfrecord"), None, Opts(**case["flags"]))
    assert st["instances"] == len(expected)
    assert st["full_length"] == sum(1 for e in expected if sum(e["input_mask"]) == 512)
    assert st["masked_tokens"] == sum(int(sum(e["masked_lm_weights"])) for e in expected)
    assert sum(st["masked_count_histogram"].values()) == len(expected)
    assert st["documents"] > 0 and st["sentences"] > st["documents"] and st["tokens"] > st["sentences"]
    json.dumps(st)  # the Luigi receipt stores it


def test_bad_input_is_one_clear_error_and_leaves_nothing(fixtures, tmp_path):
    out = tmp_path / "out" / "wiki_00000.tfrecord"
    good = str(FIXTURES / "inputs" / "sample_text.txt")

    def fails(inputs, vocab=_vocab(), **flags) -> str:
        with pytest.raises(PrepError) as e:
            create_pretraining_file(inputs, vocab, str(out), str(out.with_suffix(".index")), Opts(dupe_factor=1, **flags))
        assert "\n" not in str(e.value)
        return str(e.value)

    missing = tmp_path / "missing.txt"
    assert str(missing) in fails([good, str(missing)])
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n   \n\u200b\n")
    assert str(blank) in fails([str(blank)]) and "no documents" in fails([str(blank)])
    packed = tmp_path / "text.txt.gz"
    packed.write_bytes(gzip.compress(b"some text\n"))
    assert "gzip" in fails([str(packed)])
    binary = tmp_path / "random.bin"
    binary.write_bytes(random.Random(0).randbytes(50_000))
    assert "not UTF-8" in fails([str(binary)])
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("One sentence.\n".encode("utf-16"))
    assert "UTF-16" in fails([str(utf16)])
    no_mask = tmp_path / "vocab.txt"
    no_mask.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    assert str(no_mask) in fails([good], vocab=str(no_mask)) and "[MASK]" in fails([good], vocab=str(no_mask))
    assert "max_seq_length" in fails([good], max_seq_length=4)
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_outputs_and_indexes_are_committed_together_or_not_at_all(fixtures, tmp_path, monkeypatch):
    from shardkit import records
    from wikiprep import instances

    good = [str(FIXTURES / "inputs" / "sample_text.txt")]
    outs = [str(tmp_path / f"o{i}.tfrecord") for i in range(3)]
    (tmp_path / "o1.tfrecord").write_bytes(b"an older good output")
    (tmp_path / "plain_file").write_text("")
    before = sorted(os.listdir(tmp_path))
    monkeypatch.setattr(instances, "check_output_paths", lambda *args: None)  # what its checks cannot foresee:
    with pytest.raises(PrepError, match="not a folder"):  # the last index's folder cannot be made
        write_pretraining_files(good, _vocab(), outs, [str(tmp_path / "o0.index"), None,
                                                       str(tmp_path / "plain_file" / "o2.index")], Opts(dupe_factor=1))
    write_framed = records.RecordWriter.write_framed

    def failing_write(writer, *args):  # the disk fills up while the last output's records are copied out
        if writer.path.name == "o2.tfrecord":
            raise OSError(28, "No space left on device")
        return write_framed(writer, *args)

    monkeypatch.setattr(records.RecordWriter, "write_framed", failing_write)
    with pytest.raises(PrepError, match="o0.tfrecord: cannot write: no space left"):  # the first file of the run
        write_pretraining_files(good, _vocab(), outs, [str(tmp_path / f"o{i}.index") for i in range(3)],
                                Opts(dupe_factor=1))
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "o1.tfrecord").read_bytes() == b"an older good output"

