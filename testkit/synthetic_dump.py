"""A synthetic Wikipedia dump of any size, for tests and benchmarks (never the data path).

`write_synthetic_dump(site_root, xml_mb=...)` writes a dated dump in the dumps-site layout with
the grammar and markup of the embedded sample (`wikiprep.wikipedia.samples`), only with as many articles
as the size asks for, and around them the redirects, disambiguation pages and categories a real
dump has. Without a real dump offline, the benchmarks' Wikipedia figures are measured on it, and
the tests of multistream slicing use it for a dump of many bz2 streams. Deterministic: the same
arguments give the same bytes.
"""

from __future__ import annotations

import bz2
import datetime as dt
import random
from pathlib import Path

from shardkit.atomic import write_bytes
from wikiprep.wikipedia.samples import (ARTICLES, CONTRIBUTORS, FIRST_NAMES, SEED, TOPICS, Writer, article_text, dump_day,
                              page_xml, part_names, plural, siteinfo_xml, stamp_revision, write_dump_status)


def _synthetic_title(w: Writer, kind: str) -> str:
    r = w.rng
    if kind == "settlement":
        return w.place(False)
    if kind == "river":
        return f"{w.place(False)} {r.choice(['River', 'Canal', 'Gorge', 'Creek'])}"
    if kind == "person":
        return f"{r.choice(FIRST_NAMES)} {w.surname()}"
    if kind in ("music", "company", "sport"):
        suffix = {"music": ["Quartet", "Ensemble", "Trio"], "company": ["& Sons", "Holdings", "Works"],
                  "sport": ["Athletic", "FC", "Rovers"]}[kind]
        return f"{w.place(False)} {r.choice(suffix)}"
    if kind == "university":
        return f"University of {w.place(False)}"
    if kind == "battle":
        return f"{r.choice(['Siege', 'Battle', 'Treaty'])} of {w.place(False)}"
    return f"{w.adjective().capitalize()} {w.noun()}"  # species, chemistry, mathematics


def synthetic_pages(seed: int, date: dt.date):
    """An endless stream of pages in page-id order: articles of every kind, and around them the
    redirects, disambiguation pages and other namespaces a real dump has (about 1 in 3 pages)."""
    rng = random.Random(seed)
    places = [title for title, kind in ARTICLES if kind in ("settlement", "river")]
    kinds = sorted(TOPICS)
    page_id = 0
    while True:
        kind = rng.choice(kinds)
        writer = Writer(rng, TOPICS[kind], "", places)
        writer.title = _synthetic_title(writer, kind)
        batch = [{"title": writer.title, "ns": 0, "text": article_text(writer), "redirect": None}]
        roll = rng.random()
        if roll < 0.25:
            batch.append({"title": writer.title.split(" ")[0] + f" ({kind})", "ns": 0, "redirect": writer.title,
                          "text": f"#REDIRECT [[{writer.title}]]\n\n{{{{R from short name}}}}\n"})
        elif roll < 0.30:
            batch.append({"title": writer.title.split(" ")[0], "ns": 0, "redirect": None,
                          "text": f"'''{writer.title.split(' ')[0]}''' may refer to:\n\n* [[{writer.title}]]\n"
                                  f"* [[{writer.place(False)}]]\n\n{{{{disambiguation}}}}\n"})
        elif roll < 0.40:
            batch.append({"title": f"Category:{plural(writer.noun()).capitalize()} in {writer.place(False)}",
                          "ns": 14, "redirect": None, "text": f"{writer.sentence()}\n{{{{Commons category}}}}\n"})
        for page in batch:
            page_id += rng.randint(1, 40)
            stamp_revision(page, page_id, rng, date)
            page.update(comment="copyedit", model="wikitext", format="text/x-wiki")
            yield page


STREAM_PAGES = 100  # pages per bz2 stream in a multistream dump, as on dumps.wikimedia.org


def write_synthetic_dump(site_root: Path, wiki: str = "enwiki", date: str = "20260101", *, xml_mb: float = 24.0,
                         parts: int = 2, multistream: bool = False, stream_pages: int = STREAM_PAGES,
                         seed: int = SEED) -> Path:
    """Write a dump of about `xml_mb` MB of XML in `parts` parts; return its dated folder.

    Without `multistream` the parts are the `articlesdump` job, one bz2 stream each, like
    `write_sample_dump`. With it they are the `articlesmultistreamdump` job: each part is a
    siteinfo stream, one bz2 stream per `stream_pages` (100) pages and a closing stream, next to its
    `...-multistream-index{n}.txt-p{a}p{b}.bz2` of `offset:page id:title` lines, the way
    dumps.wikimedia.org writes them. Pages are generated and compressed one at a time, so
    any size can be written in bounded memory. Deterministic for the same arguments.
    """
    day = dump_day(date)
    folder = Path(site_root) / wiki / date
    folder.mkdir(parents=True, exist_ok=True)
    pages = synthetic_pages(seed, day)
    per_part = xml_mb * 1e6 / parts
    kind = "pages-articles-multistream" if multistream else "pages-articles"
    names = []
    for n in range(1, parts + 1):
        tmp = folder / f".part{n}.tmp"
        index_lines: list[str] = []
        first = last = None
        with open(tmp, "wb") as out:
            written = 0

            def emit(xml: str, compressor) -> bz2.BZ2Compressor:
                nonlocal written
                data = xml.encode("utf-8")
                written += len(data)
                out.write(compressor.compress(data))
                if multistream:  # close the stream: the next one starts at a byte offset of its own
                    out.write(compressor.flush())
                    return bz2.BZ2Compressor(9)
                return compressor

            compressor = emit(siteinfo_xml(wiki), bz2.BZ2Compressor(9))
            while written < per_part:
                chunk = [next(pages) for _ in range(stream_pages)]
                offset = out.tell()
                first = chunk[0]["id"] if first is None else first
                last = chunk[-1]["id"]
                index_lines += [f"{offset}:{p['id']}:{p['title']}\n" for p in chunk]
                compressor = emit("".join(page_xml(p) for p in chunk), compressor)
            emit("</mediawiki>\n", compressor)
            if not multistream:
                out.write(compressor.flush())
        name = f"{wiki}-{date}-{kind}{n}.xml-p{first}p{last}.bz2"
        tmp.replace(folder / name)
        names.append(name)
        if multistream:
            index_name = f"{wiki}-{date}-{kind}-index{n}.txt-p{first}p{last}.bz2"
            write_bytes(folder / index_name, bz2.compress("".join(index_lines).encode("utf-8"), 9))
            names.append(index_name)
    job = "articlesmultistreamdump" if multistream else "articlesdump"
    write_dump_status(folder, wiki, date, job, f"{day:%Y-%m-%d} 07:41:12", names)
    return folder


def prose_page(n: int, title: str, text: str, comment: str = "copyedit") -> dict:
    """Page `n` of a dump made of given prose (`write_pages_dump`): an article with wikitext `text`, its id
    and revision fixed by `n` (ids rising as in a dump)."""
    page_id = 1000 + 10 * n
    return {"title": title[:200], "ns": 0, "text": text, "redirect": None, "model": "wikitext",
            "format": "text/x-wiki", "id": page_id, "revid": 1_100_000_000 + page_id,
            "timestamp": "2025-12-20T12:00:00Z", "contributor": CONTRIBUTORS[n % len(CONTRIBUTORS)],
            "comment": comment}


def write_pages_dump(site_root: Path, pages: list[dict], wiki: str = "enwiki", date: str = "20260101") -> Path:
    """Write `pages` (in id order, as `prose_page` makes them) as a dated dump in two bz2 parts, with the
    checksum files and dumpstatus.json of a real dump's folder; return the folder. Its header's xml:lang is
    the wiki's language (`zhwiki`: "zh"), as on dumps.wikimedia.org."""
    folder = Path(site_root) / wiki / date
    split = len(pages) // 2
    names = part_names(wiki, date, pages, split)
    for name, chunk in zip(names, [pages[:split], pages[split:]]):
        xml = siteinfo_xml(wiki) + "".join(page_xml(p) for p in chunk) + "</mediawiki>\n"
        write_bytes(folder / name, bz2.compress(xml.encode("utf-8"), 9), overwrite=True)
    write_dump_status(folder, wiki, date, "articlesdump", f"{dump_day(date) + dt.timedelta(days=1):%Y-%m-%d} 07:41:12",
                      names)
    return folder
