"""A folder of real English prose in the books shape through PretrainText128, beside the same prose as a dump.

    .venv/bin/python benchmarks/bench_text.py WORK_DIR [--books 200]

The prose is Python's documentation from Debian's python3.11-doc package (`benchmarks/realtext.py`: fetched with
`apt-get download`, never installed), one page per book file, its headings dropped, with the quirks of issue #28
among them: a CRLF file, a byte-order mark, an empty file, a whitespace-only file, one 100,000-character paragraph
and one Latin-1 file. It checks and prints:

- the dataset built with 1 and then 2 workers, byte-identical; a run killed (SIGKILL) while it writes its shards
  (once the first is committed, before the dataset is finished) and run again, byte-identical too;
- the skipped files counted by reason and named; the [UNK] rate with the BERT-base uncased vocabulary; wiki markup left in
  the sentence shards (`wikiprep.wikipedia.clean.markup_residue`, the test the Wikipedia path is held to);
- seconds per core of the stages after extraction (splitting, merging, instances: the stage lines each writes),
  for the books and for the same pages as a dump through Pretrain128 (its extraction left out).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import realtext  # noqa: E402
from wikiprep.dataset import folder_name  # noqa: E402
from wikiprep.options import GenerationOptions  # noqa: E402

VOCAB = REPO / "tests" / "fixtures" / "google-reference" / "bert-base-uncased-vocab.txt"
NUM_SHARDS = 8
DATASET = folder_name(GenerationOptions(dupe_factor=5), num_shards=NUM_SHARDS)  # seq128_mask20_dup5_shards8
STAGE_LINE = re.compile(r"INFO: (split|merge|instances) [^:]+: .* in ([0-9.]+) s")
HEADING = re.compile(r"^=+ .* =+$")
BULLET = re.compile(r"^\s*[*#]+ ")  # realtext keeps list items as wikitext bullets; a book has none
# Wiki markup proper: templates, links, bold and italic quotes, headings, bullets, tags, entities. (The Wikipedia
# path's `markup_residue` also counts emptied parentheses, which in Python's documentation are calls: `f()`.)
# Tags are wikitext's own (<ref>, <br/>, ...): the prose itself writes placeholders such as <module>, <stdio.h>.
WIKI_MARKUP = re.compile(r"\{\{|\}\}|\[\[|\]\]|''|^\s*[*#:;]\s|^=+.*=+$|&[a-z]+;"
                         r"|</?(?:ref|br|div|span|small|big|sup|sub|center|table|tr|td|th|gallery|nowiki|math|"
                         r"code|blockquote|references)\b[^<>]*>")


def write_books(folder: Path, cache: Path, count: int) -> dict:
    deb = realtext.fetch_package(cache)
    pages = realtext.build_pages(realtext.deb_sources(deb))[:count]
    folder.mkdir(parents=True, exist_ok=True)
    for n, page in enumerate(pages):
        text = "\n".join(BULLET.sub("", line) for line in page["text"].split("\n") if not HEADING.match(line.strip()))
        (folder / f"book{n:04d}.txt").write_text(text + "\n", encoding="utf-8")
    # The quirks.
    crlf = folder / "book0000.txt"
    crlf.write_bytes(crlf.read_bytes().replace(b"\n", b"\r\n"))
    bom = folder / "book0001.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.txt").write_bytes(b" \n\n\t\n")
    long = " ".join(p["text"].replace("\n", " ") for p in pages[2:40])
    (folder / "long_paragraph.txt").write_text(long[:100_000] + "\n", encoding="utf-8")
    (folder / "latin1.txt").write_bytes("Un café très noir, à la française.".encode("latin-1"))
    return {"package": deb.name, "books": len(pages), "files": len(list(folder.iterdir()))}


def luigi(*args: str, workers: int = 1, background: bool = False):
    cmd = [sys.executable, "-m", "luigi", "--module", "workflows", *args, "--local-scheduler",
           "--workers", str(workers), "--vocab-file", str(VOCAB), "--num-shards", str(NUM_SHARDS)]
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    if background:  # in a session of its own: its worker processes are killed with it, by its group id
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"bench_text: error: {' '.join(args[:1])} failed:\n{run.stderr[-3000:]}")
    return run


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def stage_seconds(log: str) -> float:
    return sum(float(m.group(2)) for m in STAGE_LINE.finditer(log))


def sentence_mb(work_dir: Path) -> float:
    return sum(p.stat().st_size for p in work_dir.glob("sentences/*/shard_*.txt")) / 1e6


def per_mb(log: str, work_dir: Path) -> dict:
    """Seconds of the stages after extraction (one core each), per MB of the sentence shards they made."""
    seconds, mb = stage_seconds(log), sentence_mb(work_dir)
    return {"seconds": round(seconds, 2), "sentence_mb": round(mb, 2), "seconds_per_mb": round(seconds / mb, 3)}


def main(work: Path, count: int) -> dict:

    books = work / "books"
    if not books.is_dir():
        print(json.dumps(write_books(books, work / "deb-cache", count)), flush=True)
    text_args = ("PretrainText128", "--text-dir", str(books), "--text-format", "books")
    one = luigi(*text_args, "--data-dir", str(work / "one"))
    luigi(*text_args, "--data-dir", str(work / "two"), workers=2)
    dataset = work / "one" / "books" / DATASET
    same_workers = files(dataset) == files(work / "two" / "books" / DATASET)

    killed = luigi(*text_args, "--data-dir", str(work / "killed"), workers=2, background=True)
    receipts = work / "killed" / "books" / DATASET / ".receipts"
    while killed.poll() is None and not list(receipts.glob("text_*.json")):
        time.sleep(0.01)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    shards_at_kill = len(list(receipts.glob("text_*.json")))
    finished_at_kill = (receipts.parent / "MANIFEST.json").exists()
    luigi(*text_args, "--data-dir", str(work / "killed"), workers=2)
    same_after_kill = files(dataset) == files(work / "killed" / "books" / DATASET)

    stats = json.loads((dataset / "stats.json").read_text(encoding="utf-8"))
    report = json.loads((dataset / "report" / "stats.json").read_text(encoding="utf-8"))
    lines = [line for p in sorted((work / "one" / "books").glob("sentences/*/shard_*.txt"))
             for line in p.read_text(encoding="utf-8").splitlines() if line]

    site = work / "site"
    if not site.is_dir():
        realtext.write_python_docs_dump(site, work / "deb-cache")
    wiki = luigi("Pretrain128", "--data-dir", str(work / "wiki"), "--dump-url", site.as_uri(), "--dump-date",
                 realtext.DATE)
    text_bytes = sum(p.stat().st_size for p in books.iterdir())
    return {"skipped_files": stats["corpus"]["skipped_files"],
            "skipped": {f["path"]: f["detail"] for f in stats["corpus"]["skipped"]},
            "instances": stats["total"]["instances"],
            "unk_rate_percent": round(100 * report["unk_rate"], 5),
            "wiki_markup_lines": sum(1 for line in lines if WIKI_MARKUP.search(line)), "sentence_lines": len(lines),
            "identical_1_and_2_workers": same_workers, "identical_after_kill_and_rerun": same_after_kill,
            "killed_with_shards_committed": f"{shards_at_kill} of 8", "killed_after_finishing": finished_at_kill,
            "text_mb": round(text_bytes / 1e6, 2),
            "after_extraction": {"books": per_mb(one.stderr, work / "one" / "books"),
                                 "dump": per_mb(wiki.stderr, work / "wiki" / f"enwiki-{realtext.DATE}")}}


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit("usage: bench_text.py WORK_DIR [--books N]")
    n = int(args[args.index("--books") + 1]) if "--books" in args else 200
    print(json.dumps(main(Path(args[0]), n), indent=1))
