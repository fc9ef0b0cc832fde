"""Figures for reports and loss curves: one style, matplotlib's object API on an Agg canvas.

No pyplot global state and no display needed; matplotlib is imported only when a figure is
made, so the data libraries load without it. PNGs carry no software/version stamp, so the
same figure gives the same bytes.
"""

from __future__ import annotations

import io
import os

from .atomic import write_bytes


def figure(width: float, height: float, dpi: int = 100):
    """A new matplotlib Figure on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def write_png(fig, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Commit `fig` as a PNG at `path` (atomically; `overwrite` as in `shardkit.atomic`)."""
    write_bytes(path, png_bytes(fig), overwrite=overwrite)
