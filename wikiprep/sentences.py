"""From a corpus' documents to sentence shards: Punkt sentence splitting, global mixing.

Offline by construction: the Punkt model is trained, unsupervised, on the corpus itself
(`train_punkt`) and committed as a pipeline output in JSON, so nothing calls
`nltk.download` and nothing depends on which nltk data a machine happens to have.

The documents come from any `corpus.Source`, already cleaned. Every document goes to shard
`hash(seed, document id) mod N` (`shard_of`), so each shard is a uniform random sample of the
whole corpus while every step streams: `split_piece` turns the documents of one piece into N
bucket files; once every piece is split, `judge_splits` tells from their counts alone whether
the corpus fills the N shards, and `merge_shard` concatenates bucket i of every piece, in corpus
order, into shard i, one shard independently of the others. The output is
the original BERT generator's input format: one sentence per line, a blank line between documents.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from nltk.tokenize.punkt import (_ORTHO_BEG_LC, _ORTHO_LC, _ORTHO_MID_UC, _ORTHO_UC, PunktParameters,
                                 PunktSentenceTokenizer)

from shardkit.atomic import atomic_dir, atomic_write, write_json
from shardkit.errors import PrepError
from shardkit.progress import Progress, Stage, throttle
from shardkit.verified import open_committed, read_committed

from .corpus import Document
from .punkt_regex import SPACE, PlainRegexLanguageVars, PlainRegexToken
from .punkt_training import train_parameters

log = logging.getLogger(__name__)


# Whitespace as nltk's patterns mean it (not U+001C-U+001F, which `re`'s \s takes: punkt_regex).
_WHITESPACE = re.compile(SPACE)


class PunktSplitter(PunktSentenceTokenizer):
    """nltk's Punkt `tokenize`: the same sentences, with much less work per candidate sentence end.

    For every ".", "?" or "!" that may end a sentence, nltk takes the little context around it
    ("century. The"), makes a token object per word of it, runs them through four generators and
    keeps the break if a word but the last ends up a sentence break. Profiled, that machinery was
    ~70% of splitting a piece. Here (`_sentence_spans`) one loop finds the candidates and their words
    as nltk does, and a candidate is decided from the two whitespace-free runs around its gap
    ("century." and "The", `_run`), each analysed once per splitter: runs recur far more than whole
    contexts. Each step that differs from nltk's says why the result is the same; tests compare
    the sentences with stock nltk's on tricky cases and on real text."""

    # Each table is emptied when full: at ~160 bytes an entry, under 50 MB for the three. A 8 MB
    # extracted part fills them to ~20,000 entries each.
    MAX_ENTRIES = 100_000

    def __init__(self, params: PunktParameters):
        super().__init__(params, lang_vars=PlainRegexLanguageVars(), token_cls=PlainRegexToken)
        self._decided: dict[str, bool] = {}  # context -> nltk's text_contains_sentbreak
        self._runs: dict[str, tuple | bool] = {}  # run of text -> `_run`
        self._facts: dict[str, tuple] = {}  # word -> `_word_facts`
        # The types that start a known collocation: the only first words whose break the collocation
        # heuristic can undo (`_word_facts`).
        self._collocation_firsts = {first for first, _ in params.collocations}
        self._word_tokenizer = self._lang_vars._word_tokenizer_re()
        self._period_context = self._lang_vars.period_context_re()
        # The same pattern for "." alone: it starts with a literal, which `re` finds several times
        # faster than a character class. A match of the pattern is one end character and a
        # lookahead, and finditer tries every position, so in a text without the other end
        # characters ("?", "!"), which is most paragraphs of prose, both find the same matches.
        self._period_only_context = self._lang_vars.period_context_of(r"\.")
        self._other_end_chars = [c for c in self._lang_vars.sent_end_chars if c != "."]
        self._realignment = self._lang_vars.re_boundary_realignment

    def tokenize(self, text: str, realign_boundaries: bool = True) -> list[str]:
        """The sentences of `text`, as nltk's `tokenize` gives them."""
        if not realign_boundaries:
            return super().tokenize(text, realign_boundaries)
        return [text[start:stop] for start, stop in self._sentence_spans(text)]

    def span_tokenize(self, text: str, realign_boundaries: bool = True) -> Iterator[tuple[int, int]]:
        if not realign_boundaries:
            return super().span_tokenize(text, realign_boundaries)
        return iter(self._sentence_spans(text))

    def _sentence_spans(self, text: str) -> list[tuple[int, int]]:
        """nltk's `span_tokenize`: `_match_potential_end_contexts`, `_slices_from_text` and
        `_realign_boundaries`, three generators chained by `_pair_iter`, as three plain loops."""
        last_break = 0
        slices = []
        closers = self._CLOSERS
        realign = False  # whether a slice but the first starts with a closer, see below
        finditer = self._period_only_context.finditer if "." in text else None
        for c in self._other_end_chars:
            if c in text:
                finditer = self._period_context.finditer
                break
        # With no ".", "?" or "!" there is no candidate: only the last slice below.
        if finditer is not None:
            # `_match_potential_end_contexts`. nltk finds the word before a candidate by walking
            # back, in Python, to the last character of string.whitespace (ASCII only, not `\s`);
            # str.rfind of each whitespace character that occurs in the text finds the same index.
            rfind = text.rfind
            spaces = [c for c in "\t\n\r\x0b\x0c" if c in text]
            candidates = []  # (the start of the word before, the match), as nltk yields them
            previous = None
            previous_start = previous_stop = 0  # nltk's previous_slice: the word before `previous`
            for match in finditer(text):
                end_char = match.start()
                space = rfind(" ", previous_stop, end_char)
                if spaces:
                    for c in spaces:
                        space = max(space, rfind(c, space + 1 if space >= 0 else previous_stop, end_char))
                # nltk takes a whitespace at the very start of the searched text (index 0 of its
                # `before_text`) for "none found", as it does a missing one; so does this test.
                word_start = space + 1 if space > previous_stop else previous_start
                # A candidate whose word reaches back over the previous candidate ("acting!!!")
                # replaces it: nltk yields the previous one only when the words do not overlap.
                if previous is not None and previous_stop <= word_start:
                    candidates.append((previous_start, previous))
                previous, previous_start, previous_stop = match, word_start, end_char
            if previous is not None:
                candidates.append((previous_start, previous))

            # `_slices_from_text`.
            runs, decided = self._runs, self._decided
            for word_start, match in candidates:
                end = match.end()
                next_start = match.start(2)  # the next word; -1 when punctuation follows the end
                run1 = False
                if next_start >= 0:
                    run1 = runs.get(text[word_start:end])
                    if run1 is None:
                        run1 = self._run(text[word_start:end])
                if run1 is False:
                    # Not the shape `_run` decides (punctuation right after the end character, or
                    # whitespace in the word before, which nltk's ASCII-only search can leave):
                    # nltk's context, text[previous_slice] + match.group() + match.group("after_tok"),
                    # is one contiguous piece of the text, as the word ends where the match starts.
                    context = text[word_start:match.end(1)]
                    is_break = decided.get(context)
                    if is_break is None:
                        is_break = self.text_contains_sentbreak(context)
                else:
                    is_break = run1[3]
                    if is_break is False:  # no break in run1, whatever follows: is there one in run2?
                        run2 = runs.get(text[next_start:match.end(2)])  # `\S+`: never whitespace
                        if run2 is None:
                            run2 = self._run(text[next_start:match.end(2)])
                        is_break = run2[2]
                    elif is_break is None:  # run1's last word depends on the next: once per context
                        context = text[word_start:match.end(2)]
                        is_break = decided.get(context)
                        if is_break is None:
                            is_break = self._decide_runs(context, run1, text[next_start:match.end(2)])
                if is_break:
                    slices.append((last_break, end))
                    # The next sentence starts at the next word, or at the punctuation that follows.
                    last_break = next_start if next_start >= 0 else end
                    if text[last_break] in closers:  # in range: a match has a character after it
                        realign = True
        # The last sentence should not contain trailing whitespace (nltk's comment).
        slices.append((last_break, len(text.rstrip())))

        # `_realign_boundaries`: closing quotes or brackets that follow a sentence's end move into it.
        # nltk's realignment pattern matches only text that starts with one of them; when no slice
        # but the first does, it only drops empty slices (nltk: `if text[sentence1]`; no stop
        # exceeds len(text)).
        if not realign:
            return [span for span in slices if span[0] < span[1]]
        return self._realign_boundaries_of(text, slices)

    def _realign_boundaries_of(self, text: str, slices: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """nltk's `_realign_boundaries` on a list of slices; its pattern runs only on slices that start
        with a closer, and on the slice itself, as in nltk."""
        spans = []
        realign = 0
        last = len(slices) - 1
        closers = self._CLOSERS
        for i, (start, stop) in enumerate(slices):
            start += realign
            if i == last:
                if start < stop:  # nltk: `if text[sentence1]`; stop never exceeds len(text)
                    spans.append((start, stop))
                break
            next_start, next_stop = slices[i + 1]
            m = None
            if next_start < next_stop and text[next_start] in closers:
                m = self._realignment.match(text[next_start:next_stop])
            if m:
                spans.append((start, next_start + len(m.group(0).rstrip())))
                realign = m.end()
            else:
                realign = 0
                if start < stop:
                    spans.append((start, stop))
        return spans

    # The characters that can start a match of nltk's `re_boundary_realignment`: its first class.
    _CLOSERS = frozenset("\"')]}\u2018\u2019\u201c\u201d\xab\xbb")

    def text_contains_sentbreak(self, text: str) -> bool:
        """nltk's answer, memoised: it depends only on the text and the model."""
        decided = self._decided.get(text)
        if decided is None:
            if len(self._decided) >= self.MAX_ENTRIES:
                self._decided.clear()
            decided = self._decided[text] = self._contains_sentbreak(text)
        return decided

    def _contains_sentbreak(self, text: str) -> bool:
        """nltk's `text_contains_sentbreak`: is any word but the last a sentence break once annotated?
        A word's final sentbreak depends only on its own first-pass annotation and the next word's
        (`_annotate_second_pass` gives `_second_pass_annotation` each word with the next one, annotated
        by the first pass only), so this takes the words' first-pass facts from a table
        (`_word_facts`) and decides pair by pair, with no token objects or generators. parastart and
        linestart, which nltk also sets, play no part in the decision."""
        findall = self._word_tokenizer.findall
        if "\n" in text:  # nltk tokenizes line by line, skipping blank lines
            words = [w for line in text.split("\n") if line.strip() for w in findall(line)]
        else:
            words = findall(text) if text.strip() else []
        facts = self._facts
        previous = None
        for word in words:
            fact = facts.get(word)
            if fact is None:
                fact = self._word_facts(word)
            if previous is not None and self._breaks_before(previous, fact):
                return True
            previous = fact
        return False

    def _decide_runs(self, context: str, run1: tuple, after: str) -> bool:
        """`text_contains_sentbreak(context)` for a context made of run1, whitespace and the run `after`
        (see `_run`), memoised as such."""
        run2 = self._runs.get(after)
        if run2 is None:
            run2 = self._run(after)
        is_break = run1[2] or run2[2] or self._breaks_before(run1[1], run2[0])
        if len(self._decided) >= self.MAX_ENTRIES:
            self._decided.clear()
        self._decided[context] = is_break
        return is_break

    def _run(self, run: str) -> tuple | bool:
        """A run of text without whitespace, on either side of a candidate's gap: (facts of its first
        word, facts of its last word, whether a word but its last is a break, whether its last word is
        a break whatever run follows: True, False or None for "depends on the next word"), or False
        for a text with whitespace in it.

        Why a context "<run1><whitespace><run2>" is decided from its runs: nltk's word tokenizer
        (`_word_tokenize_fmt`) takes whitespace into no token but `(?:\\.\\s){2,}\\.` (". . ."), which
        cannot match across the gap (a second ". " would need whitespace in run2), and where a run
        ends its lookaheads see whitespace (`\\s`) in the context and the end (`$`) in the run
        alone, both of which end a token; nothing in the pattern looks behind. So the context's words
        are run1's then run2's, however nltk cuts it into lines, and it holds a break if run1 has
        one inside, run2 has one inside, or run1's last word breaks before run2's first."""
        if len(self._runs) >= self.MAX_ENTRIES:
            self._runs.clear()
        facts = self._facts
        if run.isalnum() or (run[-1] == "." and run[:-1].isalnum()):
            # One word, which findall would return whole: letters and digits are no whitespace, no
            # character of NonWord, MultiChar or the comma rule, and may start a word; nor does a
            # final "." end one early (it is in none of those; two would be MultiChar).
            fact = facts.get(run) or self._word_facts(run)
            result = (fact, fact, False, fact[0])
        elif _WHITESPACE.search(run):
            result = False
        else:
            words = [facts.get(word) or self._word_facts(word) for word in self._word_tokenizer.findall(run)]
            inner = any(self._breaks_before(word, after) for word, after in zip(words, words[1:]))
            result = (words[0], words[-1], inner, True if inner else words[-1][0])
        self._runs[run] = result
        return result

    def _word_facts(self, word: str) -> tuple:
        """What nltk's first pass (`_first_pass_annotation`) and PunktToken's properties say of one word:
        (final, sentbreak, abbr or ellipsis, period_final, type_no_period, type_no_sentperiod, is_initial,
        first_upper, first_lower, is one of PUNCTUATION), computed as nltk does, without a token object.
        `final` is the word's sentbreak when no next word can change it, else None:
        `_second_pass_annotation` changes only words ending in a period that start a known collocation,
        are abbreviations, ellipses or initials, or are numbers. A pure function of the word and the
        model; memoised."""
        if len(self._facts) >= self.MAX_ENTRIES:
            self._facts.clear()
        typ = PlainRegexToken._RE_NUMERIC.sub("##number##", word.lower())  # PunktToken._get_type
        period_final = word.endswith(".")
        sentbreak = abbr_or_ellipsis = False
        if word in self._lang_vars.sent_end_chars:
            sentbreak = True
        elif PlainRegexToken._RE_ELLIPSIS.match(word):
            abbr_or_ellipsis = True
        elif period_final and not word.endswith(".."):
            abbrev_types = self._params.abbrev_types
            if word[:-1].lower() in abbrev_types or word[:-1].lower().split("-")[-1] in abbrev_types:
                abbr_or_ellipsis = True
            else:
                sentbreak = True
        type_no_period = typ[:-1] if len(typ) > 1 and typ[-1] == "." else typ
        is_initial = PlainRegexToken._RE_INITIAL.match(word) is not None
        final = None
        if not period_final or not (type_no_period in self._collocation_firsts or abbr_or_ellipsis or is_initial
                                    or type_no_period == "##number##"):
            final = sentbreak
        fact = self._facts[word] = (
            final, sentbreak, abbr_or_ellipsis, period_final, type_no_period,
            type_no_period if sentbreak else typ, is_initial, word[0].isupper(), word[0].islower(),
            word in self.PUNCTUATION)
        return fact

    def _breaks_before(self, fact1: tuple, fact2: tuple) -> bool:
        """The final sentbreak of a word (facts `fact1`) followed by another (`fact2`): nltk's
        `_second_pass_annotation`, with `_ortho_heuristic` inlined, on the first-pass facts."""
        final, sentbreak, abbr_or_ellipsis, _, typ, _, is_initial, _, _, _ = fact1
        if final is not None:
            return final
        _, _, _, _, _, next_typ, _, next_upper, next_lower, next_is_punctuation = fact2
        params = self._params
        if (typ, next_typ) in params.collocations:
            return False
        if abbr_or_ellipsis and not is_initial:
            if self._ortho_heuristic_of(next_typ, next_upper, next_lower, next_is_punctuation) is True:
                return True
            if next_upper and next_typ in params.sent_starters:
                return True
        if is_initial or typ == "##number##":
            is_sent_starter = self._ortho_heuristic_of(next_typ, next_upper, next_lower, next_is_punctuation)
            if is_sent_starter is False:
                return False
            if (is_sent_starter == "unknown" and is_initial and next_upper
                    and not (params.ortho_context.get(next_typ, 0) & _ORTHO_LC)):
                return False
        return sentbreak

    def _ortho_heuristic_of(self, typ: str, first_upper: bool, first_lower: bool, is_punctuation: bool):
        """nltk's `_ortho_heuristic` on a word's facts. `.get` where nltk indexes its defaultdict: the
        same 0 for an unseen type, without adding it to the model's table."""
        if is_punctuation:
            return False
        ortho_context = self._params.ortho_context.get(typ, 0)
        if first_upper and (ortho_context & _ORTHO_LC) and not (ortho_context & _ORTHO_MID_UC):
            return True
        if first_lower and ((ortho_context & _ORTHO_UC) or not (ortho_context & _ORTHO_BEG_LC)):
            return False
        return "unknown"


# Languages written without spaces between sentences: a sentence ends at a full stop, exclamation or question
# mark of the CJK scripts, with nothing after it (`SpacelessSplitter`). Wikimedia's codes (a dump's xml:lang):
# Chinese and its Wikipedias (Cantonese, Wu, Gan, Classical Chinese) and Japanese.
SPACELESS_LANGUAGES = frozenset({"zh", "ja", "yue", "wuu", "gan", "lzh", "zh-yue", "zh-classical", "zh-hans",
                                 "zh-hant", "zh-cn", "zh-tw", "zh-hk", "zh-sg", "zh-mo", "zh-my"})

# The characters that end a sentence in those scripts: the ideographic full stop and its half-width form, the
# full-width exclamation and question marks; and the full-width full stop (the period of Japanese technical
# writing), but not between digits, where it is a decimal point.
_SPACELESS_ENDS = "\u3002\uff61\uff01\uff1f"
_FULL_WIDTH_STOP = "(?<![0-9\uff10-\uff19])\uff0e(?![0-9\uff10-\uff19])"
# Closing quotes and brackets, ASCII and full-width: they stay with the sentence they close.
SENTENCE_CLOSERS = ("\"')]}\u2019\u201d\u00bb\u203a\u300d\u300f\uff09\u3011\u3015\u3009\u300b\u3017\u3019"
                    "\u301b\u301e\u301f\uff3d\uff5d\uff63\uff02\uff07")
_CLOSERS = "[" + re.escape(SENTENCE_CLOSERS) + "]*"
# A character of the CJK scripts (CJK punctuation, kana, Han, full-width forms): an ASCII "!" or "?" right
# before one (closers between) ends a sentence too; before whitespace, Punkt decides.
_CJK_CHAR = "[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\U00020000-\U0003134f]"
_SPACELESS_END = re.compile(f"(?:[{_SPACELESS_ENDS}]|{_FULL_WIDTH_STOP}|[!?](?={_CLOSERS}{_CJK_CHAR}))"
                            f"[{_SPACELESS_ENDS}\uff0e!?]*{_CLOSERS}")


# A language code as Wikimedia writes them (xml:lang): "en", "zh", "zh-yue", "be-tarask". It becomes part of a
# folder's name (`split_name`), so nothing else is taken.
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")


def check_language(language: str) -> str:
    """`language` as a code (lower case); PrepError unless it is one, such as "zh", "ja" or "zh-yue"."""
    code = language.strip().lower()
    if not _LANGUAGE_CODE.fullmatch(code):
        raise PrepError(f"--language {language!r}: expected a language code such as en, zh, ja or zh-yue")
    return code


def is_spaceless(language: str | None) -> bool:
    """Whether `language` (a code such as "zh", "ja", "zh-yue"; any case) is written without spaces between sentences."""
    return language is not None and language.lower() in SPACELESS_LANGUAGES


def is_english(language: str | None) -> bool:
    """Whether `language` is English or not known (None): the sentences and datasets made before languages were."""
    return language is None or language.lower().split("-")[0] == "en"


class SpacelessSplitter:
    """Sentence splitting for Chinese and Japanese: a sentence ends after a run of CJK end marks (`。！？｡`, `．`
    but between digits, and an ASCII "!" or "?" right before a CJK character), the closing quotes and
    brackets after it kept with it; inside each such piece, Punkt splits the rest (runs of Latin script,
    where "." and whitespace end sentences). An end mark with nothing after it in the paragraph needs no cut."""

    def __init__(self, punkt: PunktSplitter):
        self.punkt = punkt

    def tokenize(self, text: str) -> list[str]:
        out = []
        start = 0
        for match in _SPACELESS_END.finditer(text):
            end = match.end()
            if end < len(text) and not text[end:].isspace():
                out += self.punkt.tokenize(text[start:end])
                start = end
        out += self.punkt.tokenize(text[start:])
        return out


def sentence_splitter(punkt: PunktSplitter, language: str | None) -> PunktSplitter | SpacelessSplitter:
    """The splitter of a corpus in `language`: Punkt alone, or for a language written without spaces between
    sentences (`is_spaceless`) its end marks first, then Punkt."""
    return SpacelessSplitter(punkt) if is_spaceless(language) else punkt


def stable_hash(*parts) -> int:
    """64 bits of the sha256 of the parts joined by ":": the same on every run, machine and Python hash seed.

    The one recipe behind every seeded choice of the pipeline: a page's shard (`shard_of`) and a
    shard's generation seed (`dataset.shard_seed`).
    """
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def shard_of(seed: int, page_id: int, num_shards: int) -> int:
    """The shard of a page: stable across runs, machines and Python hash seeds."""
    return stable_hash(seed, page_id) % num_shards


def split_name(num_shards: int, seed: int, min_chars: int, language: str | None = None) -> str:
    """The folder name of one way of splitting a dump into sentence shards, e.g. 'n256_seed12345_min200', or
    'n256_seed12345_min200_ja' for a language given by hand (`--language`): other sentences than the
    corpus' own language gives, in a folder of their own."""
    name = f"n{num_shards}_seed{seed}_min{min_chars}"
    return name if language is None else f"{name}_{language}"


# Punkt learns abbreviations, collocations and sentence starters from counts; a few hundred
# thousand words are plenty for them, and training is slow (~0.4 MB/s, one core) and must
# finish before any part can be split. So it reads the first 2 million characters of clean
# article text, taken from the parts in order, not a share of the whole dump.
PUNKT_SAMPLE_CHARS = 2_000_000


def punkt_sample(pieces: Iterable[Iterable[Document]], *, max_chars: int = PUNKT_SAMPLE_CHARS) -> list[str]:
    """The texts of the kept documents of `pieces` (each an iterable of documents, in corpus order), until
    `max_chars` are taken: a document's paragraphs joined by newlines."""
    texts, taken = [], 0
    for documents in pieces:
        for doc in documents:
            if not doc.paragraphs:
                continue
            texts.append("\n".join(doc.paragraphs))
            taken += len(texts[-1])
            if taken >= max_chars:
                return texts
    return texts


class PunktSample:
    """The Punkt training sample gathered piece by piece, as the pieces become ready.

    `add` reads one more piece's documents, once, for what the sample still lacks; `full` says
    when no more are needed. `texts` is what `punkt_sample` gives for the same pieces, and
    `source` names the pieces read.
    """

    def __init__(self, *, max_chars: int = PUNKT_SAMPLE_CHARS):
        self.max_chars = max_chars
        self.texts: list[str] = []
        self.names: list[str] = []

    @property
    def chars(self) -> int:
        return sum(map(len, self.texts))

    @property
    def full(self) -> bool:
        return self.chars >= self.max_chars

    @property
    def source(self) -> str:
        return ", ".join(self.names)

    def add(self, name: str, documents: Iterable[Document]) -> None:
        self.names.append(name)
        self.texts += punkt_sample([documents], max_chars=self.max_chars - self.chars)


def train_punkt(sample: list[str], out_path: str | Path, *, source: str = "the extracted parts") -> dict:
    """Train Punkt on the sample texts (see `punkt_sample`); commit its parameters as JSON."""
    stage = Stage(log, f"train Punkt on {source}")
    if not sample:
        raise PrepError(f"sentence model: no article text to train Punkt on in {source}")
    params = train_parameters("\n\n".join(sample), PlainRegexLanguageVars(), PlainRegexToken)  # nltk's model
    model = {
        "format": "wikiprep-punkt-1",
        "abbrev_types": sorted(params.abbrev_types),
        "collocations": sorted([list(c) for c in params.collocations]),
        "sent_starters": sorted(params.sent_starters),
        "ortho_context": sorted([k, v] for k, v in params.ortho_context.items()),
        "trained_on_chars": sum(len(t) for t in sample),
    }
    write_json(out_path, model)
    stage.finish(len(sample), "documents", model["trained_on_chars"])
    return {"abbreviations": len(model["abbrev_types"]), "trained_on_chars": model["trained_on_chars"]}


def load_punkt(path: str | Path) -> PunktSplitter:
    path = Path(path)
    try:
        model = json.loads(read_committed(path).decode("utf-8"))
        params = PunktParameters()
        params.abbrev_types = set(model["abbrev_types"])
        params.collocations = {tuple(c) for c in model["collocations"]}
        params.sent_starters = set(model["sent_starters"])
        for k, v in model["ortho_context"]:
            params.ortho_context[k] = v
    except FileNotFoundError:
        raise PrepError(f"{path}: sentence model not found") from None
    except (ValueError, KeyError, TypeError):
        raise PrepError(f"{path}: not a wikiprep Punkt model") from None
    return PunktSplitter(params)


def document_sentences(paragraphs: list[str], splitter: PunktSentenceTokenizer | SpacelessSplitter) -> list[str]:
    """The sentences of a document, each with its whitespace made single spaces, empty ones dropped."""
    out = []
    for paragraph in paragraphs:
        sentences = splitter.tokenize(paragraph)
        if paragraph.isprintable() and "  " not in paragraph:
            # No whitespace but lone spaces (every other whitespace character is unprintable), as
            # cleaning leaves nearly every paragraph: in a piece of it, " ".join(s.split()) only drops
            # a space at either end, which strip does for a tenth of the cost.
            out += filter(None, map(str.strip, sentences))
        else:
            for sentence in sentences:
                sentence = " ".join(sentence.split())
                if sentence:
                    out.append(sentence)
    return out


def bucket_name(shard: int) -> str:
    return f"bucket_{shard:05d}.txt"


class _Buckets:
    """The `num_shards` bucket files of one split, written with at most one file open at a time, whatever the
    number of shards: each bucket's text is held in memory and appended to its file (opened, written, closed) when
    all of it held reaches FLUSH_CHARS, and at the end. Thousands of shards thus need no open-file limit above the
    usual 1,024, and memory stays bounded; the bytes are those of one file per shard written in order."""

    FLUSH_CHARS = 16 << 20

    def __init__(self, folder: Path, num_shards: int):
        self.paths = [folder / bucket_name(i) for i in range(num_shards)]
        self.held: list[list[str]] = [[] for _ in range(num_shards)]
        self.chars = 0
        for path in self.paths:  # every bucket exists, an empty one too
            path.touch()

    def write(self, shard: int, text: str) -> None:
        self.held[shard].append(text)
        self.chars += len(text)
        if self.chars >= self.FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        for path, held in zip(self.paths, self.held):
            if held:
                with open(path, "a", encoding="utf-8", newline="\n") as f:
                    f.write("".join(held))
                held.clear()
        self.chars = 0


def split_piece(documents: Iterable[Document], punkt_path: str | Path | None, out_dir: str | Path, *, num_shards: int,
                seed: int, size: int = 0, language: str | None = None, progress: Progress | None = None) -> dict:
    """Sentence-split the documents of one piece into `num_shards` bucket files, committed as one folder.

    The splitter is the corpus' `language`'s (`sentence_splitter`). A document goes to bucket
    `shard_of(seed, id, num_shards)`; one the source dropped, or with no sentence, is counted by reason. A
    document whose paragraphs are already sentences (`split` False) is not split again; `punkt_path` None when
    no document needs splitting. `progress(done, total)` counts the bytes of the piece read, of `size`."""
    stage = Stage(log, f"split {Path(out_dir).name}")
    progress = throttle(progress)
    splitter = None if punkt_path is None else sentence_splitter(load_punkt(punkt_path), language)
    dropped: Counter = Counter()
    documents_kept = sentences = 0
    per_shard = [0] * num_shards
    if progress is not None:
        progress(0, size)
    with atomic_dir(out_dir) as tmp:
        buckets = _Buckets(tmp, num_shards)
        for doc in documents:
            if progress is not None:
                progress(doc.read, size)
            if not doc.paragraphs or not doc.split:  # a dropped document has nothing to split
                lines = doc.paragraphs
            elif splitter is None:
                raise ValueError(f"document {doc.id} needs splitting, and no sentence model was given")
            else:
                lines = document_sentences(doc.paragraphs, splitter)
            if not lines:
                dropped[doc.dropped or "no_sentences"] += 1
                continue
            shard = shard_of(seed, doc.id, num_shards)
            buckets.write(shard, "\n".join(lines) + "\n\n")
            documents_kept += 1
            sentences += len(lines)
            per_shard[shard] += 1
        buckets.flush()
    if progress is not None:
        progress(size, size)
    stage.finish(documents_kept, "documents", size)
    return {"documents": documents_kept, "sentences": sentences, "dropped": dict(sorted(dropped.items())),
            "documents_per_shard": per_shard}


def _size(path: str | Path) -> int:
    """The size of an input file, 0 if it is missing (its reader names the problem)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def shard_name(shard: int) -> str:
    return f"shard_{shard:05d}.txt"


def judge_splits(split_stats: list[dict], upstream_stats: list[dict], *, num_shards: int, source: str) -> dict:
    """What the sentence shards will hold, judged from the counts of every split before any shard is written.

    `split_stats` are `split_piece`'s results for every piece; `upstream_stats` the results of the
    source's own steps before splitting (Wikipedia's extraction), each with the documents it dropped
    by reason (`dropped`); no corpus text is read. Returns the documents of each shard (what
    `merge_shard` will count), their total, and the documents dropped before and at splitting,
    summed by reason. PrepError, naming `source` (the corpus), when no document survived
    at all, or when a shard would have none (more shards than the corpus fills: an empty shard
    would be an empty record file, which DALI's and other readers' index files refuse, so the
    run stops with one line rather than one error per shard later).
    """
    dropped: dict[str, int] = {}
    for stats in split_stats + upstream_stats:
        for reason, n in stats["dropped"].items():
            dropped[reason] = dropped.get(reason, 0) + n
    per_shard = [sum(stats["documents_per_shard"][i] for stats in split_stats) for i in range(num_shards)]
    documents = sum(per_shard)
    if documents == 0:
        raise PrepError(f"{source}: no article survived extraction and cleaning (dropped: {dropped or 'none'})")
    empty = per_shard.count(0)
    if empty:
        raise PrepError(f"--num-shards {num_shards}: {empty} of the sentence shards would be empty ({source} "
                        f"has {documents} documents after cleaning, spread by hash); give fewer shards, "
                        f"at most about {max(1, documents // 8)} for this corpus")
    return {"documents": documents, "documents_per_shard": per_shard, "dropped": dict(sorted(dropped.items()))}


def check_num_shards(num_shards: int) -> None:
    if num_shards < 1:
        raise PrepError(f"--num-shards {num_shards}: must be at least 1")


def check_shard(shard: int, num_shards: int) -> None:
    if not 0 <= shard < num_shards:
        raise PrepError(f"--shard {shard}: must be from 0 to {num_shards - 1} (--num-shards {num_shards})")


def merge_shard(bucket_paths: list[str | Path], out_path: str | Path, progress: Progress | None = None,
                sources: Sequence[int] | None = None) -> dict:
    """Concatenate one bucket of every part, in the given (part) order, into a sentence shard.

    Shard i is `bucket_name(i)` of every split in dump order: whatever merges it, alone or
    beside any others, writes the same bytes. Returns its documents and sentences.
    `progress(done, total)` counts the bytes of the buckets copied, bucket by bucket. For a shard of
    several sources (a mixture), `sources` gives the source of each bucket (0, 1, ..., each source's buckets
    together, in order) and the result `source_starts` too: the byte offset where each source starts
    (`instances.read_corpus`)."""
    stage = Stage(log, f"merge {Path(out_path).name}")
    progress = throttle(progress)
    sizes = [_size(p) for p in bucket_paths]
    total = sum(sizes)
    documents = sentences = done = 0
    source_starts = []
    with atomic_write(out_path, "wb") as out:
        for n, (path, size) in enumerate(zip(bucket_paths, sizes)):
            if progress is not None:
                progress(done, total)
            while sources is not None and len(source_starts) <= sources[n]:
                source_starts.append(done)
            try:
                f = open_committed(path)  # a bucket is checked against its split's receipt as it is copied
            except FileNotFoundError:
                raise PrepError(f"{path}: sentence bucket not found (its piece's split was removed?)") from None
            with f:
                for line in f:
                    out.write(line)
                    if line == b"\n":
                        documents += 1
                    else:
                        sentences += 1
            done += size
    if progress is not None:
        progress(total, total)
    stage.finish(documents, "documents", total)
    return {"documents": documents, "sentences": sentences,
            **({} if sources is None else {"source_starts": source_starts})}
