"""What each ImageNet image is: synsets and their names, validation labels, bounding boxes.

Labels are 1 + the position of the wnid in the sorted 1000-synset list (0 is the unused
background class of build_imagenet_data.py), always taken from that list, never from which
folders happen to exist. Validation labels can come from any of the three files people have:

* TensorFlow's `imagenet_2012_validation_synset_labels.txt`: line i is the wnid of
  `ILSVRC2012_val_{i:08d}.JPEG`;
* Kaggle's `LOC_val_solution.csv`: `ImageId,PredictionString`, keyed by ImageId (row order means
  nothing), the wnid being the first token of the prediction string;
* the devkit's `ILSVRC2012_validation_ground_truth.txt` (line i is an ILSVRC2012_ID) with the
  `meta.mat` beside it, whose IDs are NOT the sorted-wnid order: ID 1 is n02119789 (kit fox).
  `meta.mat` is a MATLAB v5 file; the small reader below reads it without scipy.

All three become the same {image stem: wnid} map, so they give identical shards.
"""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

from shardkit.errors import PrepError

WNID_RE = re.compile(r"n\d{8}")
VAL_STEM = "ILSVRC2012_val_{:08d}"
DEVKIT_GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
DEVKIT_META = "meta.mat"
PACKAGE_DATA = Path(__file__).resolve().parent / "data"


# ---------------------------------------------------------------------------------------------
# Synsets and names

def _read_text(path: Path | None, packaged: str) -> tuple[str, str]:
    """(text, where) of `path`, or of the packaged copy when `path` is None."""
    if path is None:
        return (PACKAGE_DATA / packaged).read_text(encoding="utf-8"), packaged
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        raise PrepError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise PrepError(f"{path}: a folder, not a text file") from None
    except UnicodeDecodeError as e:
        bad = e.object[e.start:e.start + 1]
        raise PrepError(f"{path}: not a UTF-8 text file (byte {e.start} is {bad!r})") from None


def load_synsets(path: str | Path | None = None) -> list[str]:
    """The sorted wnid list (default: the 1000 ILSVRC-2012 synsets shipped with the package)."""
    text, where = _read_text(path, "ilsvrc2012_synsets.txt")
    synsets = [line.strip() for line in text.splitlines() if line.strip()]
    for i, wnid in enumerate(synsets, 1):
        if not WNID_RE.fullmatch(wnid):
            raise PrepError(f"{where}: line {i} is {wnid!r}, not a WordNet id like n01440764")
    if not synsets:
        raise PrepError(f"{where}: no synsets")
    if synsets != sorted(set(synsets)):
        raise PrepError(f"{where}: synsets must be sorted and unique (label = 1 + position in the sorted list)")
    return synsets


def load_names(synsets: list[str], path: str | Path | None = None) -> dict[str, str]:
    """wnid -> human-readable names (image/class/text) for every synset.

    Reads `wnid<TAB>names` lines: the shipped 1000-line file or TF's 21,842-line imagenet_metadata.txt.
    """
    text, where = _read_text(path, "ilsvrc2012_synset_names.tsv")
    names = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) != 2 or not WNID_RE.fullmatch(parts[0].strip()):
            raise PrepError(f"{where}: line {i} is not 'wnid<TAB>names'")
        names[parts[0].strip()] = parts[1].strip()
    for wnid in synsets:
        if wnid not in names:
            raise PrepError(f"{where}: no name for synset {wnid}")
    return {wnid: names[wnid] for wnid in synsets}


# ---------------------------------------------------------------------------------------------
# Validation labels

def read_validation_labels(path: str | Path, synsets: list[str]) -> tuple[dict[str, str], str]:
    """({image stem: wnid}, source kind) from a TF labels file, a Kaggle CSV or the devkit ground truth.

    `path` may also be the devkit folder (or its `data/` folder). The kind is detected from the content.
    """
    path = Path(path)
    if path.is_dir():
        for candidate in (path / DEVKIT_GROUND_TRUTH, path / "data" / DEVKIT_GROUND_TRUTH):
            if candidate.is_file():
                path = candidate
                break
        else:
            raise PrepError(f"{path}: a folder, but no {DEVKIT_GROUND_TRUTH} in it or in its data/")
    text, _ = _read_text(path, "")
    lines = [line.strip() for line in text.lstrip("\ufeff").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise PrepError(f"{path}: empty validation label file")
    known = set(synsets)
    first = lines[0]
    if first.replace(" ", "").lower().startswith("imageid,predictionstring"):
        labels, kind = _kaggle_labels(path, lines), "kaggle"
    elif WNID_RE.fullmatch(first):
        labels, kind = _positional_labels(path, lines, lambda s: s if WNID_RE.fullmatch(s) else None,
                                          "a wnid"), "tf"
    elif first.isdigit():
        wnid_by_id = devkit_wnid_by_id(path.parent / DEVKIT_META)
        labels, kind = _positional_labels(path, lines, lambda s: wnid_by_id.get(int(s)) if s.isdigit() else None,
                                          f"an ILSVRC2012_ID of {path.parent / DEVKIT_META}"), "devkit"
    else:
        raise PrepError(f"{path}: not a validation label file (expected wnids one per line, Kaggle's "
                        f"ImageId,PredictionString CSV, or the devkit's ILSVRC2012_IDs)")
    for stem, wnid in labels.items():
        if wnid not in known:
            raise PrepError(f"{path}: {stem} has synset {wnid}, which is not in the synset list")
    return labels, kind


def _positional_labels(path: Path, lines: list[str], to_wnid, expected: str) -> dict[str, str]:
    """Line i labels ILSVRC2012_val_{i:08d}."""
    out = {}
    for i, line in enumerate(lines, 1):
        wnid = to_wnid(line)
        if wnid is None:
            raise PrepError(f"{path}: line {i} is {line!r}, not {expected}")
        out[VAL_STEM.format(i)] = wnid
    return out


def _kaggle_labels(path: Path, lines: list[str]) -> dict[str, str]:
    out = {}
    for i, line in enumerate(lines[1:], 2):
        if not line:
            continue
        image_id, _, prediction = line.partition(",")
        image_id = image_id.strip()
        tokens = prediction.split()
        if not image_id or not tokens or not WNID_RE.fullmatch(tokens[0]):
            raise PrepError(f"{path}: line {i} is not 'ImageId,wnid xmin ymin xmax ymax ...'")
        if image_id.endswith(".JPEG"):
            image_id = image_id[:-5]
        if image_id in out:
            raise PrepError(f"{path}: line {i}: {image_id} is listed twice")
        out[image_id] = tokens[0]
    return out


def devkit_wnid_by_id(meta_path: str | Path) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid of the 1000 leaf synsets in the devkit's meta.mat.

    meta.mat also lists the 860 non-leaf synsets of the hierarchy; only those with no children
    are classes (as torchvision's parse_meta_mat does).
    """
    meta_path = Path(meta_path)
    if not meta_path.is_file():
        raise PrepError(f"{meta_path}: the devkit's meta.mat is needed beside {DEVKIT_GROUND_TRUTH} "
                        f"(ILSVRC2012_IDs are not the sorted-wnid order)")
    mat = read_mat(meta_path)
    entries = mat.get("synsets")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        raise PrepError(f"{meta_path}: no 'synsets' struct array (is this the ILSVRC2012 devkit's meta.mat?)")
    out: dict[int, str] = {}
    try:
        for e in entries:
            if _scalar(e["num_children"]) != 0:
                continue
            ident, wnid = int(_scalar(e["ILSVRC2012_ID"])), e["WNID"]
            if not isinstance(wnid, str) or not WNID_RE.fullmatch(wnid) or ident in out:
                raise PrepError(f"{meta_path}: bad or repeated synset entry (ID {ident}, WNID {wnid!r})")
            out[ident] = wnid
    except (KeyError, TypeError, ValueError) as e:
        raise PrepError(f"{meta_path}: synsets entries lack ILSVRC2012_ID/WNID/num_children ({e})") from None
    if sorted(out) != list(range(1, len(out) + 1)):
        raise PrepError(f"{meta_path}: leaf synset IDs are not 1..{len(out)}")
    return out


def _scalar(value):
    if hasattr(value, "size"):
        if value.size != 1:
            raise ValueError(f"expected one number, got {value.size}")
        return value.reshape(-1)[0].item()
    return value


# ---------------------------------------------------------------------------------------------
# A small MATLAB v5 (.mat) reader: numeric, char, struct and cell arrays, compressed or not.

_MI_NUMERIC = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
_MI_MATRIX, _MI_COMPRESSED, _MI_UTF8, _MI_UTF16, _MI_UTF32 = 14, 15, 16, 17, 18
_MX_CELL, _MX_STRUCT, _MX_CHAR = 1, 2, 4
_MX_NUMERIC = range(6, 16)


def read_mat(path: str | Path) -> dict:
    """{variable name: value} of a MATLAB 5 file: numbers as numpy arrays (shape as in MATLAB),
    char rows as str, struct arrays as lists of dicts, cells as lists (column-major order)."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 128 or not data.startswith(b"MATLAB 5.0 MAT-file"):
        what = "an HDF5-based v7.3 file" if data.startswith(b"MATLAB 7.3") else "not a MATLAB 5 file"
        raise PrepError(f"{path}: {what}; expected the devkit's MATLAB 5 meta.mat")
    endian = {b"IM": "<", b"MI": ">"}.get(data[126:128])
    if endian is None:
        raise PrepError(f"{path}: bad MAT-file endianness indicator")
    reader = _MatReader(endian)
    try:
        out = {}
        for mi, payload in reader.elements(data, 128):
            name, value = reader.variable(mi, payload)
            out[name] = value
        return out
    except (struct.error, zlib.error, ValueError, IndexError, UnicodeDecodeError) as e:
        raise PrepError(f"{path}: corrupt or unsupported MAT-file content ({e})") from None


class _MatReader:
    def __init__(self, endian: str):
        self.e = endian

    def elements(self, buf: bytes, pos: int = 0, end: int | None = None):
        """(type, payload) of each data element in buf[pos:end]."""
        end = len(buf) if end is None else end
        while pos + 8 <= end:
            mi, nbytes = struct.unpack_from(self.e + "II", buf, pos)
            if mi >> 16:  # small data element: type and size share the first word, data in the second
                mi, nbytes = mi & 0xFFFF, mi >> 16
                yield mi, buf[pos + 4:pos + 4 + nbytes]
                pos += 8
                continue
            payload = buf[pos + 8:pos + 8 + nbytes]
            if len(payload) < nbytes:
                raise ValueError("element runs past the end of the file")
            yield mi, payload
            pos += 8 + nbytes
            if mi != _MI_COMPRESSED:
                pos = (pos + 7) & ~7

    def variable(self, mi: int, payload: bytes) -> tuple[str, object]:
        if mi == _MI_COMPRESSED:
            mi, payload = next(self.elements(zlib.decompress(payload)))
        if mi != _MI_MATRIX:
            raise ValueError(f"top-level element of type {mi} is not a matrix")
        return self.matrix(payload)

    def numbers(self, mi: int, payload: bytes):
        import numpy as np

        if mi not in _MI_NUMERIC:
            raise ValueError(f"element type {mi} is not numeric")
        return np.frombuffer(payload, dtype=self.e + _MI_NUMERIC[mi])

    def matrix(self, payload: bytes) -> tuple[str, object]:
        import numpy as np

        if not payload:
            return "", None  # an empty field value
        subs = list(self.elements(payload))
        flags = int(self.numbers(*subs[0])[0])
        cls = flags & 0xFF
        dims = [int(d) for d in self.numbers(*subs[1])]
        name = subs[2][1].decode("latin-1")
        count = int(np.prod(dims)) if dims else 0
        if cls in _MX_NUMERIC:
            values = self.numbers(*subs[3]) if count else np.zeros(0)
            return name, values.reshape(dims, order="F")
        if cls == _MX_CHAR:
            mi, raw = subs[3] if len(subs) > 3 else (_MI_UTF8, b"")
            enc = {_MI_UTF8: "utf-8", _MI_UTF16: self._utf16(), _MI_UTF32: self._utf32(), 4: self._utf16(),
                   1: "latin-1", 2: "latin-1"}.get(mi)
            if enc is None:
                raise ValueError(f"char data of element type {mi}")
            text = raw.decode(enc)
            rows = dims[0] if dims else 0
            if rows <= 1:
                return name, text
            cols = len(text) // rows
            return name, ["".join(text[c * rows + r] for c in range(cols)) for r in range(rows)]
        if cls == _MX_STRUCT:
            field_len = int(self.numbers(*subs[3])[0])
            raw = subs[4][1]
            fields = [raw[i:i + field_len].split(b"\0", 1)[0].decode("latin-1")
                      for i in range(0, len(raw), field_len)]
            values = [self.matrix(p)[1] for _, p in subs[5:]]
            return name, [dict(zip(fields, values[i * len(fields):(i + 1) * len(fields)])) for i in range(count)]
        if cls == _MX_CELL:
            return name, [self.matrix(p)[1] for _, p in subs[3:]]
        raise ValueError(f"MATLAB class {cls} not supported")

    def _utf16(self):
        return "utf-16-le" if self.e == "<" else "utf-16-be"

    def _utf32(self):
        return "utf-32-le" if self.e == "<" else "utf-32-be"


# ---------------------------------------------------------------------------------------------
# Bounding boxes from the PASCAL-VOC XML of ILSVRC2012_bbox_train_v2 (or Kaggle's Annotations/)

def bbox_xml_path(bbox_dir: str | Path, wnid: str, image_name: str) -> Path:
    """`<bbox_dir>/<wnid>/<image stem>.xml`, the layout process_bounding_boxes.py reads."""
    return Path(bbox_dir) / wnid / (image_name.rsplit(".", 1)[0] + ".xml")


def read_bbox_xml(path: str | Path, wnid: str, challenge_synsets: set[str]) -> list[tuple[float, float, float, float]]:
    """The boxes of one annotation file as process_bounding_boxes.py + `sort` leave them in its CSV.

    Each box is (xmin, ymin, xmax, ymax) relative to the annotated <width>/<height> (pixel values
    truncated with int(float(.)) first), min/max swapped when reversed, clamped to [0, 1],
    degenerate boxes dropped, rounded to the CSV's 4 decimals, sorted. As upstream, boxes are
    skipped when the file's (first) <name> is a different challenge wnid; non-wnid names such as
    'Scottish_deerhound' are kept. Raises ValueError for an unreadable file.
    """
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()

    def first(tag: str) -> str | None:
        for el in root.iter(tag):
            return el.text
        return None

    def ints(tag: str) -> list[int]:
        return [int(float(el.text)) for el in root.iter(tag)]

    label = (first("name") or "").strip()
    if label != wnid and label in challenge_synsets:
        return []
    width, height = int(float(first("width") or 0)), int(float(first("height") or 0))
    if width <= 0 or height <= 0:
        raise ValueError(f"annotation size {width}x{height}")
    xmins, ymins, xmaxs, ymaxs = ints("xmin"), ints("ymin"), ints("xmax"), ints("ymax")
    if not len(xmins) == len(ymins) == len(xmaxs) == len(ymaxs):
        raise ValueError("unequal numbers of xmin/ymin/xmax/ymax")
    boxes = []
    for x0, y0, x1, y1 in zip(xmins, ymins, xmaxs, ymaxs):
        fx0, fx1, fy0, fy1 = x0 / width, x1 / width, y0 / height, y1 / height
        xmin, xmax = (min(max(v, 0.0), 1.0) for v in (min(fx0, fx1), max(fx0, fx1)))
        ymin, ymax = (min(max(v, 0.0), 1.0) for v in (min(fy0, fy1), max(fy0, fy1)))
        if xmin >= xmax or ymin >= ymax:
            continue
        boxes.append(tuple("%.4f" % v for v in (xmin, ymin, xmax, ymax)))
    return [tuple(float(v) for v in box) for box in sorted(boxes)]
