"""Multistream parts extracted in slices: the synthetic dump, slice cuts, and the joined output."""

import bz2
import json
import subprocess
import sys
from pathlib import Path

import pytest

from wikiprep.wikipedia import extract
from shardkit.errors import PrepError
from testkit.synthetic_dump import write_synthetic_dump

DATE = "20260101"


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """A one-part multistream dump (~1 MB of XML, 10 pages a stream) and its part extracted whole."""
    root = tmp_path_factory.mktemp("slices")
    folder = write_synthetic_dump(root / "site", date=DATE, xml_mb=1.0, parts=1, multistream=True, stream_pages=10)
    part = next(folder.glob("*-multistream1.xml-*.bz2"))
    whole = root / "whole.jsonl"
    stats = extract.extract_part(part, whole, DATE)
    return folder, part, whole, stats


def extract_in_slices(part: Path, count: int, out_dir: Path) -> tuple[Path, dict, list]:
    """Extract each slice; return their outputs joined in order, their summed stats, and the ranges."""
    joined = out_dir / f"joined{count}.jsonl"
    total = {"part": part.name, "pages": 0, "articles": 0, "xml_bytes": 0,
             "dropped": dict.fromkeys(extract.DROP_REASONS, 0)}
    ranges, data = [], b""
    for k in range(count):
        ranges.append(extract.slice_range(part, k, count))
        out = out_dir / f"slice{k}.jsonl"
        stats = extract.extract_part(part, out, DATE, byte_range=ranges[-1])
        data += out.read_bytes()
        for key in ("pages", "articles", "xml_bytes"):
            total[key] += stats[key]
        for reason, n in stats["dropped"].items():
            total["dropped"][reason] += n
    joined.write_bytes(data)
    return joined, total, ranges


@pytest.mark.parametrize("count", [2, 3, 5])
def test_slices_join_to_the_whole_part_byte_for_byte(dump, tmp_path, count):
    _, part, whole, stats = dump
    joined, joined_stats, ranges = extract_in_slices(part, count, tmp_path)
    assert joined.read_bytes() == whole.read_bytes()
    assert joined_stats == stats
    # the ranges tile the file, and the work is really spread
    assert ranges[0][0] == 0 and ranges[-1][1] == part.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert sum(1 for a, b in ranges if b > a) == count


def test_synthetic_multistream_layout(dump, tmp_path):
    folder, part, _, stats = dump
    status = json.loads((folder / "dumpstatus.json").read_text())
    files = status["jobs"]["articlesmultistreamdump"]["files"]
    index = next(folder.glob("*-multistream-index1.txt-*.bz2"))
    assert set(files) == {part.name, index.name}
    assert files[part.name]["size"] == part.stat().st_size
    # every index offset is the start of a bz2 stream of 100 whole pages, the first of which it names
    data = part.read_bytes()
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    offsets = sorted({int(line.split(":", 1)[0]) for line in lines})
    assert len(lines) == stats["pages"] and len(offsets) * 10 == len(lines)
    first_id = {}
    for line in lines:
        offset, page_id, _ = line.split(":", 2)
        first_id.setdefault(int(offset), page_id)
    for offset in offsets[:3]:
        xml = bz2.BZ2Decompressor().decompress(data[offset:])
        assert xml.lstrip().startswith(b"<page>") and xml.count(b"<page>") == 10
        assert f"<id>{first_id[offset]}</id>".encode() in xml[:400]
    again = write_synthetic_dump(tmp_path / "again", date=DATE, xml_mb=1.0, parts=1, multistream=True,
                                 stream_pages=10)
    assert (again / part.name).read_bytes() == data


def test_a_single_stream_part_is_one_slice(tmp_path):
    folder = write_synthetic_dump(tmp_path / "site", date=DATE, xml_mb=0.3, parts=1, multistream=False)
    part = next(folder.glob("*-pages-articles1.xml-*.bz2"))
    size = part.stat().st_size
    assert [extract.slice_range(part, k, 3) for k in range(3)] == [(0, size), (size, size), (size, size)]
    joined, _, _ = extract_in_slices(part, 3, tmp_path)
    extract.extract_part(part, tmp_path / "whole.jsonl", DATE)
    assert joined.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


def test_streams_that_cut_pages_are_never_slice_boundaries(dump, tmp_path):
    """pbzip2 and similar tools write a stream per fixed block of bytes, cutting pages in two."""
    _, part, whole, _ = dump
    xml = bz2.decompress(part.read_bytes())
    blocks = [xml[i:i + 40_000] for i in range(0, len(xml), 40_000)]
    odd = tmp_path / "enwiki-20260101-pages-articles-multistream1.xml-p1p2.bz2"
    odd.write_bytes(b"".join(bz2.compress(b, 9) for b in blocks))
    joined, _, ranges = extract_in_slices(odd, 4, tmp_path)
    assert joined.read_bytes() == whole.read_bytes()
    assert all(r[0] == 0 or r[0] == r[1] for r in ranges)  # no stream here starts at a <page>


def test_a_part_is_judged_on_all_of_its_slices():
    empty = {"part": "p1.bz2", "pages": 100, "articles": 0, "dropped": {"redirect": 100}}
    full = {"part": "p1.bz2", "pages": 100, "articles": 80, "dropped": {"redirect": 20}}
    extract.check_parts([empty, full, empty])  # one slice of only redirects is fine
    with pytest.raises(PrepError, match=r"dump part p2\.bz2 yields no articles \(200 pages; dropped: redirect 200\)"):
        extract.check_parts([full, dict(empty, part="p2.bz2"), dict(empty, part="p2.bz2")])


def test_only_multistream_parts_are_cut_into_pieces():
    from wikiprep.wikipedia.dump import Part

    data = Part("enwiki-20260101-pages-articles-multistream1.xml-p1p9.bz2", "u", 250_000_000, "0" * 40, None)
    index = Part("enwiki-20260101-pages-articles-multistream-index1.txt-p1p9.bz2", "u", 9_000_000, "1" * 40, None)
    stem = "enwiki-20260101-pages-articles-multistream1.xml-p1p9"
    sliced = extract.pieces([data, index], multistream=True, slice_mb=100)
    assert [p.name for p in sliced] == [f"{stem}.slice{k:03d}of003" for k in range(3)]
    assert sliced[1] == extract.Piece(data.name, 1, 3)
    for multistream, slice_mb in ((True, 0), (False, 100)):
        assert [p.name for p in extract.pieces([data, index], multistream=multistream, slice_mb=slice_mb)] == [stem]


def test_truncated_multistream_part_names_the_file(dump, tmp_path):
    _, part, _, _ = dump
    bad = tmp_path / part.name
    data = part.read_bytes()
    bad.write_bytes(data[: len(data) - 5000])
    last = extract.slice_range(bad, 2, 3)
    with pytest.raises(PrepError, match=rf"{part.name} is truncated"):
        extract.extract_part(bad, tmp_path / "x.jsonl", DATE, byte_range=last)
    assert not (tmp_path / "x.jsonl").exists()


def test_luigi_extracts_multistream_parts_in_slices_with_identical_output(dump, tmp_path):
    """Through the luigi command line: 0.1 MB slices and whole parts give the same sentence shards."""
    folder = dump[0]
    site = folder.parents[1].as_uri()
    outputs = {}
    for slice_mb in ("0.1", "0"):
        data = tmp_path / f"data{slice_mb}"
        r = subprocess.run([str(Path(sys.executable).with_name("luigi")), "--module", "workflows", "SentenceShards",
                            "--data-dir", str(data), "--dump-url", site, "--dump-date", DATE, "--multistream",
                            "--num-shards", "3", "--extract-slice-mb", slice_mb,
                            "--local-scheduler", "--workers", "2"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        work = data / f"enwiki-{DATE}"
        extracted = sorted((work / "extracted").glob("*.jsonl"))
        splits = sorted(p.name for p in (work / "split").glob("*/*") if not p.name.startswith("."))
        if slice_mb == "0":
            assert [p.name for p in extracted] == [dump[1].name[:-4] + ".jsonl"] and len(splits) == 1
        else:  # 0.1 MB of bz2 per slice: the part is extracted and split as several pieces
            assert len(extracted) >= 2 and all(".slice" in p.name for p in extracted)
            assert len(splits) == len(extracted)
        # the index files are not needed: slices are cut at stream headers found in the part itself
        assert [p.name for p in (data / "downloads" / "enwiki" / DATE).glob("*.bz2")] == [dump[1].name]
        outputs[slice_mb] = {p.name: p.read_bytes() for p in sorted(work.glob("sentences/*/shard_*.txt"))}
        outputs[slice_mb]["extracted"] = b"".join(p.read_bytes() for p in extracted)
        outputs[slice_mb]["punkt"] = next(work.glob("punkt_*.json")).read_bytes()
    assert len(outputs["0"]) == 5 and outputs["0.1"] == outputs["0"]
