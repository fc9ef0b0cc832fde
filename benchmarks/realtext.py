"""Real English prose offline: Python's documentation as a MediaWiki dump.

    .venv/bin/python benchmarks/realtext.py SITE_ROOT          # writes SITE_ROOT/enwiki/20260101/

No Wikipedia dump is reachable from this machine, and the synthetic dump of `testkit.synthetic_dump`
is made from a grammar: its sentences follow one another by chance, so a next-sentence head has
nothing to learn from it. Debian's `python3.11-doc` package is reachable (the package registries
are), and its `_sources/` hold the reStructuredText of the whole Python documentation: about 500
pages and 8 MB of prose written by people, on topics far enough apart (a tutorial, `os`, `asyncio`,
the C API, the What's New pages) that a sentence from another page is told apart by what it is about,
as in Wikipedia.

Each page becomes one article whose wikitext is the page's prose: headings become `== ... ==`,
paragraphs and list items are kept with their inline markup reduced to text (`:func:`os.stat`` ->
`os.stat`, ``*args*`` -> `args`), and everything that is not prose is dropped (code and literal
blocks, interactive sessions, tables, directives' options, index entries, targets, comments). The
pages go into two bz2 parts with the sha1sums and dumpstatus.json of a real dump's folder, so
`DownloadDump` takes it from a file:// copy like any other, and the whole pipeline runs on it.

The package is fetched with `apt-get download` (no install) into a cache folder and unpacked with
Python's own ar/tar readers; its file name and sha256 are printed, since the text is whatever
version Debian serves.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PACKAGE = "python3.11-doc"
SOURCES = "usr/share/doc/python3.11/html/_sources/"
DATE = "20260101"

# Directives whose indented body is prose (the directive line and its options are dropped);
# every other directive is dropped with its body (code, tables, toctrees, index entries...).
PROSE_DIRECTIVES = {
    "function", "method", "class", "attribute", "data", "exception", "decorator", "decoratormethod",
    "classmethod", "staticmethod", "abstractmethod", "coroutinefunction", "coroutinemethod", "note", "warning",
    "versionadded", "versionchanged", "deprecated", "deprecated-removed", "seealso", "describe", "envvar",
    "cmdoption", "option", "opcode", "impl-detail", "admonition", "tip", "important", "caution", "attention",
    "glossary", "topic", "sidebar", "c:function", "c:macro", "c:type", "c:member", "c:var", "c:struct",
    "c:data", "cfunction", "cmacro", "ctype", "cmember", "cvar", "availability", "pdbcommand", "2to3fixer",
    "hint", "danger", "error", "centered", "productionlist-prose",
}
DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::(.*)$")
ADORNMENT = re.compile(r"^([=\-~^*\"#+`'.:_])\1{2,}\s*$")
SIMPLE_TABLE_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")
BULLET = re.compile(r"^(\s*)(?:[*+-]|#\.|\d+\.)\s+(.*)$")
ROLE = re.compile(r":[\w:.-]+:`([^`]*)`")
LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?")
INLINE = [
    (re.compile(r"``(.+?)``"), r"\1"),
    (re.compile(r"`([^`]+)`__?"), r"\1"),
    (re.compile(r"`([^`]+)`"), r"\1"),
    (re.compile(r"\*\*(.+?)\*\*"), r"\1"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])"), r"\1"),
    (re.compile(r"\|(\w+)\|"), r"\1"),
    (re.compile(r"\\(.)"), r"\1"),
]


def _role_text(match: re.Match) -> str:
    """`:func:`text <target>`` -> text; `:meth:`~a.b.c`` -> c; `:class:`!C`` -> C."""
    inner = match.group(1)
    named = re.match(r"(.*?)\s*<[^<>]*>$", inner, re.S)
    if named and named.group(1):
        return named.group(1)
    inner = inner.lstrip("!")
    if inner.startswith("~"):
        return inner[1:].rsplit(".", 1)[-1]
    return inner


def inline_text(text: str) -> str:
    text = ROLE.sub(_role_text, text)
    text = LINK.sub(r"\1", text)
    for pattern, repl in INLINE:
        text = pattern.sub(repl, text)
    return re.sub(r"\s+", " ", text).strip()


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def rst_to_wikitext(source: str) -> tuple[str | None, str]:
    """(the page's first heading, its prose as wikitext)."""
    lines = source.expandtabs(8).split("\n")
    out: list[str] = []
    para: list[str] = []
    bullet = False
    title = None
    skip_deeper_than: int | None = None  # inside a dropped block: lines indented deeper are skipped
    in_table = False

    def flush() -> None:
        nonlocal para, bullet
        if para:
            text = inline_text(" ".join(para))
            literal = text.endswith("::")
            if literal:  # "... as follows::" introduces a code block: keep the sentence, end it with ':'
                text = text[:-2].rstrip()
                text = text + ":" if text else ""
            # Prose only: a few words, and none of the wikitext that WikiExtractor would read as markup.
            if len(text.split()) >= 4 and not any(m in text for m in ("{{", "}}", "[[", "]]", "''", "__")):
                out.append(("* " if bullet else "") + text)
        para, bullet = [], False

    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if skip_deeper_than is not None:
            if not line.strip() or indent_of(line) > skip_deeper_than:
                continue
            skip_deeper_than = None
        if in_table:
            if SIMPLE_TABLE_BORDER.match(line) and (i >= len(lines) or not lines[i].strip()):
                in_table = False
            continue
        stripped = line.strip()
        if not stripped:
            flush()
            continue
        if SIMPLE_TABLE_BORDER.match(line):
            flush()
            in_table = True
            continue
        if ADORNMENT.match(stripped):
            if len(para) == 1:  # the line above was a heading
                heading = inline_text(para[0])
                para = []
                if title is None:
                    title = heading
                elif heading:
                    out.append(f"== {heading} ==")
            else:
                flush()  # an overline or a transition
            continue
        directive = DIRECTIVE.match(line)
        if directive:
            flush()
            depth, name = len(directive.group(1)), directive.group(2)
            if name not in PROSE_DIRECTIVES:
                skip_deeper_than = depth
                continue
            while i < len(lines) and re.match(r"^\s+:[\w-]+:(\s|$)", lines[i]) and indent_of(lines[i]) > depth:
                i += 1  # the directive's options
            continue
        if stripped.startswith(("..", ">>>", "+-", "+=", "|", ":param", ":type", ":return", ":raises")):
            flush()  # comments and targets, sessions, grid tables, field lists
            if stripped.startswith(".."):
                skip_deeper_than = indent_of(line)
            continue
        item = BULLET.match(line)
        if item:
            flush()
            bullet = True
            para = [item.group(2)]
            continue
        if para and indent_of(line) > indent_of(lines[i - 2]) and not bullet:
            flush()  # a block quote under a paragraph: a new paragraph
        para.append(stripped)
        if stripped.endswith("::"):
            literal_depth = indent_of(line) if not bullet else indent_of(line) - 2
            flush()
            skip_deeper_than = max(literal_depth, 0)
    flush()
    return title, "\n\n".join(out) + "\n"


def fetch_package(cache: Path, package: str = PACKAGE) -> Path:
    """The .deb of `package` in `cache`, fetched with `apt-get download` when it is not there yet."""
    cache.mkdir(parents=True, exist_ok=True)
    debs = sorted(cache.glob(f"{package}_*.deb"))
    if not debs:
        r = subprocess.run(["apt-get", "download", package], cwd=cache, capture_output=True, text=True)
        debs = sorted(cache.glob(f"{package}_*.deb"))
        if not debs:
            raise SystemExit(f"realtext: error: `apt-get download {package}` in {cache} failed: "
                             f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return debs[-1]


def deb_files(deb: Path, prefix: str, suffix: str) -> dict[str, bytes]:
    """{path under `prefix`: bytes} of the package's files under `prefix` ending in `suffix`, read from the
    .deb (ar, then tar): nothing is installed."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise SystemExit(f"realtext: error: {deb} is not a Debian package")
    pos, member = 8, None
    while pos < len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        if name.startswith("data.tar"):
            member = data[pos + 60:pos + 60 + size]
            break
        pos += 60 + size + (size & 1)
    if member is None:
        raise SystemExit(f"realtext: error: {deb} has no data.tar member")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(member)) as tar:
        for info in tar:
            name = info.name.lstrip("./")
            if info.isfile() and name.startswith(prefix) and name.endswith(suffix):
                files[name[len(prefix):]] = tar.extractfile(info).read()
    return files


def deb_sources(deb: Path) -> dict[str, str]:
    """{path under _sources/: text} of the package's .rst.txt files."""
    return {path: data.decode("utf-8") for path, data in deb_files(deb, SOURCES, ".rst.txt").items()}


def build_pages(sources: dict[str, str]) -> list[dict]:
    """One article per documentation page with prose, in path order, ids rising as in a dump."""
    from testkit.synthetic_dump import prose_page

    pages, titles = [], set()
    for n, (path, source) in enumerate(sorted(sources.items())):
        heading, text = rst_to_wikitext(source)
        if len(text) < 500:  # index and contents pages
            continue
        title = heading or path
        if title in titles:
            title = f"{title} ({path.removesuffix('.rst.txt')})"
        titles.add(title)
        pages.append(prose_page(n, title, text, comment=path))
    return pages


def write_python_docs_dump(site_root: Path, cache: Path, wiki: str = "enwiki", date: str = DATE) -> dict:
    """Write the dump under `site_root/{wiki}/{date}`; return what it holds and where it came from."""
    from testkit.synthetic_dump import write_pages_dump

    deb = fetch_package(cache)
    pages = build_pages(deb_sources(deb))
    folder = write_pages_dump(site_root, pages, wiki, date)
    return {"folder": str(folder), "package": deb.name, "package_sha256": hashlib.sha256(deb.read_bytes()).hexdigest(),
            "pages": len(pages), "wikitext_mb": round(sum(len(p["text"].encode()) for p in pages) / 1e6, 2)}


if __name__ == "__main__":
    import json

    if len(sys.argv) != 2:
        sys.exit("usage: realtext.py SITE_ROOT")
    root = Path(sys.argv[1])
    print(json.dumps(write_python_docs_dump(root, root / "deb-cache"), indent=1))
