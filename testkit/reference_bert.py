"""A plain port of google-research/bert's create_pretraining_data.py, the tests' independent oracle.

Ported from create_pretraining_data.py and tokenization.py (Apache-2.0, Copyright 2018 The
Google AI Language Team Authors): strings throughout, a character-by-character BasicTokenizer,
`random.Random.randint`/`shuffle` as the original calls them, all instances in memory. It shares
no code with `wikiprep`, so agreeing with it on inputs and flags the reference fixtures do not
cover means something; and it stands in for the original (which needs TensorFlow 1.x) when
benchmarks/bench_instances.py measures speed-ups. The vendored original itself is
benchmarks/anchors/google_create_pretraining_data.py.
"""

import collections
import random
import unicodedata


def _is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch):
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf")


def _is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class ReferenceTokenizer:
    """BasicTokenizer + WordpieceTokenizer, character by character as the original."""

    def __init__(self, vocab_file, do_lower_case=True):
        self.vocab = collections.OrderedDict()
        with open(vocab_file, "rb") as f:
            for index, raw in enumerate(f):  # tf.gfile's readline drops every b"\r"
                self.vocab[raw.replace(b"\r", b"").decode("utf-8").strip()] = index
        self.do_lower_case = do_lower_case

    def basic(self, text):
        cleaned = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or _is_control(ch):
                continue
            cleaned.append(" " if _is_whitespace(ch) else ch)
        spaced = []
        for ch in cleaned:
            spaced.append(f" {ch} " if _is_cjk(ord(ch)) else ch)
        split_tokens = []
        for token in "".join(spaced).split():
            if self.do_lower_case:
                token = token.lower()
                token = "".join(c for c in unicodedata.normalize("NFD", token) if unicodedata.category(c) != "Mn")
            pieces, new_word = [], True
            for ch in token:
                if _is_punctuation(ch):
                    pieces.append([ch])
                    new_word = True
                else:
                    if new_word:
                        pieces.append([])
                    new_word = False
                    pieces[-1].append(ch)
            split_tokens.extend("".join(p) for p in pieces)
        return " ".join(split_tokens).split()

    def wordpiece(self, word):
        if len(word) > 200:
            return ["[UNK]"]
        out, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = piece
                    break
                end -= 1
            if found is None:
                return ["[UNK]"]
            out.append(found)
            start = end
        return out

    def tokenize(self, text):
        return [p for word in self.basic(text) for p in self.wordpiece(word)]


def reference_instances(input_files, vocab_file, *, do_lower_case=True, do_whole_word_mask=False,
                        max_seq_length=128, max_predictions_per_seq=20, random_seed=12345, dupe_factor=10,
                        masked_lm_prob=0.15, short_seq_prob=0.1):
    """Feature dicts of the original's instances, in its output order."""
    tok = ReferenceTokenizer(vocab_file, do_lower_case)
    rng = random.Random(random_seed)
    docs = [doc for doc, _ in _reference_documents(input_files, tok)]
    instances = _reference_creation(docs, tok, rng, do_whole_word_mask, max_seq_length, max_predictions_per_seq,
                                    dupe_factor, masked_lm_prob, short_seq_prob)
    rng.shuffle(instances)
    out = []
    for tokens, segment_ids, is_random, positions, labels in instances:
        ids = [tok.vocab[t] for t in tokens]
        n, m = len(ids), len(positions)
        out.append({
            "input_ids": ids + [0] * (max_seq_length - n),
            "input_mask": [1] * n + [0] * (max_seq_length - n),
            "segment_ids": segment_ids + [0] * (max_seq_length - n),
            "masked_lm_positions": positions + [0] * (max_predictions_per_seq - m),
            "masked_lm_ids": [tok.vocab[t] for t in labels] + [0] * (max_predictions_per_seq - m),
            "masked_lm_weights": [1.0] * m + [0.0] * (max_predictions_per_seq - m),
            "next_sentence_labels": [1 if is_random else 0],
        })
    return out


def reference_instances_per_source(input_file, vocab_file, source_starts, *, do_lower_case=True,
                                   do_whole_word_mask=False, max_seq_length=128, max_predictions_per_seq=20,
                                   random_seed=12345, dupe_factor=10, masked_lm_prob=0.15, short_seq_prob=0.1):
    """How many of the original's instances each source makes, the sources being the byte ranges of
    `input_file` that start at `source_starts`: an instance is its document's source's."""
    tok = ReferenceTokenizer(vocab_file, do_lower_case)
    rng = random.Random(random_seed)
    read = _reference_documents([input_file], tok)
    source_of = {id(doc): sum(1 for start in source_starts if start <= at) - 1 for doc, at in read}
    counts = [0] * len(source_starts)

    def made(doc, instances):
        counts[source_of[id(doc)]] += len(instances)

    _reference_creation([doc for doc, _ in read], tok, rng, do_whole_word_mask, max_seq_length,
                        max_predictions_per_seq, dupe_factor, masked_lm_prob, short_seq_prob, made)
    return counts


def _reference_documents(input_files, tok):
    """The original's documents (lists of tokenized sentences, empty ones dropped), each with the byte offset,
    in the files read one after another, of the line its first sentence is on."""
    docs, at = [[[], None]], 0
    for path in input_files:
        with open(path, "rb") as f:
            for raw in f:
                line = raw.replace(b"\r", b"").decode("utf-8", "ignore").strip()
                start, at = at, at + len(raw)
                if not line:
                    docs.append([[], None])
                    continue
                tokens = tok.tokenize(line)
                if tokens:
                    if not docs[-1][0]:
                        docs[-1][1] = start
                    docs[-1][0].append(tokens)
    return [(doc, start) for doc, start in docs if doc]


def _reference_creation(docs, tok, rng, whole_word, max_seq_length, max_pred, dupe_factor, masked_lm_prob,
                        short_seq_prob, made=None):
    """The original's create_training_instances from its shuffle of the documents to before its shuffle of the
    instances; `made(document, its instances)` is called after each document of each pass."""
    rng.shuffle(docs)
    vocab_words = list(tok.vocab.keys())
    instances = []
    for _ in range(dupe_factor):
        for di in range(len(docs)):
            mine = _reference_document(docs, di, max_seq_length, short_seq_prob, masked_lm_prob, max_pred,
                                       vocab_words, rng, whole_word)
            if made is not None:
                made(docs[di], mine)
            instances.extend(mine)
    return instances


def _reference_document(docs, di, max_seq_length, short_seq_prob, masked_lm_prob, max_pred, vocab_words, rng,
                        whole_word):
    document = docs[di]
    max_num_tokens = max_seq_length - 3
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for seg in chunk[:a_end] for t in seg]
            tokens_b = []
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random = True
                target_b = target - len(tokens_a)
                for _ in range(10):
                    rdi = rng.randint(0, len(docs) - 1)
                    if rdi != di:
                        break
                rdoc = docs[rdi]
                for j in range(rng.randint(0, len(rdoc) - 1), len(rdoc)):
                    tokens_b.extend(rdoc[j])
                    if len(tokens_b) >= target_b:
                        break
                i -= len(chunk) - a_end
            else:
                is_random = False
                tokens_b = [t for seg in chunk[a_end:] for t in seg]
            while len(tokens_a) + len(tokens_b) > max_num_tokens:
                longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
                assert len(longer) >= 1  # the original's asserts: they are what refuses max_seq_length < 5
                if rng.random() < 0.5:
                    del longer[0]
                else:
                    longer.pop()
            assert len(tokens_a) >= 1 and len(tokens_b) >= 1
            tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            instances.append(_reference_masked(tokens, segment_ids, is_random, masked_lm_prob, max_pred,
                                               vocab_words, rng, whole_word))
            chunk, length = [], 0
        i += 1
    return instances


def _reference_masked(tokens, segment_ids, is_random, masked_lm_prob, max_pred, vocab_words, rng, whole_word):
    cand = []
    for i, t in enumerate(tokens):
        if t in ("[CLS]", "[SEP]"):
            continue
        if whole_word and cand and t.startswith("##"):
            cand[-1].append(i)
        else:
            cand.append([i])
    rng.shuffle(cand)
    output = list(tokens)
    num_to_predict = min(max_pred, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked, covered = [], set()
    for index_set in cand:
        if len(masked) >= num_to_predict:
            break
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(i in covered for i in index_set):
            continue
        for i in index_set:
            covered.add(i)
            if rng.random() < 0.8:
                output[i] = "[MASK]"
            elif rng.random() < 0.5:
                output[i] = tokens[i]
            else:
                output[i] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            masked.append((i, tokens[i]))
    masked.sort()
    return output, segment_ids, is_random, [i for i, _ in masked], [t for _, t in masked]
