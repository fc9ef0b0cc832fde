"""`python -m workflows summary DIR`: where the demo's outputs are and the trainers' first and last losses."""

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "summary":
        print("usage: python -m workflows summary DEMO_DIR", file=sys.stderr)
        return 2
    path = Path(argv[1]) / "summary.json"
    try:
        s = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"workflows: error: {path}: no demo summary (did the demo finish?)", file=sys.stderr)
        return 1
    print("Demo outputs:")
    print(f"  BERT pre-training TFRecords (seq 128): {s['bert_dataset']}")
    print(f"  ImageNet TFRecord shards:              {s['imagenet_dataset']}")
    for name in ("train_bert", "train_imagenet"):
        t = s[name]
        print(f"  {name}: {t['out_dir']}/metrics.csv, loss.png  "
              f"(loss {t['first_loss']:.3f} at the start -> {t['last_loss']:.3f} after {t['steps']} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
