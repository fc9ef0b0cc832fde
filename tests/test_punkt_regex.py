"""nltk's Punkt patterns run by `re` (`wikiprep.punkt_regex`) match what nltk's own `regex` engine matches,
on every character Python knows."""

import re
import sys

import pytest
import regex
from nltk.tokenize.punkt import PunktLanguageVars, PunktToken

from wikiprep import punkt_regex
from wikiprep.punkt_regex import NONSPACE, SPACE, PlainRegexLanguageVars, PlainRegexToken, nltk_spaces

EVERY_CHAR = "".join(map(chr, range(sys.maxunicode + 1)))


def test_space_and_nonspace_are_nltks_whitespace_on_every_character():
    theirs = set(regex.findall(r"\s", EVERY_CHAR))
    assert set(re.findall(SPACE, EVERY_CHAR)) == theirs
    assert set(re.findall(NONSPACE, EVERY_CHAR)) == set(EVERY_CHAR) - theirs
    # what the rewrite is for, and the bound punkt_regex computes them under
    assert set(re.findall(r"\s", EVERY_CHAR)) - theirs == set("\x1c\x1d\x1e\x1f")
    assert max(map(ord, theirs | set(re.findall(r"\s", EVERY_CHAR)))) <= 0x3000


@pytest.mark.parametrize("only_re, only_regex", [("", ""), ("\x1c\x1f", ""), ("", "\u180e"), ("\x1c", "\u180e\U0001d000")])
def test_space_classes_for_any_difference(only_re, only_regex):
    """Had the engines disagreed the other way too (a character whitespace to `regex` only), the classes
    would still say what `regex` means."""
    re_spaces = "".join(sorted(set(re.findall(r"\s", EVERY_CHAR)) | set(only_re)))
    theirs = "".join(sorted((set(re_spaces) - set(only_re)) | set(only_regex)))
    space, nonspace = punkt_regex.space_classes(re_spaces, theirs)
    chars = EVERY_CHAR[:0x3100] + only_regex
    assert set(re.findall(space, chars)) == set(theirs) & set(chars)
    assert set(re.findall(nonspace, chars)) == set(chars) - set(theirs)


def test_nltk_spaces_rewrites_only_whitespace_escapes_outside_classes():
    assert nltk_spaces(r"a\sb\S+") == f"a{SPACE}b{NONSPACE}+"
    assert nltk_spaces(r"\\s[\]s]\w\.") == r"\\s[\]s]\w\."  # an escaped backslash, a class, other escapes
    with pytest.raises(ValueError, match="inside a character class"):
        nltk_spaces(r"[]\s]")  # a first "]" is a literal: the \s is still inside
    with pytest.raises(ValueError, match="inside a character class"):
        nltk_spaces(r"x[^a\S]")
    assert nltk_spaces(r"[^]]\s") == f"[^]]{SPACE}"


def test_punkt_patterns_match_as_nltks_on_whitespace_of_both_engines():
    """Every text-wide pattern, on lines of the characters where the engines part, finds what nltk's finds."""
    import random

    ours, stock = PlainRegexLanguageVars(), PunktLanguageVars()
    pairs = [(ours._word_tokenizer_re().findall, stock._word_tokenizer_re().findall),
             (lambda t: [m.span() for m in ours.period_context_re().finditer(t)],
              lambda t: [m.span() for m in stock.period_context_re().finditer(t)]),
             (lambda t: [m.span() for m in ours.re_boundary_realignment.finditer(t)],
              lambda t: [m.span() for m in stock.re_boundary_realignment.finditer(t)])]
    rng = random.Random(7)
    alphabet = "a.?! ,)\"'\n\t\x1c\x1d\x1e\x1f\x85\xa0\u2028\u3000-"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(5000)]
    for mine, theirs in pairs:
        assert [mine(t) for t in texts] == [theirs(t) for t in texts]


def test_token_properties_are_nltks_where_the_engines_part():
    """Type, number, initial, letters-only and non-punctuation of words made of every character whose \\w or
    \\d differs between `re` and `regex` (combining marks, superscripts, letters and digits newer than
    Python's Unicode tables, ...), and of a sample of all the others."""
    differ = (set(re.findall(r"\w", EVERY_CHAR)) ^ set(regex.findall(r"\w", EVERY_CHAR))) | \
        (set(re.findall(r"\d", EVERY_CHAR)) ^ set(regex.findall(r"\d", EVERY_CHAR)))
    assert len(differ) > 20_000
    chars = sorted(differ) + list(EVERY_CHAR[::97])
    words = [w for c in chars for w in (c, c + ".", "a" + c, "1" + c + ".")]
    props = ("type", "is_number", "is_initial", "is_alpha", "is_non_punct", "is_ellipsis")

    def facts(token):
        return tuple(bool(getattr(token, p)) if p != "type" else token.type for p in props)

    PlainRegexToken._types.clear()
    assert [facts(PlainRegexToken(w)) for w in words] == [facts(PunktToken(w)) for w in words]
