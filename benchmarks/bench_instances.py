"""Time wikiprep's BERT instance generator against the original algorithm on one core.

    .venv/bin/python benchmarks/bench_instances.py                    # ~20 MB built from the fixtures
    .venv/bin/python benchmarks/bench_instances.py --input big.txt --size-mb 0 --reference

Reports input MB/s, instances/s and peak RSS (ru_maxrss) of `create_pretraining_file` at
seq 128 / 20 predictions / dupe 5 (by default), run in a fresh subprocess so peak memory is
its own. With `--reference` it also times `reference_instances` below on the same input in
another subprocess and checks that both give the same instances.

`reference_instances` is a plain port of google-research/bert's create_pretraining_data.py and
tokenization.py (Apache-2.0, Copyright 2018 The Google AI Language Team Authors): strings
throughout, a character-by-character BasicTokenizer, `random.Random.randint`/`shuffle` as the
original calls them, all instances in memory. It stands in for the original (which needs
TensorFlow 1.x) when measuring speed-ups, and the tests use it as an independent oracle.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "google-reference"


# ---------------------------------------------------------------------------------------------
# The original's code path, ported (strings, no TensorFlow)

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
    docs = [[]]
    for path in input_files:
        with open(path, "rb") as f:
            for raw in f:
                line = raw.replace(b"\r", b"").decode("utf-8", "ignore").strip()
                if not line:
                    docs.append([])
                    continue
                tokens = tok.tokenize(line)
                if tokens:
                    docs[-1].append(tokens)
    docs = [d for d in docs if d]
    rng.shuffle(docs)
    vocab_words = list(tok.vocab.keys())
    instances = []
    for _ in range(dupe_factor):
        for di in range(len(docs)):
            instances.extend(_reference_document(docs, di, max_seq_length, short_seq_prob, masked_lm_prob,
                                                 max_predictions_per_seq, vocab_words, rng, do_whole_word_mask))
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
                if rng.random() < 0.5:
                    del longer[0]
                else:
                    longer.pop()
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


# ---------------------------------------------------------------------------------------------
# Benchmark

def build_input(path: Path, size_mb: float, seed: int = 0) -> int:
    """Concatenate the fixture inputs' documents, reshuffled each round, until `size_mb` MB."""
    docs = []
    for p in sorted((FIXTURES / "inputs").glob("*.txt")):
        current = []
        for line in p.read_text(encoding="utf-8", errors="ignore").split("\n"):
            if line.strip():
                current.append(line)
            elif current:
                docs.append("\n".join(current))
                current = []
        if current:
            docs.append("\n".join(current))
    if not docs:
        raise SystemExit(f"no fixture documents under {FIXTURES}")
    rng = random.Random(seed)
    target, size, parts = int(size_mb * 1e6), 0, []
    while size < target:
        order = docs[:]
        rng.shuffle(order)
        for d in order:
            parts.append(d)
            size += len(d.encode("utf-8")) + 2
            if size >= target:
                break
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return path.stat().st_size


def _child(args) -> None:
    """Run one timed generation in this (fresh) process and print a JSON result line."""
    flags = json.loads(args.child_flags)
    start_cpu, start = time.process_time(), time.perf_counter()
    if args.child == "wikiprep":
        sys.path.insert(0, str(REPO))
        from wikiprep.instances import create_pretraining_file
        from wikiprep.options import GenerationOptions

        out = Path(args.workdir) / "bench.tfrecord"
        stats = create_pretraining_file([args.input], args.vocab, str(out), str(out.with_suffix(".index")),
                                        GenerationOptions(**flags))
        instances = stats["instances"]
    else:
        feats = reference_instances([args.input], args.vocab, **flags)
        instances = len(feats)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    digest = _digest_file(out) if args.child == "wikiprep" else _digest_features(feats)
    print(json.dumps({"wall": wall, "cpu": cpu, "instances": instances, "digest": digest, "max_rss_mb": max_rss}))


def _phases(args) -> None:
    """Where the time goes: the writer's stages one after another, CPU seconds each (in this process)."""
    sys.path.insert(0, str(REPO))
    from shardkit.records import RecordWriter
    from wikiprep import instances
    from wikiprep.options import GenerationOptions
    from wikiprep.tokenization import Vocab

    flags = json.loads(args.child_flags)
    opts = GenerationOptions(**flags)
    clock = time.process_time
    t0 = clock()
    vocab = Vocab(args.vocab)
    corpus = instances.read_corpus([args.input], vocab)
    t1 = clock()
    instances.generate(corpus, vocab, opts, random.Random(flags["random_seed"]), lambda *inst: None)
    t2 = clock()
    encoder, records = instances.InstanceEncoder(opts.max_seq_length, opts.max_predictions_per_seq), []
    instances.generate(corpus, vocab, opts, random.Random(flags["random_seed"]),
                        lambda *inst: records.append(encoder.encode(*inst)))
    t3 = clock() - (t2 - t1)
    with RecordWriter(Path(args.workdir) / "phases.tfrecord", Path(args.workdir) / "phases.index") as w:
        for data in records:
            w.write(data)
    t4 = clock() - (t2 - t1)
    n = len(records)
    print(json.dumps({"read+tokenize": t1 - t0, "generate (rng, pairs, masks)": t2 - t1,
                      "encode records": t3 - t2, "RecordWriter (frame, CRC, index)": t4 - t3, "instances": n}))


def _digest_features(feats) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in feats:
        h.update(json.dumps(f, sort_keys=True).encode())
    return h.hexdigest()


def _digest_file(path: Path) -> str:
    """Same digest as `_digest_features`, computed from the TFRecord file (records decoded in Python)."""
    sys.path.insert(0, str(REPO))
    from shardkit.example import decode_example
    from shardkit.records import read_records

    feats = []
    for data in read_records(path):
        ex = decode_example(data)
        feats.append({k: ex[k] for k in sorted(ex)})
    return _digest_features(feats)


def _run_child(kind: str, args, flags: dict, workdir: str) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--child-flags", json.dumps(flags), "--input", args.input,
           "--vocab", args.vocab, "--workdir", workdir]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{kind} run failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", help="text file (one sentence a line, blank line between documents)")
    p.add_argument("--size-mb", type=float, default=20.0, help="size of the input built from the fixtures")
    p.add_argument("--vocab", default=str(FIXTURES / "bert-base-uncased-vocab.txt"))
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--max-predictions-per-seq", type=int, default=20)
    p.add_argument("--dupe-factor", type=int, default=5)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--whole-word-mask", action="store_true")
    p.add_argument("--reference", action="store_true", help="also time the ported original (slow) and compare")
    p.add_argument("--phases", action="store_true", help="also time each stage separately (CPU seconds)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-flags", help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "phases":
        _phases(args)
        return 0
    if args.child:
        _child(args)
        return 0
    flags = dict(max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq,
                 dupe_factor=args.dupe_factor, random_seed=args.seed, do_whole_word_mask=args.whole_word_mask)
    with tempfile.TemporaryDirectory(prefix="bench-instances-") as workdir:
        if args.input is None:
            args.input = str(Path(workdir) / "input.txt")
            build_input(Path(args.input), args.size_mb)
        size = os.path.getsize(args.input)
        print(f"input {args.input}: {size / 1e6:.2f} MB; flags {flags}")
        runs = {"wikiprep": _run_child("wikiprep", args, flags, workdir)}
        if args.reference:
            runs["reference"] = _run_child("reference", args, flags, workdir)
        for kind, r in runs.items():
            print(f"{kind:>9}: {r['wall']:7.2f} s wall, {r['cpu']:7.2f} s cpu, {size / 1e6 / r['wall']:6.2f} MB/s, "
                  f"{r['instances'] / r['wall']:8.0f} instances/s, {r['instances']} instances, "
                  f"peak RSS {r['max_rss_mb']:.0f} MB")
        if args.phases:
            ph = _run_child("phases", args, flags, workdir)
            n = ph.pop("instances")
            total = sum(ph.values())
            for stage, sec in ph.items():
                print(f"  {stage:<34} {sec:6.2f} s cpu {100 * sec / total:5.1f}%  {1e6 * sec / n:6.1f} us/instance")
        if args.reference:
            same = runs["wikiprep"]["digest"] == runs["reference"]["digest"]
            print(f"speed-up {runs['reference']['wall'] / runs['wikiprep']['wall']:.1f}x wall, "
                  f"{runs['reference']['cpu'] / runs['wikiprep']['cpu']:.1f}x cpu; same instances: {same}")
            if not same:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
