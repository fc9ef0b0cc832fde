"""extract_part on the sample dump parts, through the real WikiExtractor 3.1.0, and on bad parts."""

import bz2
import json
import re
import subprocess
import sys
import tracemalloc
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shardkit.errors import PrepError
from wikiprep.extract import (PartReader, clock_magic_words, extract_part, is_disambiguation)
from wikiprep.samples import ARTICLES, write_sample_dump

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
    # WikiExtractor #336: 3.0.x failed on 3.11 with "global flags not at the start"
    assert sys.version_info[:2] == (3, 11)
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
