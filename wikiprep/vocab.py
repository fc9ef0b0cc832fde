"""A WordPiece vocabulary trained on the corpus, deterministically.

HF `tokenizers`' WordPiece trainer breaks ties between equally frequent pairs in hash-map
order, so two runs on the same text give vocabularies that differ by a few tokens
(tokenizers #717; measured here: 12-18 of 3,000 tokens differ between process starts).
Every downstream byte depends on the vocabulary, so we train it ourselves the same way
(BPE merges with `##` continuation pieces, as `tokenizers`' WordPiece trainer does) but
break ties by the pair's text. `tokenizers` still does the fast part: BERT normalisation
and pre-tokenisation of every line.

Memory is bounded: words are counted from at most `max_chars` characters of text taken
evenly from the input files in their given order.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections import Counter, defaultdict
from pathlib import Path

from tokenizers import normalizers, pre_tokenizers

from shardkit.atomic import write_text
from shardkit.errors import PrepError
from shardkit.progress import Progress, Stage, throttle
from shardkit.verified import Remainders, open_committed

from .tokenization import Vocab

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# A vocabulary to train holds the special tokens and at least some characters.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 1
TOO_SMALL = f"must be more than the {len(SPECIAL_TOKENS)} special tokens"
PREFIX = "##"

log = logging.getLogger(__name__)


def count_words(files: list[str | Path], *, lowercase: bool = True, max_chars: int = 200_000_000,
                progress: Progress | None = None) -> Counter:
    """Count the pre-tokenized words of (a bounded, evenly spread sample of) `files`.

    `progress(done, total)` counts characters taken; the total is what the files can give at most (each
    file's share of `max_chars`, or its size when smaller), and becomes the count taken once every file is read."""
    normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None, clean_text=True,
                                            handle_chinese_chars=True)
    pre = pre_tokenizers.BertPreTokenizer()
    counts: Counter = Counter()
    budget = max_chars // max(1, len(files))
    progress = throttle(progress)
    total = sum(min(budget, _size(p)) for p in files)
    before = 0  # characters taken from the files before this one
    # A committed file is checked against its receipt: what the share reads as it reads it, the rest in a
    # thread while the next file is counted (`Remainders`), before any vocabulary is made of it.
    with Remainders() as remainders:
        for path in files:
            taken = 0
            try:
                f = open_committed(path, "r", encoding="utf-8", errors="ignore")
            except FileNotFoundError:
                raise PrepError(f"{path}: no such file (vocabulary training input)") from None
            try:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    taken += len(line)
                    counts.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(line)))
                    if progress is not None:
                        progress(min(before + taken, total), total)  # a file's last line may pass its share
                    if taken >= budget:
                        break
            except BaseException:
                f.close()
                raise
            remainders.add(f)
            before += taken
    if progress is not None:
        progress(before, before)
    return counts


def _size(path: str | Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# The alphabet: every character that occurs at least once per CHARS_PER_KEPT_CHARACTER characters of the text
# counted (and at least once), rather than a fixed number of the most frequent ones: a Chinese or Japanese text
# uses thousands of characters (a word with a character left out becomes [UNK]), an English one a few hundred,
# and in a large sample the rarest (stray symbols, a name in another script) are left out. On the 200 M
# characters TrainVocab counts at most, a character is kept from 200 occurrences; on a text of under a million
# characters, every character is.
CHARS_PER_KEPT_CHARACTER = 1_000_000


def alphabet_threshold(total_chars: int) -> int:
    """How often a character must occur, among `total_chars` counted, to be in the alphabet."""
    return max(1, -(-total_chars // CHARS_PER_KEPT_CHARACTER))


def _alphabet(word_counts: Counter, vocab_size: int) -> set[str]:
    """The characters kept (`alphabet_threshold`). When their forms (bare at a word's start, `##` inside one)
    would leave the vocabulary no room, the most frequent that fit (ties by text); the log says what was
    left out."""
    char_counts: Counter = Counter()
    forms: dict[str, set[str]] = defaultdict(set)
    for word, n in word_counts.items():
        forms[word[0]].add(word[0])
        for ch in word:
            char_counts[ch] += n
        for ch in word[1:]:
            forms[ch].add(PREFIX + ch)
    total = sum(char_counts.values())
    threshold = alphabet_threshold(total)
    frequent = sorted((ch for ch, n in char_counts.items() if n >= threshold), key=lambda ch: (-char_counts[ch], ch))
    room, keep = vocab_size - len(SPECIAL_TOKENS), set()
    for ch in frequent:
        room -= len(forms[ch] - set(SPECIAL_TOKENS))
        if room < 0:
            break
        keep.add(ch)
    left_out = len(char_counts) - len(keep)
    if left_out:
        share = sum(n for ch, n in char_counts.items() if ch not in keep) / total
        reason = (f"they occur fewer than {threshold} times (once per {CHARS_PER_KEPT_CHARACTER:,} characters)"
                  if len(keep) == len(frequent) else
                  f"the {len(frequent)} characters occurring {threshold} times or more do not all fit in "
                  f"--vocab-size {vocab_size}")
        log.info("vocabulary alphabet: %d characters kept, %d left out (%.4f%% of the characters counted): %s; "
                 "words with them become [UNK]", len(keep), left_out, 100 * share, reason)
    return keep


def train_wordpiece(word_counts: Counter, vocab_size: int, *, min_frequency: int = 2) -> list[str]:
    """BPE-style WordPiece training over word counts; ties broken by text, so the result is deterministic.

    Returns the vocabulary in id order: special tokens, the alphabet (the characters `_alphabet` keeps, in
    their forms that occur, sorted), then merges in order. Fewer tokens than `vocab_size` when no pair of
    pieces occurs `min_frequency` times any more (the log says so).
    """
    if not word_counts:
        raise PrepError("vocabulary training: the corpus has no words")
    keep = _alphabet(word_counts, vocab_size)

    # Each distinct word as its list of symbols: first character bare, the rest `##`-prefixed.
    words: list[list[str]] = []
    freqs: list[int] = []
    alphabet: set[str] = set()
    for word, n in sorted(word_counts.items()):
        if any(ch not in keep for ch in word):
            continue  # rare characters become [UNK] anyway
        symbols = [word[0]] + [PREFIX + ch for ch in word[1:]]
        alphabet.update(symbols)
        words.append(symbols)
        freqs.append(n)

    vocab = list(SPECIAL_TOKENS) + sorted(alphabet - set(SPECIAL_TOKENS))
    seen = set(vocab)

    pair_counts: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    # Max-heap by count, then smallest text first; stale entries are skipped when popped.
    heap = [(-c, pair) for pair, c in pair_counts.items()]
    heapq.heapify(heap)

    rare_pairs = False  # whether merging stopped at a pair rarer than min_frequency
    while len(vocab) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg:
            continue
        if -neg < min_frequency:
            rare_pairs = True
            break
        a, b = pair
        merged = a + b[len(PREFIX):] if b.startswith(PREFIX) else a + b
        if merged not in seen:
            seen.add(merged)
            vocab.append(merged)
        changed: set[tuple[str, str]] = set()
        for i in sorted(where.pop(pair, ())):
            symbols, n = words[i], freqs[i]
            for old in zip(symbols, symbols[1:]):
                pair_counts[old] -= n
                changed.add(old)
            out, j = [], 0
            while j < len(symbols):
                if j + 1 < len(symbols) and symbols[j] == a and symbols[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(symbols[j])
                    j += 1
            words[i] = out
            for new in zip(out, out[1:]):
                pair_counts[new] += n
                where[new].add(i)
                changed.add(new)
        pair_counts.pop(pair, None)
        for p in changed:
            c = pair_counts.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_counts.pop(p, None)
    if len(vocab) < vocab_size:
        why = (f"no pair of pieces occurs {min_frequency} times or more any more" if rare_pairs else
               "every word of the text is a single piece already")
        log.warning("vocabulary: %d tokens of the %d asked: %s (the text is too small for more; "
                    "a larger corpus or a smaller --vocab-size)", len(vocab), vocab_size, why)
    return vocab


def build_vocab(files: list[str | Path], out_path: str | Path, *, vocab_size: int = 30522,
                lowercase: bool = True, min_frequency: int = 2, max_chars: int = 200_000_000,
                progress: Progress | None = None) -> dict:
    """Train a vocabulary on `files` and commit it as a BERT `vocab.txt` (one token per line).

    `progress(done, total)` follows the counting of words, which takes most of the time (`count_words`)."""
    stage = Stage(log, f"train vocabulary {Path(out_path).name}")
    words = count_words(files, lowercase=lowercase, max_chars=max_chars, progress=progress)
    vocab = train_wordpiece(words, vocab_size, min_frequency=min_frequency)
    write_text(out_path, "".join(tok + "\n" for tok in vocab))
    stage.finish(len(words), "distinct words")
    return {"vocab_size": len(vocab), "requested_vocab_size": vocab_size}


def check_vocab_size(vocab_size: int) -> None:
    """A vocabulary to train must hold the special tokens and at least some characters."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise PrepError(f"--vocab-size {vocab_size}: {TOO_SMALL}")


def check_vocab_file(path: str | Path, do_lower_case: bool | None = None) -> int:
    """Raise PrepError unless `path` is a BERT vocabulary the pipeline can use ([UNK] included, and cased as
    `do_lower_case` says when it says how it is cased); returns its size."""
    vocab = Vocab.load(path, require_unk=True)
    if do_lower_case is not None:
        vocab.check_case(do_lower_case, "--do-lower-case")
    return vocab.size
