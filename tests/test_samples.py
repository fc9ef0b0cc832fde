"""The embedded sample dump: dumps-site layout, checksums, determinism, and real XML content."""

import bz2
import hashlib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shardkit.errors import PrepError
from wikiprep.wikipedia.samples import write_sample_dump

NS = "{http://www.mediawiki.org/xml/export-0.10/}"
PART_RE = re.compile(r"^enwiki-20260101-pages-articles(\d)\.xml-p(\d+)p(\d+)\.bz2$")


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    return write_sample_dump(tmp_path_factory.mktemp("site"))


def parts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".bz2"))


def pages_of(part: Path) -> list[ET.Element]:
    root = ET.fromstring(bz2.decompress(part.read_bytes()))
    assert root.tag == NS + "mediawiki" and root.get("version") == "0.10"
    return root.findall(NS + "page")


def all_pages(folder: Path) -> list[ET.Element]:
    return [page for part in parts(folder) for page in pages_of(part)]


def base36(data: bytes) -> str:
    n, out = int.from_bytes(hashlib.sha1(data).digest(), "big"), []
    while n:
        n, d = divmod(n, 36)
        out.append("0123456789abcdefghijklmnopqrstuvwxyz"[d])
    return "".join(reversed(out)).zfill(31)


def test_layout_follows_the_dumps_site(dump, tmp_path):
    assert dump.parts[-2:] == ("enwiki", "20260101")
    names = sorted(p.name for p in dump.iterdir())
    assert names == sorted(["dumpstatus.json", "enwiki-20260101-sha1sums.txt", "enwiki-20260101-md5sums.txt"]
                           + [p.name for p in parts(dump)])
    matches = [PART_RE.match(p.name) for p in parts(dump)]
    assert all(matches) and [m.group(1) for m in matches] == ["1", "2"]
    (_, first1, last1), (_, first2, last2) = [tuple(int(g) for g in m.groups()) for m in matches]
    assert first1 == 1 and first2 == last1 + 1 and last2 > first2
    for part, m in zip(parts(dump), matches):
        ids = [int(p.findtext(NS + "id")) for p in pages_of(part)]
        assert ids == sorted(ids) and int(m.group(2)) <= ids[0] and ids[-1] == int(m.group(3))
    other = write_sample_dump(tmp_path, wiki="dewiki", date="20240301")
    assert other == tmp_path / "dewiki" / "20240301"
    assert all(p.name.startswith("dewiki-20240301-pages-articles") for p in parts(other))


def test_dumpstatus_and_checksum_files_match_the_bytes(dump):
    status = json.loads((dump / "dumpstatus.json").read_text())
    assert status["version"] == "0.8"
    job = status["jobs"]["articlesdump"]
    assert job["status"] == "done" and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", job["updated"])
    assert set(job["files"]) == {p.name for p in parts(dump)}
    assert set(status["jobs"]) == {"articlesdump"}  # no job listed whose files are not written
    for part in parts(dump):
        data = part.read_bytes()
        info = job["files"][part.name]
        assert info == {"size": len(data), "url": f"/enwiki/20260101/{part.name}",
                        "md5": hashlib.md5(data).hexdigest(), "sha1": hashlib.sha1(data).hexdigest()}
    for algo in ("sha1", "md5"):
        lines = (dump / f"enwiki-20260101-{algo}sums.txt").read_text().splitlines()
        assert lines == [f"{hashlib.new(algo, p.read_bytes()).hexdigest()}  {p.name}" for p in parts(dump)]


def test_two_calls_write_identical_bytes(dump, tmp_path):
    again = write_sample_dump(tmp_path)
    for path in sorted(dump.iterdir()):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name
    assert len(list(again.iterdir())) == len(list(dump.iterdir()))


def test_pages_are_complete_export_records(dump):
    for page in all_pages(dump):
        rev = page.find(NS + "revision")
        assert page.findtext(NS + "title") and page.findtext(NS + "ns") and page.findtext(NS + "id")
        assert rev.findtext(NS + "id").isdigit()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rev.findtext(NS + "timestamp"))
        assert rev.find(NS + "contributor").findtext(NS + "username")
        assert rev.findtext(NS + "model") in ("wikitext", "Scribunto")
        assert rev.findtext(NS + "format") in ("text/x-wiki", "text/plain")
        text = rev.find(NS + "text")
        assert text.get("{http://www.w3.org/XML/1998/namespace}space") == "preserve"
        data = text.text.encode("utf-8")
        assert int(text.get("bytes")) == len(data)
        assert rev.findtext(NS + "sha1") == base36(data)
    first = bz2.decompress(parts(dump)[0].read_bytes()).decode()
    assert '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/"' in first
    assert '<namespace key="10" case="first-letter">Template</namespace>' in first


def test_sample_holds_every_kind_of_page(dump):
    pages = all_pages(dump)
    by_ns = {}
    for page in pages:
        by_ns.setdefault(int(page.findtext(NS + "ns")), []).append(page)
    for ns in (1, 6, 10, 14):  # Talk, File, Template, Category
        assert by_ns.get(ns), f"no page in namespace {ns}"
    text = {p.findtext(NS + "title"): p.find(NS + "revision").findtext(NS + "text") for p in by_ns[0]}
    redirects = [p for p in by_ns[0] if p.find(NS + "redirect") is not None]
    assert len(redirects) >= 3
    assert text["Dorvik siege"].lower().startswith("#redirect")  # a redirect known only by its text
    assert "{{disambiguation}}" in text["Brivane (disambiguation)"]
    assert "{{hndis" in text["Tomas Varga"] and "{{geodis}}" in text["Galford"]
    articles = [t for t, body in text.items()
                if not body.lower().startswith("#redirect") and "may refer to" not in body]
    assert len(articles) >= 30


MARKUP = {
    "infobox with nested templates": r"\{\{Infobox [^\n]*\n(?:\|[^\n]*\n)*?\| \w+ = [^\n]*\{\{",
    "piped link": r"\[\[[^\[\]|]+\|[^\[\]|]+\]\]",
    "link with trail": r"\[\[[a-z]+\]\]s\b",
    "external link": r"\[https?://\S+ [^\]]+\]",
    "named ref": r'<ref name="[^"]+">',
    "self-closing ref": r'<ref name="[^"]+" />',
    "cite web": r"<ref>\{\{cite web \|url=",
    "table": r"\{\| class=\"wikitable",
    "bulleted list": r"^\* ",
    "numbered list": r"^# ",
    "heading": r"^== [^=]+ ==$",
    "subheading": r"^=== [^=]+ ===$",
    "category": r"\[\[Category:",
    "thumbnail": r"\[\[(?:File|Image):[^|\]]+\|thumb",
    "math": r"<math>.+?</math>",
    "entities": r"&nbsp;.*&ndash;|&ndash;.*&nbsp;",
    "bold": r"'''[^']+'''",
    "italic": r"(?<!')''[^']+''(?!')",
    "clock magic word": r"\{\{CURRENTYEAR\}\}",
    "local magic word": r"\{\{LOCALYEAR\}\}",
    "parser function": r"\{\{#expr:",
    "html comment": r"<!--",
    "gallery": r"<gallery>",
}


@pytest.mark.parametrize("name", sorted(MARKUP))
def test_articles_carry_real_markup(dump, name):
    texts = "\n".join(p.find(NS + "revision").findtext(NS + "text") for p in all_pages(dump)
                      if p.findtext(NS + "ns") == "0")
    assert re.search(MARKUP[name], texts, re.MULTILINE), name


def test_prose_has_abbreviations_numbers_and_accents(dump):
    texts = " ".join(p.find(NS + "revision").findtext(NS + "text") for p in all_pages(dump))
    for abbreviation in ("Dr. ", "U.S. ", "e.g. ", "approx. ", "St. ", "c. ", "i.e. ", "Jr."):
        assert texts.count(abbreviation) >= 20, abbreviation
    assert re.search(r"\b\d{1,3},\d{3}\b", texts) and re.search(r"\b\d+\.\d\b", texts)
    accented = set(re.findall(r"\b\w*[À-ÿĀ-ž]\w*\b", texts))
    assert len(accented) >= 50
    words = set(re.findall(r"[A-Za-zÀ-ž]+", texts))
    assert len(words) >= 3000  # a vocabulary a 10k WordPiece can learn pieces from


def test_bad_date_or_wiki_is_refused(tmp_path):
    with pytest.raises(PrepError, match="YYYYMMDD"):
        write_sample_dump(tmp_path, date="2026-01-01")
    with pytest.raises(PrepError, match="wiki name"):
        write_sample_dump(tmp_path, wiki="../en")
    assert not any(tmp_path.iterdir())
