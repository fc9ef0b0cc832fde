"""Punkt training in bulk: nltk's `PunktTrainer` model, with its per-word Python done once per distinct word.

`PunktTrainer.train` makes an object per word (341,000 for the 2 M characters `train_punkt` reads), annotates
each, and walks them several times in Python: four fifths of training. Yet every fact Punkt learns from a word
depends on the word alone (its type, its first-pass annotation: sentence break, abbreviation, ellipsis), on the
word before it (the orthographic context, the "word after a period" statistics), and on the corpus-wide counts.
So `train_parameters` finds the words (with an equivalent, faster regex: `word_finder`), counts them, builds one
token per DISTINCT word (~16,000) and lets nltk annotate it, does the per-position steps with numpy over word
ids, and hands the counts to nltk's own trainer: the abbreviation scores (`_reclassify_abbrev_types`), rare abbreviations, collocation candidates and
`finalize_training` (sentence starters, collocations) are nltk's code on nltk's inputs, so the floating-point
decisions are made by the same expressions. The model equals the one of `train(text, finalize=False)` +
`finalize_training()` (`nltk_parameters`, kept as the reference the tests compare against).

Where nltk's result could hang on order: its decisions are per type or per pair of words, each on totals
that are integers (so no float sum depends on order), and the sets it fills in a loop are only ever read back
for the key being decided (`_reclassify_abbrev_types` adds `t` from type `t.` and reads `t` back only when it
meets type `t`, with the same counts and score; a rare abbreviation is added once its own word qualifies). So
visiting distinct words and pairs instead of positions gives the same sets.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
from nltk.probability import FreqDist
from nltk.tokenize.punkt import (_ORTHO_MAP, PunktLanguageVars, PunktParameters, PunktToken, PunktTrainer)

from .punkt_regex import nltk_spaces

# The orthographic position of a word in `PunktTrainer._get_orthography_data`, as small ints for numpy.
_INTERNAL, _INITIAL, _UNKNOWN = 0, 1, 2
_CONTEXTS = {_INTERNAL: "internal", _INITIAL: "initial", _UNKNOWN: "unknown"}
_CASES = ("lower", "upper", "none")
# flag of (context, first case), 0 where nltk records nothing (a word that starts with no cased letter)
_ORTHO_FLAGS = np.array([[_ORTHO_MAP.get((_CONTEXTS[c], case), 0) for case in _CASES] for c in range(3)],
                        dtype=np.int64)


def nltk_parameters(text: str, lang_vars: PunktLanguageVars | None = None,
                    token_cls: type[PunktToken] = PunktToken) -> PunktParameters:
    """The reference: nltk's own trainer, one text, then finalized."""
    trainer = PunktTrainer(lang_vars=lang_vars, token_cls=token_cls)
    trainer.train(text, finalize=False)
    trainer.finalize_training()
    return trainer.get_params()


# nltk's word regex is `(MultiChar | (?=WordStart)\S+?(?=End) | \S)`: a word grows one character at a time,
# each step trying the five alternatives of End (whitespace, end, a non-word character, multi-character
# punctuation, a word-final comma); with the rest done in bulk, that is most of training's time (0.26 of 0.45 s
# on 2 MB). `_FAST_WORDS_FMT` finds the same words in 0.15 s:
# - a first alternative takes a run of word characters (`re`'s \w: letters, digits, "_"; none is whitespace to
#   either engine) followed by whitespace or the end. nltk takes the same word there: \w is none of MultiChar's
#   first characters ("-", "."), passes WordStart (all punctuation), and End fails before every \w character
#   (End looks at that character: not whitespace, not a non-word character, "-", "." or ","; `$` fails since
#   lines hold no newline), then holds;
# - otherwise nltk's three alternatives follow in nltk's order, the lazy `\S+?(?=End)` written as the greedy
#   `\S(?:(?!End)\S)*`, which stops at the same first position where End holds (at whitespace or the end it
#   does), with runs of \w taken at once for the same reason as above.
# Each \s and \S of both is then written as nltk's engine reads it (`nltk_spaces`). A test compares the two on
# random lines of the characters that matter.
_FAST_WORDS_FMT = r"""(
        \w++(?!\S)
        |
        %(MultiChar)s
        |
        (?=%(WordStart)s)\S(?:\w++|(?!%(End)s)\S)*
        |
        \S
    )"""
_END_FMT = r"\s|$|%(NonWord)s|%(MultiChar)s|,(?=$|\s|%(NonWord)s|%(MultiChar)s)"


def word_finder(lang_vars: PunktLanguageVars) -> Callable[[str], list[str]]:
    """`lang_vars.word_tokenize` as a function of one line: the faster, same regex when `lang_vars` runs nltk's
    pattern with `re` as `punkt_regex.PlainRegexLanguageVars` does (whitespace as nltk's engine reads it), else
    `lang_vars`' own regex."""
    own = lang_vars._word_tokenizer_re()
    nltk_vars = PunktLanguageVars()
    parts = {"NonWord": nltk_vars._re_non_word_chars, "MultiChar": nltk_vars._re_multi_char_punct,
             "WordStart": nltk_vars._re_word_start}
    if not isinstance(own, re.Pattern) or own.pattern != nltk_spaces(nltk_vars._word_tokenize_fmt % parts) or \
            (own.flags & ~re.UNICODE) != re.VERBOSE:
        return own.findall
    parts["End"] = _END_FMT % parts
    return re.compile(nltk_spaces(_FAST_WORDS_FMT % parts), re.UNICODE | re.VERBOSE).findall


def _words(text: str, lang_vars: PunktLanguageVars) -> tuple[list[str], list[int], list[int]]:
    """The words of `PunktBaseClass._tokenize_words`, with the positions of line and paragraph starts."""
    findall = word_finder(lang_vars)
    words: list[str] = []
    line_starts: list[int] = []
    para_starts: list[int] = []
    parastart = False
    for line in text.split("\n"):
        if line.strip():
            line_words = findall(line)
            if not line_words:
                continue
            if parastart:
                para_starts.append(len(words))
            line_starts.append(len(words))
            words += line_words
            parastart = False
        else:
            parastart = True
    return words, line_starts, para_starts


def train_parameters(text: str, lang_vars: PunktLanguageVars | None = None,
                     token_cls: type[PunktToken] = PunktToken) -> PunktParameters:
    """The parameters `nltk_parameters` learns from `text`, computed in bulk (see the module's docstring)."""
    lang_vars = lang_vars if lang_vars is not None else PunktLanguageVars()
    trainer = PunktTrainer(lang_vars=lang_vars, token_cls=token_cls)
    params = trainer._params
    words, line_starts, para_starts = _words(text, lang_vars)
    index = {word: i for i, word in enumerate(dict.fromkeys(words))}  # distinct words, in order of appearance
    ids = np.array(list(map(index.__getitem__, words)), dtype=np.int64)
    n_of = np.bincount(ids, minlength=len(index))
    tokens = [token_cls(word) for word in index]  # one per distinct word, annotated below as nltk does each

    # _train_tokens, part 1: type frequencies and the period-final count.
    type_counts: dict[str, int] = {}
    for tok, n in zip(tokens, n_of.tolist()):
        type_counts[tok.type] = type_counts.get(tok.type, 0) + n
    trainer._type_fdist = type_fdist = FreqDist(type_counts)
    period_final = np.array([tok.period_final for tok in tokens], dtype=bool)
    trainer._num_period_toks = int(n_of[period_final].sum())
    trainer._finalized = False

    # Part 2: abbreviations by score, nltk's loop verbatim. With no abbreviation known beforehand, only a type
    # ending in a period can add one (or remove it: a type `t` is met once `t.` added it, scored the same).
    period_types = {typ for typ in type_counts if typ.endswith(".")}
    for abbr, score, is_add in trainer._reclassify_abbrev_types(period_types):
        if score >= trainer.ABBREV:
            if is_add:
                params.abbrev_types.add(abbr)
        elif not is_add:
            params.abbrev_types.remove(abbr)

    # Part 3: the first pass annotates by the word alone, so once per distinct word.
    for tok in tokens:
        trainer._first_pass_annotation(tok)
    rows = [(bool(t.sentbreak), bool(t.sentbreak and (t.is_number or t.is_initial)), bool(t.ellipsis or t.abbr),
             _CASES.index(t.first_case)) for t in tokens]
    facts = np.array(rows, dtype=np.int64).reshape(len(tokens), 4)
    sentbreak, number_or_initial, unknown_after = (facts[:, j].astype(bool) for j in range(3))
    case = facts[:, 3]

    # Part 4: orthographic contexts (`_get_orthography_data`). The context a word leaves for the next one
    # depends on the word; a line or paragraph start then overrides it, in nltk's order.
    leaves = np.where(sentbreak, np.where(number_or_initial, _UNKNOWN, _INITIAL),
                      np.where(unknown_after, _UNKNOWN, _INTERNAL))
    context = np.empty(len(ids), dtype=np.int64)
    if len(ids):
        context[0] = _INTERNAL
        context[1:] = leaves[ids[:-1]]
        para = np.array(para_starts, dtype=np.int64)
        context[para] = np.where(context[para] != _UNKNOWN, _INITIAL, context[para])
        line = np.array(line_starts, dtype=np.int64)
        context[line] = np.where(context[line] == _INTERNAL, _UNKNOWN, context[line])
    flags = np.zeros(len(tokens), dtype=np.int64)
    np.bitwise_or.at(flags, ids, _ORTHO_FLAGS[context, case[ids]])
    for tok, flag in zip(tokens, flags.tolist()):
        if flag:
            params.add_ortho_context(tok.type_no_sentperiod, flag)

    # Part 5: the sentence-break count, and nltk's loop over a period-final word and the word after it. Each of
    # its three heuristics needs the first word to be a sentence break (INCLUDE_ALL_COLLOCS and
    # INCLUDE_ABBREV_COLLOCS are off), so only those pairs are looked at, each distinct pair once.
    trainer._sentbreak_count = int(n_of[sentbreak].sum())
    first = np.flatnonzero((period_final & sentbreak)[ids[:-1]])
    # A rare abbreviation (`_is_rare_abbrev_type`) is a type seen fewer than ABBREV_BACKOFF times, counted
    # nltk's way; only the pairs whose first word passes that are asked.
    rare = np.zeros(len(tokens), dtype=bool)
    for i in np.unique(ids[first]).tolist():
        typ = tokens[i].type_no_sentperiod
        rare[i] = type_fdist[typ] + type_fdist[typ[:-1]] < trainer.ABBREV_BACKOFF
    for i, j in _distinct_pairs(ids, first[rare[ids[first]]]):
        tok1, tok2 = tokens[i], tokens[j]
        if trainer._is_rare_abbrev_type(tok1, tok2):
            params.abbrev_types.add(tok1.type_no_period)
    # A collocation (`_is_potential_collocation`) starts with a number or an initial.
    collocations = FreqDist()
    for (i, j), n in _distinct_pairs(ids, first[number_or_initial[ids[first]]]).items():
        tok1, tok2 = tokens[i], tokens[j]
        if trainer._is_potential_collocation(tok1, tok2):
            collocations[(tok1.type_no_period, tok2.type_no_sentperiod)] += n
    # A sentence starter (`_is_potential_sent_starter`) is an alphabetic word after any other sentence break.
    sent_starters = FreqDist()
    after = np.bincount(ids[first[~number_or_initial[ids[first]]] + 1], minlength=len(tokens))
    for i in np.flatnonzero(after).tolist():
        if tokens[i].is_alpha:
            sent_starters[tokens[i].type] += int(after[i])
    trainer._sent_starter_fdist, trainer._collocation_fdist = sent_starters, collocations

    trainer.finalize_training()
    return trainer.get_params()


def _distinct_pairs(ids: np.ndarray, positions: np.ndarray) -> dict[tuple[int, int], int]:
    """How often each distinct (word at p, word at p + 1) occurs at the positions p."""
    base = int(ids.max()) + 1 if len(ids) else 1
    pairs, counts = np.unique(ids[positions] * base + ids[positions + 1], return_counts=True)
    return {divmod(pair, base): n for pair, n in zip(pairs.tolist(), counts.tolist())}
