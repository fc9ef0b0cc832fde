"""Mixtures (#28): a Wikipedia dump and a books folder mixed at the shard level, through Luigi's command line.

The dump is the demo's sample, read from a file:// copy of the dumps site; `Pretrain128` runs first in the same
data folder, and the mixture reuses its stages instead of running them again. Every shard holds documents of both
sources, the document counts add up (the books twice: `repeat = 2`), a second run is complete at once, and a
changed recipe is refused, naming the change. The recipe's own checks are unit tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_paths import REFERENCE_INPUTS, REFERENCE_VOCAB
from shardkit.errors import PrepError
from wikiprep.dataset import folder_name
from wikiprep.mixture import read_recipe
from wikiprep.options import GenerationOptions
from wikiprep.verify import verify
from wikiprep.wikipedia.samples import write_sample_dump
from workflows import DEMO_DATE, DEMO_WIKI

REPO = Path(__file__).resolve().parents[1]
_LINES = [line for line in (REFERENCE_INPUTS / "sample_text.txt").read_text(encoding="utf-8").splitlines() if line]
BOOKS = [" ".join(_LINES[i:i + 4]) + "\n\nThe end of this book came at last." for i in range(0, len(_LINES), 4)]


def _luigi(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([sys.executable, "-m", "luigi", "--module", "workflows", *args, "--local-scheduler",
                           "--workers", "2"], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


COMMON = ("--vocab-file", str(REFERENCE_VOCAB), "--num-shards", "2", "--min-doc-chars", "0")
DATASET = folder_name(GenerationOptions(dupe_factor=5), num_shards=2)  # seq128_mask20_dup5_shards2


def _recipe(path: Path, site: Path, books: Path, repeat: int) -> Path:
    path.write_text(f'name = "wiki-books"\n[[source]]\nkind = "wikipedia"\nwiki = "{DEMO_WIKI}"\n'
                    f'dump_date = "{DEMO_DATE}"\ndump_url = "{site.as_uri()}"\n'
                    f'[[source]]\nkind = "text"\npath = "{books}"\nformat = "books"\nrepeat = {repeat}\n',
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    site, books, data = root / "site", root / "books", root / "data"
    write_sample_dump(site, wiki=DEMO_WIKI, date=DEMO_DATE)
    books.mkdir()
    for i, text in enumerate(BOOKS):
        (books / f"book{i}.txt").write_text(text + "\n", encoding="utf-8")
    wiki = _luigi("Pretrain128", "--data-dir", str(data), "--dump-url", site.as_uri(), "--dump-date", DEMO_DATE, *COMMON)
    assert wiki.returncode == 0, wiki.stderr[-3000:]
    recipe = _recipe(root / "wiki-books.toml", site, books, 2)
    mix = _luigi("PretrainMix128", "--data-dir", str(data), "--recipe", str(recipe), *COMMON)
    assert mix.returncode == 0, mix.stderr[-3000:]
    return root, data, recipe, mix


def test_the_wikipedia_stages_done_by_pretrain128_are_not_run_again(mixed):
    _, _, _, mix = mixed
    summary = mix.stderr[mix.stderr.index("===== Luigi Execution Summary"):]
    ran = summary[summary.index("ran successfully"):]
    assert "SplitPart" in summary[:summary.index("ran successfully")]  # among the complete ones
    for family in ("DownloadPart", "ExtractPart", "SplitPart", "TrainPunkt("):
        assert family not in ran, ran
    assert "TextSplitPiece" in ran and "MixSentenceShard" in ran


def test_every_shard_mixes_both_sources_and_the_counts_add_up(mixed):
    _, data, _, _ = mixed
    folder = data / "wiki-books" / DATASET
    stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    wiki_stats = json.loads((data / f"{DEMO_WIKI}-{DEMO_DATE}" / DATASET / "stats.json").read_text())
    wiki_documents = sum(s["sentence_documents"] for s in wiki_stats["shards"])
    assert [(s["kind"], s["repeat"], s["documents"]) for s in stats["corpus"]["sources"]] == [
        ("wikipedia", 1, wiki_documents), ("text", 2, 2 * len(BOOKS))]
    assert sum(s["sentence_documents"] for s in stats["shards"]) == wiki_documents + 2 * len(BOOKS)
    # Instances per source, counted where each shard's were made: they add up to the shard's and the dataset's.
    assert all(sum(s["instances_per_source"]) == s["instances"] for s in stats["shards"])
    per_source = [s["instances"] for s in stats["corpus"]["sources"]]
    assert sum(per_source) == stats["total"]["instances"] and min(per_source) > 0
    wiki_lines = set()
    for shard in sorted((data / f"{DEMO_WIKI}-{DEMO_DATE}").glob("sentences/*/shard_*.txt")):
        wiki_lines |= set(shard.read_text(encoding="utf-8").splitlines()) - {""}
    for shard in sorted((data / "wiki-books").glob("sentences/*/shard_*.txt")):
        lines = shard.read_text(encoding="utf-8").splitlines()
        assert "The end of this book came at last." in lines, shard.name
        assert wiki_lines & set(lines), shard.name
    description = json.loads((folder / "dataset.json").read_text(encoding="utf-8"))
    assert description["mixture"] == "wiki-books" and description["source_2"]["repeat"] == 2
    assert description["source_1"]["dump_date"] == DEMO_DATE and len(description["source_1"]["parts"]) == 2
    assert len(description["source_2"]["text_files"]) == len(BOOKS)
    assert verify(folder)["records"] == stats["total"]["instances"]
    report = (folder / "report" / "report.txt").read_text(encoding="utf-8")
    assert f"(text, repeat 2): {2 * len(BOOKS)} documents" in report
    assert f"sentences, {per_source[1]} instances" in report
    html = (folder / "report" / "report.html").read_text(encoding="utf-8")
    assert "Documents, sentences and instances per source" in html and f">{per_source[0]:,}</td>" in html


def test_a_second_run_is_complete_and_a_changed_recipe_is_refused(mixed, tmp_path):
    root, data, recipe, _ = mixed
    again = _luigi("PretrainMix128", "--data-dir", str(data), "--recipe", str(recipe), *COMMON)
    assert again.returncode == 0 and "ran successfully" not in again.stderr, again.stderr[-2000:]
    changed = _recipe(tmp_path / "changed.toml", root / "site", root / "books", 3)
    refused = _luigi("PretrainMix128", "--data-dir", str(data), "--recipe", str(changed), *COMMON)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert refused.returncode != 0 and len(errors) == 1, refused.stderr[-2000:]
    assert "was made from another recipe (recipe.sources.2.repeat 2 there, 3 here)" in errors[0]


@pytest.mark.parametrize("text, message", [
    ('[[source]]\nkind = "text"\npath = "p"\nformat = "books"\n', "no name"),
    ('name = "x"\n', "no [[source]] table"),
    ('name = "x"\n[[source]]\nkind = "pdf"\n', "source 1: kind 'pdf': expected wikipedia or text"),
    ('name = "x"\n[[source]]\nkind = "text"\npath = "p"\n', "source 1: format must be given for kind 'text'"),
    ('name = "x"\n[[source]]\nkind = "wikipedia"\ndump_date = "20260101"\nrepeat = 0\n',
     "source 1: repeat 0: expected a whole number, at least 1"),
    ('name = "x"\n[[source]]\nkind = "wikipedia"\ndump_date = "20260101"\npath = "p"\n',
     "source 1: unknown key 'path' for kind 'wikipedia'"),
    ('name = "x"\n[[source]\n', "not TOML"),
])
def test_a_bad_recipe_is_one_line_naming_the_file_and_the_source(tmp_path, text, message):
    path = tmp_path / "r.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PrepError) as raised:
        read_recipe(path)
    assert str(raised.value).startswith(f"--recipe {path}: {message}")


def test_every_kind_of_source_binds_each_of_its_recipe_keys_to_a_parameter_of_its_task():
    """workflows.mix.MEMBER_TASKS against wikiprep.mixture.KINDS: a kind, or a key of one, that a recipe may give
    but no task takes would fail only when a recipe uses it."""
    from wikiprep.mixture import KINDS
    from workflows.mix import MEMBER_TASKS

    assert set(MEMBER_TASKS) == set(KINDS)
    for kind, (task, parameter) in MEMBER_TASKS.items():
        assert set(parameter) == set(KINDS[kind]), kind
        assert set(parameter.values()) <= set(task.get_param_names()), kind
