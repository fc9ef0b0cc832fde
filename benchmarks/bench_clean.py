"""Throughput of extraction and cleaning on the embedded sample dump, and the markup left.

    .venv/bin/python benchmarks/bench_clean.py [--repeat 3]
    .venv/bin/python benchmarks/bench_clean.py --xml-mb 50 --repeat 1     # a synthetic dump of 50 MB

Writes the sample dump (or, with --xml-mb, `write_synthetic_dump` of that size) to a temporary folder, extracts each part with extract_part (best
of --repeat runs), cleans every extracted article with clean_text, and prints one JSON
object: MB of uncompressed XML per second for extraction and for cleaning (cleaning also
per MB of its own input), articles and drops, the clean prose size, and markup_residue
before and after cleaning. Single process, one core.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from testkit.synthetic_dump import write_synthetic_dump
from wikiprep.wikipedia.clean import clean_text, markup_residue
from wikiprep.wikipedia.extract import extract_part
from wikiprep.wikipedia.samples import write_sample_dump


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--xml-mb", type=float, default=0, help="a synthetic dump of this size instead of the sample")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        folder = (write_synthetic_dump(tmp / "site", xml_mb=args.xml_mb) if args.xml_mb
                  else write_sample_dump(tmp / "site"))
        sample_seconds = time.perf_counter() - started
        parts = sorted(p for p in folder.iterdir() if p.suffix == ".bz2")
        xml_bytes = extract_seconds = 0.0
        stats, lines = [], []
        for i, part in enumerate(parts):
            out = tmp / f"part{i}.jsonl"
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                st = extract_part(part, out, folder.name)
                best = min(best, time.perf_counter() - started)
            stats.append(st)
            xml_bytes += st["xml_bytes"]
            extract_seconds += best
            for rec in map(json.loads, out.read_text(encoding="utf-8").splitlines()):
                lines += rec["text"].split("\n")
        text = "\n".join(lines)
        clean_seconds = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            cleaned = clean_text(text)
            clean_seconds = min(clean_seconds, time.perf_counter() - started)
    dropped = {k: sum(st["dropped"][k] for st in stats) for k in stats[0]["dropped"]}
    report = {
        "sample_seconds": round(sample_seconds, 3),
        "xml_mb": round(xml_bytes / 1e6, 3),
        "extract_mb_xml_per_s": round(xml_bytes / extract_seconds / 1e6, 2),
        "extracted_mb": round(len(text.encode()) / 1e6, 3),
        "clean_mb_per_s": round(len(text.encode()) / clean_seconds / 1e6, 2),
        "clean_mb_xml_per_s": round(xml_bytes / clean_seconds / 1e6, 2),
        "pages": sum(st["pages"] for st in stats),
        "articles": sum(st["articles"] for st in stats),
        "dropped": dropped,
        "clean_prose_kb": round(sum(len(p.encode()) + 1 for p in cleaned) / 1e3, 1),
        "residue_extracted": round(markup_residue(lines), 4),
        "residue_cleaned": round(markup_residue(cleaned), 4),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
