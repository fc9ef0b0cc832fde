"""Real Chinese and Japanese prose offline: Debian's translated manuals as zhwiki and jawiki dumps.

    .venv/bin/python benchmarks/cjktext.py SITE_ROOT            # SITE_ROOT/zhwiki/20260101/, SITE_ROOT/jawiki/...
    .venv/bin/python benchmarks/cjktext.py --fixture DIR        # the tests' small excerpt: DIR/zh.txt, DIR/ja.txt

No Wikipedia dump is reachable from this machine, but Debian's packages are, and two of its manuals are
translated into Chinese and Japanese by people: the Debian Reference (`debian-reference-zh-cn`,
`debian-reference-ja`) and the New Maintainers' Guide (`maint-guide-zh-cn`, `maint-guide-ja`), about
400,000 characters of prose in each language, with the Latin-script command and package names a Chinese or
Japanese Wikipedia article has too. Each page of their HTML (a chapter) becomes one article: its `<h1>`-`<h4>`
headings as wikitext headings and the `<p>` paragraphs under them (code, tables and literal blocks dropped);
pages with less than 300 characters of prose are left out. The articles go into a dump laid out like dumps.wikimedia.org's
(`testkit.synthetic_dump.write_pages_dump`), whose header says `xml:lang="zh"` or `"ja"`, so the pipeline
learns the language as from a real dump.

The packages are fetched with `apt-get download` (no install) into a cache folder and read with Python's own
ar/tar readers (`realtext`); their names and sha256 are printed, since the text is whatever version Debian
serves. `--fixture` writes the first articles of each language, about 60 KB of UTF-8, each cut after the
section that takes it to 7 KB, as plain text: the title on the first line of an article, then one paragraph
(or heading) per line, a blank line between articles
(`read_articles`). The committed copies are `tests/fixtures/cjk/` (see its README).
"""

from __future__ import annotations

import hashlib
import html.parser
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import realtext  # noqa: E402

DATE = "20260101"
# language: (wiki, [(package, folder of its HTML in the package, the HTML files' suffix)])
LANGUAGES = {
    "zh": ("zhwiki", [("debian-reference-zh-cn", "usr/share/debian-reference/", ".zh-cn.html"),
                      ("maint-guide-zh-cn", "usr/share/doc/maint-guide-zh-cn/html/", ".zh-cn.html")]),
    "ja": ("jawiki", [("debian-reference-ja", "usr/share/debian-reference/", ".ja.html"),
                      ("maint-guide-ja", "usr/share/doc/maint-guide-ja/html/", ".ja.html")]),
}
# More Japanese prose, for a corpus some 25 times the size of the manuals' (630 articles, 574,000 tokens): the
# Developer's Reference, the FAQ, aptitude's manual and GIMP's help (bench_languages.py --large).
MORE_JA = [("developers-reference-ja", "usr/share/developers-reference/ja/", ".html"),
           ("debian-faq-ja", "usr/share/doc/debian/FAQ/ja/", ".ja.html"),
           ("aptitude-doc-ja", "usr/share/doc/aptitude/html/ja/", ".html"),
           ("gimp-help-ja", "usr/share/gimp/2.0/help/ja/", ".html")]
MIN_ARTICLE_CHARS = 300
FIXTURE_BYTES = 60_000
FIXTURE_ARTICLE_BYTES = 7_000  # the fixture's articles: the first sections of a chapter, long enough for NSP


class _Sections(html.parser.HTMLParser):
    """(heading, [paragraph, ...]) of each section of a DocBook HTML page: `<p>` text with its whitespace made
    single spaces, nothing of `<pre>`, `<table>` or `<code>`."""

    SKIP = {"pre", "table", "code", "tt", "script", "style"}

    def __init__(self):
        super().__init__()
        self.sections: list[tuple[str, list[str]]] = []
        self.heading: list[str] | None = None
        self.paragraph: list[str] | None = None
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag in ("h1", "h2", "h3", "h4"):
            self.heading = []
        elif tag == "p" and self.sections:
            self.paragraph = []

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in ("h1", "h2", "h3", "h4") and self.heading is not None:
            self.sections.append((" ".join("".join(self.heading).split()), []))
            self.heading = None
        elif tag == "p" and self.paragraph is not None:
            text = " ".join("".join(self.paragraph).split())
            if text:
                self.sections[-1][1].append(text)
            self.paragraph = None

    def handle_data(self, data):
        if self.skip:
            return
        if self.heading is not None:
            self.heading.append(data)
        elif self.paragraph is not None:
            self.paragraph.append(data)


def html_articles(pages: dict[str, bytes], max_bytes: int | None = None) -> list[tuple[str, list[str]]]:
    """The articles of a manual's HTML pages (by path, read in path order): one per page (a chapter), its
    sections' headings as wikitext headings and their paragraphs, pages with too little prose left out. With
    `max_bytes`, an article ends with the first section that takes it to that many bytes of UTF-8."""
    articles = []
    for _, data in sorted(pages.items()):
        parser = _Sections()
        parser.feed(data.decode("utf-8"))
        lines, size = [], 0
        for title, paragraphs in parser.sections:
            if paragraphs and (max_bytes is None or size < max_bytes):
                lines += [f"== {title} ==", *paragraphs]
                size += sum(len(p.encode("utf-8")) for p in paragraphs)
        if parser.sections and sum(len(line) for line in lines if not line.startswith("==")) >= MIN_ARTICLE_CHARS:
            articles.append((parser.sections[0][0], lines))
    return articles


def fetch_articles(language: str, cache: Path, max_bytes: int | None = None,
                   packages: list[tuple[str, str, str]] | None = None) -> tuple[list, list[dict]]:
    """The articles of `language`'s manuals (`html_articles`; `packages` as LANGUAGES gives them, for another
    language's), and the packages they came from (name, sha256)."""
    articles, sources = [], []
    for package, folder, suffix in packages or LANGUAGES[language][1]:
        deb = realtext.fetch_package(cache, package)
        articles += html_articles(realtext.deb_files(deb, folder, suffix), max_bytes)
        sources.append({"package": deb.name, "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()})
    return articles, sources


def write_articles(path: Path, articles: list[tuple[str, list[str]]]) -> None:
    path.write_text("\n".join(title + "\n" + "".join(p + "\n" for p in paragraphs) for title, paragraphs in articles),
                    encoding="utf-8")


def read_articles(path: Path) -> list[tuple[str, list[str]]]:
    """The articles of a file `write_articles` wrote: (title, paragraphs)."""
    blocks = path.read_text(encoding="utf-8").split("\n\n")
    return [(lines[0], lines[1:]) for lines in (block.strip("\n").split("\n") for block in blocks) if lines[0]]


def write_articles_dump(site_root: Path, articles: list[tuple[str, list[str]]], wiki: str, date: str = DATE) -> Path:
    """The articles as a dump of `wiki` (its header's xml:lang the wiki's language), paragraphs as wikitext's."""
    from testkit.synthetic_dump import prose_page, write_pages_dump

    pages = [prose_page(n, title, "\n\n".join(paragraphs) + "\n") for n, (title, paragraphs) in enumerate(articles)]
    return write_pages_dump(site_root, pages, wiki, date)


def main(argv: list[str]) -> None:
    import json

    if len(argv) == 2 and argv[0] == "--fixture":
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for language in LANGUAGES:
            articles, sources = fetch_articles(language, out / "deb-cache", FIXTURE_ARTICLE_BYTES)
            taken, size = [], 0
            for title, paragraphs in articles:
                if size >= FIXTURE_BYTES:
                    break
                taken.append((title, paragraphs))
                size += len((title + "".join(paragraphs)).encode("utf-8"))
            write_articles(out / f"{language}.txt", taken)
            print(json.dumps({"language": language, "articles": len(taken), "sources": sources}))
        return
    if len(argv) != 1:
        sys.exit("usage: cjktext.py SITE_ROOT | cjktext.py --fixture DIR")
    root = Path(argv[0])
    for language, (wiki, _) in LANGUAGES.items():
        articles, sources = fetch_articles(language, root / "deb-cache")
        folder = write_articles_dump(root, articles, wiki)
        print(json.dumps({"folder": str(folder), "articles": len(articles),
                          "chars": sum(len(p) for _, ps in articles for p in ps), "sources": sources}))


if __name__ == "__main__":
    main(sys.argv[1:])
