"""Punkt trained in bulk (`wikiprep.punkt_training`) learns exactly nltk's model: same abbreviations,
collocations, sentence starters and orthographic contexts, so `train_punkt` writes the same bytes."""

import json
import os
import random
import subprocess
import sys

import pytest
from nltk.tokenize.punkt import PunktLanguageVars, PunktToken

from wikiprep import punkt_training, sentences
from wikiprep.punkt_regex import PlainRegexLanguageVars, PlainRegexToken
from wikiprep.wikipedia.source import extracted_documents

from fixture_paths import REFERENCE_INPUTS

# What `benchmarks/bench_pipeline.py` leaves in this checkout (skipped without it)


def model(params):
    return {"abbrev_types": sorted(params.abbrev_types), "collocations": sorted(params.collocations),
            "sent_starters": sorted(params.sent_starters), "ortho_context": sorted(params.ortho_context.items())}


def nltk_model(text, lang_vars_cls=PunktLanguageVars):
    """The reference: nltk's own trainer, with its own patterns, tokens and `regex` engine."""
    return model(punkt_training.nltk_parameters(text, lang_vars_cls(), PunktToken))


def bulk_model(text, lang_vars_cls=PlainRegexLanguageVars):
    """What train_punkt computes."""
    return model(punkt_training.train_parameters(text, lang_vars_cls(), PlainRegexToken))


def tricky_text(seed: int, sentences_count: int = 1500) -> str:
    """Sentences full of what Punkt decides on: abbreviations, initials, numbers and ordinals, ellipses,
    lowercase after a period, quotes, "?" and "!", unicode words, odd line and paragraph breaks."""
    rng = random.Random(seed)
    names = ["Smith", "Jones", "Müller", "Øster", "İnce", "Straße", "Σωκράτης", "Иванов", "東京", "O'Neil"]
    words = ["the", "mill", "grew", "river", "and", "of", "a", "near", "north", "café", "naïve", "über", "years",
             "ran", "Berlin", "Paris", "was", "built", "in", "by", "Ärger", "ﬁne", "x²", "co-op", "A&B", "#5",
             "e\u0301", "CO₂", "\U00011f50", "a\x1cb"]
    starters = ["The", "It", "He", "She", "In", "This", "After", "however", "and", "Later", "¿Qué", "“Why",
                # letters to one of `re` and nltk's `regex` engine only (punkt_regex)
                "X²", "Ле\u0301то", "A‿b", "\U00011f04"]
    pieces = [
        lambda: f"Dr. {rng.choice(names)}", lambda: f"Mr. {rng.choice(names)}", lambda: "e.g. apples",
        lambda: "i.e. pears", lambda: "U.S. officials", lambda: "etc., and", lambda: "J. R. R. Tolkien",
        lambda: f"{rng.choice('ABCDEFGH')}. {rng.choice(names)}", lambda: f"{rng.randint(1, 31)}. Juli",
        lambda: f"{rng.randint(1, 9)}.{rng.randint(0, 99)} km", lambda: f"in {rng.randint(1800, 2020)}.",
        lambda: "wait... what", lambda: "so . . . then", lambda: "this -- that", lambda: "St. Wesanholm",
        lambda: "(see p. 4)", lambda: "he said “Stop.” then", lambda: "'Quoted.' Done", lambda: "vs. them",
        lambda: "No. 5", lambda: "Fig. 3", lambda: "approx. 12", lambda: "Inc. and Co.", lambda: "Xyzq. , so",
        lambda: "Qrst. later", lambda: "«Oui.» Non", lambda: "really?! yes", lambda: "what? no", lambda: "A.B.C.",
        lambda: "-1.5e3", lambda: ".5 and ,5", lambda: "1,000.", lambda: "a.m. today", lambda: "Ph.D. students",
    ]
    out = []
    for _ in range(sentences_count):
        body = [rng.choice(starters)]
        for _ in range(rng.randint(2, 12)):
            body.append(rng.choice(pieces)() if rng.random() < 0.3 else rng.choice(words))
        end = rng.choice([".", ".", ".", "?", "!", "...", ".\"", ".)", "", ".”"])
        out.append(" ".join(body) + end)
        out.append(rng.choice([" ", " ", " ", "  ", "\n", "\n\n", "\n \n", "\n\n\n", "\t", "\n  \t\n"]))
    return "".join(out)


TINY = ["", " ", "\n", "\n\n \n", "Hello", "Hello.", "no periods here at all, none", "A.", ".", "...", "?", "!!",
        "Dr. Smith. Dr. Jones.", "\n\n  \nA. b.\n\n\nC.", "a\n\nb", "end.\n", "3.5. 4.5.", ". . . .", "-- --", ",",
        "x. , y", "İ. İ. İ.", "J. R. R. Tolkien", "lower. lower. lower.", "“Quoted.” «Too.» (Paren.)",
        "1. 2. 3. 4. 5. 6. 7. 8. 9.", "a. b. c. d. e. f. g. a. b. c.", "\n\n\nDr.\n\nSmith\n", "…. ‘x.’ ’y.’"]


@pytest.mark.parametrize("text", TINY, ids=range(len(TINY)))
def test_bulk_training_equals_nltk_on_tiny_texts(text):
    assert bulk_model(text) == nltk_model(text)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bulk_training_equals_nltk_on_tricky_text(seed):
    text = tricky_text(seed)
    ours = bulk_model(text)
    assert ours == nltk_model(text)
    # the texts do exercise every part of the model
    assert {"dr", "e.g", "i.e", "u.s", "mr"} <= set(ours["abbrev_types"])
    assert ours["collocations"] and ours["sent_starters"] and len(ours["ortho_context"]) > 50


def test_bulk_training_equals_nltk_with_other_sentence_ends():
    """A language with other sentence-ending characters tokenizes with its own regex, and still agrees."""
    class SemicolonEnds(PlainRegexLanguageVars):
        sent_end_chars = (".", "?", "!", ";")

    class StockSemicolonEnds(PunktLanguageVars):
        sent_end_chars = (".", "?", "!", ";")

    text = tricky_text(4, 400).replace(" and ", "; Zebra ")
    ours = bulk_model(text, SemicolonEnds)
    assert ours == nltk_model(text, StockSemicolonEnds)
    assert dict(ours["ortho_context"])["zebra"] != dict(bulk_model(text)["ortho_context"])["zebra"]


def test_fast_word_regex_finds_nltks_words():
    """`word_finder`'s regex against nltk's on random lines of the characters its proof is about."""
    lang_vars = PlainRegexLanguageVars()
    nltk_words, fast_words = PunktLanguageVars()._word_tokenizer_re().findall, punkt_training.word_finder(lang_vars)
    rng = random.Random(15)
    alphabets = ["a. ,-", "a.,-( ?'", "aZé9_ .,-'\"()[]{}:;&#*@?!`/$%\t‘’“”«»\xa0\u0301²一…\x1f\r\u2028٠",
                 "a. ,-\x1c\x1d\x1e\x1f\x85\u3000\u200d‿\U00011f50"]
    lines = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
             for alphabet in alphabets for _ in range(15000)]
    expected = [nltk_words(line) for line in lines]
    assert [fast_words(line) for line in lines] == expected
    assert [lang_vars._word_tokenizer_re().findall(line) for line in lines] == expected
    assert fast_words is not lang_vars._word_tokenizer_re().findall  # the fast one is the one tested
    stock = PunktLanguageVars()  # nltk's own regex, run by `regex`, and its own tokenizer
    assert [punkt_training.word_finder(stock)(line) for line in lines[-2000:]] == \
        [stock.word_tokenize(line) for line in lines[-2000:]]


def test_bulk_training_equals_nltk_on_the_fixture_texts():
    for path in sorted(REFERENCE_INPUTS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        assert bulk_model(text) == nltk_model(text), path.name


def test_bulk_training_equals_nltk_on_a_synthetic_part(synthetic_part):
    extracted, _ = synthetic_part
    sample = sentences.PunktSample()
    sample.add(extracted.stem, extracted_documents(extracted, min_chars=200))
    text = "\n\n".join(sample.texts)
    ours = bulk_model(text)
    assert ours == nltk_model(text)
    assert len(ours["abbrev_types"]) > 10 and len(ours["ortho_context"]) > 1000


def test_train_punkt_writes_the_same_bytes_whatever_the_hash_seed(tmp_path):
    """Types reach nltk's decisions in set order; the model must not depend on it."""
    text = (REFERENCE_INPUTS / "synthetic_docs.txt").read_text()
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps([text[:100_000], tricky_text(5, 500)]))
    code = ("import json, sys; from wikiprep import sentences; "
            "sentences.train_punkt(json.load(open(sys.argv[1])), sys.argv[2])")
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"punkt{seed}.json"
        subprocess.run([sys.executable, "-c", code, str(sample), str(out)], check=True,
                       env=dict(os.environ, PYTHONHASHSEED=seed))
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and json.loads(outs[0])["abbrev_types"]
