"""Report pages rendered as a user sees them: headless Chromium, one PNG per page (`make report-screenshots`).

    python -m testkit.screenshots OUT_DIR REPORT.html [REPORT.html ...]

Each page is rendered in a window 1280 pixels wide and tall enough for the whole page (Chromium's
--screenshot takes the window, not the page), then the empty bottom of the window is cut off. The PNG
is named after the dataset folder the report belongs to (the demo's `.../seq128_mask20_dup5_shards4/report/report.html`
-> `seq128_mask20_dup5_shards4.png`). Chromium runs without its sandbox: as root (a container, CI) it
refuses to start otherwise, and the pages are our own files, with no script.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, TALL = 1280, 24000  # the window; pages are cut to their content


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("report-screenshots: no chromium on PATH (Debian: apt-get install -y chromium)")


def shot_name(report: Path) -> str:
    report = report.resolve()
    owner = report.parent.parent if report.parent.name == "report" else report.parent
    return f"{owner.name}.png"


def render(report: Path, out: Path, browser: str) -> tuple[int, int]:
    """Render `report` to `out`, cut below its content; returns the PNG's size."""
    from PIL import Image, ImageChops

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={tmp}/profile", f"--screenshot={raw}", f"--window-size={WIDTH},{TALL}",
                        report.resolve().as_uri()], check=True, capture_output=True, timeout=300)
        with Image.open(raw) as img:
            img = img.convert("RGB")
            box = ImageChops.difference(img, Image.new("RGB", img.size, (255, 255, 255))).getbbox()
            bottom = min(img.size[1], (box[3] if box else 1) + 24)
            img.crop((0, 0, img.size[0], bottom)).save(out, optimize=True)
            return img.size[0], bottom


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    browser = chromium()
    for report in map(Path, argv[1:]):
        out = out_dir / shot_name(report)
        width, height = render(report, out, browser)
        print(f"{report} -> {out} ({width}x{height})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
