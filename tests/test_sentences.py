"""Sentence shards: offline Punkt, hash mixing, the original generator's input format, streaming merge."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from wikiprep import sentences
from shardkit.errors import PrepError

def write_extracted(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The embedded sample dump's first part, through the real extractor."""
    from wikiprep import extract, samples

    root = tmp_path_factory.mktemp("dump")
    folder = samples.write_sample_dump(root)
    part = sorted(folder.glob("*.bz2"))[0]
    out = root / "part1.jsonl"
    extract.extract_part(part, out, "20260101")
    return out


def test_shard_of_is_stable_and_spreads_documents():
    assert sentences.shard_of(12345, 42, 8) == sentences.shard_of(12345, 42, 8)
    counts = Counter(sentences.shard_of(7, i, 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 900
    code = "from wikiprep.sentences import shard_of; print([shard_of(1, i, 16) for i in range(50)])"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(s))).stdout for s in (1, 2)}
    assert len(outs) == 1


def test_seeded_choices_keep_their_values():
    """Page -> shard and shard -> generation seed share one hash; these are the values datasets were made with."""
    from wikiprep import dataset

    assert [sentences.shard_of(12345, i, 7) for i in range(20)] == [0, 6, 5, 3, 6, 2, 6, 6, 2, 5, 1, 5, 3, 6, 0, 6,
                                                                     4, 3, 4, 4]
    assert [dataset.shard_seed(12345, i) for i in range(4)] == [4461578988926160027, 8442692986265392166,
                                                                7262374744258485085, 722521436334610896]


def test_punkt_trained_offline_learns_abbreviations(extracted, tmp_path):
    model = tmp_path / "punkt.json"
    stats = sentences.train_punkt(sentences.punkt_sample([extracted], min_chars=200), model)
    assert stats["trained_on_chars"] > 50000
    learned = set(json.loads(model.read_text())["abbrev_types"])
    assert {"dr", "e.g", "u.s", "st"} <= learned
    splitter = sentences.load_punkt(model)
    got = splitter.tokenize("In 1901, Dr. Smith rebuilt the mill near St. Wesanholm. The mill grew quickly. "
                            "It employed many people, e.g. farmers and smiths.")
    assert got == ["In 1901, Dr. Smith rebuilt the mill near St. Wesanholm.", "The mill grew quickly.",
                   "It employed many people, e.g. farmers and smiths."]


def test_plain_regex_punkt_equals_nltk_punkt(extracted, tmp_path):
    """Our `re`-compiled Punkt trains the same model and splits the same sentences as stock nltk."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer, PunktTrainer

    sample = sentences.punkt_sample([extracted], min_chars=200)
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sample, model)
    stock = PunktTrainer()
    stock.train("\n\n".join(sample))
    params = stock.get_params()
    saved = json.loads(model.read_text())
    assert saved["abbrev_types"] == sorted(params.abbrev_types)
    assert saved["sent_starters"] == sorted(params.sent_starters)
    assert saved["ortho_context"] == sorted([k, v] for k, v in params.ortho_context.items())
    assert saved["collocations"] == sorted(list(c) for c in params.collocations)
    ours, theirs = sentences.load_punkt(model), PunktSentenceTokenizer(params)
    paragraphs = [p for text in sample for p in text.split("\n")]
    paragraphs += ["He said “Stop.” Then he left... Really?! (See p. 4.) 'Quoted.' Done", "3.14 is pi. Ok.",
                   "Mr. A. B. Smith Jr. met U.S. officials -- twice. Next."]
    assert sum(len(ours.tokenize(p)) for p in paragraphs) > 1000
    assert [ours.tokenize(p) for p in paragraphs] == [theirs.tokenize(p) for p in paragraphs]


def test_split_and_merge_write_the_generator_input_format(extracted, tmp_path):
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([extracted], min_chars=200), model)
    n_docs = sum(1 for _ in sentences.read_documents(extracted))
    out = tmp_path / "split" / "part1"
    stats = sentences.split_part(extracted, model, out, num_shards=3, seed=5, min_chars=200)
    assert stats["documents"] + sum(stats["dropped"].values()) == n_docs and stats["documents"] >= 10
    assert sorted(p.name for p in out.iterdir()) == [sentences.bucket_name(i) for i in range(3)]
    assert sum(stats["documents_per_shard"]) == stats["documents"]
    shard = tmp_path / "shard_00000.txt"
    merged = sentences.merge_shard([out / sentences.bucket_name(0), out / sentences.bucket_name(0)], shard)
    assert merged["documents"] == 2 * stats["documents_per_shard"][0]
    text = shard.read_text(encoding="utf-8")
    docs = text.split("\n\n")
    assert docs[-1] == "" and all(d.strip() for d in docs[:-1])  # a blank line after every document
    lines = docs[0].split("\n")
    assert len(lines) > 20
    assert all(line == " ".join(line.split()) and line[-1] in ".!?\"')" for line in lines), lines[:5]
    # Same input, same seed: the same bytes; another seed: another assignment of documents to shards.
    again = sentences.split_part(extracted, model, tmp_path / "again", num_shards=3, seed=5, min_chars=200)
    assert again == stats and (tmp_path / "again" / "bucket_00001.txt").read_bytes() == \
        (out / "bucket_00001.txt").read_bytes()
    other = sentences.split_part(extracted, model, tmp_path / "other", num_shards=3, seed=6, min_chars=200)
    assert other["documents_per_shard"] != stats["documents_per_shard"]


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(PrepError, match="missing.jsonl: extracted part not found"):
        list(sentences.read_documents(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "ok"}\nnot json\n')
    with pytest.raises(PrepError, match="bad.jsonl: line 2"):
        list(sentences.read_documents(bad))
    empty = write_extracted(tmp_path / "empty.jsonl", [{"id": 1, "title": "x", "text": "short"}])
    with pytest.raises(PrepError, match="no article text"):
        sentences.train_punkt(sentences.punkt_sample([empty], min_chars=100), tmp_path / "p.json")
    notmodel = tmp_path / "notmodel.json"
    notmodel.write_text("[]")
    with pytest.raises(PrepError, match="notmodel.json: not a wikiprep Punkt model"):
        sentences.load_punkt(notmodel)


def _split(per_shard, dropped=None):
    return {"documents": sum(per_shard), "sentences": 10 * sum(per_shard), "dropped": dropped or {},
            "documents_per_shard": per_shard}


def _extracted(part, articles, **dropped):
    return {"part": part, "pages": articles + sum(dropped.values()), "articles": articles, "dropped": dropped}


def test_judge_splits_counts_each_shard_from_the_split_stats_alone():
    """What each shard will hold, and the dropped documents summed by reason, with no text read."""
    corpus = sentences.judge_splits([_split([2, 0, 1], {"too_short": 1}), _split([1, 3, 2], {"too_short": 2})],
                                    [_extracted("p1", 4, redirect=5), _extracted("p2", 8, redirect=1, empty=2)],
                                    num_shards=3, source="enwiki 20260101")
    assert corpus == {"documents": 9, "documents_per_shard": [3, 3, 3],
                      "dropped": {"empty": 2, "redirect": 6, "too_short": 3}}


@pytest.mark.parametrize("splits, extracted, expected", [
    # every article dropped at cleaning
    ([_split([0, 0], {"too_short": 3})], [_extracted("p1", 3)],
     "enwiki 20260101: no article survived extraction and cleaning (dropped: {'too_short': 3})"),
    # a part that yields no article at all is named before the totals are judged
    ([_split([2, 2]), _split([0, 0])], [_extracted("p1", 4), _extracted("p2", 0, redirect=7)],
     "p2 yields no articles"),
    # more shards than the corpus fills: every empty shard counted, in one line
    ([_split([5, 0, 0, 1]), _split([4, 0, 0, 0])], [_extracted("p1", 6), _extracted("p2", 4)],
     "--num-shards 4: 2 of the sentence shards would be empty (enwiki 20260101 has 10 documents after cleaning, "
     "spread by hash); give fewer shards, at most about 1 for this corpus"),
])
def test_judge_splits_refuses_a_corpus_that_does_not_fill_the_shards(splits, extracted, expected):
    with pytest.raises(PrepError) as error:
        sentences.judge_splits(splits, extracted, num_shards=len(splits[0]["documents_per_shard"]),
                               source="enwiki 20260101")
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_merged_shards_are_the_buckets_in_dump_order(extracted, tmp_path):
    """Shard i is bucket i of every split, in the order given, byte for byte; merged one at a time, in any
    order, the shards hold what the splits' counts promised."""
    model = tmp_path / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([extracted], min_chars=200), model)
    splits = [tmp_path / "split" / name for name in ("a", "b")]
    stats = [sentences.split_part(extracted, model, splits[0], num_shards=3, seed=5, min_chars=200),
             sentences.split_part(extracted, model, splits[1], num_shards=3, seed=6, min_chars=200)]
    corpus = sentences.judge_splits(stats, [_extracted("p", 30)], num_shards=3, source="x")
    for i in (2, 0, 1):
        out = tmp_path / "sentences" / sentences.shard_name(i)
        merged = sentences.merge_shard([s / sentences.bucket_name(i) for s in splits], out)
        assert out.read_bytes() == b"".join((s / sentences.bucket_name(i)).read_bytes() for s in splits)
        assert merged["documents"] == corpus["documents_per_shard"][i]
        assert merged["sentences"] == sum(1 for line in out.read_bytes().splitlines() if line)
    with pytest.raises(PrepError, match=r"--shard 3: must be from 0 to 2 \(--num-shards 3\)"):
        sentences.check_shard(3, 3)
