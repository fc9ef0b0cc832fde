"""BERT pre-training instances (masked LM + next sentence), the same as google-research/bert makes.

For the same input files, vocab, flags and seed this module writes the instances of
google-research/bert's `create_pretraining_data.py` (Apache-2.0, Copyright 2018 The Google AI
Language Team Authors), in the same order, every feature equal. That needs the same
`random.Random(seed)` call sequence as the original, so `generate` follows its algorithm step
by step; comments mark each draw. The call order is:

  1. shuffle(documents)
  2. per dupe pass, per document: random() < short_seq_prob [then randint(2, max_num_tokens)];
     per chunk: [randint(1, n-1) if n >= 2], [random() < 0.5 if n >= 2] (a one-segment chunk is
     always random-next); random next: up to 10 x randint(0, D-1) then randint(0, len(doc)-1);
     truncation: one random() per removed token; masking: shuffle(candidates), then per masked
     token random() < 0.8 [then random() < 0.5 [then randint(0, V-1)]].
  3. shuffle(instances)

What differs is the representation, not the result. The corpus is one flat array of token ids
(int32s) with sentence and document offsets, and segments are index ranges into it. Each finished
instance is encoded at once (TFRecords framed too) and spilled to a temporary file beside the
output; memory holds the corpus and a few bytes per instance where the original holds every
instance as lists of strings. The final shuffle permutes record offsets, and the copy-out reads
the spilled records in that order.

Two implementations do this, with the same bytes (tests/test_speedups.py): the Python functions
here (`generate`, whose tokens are the ids' varints, one shared `bytes` object per vocab entry, so
an instance's `input_ids` field is one `b"".join`, and the layouts' encoders), and their compiled
twins in `_speedups.c`, which consume the Mersenne Twister of a copy of `random.Random`'s state
word for word as these do and hand the state back (`speedups` picks; WIKIPREP_PURE_PYTHON=1
forces Python).

`fixed_mask_count=True` is Graphcore's variant (a full-length sequence always gets exactly
`max_predictions_per_seq` masks); it changes how many tokens are masked, not the draw order.

The instances are the same whatever the output: only the encoder of the spill and the copy-out
differ, and both are the output layout's (`wikiprep.layouts`), passed in as a value. TFRecords
spill their framed records and copy them out as they are; NVIDIA's HDF5 spills compact rows,
copied out in blocks of whole chunks. The compiled generator encodes a layout when the layout
gives its code (`Layout.compiled_arguments`); for one that gives none the Python generator runs,
with the layout's own encoder.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import logging
import os
import random
from array import array
from pathlib import Path
from typing import Callable, Iterator, Sequence

from shardkit.atomic import temp_path
from shardkit.errors import PrepError
from shardkit.example import varint
from shardkit.progress import Progress, Stage, part_of, throttle
from shardkit.records import frame_record
from shardkit.verified import open_committed

from . import layouts, speedups
from .layouts import Layout
from .options import GenerationOptions
from .schema import PRED, SEQ
from .tokenization import FullTokenizer, Vocab

log = logging.getLogger(__name__)

_READ_BLOCK = 1 << 22
_NOT_TEXT_MAGIC = {b"\x1f\x8b": "a gzip file; decompress it first", b"BZh": "a bzip2 file; decompress it first",
                   b"\xfd7zXZ": "an xz file; decompress it first",
                   b"\x28\xb5\x2f\xfd": "a zstd file; decompress it first",
                   b"PK\x03\x04": "a zip file; unpack it first",
                   b"\xff\xfe": "UTF-16 text; convert it to UTF-8", b"\xfe\xff": "UTF-16 text; convert it to UTF-8"}


# ---------------------------------------------------------------------------------------------
# Reading the corpus

class Corpus:
    """Every non-empty document of the input, tokenized: one flat token list plus offsets.

    Sentence s is `tokens[sentence_starts[s]:sentence_starts[s + 1]]`; document d (input order)
    holds sentences `doc_starts[d]` up to `doc_starts[d + 1]`. Tokens are ids (int32s, 4 bytes
    each); `table[id]` is the varint encoding of an id, which the pure-Python generator joins.
    `source_sentences[k]`, for an input of several sources one after another (a mixture's sentence
    shard), is the first sentence of source k's documents; empty for one source.
    """

    def __init__(self, table: list[bytes]):
        self.table = table
        self.tokens = array("i")
        self.sentence_starts = array("q", [0])
        self.doc_starts = array("q", [0])
        self.source_sentences = array("q")
        self.files: list[str] = []
        self.bytes_read = 0

    @property
    def num_documents(self) -> int:
        return len(self.doc_starts) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_starts) - 1

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


def varint_table(size: int) -> list[bytes]:
    """`table[i]` = protobuf varint of i, one shared object per value."""
    return [varint(i) for i in range(size)]


def _check_text_file(path: str, head: bytes) -> None:
    for magic, what in _NOT_TEXT_MAGIC.items():
        if head.startswith(magic):
            raise PrepError(f"{path}: looks like {what} (input must be UTF-8 text, one sentence a line)")
    sample = head[:65536]
    if len(sample) - len(sample.decode("utf-8", "ignore").encode("utf-8")) > len(sample) // 10:
        raise PrepError(f"{path}: not UTF-8 text (over 10% of its first 64 KiB does not decode)")


def _line_blocks(path: str, counter: list[int], on_block: Callable[[], None] | None = None,
                 stops: Sequence[int] = ()) -> Iterator[list[str]]:
    """The lines of `path`, a list per block of 4 MiB read, as the original reads them with
    `tf.gfile.GFile.readline`: split on '\\n' only, every '\\r' byte dropped (TensorFlow's ReadLine never
    returns one), decoded as UTF-8 (bad bytes dropped, as `convert_to_unicode` does). Adds the bytes read
    to `counter[0]`, then calls `on_block()` (when given) once per block. A block also ends where `counter[0]`
    reaches one of `stops` (rising), so that the caller sees each of them between two blocks."""
    try:
        f = open_committed(path)  # a committed sentence shard is checked against its receipt as it is read
    except FileNotFoundError:
        raise PrepError(f"{path}: input file not found") from None
    except IsADirectoryError:
        raise PrepError(f"{path}: is a directory, not an input text file") from None
    except OSError as e:
        raise PrepError(f"{path}: cannot read ({e.strerror})") from None
    decoder = codecs.getincrementaldecoder("utf-8")("ignore")
    stops = iter(stops)
    stop = next(stops, None)
    with f:
        tail, first = "", True
        while True:
            while stop is not None and stop <= counter[0]:
                stop = next(stops, None)
            try:
                block = f.read(_READ_BLOCK if stop is None else min(_READ_BLOCK, stop - counter[0]))
            except OSError as e:
                raise PrepError(f"{path}: cannot read ({e.strerror})") from None
            if first:
                _check_text_file(path, block)
                first = False
            counter[0] += len(block)
            if on_block is not None:
                on_block()
            text = tail + decoder.decode(block.replace(b"\r", b""), final=not block)
            if not block:
                if text:
                    yield [text]
                return
            lines = text.split("\n")
            tail = lines.pop()
            yield lines


def _tokenize_lines(lines: list[str], encode_packed: Callable[[str], bytes], n_tokens: int, n_sentences: int,
                    last_doc_start: int) -> tuple[bytes, bytes, bytes]:
    """read_corpus's loop over a block of lines, counting on from the corpus so far (its tokens, its
    sentences, the first sentence of its last document): (the new token ids, packed int32s; the token
    count at each new sentence's end and the sentence count at each new document's start, packed int64s).

    A line is stripped; a blank one ends a non-empty document, one giving no tokens is skipped.
    `_speedups.LineTokenizer` is the compiled twin (the same result).
    """
    ids: list[bytes] = []
    sentence_ends, doc_starts = array("q"), array("q")
    for line in lines:
        line = line.strip()
        if not line:
            if n_sentences > last_doc_start:  # a blank line ends a non-empty document
                last_doc_start = n_sentences
                doc_starts.append(n_sentences)
            continue
        packed = encode_packed(line)
        if packed:
            ids.append(packed)
            n_tokens += len(packed) // 4
            n_sentences += 1
            sentence_ends.append(n_tokens)
    return b"".join(ids), sentence_ends.tobytes(), doc_starts.tobytes()


def read_corpus(input_files: Sequence[str], vocab: Vocab, do_lower_case: bool = True,
                progress: Progress | None = None, source_starts: Sequence[int] = ()) -> Corpus:
    """Tokenize `input_files` in order: one sentence per line, blank lines between documents.

    As in the original, a document may run on from one file into the next (nothing closes a
    document at the end of a file), lines giving no tokens are skipped and empty documents dropped.
    `progress(done, total)` counts the bytes read, of the files' sizes. `source_starts`, for an input
    of several sources one after another, are the byte offsets (into the inputs read one after another,
    rising, the first 0) where each source's documents start: the corpus' `source_sentences`.
    """
    if source_starts and source_starts[0] != 0:
        raise ValueError(f"source_starts {list(source_starts)}: the first source starts at 0")
    corpus = Corpus(varint_table(vocab.size))
    tokens, sent_starts, doc_starts = corpus.tokens, corpus.sentence_starts, corpus.doc_starts
    tokenizer = FullTokenizer(vocab, do_lower_case)
    fast = speedups.compiled()
    if fast is not None:
        tokenize = fast.LineTokenizer(tokenizer.chunk_packed, tokenizer.fill, tokenizer.cache, tokenizer.clean_table,
                                      tokenizer.cache_size, vocab_ids=vocab.ids, do_lower_case=tokenizer.do_lower_case,
                                      max_len=tokenizer.max_len, unk_id=vocab.unk_id).tokenize
    else:
        def tokenize(lines, n_tokens, n_sentences, last_doc_start):
            return _tokenize_lines(lines, tokenizer.encode_packed, n_tokens, n_sentences, last_doc_start)
    counter = [0]
    total = sum(_size(p) for p in input_files)
    on_block = None if progress is None else lambda: progress(min(counter[0], total), total)
    sources = corpus.source_sentences

    def pass_source_starts() -> None:
        # A source starts after a blank line (a document's end): every sentence before it is read by now.
        while len(sources) < len(source_starts) and source_starts[len(sources)] <= counter[0]:
            sources.append(len(sent_starts) - 1)

    pass_source_starts()
    for path in input_files:
        path = os.fspath(path)
        corpus.files.append(path)
        try:
            for lines in _line_blocks(path, counter, on_block, source_starts):
                ids, sentence_ends, new_docs = tokenize(lines, len(tokens), len(sent_starts) - 1, doc_starts[-1])
                tokens.frombytes(ids)
                sent_starts.frombytes(sentence_ends)
                doc_starts.frombytes(new_docs)
                pass_source_starts()
        except PrepError as e:
            if path in str(e):
                raise
            raise PrepError(f"{path}: {e}") from None
    if len(sent_starts) - 1 > doc_starts[-1]:
        doc_starts.append(len(sent_starts) - 1)
    corpus.bytes_read = counter[0]
    if progress is not None:
        progress(total, total)
    if corpus.num_documents == 0:
        names = ", ".join(corpus.files) or "(no input files)"
        raise PrepError(f"{names}: no documents (every line is blank or gives no tokens)")
    return corpus


# ---------------------------------------------------------------------------------------------
# The generator

# emit(tokens, len_a, len_b, masked_positions, masked_labels, is_random_next): `tokens` is
# [CLS] A [SEP] B [SEP] after masking, `masked_labels` the original tokens at the sorted
# `masked_positions` (ints); tokens and labels are varint-encoded ids (see Corpus).
Emit = Callable[[list, int, int, list, list, bool], None]

# The shuffle-step splits of candidate lists up to this length are cached (a few MB at most); longer ones are
# sliced per use, so memory stays linear in max_seq_length.
_FULL_TABLE = 1024
_PROGRESS_DOCS = 64  # generate reports its progress every this many documents


def _shuffle_steps(n: int) -> list[tuple[int, int]]:
    """`steps[x]` = (x, bits of x + 1): the draw random.Random.shuffle makes at place x, for x < n."""
    return [(x, (x + 1).bit_length()) for x in range(n)]


def _split_shuffle_steps(steps: list[tuple[int, int]], n: int, keep: int) -> tuple[list, list]:
    """The shuffle steps of an n-list (x from n - 1 down to 1), split at the first step whose place is below `keep`.

    Slices of the one `steps` list, so the steps of every length share its tuples (n >= 1).
    """
    k = max(keep, 1)
    return steps[n - 1:k - 1:-1], steps[min(n, k) - 1:0:-1]


def _shuffled_documents(corpus: Corpus, rng: random.Random) -> tuple[array, array]:
    """(first sentence, sentence count) of every document, after the original's shuffle (int64 arrays)."""
    order = array("q", range(corpus.num_documents))
    speedups.shuffle(rng, order)  # draw: shuffle(all_documents)
    starts = corpus.doc_starts
    return array("q", [starts[d] for d in order]), array("q", [starts[d + 1] - starts[d] for d in order])


def _document_sources(corpus: Corpus, doc_first: array) -> array:
    """The source of each document (by its first sentence, `doc_first` in the generator's order), int32s.
    A source with no document in the input starts where the next one does: bisect_right passes it."""
    bounds = corpus.source_sentences
    return array("i", [bisect.bisect_right(bounds, first) - 1 for first in doc_first])


def generate(corpus: Corpus, vocab: Vocab, opts: GenerationOptions, rng: random.Random, emit: Emit,
             progress: Progress | None = None, source_instances: array | None = None) -> None:
    """Every instance of every dupe pass, in the original's creation order (before its final shuffle).

    `progress(done, total)` counts documents, once per dupe pass (total: dupe_factor x documents),
    called every `_PROGRESS_DOCS` documents: a test per document is all it costs the loop.
    `source_instances` (int64s, one per source of `corpus.source_sentences`) counts the instances of each
    source: an instance's source is its document's, that of segment A (B may be another's: random next).

    Random draws go straight to `rng.random` and `rng.getrandbits`, the primitives behind the
    original's `randint` and `shuffle` (`randint(a, b)` is `a + _randbelow(b - a + 1)`, and
    `_randbelow(n)` draws `getrandbits(n.bit_length())` until the value is below n), so the
    Mersenne Twister is consumed word for word as in the original, without its per-call overhead.
    """
    doc_first, doc_len = _shuffled_documents(corpus, rng)
    doc_source = None if source_instances is None else _document_sources(corpus, doc_first)
    n_docs = len(doc_first)
    table = corpus.table
    tokens_all = list(map(table.__getitem__, corpus.tokens))  # varints: an instance's input_ids are one join
    starts = corpus.sentence_starts
    max_num_tokens = opts.max_seq_length - 3
    seq_len = opts.max_seq_length
    max_pred = opts.max_predictions_per_seq
    mlm_prob = opts.masked_lm_prob
    short_prob = opts.short_seq_prob
    fixed = opts.fixed_mask_count
    whole_word = opts.do_whole_word_mask
    cls, sep, mask = table[vocab.cls_id], table[vocab.sep_id], table[vocab.mask_id]
    replacements = [table[i] for i in vocab.word_ids()]  # vocab[vocab_words[r]]: the whole vocab, file order
    n_replacements = len(replacements)
    replacement_bits = n_replacements.bit_length()
    continuation = frozenset(table[i] for i, flag in enumerate(vocab.continuation_flags()) if flag)
    rnd = rng.random
    grb = rng.getrandbits
    positions_base = list(range(seq_len))
    all_steps = _shuffle_steps(seq_len)  # no candidate list is longer than max_seq_length - 3
    split_steps: dict[tuple[int, int], tuple[list, list]] = {}  # (n, keep) -> split, for n <= _FULL_TABLE

    def shuffle_split(n: int, keep: int) -> tuple[list, list]:
        split = _split_shuffle_steps(all_steps, n, keep)
        if n <= _FULL_TABLE:  # at most _FULL_TABLE**2 / 2 list slots per keep; longer splits are sliced per use
            split_steps[(n, keep)] = split
        return split

    def randbelow(n: int) -> int:
        k = n.bit_length()
        r = grb(k)
        while r >= n:
            r = grb(k)
        return r

    def mask_tokens(tokens: list, la: int, n_tok: int) -> tuple[list, list]:
        """create_masked_lm_predictions: mask `tokens` in place; (sorted positions, original tokens)."""
        num_to_predict = min(max_pred, max(1, int(round(n_tok * mlm_prob))))
        if fixed:  # Graphcore: leave at most max_seq_length - max_pred tokens unmasked
            num_to_predict = max(num_to_predict, n_tok - seq_len + max_pred)
        cand = positions_base[1:la + 1]  # every position but [CLS] and the two [SEP]s
        cand += positions_base[la + 2:n_tok - 1]
        if not whole_word:
            # draws: shuffle(cand_indexes). Only its first num_to_predict places are read afterwards,
            # so above them the element that moves up is not stored (the draws are the same).
            split = split_steps.get((n_tok - 3, num_to_predict))
            if split is None:
                split = shuffle_split(n_tok - 3, num_to_predict)
            upper, lower = split
            for x, k in upper:
                y = grb(k)
                while y > x:
                    y = grb(k)
                cand[y] = cand[x]
            for x, k in lower:
                y = grb(k)
                while y > x:
                    y = grb(k)
                cand[x], cand[y] = cand[y], cand[x]
            chosen = cand[:num_to_predict]
        else:
            # Words: a `##` piece joins the previous word, even across the [SEP] between A and B.
            # Word w is cand[starts[w]:starts[w + 1]]; shuffling word numbers draws as shuffling words.
            starts = [i for i, p in enumerate(cand) if not i or tokens[p] not in continuation]
            words = positions_base[:len(starts)]
            starts.append(len(cand))
            n_words = len(words)
            word_steps = split_steps.get((n_words, n_words)) or shuffle_split(n_words, n_words)
            for x, k in word_steps[1]:  # draws: shuffle(cand_indexes)
                y = grb(k)
                while y > x:
                    y = grb(k)
                words[x], words[y] = words[y], words[x]
            chosen = []
            for w in words:
                if len(chosen) >= num_to_predict:
                    break
                w0, w1 = starts[w], starts[w + 1]
                if len(chosen) + w1 - w0 > num_to_predict:
                    continue  # a whole word that does not fit is skipped
                chosen += cand[w0:w1]  # words never overlap: the original's covered-check never fires
        positions = sorted(chosen)
        labels = [tokens[p] for p in positions]  # taken before masking changes them
        for pos in chosen:  # draws per masked token, in shuffled order: 80% [MASK], 10% kept, 10% random word
            if rnd() < 0.8:
                tokens[pos] = mask
            elif rnd() < 0.5:
                pass
            else:
                r = grb(replacement_bits)
                while r >= n_replacements:
                    r = grb(replacement_bits)
                tokens[pos] = replacements[r]
        return positions, labels

    passes_total = opts.dupe_factor * n_docs
    for dupe_pass in range(opts.dupe_factor):
        for d in range(n_docs):
            if not d % _PROGRESS_DOCS and progress is not None:
                progress(dupe_pass * n_docs + d, passes_total)
            first = doc_first[d]
            n_sent = doc_len[d]
            last = n_sent - 1
            target = max_num_tokens
            if rnd() < short_prob:  # draw: short target, once per document and pass
                target = 2 + randbelow(max_num_tokens - 1)
            i = 0
            chunk_n = 0
            length = 0
            while i < n_sent:
                s = first + i
                length += starts[s + 1] - starts[s]
                chunk_n += 1
                if i == last or length >= target:
                    c0 = s - chunk_n + 1
                    a_end = 1 + randbelow(chunk_n - 1) if chunk_n >= 2 else 1  # draw: end of A
                    a0 = starts[c0]
                    a1 = starts[c0 + a_end]
                    if chunk_n == 1 or rnd() < 0.5:  # draw: random next (none for a one-segment chunk)
                        is_random = True
                        target_b = target - (a1 - a0)
                        for _try in range(10):  # draws: random document; after 10 hits it may stay d
                            r_doc = randbelow(n_docs)
                            if r_doc != d:
                                break
                        r_first = doc_first[r_doc]
                        j = r_first + randbelow(doc_len[r_doc])  # draw: first sentence of B
                        r_last = r_first + doc_len[r_doc] - 1
                        b0 = starts[j]
                        b1 = starts[j + 1]
                        while b1 - b0 < target_b and j < r_last:
                            j += 1
                            b1 = starts[j + 1]
                        i -= chunk_n - a_end  # put the unused segments back
                    else:
                        is_random = False
                        b0 = a1
                        b1 = starts[s + 1]
                    # Truncate the longer side (B on ties), one draw per removed token: front or back.
                    la = a1 - a0
                    lb = b1 - b0
                    while la + lb > max_num_tokens:
                        if la > lb:
                            if rnd() < 0.5:
                                a0 += 1
                            else:
                                a1 -= 1
                            la -= 1
                        else:
                            if rnd() < 0.5:
                                b0 += 1
                            else:
                                b1 -= 1
                            lb -= 1
                    tokens = [cls, *tokens_all[a0:a1], sep, *tokens_all[b0:b1], sep]
                    n_tok = la + lb + 3

                    positions, labels = mask_tokens(tokens, la, n_tok)
                    emit(tokens, la, lb, positions, labels, is_random)
                    if doc_source is not None:
                        source_instances[doc_source[d]] += 1
                    chunk_n = 0
                    length = 0
                i += 1
    if progress is not None:
        progress(passes_total, passes_total)


# ---------------------------------------------------------------------------------------------
# Public API

def prepare(input_files: Sequence[str], vocab_file: str, options: GenerationOptions,
            progress: Progress | None = None, source_starts: Sequence[int] = ()) -> tuple[Vocab, Corpus]:
    """The vocabulary and the tokenized corpus of `input_files` (`progress`, `source_starts` as `read_corpus`'s)."""
    if isinstance(input_files, (str, os.PathLike)):
        input_files = [input_files]
    if not input_files:
        raise PrepError("no input files given")
    vocab = Vocab.load(vocab_file)
    corpus = read_corpus([os.fspath(p) for p in input_files], vocab, options.do_lower_case, progress, source_starts)
    return vocab, corpus


def _size(path: str | os.PathLike) -> int:
    """An input's size, 0 if it cannot be read (its reader names the problem)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# How a writer's time splits between its phases, in tenths of its progress: reading and tokenizing, then
# generating and encoding, the rest copying out (benchmarks/bench_instances.py --phases, seq 128, dupe 5:
# compiled 32%, 44%, 23%; Python 19%, 71%, 10%).
_TENTHS_COMPILED, _TENTHS_PYTHON = (3, 5), (2, 7)


class _Stats:
    """Counters the generator updates in place (int64 arrays): lengths, mask counts, [actual, random] next,
    and for an input of `sources` sources (a mixture's sentence shard) the instances of each."""

    def __init__(self, seq_len: int, max_pred: int, sources: int = 0):
        self.seq_len = seq_len
        self.random_next = array("q", [0, 0])
        self.lengths = array("q", bytes(8 * (seq_len + 1)))
        self.masked = array("q", bytes(8 * (max_pred + 1)))
        self.source_instances = array("q", bytes(8 * sources)) if sources else None

    def report(self, corpus: Corpus, vocab: Vocab) -> dict:
        unk = corpus.tokens.count(vocab.unk_id) if vocab.unk_id is not None else 0
        return {
            "input_files": len(corpus.files),
            "input_bytes": corpus.bytes_read,
            "documents": corpus.num_documents,
            "sentences": corpus.num_sentences,
            "tokens": corpus.num_tokens,
            "unk_tokens": unk,
            "instances": sum(self.lengths),
            "random_next": self.random_next[1],
            "full_length": self.lengths[self.seq_len],
            "masked_tokens": sum(k * v for k, v in enumerate(self.masked)),
            "masked_count_histogram": {str(k): v for k, v in enumerate(self.masked) if v},
            "sequence_length_histogram": {str(k): v for k, v in enumerate(self.lengths) if v},
            **({} if self.source_instances is None else {"instances_per_source": self.source_instances.tolist()}),
        }


def _file_identity(path: str | os.PathLike) -> tuple:
    """What every name of one file shares: (device, inode) when it exists, whatever symlinks or hard
    links lead to it; else its real path (symlinked folders and `..` resolved)."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def check_output_paths(input_files: Sequence[str], vocab_file: str, output_files: Sequence[str | os.PathLike],
                       index_files: Sequence[str | os.PathLike | None]) -> None:
    """Refuse, before anything is written, an output or index file that is (under any name) an input,
    the vocab or another output or index, and one that cannot be created: a folder, below a file, or
    in a folder without write permission. One PrepError line naming both files, or the folder."""
    seen: dict[tuple, str] = {}
    for role, path in [("input file", p) for p in input_files] + [("vocab file", vocab_file)]:
        seen.setdefault(_file_identity(path), f"{role} {path}")
    for role, path in ([("output file", p) for p in output_files]
                       + [("index file", p) for p in index_files if p is not None]):
        if os.path.isdir(path):
            raise PrepError(f"{role} {path}: is a folder")
        folder = Path(os.path.abspath(path)).parent
        while not folder.exists():  # folders the writers will create
            folder = folder.parent
        if not folder.is_dir():
            raise PrepError(f"{role} {path}: {folder} is not a folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PrepError(f"{role} {path}: folder {folder} is not writable")
        identity = _file_identity(path)
        if identity in seen:
            raise PrepError(f"{role} {path} is the same file as the {seen[identity]}: refusing to overwrite it")
        seen[identity] = f"{role} {path}"


def check_layout(layout: Layout, output_files: Sequence[str | os.PathLike],
                 index_files: Sequence[str | os.PathLike | None], opts: GenerationOptions) -> None:
    """Refuse what `layout` cannot make of these outputs (an index beside a file that has none, a name only
    another layout's files have: `x.hdf5` in TFRecords) and of these options (a remask layout the instances may
    not fit), before anything is written. The names never choose the layout: it is given."""
    for path in output_files:
        suffix = layouts.suffix_of(path)
        other = next((o for o in layouts.LAYOUTS.values() if suffix in o.suffixes and o.file_kind != layout.file_kind),
                     None)
        if other is not None and suffix not in layout.suffixes:
            raise PrepError(f"output file {os.fspath(path)}: named as {other.file_kind} ({suffix}), but the layout "
                            f"given is {layout.title}")
    layout.check_outputs(output_files, index_files)
    layout.check(opts)


def write_pretraining_files(input_files: Sequence[str], vocab_file: str, output_files: Sequence[str],
                            index_files: Sequence[str | None] | None, opts: GenerationOptions, *,
                            layout: Layout = layouts.DEFAULT, overwrite: bool = False,
                            progress: Progress | None = None, source_starts: Sequence[int] = ()) -> dict:
    """The original's whole run: instances written round-robin over `output_files`; returns stats.

    `index_files[i]` (or None) is the index of `output_files[i]`. The outputs are written in `layout`
    (`wikiprep.layouts`: google-research/bert's TFRecords by default, Graphcore's static mask, NVIDIA's
    HDF5), whatever their names; every layout holds the same instances in the same order. The options,
    the layout and the paths are checked (`GenerationOptions` when made, `check_layout`, `check_output_paths`)
    before anything is written, and every output and index is committed together: on any error none of
    them appears. `overwrite` replaces existing outputs, as the original does (the command line); without
    it an existing output is never replaced: identical is accepted, different refused (`shardkit.atomic`).

    `progress(done, total)` counts the input's bytes, spread over the run's phases as their time is:
    reading the first 3 tenths, generating the next 5 (by documents of every dupe pass), writing the
    rest (by records) (2, 7 and 1 on the Python paths); one INFO line closes the run.

    `source_starts`, for an input of several sources one after another (a mixture's sentence shard), are the
    byte offsets where each one's documents start (`read_corpus`): the stats then count each source's
    instances, `instances_per_source`. The instances are the same with or without.
    """
    outputs = [Path(p) for p in output_files]
    if not outputs:
        raise PrepError("no output file given")
    indexes = list(index_files) if index_files is not None else [None] * len(outputs)
    if len(indexes) != len(outputs):
        raise PrepError(f"{len(indexes)} index files given for {len(outputs)} output files")
    check_layout(layout, outputs, indexes, opts)
    if isinstance(input_files, (str, os.PathLike)):
        input_files = [input_files]
    check_output_paths(input_files, vocab_file, outputs, indexes)
    more = f" and {len(outputs) - 1} more" if len(outputs) > 1 else ""
    reason = speedups.python_reason()  # the closing line says when the (several times slower) Python paths ran
    stage = Stage(log, f"instances {outputs[0].name}{more}" + (f" ({reason})" if reason else ""))
    progress = throttle(progress)
    total = sum(_size(p) for p in input_files)
    read_tenths, generate_tenths = _TENTHS_PYTHON if reason else _TENTHS_COMPILED
    read_end, generate_end = total * read_tenths // 10, total * (read_tenths + generate_tenths) // 10
    vocab, corpus = prepare(input_files, vocab_file, opts, part_of(progress, 0, read_end, total), source_starts)
    rng = random.Random(opts.random_seed)
    stats = _Stats(opts.max_seq_length, opts.max_predictions_per_seq, len(source_starts))
    dims = {SEQ: opts.max_seq_length, PRED: opts.max_predictions_per_seq}
    # A temporary of the first output: if this process is killed, the next write of that output removes it.
    spill_path = temp_path(outputs[0], "spill")
    offsets = array("q", [0])
    try:
        # Every output's and index's temporary is opened first: one that cannot be written fails
        # before the work, and none is committed unless all are complete.
        with layout.writers(outputs, indexes, dims, overwrite=overwrite, vocab=vocab) as writers, \
                open(spill_path, "w+b", buffering=1 << 20) as spill:
            spill_instances(corpus, vocab, opts, rng, layout, spill, offsets, stats,
                            part_of(progress, read_end, generate_end, total))
            report = stats.report(corpus, vocab)
            del corpus  # not needed while the records are copied out
            spill.flush()
            order = array("q", range(len(offsets) - 1))
            speedups.shuffle(rng, order)  # draw: shuffle(instances)
            # pread, not mmap: the spilled records stay in the page cache instead of our resident set.
            writers.copy(order, offsets, spill.fileno(), part_of(progress, generate_end, total, total))
    finally:
        with contextlib.suppress(FileNotFoundError):
            spill_path.unlink()
    if progress is not None:
        progress(total, total)
    stage.finish(report["instances"], "instances", report["input_bytes"])
    return report


def spill_instances(corpus: Corpus, vocab: Vocab, opts: GenerationOptions, rng: random.Random, layout: Layout,
                    spill, offsets: array, stats: _Stats, progress: Progress | None = None) -> None:
    """Every instance, in creation order, encoded in `layout` (framed when its encodings are) and written to
    `spill`, each one's end offset appended to `offsets`, `stats` counted; `rng` left where the original's is
    before its final shuffle. `progress` as `generate`'s.

    The compiled generator (`speedups`) when built and the layout gives its code, else `generate` with the
    layout's encoder: the same bytes. A layout the compiled generator does not know always runs in Python.
    """
    fast = speedups.compiled_rng(rng)
    compiled = layout.compiled_arguments()
    if (fast is not None and compiled is not None and corpus.num_documents < 1 << 32
            and vocab.size < 1 << 28):  # the C side's bounds
        _spill_compiled(fast, compiled, corpus, vocab, opts, rng, spill, offsets, stats, progress)
        return
    encode = layout.encoder(opts.max_seq_length, opts.max_predictions_per_seq).encode
    write, offset = spill.write, offsets.append
    frame = frame_record if layout.framed else None
    lengths, masked, random_next = stats.lengths, stats.masked, stats.random_next

    def emit(tokens, la, lb, positions, labels, is_random):
        data = encode(tokens, la, lb, positions, labels, is_random)
        offset(offsets[-1] + write(data if frame is None else frame(data)))
        lengths[len(tokens)] += 1
        masked[len(positions)] += 1
        random_next[is_random] += 1

    generate(corpus, vocab, opts, rng, emit, progress, stats.source_instances)


_SPILL_BATCH_BYTES = 1 << 20  # the compiled generator hands over whole documents' records in batches of ~1 MiB


def _spill_compiled(fast, compiled: dict, corpus: Corpus, vocab: Vocab, opts: GenerationOptions, rng: random.Random,
                    spill, offsets: array, stats: _Stats, progress: Progress | None) -> None:
    """spill_instances through `_speedups.Generator`: `generate` and the encoder `compiled` names (a layout's
    `compiled_arguments`) in C, on a copy of `rng`'s state."""
    doc_first, doc_len = _shuffled_documents(corpus, rng)
    sources = {} if stats.source_instances is None else \
        {"doc_source": _document_sources(corpus, doc_first), "source_instances": stats.source_instances}
    version, state, gauss = rng.getstate()
    generator = fast.Generator(
        tokens=corpus.tokens, sentence_starts=corpus.sentence_starts, doc_first=doc_first, doc_len=doc_len,
        state=state, max_seq_length=opts.max_seq_length,
        max_predictions_per_seq=opts.max_predictions_per_seq, masked_lm_prob=opts.masked_lm_prob,
        short_seq_prob=opts.short_seq_prob, dupe_factor=opts.dupe_factor, fixed_mask_count=opts.fixed_mask_count,
        do_whole_word_mask=opts.do_whole_word_mask, cls_id=vocab.cls_id, sep_id=vocab.sep_id,
        mask_id=vocab.mask_id, replacements=array("i", vocab.word_ids()), continuation=vocab.continuation_flags(),
        lengths=stats.lengths, masked=stats.masked, random_next=stats.random_next, misfit_error=PrepError,
        **sources, **compiled)
    total = opts.dupe_factor * corpus.num_documents
    spill.flush()  # the generator writes to its descriptor, after whatever the file object holds
    fd = spill.fileno()
    while (ends := generator.run(fd, _SPILL_BATCH_BYTES)) is not None:
        offsets.frombytes(ends)
        if progress is not None:
            progress(generator.documents_done, total)
    rng.setstate((version, generator.state(), gauss))


def create_pretraining_file(input_files: list[str], vocab_file: str, output_file: str, index_file: str | None,
                            options: GenerationOptions, *, layout: Layout = layouts.DEFAULT, overwrite: bool = False,
                            progress: Progress | None = None, source_starts: Sequence[int] = ()) -> dict:
    """All instances of `input_files` in one file (+ its `offset length` index, in a layout that has one);
    returns stats.

    The instances, their order and every feature equal those of google-research/bert's
    create_pretraining_data.py run with the same files, vocab, flags and seed (unless
    `options.fixed_mask_count`), in `layout` (`write_pretraining_files`, with `source_starts`). Raises PrepError
    for bad input; nothing is left half-written.
    """
    return write_pretraining_files(input_files, vocab_file, [output_file], [index_file], options, layout=layout,
                                   overwrite=overwrite, progress=progress, source_starts=source_starts)
