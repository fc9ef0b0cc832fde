"""Text corpora (#28): a folder of books, sentences, lines or JSON lines through the whole pipeline.

The readers on real bytes (CRLF, a byte-order mark, blank lines of whitespace, compressed files), byte
ranges that partition a file's documents wherever they are cut, the skipped files, the `sentences` format
read as `create-pretraining-data` reads it (the same records), and `PretrainText128` through Luigi's
command line: the same bytes with 1 and 2 workers and any cut of the files, the skipped files counted and
named, a changed corpus refused before any work.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from fixture_paths import REFERENCE_INPUTS, REFERENCE_VOCAB
from shardkit.atomic import sha256_file
from shardkit.errors import PrepError
from wikiprep import reader
from wikiprep.dataset import folder_name, shard_seed
from wikiprep.options import GenerationOptions
from wikiprep.text import files, readers
from wikiprep.verify import verify

REPO = Path(__file__).resolve().parents[1]
SAMPLE = (REFERENCE_INPUTS / "sample_text.txt").read_text(encoding="utf-8")
# The sample's sentences, four to a paragraph: books of real prose.
_LINES = [line for line in SAMPLE.splitlines() if line.strip()]
PARAGRAPHS = [" ".join(_LINES[i:i + 4]) for i in range(0, len(_LINES), 4)]
# The dataset folders of the runs below: seq 128, dupe factor 5, 2 shards (seq128_mask20_dup5_shards2), or 1.
TWO, ONE = (folder_name(GenerationOptions(dupe_factor=5), num_shards=n) for n in (2, 1))


# ---------------------------------------------------------------------------------------------
# Readers and byte ranges

SENTENCES = (b"\xef\xbb\xbfFirst sentence of one.\r\nSecond of one.\r\n \r\n\r\n"
             b"Only sentence of two.\n\t\nThird   doc, first line.\nSecond line.\n\n\n\nLast doc.\n")


def _all(fmt: str, path: Path, cuts: list[int], **kw) -> list:
    """The documents of every range [cuts[i], cuts[i+1]) (the last to the end), in order (without `read`, the
    bytes read so far of each range, for progress)."""
    out = []
    for i, start in enumerate(cuts):
        stop = cuts[i + 1] if i + 1 < len(cuts) else None
        out += [dataclasses.replace(d, read=0)
                for d in readers.documents(fmt, path, path.name, start, stop, min_chars=0, **kw)]
    return out


def test_the_sentences_format_is_the_original_generators_documents(tmp_path):
    path = tmp_path / "s.txt"
    path.write_bytes(SENTENCES)
    docs = _all("sentences", path, [0])
    assert [d.paragraphs for d in docs] == [["First sentence of one.", "Second of one."], ["Only sentence of two."],
                                           ["Third   doc, first line.", "Second line."], ["Last doc."]]
    assert all(not d.split for d in docs)  # never split again
    assert [d.id for d in docs] == ["s.txt:0", f"s.txt:{SENTENCES.index(b'Only')}",
                                    f"s.txt:{SENTENCES.index(b'Third')}", f"s.txt:{SENTENCES.index(b'Last')}"]


@pytest.mark.parametrize("fmt, data", [
    ("sentences", SENTENCES + (b"\n" + SENTENCES[3:]) * 6),
    ("lines", b"\xef\xbb\xbf" + b"".join(b"Document %d, a line.\r\n\n" % i for i in range(40))),
    ("jsonl", b"".join(json.dumps({"text": f"Doc {i}.\nIts second paragraph.", "n": i}).encode() + b"\n"
                       for i in range(40))),
])
def test_byte_ranges_partition_the_documents_wherever_they_are_cut(tmp_path, fmt, data):
    path = tmp_path / f"f.{fmt}"
    path.write_bytes(data)
    whole = _all(fmt, path, [0])
    assert len(whole) >= 28
    for pieces in (2, 3, 7, 19, len(data) // 3, len(data)):
        cuts = [len(data) * k // pieces for k in range(pieces)]
        assert _all(fmt, path, cuts) == whole, pieces


def test_books_join_wrapped_lines_and_split_paragraphs_at_blank_lines(tmp_path):
    path = tmp_path / "b.txt"
    path.write_bytes(b"\xef\xbb\xbfA wrapped\r\nparagraph.\r\n  \r\nAnother one.\r\n")
    (doc,) = readers.documents("books", path, "b.txt", min_chars=0)
    assert doc.paragraphs == ["A wrapped paragraph.", "Another one."] and doc.id == "b.txt" and doc.split


def test_jsonl_without_its_field_is_one_line_naming_the_offset(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine"}\n{"body": "no text"}\n', encoding="utf-8")
    with pytest.raises(PrepError, match=r"c.jsonl: offset 17: no text field 'text'"):
        list(readers.documents("jsonl", path, "c.jsonl", min_chars=0))


# ---------------------------------------------------------------------------------------------
# The files: compressed, skipped, changed

def _compress(path: Path, data: bytes) -> None:
    writers = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".zst": zstandard.ZstdCompressor().compress}
    path.write_bytes(writers[path.suffix](data) if path.suffix in writers else data)


@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2", ".xz", ".zst"])
def test_compressed_files_are_read_as_they_are(tmp_path, suffix):
    path = tmp_path / f"s.txt{suffix}"
    _compress(path, SENTENCES)
    assert files.check_file(path)["text_bytes"] == len(SENTENCES)
    assert [d.paragraphs for d in readers.documents("sentences", path, path.name, min_chars=0)] == \
        [d.paragraphs for d in _all("sentences", _plain(tmp_path), [0])]


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.txt"
    path.write_bytes(SENTENCES)
    return path


@pytest.mark.parametrize("data, reason", [
    ("Café au lait.".encode("latin-1"), "not_utf8"), (b"", "empty"), (b"\xef\xbb\xbf", "empty"),
    (b" \r\n\t\n", "whitespace_only"), (b"\xef\xbb\xbfText.", None)])
def test_files_that_are_skipped_and_why(tmp_path, data, reason):
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    assert files.check_file(path).get("skipped") == reason
    gz = tmp_path / "f.txt.gz"
    _compress(gz, data)
    assert files.check_file(gz).get("skipped") == reason


def test_a_not_utf8_file_is_named_with_its_first_bad_byte(tmp_path):
    (tmp_path / "l.txt").write_bytes(b"ok " * 1000 + "é".encode("latin-1"))
    assert files.check_file(tmp_path / "l.txt")["detail"] == "not UTF-8 (byte 0xe9 at offset 3000)"


def test_changes_name_what_was_added_removed_resized_or_rewritten(tmp_path):
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text(f"{name} text", encoding="utf-8")
    held = files.inventory(tmp_path, jobs=1)
    assert files.changes(tmp_path, held) == []
    (tmp_path / "a.txt").unlink()
    (tmp_path / "d.txt").write_text("new", encoding="utf-8")
    (tmp_path / "b.txt").write_text("b.txt text, longer", encoding="utf-8")
    (tmp_path / "c.txt").write_text("C.TXT TEXT", encoding="utf-8")
    os.utime(tmp_path / "c.txt", ns=(1, 1))
    assert files.changes(tmp_path, held) == ["d.txt added", "a.txt removed", "b.txt 18 bytes, 10 before",
                                             "c.txt changed (another sha256)"]


# ---------------------------------------------------------------------------------------------
# Through Luigi's command line

def _luigi(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([sys.executable, "-m", "luigi", "--module", "workflows", *args, "--local-scheduler"],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def _dataset_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def books(tmp_path_factory) -> Path:
    """A books folder with every quirk of the issue: CRLF, a BOM, an empty file, a whitespace-only file, a
    100,000-character paragraph, a Latin-1 file, a compressed book and a subfolder."""
    root = tmp_path_factory.mktemp("books") / "books"
    (root / "part2").mkdir(parents=True)
    for i, paragraph in enumerate(PARAGRAPHS):
        (root / ("part2" if i % 2 else "") / f"book{i}.txt").write_text(
            f"{paragraph}\n\nThe end of book {i} came at last. Nobody was there to see it.\n", encoding="utf-8")
    (root / "crlf.txt").write_bytes(b"A book written on Windows.\r\nIts lines end in CRLF.\r\n\r\n"
                                    b"A second paragraph of it. It has two sentences.\r\n")
    (root / "bom.txt").write_bytes(b"\xef\xbb\xbfA book with a byte-order mark. It is read as text.\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "blank.txt").write_bytes(b"  \n\n\t \n")
    (root / "long.txt").write_text(" ".join(f"Sentence number {i} of the long paragraph goes on." for i in
                                            range(2000))[:100_000] + "\n", encoding="utf-8")
    (root / "latin1.txt").write_bytes("Un café, très noir. Rien de plus.".encode("latin-1"))
    _compress(root / "part2" / "zipped.txt.gz", b"A compressed book. Its text is read as it is.\n")
    return root


def _text_run(data: Path, text_dir: Path, *extra: str, workers: int = 1) -> subprocess.CompletedProcess:
    return _luigi("PretrainText128", "--data-dir", str(data), "--text-dir", str(text_dir), "--text-format",
                  "books", "--vocab-file", str(REFERENCE_VOCAB), "--num-shards", "2", "--min-doc-chars", "0",
                  "--workers", str(workers), *extra)


@pytest.fixture(scope="module")
def built(books, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    data = tmp_path_factory.mktemp("one") / "data"
    run = _text_run(data, books)
    assert run.returncode == 0, run.stderr[-3000:]
    return data / "books" / TWO, run


def test_a_books_folder_builds_a_dataset_with_its_quirks_counted_and_named(built, books):
    folder, run = built
    assert sorted(p.name for p in folder.glob("text_*")) == [
        "text_00000.index", "text_00000.tfrecord", "text_00001.index", "text_00001.tfrecord"]
    stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    assert stats["corpus"]["skipped_files"] == {"not_utf8": 1, "empty": 1, "whitespace_only": 1}
    assert [(f["path"], f["reason"]) for f in stats["corpus"]["skipped"]] == [
        ("blank.txt", "whitespace_only"), ("empty.txt", "empty"), ("latin1.txt", "not_utf8")]
    for name in ("blank.txt: skipped: nothing but whitespace", "empty.txt: skipped: empty",
                 "latin1.txt: skipped: not UTF-8 (byte 0xe9 at offset 6)"):
        assert name in run.stderr
    documents = sum(s["sentence_documents"] for s in stats["shards"])
    assert documents == len(PARAGRAPHS) + 4  # the books, crlf, bom, long and the compressed one
    description = json.loads((folder / "dataset.json").read_text(encoding="utf-8"))
    assert description["text_format"] == "books" and len(description["text_files"]) == len(PARAGRAPHS) + 7
    zipped = books / "part2" / "zipped.txt.gz"
    assert description["text_files"]["part2/zipped.txt.gz"] == {"size": zipped.stat().st_size,
                                                                "sha256": sha256_file(zipped)}
    report = (folder / "report" / "report.txt").read_text(encoding="utf-8")
    assert "skipped files       1 empty, 1 not_utf8, 1 whitespace_only" in report
    assert "Files skipped, by reason" in (folder / "report" / "report.html").read_text(encoding="utf-8")
    assert verify(folder)["records"] == stats["total"]["instances"]
    # The CRLF book's lines were read without their carriage returns and split into its sentences.
    shards = "".join(p.read_text(encoding="utf-8") for p in sorted(folder.parent.glob("sentences/*/shard_*.txt")))
    assert "A book written on Windows.\nIts lines end in CRLF.\nA second paragraph" in shards and "\r" not in shards
    assert "\ufeff" not in shards


def test_two_workers_and_other_cuts_give_the_same_bytes(built, books, tmp_path):
    folder, _ = built
    run = _text_run(tmp_path / "two", books, workers=2)
    assert run.returncode == 0, run.stderr[-3000:]
    assert _dataset_files(tmp_path / "two" / "books" / TWO) == _dataset_files(folder)
    # A piece per file rather than the small files read together: the same records.
    run = _text_run(tmp_path / "each", books, "--text-piece-mb", "0", workers=2)
    assert run.returncode == 0, run.stderr[-3000:]
    each = tmp_path / "each" / "books"
    assert len(list(each.glob("split/*/0*"))) == len(PARAGRAPHS) + 4
    for name in ("text_00000.tfrecord", "text_00001.tfrecord", "stats.json"):
        assert (each / TWO / name).read_bytes() == (folder / name).read_bytes(), name


def test_files_cut_in_byte_ranges_give_the_same_bytes(tmp_path):
    """A lines corpus read whole, and cut into a range of about 1 kB each: the same sentence shards and records;
    dataset.json differs only in --text-piece-mb, which it records as Wikipedia's records --extract-slice-mb."""
    corpus = tmp_path / "lines"
    corpus.mkdir()
    (corpus / "all.txt").write_text("\n".join(PARAGRAPHS * 3) + "\n", encoding="utf-8")
    runs = {}
    for mb in ("0", "0.001"):
        data = tmp_path / f"data{mb}"
        run = _luigi("PretrainText128", "--data-dir", str(data), "--text-dir", str(corpus), "--text-format", "lines",
                     "--vocab-file", str(REFERENCE_VOCAB), "--num-shards", "2", "--min-doc-chars", "0",
                     "--text-piece-mb", mb, "--workers", "2")
        assert run.returncode == 0, run.stderr[-3000:]
        runs[mb] = data / "lines"
    assert len(list(runs["0.001"].glob("split/*/0*"))) > 5 and len(list(runs["0"].glob("split/*/0*"))) == 1
    same = ["sentences/n2_seed12345_min0/shard_00000.txt", "sentences/n2_seed12345_min0/shard_00001.txt"] + \
           [f"{TWO}/{n}" for n in ("text_00000.tfrecord", "text_00000.index", "text_00001.tfrecord",
                                               "text_00001.index", "stats.json", "vocab.txt")]
    for name in same:
        assert (runs["0"] / name).read_bytes() == (runs["0.001"] / name).read_bytes(), name
    whole, cut = (json.loads((runs[mb] / TWO / "dataset.json").read_text()) for mb in runs)
    assert {k for k in whole if whole[k] != cut[k]} == {"text_piece_mb"}


def test_a_second_run_is_complete_and_a_changed_corpus_is_refused_before_any_work(books, tmp_path):
    corpus = tmp_path / "books"
    corpus.mkdir()
    for path in sorted(books.rglob("book*.txt")):
        (corpus / path.name).write_bytes(path.read_bytes())
    data = tmp_path / "data"
    assert _text_run(data, corpus).returncode == 0
    again = _text_run(data, corpus)
    assert again.returncode == 0 and "ran successfully" not in again.stderr  # complete: nothing ran
    with open(corpus / "book0.txt", "a", encoding="utf-8") as f:
        f.write("One more line.\n")
    before = _dataset_files(data)
    refused = _text_run(data, corpus)
    assert refused.returncode != 0
    errors = [line for line in refused.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert len(errors) == 1 and f"{corpus}: changed since {data / 'books' / 'text_files.json'} was made " \
                                "(book0.txt " in errors[0], refused.stderr[-2000:]
    assert _dataset_files(data) == before


def test_a_sentences_document_too_short_is_dropped_without_a_sentence_model(tmp_path):
    """A document of the sentences format under --min-doc-chars is counted as dropped; none is ever split, so no
    Punkt model is needed for it either (it was a ValueError: "needs splitting, and no sentence model")."""
    from wikiprep.sentences import split_piece

    path = tmp_path / "s.txt"
    path.write_bytes(b"Short one.\n\n" + b"A sentence long enough to be kept by the minimum. " * 5 + b"\n")
    docs = readers.documents("sentences", path, path.name, min_chars=200)
    stats = split_piece(docs, None, tmp_path / "split", num_shards=1, seed=1)
    assert (stats["documents"], stats["dropped"]) == (1, {"too_short": 1}), stats


def test_the_sentences_format_gives_create_pretraining_datas_records(tmp_path):
    """One shard holds every document in corpus order: its instances are the drop-in's on the same file, with
    the shard's seed. No Punkt model is trained for it."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "sample_text.txt").write_bytes((REFERENCE_INPUTS / "sample_text.txt").read_bytes())
    data = tmp_path / "data"
    run = _luigi("PretrainText128", "--data-dir", str(data), "--text-dir", str(corpus), "--text-format", "sentences",
                 "--vocab-file", str(REFERENCE_VOCAB), "--num-shards", "1", "--min-doc-chars", "0", "--workers", "1")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not list((data / "corpus").glob("punkt*"))
    out = tmp_path / "reference.tfrecord"
    ref = subprocess.run([sys.executable, "-c", "import sys; from wikiprep.cli import main; sys.exit(main())",
                          "create-pretraining-data", f"--input_file={corpus / 'sample_text.txt'}",
                          f"--output_file={out}", f"--vocab_file={REFERENCE_VOCAB}", "--dupe_factor=5",
                          f"--random_seed={shard_seed(12345, 0)}"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert ref.returncode == 0, ref.stderr[-2000:]
    ours = data / "corpus" / ONE / "text_00000.tfrecord"
    assert ours.read_bytes() == out.read_bytes()


def test_a_jsonl_gz_corpus_of_german_and_french_builds(tmp_path):
    """Web-style documents in a field of another name, gzip-compressed, two files cut in byte ranges, cased
    (--do-lower-case false) with a vocabulary trained on them: capitals and accents are kept in the vocabulary and
    in the records, and no token is [UNK]."""
    corpus = tmp_path / "web"
    corpus.mkdir()
    german = ["Die Stadt liegt am Fluss. Im Sommer kommen viele Besucher über die Brücke.",
              "Das Wetter war gestern schön. Heute regnet es den ganzen Tag, sagt Jürgen Weiß."]
    french = ["La ville est au bord du fleuve. En été, beaucoup de visiteurs arrivent à l'hôtel.",
              "Le marché ouvre à huit heures. Les enfants jouent dans le parc près de l'église."]
    for name, texts in (("de.jsonl.gz", german), ("fr.jsonl.gz", french)):
        lines = [json.dumps({"content": f"{t}\nAbsatz {i}. Noch ein Satz hier.", "url": f"https://x/{i}"},
                            ensure_ascii=False) for i, t in enumerate(texts * 20)]
        _compress(corpus / name, ("\n".join(lines) + "\n").encode("utf-8"))
    data = tmp_path / "data"
    run = _luigi("PretrainText128", "--data-dir", str(data), "--text-dir", str(corpus), "--text-format", "jsonl",
                 "--text-field", "content", "--do-lower-case", "false", "--vocab-size", "400", "--num-shards", "2",
                 "--min-doc-chars", "0", "--workers", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    folder = data / "web" / TWO
    stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    assert sum(s["sentence_documents"] for s in stats["shards"]) == 80
    assert verify(folder)["records"] == stats["total"]["instances"] > 0
    assert stats["total"]["unk_tokens"] == 0 < stats["total"]["tokens"]
    shards = "".join(p.read_text(encoding="utf-8") for p in folder.parent.glob("sentences/*/shard_*.txt"))
    assert "En été, beaucoup de visiteurs arrivent à l'hôtel." in shards
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert {"Die", "die", "Le", "le", "é", "ü", "##ß"} <= set(vocab)  # cased, and the accents not stripped
    # The records hold them too: the words of a cased sentence, read back through the dataset's vocabulary.
    ids = {w: i for i, w in enumerate(vocab)}
    records = set()
    for _, batch in reader.batches(reader.open_records(folder)):
        records |= set(batch["input_ids"].ravel().tolist())
    assert {ids["Die"], ids["Le"]} <= records
    held = [vocab[i] for i in records]
    assert all(any(accent in word for word in held) for accent in "éüß"), held


def test_the_dry_run_writes_nothing(books, tmp_path):
    out = subprocess.run([sys.executable, "-m", "workflows", "plan", "PretrainText128", "--data-dir",
                          str(tmp_path / "data"), "--text-dir", str(books), "--text-format", "books",
                          "--num-shards", "2"], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    # The small files are read together: one piece.
    assert f"files: {len(PARAGRAPHS) + 7} (3 skipped), pieces: 1, from {books}, read now and not saved" in out.stdout
    assert "TextTrainPunkt" in out.stdout and not (tmp_path / "data").exists()
