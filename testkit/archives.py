"""Tar archives built in memory, for tests of the ImageNet archive readers (never the data path)."""

from __future__ import annotations

import io
import tarfile


def tar_bytes(members: dict[str, bytes]) -> bytes:
    """An uncompressed tar holding `members` (name -> bytes) as regular files, in the given order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
