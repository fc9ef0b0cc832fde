"""Sentence shards: offline Punkt, hash mixing, the original generator's input format, streaming merge."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from wikiprep import sentences
from wikiprep.punkt_regex import PlainRegexLanguageVars, PlainRegexToken
from wikiprep.wikipedia.source import extracted_documents, read_extracted
from shardkit.errors import PrepError

def write_extracted(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The embedded sample dump's first part, through the real extractor."""
    from wikiprep.wikipedia import extract, samples

    root = tmp_path_factory.mktemp("dump")
    folder = samples.write_sample_dump(root)
    part = sorted(folder.glob("*.bz2"))[0]
    out = root / "part1.jsonl"
    extract.extract_part(part, out, "20260101")
    return out


def test_shard_of_is_stable_and_spreads_documents():
    assert sentences.shard_of(12345, 42, 8) == sentences.shard_of(12345, 42, 8)
    counts = Counter(sentences.shard_of(7, i, 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 900
    code = "from wikiprep.sentences import shard_of; print([shard_of(1, i, 16) for i in range(50)])"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(s))).stdout for s in (1, 2)}
    assert len(outs) == 1


def test_seeded_choices_keep_their_values():
    """Page -> shard and shard -> generation seed share one hash; these are the values datasets were made with."""
    from wikiprep import dataset

    assert [sentences.shard_of(12345, i, 7) for i in range(20)] == [0, 6, 5, 3, 6, 2, 6, 6, 2, 5, 1, 5, 3, 6, 0, 6,
                                                                     4, 3, 4, 4]
    assert [dataset.shard_seed(12345, i) for i in range(4)] == [4461578988926160027, 8442692986265392166,
                                                                7262374744258485085, 722521436334610896]


def test_punkt_trained_offline_learns_abbreviations(extracted, tmp_path):
    model = tmp_path / "punkt.json"
    stats = sentences.train_punkt(sentences.punkt_sample([extracted_documents(extracted, min_chars=200)]), model)
    assert stats["trained_on_chars"] > 50000
    learned = set(json.loads(model.read_text())["abbrev_types"])
    assert {"dr", "e.g", "u.s", "st"} <= learned
    splitter = sentences.load_punkt(model)
    got = splitter.tokenize("In 1901, Dr. Smith rebuilt the mill near St. Wesanholm. The mill grew quickly. "
                            "It employed many people, e.g. farmers and smiths.")
    assert got == ["In 1901, Dr. Smith rebuilt the mill near St. Wesanholm.", "The mill grew quickly.",
                   "It employed many people, e.g. farmers and smiths."]


def test_plain_regex_punkt_equals_nltk_punkt(extracted, tmp_path):
    """Our `re`-compiled Punkt trains the same model and splits the same sentences as stock nltk."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer

    sample = sentences.punkt_sample([extracted_documents(extracted, min_chars=200)])
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sample, model)
    stock = PunktTrainer()
    stock.train("\n\n".join(sample))
    params = stock.get_params()
    saved = json.loads(model.read_text())
    assert saved["abbrev_types"] == sorted(params.abbrev_types)
    assert saved["sent_starters"] == sorted(params.sent_starters)
    assert saved["ortho_context"] == sorted([k, v] for k, v in params.ortho_context.items())
    assert saved["collocations"] == sorted(list(c) for c in params.collocations)
    ours, theirs = sentences.load_punkt(model), PunktSentenceTokenizer(params)
    paragraphs = [p for text in sample for p in text.split("\n")]
    paragraphs += ["He said “Stop.” Then he left... Really?! (See p. 4.) 'Quoted.' Done", "3.14 is pi. Ok.",
                   "Mr. A. B. Smith Jr. met U.S. officials -- twice. Next."]
    assert sum(len(ours.tokenize(p)) for p in paragraphs) > 1000
    assert [ours.tokenize(p) for p in paragraphs] == [theirs.tokenize(p) for p in paragraphs]


def test_split_and_merge_write_the_generator_input_format(extracted, tmp_path):
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([extracted_documents(extracted, min_chars=200)]), model)
    n_docs = sum(1 for _ in read_extracted(extracted))
    out = tmp_path / "split" / "part1"
    stats = sentences.split_piece(extracted_documents(extracted, min_chars=200), model, out, num_shards=3, seed=5)
    assert stats["documents"] + sum(stats["dropped"].values()) == n_docs and stats["documents"] >= 10
    assert sorted(p.name for p in out.iterdir()) == [sentences.bucket_name(i) for i in range(3)]
    assert sum(stats["documents_per_shard"]) == stats["documents"]
    shard = tmp_path / "shard_00000.txt"
    merged = sentences.merge_shard([out / sentences.bucket_name(0), out / sentences.bucket_name(0)], shard)
    assert merged["documents"] == 2 * stats["documents_per_shard"][0]
    text = shard.read_text(encoding="utf-8")
    docs = text.split("\n\n")
    assert docs[-1] == "" and all(d.strip() for d in docs[:-1])  # a blank line after every document
    lines = docs[0].split("\n")
    assert len(lines) > 20
    assert all(line == " ".join(line.split()) and line[-1] in ".!?\"')" for line in lines), lines[:5]
    # Same input, same seed: the same bytes; another seed: another assignment of documents to shards.
    again = sentences.split_piece(extracted_documents(extracted, min_chars=200), model, tmp_path / "again", num_shards=3, seed=5)
    assert again == stats and (tmp_path / "again" / "bucket_00001.txt").read_bytes() == \
        (out / "bucket_00001.txt").read_bytes()
    other = sentences.split_piece(extracted_documents(extracted, min_chars=200), model, tmp_path / "other", num_shards=3, seed=6)
    assert other["documents_per_shard"] != stats["documents_per_shard"]


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(PrepError, match="missing.jsonl: extracted part not found"):
        list(read_extracted(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "ok"}\nnot json\n')
    with pytest.raises(PrepError, match="bad.jsonl: line 2"):
        list(read_extracted(bad))
    empty = write_extracted(tmp_path / "empty.jsonl", [{"id": 1, "title": "x", "text": "short"}])
    with pytest.raises(PrepError, match="no article text"):
        sentences.train_punkt(sentences.punkt_sample([extracted_documents(empty, min_chars=100)]), tmp_path / "p.json")
    notmodel = tmp_path / "notmodel.json"
    notmodel.write_text("[]")
    with pytest.raises(PrepError, match="notmodel.json: not a wikiprep Punkt model"):
        sentences.load_punkt(notmodel)


def _split(per_shard, dropped=None):
    return {"documents": sum(per_shard), "sentences": 10 * sum(per_shard), "dropped": dropped or {},
            "documents_per_shard": per_shard}


def _extracted(part, articles, **dropped):
    return {"part": part, "pages": articles + sum(dropped.values()), "articles": articles, "dropped": dropped}


def test_judge_splits_counts_each_shard_from_the_split_stats_alone():
    """What each shard will hold, and the dropped documents summed by reason, with no text read."""
    corpus = sentences.judge_splits([_split([2, 0, 1], {"too_short": 1}), _split([1, 3, 2], {"too_short": 2})],
                                    [_extracted("p1", 4, redirect=5), _extracted("p2", 8, redirect=1, empty=2)],
                                    num_shards=3, source="enwiki 20260101")
    assert corpus == {"documents": 9, "documents_per_shard": [3, 3, 3],
                      "dropped": {"empty": 2, "redirect": 6, "too_short": 3}}


@pytest.mark.parametrize("splits, extracted, expected", [
    # every article dropped at cleaning
    ([_split([0, 0], {"too_short": 3})], [_extracted("p1", 3)],
     "enwiki 20260101: no article survived extraction and cleaning (dropped: {'too_short': 3})"),
    # more shards than the corpus fills: every empty shard counted, in one line
    ([_split([5, 0, 0, 1]), _split([4, 0, 0, 0])], [_extracted("p1", 6), _extracted("p2", 4)],
     "--num-shards 4: 2 of the sentence shards would be empty (enwiki 20260101 has 10 documents after cleaning, "
     "spread by hash); give fewer shards, at most about 1 for this corpus"),
])
def test_judge_splits_refuses_a_corpus_that_does_not_fill_the_shards(splits, extracted, expected):
    with pytest.raises(PrepError) as error:
        sentences.judge_splits(splits, extracted, num_shards=len(splits[0]["documents_per_shard"]),
                               source="enwiki 20260101")
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_merged_shards_are_the_buckets_in_dump_order(extracted, tmp_path):
    """Shard i is bucket i of every split, in the order given, byte for byte; merged one at a time, in any
    order, the shards hold what the splits' counts promised."""
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([extracted_documents(extracted, min_chars=200)]), model)
    splits = [tmp_path / "split" / name for name in ("a", "b")]
    stats = [sentences.split_piece(extracted_documents(extracted, min_chars=200), model, splits[0], num_shards=3, seed=5),
             sentences.split_piece(extracted_documents(extracted, min_chars=200), model, splits[1], num_shards=3, seed=6)]
    corpus = sentences.judge_splits(stats, [_extracted("p", 30)], num_shards=3, source="x")
    for i in (2, 0, 1):
        out = tmp_path / "sentences" / sentences.shard_name(i)
        merged = sentences.merge_shard([s / sentences.bucket_name(i) for s in splits], out)
        assert out.read_bytes() == b"".join((s / sentences.bucket_name(i)).read_bytes() for s in splits)
        assert merged["documents"] == corpus["documents_per_shard"][i]
        assert merged["sentences"] == sum(1 for line in out.read_bytes().splitlines() if line)
    with pytest.raises(PrepError, match=r"--shard 3: must be from 0 to 2 \(--num-shards 3\)"):
        sentences.check_shard(3, 3)


# ---------------------------------------------------------------------------------------------
# PunktSplitter's own span machinery against stock nltk Punkt with the same model.

from nltk.tokenize.punkt import (_ORTHO_BEG_LC, _ORTHO_BEG_UC, _ORTHO_MID_LC, _ORTHO_MID_UC,  # noqa: E402
                                 _ORTHO_UNK_UC, PunktParameters, PunktSentenceTokenizer)

from fixture_paths import REFERENCE_INPUTS as INPUTS  # noqa: E402


def handmade_params():
    """A model that reaches every branch of Punkt's second pass: abbreviations (one hyphenated use),
    collocations (one after a number), frequent sentence starters and orthographic contexts that
    make the next word a sure, an unlikely and an unknown sentence start."""
    params = PunktParameters()
    params.abbrev_types = {"dr", "mr", "u.s", "e.g", "i.e", "st", "vol", "c", "approx", "ltd", "no", "fig", "jan"}
    params.collocations = {("##number##", "march"), ("s", "bach"), ("dr", "smith"), ("t", "felix")}
    params.sent_starters = {"the", "in", "he", "however", "it"}
    for word, flags in {"the": _ORTHO_BEG_UC | _ORTHO_MID_LC, "in": _ORTHO_BEG_UC | _ORTHO_MID_LC,
                        "smith": _ORTHO_MID_UC, "bach": _ORTHO_MID_UC | _ORTHO_UNK_UC, "march": _ORTHO_BEG_UC,
                        "he": _ORTHO_BEG_UC | _ORTHO_MID_LC, "ok": _ORTHO_BEG_LC, "iphone": _ORTHO_BEG_LC,
                        "however": _ORTHO_BEG_UC | _ORTHO_MID_LC | _ORTHO_MID_UC, "paris": _ORTHO_MID_UC}.items():
        params.ortho_context[word] = flags
    return params


TRICKY = [
    "", " ", "\n", ".", "...", "?!", "!!!", "?", ". . .", ".)", "(.)", "'.'", "“.”", "--",
    ".Starts with a period. Then more.", "  Leading spaces. And trailing.   ", "Ends with a period. \n\t ",
    "Dr. Smith met Mr. Jones at St. Paul's. The meeting ran long.", "He lives in the U.S. The weather is fine.",
    "It was approx. 3 km away. In 1990. the town grew.", "See e.g. the list, i.e. this one. However, no.",
    "Johann S. Bach wrote it. T. Felix agreed. J. R. R. Tolkien too.", "Vol. 3 of the set. No. 5 is next.",
    "It cost $3.50. Then 4. Then 5.5. Then 1990. March came.", "5. March was cold. 6. april was not.",
    "Very bad acting!!! I promise. Really?! Yes?? No... ok.", "Wait... What? Then -- nothing. Done.",
    "(How does it deal with this parenthesis?)  \"It should be part of the previous sentence.\" "
    "\"(And the same with this one.)\" ('And this one!') \"('(And (this)) '?)\" [(and this. )]",
    "He said “Stop.” Then he left... Really?! (See p. 4.) 'Quoted.' Done",
    "« Fin. » Le début. ‘Yes.’ Next.",
    "Line one.\nLine two. Still two.\n\nParagraph two.\r\nWindows line. \x0cForm feed.\tTab. \x0bVertical.",
    "Non\u00a0breaking. Space\u2009thin. Ideographic\u3000space. Next\u2028line.",
    "Ünïcödé. Straße. İstanbul. ΟΔΟΣ. Done. 力加勝北区. Next. ᴵᴺᵀᵃ.", "iPhone. ok. OK. Ok. paris. Paris.",
    "a.b.c. d.e.f. U.S.A. Next. x.. y... z.... w.", "Number 1.2.3. Then -1. Then .5. Then ,5. End.",
    "Mid-Jan. the thing. Pre-Dr. Smith. Ex-St. louis.", "What?!\"  He asked. \"Why!\" she said. 'No?'",
    "End.)\" Start. End.'] Start. End.}) Start. End.--Start. End.\" -- Start.", ". , ; : ! ?",
    "a . b ? c ! d", "One.  Two.   Three.\n\n\nFour.", "Tail period.  ", "x.\n", "!\n?", "Mr.\nSmith went.",
    # A whitespace first (nltk's "none found" at index 0); ". . ." across a line break (nltk splits lines).
    " .! a", " ?! Yes.", "\t.) x", "\n..! Next", " x.!y. Z", "x.\n. .", "Dr.\n. . Smith\n. . .",
    "So it ends.\u2019 Here.\u201d There.\u00bb Everywhere.", "Zero\u200bwidth. Joiner\u200d. Soft\u00adhyphen. Ok.",
    # Characters `re` and nltk's engine class differently: initials to one only, whitespace to one only.
    "The value was x ². then it rose.", "Word ₂. next words.", "He wrote e\u0301. then left.",
    "A\x1c. b. Next.\x1f Then.", "Dr.\x1cSmith. Sep\x1d. then.", "Kawi \U00011f04. then \U00011f50. then.",
]


# Words that `re` and nltk's `regex` engine class differently (punkt_regex): superscripts and subscripts (\w
# to `re` only), combining marks, a joiner and connector punctuation (\w to `regex` only), digits and letters
# newer than Python 3.11's Unicode 14 (Kawi, Unicode 15), information separators (whitespace to `re` only).
ENGINE_PIECES = ["²", "².", "x².", "₂.", "CO₂.", "e\u0301.", "\u0301.", "a\u200d.", "\u200d.", "‿.", "a‿b.",
                 "\U00011f50.", "\U00011f04.", "Ⅻ.", "½.", "\x1c.", "a\x1d.", "٣."]


def random_texts(n, seed=15):
    """Texts stitched from the pieces Punkt's rules care about, with every kind of gap between them."""
    import random
    pieces = ["Dr.", "dr.", "U.S.", "e.g.", "J.", "j.", "S.", "3.", "1990.", "3.5", "...", "..", ". .", "?", "!",
              "?!", ".", ")", "(", "\"", "'", "“", "”", "«", "»", "[", "]", "--", "-", ",", ";", ":", "The", "the",
              "He", "he", "In", "March", "march", "Smith", "Bach", "Felix", "ok", "iPhone", "Paris", "ltd.",
              "Mid-Jan.", "vol.", "no.", "word", "Word.", "end.", "x", "İ.", "ΟΔΟΣ.", "力.", "a.b.", "—", "&",
              *ENGINE_PIECES]
    gaps = ["", "", " ", " ", " ", "  ", "\n", "\n\n", "\t", "\u00a0", " \n ", "\r\n", "\x0c", "\x1c", " \x1f "]
    rng = random.Random(seed)
    return [rng.choice(gaps) + "".join(rng.choice(pieces) + rng.choice(gaps) for _ in range(rng.randint(1, 14)))
            for _ in range(n)]


def stock_splitter(params):
    """nltk's own PunktSentenceTokenizer, its patterns run by its `regex` engine: the reference."""
    return PunktSentenceTokenizer(params)


def assert_same_sentences(params, texts):
    fast, stock = sentences.PunktSplitter(params), stock_splitter(params)
    small = sentences.PunktSplitter(params)
    small.MAX_ENTRIES = 3  # its tables emptied again and again
    # nltk's machinery on punkt_regex's patterns, as train_punkt's trainer uses them
    plain = PunktSentenceTokenizer(params, lang_vars=PlainRegexLanguageVars(), token_cls=PlainRegexToken)
    sentences_seen = 0
    for text in texts:
        expected = stock.tokenize(text)
        sentences_seen += len(expected)
        assert plain.tokenize(text) == expected, text
        assert fast.tokenize(text) == expected, text
        assert small.tokenize(text) == expected, text
        assert list(fast.span_tokenize(text)) == list(stock.span_tokenize(text)), text
        assert fast.tokenize(text, realign_boundaries=False) == stock.tokenize(text, realign_boundaries=False)
        assert fast.text_contains_sentbreak(text) == stock.text_contains_sentbreak(text), text
    return sentences_seen


def test_splitter_equals_stock_punkt_on_tricky_text():
    """Abbreviations, initials, collocations, numbers, ellipses, "?!", closing quotes and brackets after
    the end (realignment), leading and trailing whitespace, ASCII and Unicode whitespace, line breaks,
    empty and punctuation-only texts: the same sentences, spans and decisions as stock nltk."""
    assert assert_same_sentences(handmade_params(), TRICKY) > 120


def test_splitter_equals_stock_punkt_on_random_text():
    texts = random_texts(3000)
    assert assert_same_sentences(handmade_params(), texts) > 7000
    assert assert_same_sentences(PunktParameters(), texts[:500]) > 1400  # an empty model


def test_splitter_equals_stock_punkt_on_fixture_text(extracted, tmp_path):
    """The google-reference inputs (prose, CJK, control and zero-width characters), line by line and as
    whole multi-line documents, with a model trained on the sample dump."""
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([extracted_documents(extracted, min_chars=200)]), model)
    params = sentences.load_punkt(model)._params
    texts = []
    for name in sorted(os.listdir(INPUTS)):
        with open(os.path.join(INPUTS, name), encoding="utf-8") as f:
            text = f.read()
        texts += text.split("\n") + text.split("\n\n")
    assert assert_same_sentences(params, texts) > 3000
    assert assert_same_sentences(handmade_params(), texts[::5]) > 500


def test_splitter_equals_stock_punkt_on_a_synthetic_part(synthetic_part):
    """A sample of an extracted part of the benchmarks' synthetic dump, cleaned as split_piece gets them cleaned,
    with the Punkt model trained on it; and the same documents uncleaned."""
    import random

    from wikiprep.wikipedia.clean import clean_document

    cases = [synthetic_part]
    rng = random.Random(15)
    compared = 0
    for part, model in cases:
        docs = list(read_extracted(part))
        sample = rng.sample(docs, min(len(docs), 15))
        texts = [p for doc in sample for p in (clean_document(doc, min_chars=0)[0] or [])]
        texts += [doc["text"] for doc in sample[:4]]
        compared += assert_same_sentences(sentences.load_punkt(model)._params, texts)
    assert compared > 1000


def test_document_sentences_single_space_every_sentence():
    """Stripping in place of split and join (paragraphs with lone spaces only) gives the same lines."""
    splitter = sentences.PunktSplitter(handmade_params())
    paragraphs = [t for t in TRICKY + random_texts(500) if t]
    expected = [" ".join(s.split()) for p in paragraphs for s in stock_splitter(handmade_params()).tokenize(p)]
    assert sentences.document_sentences(paragraphs, splitter) == [s for s in expected if s]


def test_splitter_shortcuts_hold_for_every_character():
    """What PunktSplitter's shortcuts rely on, for every character Python knows: `\\s` is str.isspace;
    every whitespace character but the space is unprintable (document_sentences); and a letter or digit
    is no whitespace, no character that ends a word in nltk's word pattern or may not start one, so a
    run of them (with or without a final ".") is one word (`PunktSplitter._run`)."""
    import re

    import regex

    chars = [chr(i) for i in range(sys.maxunicode + 1)]
    space = re.compile(r"\s")
    assert all(bool(space.match(c)) == c.isspace() for c in chars)
    assert all(not c.isprintable() for c in chars if c.isspace() and c != " ")
    word_enders = set("\"')]};*:@({[\u2018\u2019\u201c\u201d\xab\xbb!?.,-`&#")
    assert not [c for c in chars if c.isalnum() and (c.isspace() or c in word_enders)]
    nltk_space = regex.compile(r"\s")  # whitespace to nltk's engine: none is a letter or digit either
    assert not [c for c in chars if c.isalnum() and nltk_space.match(c)]
    findall = sentences.PunktSplitter(PunktParameters())._word_tokenizer.findall
    for run in ["abc", "abc.", "x1.", "Straße.", "ΟΔΟΣ", "力加勝", "²³.", "Ⅻ"]:
        assert findall(run) == [run]
