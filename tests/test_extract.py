"""extract_part on the sample dump parts, through the real WikiExtractor 3.1.0, and on bad parts."""

import bz2
import json
import os
import re
import subprocess
import sys
import tracemalloc
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shardkit.errors import PrepError
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions
from wikiprep.wikipedia.extract import (MAX_PAGE_CHARS, PartReader, clock_magic_words, extract_part, is_disambiguation)
from wikiprep.wikipedia.samples import ARTICLES, write_dump_status, write_sample_dump

REPO = Path(__file__).resolve().parents[1]
NS = "{http://www.mediawiki.org/xml/export-0.10/}"
DATE = "20260101"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample dump, each part extracted once: (parts, outputs, stats)."""
    root = tmp_path_factory.mktemp("extract")
    folder = write_sample_dump(root / "site", date=DATE)
    parts = sorted(p for p in folder.iterdir() if p.suffix == ".bz2")
    outs, stats = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DeprecationWarning/re warning from wikiextractor on 3.11
        for i, part in enumerate(parts):
            out = root / f"part{i}.jsonl"
            stats.append(extract_part(part, out, DATE))
            outs.append(out)
    return parts, outs, stats


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def xml_pages(part: Path) -> list[ET.Element]:
    return ET.fromstring(bz2.decompress(part.read_bytes())).findall(NS + "page")


def test_articles_are_written_in_file_order(sample):
    parts, outs, stats = sample
    titles = []
    for part, out, st in zip(parts, outs, stats):
        recs = records(out)
        assert st["articles"] == len(recs) > 0
        assert st["pages"] == len(xml_pages(part))
        assert st["pages"] == st["articles"] + sum(st["dropped"].values())
        assert st["xml_bytes"] == len(bz2.decompress(part.read_bytes()))
        order = [int(p.findtext(NS + "id")) for p in xml_pages(part)]
        ids = [r["id"] for r in recs]
        assert ids == [i for i in order if i in set(ids)]  # pages in file order
        for r in recs:
            assert set(r) == {"id", "title", "url", "text"} and isinstance(r["id"], int)
            assert r["url"] == f"https://en.wikipedia.org/wiki?curid={r['id']}"
            assert len(r["text"]) > 2000
        titles += [r["title"] for r in recs]
    # every generated article but the one made only of templates
    assert sorted(titles) == sorted(t for t, _ in ARTICLES)
    assert "Harbour Lights: Live at Kestrel Bay" in titles  # ns 0 despite the colon


def test_redirects_namespaces_and_disambiguation_are_dropped(sample):
    _, outs, stats = sample
    titles = {r["title"] for out in outs for r in records(out)}
    for title in ("Valmont", "Brivane", "Dorvik siege", "Brivane (disambiguation)", "Tomas Varga",
                  "Galford", "Zeller Formation", "Talk:Valmont-sur-Lère", "Template:Infobox settlement",
                  "Category:Towns", "File:Valmont skyline 1998.jpg", "Module:Convert"):
        assert title not in titles
    dropped = {k: sum(st["dropped"][k] for st in stats) for k in stats[0]["dropped"]}
    assert dropped == {"redirect": 5, "other_namespace": 9, "disambiguation": 3, "empty": 1, "too_short": 0}


def test_disambiguation_detection():
    assert is_disambiguation("Mercury (disambiguation)", "Mercury may be")
    for template in ("{{disambiguation}}", "{{Disambiguation|geo}}", "{{disambig}}", "{{dab}}",
                     "{{hndis|Smith, John}}", "{{ Geodis }}"):
        assert is_disambiguation("Mercury", f"'''Mercury''' may refer to:\n* x\n{template}\n"), template
    assert not is_disambiguation("Mercury", "{{Infobox planet}} '''Mercury''' is a planet. {{dablink}}")


def test_clock_magic_words_are_pinned_to_the_dump_date(sample, tmp_path):
    _, outs, _ = sample
    text = "\n".join(r["text"] for out in outs for r in records(out))
    # {{CURRENTMONTHNAME}} {{CURRENTYEAR}} and {{LOCALDAY}} {{LOCALMONTHNAME}} {{LOCALYEAR}}
    assert len(re.findall(r"As of January 2026, ", text)) >= 20
    assert len(re.findall(r"page updated 1 January 2026\)", text)) >= 20
    assert re.search(r"As of 2026 it had about", text)
    # {{#expr: {{CURRENTYEAR}} - founding}} is evaluated with the pinned year
    parts, _, _ = sample
    founded = re.findall(r"founded \{\{#expr: \{\{CURRENTYEAR\}\} - (\d+)\}\} years ago",
                         bz2.decompress(parts[0].read_bytes()).decode())
    assert founded and all(f"founded {2026 - int(y)} years ago" in text for y in founded)
    # another dump date gives that date's words, whatever the clock says
    out = tmp_path / "old.jsonl"
    extract_part(parts[0], out, "20190315")
    old = "\n".join(r["text"] for r in records(out))
    assert "As of March 2019, " in old and "page updated 15 March 2019)" in old
    assert "January 2026" not in old and "As of 2026 " not in old


def test_clock_magic_word_values():
    words = clock_magic_words("20260101")
    assert words["currentyear"] == words["localyear"] == "2026"
    assert (words["currentmonth"], words["currentmonth1"], words["currentday"], words["currentday2"]) == \
        ("01", "1", "1", "01")
    assert words["currentdayname"] == "Thursday" and words["currentdow"] == "4"
    assert words["currenttimestamp"] == "20260101000000" and words["currenttime"] == "00:00"
    with pytest.raises(PrepError, match="YYYYMMDD"):
        clock_magic_words("latest")


def test_output_is_identical_across_runs(sample, tmp_path):
    parts, outs, stats = sample
    for i, part in enumerate(parts):
        again = tmp_path / f"again{i}.jsonl"
        assert extract_part(part, again, DATE) == stats[i]
        assert again.read_bytes() == outs[i].read_bytes()


def test_wikiextractor_imports_cleanly_on_this_python():
    # WikiExtractor #336: 3.0.x failed on 3.11 with "global flags not at the start"; 3.1.0 on 3.11 to 3.13.
    proc = subprocess.run([sys.executable, "-W", "error", "-c",
                           "import wikiextractor.extract, wikiextractor.WikiExtractor as w; print(w.__version__)"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3.1.0"


def test_min_chars_drops_short_articles(sample, tmp_path):
    parts, outs, _ = sample
    lengths = sorted(len(r["text"]) for r in records(outs[0]))
    cut = lengths[len(lengths) // 2]
    st = extract_part(parts[0], tmp_path / "long.jsonl", DATE, min_chars=cut)
    assert 0 < st["dropped"]["too_short"] < len(lengths) and st["articles"] + st["dropped"]["too_short"] == len(lengths)
    with pytest.raises(PrepError, match=r"no articles.*too_short"):
        extract_part(parts[0], tmp_path / "none.jsonl", DATE, min_chars=10**9)
    assert not (tmp_path / "none.jsonl").exists()


def assert_nothing_written(folder: Path):
    assert [p.name for p in folder.iterdir()] == [], "a failed extraction left files behind"


@pytest.fixture()
def out_dir(tmp_path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def test_truncated_part_names_the_file(sample, tmp_path, out_dir):
    data = sample[0][0].read_bytes()
    bad = tmp_path / "enwiki-20260101-pages-articles1.xml-p1p99.bz2"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(PrepError, match=r"enwiki-20260101-pages-articles1\.xml-p1p99\.bz2 is truncated"):
        extract_part(bad, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


def test_corrupt_part_names_the_file(sample, tmp_path, out_dir):
    data = bytearray(sample[0][1].read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(64)
    bad = tmp_path / "corrupt.xml.bz2"
    bad.write_bytes(bytes(data))
    with pytest.raises(PrepError, match=r"corrupt\.xml\.bz2"):
        extract_part(bad, out_dir / "x.jsonl", DATE)
    plain = tmp_path / "plain.xml.bz2"
    plain.write_bytes(b"<mediawiki></mediawiki>")
    with pytest.raises(PrepError, match=r"plain\.xml\.bz2 is not a valid bz2 file"):
        extract_part(plain, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


def test_xml_cut_short_inside_a_whole_bz2_stream(sample, tmp_path, out_dir):
    xml = bz2.decompress(sample[0][0].read_bytes())
    bad = tmp_path / "half.xml.bz2"
    bad.write_bytes(bz2.compress(xml[: len(xml) // 2]))
    with pytest.raises(PrepError, match=r"half\.xml\.bz2 ends inside the XML"):
        extract_part(bad, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


def _part_without_articles(sample) -> str:
    xml = bz2.decompress(sample[0][0].read_bytes()).decode()
    head, rest = xml.split("  <page>", 1)
    talk = re.search(r"  <page>\n    <title>Talk:.*?</page>\n", xml, re.DOTALL).group(0)
    redirect = re.search(r"  <page>\n    <title>[^<]*</title>\n    <ns>0</ns>\n    <id>\d+</id>\n"
                         r"    <redirect.*?</page>\n", xml, re.DOTALL)
    return head + talk + (redirect.group(0) if redirect else "") + "</mediawiki>\n"


def test_part_without_articles_is_an_error(sample, tmp_path, out_dir):
    no_articles = tmp_path / "no-articles.xml.bz2"
    no_articles.write_bytes(bz2.compress(_part_without_articles(sample).encode()))
    with pytest.raises(PrepError, match=r"no-articles\.xml\.bz2 yields no articles \(\d+ pages; dropped: .*other_namespace 1"):
        extract_part(no_articles, out_dir / "x.jsonl", DATE)
    xml = bz2.decompress(sample[0][0].read_bytes()).decode()
    no_pages = tmp_path / "no-pages.xml.bz2"
    no_pages.write_bytes(bz2.compress((xml.split("  <page>", 1)[0] + "</mediawiki>\n").encode()))
    with pytest.raises(PrepError, match=r"no-pages\.xml\.bz2 yields no articles \(0 pages"):
        extract_part(no_pages, out_dir / "x.jsonl", DATE)
    empty = tmp_path / "empty.xml.bz2"
    empty.write_bytes(bz2.compress(b""))
    with pytest.raises(PrepError, match=r"empty\.xml\.bz2 holds no XML"):
        extract_part(empty, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


def test_not_a_mediawiki_export(tmp_path, out_dir):
    bad = tmp_path / "feed.xml.bz2"
    bad.write_bytes(bz2.compress(b"<rss><channel/></rss>"))
    with pytest.raises(PrepError, match=r"feed\.xml\.bz2 is not a MediaWiki XML export \(root element <rss>\)"):
        extract_part(bad, out_dir / "x.jsonl", DATE)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-8-sig"])
def test_utf16_and_bom_dumps_are_decoded(sample, tmp_path, encoding):
    parts, outs, _ = sample
    xml = bz2.decompress(parts[1].read_bytes()).decode("utf-8")
    recoded = tmp_path / f"{encoding}.xml.bz2"
    recoded.write_bytes(bz2.compress(xml.encode(encoding)))
    if encoding == "utf-16":
        assert recoded.read_bytes() and bz2.decompress(recoded.read_bytes())[:2] == b"\xff\xfe"
    out = tmp_path / f"{encoding}.jsonl"
    extract_part(recoded, out, DATE)
    assert out.read_bytes() == outs[1].read_bytes()
    text = out.read_text(encoding="utf-8")
    assert "é" in text and "ø" in text and "–" in text  # decoded, not mangled


def test_other_encodings_are_refused_by_name(sample, tmp_path, out_dir):
    xml = bz2.decompress(sample[0][1].read_bytes()).decode("utf-8")
    utf32 = tmp_path / "utf32.xml.bz2"
    utf32.write_bytes(bz2.compress(xml.encode("utf-32")))
    with pytest.raises(PrepError, match=r"utf32\.xml\.bz2 is UTF-32 encoded"):
        extract_part(utf32, out_dir / "x.jsonl", DATE)
    latin1 = tmp_path / "latin1.xml.bz2"
    latin1.write_bytes(bz2.compress(xml.encode("latin-1", errors="replace")))
    with pytest.raises(PrepError, match=r"latin1\.xml\.bz2 is not well-formed XML or not UTF-8/UTF-16"):
        extract_part(latin1, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


def test_reader_memory_stays_per_page(tmp_path):
    """12 MB of XML in 2,400 pages is read with a peak far below the part's size."""
    head = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">\n'
            "<siteinfo><base>https://en.wikipedia.org/wiki/Main_Page</base></siteinfo>\n")
    body = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 85
    pages = "".join(f"<page><title>Page {i}</title><ns>0</ns><id>{i}</id><revision><id>{i}</id>"
                    f"<text bytes=\"{len(body)}\" xml:space=\"preserve\">{body}</text></revision></page>\n"
                    for i in range(1, 401))
    # a multi-stream bz2 file, as the real multistream dumps are: one compressed block of
    # 400 pages, repeated, between a head and a tail stream
    block = bz2.compress(pages.encode(), 1)
    part = tmp_path / "big.xml.bz2"
    part.write_bytes(bz2.compress(head.encode()) + block * 6 + bz2.compress(b"</mediawiki>\n"))
    reader = PartReader(part)
    tracemalloc.start()
    try:
        count = sum(1 for _ in reader)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 2400 and reader.xml_bytes > 11_500_000
    assert peak < reader.xml_bytes / 4, f"peak {peak} bytes while streaming {reader.xml_bytes} bytes"


# ----------------------------------------------------------------------------------------
# Pages over MAX_PAGE_CHARS (#13, part 4)

def _giant_page(body: str, title: str = "Giant", page_id: int = 999_999) -> str:
    return (f"  <page>\n    <title>{title}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n    <revision>\n"
            f"      <id>1</id>\n      <text bytes=\"{len(body)}\" xml:space=\"preserve\">{body}</text>\n"
            "    </revision>\n  </page>\n")


def _with_page(part: Path, page: str, where: int = 1) -> bytes:
    """The part's XML with `page` put before its `where`-th page, bz2-compressed."""
    xml = bz2.decompress(part.read_bytes()).decode("utf-8")
    chunks = xml.split("  <page>")
    chunks[where] = page[len("  <page>"):] + "  <page>" + chunks[where]
    return bz2.compress("  <page>".join(chunks).encode("utf-8"))


@pytest.mark.parametrize("body", [
    "x" * 8_000_000,                                                     # one line of 8 MB
    ("'''Giant''' is a page of many lines. [[Link]] {{cite}}\n") * 150_000,  # 8 MB in short lines
], ids=["one-line", "many-lines"])
def test_page_over_the_limit_is_skipped_and_counted(sample, tmp_path, body):
    parts, outs, stats = sample
    data = _with_page(parts[0], _giant_page(body))
    assert len(data) - parts[0].stat().st_size < 20_000, "a few KB of bz2 that expand to an 8 MB page"
    part = tmp_path / parts[0].name
    part.write_bytes(data)
    st = extract_part(part, tmp_path / "out.jsonl", DATE)
    assert (tmp_path / "out.jsonl").read_bytes() == outs[0].read_bytes()  # every other page as before
    assert st["dropped"] == {**stats[0]["dropped"], "too_large": 1}
    assert st["pages"] == stats[0]["pages"] + 1 and st["articles"] == stats[0]["articles"]
    # Normal dumps have no "too_large" key at all: their stats (and the dataset's stats.json) are unchanged.
    assert "too_large" not in stats[0]["dropped"]


def test_page_limit_is_a_parameter(sample, tmp_path):
    parts, outs, stats = sample
    recs = records(outs[0])
    sizes = sorted(len(p.findtext(f"{NS}revision/{NS}text") or "") for p in xml_pages(parts[0]))
    limit = sizes[-1] - 1  # below the largest page's wikitext alone
    st = extract_part(parts[0], tmp_path / "out.jsonl", DATE, max_page_chars=limit)
    assert st["dropped"]["too_large"] == 1
    assert st["pages"] == stats[0]["pages"]
    kept = records(tmp_path / "out.jsonl")
    assert len(kept) in (len(recs), len(recs) - 1) and all(r in recs for r in kept)


def test_page_over_the_limit_costs_bounded_memory(sample, tmp_path, caplog):
    """A 64 MB page (of a 50 KB part) is read with a peak near MAX_PAGE_CHARS, not near the page."""
    parts = sample[0]
    part = tmp_path / "bomb.xml.bz2"
    title = "T" * 1000 + "\u202e"  # long, and with a bidi override, for the log line
    part.write_bytes(_with_page(parts[0], _giant_page("y" * (64 << 20), title=title)))
    reader = PartReader(part)
    tracemalloc.start()
    try:
        pages = [p for p in reader]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reader.xml_bytes > 64 << 20
    assert peak < 2 * MAX_PAGE_CHARS, f"peak {peak} bytes for a page of 64 MiB"
    (giant,) = [p for p in pages if p.too_large]
    assert giant.id == 999_999 and giant.text == "" and giant.title.startswith("TTT")
    with caplog.at_level("WARNING", logger="wikiprep.wikipedia.extract"):
        extract_part(part, tmp_path / "out.jsonl", DATE)
    (line,) = [r.getMessage() for r in caplog.records if "too_large" in r.getMessage()]
    assert line.startswith("dump part bomb.xml.bz2: page 999999 'TTT") and "\u202e" not in line and len(line) < 200


def test_a_part_whose_articles_are_all_too_large_yields_none(sample, tmp_path, out_dir):
    xml = bz2.decompress(sample[0][0].read_bytes()).decode()
    head = xml.split("  <page>", 1)[0]
    bad = tmp_path / "only-giant.xml.bz2"
    bad.write_bytes(bz2.compress((head + _giant_page("z" * 5_000_000) + "</mediawiki>\n").encode()))
    with pytest.raises(PrepError, match=r"only-giant\.xml\.bz2 yields no articles \(1 pages; dropped: too_large 1\)"):
        extract_part(bad, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


@pytest.mark.parametrize("token", [
    '<page note="{}">',       # an attribute
    "<!--{}-->",              # a comment
    "<?pi {}?>",              # a processing instruction
], ids=["attribute", "comment", "processing-instruction"])
def test_a_giant_xml_token_fails_the_part_with_bounded_memory(sample, tmp_path, out_dir, token):
    """What the parser must hold whole (no page text arrives in pieces) fails the part past the limit."""
    xml = bz2.decompress(sample[0][0].read_bytes()).decode()
    head, rest = xml.split("  <page>", 1)
    giant = token.format("a" * (24 << 20))
    if giant.startswith("<page"):
        giant += "<title>x</title><ns>0</ns><id>1</id></page>"
    bad = tmp_path / "token.xml.bz2"
    bad.write_bytes(bz2.compress((head + giant + "  <page>" + rest).encode()))
    tracemalloc.start()
    try:
        with pytest.raises(PrepError, match=r"^dump part token\.xml\.bz2 holds an XML tag, attribute or comment of "
                                            r"more than 4194304 bytes \(after \d+ bytes of XML\): damaged, or not a dump$"):
            extract_part(bad, out_dir / "x.jsonl", DATE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_PAGE_CHARS, f"peak {peak} bytes"
    assert_nothing_written(out_dir)


def _pretrain(folder: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """Pretrain128 of the dump in `folder` through the luigi command line (a tiny vocabulary, 2 shards): the run,
    which must succeed, and its dataset's stats.json."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "in", "."]) + "\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), LUIGI_CONFIG_PATH=str(REPO / "luigi.cfg"))
    r = subprocess.run([sys.executable, "-m", "luigi", "--module", "workflows", "Pretrain128", "--data-dir",
                        str(tmp_path / "data"), "--dump-url", folder.parents[1].as_uri(), "--dump-date", DATE,
                        "--num-shards", "2", "--vocab-file", str(vocab), "--local-scheduler", "--workers", "2"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads((tmp_path / "data" / f"enwiki-{DATE}" /
                             folder_name(GenerationOptions(dupe_factor=5), num_shards=2) / "stats.json").read_text())


def test_a_skipped_page_is_in_the_datasets_stats(tmp_path):
    """Through the luigi command line: a dump with an 8 MB page builds its dataset, and stats.json's
    dropped_documents counts the page as too_large."""
    folder = write_sample_dump(tmp_path / "site", date=DATE)
    names = sorted(p.name for p in folder.glob("*.bz2"))
    (folder / names[1]).write_bytes(_with_page(folder / names[1], _giant_page("w" * 8_000_000), where=3))
    write_dump_status(folder, "enwiki", DATE, "articlesdump", "2026-01-02 07:41:12", names)
    r, stats = _pretrain(folder, tmp_path)
    assert stats["dropped_documents"]["too_large"] == 1
    assert stats["dropped_documents"]["redirect"] == 5  # the sample's own drops, counted as before
    assert "is larger than 4194304 characters: skipped (too_large)" in r.stderr


# Nested parser functions deeper than Python's recursion limit: WikiExtractor raises RecursionError on them.
NESTED_IF = "{{#if:x|" * 1500 + "deep" + "}}" * 1500
# Character references to surrogates, in hex and decimal: WikiExtractor made each a lone surrogate str.
SURROGATES = "'''Lone''' is a page with a reference to &#xD800; and to &#56320; in its text, and more words."


def test_a_surrogate_reference_is_kept_as_written(sample, tmp_path):
    """The page is an article whose text shows the references as written (MediaWiki shows them so); clean.py
    then makes each U+FFFD. It used to crash the part with UnicodeEncodeError."""
    from wikiprep.wikipedia.clean import clean_text

    parts, outs, stats = sample
    part = tmp_path / parts[0].name
    part.write_bytes(_with_page(parts[0], _giant_page(SURROGATES.replace("&", "&amp;"), title="Lone"), where=2))
    st = extract_part(part, tmp_path / "out.jsonl", DATE)
    assert st["dropped"] == stats[0]["dropped"] and st["articles"] == stats[0]["articles"] + 1
    (lone,) = [r for r in records(tmp_path / "out.jsonl") if r["title"] == "Lone"]
    assert "reference to &#xD800; and to &#56320; in its text" in lone["text"]
    assert "reference to \ufffd and to \ufffd in its text" in "\n".join(clean_text(lone["text"]))
    others = [line for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines(True)
              if json.loads(line)["title"] != "Lone"]
    assert "".join(others) == outs[0].read_text(encoding="utf-8")  # every other page as before


def test_a_page_wikiextractor_raises_on_is_skipped_and_counted(sample, tmp_path, caplog):
    parts, outs, stats = sample
    part = tmp_path / parts[0].name
    part.write_bytes(_with_page(parts[0], _giant_page(NESTED_IF, title="Deep\u202e", page_id=4242), where=2))
    with caplog.at_level("WARNING", logger="wikiprep.wikipedia.extract"):
        st = extract_part(part, tmp_path / "out.jsonl", DATE)
    assert (tmp_path / "out.jsonl").read_bytes() == outs[0].read_bytes()  # every other page as before
    assert st["dropped"] == {**stats[0]["dropped"], "unextractable": 1}
    assert st["pages"] == stats[0]["pages"] + 1 and st["articles"] == stats[0]["articles"]
    assert "unextractable" not in stats[0]["dropped"]  # only when it happened: normal stats are unchanged
    (line,) = [r.getMessage() for r in caplog.records if "unextractable" in r.getMessage()]
    assert line.startswith(f"dump part {part.name}: page 4242 'Deep") and "RecursionError" in line
    assert "\u202e" not in line and len(line) < 300


def test_stock_wikiextractor_on_a_surrogate_reference_skips_the_page(sample, tmp_path, monkeypatch):
    """Where WikiExtractor's own clean runs (another wikiextractor version), its lone surrogate cannot be
    written: that page is skipped as unextractable before any of it is written, the rest are kept."""
    from wikiprep.wikipedia import extract

    parts, outs, stats = sample
    monkeypatch.setattr(extract.Extractor, "FAST", False)
    part = tmp_path / parts[0].name
    part.write_bytes(_with_page(parts[0], _giant_page(SURROGATES.replace("&", "&amp;"), title="Lone"), where=2))
    st = extract_part(part, tmp_path / "out.jsonl", DATE)
    assert st["dropped"] == {**stats[0]["dropped"], "unextractable": 1}
    assert (tmp_path / "out.jsonl").read_bytes() == outs[0].read_bytes()


def test_an_unextractable_page_is_in_the_datasets_stats(tmp_path):
    """Through the luigi command line: a dump with a page WikiExtractor raises on, and one with surrogate
    references, builds its dataset; stats.json's dropped_documents counts the first as unextractable."""
    folder = write_sample_dump(tmp_path / "site", date=DATE)
    names = sorted(p.name for p in folder.glob("*.bz2"))
    lone = _giant_page(SURROGATES.replace("&", "&amp;"), title="Lone")
    (folder / names[0]).write_bytes(_with_page(folder / names[0], lone, where=2))
    (folder / names[1]).write_bytes(_with_page(folder / names[1], _giant_page(NESTED_IF, title="Deep"), where=3))
    write_dump_status(folder, "enwiki", DATE, "articlesdump", "2026-01-02 07:41:12", names)
    r, stats = _pretrain(folder, tmp_path)
    assert stats["dropped_documents"]["unextractable"] == 1
    assert stats["dropped_documents"]["redirect"] == 5  # the sample's own drops, counted as before
    assert "page 999999 'Deep' cannot be extracted (RecursionError: 'maximum recursion depth" in r.stderr
    assert "skipped (unextractable)" in r.stderr and "Traceback" not in r.stderr


def test_what_is_not_a_page_is_bounded_too(sample, tmp_path, out_dir):
    """24 MB of text directly inside <mediawiki>, and 50,000 elements that are not pages, cost no memory
    and change no output; a <siteinfo> over the limit fails the part."""
    parts, outs, stats = sample
    xml = bz2.decompress(parts[0].read_bytes()).decode()
    head, rest = xml.split("  <page>", 1)
    junk = "v" * (24 << 20) + "<logitem><id>1</id></logitem>\n" * 50_000
    part = tmp_path / "junk.xml.bz2"
    part.write_bytes(bz2.compress((head + junk + "  <page>" + rest).encode()))
    tracemalloc.start()
    try:
        st = extract_part(part, tmp_path / "out.jsonl", DATE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_PAGE_CHARS, f"peak {peak} bytes"
    assert (tmp_path / "out.jsonl").read_bytes() == outs[0].read_bytes()
    same = ("pages", "articles", "dropped")
    assert {k: st[k] for k in same} == {k: stats[0][k] for k in same}

    big_siteinfo = tmp_path / "siteinfo.xml.bz2"
    big_siteinfo.write_bytes(bz2.compress(head.replace("</siteinfo>", "<x>" + "s" * (5 << 20) + "</x></siteinfo>")
                                          .encode() + b"  <page>" + rest.encode()))
    with pytest.raises(PrepError, match=r"^dump part siteinfo\.xml\.bz2: its <siteinfo> is larger than 4194304 "
                                        r"characters: damaged, or not a dump$"):
        extract_part(big_siteinfo, out_dir / "x.jsonl", DATE)
    assert_nothing_written(out_dir)


# ---------------------------------------------------------------------------------------------
# extract.clean, WikiExtractor's clean with fast paths: the stock function's output, page for page

def stock_paragraphs(page, siteinfo, pinned) -> list[str]:
    """What extract_page gave with WikiExtractor's own Extractor and clean (before the fast paths)."""
    from wikiextractor import extract as wx

    from wikiprep.wikipedia import extract

    stock = wx.Extractor(str(page.id), page.revid, siteinfo.urlbase, page.title, [], templates={}, redirects={},
                         templatePrefix=siteinfo.template_prefix, knownNamespaces=set(siteinfo.namespaces),
                         ignored_tag_patterns=extract.IGNORED_TAG_PATTERNS, keepLinks=False, keepSections=True)
    stock.magicWords = extract.PinnedMagicWords(pinned)
    return stock.clean_text(extract._dump_escape(page.text), mark_headers=True, expand_templates=True,
                            html_safe=False)


def test_fast_clean_gives_wikiextractors_output_on_every_page(sample, tmp_path):
    from testkit.synthetic_dump import write_synthetic_dump
    from wikiprep.wikipedia import extract

    assert extract.Extractor.FAST, "wikiextractor's clean changed: extract.clean no longer runs, nothing to compare"
    pinned = clock_magic_words(DATE)
    synthetic = write_synthetic_dump(tmp_path / "site", date=DATE, xml_mb=2.0, parts=1)
    compared = 0
    for part in list(sample[0]) + sorted(synthetic.glob("*.bz2")):
        reader = PartReader(part)
        for page in reader:
            if extract.drop_reason(page) is None:
                assert extract.extract_page(page, reader.siteinfo, pinned) == \
                    stock_paragraphs(page, reader.siteinfo, pinned), (part.name, page.id, page.title)
                compared += 1
    assert compared > 150


TAG_SPELLINGS = [
    "Plain prose with no markup at all, and no ampersand.",
    "a <REF name=x>cite</REF> b <Ref name=y/> c <ref>one</ref><ref>two</ref> d",
    "long s: <\u017fource lang=c>int x;</\u017fource> Kelvin: <\u212abd>k</\u212abd> dotless: <d\u0131v>x</d\u0131v> e",
    "<div>a<span>b</span></div> <  /  table  > <table><tr><td>x</td></tr></table> f",
    "joined by a comment: <<!-- c -->ref>hidden</ref> g",
    "joined by discarded tags: <<gallery>x</gallery>ref>inner<<pre>p</pre>/ref> h",  # no <ref until both go
    "<references/> <nowiki>x</nowiki> &lt;ref&gt;escaped&lt;/ref&gt; &amp;nbsp; j",
    "<math>x^2</math> and <code>y</code> <noinclude>n</noinclude> </noinclude> <includeonly>i</includeonly> k",
    "<br> <hr/> <p>para</p> <small>s</small> <abbr title=x>A</abbr> <a href=x>link</a> <section begin=x /> l",
    "unclosed <ref name=z>to the end, <div class=x> and <sub>two</sup> m\n\nNext paragraph <b>bold</b>.",
    "{{cite web|title=<ref>x</ref>}} <!-- <ref>in a comment</ref> --> <gallery>\nFile:a.jpg\n</gallery> n",
]


def assert_extracted_as_stock(text: str, title: str) -> None:
    """One page holding `text`: extract_page (extract.clean) gives the stock function's paragraphs."""
    from wikiprep.wikipedia import extract

    page = extract.Page(id=7, ns=0, title=title, revid="1", redirect=False, text=text)
    siteinfo, pinned = extract.SiteInfo(urlbase="https://en.wikipedia.org/wiki"), clock_magic_words(DATE)
    assert extract.extract_page(page, siteinfo, pinned) == stock_paragraphs(page, siteinfo, pinned)


@pytest.mark.parametrize("text", TAG_SPELLINGS)
def test_fast_clean_on_tags_in_every_spelling(text):
    assert_extracted_as_stock(text, "Tags")


# The closing substitutions: spaces and dots with patterns rewritten to start with their literal prefix, and
# the space after an opening bracket only where extract._may_match finds one. Each spelling here needs one of
# them, or none, and the stock function decides what is right.
SPACING_SPELLINGS = [
    "Nothing to tidy here, at all.",
    "two  spaces and three   spaces",
    "a tab\tand two\t\ttabs",
    "dots.... and five..... but three... stay",
    *(f"space before {c}here" for c in ",:.)]»"),
    *(f"space after {c} here" for c in "[(«"),
    "\u00a0, no-break space before a comma, \u2009. thin space before a period,. ,, and «» (x) [y]",
    "mixed  ( a , b ....  ) [ c ] « d » end .",
]


@pytest.mark.parametrize("text", SPACING_SPELLINGS)
def test_fast_clean_on_spacing(text):
    assert_extracted_as_stock(text, "Spacing")
