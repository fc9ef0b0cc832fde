"""benchmarks/realtext.py: Python's documentation as a dump of real prose for bench_train.

The converter keeps prose and drops code, tables and directives' machinery; the .deb reader finds the
sources inside a Debian package (ar, then tar); the dump it writes is read by the extraction stage
like any other. No network: the package is built here.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import realtext  # noqa: E402

RST = """\
:mod:`shutil` --- High-level file operations
============================================

.. module:: shutil
   :synopsis: High-level file operations, including copying.

.. index::
   single: file; copying

The :mod:`shutil` module offers a number of *high-level* operations on files and
collections of files, see :func:`~os.path.join` and `the guide <https://example.org>`_.

Directory and files operations
------------------------------

.. function:: copyfileobj(fsrc, fdst[, length])

   Copy the contents of the file-like object *fsrc* to the file-like object ``fdst``.

   .. versionchanged:: 3.3
      :exc:`IOError` used to be raised instead of :exc:`OSError`.

For example, this copies a tree of files::

   copytree(src, dst, ignore=ignore_patterns('*.pyc', 'tmp*'))
   print("this is code, not prose")

>>> shutil.copy("a", "b")
'b'

=========  ===========================
Option     Meaning
=========  ===========================
``-x``     a table cell is not prose at all
=========  ===========================

* A list item keeps its bullet for the extractor.
* Short.

.. code-block:: python

   def hidden(): return "this is code too"
"""


def test_rst_to_wikitext_keeps_prose_and_drops_the_rest():
    title, text = realtext.rst_to_wikitext(RST)
    assert title == "shutil --- High-level file operations"
    assert text.split("\n\n") == [
        "The shutil module offers a number of high-level operations on files and collections of files, "
        "see join and the guide.",
        "== Directory and files operations ==",
        "Copy the contents of the file-like object fsrc to the file-like object fdst.",
        "IOError used to be raised instead of OSError.",
        "For example, this copies a tree of files:",
        "* A list item keeps its bullet for the extractor.\n",
    ]


def _deb(members: dict[str, bytes]) -> bytes:
    """A Debian package (ar archive) whose data.tar.xz holds `members`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = b"!<arch>\n"
    for name, data in (("debian-binary", b"2.0\n"), ("control.tar.xz", b"x"), ("data.tar.xz", buf.getvalue())):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data
        if len(data) & 1:
            out += b"\n"
    return out


def test_dump_from_a_package_is_extracted_like_any_dump(tmp_path):
    from wikiprep.wikipedia.extract import extract_part

    cache = tmp_path / "cache"
    cache.mkdir()
    long_page = RST + "\n".join(f"Paragraph {i} says something about files and the ways to copy them." for i in
                                range(0, 40, 2)).replace(".", ".\n\n")
    (cache / "python3.11-doc_3.11.2-6_all.deb").write_bytes(_deb({
        realtext.SOURCES + "library/shutil.rst.txt": long_page.encode(),
        realtext.SOURCES + "contents.rst.txt": b"Contents\n========\n\n.. toctree::\n\n   library/index\n",
        "usr/share/doc/python3.11/html/index.html": b"<html></html>",
    }))
    info = realtext.write_python_docs_dump(tmp_path / "site", cache)
    assert info["pages"] == 1  # contents.rst has no prose; the HTML is not a source
    folder = Path(info["folder"])
    status = json.loads((folder / "dumpstatus.json").read_text())
    parts = sorted(status["jobs"]["articlesdump"]["files"])
    assert len(parts) == 2 and all((folder / p).is_file() for p in parts)
    out = tmp_path / "pages.jsonl"
    extract_part(folder / parts[1], out, "20260101")
    pages = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["title"] for p in pages] == ["shutil --- High-level file operations"]
    assert "The shutil module offers a number of high-level operations" in pages[0]["text"]
    assert "copytree" not in pages[0]["text"] and "hidden" not in pages[0]["text"]


def test_not_a_package_is_one_error(tmp_path):
    bad = tmp_path / "python3.11-doc_1_all.deb"
    bad.write_bytes(b"PK\x03\x04 not a deb")
    with pytest.raises(SystemExit, match=r"^realtext: error: .* is not a Debian package$"):
        realtext.deb_sources(bad)
