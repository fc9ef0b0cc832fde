"""Punkt training in bulk: nltk's `PunktTrainer` model, with its per-word Python done once per distinct word.

`PunktTrainer.train` makes an object per word (341,000 for the 2 M characters `train_punkt` reads), annotates
each, and walks them three times in Python; that is ~85% of training. Yet every fact Punkt learns from a word
depends on the word alone (its type, its first-pass annotation: sentence break, abbreviation, ellipsis), on the
word before it (the orthographic context, the "word after a period" statistics), and on the corpus-wide counts.
So `train_parameters` tokenizes with the same regex, counts, builds one token per DISTINCT word (~16,000) and
lets nltk annotate it, does the per-position steps with numpy over word ids, and hands the counts to nltk's own
trainer: the abbreviation scores (`_reclassify_abbrev_types`), rare abbreviations, collocation candidates and
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

from collections import Counter

import numpy as np
from nltk.probability import FreqDist
from nltk.tokenize.punkt import (_ORTHO_MAP, PunktLanguageVars, PunktParameters, PunktToken, PunktTrainer)

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


def _words(text: str, lang_vars: PunktLanguageVars) -> tuple[list[str], list[int], list[int]]:
    """The words of `PunktBaseClass._tokenize_words`, with the positions of line and paragraph starts."""
    findall = lang_vars._word_tokenizer_re().findall
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

    # _train_tokens, part 1: type frequencies and the period-final count.
    counts = Counter(words)
    distinct = list(counts)
    n_of = list(counts.values())
    tokens = [token_cls(w) for w in distinct]  # one per distinct word, annotated below like every occurrence
    type_fdist = FreqDist()
    for tok, n in zip(tokens, n_of):
        type_fdist[tok.type] += n
    trainer._type_fdist = type_fdist
    trainer._num_period_toks = sum(n for tok, n in zip(tokens, n_of) if tok.period_final)
    trainer._finalized = False

    # Part 2: abbreviations by score, nltk's loop over the distinct types verbatim.
    for abbr, score, is_add in trainer._reclassify_abbrev_types({tok.type for tok in tokens}):
        if score >= trainer.ABBREV:
            if is_add:
                params.abbrev_types.add(abbr)
        elif not is_add:
            params.abbrev_types.remove(abbr)

    # Part 3: the first pass annotates by the word alone, so once per distinct word.
    for tok in tokens:
        trainer._first_pass_annotation(tok)

    index = {w: i for i, w in enumerate(distinct)}
    ids = np.array([index[w] for w in words], dtype=np.int64)
    sentbreak = np.array([bool(t.sentbreak) for t in tokens], dtype=bool)
    number_or_initial = np.array([bool(t.is_number or t.is_initial) for t in tokens], dtype=bool)
    unknown_after = np.array([bool(t.ellipsis or t.abbr) for t in tokens], dtype=bool)

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
    case = np.array([_CASES.index(t.first_case) for t in tokens], dtype=np.int64)
    flags = np.zeros(len(tokens), dtype=np.int64)
    np.bitwise_or.at(flags, ids, _ORTHO_FLAGS[context, case[ids]])
    for tok, flag in zip(tokens, flags.tolist()):
        if flag:
            params.add_ortho_context(tok.type_no_sentperiod, flag)

    # Part 5: the sentence-break count, and the statistics of a period-final word and the word after it.
    trainer._sentbreak_count = int(np.dot(sentbreak, n_of)) if tokens else 0
    period_final = np.array([t.period_final for t in tokens], dtype=bool)
    # Every heuristic of nltk's pair loop needs the first word to be a sentence break (INCLUDE_ALL_COLLOCS and
    # INCLUDE_ABBREV_COLLOCS are off), so only those pairs are kept, counted per distinct pair.
    first = np.flatnonzero((period_final & sentbreak)[ids[:-1]])
    pairs, pair_counts = np.unique(ids[first] * len(tokens) + ids[first + 1], return_counts=True)
    sent_starters, collocations = FreqDist(), FreqDist()
    for pair, n in zip(pairs.tolist(), pair_counts.tolist()):
        tok1, tok2 = tokens[pair // len(tokens)], tokens[pair % len(tokens)]
        if trainer._is_rare_abbrev_type(tok1, tok2):
            params.abbrev_types.add(tok1.type_no_period)
        if trainer._is_potential_sent_starter(tok2, tok1):
            sent_starters[tok2.type] += n
        if trainer._is_potential_collocation(tok1, tok2):
            collocations[(tok1.type_no_period, tok2.type_no_sentperiod)] += n
    trainer._sent_starter_fdist, trainer._collocation_fdist = sent_starters, collocations

    trainer.finalize_training()
    return trainer.get_params()
