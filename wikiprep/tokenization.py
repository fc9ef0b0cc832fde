"""WordPiece tokenization identical to google-research/bert's `FullTokenizer`, working in token ids.

The reference is `tokenization.py` of google-research/bert (Apache-2.0, Copyright 2018 The Google
AI Language Team Authors): `BasicTokenizer` (clean text, space out CJK ideographs, split on
whitespace, lower case + NFD + drop accents, split on punctuation) followed by
`WordpieceTokenizer` (greedy longest-match-first with `##` continuations, words longer than 200
characters become `[UNK]`, and so does a word any piece of which is missing).

Speed comes from two observations, neither of which changes the output:
  * every step after the whitespace split works on one whitespace-separated chunk alone (the
    original lower-cases each chunk separately, which matters for Greek final sigma), so the ids
    of a chunk, and of each word the punctuation split makes of it, are computed once and cached
    (bounded caches, emptied when full);
  * cleaning is one `str.translate` over the line (control characters deleted, whitespace and
    CJK spacing mapped), skipped entirely for printable ASCII lines; printable ASCII chunks are
    split with one regular expression.
HF `tokenizers` is not used: it lower-cases final sigma differently and cuts words at 100
characters instead of 200.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from array import array
from pathlib import Path

from shardkit.errors import PrepError
from shardkit.verified import open_committed

UNK, CLS, SEP, MASK, PAD = "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"
MAX_INPUT_CHARS_PER_WORD = 200

# CJK Unified Ideographs blocks the original spaces out (not Hangul, Hiragana or Katakana).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

# Printable ASCII pieces: runs of letters/digits, or one other character (all of which are
# punctuation to the original: "We treat all non-letter/number ASCII as punctuation").
_ASCII_PIECES = re.compile(r"[0-9A-Za-z]+|[^0-9A-Za-z]").findall


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class _CleanTable(dict):
    """`str.translate` table doing `_clean_text` and `_tokenize_chinese_chars` in one pass.

    Filled lazily, one entry per distinct character met: NUL, U+FFFD and control/format
    characters (Cc, Cf; but tab, newline and carriage return) are deleted, whitespace (those three
    and Zs) becomes a space, CJK ideographs get a space on each side, the rest maps to itself.
    """

    def __missing__(self, cp: int):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cp == 0 or cp == 0xFFFD:
            value = None
        elif ch in "\t\n\r" or cat == "Zs":
            value = " "
        elif cat in ("Cc", "Cf"):
            value = None
        elif _is_cjk(cp):
            value = f" {ch} "
        else:
            value = cp
        self[cp] = value
        return value


_CLEAN_TABLE = _CleanTable()


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _split_on_punctuation(text: str) -> list[str]:
    pieces: list[str] = []
    word: list[str] = []
    for ch in text:
        if _is_punctuation(ch):
            if word:
                pieces.append("".join(word))
                word = []
            pieces.append(ch)
        else:
            word.append(ch)
    if word:
        pieces.append("".join(word))
    return pieces


def _strip_accents(text: str) -> str:
    category = unicodedata.category
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if category(ch) != "Mn")


# A vocabulary is read whole into memory (its tokens, ids and the tokenizer's tables), so it is bounded: BERT's
# vocabularies have 30,522 tokens (~230 KB), multilingual BERT's 119,547 (~1 MB); these caps are far above any real
# WordPiece vocabulary, and keep the memory a vocabulary takes to a few hundred MB at most.
MAX_VOCAB_BYTES = 16 << 20
MAX_VOCAB_TOKENS = 1 << 20


class Vocab:
    """A BERT vocab.txt: one token per line, id = line number; the one place a vocabulary is checked.

    Mirrors the original's `OrderedDict` loading exactly: a token listed twice keeps its first
    position in `words` (the list random replacement words are drawn from) but maps to the id of
    its last line.

    [CLS], [SEP] and [MASK] are always required: every instance holds them. [UNK] is required
    only with `require_unk`: the generator needs it just for a word it cannot spell (and then
    stops with an error, as the original does), so `create-pretraining-data` accepts what the
    original accepts, while the pipeline, about to tokenize all of a Wikipedia, refuses such a
    vocabulary before any work starts (`vocab.check_vocab_file`).
    """

    def __init__(self, path: str | Path, require_unk: bool = False):
        self.path = Path(path)
        try:
            with open_committed(self.path) as f:  # a trained vocabulary is checked against its receipt
                data = f.read(MAX_VOCAB_BYTES + 1)  # never more: a file of gigabytes is refused, not read whole
        except FileNotFoundError:
            raise PrepError(f"{self.path}: vocabulary file not found") from None
        except OSError as e:
            raise PrepError(f"{self.path}: cannot read the vocabulary file ({e.strerror})") from None
        if len(data) > MAX_VOCAB_BYTES or data.count(b"\n") > MAX_VOCAB_TOKENS:
            raise PrepError(f"{self.path}: larger than a vocabulary may be ({MAX_VOCAB_BYTES >> 20} MiB, "
                            f"{MAX_VOCAB_TOKENS:,} tokens): not a WordPiece vocabulary")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PrepError(f"{self.path}: vocabulary file is not UTF-8 (byte {e.start})") from None
        # Whether the vocabulary says how text is cased for it: None for a vocab.txt, which does not.
        self.lowercase: bool | None = None
        if text.lstrip().startswith("{"):  # a Hugging Face tokenizer.json holding a WordPiece vocabulary
            lines, self.lowercase = _tokenizer_json_vocab(self.path, text)
            data = "".join(token + "\n" for token in lines).encode("utf-8")
        else:
            if "\r" in text:
                text = text.replace("\r", "")  # GFile.readline drops every '\r'
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()  # the newline ending the last line; readline() gives no extra line
        # The vocabulary as a vocab.txt: what a dataset keeps beside its records (the file's own bytes for one).
        self.vocab_txt: bytes = data
        self.id_to_token: list[str] = [line.strip() for line in lines]
        # A token listed twice keeps its first place and takes its last id, as OrderedDict assignment does.
        self.ids: dict[str, int] = {token: index for index, token in enumerate(self.id_to_token)}
        if not self.ids:
            raise PrepError(f"{self.path}: vocabulary file is empty")
        required = (CLS, SEP, MASK, UNK) if require_unk else (CLS, SEP, MASK)
        missing = [t for t in required if t not in self.ids]
        if missing:
            raise PrepError(f"{self.path}: not a BERT vocabulary (no {', '.join(missing)})")
        self.words: list[str] = list(self.ids)  # file order of first appearance, as list(OrderedDict)
        self.cls_id, self.sep_id, self.mask_id = self.ids[CLS], self.ids[SEP], self.ids[MASK]
        self.unk_id: int | None = self.ids.get(UNK)
        self.size = len(self.id_to_token)

    def check_case(self, do_lower_case: bool, flag: str) -> None:
        """PrepError when the vocabulary says how text is cased for it (a tokenizer.json's normalizer) and
        `do_lower_case` (given as `flag`) disagrees: a cased vocabulary fed lower-cased text, or the reverse."""
        if self.lowercase is not None and self.lowercase != do_lower_case:
            says = "lower-cases" if self.lowercase else "keeps case (a cased vocabulary)"
            raise PrepError(f"{self.path}: its normalizer {says}, but {flag} is {str(do_lower_case).lower()}: "
                            f"give {flag} {str(self.lowercase).lower()}")

    @classmethod
    def load(cls, path: str | Path, require_unk: bool = False) -> Vocab:
        """`Vocab(path, require_unk)`, read once per version of the file in this process: a shard's task
        checks the vocabulary, tokenizes with it and reads its records back with it (30,522 lines, ~10 ms
        each time). A file replaced or rewritten since is read again (its inode, size or mtime differ).
        The object is shared: nothing changes a Vocab once it is made."""
        try:
            st = Path(path).stat()
        except OSError:
            return cls(path, require_unk)  # its own error line
        return _loaded_vocab(str(path), require_unk, st.st_ino, st.st_size, st.st_mtime_ns)

    def __len__(self) -> int:
        return len(self.words)

    def word_ids(self) -> list[int]:
        """Id of each entry of `words`: what `vocab[vocab_words[r]]` gives for a random replacement."""
        ids = self.ids
        return [ids[w] for w in self.words]

    def continuation_flags(self) -> bytes:
        """Per id, 1 when the token starts with `##` (a piece continuing the previous word)."""
        return bytes(1 if t.startswith("##") else 0 for t in self.id_to_token)

    def tokens(self, ids) -> list[str]:
        table = self.id_to_token
        return [table[i] if 0 <= i < len(table) else f"<{i}>" for i in ids]


def _tokenizer_json_vocab(path: Path, text: str) -> tuple[list[str], bool | None]:
    """The tokens of a Hugging Face `tokenizer.json`'s WordPiece model in id order, and whether its normalizer
    lower-cases (BertNormalizer's `lowercase`, or a Lowercase step; None when it says neither). PrepError for
    any other model type or a vocabulary whose ids are not 0 to N-1."""
    import json

    try:
        spec = json.loads(text)
        model = spec["model"]
        kind = model.get("type")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise PrepError(f"{path}: neither a vocab.txt nor a Hugging Face tokenizer.json with a model") from None
    if kind != "WordPiece":
        raise PrepError(f"{path}: a tokenizer.json of model type {kind!r}: only a WordPiece vocabulary (BERT's) "
                        f"can be used")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise PrepError(f"{path}: its WordPiece vocabulary does not number its tokens 0 to N-1")
    tokens = sorted(vocab, key=vocab.__getitem__)
    normalizer = spec.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    lowercase = None
    for step in steps:
        if step.get("type") == "BertNormalizer":
            lowercase = bool(step.get("lowercase", True))
        elif step.get("type") == "Lowercase":
            lowercase = True
    return tokens, lowercase


@functools.lru_cache(maxsize=4)
def _loaded_vocab(path: str, require_unk: bool, inode: int, size: int, mtime_ns: int) -> Vocab:
    return Vocab(path, require_unk)


class FullTokenizer:
    """Google's BasicTokenizer + WordpieceTokenizer over a `Vocab`, returning token ids.

    `encode_packed` gives a line's ids as packed int32s (`array("i")` bytes: what the instance
    generator's corpus holds), `encode` as a list of ints. `cache_size` bounds the chunk cache
    (entries); when full it is emptied and refilled, which costs time, never correctness. The
    compiled `LineTokenizer` (`speedups`) keeps its own table of printable-ASCII chunks (computing a
    miss itself from `vocab.ids`, `do_lower_case` and `max_len`, `chunk_packed` when it needs the
    [UNK] a vocabulary lacks) and reads this cache for the others, calling `fill` on a miss.
    """

    def __init__(self, vocab: Vocab, do_lower_case: bool = True, cache_size: int = 300_000):
        self.vocab = vocab
        self.do_lower_case = bool(do_lower_case)
        self.cache_size = cache_size
        self.cache: dict[str, bytes] = {}  # whitespace-separated chunk -> its ids, packed int32s
        self._word_cache: dict[str, tuple[int, ...]] = {}  # word (after the punctuation split) -> its ids
        self.clean_table = _CLEAN_TABLE
        self.max_len = max(len(t) for t in vocab.ids)  # the longest token: WordPiece's first window

    # -- public -------------------------------------------------------------------------------

    def encode(self, line: str) -> list[int]:
        """Token ids of one line of text (what the original's `tokenize` + `convert_tokens_to_ids` give)."""
        return array("i", self.encode_packed(line)).tolist()

    def encode_packed(self, line: str) -> bytes:
        """`encode(line)` as packed int32s."""
        if not (line.isascii() and line.isprintable()):
            line = line.translate(self.clean_table)
        cache = self.cache
        try:
            return b"".join([cache[chunk] for chunk in line.split()])
        except KeyError:
            fill = self.fill
            return b"".join([ids if (ids := cache.get(chunk)) is not None else fill(chunk) for chunk in line.split()])

    def fill(self, chunk: str) -> bytes:
        """The ids of one whitespace-separated chunk, packed, computed and cached (caches emptied first when full)."""
        if len(self.cache) >= self.cache_size:
            self.cache.clear()
        ids = self.cache[chunk] = self.chunk_packed(chunk)
        return ids

    def chunk_packed(self, chunk: str) -> bytes:
        """The ids of one whitespace-separated chunk, packed, computed (not looked up in or added to `cache`)."""
        if len(self._word_cache) >= self.cache_size:
            self._word_cache.clear()
        return array("i", self._chunk_ids(chunk)).tobytes()

    def tokenize(self, line: str) -> list[str]:
        """Word pieces as strings, for inspection and tests."""
        return self.vocab.tokens(self.encode(line))

    # -- one whitespace-separated chunk ------------------------------------------------------

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        if chunk.isascii():
            pieces = _ASCII_PIECES(chunk.lower() if self.do_lower_case else chunk)
        else:
            if self.do_lower_case:
                chunk = _strip_accents(chunk.lower())
            pieces = _split_on_punctuation(chunk)
        words = self._word_cache
        out: list[int] = []
        for piece in pieces:
            ids = words.get(piece)
            if ids is None:
                ids = words[piece] = tuple(self._wordpiece(piece))
            out += ids
        return tuple(out)

    def _wordpiece(self, word: str) -> list[int]:
        n = len(word)
        if n > MAX_INPUT_CHARS_PER_WORD:
            return [self._unk()]
        ids = self.vocab.ids
        max_len = self.max_len
        out = []
        start = 0
        while start < n:
            end = min(n, start + max_len if start == 0 else start + max_len - 2)
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = ids.get(piece)
                if found is not None:
                    break
                end -= 1
            else:
                return [self._unk()]
            out.append(found)
            start = end
        return out

    def _unk(self) -> int:
        if self.vocab.unk_id is None:
            raise PrepError(f"{self.vocab.path}: vocab lacks [UNK] but the text has a word it cannot spell")
        return self.vocab.unk_id
