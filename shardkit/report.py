"""A self-contained HTML page for a dataset report: one file, plots inside, no network, no JavaScript.

The page is made of a few parts, each a function returning `Html` (markup that is already safe):
`page`, `section`, `paragraph`, `table`, `figure`, `facts`, `details`, `pre`. Any plain `str` handed
to them is text and is escaped with `html.escape`, so a file name, a token or a reason read from a
dataset can never become markup. Figures are PNG bytes embedded as `data:` URIs: the page is one
file that opens anywhere (a laptop, a cluster's login node through a copied file), and the same
data gives the same bytes, since nothing here adds a time, a path or a random id.

`Report` collects the figures of one report as it is built, so the caller writes each PNG beside
the page (the same bytes the page embeds). `Report.figures` renders several at once, one forked
child per figure: matplotlib draws in one thread, and a dataset's report is the one serial step
at the end of a pipeline run, where the other cores have nothing left to do.
"""

from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

from .atomic import write_bytes, write_text
from .plots import png_bytes
from .pool import forked_each

# Plain CSS, inline: readable on a laptop screen and printable; wide tables scroll in their own box.
_STYLE = """
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 15px; line-height: 1.45;
       color: #1b1b1b; margin: 0 auto; max-width: 1180px; padding: 16px 28px 48px; }
h1 { font-size: 26px; margin: 12px 0 4px; }
h2 { font-size: 20px; margin: 34px 0 8px; padding-top: 8px; border-top: 2px solid #d0d7de; }
p.lead { color: #444; margin-top: 2px; }
nav { margin: 10px 0 4px; font-size: 14px; }
nav a { margin-right: 14px; color: #0b57d0; text-decoration: none; }
figure { margin: 12px 0 16px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e6ea; }
figcaption { font-size: 13px; color: #555; margin-top: 4px; }
.scroll { display: inline-block; max-width: 100%; max-height: 420px; overflow: auto;
          border: 1px solid #e3e6ea; margin: 8px 0 14px; vertical-align: top; }
.row { display: flex; flex-wrap: wrap; gap: 10px 36px; align-items: flex-start; }
table { border-collapse: collapse; font-size: 13.5px; margin: 8px 0 14px; }
.scroll table { margin: 0; }
caption { text-align: left; font-weight: bold; padding: 4px 6px; white-space: nowrap; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: #f3f5f7; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 3px 18px; margin: 8px 0 14px; }
dl.facts dt { font-weight: bold; color: #333; }
dl.facts dd { margin: 0; word-break: break-all; }
.ok { color: #116329; font-weight: bold; }
.bad { color: #b42318; font-weight: bold; }
details { margin: 6px 0 12px; }
summary { cursor: pointer; color: #0b57d0; }
pre { background: #f6f8fa; padding: 8px 10px; overflow-x: auto; font-size: 13px; }
.tokens { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; line-height: 1.9;
          background: #f6f8fa; padding: 6px 10px; margin: 4px 0 8px; }
.tokens .seg-b { color: #1a4d8f; }
.tokens .special { color: #888; }
.tokens mark { background: #ffe08a; padding: 1px 2px; border-radius: 3px; }
.tokens mark sub { color: #8a4b00; font-size: 11px; }
"""


class Html(str):
    """Markup that is safe to put in a page as it is (made by this module's functions)."""


def text(value) -> Html:
    """`value` as escaped text (markup passes unchanged)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


def join(parts: Iterable) -> Html:
    return Html("".join(text(p) for p in parts))


def tag(name: str, content="", **attrs) -> Html:
    """<name attrs>content</name>; attribute names with `_` for `-`, a trailing `_` dropped (`class_`)."""
    attr = "".join(f' {k.rstrip("_").replace("_", "-")}="{html.escape(str(v), quote=True)}"'
                   for k, v in attrs.items() if v is not None)
    return Html(f"<{name}{attr}>{join(content) if isinstance(content, (list, tuple)) else text(content)}</{name}>")


def anchor(title: str) -> str:
    """The id of a section titled `title`: lower case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


class Section(Html):
    """A section's markup, with its title and id for the page's list of links."""

    title: str
    id: str


def page(title: str, sections: Sequence[Section], lead: str | Html = "") -> str:
    """The whole document: a heading, a line under it, a list of links to the sections, the sections."""
    nav = tag("nav", [tag("a", s.title, href=f"#{s.id}") for s in sections])
    head = Html('<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
                + tag("title", title) + tag("style", Html(_STYLE)))
    body = join([tag("h1", title), tag("p", lead, class_="lead") if lead else "", nav, *sections])
    return f"<!DOCTYPE html>\n<html lang=\"en\"><head>{head}</head><body>{body}</body></html>\n"


def section(title: str, *parts) -> Section:
    out = Section(tag("section", [tag("h2", title), *parts], id=anchor(title)))
    out.title, out.id = title, anchor(title)
    return out


def paragraph(*parts) -> Html:
    return tag("p", list(parts))


def _cell(value) -> tuple[str, Html]:
    """(class, content) of a table cell: numbers right-aligned, floats with 4 significant decimals."""
    if isinstance(value, bool) or value is None:
        return "", text("—" if value is None else ("yes" if value else "no"))
    if isinstance(value, int):
        return "num", text(f"{value:,}")
    if isinstance(value, float):
        return "num", text(f"{value:.4g}" if abs(value) < 1e6 else f"{value:,.0f}")
    if isinstance(value, str) and re.fullmatch(r"[\d.,]+%|—", value):  # a share, as the reports write it
        return "num", text(value)
    return "", text(value)


def table(header: Sequence[str], rows: Iterable[Sequence], caption: str | None = None, *,
          scroll: bool = False) -> Html:
    """A table of `rows` under `header`; `scroll` puts a long one in a box of its own height."""
    rows = list(rows)
    numeric = [bool(rows) and all(_cell(r[i])[0] == "num" or r[i] is None for r in rows)
               for i in range(len(header))]
    head = tag("tr", [tag("th", h, class_="num" if numeric[i] else None) for i, h in enumerate(header)])
    body = []
    for row in rows:
        cells = []
        for value in row:
            cls, content = _cell(value)
            cells.append(tag("td", content, class_=cls or None))
        body.append(tag("tr", cells))
    out = tag("table", [tag("caption", caption) if caption else "", tag("thead", head), tag("tbody", body)])
    return tag("div", out, class_="scroll") if scroll else out


def facts(pairs: Iterable[tuple[str, object]]) -> Html:
    """A two-column list of names and values."""
    items = []
    for name, value in pairs:
        items += [tag("dt", name), tag("dd", value if isinstance(value, Html) else _cell(value)[1])]
    return tag("dl", items, class_="facts")


def status(ok: bool | None, words: str) -> Html:
    """`words` in green (ok), red (not ok) or plain (not checked)."""
    return tag("span", words, class_=None if ok is None else ("ok" if ok else "bad"))


def row(*parts) -> Html:
    """Parts side by side (tables), wrapping on a narrow screen."""
    return tag("div", list(parts), class_="row")


def details(summary: str, *parts) -> Html:
    """Content folded under a one-line summary (HTML's own <details>: no script needed)."""
    return tag("details", [tag("summary", summary), *parts])


def pre(content: str) -> Html:
    return tag("pre", content)


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def figure(png: bytes, alt: str, caption: str | Html = "", width: int | None = None) -> Html:
    """A PNG embedded in the page, with its caption."""
    img = Html(f'<img src="{png_data_uri(png)}" alt="{html.escape(alt, quote=True)}"'
               + (f' width="{int(width)}"' if width else "") + ">")
    return tag("figure", [img, tag("figcaption", caption) if caption else ""])


class Report:
    """The figures of one report, by file name, in the order they were made: each is embedded in the
    page (`figure`) and written beside it by the caller, so the page and the files hold the same bytes."""

    def __init__(self):
        self.pngs: dict[str, bytes] = {}

    def figure(self, name: str, fig, alt: str, caption: str | Html = "") -> Html:
        """Render matplotlib `fig` as PNG `name` and return it embedded, captioned with its file name too."""
        return self.figures([(name, fig, alt, caption)], processes=1)[name]

    def figures(self, specs: Iterable[tuple], processes: int | None = None) -> dict[str, Html]:
        """`figure` for each (name, fig, alt[, caption]) of `specs`, by name in that order, rendered `processes` at a
        time (default: one per usable core) in forked children (`shardkit.pool.forked_each`: an error or a
        signal stops and reaps them all). `specs` may build each figure as it is asked for: the next is
        built while the last ones are drawn. The same bytes as rendering them here one after another: a
        child draws the figure as it was at the fork, and Agg's output depends on nothing else."""
        if processes is None:
            processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        taken: list[tuple] = []
        specs = (taken.append(spec) or spec for spec in specs)
        if processes <= 1:
            rendered = dict(_render(spec) for spec in specs)
        else:
            with forked_each(_render, specs, processes, name=lambda spec: spec[0]) as finished:
                rendered = dict(finished)
        out = {}
        for name, _, alt, *caption in taken:
            caption = caption[0] if caption else ""
            self.pngs[name] = png = rendered[name]
            out[name] = figure(png, alt, join([caption, " " if caption else "", tag("code", name)]))
        return out

    def write(self, out_dir, page_text: str, *, overwrite: bool = False) -> list[str]:
        """Commit every PNG, then report.html (each atomically; `overwrite` as in `shardkit.atomic`).
        Returns the file names written."""
        out_dir = Path(out_dir)
        for name, png in self.pngs.items():
            write_bytes(out_dir / name, png, overwrite=overwrite)
        write_text(out_dir / REPORT_HTML, page_text, overwrite=overwrite)
        return [*self.pngs, REPORT_HTML]


def _render(spec: tuple) -> tuple[str, bytes]:
    """(name, PNG bytes) of one `Report.figures` spec: what a forked child sends back."""
    return spec[0], png_bytes(spec[1])


REPORT_HTML = "report.html"
