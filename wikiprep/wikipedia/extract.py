"""Stage: one bz2 dump part -> JSON lines of article text, through WikiExtractor in-process.

`extract_part(part, out, dump_date)` streams one `pages-articles*.xml*.bz2` part: bz2 is
decompressed in 256 KiB blocks and fed to an incremental XML parser; each finished <page> is
handed to WikiExtractor 3.1.0's `Extractor.clean_text` and then forgotten, so memory is
bounded by one read block and one page of at most `MAX_PAGE_CHARS`, never by the part.
Output, in page order, is one JSON object per line, `{"id", "title", "url", "text"}`, for
each ns-0 article that is not a redirect, a disambiguation page, empty, or shorter than
`min_chars`. `text` is WikiExtractor's paragraphs joined by newlines, with section headings
marked "## Heading." (its own `mark_headers` form) so `clean.py` can drop them exactly.

Choices, and why:

- Our own page reader instead of WikiExtractor's `collect_pages`: that one filters on a
  module-global template namespace set as a side effect of `process_dump`, drops pages
  without saying why (we report counts per reason), and reads lines with a regex. An
  expat pull parser handles any layout of the XML and the encodings expat knows (UTF-8,
  UTF-16; UTF-32 is refused by name), and tells a truncated part from a valid one.
- Templates are expanded, but with no template definitions: magic words and parser
  functions ({{CURRENTYEAR}}, {{#expr:...}}, {{#if:...}}) are evaluated, every other
  template ({{Infobox ...}}, {{cite web}}, {{convert}}) becomes empty. Real expansion needs
  every Template page of the whole dump collected before any part can start (they are
  spread over all the parts), serialises the pipeline behind one pass over ~100 GB, and
  is WikiExtractor's slow and recursion-prone path (#2, #114, #253); most enwiki templates
  that would yield prose ({{convert}}, {{lang}}) are Lua modules that WikiExtractor
  cannot run anyway. So each part is extracted on its own.
- Clock magic words are pinned to the dump date. WikiExtractor's `clean_text` sets
  currentyear/month/day/hour/time from `time.strftime` on every page, so its output
  depends on the day it runs (and on the locale, for month names). We give each Extractor
  a `PinnedMagicWords` whose clock entries are fixed to the dump date at 00:00 UTC and
  ignore those writes. Nothing global is patched: replacing `time.strftime` (or the
  `time` module) inside wikiextractor would leak into every other thread of a Luigi
  worker for as long as the patch lives, and two parts with different dump dates
  extracted on two threads would race on it.
- A multistream part can be extracted in slices, in parallel. dumps.wikimedia.org
  compresses multistream parts as one bz2 stream per 100 pages (after a stream holding
  only <siteinfo>), so a byte offset where a stream starts with "<page>" is a place where
  the XML can be cut. `slice_range(part, k, n)` finds slice k's two cuts by searching
  forward from k/n and (k+1)/n of the file for a stream header ("BZh" + level + the
  block magic "1AY&SY"), so no index file is needed and a part that has one stream (the
  plain `pages-articles` parts) is simply one slice. Pages are extracted independently,
  so the slices' outputs, in order, are byte for byte the part's output: the slice count
  changes speed, never the result.
- A page larger than `MAX_PAGE_CHARS` (4 Mi characters of text, tag names and attribute
  values) is skipped, counted under "too_large" in the part's dropped pages, and logged;
  the run goes on. MediaWiki refuses to save wikitext over $wgMaxArticleSize (2 MiB by
  default and on Wikimedia's wikis, in bytes, so never more characters), so no page of a
  real dump comes near it; only a damaged or hostile dump does (a few KB of bz2 can hold a
  page of gigabytes). The reader measures each child of <mediawiki> while it arrives and
  keeps nothing more of it once it is over, so memory stays bounded whatever a page holds;
  a <siteinfo> over the limit fails the part (no real one is more than kilobytes). So does
  a single XML token (a tag, an attribute, a comment) longer than `MAX_PAGE_CHARS` bytes,
  which the parser would have to hold whole: no page content comes as one. "too_large"
  appears in the stats only when a page was skipped, so a normal dump's stats are unchanged.
- A page on which WikiExtractor raises (a RecursionError on deeply nested parser functions, or
  anything else its code can raise on one page's wikitext), or whose record cannot be written
  as UTF-8, is skipped the same way: counted under "unextractable", a reason present only
  when it happened, and logged with the exception; the run goes on. A failure of the part
  (I/O, damaged bz2 or XML) still fails the part. One page never stops a dump.
- A character reference to a surrogate (`&#xD800;` to `&#xDFFF;`, or in decimal) is left as
  written: WikiExtractor's `unescape` turned it into a lone surrogate that no UTF-8 file can
  hold, and MediaWiki itself does not decode it either (it shows the reference as text, as
  WikiExtractor already does for other invalid code points such as `&#x110000;`). `clean.py`'s
  HTML unescaping then makes it U+FFFD, as HTML does; the rest of the page is kept.
- `html_safe=False`: the output is JSON, not HTML, so WikiExtractor's final
  `html.escape` would only add `&amp;`/`&lt;` for `clean.py` to undo.
- Python 3.11: wikiextractor 3.1.0 no longer has the inline-flag regexes that raised
  `re.error: global flags not at the start of the expression` (#336, PR #313); the tests
  run it on 3.11 with warnings as errors.
"""

from __future__ import annotations

import bz2
import datetime as dt
import html
import io
import json
import logging
import math
import os
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from wikiextractor import extract as wx

from shardkit.atomic import atomic_write
from shardkit.errors import PrepError, excerpt
from shardkit.progress import Progress, Stage, throttle
from shardkit.verified import check_file, open_committed, verify_rest

log = logging.getLogger(__name__)

READ_BLOCK = 1 << 18  # bytes of decompressed XML per parser feed
# Twice MediaWiki's $wgMaxArticleSize (2 MiB of wikitext): no page of a real dump comes near it.
MAX_PAGE_CHARS = 4 << 20

DROP_REASONS = ("redirect", "other_namespace", "disambiguation", "empty", "too_short")
# Pages over MAX_PAGE_CHARS: a reason of its own, in the stats only when it happened.
TOO_LARGE = "too_large"
# Pages on which WikiExtractor raises, or whose record cannot be written: also only when it happened.
UNEXTRACTABLE = "unextractable"

# Disambiguation pages carry one of these templates (or a "(disambiguation)" title).
# Matched on the raw wikitext, because the extracted text no longer shows the template.
DISAMBIGUATION_RE = re.compile(
    r"\{\{\s*(?:disambiguation|disambig|dab|hndis|geodis)\s*(?:\|[^{}]*)?\}\}", re.IGNORECASE)

# WikiExtractor's own redirect test (#REDIRECT [[...]], and its localised keywords), for
# old dumps whose redirect pages have no <redirect/> element.
REDIRECT_RE = wx.redirectRE

MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December"]
DAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

# Links are dropped, not kept as <a> tags (the WikiExtractor CLI default without --links).
IGNORED_TAG_PATTERNS = list(wx._DEFAULT_IGNORED_TAG_PATTERNS) + [wx.ignoreTag("a")]
_IGNORED_TAG_NAMES = list(wx.ignoredTags) + ["a"]  # IGNORED_TAG_PATTERNS' tags, in its order
# Each pair's tag, for `clean`'s fast path.
_IGNORED_TAG_OF = dict(zip(IGNORED_TAG_PATTERNS, _IGNORED_TAG_NAMES))


def parse_dump_date(dump_date: str) -> dt.date:
    try:
        return dt.datetime.strptime(str(dump_date), "%Y%m%d").date()
    except ValueError:
        raise PrepError(f"dump date {dump_date!r} is not a date in YYYYMMDD form") from None


def clock_magic_words(dump_date: str) -> dict[str, str]:
    """MediaWiki's clock magic words as they would read at 00:00 UTC on the dump date.

    Values follow MediaWiki (CURRENTDAY unpadded, CURRENTDAY2 padded, CURRENTTIME "HH:MM",
    CURRENTDOW 0 = Sunday) and use English names, never the process locale.
    """
    day = parse_dump_date(dump_date)
    values = {
        "year": f"{day.year}",
        "month": f"{day.month:02d}",
        "month1": f"{day.month}",
        "monthname": MONTH_NAMES[day.month - 1],
        "monthnamegen": MONTH_NAMES[day.month - 1],
        "monthabbrev": MONTH_NAMES[day.month - 1][:3],
        "day": f"{day.day}",
        "day2": f"{day.day:02d}",
        "dayname": DAY_NAMES[day.weekday()],
        "dow": f"{(day.weekday() + 1) % 7}",
        "week": f"{day.isocalendar()[1]}",
        "time": "00:00",
        "hour": "00",
        "timestamp": f"{day:%Y%m%d}000000",
    }
    return {prefix + key: value for prefix in ("current", "local") for key, value in values.items()}


class PinnedMagicWords(wx.MagicWords):
    """WikiExtractor's magic-word table with the clock words fixed and read-only."""

    def __init__(self, pinned: dict[str, str]):
        super().__init__()
        self.values.update(pinned)
        self._pinned = frozenset(pinned)

    def __setitem__(self, name, value):
        if name not in self._pinned:  # Extractor.clean_text writes time.strftime() here
            self.values[name] = value


def is_disambiguation(title: str, wikitext: str) -> bool:
    return title.endswith("(disambiguation)") or DISAMBIGUATION_RE.search(wikitext) is not None


# ----------------------------------------------------------------------------------------
# Reading a part


@dataclass
class Page:
    id: int
    ns: int
    title: str
    revid: str
    redirect: bool
    text: str
    too_large: bool = False  # over MAX_PAGE_CHARS: its text was not kept (and id, title may be missing)


@dataclass
class SiteInfo:
    urlbase: str = ""
    template_prefix: str = "Template:"
    namespaces: frozenset = frozenset({"Template"})


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _check_encoding(first: bytes, name: str) -> None:
    """Refuse what expat cannot read, naming it. UTF-8 and UTF-16 (with or without a
    byte-order mark) expat recognises from the first bytes and decodes itself."""
    if first.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff", b"<\x00\x00\x00", b"\x00\x00\x00<")):
        raise PrepError(f"dump part {name} is UTF-32 encoded; only UTF-8 or UTF-16 dumps can be "
                        "read, convert it to UTF-8")
    if first.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"<\x00", b"\x00<")):
        return
    stripped = first.lstrip(b" \t\r\n")
    if stripped and not stripped.startswith(b"<"):
        raise PrepError(f"dump part {name} is not XML after decompression "
                        f"(starts with {first[:16]!r})")


# ----------------------------------------------------------------------------------------
# Slices of a multistream part

# A bz2 stream header: "BZh", the block-size digit, then the first block's magic number.
STREAM_HEADER_RE = re.compile(rb"BZh[1-9]1AY&SY")
SEARCH_WINDOW = 1 << 20


class _ByteRange(io.RawIOBase):
    """Bytes [start, end) of an open file, as a file of their own (for BZ2File)."""

    def __init__(self, f, start: int, end: int):
        if f.tell() != start:  # a whole part is read from its start, through a reader that cannot seek
            f.seek(start)
        self.f, self.left = f, end - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        data = self.f.read(n) if n > 0 else b""
        buffer[:len(data)] = data
        self.left -= len(data)
        return len(data)


def _page_stream_at(f, offset: int) -> bool:
    """Does a bz2 stream start at `offset` whose text starts with a <page> element?"""
    f.seek(offset)
    decompressor = bz2.BZ2Decompressor()
    head = b""
    try:
        while len(head) < 16 and not decompressor.eof:
            data = f.read(SEARCH_WINDOW)
            if not data:
                break
            head += decompressor.decompress(data, max_length=64)
    except OSError:  # the magic bytes occurred inside compressed data: not a stream
        return False
    return head.lstrip().startswith(b"<page>")


def slice_cut(f, size: int, target: int) -> int:
    """The first offset at or after `target` where a stream of whole pages starts; `size` if none."""
    position = target
    while position < size:
        f.seek(position)
        window = f.read(SEARCH_WINDOW + 9)
        for match in STREAM_HEADER_RE.finditer(window):
            if match.start() < SEARCH_WINDOW and _page_stream_at(f, position + match.start()):
                return position + match.start()
        position += SEARCH_WINDOW
    return size


def slice_range(part_path: Path, index: int, count: int) -> tuple[int, int]:
    """Byte range of slice `index` of `count` of a part: cut where bz2 streams of whole pages
    start. Slice 0 starts at 0 (it holds the siteinfo); slices may be empty."""
    if not 0 <= index < count:
        raise PrepError(f"slice {index} of {count}: no such slice")
    size = os.path.getsize(part_path)
    with open(part_path, "rb") as f:
        start = 0 if index == 0 else slice_cut(f, size, size * index // count)
        end = size if index == count - 1 else slice_cut(f, size, size * (index + 1) // count)
    return start, max(start, end)


@dataclass(frozen=True)
class Piece:
    """A unit of extraction and splitting: a whole part (`slices` 1) or slice `slice` of `slices` of one."""

    part: str
    slice: int = 0
    slices: int = 1

    @property
    def name(self) -> str:
        """The part's name without .bz2, plus .sliceKKKofNNN for a slice: the stem of the piece's outputs."""
        stem = self.part[:-4] if self.part.endswith(".bz2") else self.part
        return stem if self.slices == 1 else f"{stem}.slice{self.slice:03d}of{self.slices:03d}"

    def byte_range(self, part_path: Path) -> tuple[int, int] | None:
        """The piece's bytes of the part file (`slice_range`), or None for the whole part."""
        return None if self.slices == 1 else slice_range(part_path, self.slice, self.slices)


def pieces(parts, *, multistream: bool, slice_mb: float) -> list[Piece]:
    """The pieces of a dump, in dump order: each part that holds pages (not a multistream index file),
    whole, or, for a multistream dump and `slice_mb` > 0, cut into slices of about `slice_mb` MB of bz2.

    `parts` are `download.Part`s (name, size, is_index). Only a multistream part can be sliced: a
    plain part is one bz2 stream. A part of unknown size stays whole.
    """
    out = []
    for p in parts:
        if p.is_index:
            continue
        count = 1
        if multistream and slice_mb > 0 and p.size:
            count = max(1, math.ceil(p.size / (slice_mb * 1e6)))
        out += [Piece(p.name, k, count) for k in range(count)]
    return out


def _siteinfo_head(raw, name: str) -> bytes:
    """The part's XML up to the end of </siteinfo>: what a slice needs before its pages."""
    raw.seek(0)
    head = b""
    with bz2.BZ2File(raw) as stream:
        while b"</siteinfo>" not in head:
            block = stream.read(1 << 16)
            if not block or len(head) > 1 << 24:
                raise PrepError(f"dump part {name} has no <siteinfo> in its first 16 MB: cannot slice it")
            head += block
    return head[:head.index(b"</siteinfo>") + len(b"</siteinfo>")] + b"\n"


_MEDIAWIKI_START = re.compile(rb"<mediawiki\b[^>]*>")
_XML_LANG = re.compile(rb"""\sxml:lang\s*=\s*["']([^"'<>]*)["']""")
_HEAD_LIMIT = 1 << 20


def part_language(path: Path) -> str | None:
    """The language of a dump part's text: the xml:lang of its <mediawiki> start tag, where MediaWiki's export
    writes the wiki's content language ("en", "zh", "ja"); None when the tag has none. PrepError when the part
    is no bz2 file or has no <mediawiki> start tag in its first MB."""
    head = b""
    try:
        with bz2.open(path) as stream:
            while (tag := _MEDIAWIKI_START.search(head)) is None and len(head) < _HEAD_LIMIT:
                block = stream.read(1 << 16)
                if not block:
                    break
                head += block
    except (OSError, EOFError, ValueError) as e:
        raise PrepError(f"dump part {path.name}: cannot read its header ({e})") from None
    if tag is None:
        raise PrepError(f"dump part {path.name}: no <mediawiki> start tag in its first MB: not a MediaWiki dump")
    lang = _XML_LANG.search(tag.group(0))
    return lang.group(1).decode("utf-8", "replace") if lang else None


class _PageTarget:
    """The XML parser's target: <siteinfo> and each <page> as ElementTree elements, each kept only up
    to `max_chars` characters (text, tag names, attribute values).

    Every child of <mediawiki> (a page, the siteinfo, anything else) is measured while it arrives.
    Character data waits here until the element's next tag, as ElementTree's TreeBuilder would hold
    it; once an element is over the limit, that data is dropped and nothing more of it is kept (its
    descendants are not built), so one of any size costs at most `max_chars`. Finished pages and the
    siteinfo are queued in `events` as (kind, element or None, too_large) and taken off the root, so
    the tree never holds more than one; text directly inside <mediawiki> is never read, nor kept.
    """

    def __init__(self, name: str, max_chars: int):
        self.name, self.max_chars = name, max_chars
        self.builder = ET.TreeBuilder()
        self.root = None
        self.events: list[tuple[str, ET.Element | None, bool]] = []
        self.kept: list[bool] = []  # per open element: was it given to the builder?
        self.text: list[str] = []
        self.chars = 0  # of the open child of <mediawiki>
        self.over = False
        self.heard = False  # any callback since the reader last looked

    def _flush(self) -> None:
        if self.text:
            self.builder.data("".join(self.text))
            self.text.clear()

    def _count(self, n: int) -> bool:
        """Count n characters of the open child of <mediawiki>; True once it is over the limit."""
        if not self.over:
            self.chars += n
            if self.chars > self.max_chars:
                self.over = True
                self.text.clear()
        return self.over

    def start(self, tag: str, attrib: dict) -> None:
        self.heard = True
        if self.root is None:
            if _local(tag) != "mediawiki":
                root = _local(tag) if len(_local(tag)) <= 60 else excerpt(_local(tag))  # an XML name: printable
                raise PrepError(f"dump part {self.name} is not a MediaWiki XML export (root element <{root}>)")
            self.root = self.builder.start(tag, attrib)
            self.kept.append(True)
            return
        if len(self.kept) == 1:  # a child of <mediawiki> starts
            self.chars, self.over = 0, False
        if self._count(len(tag) + sum(len(k) + len(v) for k, v in attrib.items())):
            self.kept.append(False)
            return
        self._flush()
        self.builder.start(tag, attrib)
        self.kept.append(True)

    def end(self, tag: str) -> None:
        self.heard = True
        elem = None
        if self.kept.pop():
            self._flush()
            elem = self.builder.end(tag)
        if len(self.kept) != 1:
            return
        # A child of <mediawiki> ends.
        if _local(tag) == "page":
            self.events.append(("page", elem, self.over))
        elif _local(tag) == "siteinfo":
            if self.over:
                raise PrepError(f"dump part {self.name}: its <siteinfo> is larger than {self.max_chars} "
                                "characters: damaged, or not a dump")
            self.events.append(("siteinfo", elem, False))
        if elem is not None:
            self.root.remove(elem)  # the reader has it from `events`, or never needs it

    def data(self, text: str) -> None:  # called for every line of text: _count inlined
        self.heard = True
        if len(self.kept) > 1 and not self.over:
            self.chars += len(text)
            if self.chars > self.max_chars:
                self.over = True
                self.text.clear()
            else:
                self.text.append(text)

    def close(self) -> None:
        return None


class PartReader:
    """Iterate the pages of one bz2 dump part, streaming; `siteinfo` is filled on the way.

    With `byte_range`, only the pages in the bz2 streams of that range (see `slice_range`),
    parsed after the part's own header so namespaces and the site URL are the part's. A page
    over `max_page_chars` comes as a Page with `too_large` set and no text.
    """

    def __init__(self, path: Path, byte_range: tuple[int, int] | None = None, *,
                 max_page_chars: int = MAX_PAGE_CHARS):
        self.path = Path(path)
        self.byte_range = byte_range
        self.max_page_chars = max_page_chars
        self.siteinfo = SiteInfo()
        self.xml_bytes = 0
        self.compressed_bytes = 0  # of the range, consumed so far
        self.compressed_total: int | None = None  # the range's size, once the file is open

    def _blocks(self, raw) -> Iterator[tuple[bytes, bool]]:
        """Decompressed XML blocks, each with whether it is the range's own (counted) XML."""
        size = os.fstat(raw.fileno()).st_size
        start, end = self.byte_range or (0, size)
        self.compressed_total = max(0, end - start)
        if start > 0:
            yield _siteinfo_head(raw, self.path.name), False
        if end > start:
            compressed = _ByteRange(raw, start, end)
            with bz2.BZ2File(compressed) as stream:
                while block := stream.read(READ_BLOCK):
                    self.compressed_bytes = end - start - compressed.left
                    yield block, True
        self.compressed_bytes = self.compressed_total
        if end < size or end == start:  # the part's own closing tag lies beyond this range
            yield b"</mediawiki>\n", False

    def __iter__(self) -> Iterator[Page]:
        name = self.path.name
        target = _PageTarget(name, self.max_page_chars)
        parser = ET.XMLParser(target=target)
        quiet = 0  # bytes fed since the parser last reported anything
        try:
            # A whole part is checked against its download's receipt as it is read; a slice, which reads only
            # its range, by bz2's own checksums, and against the receipt when they fail (`_damage_first`).
            raw = open_committed(self.path) if self.byte_range is None else open(self.path, "rb")
        except OSError as e:
            raise PrepError(f"cannot open dump part {self.path}: {e.strerror}") from None
        with raw:
            stream = self._blocks(raw)
            first = True
            while True:
                try:
                    block, own = next(stream, (b"", True))
                except EOFError:
                    self._damage_first(raw)
                    raise PrepError(f"dump part {name} is truncated: the bz2 stream ends early "
                                    f"after {self.xml_bytes} bytes of XML") from None
                except OSError as e:
                    self._damage_first(raw)
                    raise PrepError(f"dump part {name} is not a valid bz2 file ({e})") from None
                if first:
                    _check_encoding(block, name)
                    first = False
                if not block:
                    break
                self.xml_bytes += len(block) if own else 0
                try:
                    parser.feed(block)
                except ET.ParseError as e:
                    self._damage_first(raw)
                    raise PrepError(f"dump part {name} is not well-formed XML or not UTF-8/UTF-16 "
                                    f"text (expat: {e})") from None
                # Text arrives in pieces as it is fed; only a single token (a tag, an attribute, a
                # comment) is held whole by the parser, silently: that one must not grow unbounded.
                quiet = 0 if target.heard else quiet + len(block)
                target.heard = False
                if quiet > self.max_page_chars:
                    raise PrepError(f"dump part {name} holds an XML tag, attribute or comment of more than "
                                    f"{self.max_page_chars} bytes (after {self.xml_bytes} bytes of XML): "
                                    "damaged, or not a dump")
                yield from self._pages(target)
        if self.xml_bytes == 0 and self.byte_range is None:
            raise PrepError(f"dump part {name} holds no XML")
        try:
            parser.close()
        except ET.ParseError as e:
            self._damage_first(raw)
            raise PrepError(f"dump part {name} ends inside the XML ({e}): truncated or damaged") from None
        yield from self._pages(target)

    def _damage_first(self, raw) -> None:
        """Before an error about the part's content: Damaged if the part differs from its receipt, so that a
        download damaged since it was verified is named, removed and fetched again, not blamed on the dump."""
        if self.byte_range is None:
            verify_rest(raw)
        else:
            check_file(self.path)

    def _pages(self, target: _PageTarget) -> Iterator[Page]:
        events, target.events = target.events, []
        for kind, elem, too_large in events:
            if kind == "siteinfo":
                self._read_siteinfo(elem)
            else:  # the target has taken it off the tree: memory stays per page
                yield self._read_page(elem, too_large)

    def _read_siteinfo(self, elem: ET.Element) -> None:
        info = SiteInfo(namespaces=frozenset())
        names = {"Template"}
        for child in elem.iter():
            tag = _local(child.tag)
            if tag == "base" and child.text:
                info.urlbase = child.text[:child.text.rfind("/")]
            elif tag == "namespace" and child.text:
                names.add(child.text)
                if child.get("key") == "10":
                    info.template_prefix = child.text + ":"
        info.namespaces = frozenset(names)
        self.siteinfo = info

    def _read_page(self, elem: ET.Element | None, too_large: bool = False) -> Page:
        fields = {_local(c.tag): c for c in elem} if elem is not None else {}
        title = (fields["title"].text or "") if "title" in fields else ""
        try:
            page_id = int(fields["id"].text)
            ns = int(fields["ns"].text)
        except (KeyError, TypeError, ValueError):
            if too_large:  # what of it was kept may end before its <id>: it is skipped anyway
                return Page(id=0, ns=0, title=title, revid="", redirect=False, text="", too_large=True)
            raise PrepError(f"dump part {self.path.name}: page {excerpt(title or '?')} has no valid <id> or <ns>") from None
        if too_large:
            return Page(id=page_id, ns=ns, title=title, revid="", redirect=False, text="", too_large=True)
        revisions = [c for c in elem if _local(c.tag) == "revision"]
        text, revid = "", ""
        if revisions:  # the last revision is the current one (history dumps hold many)
            rev = {_local(c.tag): c for c in revisions[-1]}
            text = (rev["text"].text or "") if "text" in rev else ""
            revid = (rev["id"].text or "") if "id" in rev else ""
        return Page(id=page_id, ns=ns, title=title, revid=revid, redirect="redirect" in fields, text=text)


# ----------------------------------------------------------------------------------------
# WikiExtractor's clean(), with fast paths
#
# Profiled on the synthetic dump (py-spy, one part): of the 54% of extract_part's time spent in
# WikiExtractor, a sixth went to tag handling that finds nothing on most pages: each of the 32
# `discardElements` tags costs a dropNested search and a re.sub over the whole page, and the 6
# self-closing and 26 ignored tags a finditer each, whether or not the page holds that tag at all.
# `clean` below is WikiExtractor 3.1.0's `clean` (extract.py), statement for statement, except that
# one pass of TAG_NAMES_RE first finds which of those tag names occur after a "<" (or "</") in the
# page, and a tag none of whose patterns can match is skipped: every one of its patterns starts with
# "<", optional spaces, an optional "/" and spaces, then the name, ending a word, and TAG_NAMES_RE
# matches exactly that, with the same engine and case folding. The discard loop removes text, which
# can bring a "<" next to a name, so the names are found again after a pass that changed the page.
# The cleanup substitutions use precompiled patterns (what re.sub compiles), and `unescape` is skipped
# on text without "&" (its one pattern starts with it). Used only while wikiextractor's own `clean` is
# the one it was copied from (STOCK_CLEAN_SHA256); anything else runs the stock function.
# tests/test_extract.py compares the two on every page of the sample and synthetic dumps.

STOCK_CLEAN_SHA256 = "210e1ac2d9f7c1151091065c42e521c9c7fe9233e13c8dd904e7a5924a10e1e4"


def _tag_names_re(names) -> re.Pattern:
    alternatives = "|".join(f"(?P<t{i}>{re.escape(name)})" for i, name in enumerate(names))
    return re.compile(rf"<\s*/?\s*(?:{alternatives})\b", re.IGNORECASE)


_TAG_NAMES = list(dict.fromkeys(list(wx.discardElements) + list(wx.selfClosingTags) + _IGNORED_TAG_NAMES))
TAG_NAMES_RE = _tag_names_re(_TAG_NAMES)
_GROUP_NAME = {f"t{i}": name for i, name in enumerate(_TAG_NAMES)}
_DISCARD_PATTERNS = [(tag, re.compile(r'<\s*/\s*%s\s*>' % tag, re.IGNORECASE)) for tag in wx.discardElements]
_NOINCLUDE_OPEN_RE = re.compile(r'<\s*noinclude\s*/?\s*>', re.IGNORECASE)
_NOINCLUDE_CLOSE_RE = re.compile(r'<\s*/\s*noinclude\s*>', re.IGNORECASE)
_SPACE_BEFORE_RE = re.compile(r' ([,:.\)\]»])')
_SPACE_AFTER_RE = re.compile(r'([\[\(«]) ')
_PUNCTUATION_LINE_RE = re.compile(r'\n\W+?\n', flags=re.U)
# Every string _SPACE_AFTER_RE can match: one of its characters then a space (nothing optional).
_SPACE_AFTER_PAIRS = tuple(c + ' ' for c in '[(«')
# wx.spaces (' {2,}') and wx.dots ('\.{4,}') written to start with their whole literal prefix: the same
# matches, but re finds them by searching for that prefix instead of trying a match at every space or dot.
STOCK_SPACES, STOCK_DOTS = ' {2,}', r'\.{4,}'
_SPACES_RE = re.compile('  +')
_DOTS_RE = re.compile(r'\.\.\.\.+')


def _may_match(text: str, pairs: tuple[str, ...]) -> bool:
    """Whether `text` holds one of `pairs`: when not, a pattern that matches only those strings finds nothing."""
    return any(pair in text for pair in pairs)


def _tags_in(text: str) -> set[str]:
    return {_GROUP_NAME[m.lastgroup] for m in TAG_NAMES_RE.finditer(text)}


_REFERENCE_RE = re.compile(r"&#?(\w+);")  # wx.unescape's pattern


def _reference(m: re.Match) -> str:
    """wx.unescape's `fixup`, except that a reference to a surrogate stays as written (see the top)."""
    text = m.group(0)
    code = m.group(1)
    try:
        if text[1] == "#":  # character reference
            point = int(code[1:], 16) if text[2] == "x" else int(code)
        else:  # named entity
            point = wx.name2codepoint[code]
        return text if 0xD800 <= point <= 0xDFFF else chr(point)
    except Exception:
        return text  # leave as is


def unescape(text: str) -> str:
    """wikiextractor.extract.unescape, without ever making a lone surrogate."""
    return _REFERENCE_RE.sub(_reference, text)


def _unescape(text: str) -> str:
    return unescape(text) if "&" in text else text


def _stock_clean_is_ours() -> bool:
    import hashlib
    import inspect

    try:
        source = inspect.getsource(wx.clean)
    except (OSError, TypeError):
        return False
    return hashlib.sha256(source.encode()).hexdigest() == STOCK_CLEAN_SHA256 and \
        (wx.spaces.pattern, wx.dots.pattern) == (STOCK_SPACES, STOCK_DOTS)


def clean(extractor, text, expand_templates=False, html_safe=True):
    """wikiextractor.extract.clean, the same output, faster (see above)."""
    if expand_templates:
        text = extractor.expandTemplates(text)
    else:
        text = wx.dropNested(text, r'{{', r'}}')
    text = wx.dropNested(text, r'{\|', r'\|}')
    text = wx.replaceExternalLinks(text, extractor)
    text = wx.replaceInternalLinks(text, extractor)
    text = wx.magicWordsRE.sub('', text)
    res = ''
    cur = 0
    for m in wx.syntaxhighlight.finditer(text):
        end = m.end()
        res += _unescape(text[cur:m.start()]) + m.group(1)
        cur = end
    text = res + _unescape(text[cur:])
    if extractor.HtmlFormatting:
        text = wx.bold_italic.sub(r'<b>\1</b>', text)
        text = wx.bold.sub(r'<b>\1</b>', text)
        text = wx.italic.sub(r'<i>\1</i>', text)
    else:
        text = wx.bold_italic.sub(r'\1', text)
        text = wx.bold.sub(r'\1', text)
        text = wx.italic_quote.sub(r'"\1"', text)
        text = wx.italic.sub(r'"\1"', text)
        text = wx.quote_quote.sub(r'"\1"', text)
    text = text.replace("'''", '').replace("''", '"')
    text = wx.substituteLineBreakTag(wx.lineBreak_tag_pattern, text)
    text = wx.substituteLineBreakTag(wx.block_separator_tag_pattern, text, separator='\n')
    present = _tags_in(text)
    spans = []
    for m in wx.comment.finditer(text):
        spans.append((m.start(), m.end()))
    for tag, pattern in zip(wx.selfClosingTags, wx.selfClosing_tag_patterns):
        if tag in present:
            for m in pattern.finditer(text):
                spans.append((m.start(), m.end()))
    for left, right in extractor.ignored_tag_patterns:
        tag = _IGNORED_TAG_OF.get((left, right))
        if tag is None or tag in present:
            for m in left.finditer(text):
                spans.append((m.start(), m.end()))
            for m in right.finditer(text):
                spans.append((m.start(), m.end()))
    text = wx.dropSpans(spans, text)
    present = _tags_in(text)
    for tag, close_re in _DISCARD_PATTERNS:
        if tag not in present:
            continue
        before = text
        text = wx.dropNested(text, r'''<\s*%s\b(?:(?=("[^"]*"|'[^']*'|[^>]))\1)*(?<!/)>''' % tag,
                             close_re.pattern)
        text = close_re.sub('', text)
        if text != before:
            present = _tags_in(text)
    text = _NOINCLUDE_OPEN_RE.sub('', text)
    text = _NOINCLUDE_CLOSE_RE.sub('', text)
    if not extractor.HtmlFormatting:
        text = _unescape(text)
    for pattern, placeholder in wx.placeholder_tag_patterns:
        index = 1
        for match in pattern.finditer(text):
            text = text.replace(match.group(), '%s_%d' % (placeholder, index))
            index += 1
    text = text.replace('<<', u'«').replace('>>', u'»')
    text = text.replace('\t', ' ')
    text = _SPACES_RE.sub(' ', text)
    text = _DOTS_RE.sub('...', text)
    text = _SPACE_BEFORE_RE.sub(r'\1', text)
    if _may_match(text, _SPACE_AFTER_PAIRS):  # rare: a scan that finds nothing costs a step per character
        text = _SPACE_AFTER_RE.sub(r'\1', text)
    text = _PUNCTUATION_LINE_RE.sub('\n', text)
    text = text.replace(',,', ',').replace(',.', '.')
    if html_safe:
        text = html.escape(text, quote=False)
    return text


class Extractor(wx.Extractor):
    """WikiExtractor's Extractor, cleaning with `clean` above while the stock one is the one it copies."""

    FAST = _stock_clean_is_ours()

    def clean_text(self, text, mark_headers=False, expand_templates=True, html_safe=True):
        if not self.FAST:
            return super().clean_text(text, mark_headers=mark_headers, expand_templates=expand_templates,
                                      html_safe=html_safe)
        # Extractor.clean_text's own first lines (PinnedMagicWords keeps the clock words at the dump date).
        self.magicWords['namespace'] = self.title[:max(0, self.title.find(":"))]
        self.magicWords['pagename'] = self.title
        self.magicWords['fullpagename'] = self.title
        self.magicWords['currentyear'] = time.strftime('%Y')
        self.magicWords['currentmonth'] = time.strftime('%m')
        self.magicWords['currentday'] = time.strftime('%d')
        self.magicWords['currenthour'] = time.strftime('%H')
        self.magicWords['currenttime'] = time.strftime('%H:%M:%S')
        text = clean(self, text, expand_templates=expand_templates, html_safe=html_safe)
        return wx.compact(text, mark_headers=mark_headers, extractor=self)


# ----------------------------------------------------------------------------------------
# Extraction


def _dump_escape(text: str) -> str:
    """The wikitext as it stands in the dump file, which is what WikiExtractor's steps expect
    (it unescapes twice: once the XML, once the HTML entities the wikitext itself holds)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def extract_page(page: Page, siteinfo: SiteInfo, pinned: dict[str, str]) -> list[str]:
    """WikiExtractor's paragraphs for one page (headings marked "## ...")."""
    extractor = Extractor(str(page.id), page.revid, siteinfo.urlbase, page.title, [],
                             templates={}, redirects={}, templatePrefix=siteinfo.template_prefix,
                             knownNamespaces=set(siteinfo.namespaces),
                             ignored_tag_patterns=IGNORED_TAG_PATTERNS, keepLinks=False,
                             keepSections=True)
    extractor.magicWords = PinnedMagicWords(pinned)
    return extractor.clean_text(_dump_escape(page.text), mark_headers=True,
                                expand_templates=True, html_safe=False)


def drop_reason(page: Page) -> str | None:
    """Why a page is not an article, judged on its metadata and raw wikitext; None if it is one."""
    if page.ns != 0:
        return "other_namespace"
    if page.redirect or REDIRECT_RE.match(page.text.lstrip()):
        return "redirect"
    if is_disambiguation(page.title, page.text):
        return "disambiguation"
    return None


def extract_part(part_path: Path, out_path: Path, dump_date: str, *, min_chars: int = 0,
                 byte_range: tuple[int, int] | None = None, max_page_chars: int = MAX_PAGE_CHARS,
                 progress: Progress | None = None) -> dict:
    """Extract the articles of one bz2 dump part into JSON lines at `out_path` (atomic).

    Returns counts: pages seen, articles written, pages dropped by reason, and the bytes of
    XML read. A page over `max_page_chars` is skipped and counted as dropped "too_large", a
    page WikiExtractor raises on as "unextractable" (reasons present only when it happened).
    Raises PrepError for a damaged part, a part that is not a MediaWiki export, and a part
    from which no article survives. With `byte_range` (from `slice_range`) only that slice
    is extracted, and a slice without articles is not an error: the part's verdict comes from
    all of its slices together (`check_parts`). `progress(done, total)` counts the bytes of
    bz2 consumed, of the part or range.
    """
    part_path, out_path = Path(part_path), Path(out_path)
    stage = Stage(log, f"extract {part_path.name}" + (f" bytes {byte_range[0]}-{byte_range[1]}" if byte_range else ""))
    progress = throttle(progress)
    pinned = clock_magic_words(dump_date)
    reader = PartReader(part_path, byte_range, max_page_chars=max_page_chars)
    dropped = dict.fromkeys(DROP_REASONS, 0)
    pages = articles = 0
    with atomic_write(out_path, "w") as out:
        for page in reader:
            pages += 1
            if progress is not None:
                progress(reader.compressed_bytes, reader.compressed_total)
            if page.too_large:
                log.warning("dump part %s: page %s %s is larger than %d characters: skipped (%s)",
                            part_path.name, page.id or "?", excerpt(page.title), max_page_chars, TOO_LARGE)
                dropped[TOO_LARGE] = dropped.get(TOO_LARGE, 0) + 1
                continue
            reason = drop_reason(page)
            if reason is not None:
                dropped[reason] += 1
                continue
            try:
                reason, line = _article_line(page, reader.siteinfo, pinned, min_chars)
            except MemoryError:
                raise
            except Exception as e:  # WikiExtractor on this page's wikitext: this page only
                log.warning("dump part %s: page %s %s cannot be extracted (%s: %s): skipped (%s)", part_path.name,
                            page.id, excerpt(page.title), type(e).__name__, excerpt(str(e)), UNEXTRACTABLE)
                dropped[UNEXTRACTABLE] = dropped.get(UNEXTRACTABLE, 0) + 1
                continue
            if reason is not None:
                dropped[reason] += 1
                continue
            out.write(line)
            articles += 1
        stats = {"part": part_path.name, "pages": pages, "articles": articles, "dropped": dropped,
                 "xml_bytes": reader.xml_bytes}
        if byte_range is None:
            _check_articles(stats)
    if progress is not None:
        progress(reader.compressed_total or 0, reader.compressed_total or 0)
    stage.finish(pages, "pages", reader.compressed_total)
    return stats


def _article_line(page: Page, siteinfo: SiteInfo, pinned: dict[str, str], min_chars: int
                  ) -> tuple[str | None, str | None]:
    """(None, the article's JSON line) or (why the page is dropped: "empty", "too_short", None).
    Raises whatever WikiExtractor raises on the page, and UnicodeEncodeError for text that UTF-8
    cannot hold (a lone surrogate), before anything of the page is written."""
    paragraphs = extract_page(page, siteinfo, pinned)
    body = sum(len(p) for p in paragraphs if not p.startswith("## ") and p.strip())
    if body == 0:
        return "empty", None
    if body < min_chars:
        return "too_short", None
    record = {"id": page.id, "title": page.title, "url": wx.get_url(siteinfo.urlbase, page.id),
              "text": "\n".join(paragraphs)}
    line = json.dumps(record, ensure_ascii=False) + "\n"
    line.encode("utf-8")  # raises here, not half-way through writing the line
    return None, line


def _check_articles(stats: dict) -> None:
    if stats["articles"] == 0:
        reasons = ", ".join(f"{k} {v}" for k, v in stats["dropped"].items() if v) or "none"
        raise PrepError(f"dump part {stats['part']} yields no articles ({stats['pages']} pages; dropped: {reasons})")


def check_parts(stats: list[dict]) -> None:
    """Raise for a part without articles, given the stats of its slices (in any grouping by part)."""
    by_part: dict[str, dict] = {}
    for st in stats:
        total = by_part.setdefault(st["part"], {"part": st["part"], "pages": 0, "articles": 0,
                                                "dropped": dict.fromkeys(DROP_REASONS, 0)})
        total["pages"] += st["pages"]
        total["articles"] += st["articles"]
        for reason, n in st["dropped"].items():
            total["dropped"][reason] = total["dropped"].get(reason, 0) + n
    for total in by_part.values():
        _check_articles(total)
