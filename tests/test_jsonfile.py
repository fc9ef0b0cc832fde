"""shardkit.jsonfile: JSON read back from disk or from a corpus, whatever it holds, is a value or one PrepError."""

import json
import os
import resource
import subprocess
import sys

import pytest

from shardkit.errors import PrepError
from shardkit.jsonfile import depth, lone_surrogate, parse_json, read_json


def test_plain_json_parses_as_json_does():
    for text in ['{"a": [1, 2.5, "x\\u00e9", null, true]}', '[]', '"\\ud83d\\ude00"', '"\\\\ud800"', '3']:
        assert parse_json(text, source="t") == json.loads(text)


@pytest.mark.parametrize("text, said", [
    ("[" * 100_000 + "]" * 100_000, "nested 100000 levels deep"),
    ('{"a": ' * 5000 + "1" + "}" * 5000, "nested 5000 levels deep"),
    ('{"n": ' + "9" * 5000 + "}", "a number of more than 4300 digits"),
    ('{"text": "a\\ud800b"}', "lone surrogate \\ud800"),
    ('{"text": "\\udc00"}', "lone surrogate \\udc00"),
    ('{"text": "\\\\\\ud800"}', "lone surrogate \\ud800"),
    ('{"a": 1', "not valid JSON"),
    (b'{"a": "\xff"}', "not UTF-8 (byte 0xff at offset 7)"),
])
def test_hostile_json_is_one_line_naming_the_source(text, said):
    with pytest.raises(PrepError) as e:
        parse_json(text, source="corpus.jsonl:3")
    assert str(e.value).startswith("corpus.jsonl:3: ") and said in str(e.value)


def test_brackets_inside_strings_are_not_nesting():
    assert depth('{"a": "[[[[[[{{{{"}') == 1
    assert depth('["\\"[[["]') == 1
    assert lone_surrogate('"\\ud800\\udc00"') is None


def test_a_file_that_is_not_a_regular_one_is_never_read(tmp_path):
    (tmp_path / "dir.json").mkdir()
    os.mkfifo(tmp_path / "fifo.json")  # nobody writes to it: reading it would block forever
    os.symlink("/dev/zero", tmp_path / "zero.json")
    for name, said in [("dir.json", "a folder"), ("fifo.json", "a FIFO"), ("zero.json", "a character device")]:
        with pytest.raises(PrepError, match=said):
            read_json(tmp_path / name, what="a manifest")
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")


def test_a_file_past_the_cap_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # 3 GB, sparse: refused on its size, never read into memory
        f.truncate(3 << 30)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from shardkit.jsonfile import read_json; from shardkit.errors import PrepError\n"
            f"try: read_json({str(big)!r}, what='a dataset description')\n"
            "except PrepError as e: print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "3,221,225,472 bytes, larger than 64 MiB: not a dataset description" in out
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"a": "x" * 100}))
    with pytest.raises(PrepError, match="larger than 50 bytes"):
        read_json(small, cap=50)
    assert read_json(small)["a"] == "x" * 100
