"""From extracted articles to sentence shards: cleaning, Punkt sentence splitting, global mixing.

Offline by construction: the Punkt model is trained, unsupervised, on the corpus itself
(`train_punkt`) and committed as a pipeline output in JSON, so nothing calls
`nltk.download` and nothing depends on which nltk data a machine happens to have.

Every document goes to shard `hash(seed, page id) mod N` (`shard_of`), so each shard is a
uniform random sample of the whole dump while every step streams: `split_part` turns one
extracted part into N bucket files; once every part is split, `judge_splits` tells from their
counts alone whether the corpus fills the N shards, and `merge_shard` concatenates bucket i of
every part, in part order, into shard i, one shard independently of the others. The output is
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
from typing import Iterator

from nltk.tokenize.punkt import (_ORTHO_BEG_LC, _ORTHO_LC, _ORTHO_MID_UC, _ORTHO_UC, PunktLanguageVars, PunktParameters, PunktSentenceTokenizer, PunktToken,
                                  PunktTrainer)

from shardkit.atomic import atomic_dir, atomic_write, write_json
from shardkit.errors import PrepError
from shardkit.progress import Progress, Stage, throttle

from .clean import clean_document
from .extract import check_parts

log = logging.getLogger(__name__)


# nltk >= 3.9.3 runs every Punkt regex through `nltk.redos`: the `regex` engine with a timeout
# checked on each call, which halves the speed of splitting and training (profiled: ~50 us per
# candidate sentence end, most of it in those wrappers). These two classes compile nltk's own
# patterns, unchanged, with `re`; Punkt takes them through its public `lang_vars` and
# `token_cls` arguments. The sentences and the trained model are identical (tested); the
# patterns are the linear ones of nltk's ReDoS fix, not the backtracking pre-3.8.2 ones.

class PlainRegexLanguageVars(PunktLanguageVars):
    re_boundary_realignment = re.compile(PunktLanguageVars.re_boundary_realignment.pattern, re.MULTILINE)

    def _word_tokenizer_re(self):
        if not hasattr(self, "_plain_word_tokenizer"):
            self._plain_word_tokenizer = re.compile(
                self._word_tokenize_fmt % {"NonWord": self._re_non_word_chars, "MultiChar": self._re_multi_char_punct,
                                           "WordStart": self._re_word_start}, re.UNICODE | re.VERBOSE)
        return self._plain_word_tokenizer

    def period_context_re(self):
        if not hasattr(self, "_plain_period_context"):
            self._plain_period_context = re.compile(
                self._period_context_fmt % {"NonWord": self._re_non_word_chars,
                                            "SentEndChars": self._re_sent_end_chars}, re.UNICODE | re.VERBOSE)
        return self._plain_period_context


_NON_PUNCT_RE = re.compile(r"[^\W\d]")


class PlainRegexToken(PunktToken):
    """PunktToken with nltk's regexes compiled by `re`, made the cheap way: Punkt makes one per word (341,000 to
    train on 2 M characters), and nltk's __init__ sets each property with setattr() in a loop and computes the
    type (lowercased, numbers replaced) anew for every occurrence of a word. Here the properties are assigned
    directly and each word's type is looked up once (a pure function of the word; the table is bounded).
    Attributes, values and types are nltk's own."""

    __slots__ = ()
    _RE_ELLIPSIS = re.compile(PunktToken._RE_ELLIPSIS.pattern)
    _RE_NUMERIC = re.compile(PunktToken._RE_NUMERIC.pattern)
    _RE_INITIAL = re.compile(PunktToken._RE_INITIAL.pattern)
    _RE_ALPHA = re.compile(PunktToken._RE_ALPHA.pattern)
    MAX_TYPES = 200_000
    _types: dict[str, str] = {}

    def __init__(self, tok, parastart=None, linestart=None, **params):  # nltk passes these two, by name
        self.tok = tok
        kind = self._types.get(tok)
        if kind is None:
            if len(self._types) >= self.MAX_TYPES:
                self._types.clear()
            kind = self._types[tok] = self._get_type(tok)
        self.type = kind
        self.period_final = tok.endswith(".")
        self.parastart, self.linestart = parastart, linestart
        self.sentbreak = self.abbr = self.ellipsis = None
        if params:
            for key, value in params.items():
                setattr(self, key, value)

    @property
    def is_non_punct(self):
        return _NON_PUNCT_RE.search(self.type)


class PunktSplitter(PunktSentenceTokenizer):
    """Punkt's `tokenize`, the same sentences made with less work (profiled: ~70% of `split_part` went to
    nltk's span machinery). For every ".", "?" or "!" that may end a sentence, Punkt decides from the
    little context around it ("century. The") whether it does; the answer depends only on that string
    and the model, and the same contexts recur ("). In", "U.S. The"), so each is decided once. Bounded:
    the table is emptied when full. `tokenize` walks the candidates of a paragraph in one loop
    (`_sentence_spans`); each step that differs from nltk's says why the result is the same. Tested
    against nltk on a corpus of tricky cases and on real text."""

    MAX_CONTEXTS = 200_000

    def __init__(self, params: PunktParameters):
        super().__init__(params, lang_vars=PlainRegexLanguageVars(), token_cls=PlainRegexToken)
        self._decided: dict[str, bool] = {}
        self._facts: dict[str, tuple] = {}
        self._word_tokenizer = self._lang_vars._word_tokenizer_re()
        self._period_context = self._lang_vars.period_context_re()
        self._realignment = self._lang_vars.re_boundary_realignment

    def text_contains_sentbreak(self, text: str) -> bool:
        decided = self._decided.get(text)
        if decided is None:
            if len(self._decided) >= self.MAX_CONTEXTS:
                self._decided.clear()
            decided = self._decided[text] = self._contains_sentbreak(text)
        return decided

    def _contains_sentbreak(self, text: str) -> bool:
        """nltk's `text_contains_sentbreak`: is any token but the last a sentence break, once annotated?
        nltk builds a token object per word and runs them through four generators (`_tokenize_words`,
        `_annotate_first_pass`, `_annotate_second_pass`, `_pair_iter`); a token's final sentbreak depends
        only on its own first-pass annotation and the next token's (`_second_pass_annotation`), so this
        takes each word's first-pass facts from a table (`_word_facts`) and decides pair by pair.
        parastart and linestart, which nltk also sets, play no part in that decision."""
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

    def _word_facts(self, word: str) -> tuple:
        """What nltk's first pass (`_first_pass_annotation`) and PunktToken's properties say of one word:
        (sentbreak, abbr or ellipsis, period_final, type_no_period, type_no_sentperiod, is_initial,
        first_upper, first_lower, is one of PUNCTUATION). A pure function of the word; memoised, bounded."""
        if len(self._facts) >= self.MAX_CONTEXTS:
            self._facts.clear()
        token = PlainRegexToken(word)
        self._first_pass_annotation(token)
        fact = self._facts[word] = (
            bool(token.sentbreak), bool(token.abbr or token.ellipsis), token.period_final, token.type_no_period,
            token.type_no_sentperiod, bool(token.is_initial), token.first_upper, token.first_lower,
            word in self.PUNCTUATION)
        return fact

    def _breaks_before(self, fact1: tuple, fact2: tuple) -> bool:
        """The final sentbreak of a word (facts `fact1`) followed by another (`fact2`): nltk's
        `_second_pass_annotation`, with `_ortho_heuristic` inlined, on the first-pass facts."""
        sentbreak, abbr_or_ellipsis, period_final, typ, _, is_initial, _, _, _ = fact1
        if not period_final:
            return sentbreak
        _, _, _, _, next_typ, _, next_upper, next_lower, next_is_punctuation = fact2
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
        """nltk's `_ortho_heuristic` on a token's facts. `.get`, where nltk indexes its defaultdict: the
        same 0 for an unseen type, without adding it to the model's table."""
        if is_punctuation:
            return False
        ortho_context = self._params.ortho_context.get(typ, 0)
        if first_upper and (ortho_context & _ORTHO_LC) and not (ortho_context & _ORTHO_MID_UC):
            return True
        if first_lower and ((ortho_context & _ORTHO_UC) or not (ortho_context & _ORTHO_BEG_LC)):
            return False
        return "unknown"

    def tokenize(self, text: str, realign_boundaries: bool = True) -> list[str]:
        if not realign_boundaries:
            return super().tokenize(text, realign_boundaries)
        return [text[start:stop] for start, stop in self._sentence_spans(text)]

    def span_tokenize(self, text: str, realign_boundaries: bool = True) -> Iterator[tuple[int, int]]:
        if not realign_boundaries:
            return super().span_tokenize(text, realign_boundaries)
        return iter(self._sentence_spans(text))

    def _sentence_spans(self, text: str) -> list[tuple[int, int]]:
        """nltk's `span_tokenize` (`_match_potential_end_contexts`, `_slices_from_text` and
        `_realign_boundaries`, three generators chained by `_pair_iter`) as one pass over the
        candidate ends, then one over the slices."""
        slices = []
        if "." in text or "?" in text or "!" in text:  # else no candidate: only the last slice below
            decided, contains_sentbreak = self._decided, self.text_contains_sentbreak
            # nltk finds the word before a candidate by walking back, in Python, to the last character
            # of string.whitespace (ASCII only, not `\s`); str.rfind of each whitespace character that
            # occurs in the paragraph finds the same index.
            spaces = [c for c in "\t\n\r\x0b\x0c" if c in text]
            rfind = text.rfind
            last_break = 0
            previous = None  # nltk's previous_match
            previous_start = previous_stop = 0  # nltk's previous_slice: the word before `previous`
            for match in self._period_context.finditer(text):
                end_char = match.start()
                space = rfind(" ", previous_stop, end_char)
                for c in spaces:
                    space = max(space, rfind(c, space + 1 if space >= 0 else previous_stop, end_char))
                # nltk takes a whitespace at the very start of the searched text (index 0 of
                # `before_text`) for "none found", as it does a missing one; so does this test.
                word_start = space + 1 if space > previous_stop else previous_start
                # A candidate whose word reaches back over the previous candidate ("acting!!!")
                # replaces it: nltk yields the previous one only when the words do not overlap.
                if previous is not None and previous_stop <= word_start:
                    # nltk's context, text[previous_slice] + match.group() + match.group("after_tok"),
                    # is one contiguous piece of the text: the word ends where the match starts.
                    context = text[previous_start:previous.end(1)]
                    decision = decided.get(context)
                    if decision is None:
                        decision = contains_sentbreak(context)
                    if decision:
                        slices.append((last_break, previous_stop + 1))
                        next_token = previous.start(2)  # -1 when the next token is punctuation
                        last_break = next_token if next_token >= 0 else previous_stop + 1
                previous, previous_start, previous_stop = match, word_start, end_char
            if previous is not None:
                context = text[previous_start:previous.end(1)]
                decision = decided.get(context)
                if decision is None:
                    decision = contains_sentbreak(context)
                if decision:
                    slices.append((last_break, previous_stop + 1))
                    next_token = previous.start(2)
                    last_break = next_token if next_token >= 0 else previous_stop + 1
        else:
            last_break = 0
        # The last sentence should not contain trailing whitespace (nltk's `_slices_from_text`).
        slices.append((last_break, len(text.rstrip())))

        # nltk's `_realign_boundaries`: closing quotes or brackets that follow a sentence's end move
        # into it. The realignment pattern matches only text that starts with one of them, so the
        # regex runs only on such slices; it runs on the slice itself, as in nltk.
        spans = []
        realign = 0
        last = len(slices) - 1
        closers = self._CLOSERS
        realignment = self._realignment
        for i, (start, stop) in enumerate(slices):
            start += realign
            if i == last:
                if start < stop:  # nltk: `if text[sentence1]`; stop never exceeds len(text)
                    spans.append((start, stop))
                break
            next_start, next_stop = slices[i + 1]
            m = None
            if next_start < next_stop and text[next_start] in closers:
                m = realignment.match(text[next_start:next_stop])
            if m:
                spans.append((start, next_start + len(m.group(0).rstrip())))
                realign = m.end()
            else:
                realign = 0
                if start < stop:
                    spans.append((start, stop))
        return spans

    # The characters that can start a match of nltk's `re_boundary_realignment`, its first class.
    _CLOSERS = frozenset("\"')]}\u2018\u2019\u201c\u201d\xab\xbb")


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


def split_name(num_shards: int, seed: int, min_chars: int) -> str:
    """The folder name of one way of splitting a dump into sentence shards, e.g. 'n256_seed12345_min200'."""
    return f"n{num_shards}_seed{seed}_min{min_chars}"


def read_documents(extracted_path: str | Path, consumed: list[int] | None = None) -> Iterator[dict]:
    """Stream the documents of one extracted part (JSON lines with id, title, text). `consumed[0]`, when
    given, follows the bytes of the file read so far (to within the 8 KiB the text layer reads ahead)."""
    path = Path(extracted_path)
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise PrepError(f"{path}: extracted part not found") from None
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                doc["id"] = int(doc["id"])
                if not isinstance(doc["text"], str):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise PrepError(f"{path}: line {n} is not an extracted document (JSON with id and text)") from None
            if consumed is not None:
                consumed[0] = f.buffer.tell()
            yield doc


# Punkt learns abbreviations, collocations and sentence starters from counts; a few hundred
# thousand words are plenty for them, and training is slow (~0.4 MB/s, one core) and must
# finish before any part can be split. So it reads the first 2 million characters of clean
# article text, taken from the parts in order, not a share of the whole dump.
PUNKT_SAMPLE_CHARS = 2_000_000


def punkt_sample(extracted_paths: list[str | Path], *, min_chars: int = 0,
                 max_chars: int = PUNKT_SAMPLE_CHARS) -> list[str]:
    """Clean article texts from the extracted parts, in order, until `max_chars` are taken."""
    texts, taken = [], 0
    for path in extracted_paths:
        for doc in read_documents(path):
            paragraphs, _ = clean_document(doc, min_chars=min_chars)
            if not paragraphs:
                continue
            texts.append("\n".join(paragraphs))
            taken += len(texts[-1])
            if taken >= max_chars:
                return texts
    return texts


class PunktSample:
    """The Punkt training sample gathered part by part, as the extracted parts become ready.

    `add` reads one more extracted part (or slice), once, for what the sample still lacks;
    `full` says when no more are needed. `texts` is what `punkt_sample` gives for the same
    parts, and `source` names the parts read.
    """

    def __init__(self, *, min_chars: int = 0, max_chars: int = PUNKT_SAMPLE_CHARS):
        self.min_chars, self.max_chars = min_chars, max_chars
        self.texts: list[str] = []
        self.paths: list[Path] = []

    @property
    def chars(self) -> int:
        return sum(map(len, self.texts))

    @property
    def full(self) -> bool:
        return self.chars >= self.max_chars

    @property
    def source(self) -> str:
        return ", ".join(p.name for p in self.paths)

    def add(self, extracted_path: str | Path) -> None:
        self.paths.append(Path(extracted_path))
        self.texts += punkt_sample([extracted_path], min_chars=self.min_chars, max_chars=self.max_chars - self.chars)


def train_punkt(sample: list[str], out_path: str | Path, *, source: str = "the extracted parts") -> dict:
    """Train Punkt on the sample texts (see `punkt_sample`); commit its parameters as JSON."""
    stage = Stage(log, f"train Punkt on {source}")
    if not sample:
        raise PrepError(f"sentence model: no article text to train Punkt on in {source}")
    trainer = PunktTrainer(lang_vars=PlainRegexLanguageVars(), token_cls=PlainRegexToken)
    trainer.train("\n\n".join(sample), finalize=False)
    trainer.finalize_training()
    params = trainer.get_params()
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
        model = json.loads(path.read_text(encoding="utf-8"))
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


def document_sentences(paragraphs: list[str], splitter: PunktSentenceTokenizer) -> list[str]:
    out = []
    for paragraph in paragraphs:
        for sentence in splitter.tokenize(paragraph):
            sentence = " ".join(sentence.split())
            if sentence:
                out.append(sentence)
    return out


def bucket_name(shard: int) -> str:
    return f"bucket_{shard:05d}.txt"


def split_part(extracted_path: str | Path, punkt_path: str | Path, out_dir: str | Path, *, num_shards: int,
               seed: int, min_chars: int = 0, progress: Progress | None = None) -> dict:
    """Clean and sentence-split one extracted part into `num_shards` bucket files, committed as one folder.

    `progress(done, total)` counts the bytes of the extracted part read."""
    stage = Stage(log, f"split {Path(extracted_path).name}")
    progress = throttle(progress)
    splitter = load_punkt(punkt_path)
    dropped: Counter = Counter()
    documents = sentences = 0
    per_shard = [0] * num_shards
    consumed = [0]
    total = _size(extracted_path)
    if progress is not None:
        progress(0, total)
    with atomic_dir(out_dir) as tmp:
        files = [open(tmp / bucket_name(i), "w", encoding="utf-8", newline="\n") for i in range(num_shards)]
        try:
            for doc in read_documents(extracted_path, consumed):
                if progress is not None:
                    progress(consumed[0], total)
                paragraphs, reason = clean_document(doc, min_chars=min_chars)
                lines = document_sentences(paragraphs, splitter) if paragraphs else []
                if not lines:
                    dropped[reason or "no_sentences"] += 1
                    continue
                shard = shard_of(seed, doc["id"], num_shards)
                files[shard].write("\n".join(lines) + "\n\n")
                documents += 1
                sentences += len(lines)
                per_shard[shard] += 1
        finally:
            for f in files:
                f.close()
    if progress is not None:
        progress(total, total)
    stage.finish(documents, "documents", total)
    return {"documents": documents, "sentences": sentences, "dropped": dict(sorted(dropped.items())),
            "documents_per_shard": per_shard}


def _size(path: str | Path) -> int:
    """The size of an input file, 0 if it is missing (its reader names the problem)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def shard_name(shard: int) -> str:
    return f"shard_{shard:05d}.txt"


def judge_splits(split_stats: list[dict], extract_stats: list[dict], *, num_shards: int, source: str) -> dict:
    """What the sentence shards will hold, judged from the counts of every split before any shard is written.

    `split_stats` are `split_part`'s results for every part or slice, `extract_stats`
    `extract.extract_part`'s; no corpus text is read. Returns the documents of each shard (what
    `merge_shard` will count), their total, and the documents dropped at extraction and at
    cleaning, summed by reason. PrepError, naming `source` (the dump), when a part yields no
    article (`extract.check_parts`: a sliced part is judged whole), when no document survived
    at all, or when a shard would have none (more shards than the corpus fills: an empty shard
    would be an empty record file, which DALI's and other readers' index files refuse, so the
    run stops with one line rather than one error per shard later).
    """
    check_num_shards(num_shards)
    check_parts(extract_stats)
    dropped: dict[str, int] = {}
    for stats in split_stats + extract_stats:
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


def merge_shard(bucket_paths: list[str | Path], out_path: str | Path, progress: Progress | None = None) -> dict:
    """Concatenate one bucket of every part, in the given (part) order, into a sentence shard.

    Shard i is `bucket_name(i)` of every split in dump order: whatever merges it, alone or
    beside any others, writes the same bytes. Returns its documents and sentences.
    `progress(done, total)` counts the bytes of the buckets copied, bucket by bucket."""
    stage = Stage(log, f"merge {Path(out_path).name}")
    progress = throttle(progress)
    sizes = [_size(p) for p in bucket_paths]
    total = sum(sizes)
    documents = sentences = done = 0
    with atomic_write(out_path, "wb") as out:
        for path, size in zip(bucket_paths, sizes):
            if progress is not None:
                progress(done, total)
            with open(path, "rb") as f:
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
    return {"documents": documents, "sentences": sentences}
