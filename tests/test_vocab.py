"""The trained WordPiece vocabulary: deterministic across processes, a usable BERT vocab."""

import hashlib
import os
import subprocess
import sys

import pytest

from wikiprep import vocab
from shardkit.errors import PrepError
from wikiprep.tokenization import FullTokenizer, Vocab

TEXT = """The quick brown fox jumps over the lazy dog.
Foxes are quick; dogs are lazy, said Dr. Smith of the U.S. survey.
Jumping foxes jumped over jumpers while the dogs slept soundly.
Élan and naïve café owners served crème brûlée to 12 visitors in 1999.
"""


def _train_in_subprocess(corpus, out, hash_seed):
    code = (f"from wikiprep.vocab import build_vocab; "
            f"build_vocab([{str(corpus)!r}], {str(out)!r}, vocab_size=300, min_frequency=1)")
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def test_same_vocabulary_whatever_the_hash_seed(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 20, encoding="utf-8")
    digests = {_train_in_subprocess(corpus, tmp_path / f"v{s}.txt", s) for s in (1, 2, 3)}
    assert len(digests) == 1


def test_vocabulary_is_a_bert_vocab(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 20, encoding="utf-8")
    out = tmp_path / "vocab.txt"
    stats = vocab.build_vocab([corpus], out, vocab_size=120, min_frequency=1)
    tokens = out.read_text(encoding="utf-8").splitlines()
    assert stats["vocab_size"] == len(tokens) == 120
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(set(tokens)) == len(tokens)
    assert "the" in tokens and "##s" in tokens
    assert "É" not in tokens  # lower-cased (accents are kept, as BertNormalizer's default with lowercase)
    assert vocab.check_vocab_file(out) == 120


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(PrepError, match="nope.txt: no such file"):
        vocab.build_vocab([tmp_path / "nope.txt"], tmp_path / "v.txt", vocab_size=100)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(PrepError, match="no words"):
        vocab.build_vocab([empty], tmp_path / "v.txt", vocab_size=100)
    notbert = tmp_path / "words.txt"
    notbert.write_text("a\nb\n")
    with pytest.raises(PrepError, match="words.txt: not a BERT vocabulary"):
        vocab.check_vocab_file(notbert)
    with pytest.raises(PrepError, match="missing.txt: vocabulary file not found"):
        vocab.check_vocab_file(tmp_path / "missing.txt")


def test_unk_is_required_by_the_pipeline_only(tmp_path):
    """One rule, in Vocab: [CLS], [SEP] and [MASK] always; [UNK] only for the pipeline's check, while
    the drop-in, as the original, fails only on a word it cannot spell."""
    no_unk = tmp_path / "vocab.txt"
    no_unk.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    with pytest.raises(PrepError, match=r"vocab.txt: not a BERT vocabulary \(no \[UNK\]\)"):
        vocab.check_vocab_file(no_unk)
    tokenizer = FullTokenizer(Vocab(no_unk))
    assert tokenizer.tokenize("The the") == ["the", "the"]
    with pytest.raises(PrepError, match=r"vocab.txt: vocab lacks \[UNK\] but the text has a word it cannot spell"):
        tokenizer.tokenize("zebra")


def test_load_reads_a_vocabulary_once_per_version_of_the_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\r\n the \nof\nthe\n")
    first = Vocab.load(path)
    assert Vocab.load(path) is first and Vocab.load(str(path)) is first
    fresh = Vocab(path)  # what load stands for: the same parse
    assert (first.id_to_token, first.ids, first.words) == (fresh.id_to_token, fresh.ids, fresh.words)
    assert first.ids["the"] == 8 and first.words.index("the") == 5  # first place, last id, as OrderedDict
    replaced = tmp_path / "new.txt"
    replaced.write_text("[CLS]\n[SEP]\n[MASK]\nnew\n")
    os.replace(replaced, path)  # another file at the path: read again
    assert Vocab.load(path).id_to_token == ["[CLS]", "[SEP]", "[MASK]", "new"]
    with pytest.raises(PrepError, match="not a BERT vocabulary"):
        Vocab.load(path, require_unk=True)  # the UNK requirement is its own entry
    path.unlink()
    with pytest.raises(PrepError, match="vocabulary file not found"):
        Vocab.load(path)
