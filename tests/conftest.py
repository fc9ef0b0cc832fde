import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# The tiers of the suite (markers registered in pyproject.toml). `make test` runs all three; `make test-unit`
# (`pytest -m unit`), `make test-e2e` and `make test-daemons` run one each.
#   unit     the libraries, in process or with short-lived helper processes (a child python, a forked writer,
#            a racing process): a few minutes on 2 cores.
#   e2e      end to end: Luigi runs the tasks (its command line, or luigi.build), a dataset is built through
#            `wikiprep` / `imagenet-prep` as users run them, or a benchmarks/ script runs.
#   daemons  a server runs beside the test: luigid with its workers, or an HTTP server serving a dump.
# Every test is in exactly one tier, given here and nowhere else: by its module, `"test_x": "tier"`, or
# `"test_x": ("tier", {"test_function": "other tier", ...})` for the functions of a module in another tier (all
# parametrizations of a function go together). A module missing from this table stops the collection (add it);
# tests/test_suite.py checks that every function singled out still exists.
TIERS = {
    "test_anchor_chain": "e2e",
    "test_bad_input": "e2e",
    "test_bench_pipeline": "e2e",
    "test_bench_scale": "e2e",
    "test_bench_train_feed": ("e2e", {"test_baselines_arithmetic": "unit"}),
    "test_clean": "unit",
    "test_cli": "e2e",
    "test_commit": "unit",
    "test_damage": "e2e",
    "test_download": "daemons",
    "test_duplicate_runs": "daemons",
    "test_extract": ("unit", {"test_a_skipped_page_is_in_the_datasets_stats": "e2e",
                     "test_an_unextractable_page_is_in_the_datasets_stats": "e2e"}),
    "test_frames": "unit",
    "test_hdf5": "unit",
    "test_imagenet_cli": "e2e",
    "test_install": "unit",
    "test_imagenet_convert": "unit",
    "test_inspect": "e2e",
    "test_instances": "unit",
    "test_interrupts": "unit",
    "test_jsonfile": "unit",
    "test_languages": ("unit", {"test_a_chinese_dump_through_luigi": "e2e"}),
    "test_layout": "unit",
    "test_luigid": "daemons",
    "test_mix": ("e2e", {"test_a_bad_recipe_is_one_line_naming_the_file_and_the_source": "unit"}),
    "test_plain_decode": "unit",
    "test_plan": "daemons",
    "test_parquet": "e2e",
    "test_pool": "unit",
    "test_pretrain_layouts": "e2e",
    "test_progress": ("daemons", {
        "test_throttle_passes_the_first_and_final_calls_and_few_between": "unit",
        "test_extraction_splitting_and_merging_report_bytes": "unit",
        "test_instances_report_input_bytes_through_every_phase": "unit",
        "test_generation_reports_every_pass_over_the_documents": "unit",
        "test_imagenet_shards_verify_stats_and_training_steps": "unit",
        "test_console_shows_the_stage_lines_and_no_debug_unless_asked": "e2e",
        "test_no_bar_on_a_pipe": "e2e",
        "test_a_bar_on_a_terminal": "e2e",
    }),
    "test_punkt_regex": "unit",
    "test_punkt_training": "unit",
    "test_readme": "e2e",
    "test_realtext": "unit",
    "test_run_console": ("e2e", {"test_the_estimate_counts_running_tasks_by_their_rate_and_waiting_ones_by_their_kind":
                                 "unit", "test_make_refuses_a_variable_close_to_one_of_its_own": "unit",
                                 "test_luigid_shows_the_whole_run_on_the_root_task": "daemons"}),
    "test_records": "unit",
    "test_remask": "unit",
    "test_report": "e2e",
    "test_samples": "unit",
    "test_seams": ("unit", {"test_a_new_corpus_is_a_source_and_a_binding": "e2e"}),
    "test_sentence_shards": "e2e",
    "test_sentences": "unit",
    "test_siblings": ("daemons", {
        "test_a_folder_is_named_by_what_differs_from_the_defaults_and_an_old_one_keeps_its_dataset": "unit"}),
    "test_slices": ("unit", {"test_luigi_extracts_multistream_parts_in_slices_with_identical_output": "e2e"}),
    "test_slurm_plan": "unit",
    "test_speedups": "unit",
    "test_suite": "unit",
    "test_text": ("unit", {"test_a_books_folder_builds_a_dataset_with_its_quirks_counted_and_named": "e2e",
                           "test_two_workers_and_other_cuts_give_the_same_bytes": "e2e",
                           "test_files_cut_in_byte_ranges_give_the_same_bytes": "e2e",
                           "test_a_second_run_is_complete_and_a_changed_corpus_is_refused_before_any_work": "e2e",
                           "test_the_sentences_format_gives_create_pretraining_datas_records": "e2e",
                           "test_a_jsonl_gz_corpus_of_german_and_french_builds": "e2e",
                           "test_the_dry_run_writes_nothing": "e2e"}),
    "test_train": ("unit", {"test_train_task_commits_once": "e2e"}),
    "test_vocab": "unit",
    "test_workflows": "e2e",
    "test_workflows_download": "daemons",
}
TIER_NAMES = ("unit", "e2e", "daemons")


def tier_of(module: str, function: str) -> str | None:
    entry = TIERS.get(module)
    if entry is None:
        return None
    default, exceptions = (entry, {}) if isinstance(entry, str) else entry
    return exceptions.get(function, default)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    missing, doubled = set(), []
    for item in items:
        if item.path.parent != TESTS:  # e.g. cluster/slurm/test/test_slurm.py, run by `make test-slurm`
            continue
        module = item.path.stem
        tier = tier_of(module, getattr(item, "originalname", item.name.split("[")[0]))
        if tier is None:
            missing.add(f"tests/{item.path.name}")
            continue
        if any(mark.name in TIER_NAMES for mark in item.iter_markers()):
            doubled.append(item.nodeid)
        item.add_marker(getattr(pytest.mark, tier))
    if missing:
        raise pytest.UsageError(f"no tier for {', '.join(sorted(missing))}: add each module to TIERS in "
                                f"tests/conftest.py (unit, e2e or daemons)")
    if doubled:
        raise pytest.UsageError(f"tier marker set outside TIERS in tests/conftest.py: {', '.join(doubled)}")


@pytest.fixture
def tier_table() -> dict:
    return TIERS


@pytest.fixture(scope="session")
def synthetic_part(tmp_path_factory):
    """A part of a synthetic dump (testkit.synthetic_dump: the benchmarks' text, generated, about 3 MB of XML)
    extracted as ExtractPart does, and the Punkt model trained on it as TrainPunkt does: (extracted part, model).
    For the checks against stock nltk on more text than the embedded sample holds."""
    from testkit.synthetic_dump import write_synthetic_dump
    from wikiprep import sentences
    from wikiprep.wikipedia.extract import extract_part
    from wikiprep.wikipedia.source import extracted_documents

    root = tmp_path_factory.mktemp("synthetic")
    (part,) = sorted(write_synthetic_dump(root / "site", xml_mb=3.0, parts=1).glob("*pages-articles1*.bz2"))
    extracted = root / "enwiki-20260101-pages-articles1.jsonl"
    extract_part(part, extracted, "20260101")
    model = root / "punkt_min200.json"
    sample = sentences.PunktSample()
    sample.add(extracted.stem, extracted_documents(extracted, min_chars=200))
    sentences.train_punkt(sample.texts, model)
    return extracted, model
