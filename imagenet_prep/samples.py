"""A small ImageNet-shaped tree drawn by code, for the demo, the tests and the benchmark.

    train/<wnid>/<wnid>_<n>.JPEG
    validation/ILSVRC2012_val_%08d.JPEG          (flat, numbered 1..K)
    validation_labels.txt                         (TF's imagenet_2012_validation_synset_labels.txt form)

Each class is a coloured shape (its own shape and colour, random position, size and jitter) on
a noisy background, so a tiny CNN can learn the classes. The classes are real ILSVRC-2012 synsets
(by default the ten of Imagenette), so each sample class gets its real 1..1000 label.

The tree has ImageNet's quirks, under .JPEG names as in the real data: a CMYK JPEG, an RGB PNG
(like n02105855_2933.JPEG), an RGBA PNG, a palette PNG, a greyscale JPEG and a progressive JPEG.
Same arguments, same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

from .labels import VAL_STEM, load_synsets

# Imagenette's ten classes: tench, English springer, cassette player, chain saw, church,
# French horn, garbage truck, gas pump, golf ball, parachute.
IMAGENETTE = ("n01440764", "n02102040", "n02979186", "n03000684", "n03028079",
              "n03394916", "n03417042", "n03425413", "n03445777", "n03888605")
VAL_LABELS_NAME = "validation_labels.txt"
_COLOURS = ((220, 40, 40), (40, 170, 60), (40, 80, 220), (230, 200, 30), (200, 60, 200),
            (30, 200, 200), (240, 130, 20), (120, 70, 30), (250, 250, 250), (20, 20, 20))
_SHAPES = ("ellipse", "square", "triangle", "hstripes", "vstripes", "cross", "ring", "diamond", "checker",
           "dstripes")
# Which train image of which class carries a quirk: class index -> kind (image 0 of that class).
_QUIRKS = {0: "cmyk", 1: "png", 2: "rgba", 3: "palette", 4: "grey", 5: "progressive"}


def sample_wnids(classes: int) -> list[str]:
    """Imagenette's wnids, then evenly spaced others from the 1000 synsets; returned sorted."""
    chosen = list(IMAGENETTE[:classes])
    synsets = load_synsets()
    if classes > len(synsets):
        raise ValueError(f"classes={classes}: there are only {len(synsets)} synsets")
    step = len(synsets) / classes
    k = 0
    while len(chosen) < classes:
        w = synsets[int(k * step) % len(synsets)]
        if w not in chosen:
            chosen.append(w)
        k += 1
    return sorted(chosen)


def draw_image(rng, class_index: int, size: tuple[int, int], noise: float = 25.0):
    """An RGB PIL image of class `class_index`: its shape in its colour on a noisy background."""
    import numpy as np
    from PIL import Image, ImageDraw

    w, h = size
    base = rng.integers(60, 190)
    bg = rng.normal(base, noise, size=(h, w, 3)) + rng.normal(0, 12, size=(1, 1, 3))
    img = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    colour = tuple(int(np.clip(c + rng.integers(-25, 26), 0, 255)) for c in _COLOURS[class_index % len(_COLOURS)])
    shape = _SHAPES[(class_index // len(_COLOURS) + class_index) % len(_SHAPES)]
    s = int(min(w, h) * rng.uniform(0.45, 0.8))
    x0, y0 = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
    x1, y1 = x0 + s, y0 + s
    t = max(2, s // 8)
    if shape == "ellipse":
        d.ellipse((x0, y0, x1, y1), fill=colour)
    elif shape == "square":
        d.rectangle((x0, y0, x1, y1), fill=colour)
    elif shape == "triangle":
        d.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=colour)
    elif shape == "hstripes":
        for y in range(y0, y1, 2 * t):
            d.rectangle((x0, y, x1, min(y + t, y1)), fill=colour)
    elif shape == "vstripes":
        for x in range(x0, x1, 2 * t):
            d.rectangle((x, y0, min(x + t, x1), y1), fill=colour)
    elif shape == "cross":
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        d.rectangle((x0, cy - t, x1, cy + t), fill=colour)
        d.rectangle((cx - t, y0, cx + t, y1), fill=colour)
    elif shape == "ring":
        d.ellipse((x0, y0, x1, y1), outline=colour, width=t)
    elif shape == "diamond":
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        d.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=colour)
    elif shape == "checker":
        for i, y in enumerate(range(y0, y1, t)):
            for j, x in enumerate(range(x0, x1, t)):
                if (i + j) % 2 == 0:
                    d.rectangle((x, y, min(x + t, x1), min(y + t, y1)), fill=colour)
    else:  # dstripes
        for k in range(-s, s, 2 * t):
            d.line((x0 + k, y0, x0 + k + s, y1), fill=colour, width=t)
    return img


def encode(img, kind: str = "jpeg", quality: int = 90) -> bytes:
    """Bytes of `img` as a plain JPEG or as one of the quirks (cmyk, png, rgba, palette, grey, progressive)."""
    out = io.BytesIO()
    if kind == "jpeg":
        img.save(out, "JPEG", quality=quality)
    elif kind == "cmyk":
        img.convert("CMYK").save(out, "JPEG", quality=quality)
    elif kind == "png":
        img.save(out, "PNG")
    elif kind == "rgba":
        rgba = img.convert("RGBA")
        rgba.putalpha(200)
        rgba.save(out, "PNG")
    elif kind == "palette":
        img.convert("P", palette=1, colors=64).save(out, "PNG")  # 1 = Image.Palette.ADAPTIVE
    elif kind == "grey":
        img.convert("L").save(out, "JPEG", quality=quality)
    elif kind == "progressive":
        img.save(out, "JPEG", quality=quality, progressive=True)
    else:
        raise ValueError(f"unknown image kind {kind!r}")
    return out.getvalue()


def write_sample_tree(root, classes: int = 10, per_class: int = 20, val_per_class: int = 5, seed: int = 0,
                      *, image_size: tuple[int, int] | None = None, wnids: list[str] | None = None,
                      quirks: bool = True, noise: float = 25.0, quality: int = 90) -> dict:
    """Write the tree under `root`; returns dict(train_dir, validation_dir, val_labels) as strings.

    image_size: (width, height) of every image; None draws sizes between 48 and 112 pixels.
    wnids: the classes (default: sample_wnids(classes)). quirks: include the odd images.
    """
    import numpy as np

    root = Path(root)
    wnids = sorted(wnids) if wnids is not None else sample_wnids(classes)
    rng = np.random.default_rng(seed)
    train, val = root / "train", root / "validation"

    def size():
        if image_size is not None:
            return image_size
        return int(rng.integers(56, 113)), int(rng.integers(48, 97))

    for c, wnid in enumerate(wnids):
        folder = train / wnid
        folder.mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            kind = _QUIRKS.get(c, "jpeg") if (quirks and n == 0) else "jpeg"
            img = draw_image(rng, c, size(), noise)
            (folder / f"{wnid}_{n}.JPEG").write_bytes(encode(img, kind, quality))
    val.mkdir(parents=True, exist_ok=True)
    val_classes = [c for c in range(len(wnids)) for _ in range(val_per_class)]
    rng.shuffle(val_classes)
    lines = []
    for i, c in enumerate(val_classes, 1):
        img = draw_image(rng, c, size(), noise)
        (val / (VAL_STEM.format(i) + ".JPEG")).write_bytes(encode(img, "jpeg", quality))
        lines.append(wnids[c] + "\n")
    labels_path = root / VAL_LABELS_NAME
    labels_path.write_text("".join(lines), encoding="utf-8")
    return {"train_dir": str(train), "validation_dir": str(val), "val_labels": str(labels_path)}
