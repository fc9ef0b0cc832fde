"""Chinese and Japanese dumps through Pretrain128: sentence splitting, next-sentence balance, [UNK].

    .venv/bin/python benchmarks/bench_languages.py OUT [--code DIR] [--fixture]
    .venv/bin/python benchmarks/bench_languages.py OUT --large [--seed S]
    .venv/bin/python benchmarks/bench_languages.py OUT --web

Builds a zhwiki and a jawiki dump of real prose (`cjktext`: Debian's translated manuals, fetched with
`apt-get download`; with `--fixture`, the tests' excerpt in tests/fixtures/cjk/ instead, no network), runs
`Pretrain128` on each through Luigi's command line with a vocabulary trained on the dump, and prints, per
language:

- `run_on_lines`: the share of the sentence shards' lines holding a sentence end followed by more text (a
  CJK full stop, exclamation or question mark, closing quotes and brackets after it, then anything but
  whitespace): a line that is more than one sentence;
- `random_next`: the share of instances whose second segment is a random one (about half in the original
  generator when documents have enough sentences);
- `unk`: the share of [UNK] among the tokens of the instances' documents (stats.json).

`--large`: Japanese alone, from more of Debian's Japanese manuals (`cjktext.MORE_JA`): whether the random-next
share of the small dump is its few long documents' draw. `--seed` is Pretrain128's.

`--web`: German and French instead, as a cased web corpus: the same manuals' German and French translations, a
JSON line per section (its paragraphs in `text`) in `de.jsonl.gz` and `fr.jsonl.gz`, through `PretrainText128
--text-format jsonl --do-lower-case false` with a cased vocabulary trained on them; it prints the documents, the
[UNK] share, and how many of the vocabulary's entries hold a capital or an accented letter.

`--code DIR` runs the pipeline from another checkout of the project (its `workflows` and libraries first on
PYTHONPATH, Luigi started in it): how the figures of docs/performance.md compare a commit with the one before.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import cjktext  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "cjk"  # tests/fixture_paths.CJK
# A sentence end of Chinese or Japanese with more text after it on the same line: the measure's own pattern,
# not the splitter's.
RUN_ON = re.compile("[\u3002\uff01\uff1f\uff61][\"'\u2019\u201d\u300d\u300f\uff09\u3011\u3015\u3009\u300b)\\]]*+\\S")


def run_on_share(sentence_dir: Path) -> tuple[int, int]:
    """(lines holding a sentence end followed by more text, sentence lines) of every shard in `sentence_dir`."""
    run_on = lines = 0
    for shard in sorted(sentence_dir.glob("shard_*.txt")):
        for line in shard.read_text(encoding="utf-8").splitlines():
            if line:
                lines += 1
                run_on += RUN_ON.search(line) is not None
    return run_on, lines


def pretrain(site: Path, data: Path, wiki: str, code: Path, num_shards: int,
             seed: int = 12345) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(code))
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([str(Path(sys.executable).with_name("luigi")), "--module", "workflows", "Pretrain128",
                           "--data-dir", str(data), "--dump-url", site.resolve().as_uri(), "--wiki", wiki,
                           "--dump-date", cjktext.DATE, "--num-shards", str(num_shards), "--seed", str(seed),
                           "--local-scheduler", "--workers", "2"], cwd=code, env=env, capture_output=True, text=True)


def dataset_of(work: Path) -> Path:
    """The one dataset a run made in corpus folder `work`: seq128_mask20_dup5, its name followed by the shard count
    and seed when they are not the defaults (a `--code` checkout from before sibling datasets leaves them out)."""
    (stats,) = work.glob("seq128_mask20_dup5*/stats.json")
    return stats.parent


def measure(data: Path, wiki: str) -> dict:
    work = data / f"{wiki}-{cjktext.DATE}"
    run_on, lines = run_on_share(next((work / "sentences").iterdir()))
    total = json.loads((dataset_of(work) / "stats.json").read_text())["total"]
    return {"wiki": wiki, "sentence_lines": lines, "run_on_lines": round(run_on / lines, 4),
            "instances": total["instances"], "random_next": round(total["random_next"] / total["instances"], 4),
            "tokens": total["tokens"], "unk": round(total["unk_tokens"] / total["tokens"], 6),
            "vocab_size": len((dataset_of(work) / "vocab.txt").read_text(encoding="utf-8").splitlines())}


# German and French: Debian's translations of the same two manuals.
WEB = {language: [(f"debian-reference-{language}", "usr/share/debian-reference/", f".{language}.html"),
                  (f"maint-guide-{language}", f"usr/share/doc/maint-guide-{language}/html/", f".{language}.html")]
       for language in ("de", "fr")}
ACCENTED = set("äöüßÄÖÜéèêëàâçîïôûùÉÈÀÇ")


def web(out: Path, code: Path, num_shards: int) -> dict:
    """The `--web` measure (the module's docstring)."""
    import gzip

    corpus, data = out / "web", out / "data"
    corpus.mkdir(parents=True, exist_ok=True)
    documents = 0
    for language, packages in WEB.items():
        articles, _ = cjktext.fetch_articles(language, out / "deb-cache", packages=packages)
        lines, section = [], []
        for title, paragraphs in articles:
            for line in paragraphs + ["== end =="]:
                if line.startswith("== ") and section:
                    lines.append(json.dumps({"text": "\n".join(section), "url": f"debian/{language}/{title}"},
                                            ensure_ascii=False))
                    section = []
                elif not line.startswith("== "):
                    section.append(line)
        documents += len(lines)
        with gzip.open(corpus / f"{language}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(code))
    env.pop("LUIGI_CONFIG_PATH", None)
    r = subprocess.run([str(Path(sys.executable).with_name("luigi")), "--module", "workflows", "PretrainText128",
                        "--data-dir", str(data), "--text-dir", str(corpus), "--text-format", "jsonl",
                        "--do-lower-case", "false", "--num-shards", str(num_shards), "--local-scheduler",
                        "--workers", "2"], cwd=code, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_languages: error: PretrainText128 of the web corpus failed:\n{r.stderr[-3000:]}")
    folder = dataset_of(data / "web")
    total = json.loads((folder / "stats.json").read_text())["total"]
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return {"documents": documents, "sentence_documents": total["documents"], "tokens": total["tokens"],
            "unk": round(total["unk_tokens"] / total["tokens"], 6), "vocab_size": len(vocab),
            "vocab_with_capitals": sum(1 for w in vocab if not w.startswith("[") and any(c.isupper() for c in w)),
            "vocab_with_accents": sum(1 for w in vocab if ACCENTED & set(w))}


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="bench_languages")
    parser.add_argument("out", type=Path)
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose pipeline runs")
    parser.add_argument("--fixture", action="store_true", help="the tests' excerpt, not the whole manuals")
    parser.add_argument("--num-shards", type=int, default=4)
    parser.add_argument("--web", action="store_true", help="German and French as a cased JSONL.gz web corpus")
    parser.add_argument("--large", action="store_true", help="Japanese alone, from more manuals (cjktext.MORE_JA)")
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args(argv)
    if args.web:
        print(json.dumps({"languages": "de+fr", **web(args.out, args.code.resolve(), args.num_shards)}))
        return
    site, data = args.out / "site", args.out / "data"
    for language, (wiki, packages) in cjktext.LANGUAGES.items():
        if args.large and language != "ja":
            continue
        if args.fixture:
            articles = cjktext.read_articles(FIXTURES / f"{language}.txt")
        else:
            articles, _ = cjktext.fetch_articles(language, args.out / "deb-cache",
                                                 packages=packages + cjktext.MORE_JA if args.large else None)
        cjktext.write_articles_dump(site, articles, wiki)
        r = pretrain(site, data, wiki, args.code.resolve(), args.num_shards, args.seed)
        if r.returncode != 0:
            sys.exit(f"bench_languages: error: Pretrain128 of {wiki} failed:\n{r.stderr[-3000:]}")
        print(json.dumps({"language": language, "articles": len(articles), **measure(data, wiki)}))


if __name__ == "__main__":
    main(sys.argv[1:])
