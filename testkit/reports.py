"""A task's report set beside the one `wikiprep stats` writes for the same dataset.

The two are the same bytes but for one line: the Pretrain task takes its shards' sha256 from their
writers' receipts rather than reading the dataset again, and its report says so (`"verified": false`
and `status_words`' "matches: ..." line), where the command hashes every file ("verified: ...").
"""

from __future__ import annotations

import html
from pathlib import Path

from shardkit.manifest import status_words


def as_hashed(report_dir: Path) -> dict[str, bytes]:
    """The files of a task's `report/`, by name, with that one line as `wikiprep stats` writes it."""
    import json

    files = {p.name: p.read_bytes() for p in Path(report_dir).iterdir()}
    status = json.loads(files["stats.json"])["manifest"]
    assert status["ok"] is True and status["verified"] is False, status  # the task hashed nothing again
    said, hashed = status_words(status), status_words({**status, "verified": True})
    files["stats.json"] = files["stats.json"].replace(b'"verified": false', b'"verified": true')
    files["report.txt"] = files["report.txt"].replace(said.encode(), hashed.encode())
    files["report.html"] = files["report.html"].replace(html.escape(said).encode(), html.escape(hashed).encode())
    return files
