"""The image bytes of an ImageNet record: JPEG facts read from the header, and the few images re-encoded.

build_imagenet_data.py decodes every image with TensorFlow only to learn its height and width
and to assert three channels; that full decode is most of its run time. Here the size comes from
the JPEG start-of-frame (SOF) segment, which is exactly what libjpeg (and so `tf.io.decode_jpeg`)
will produce, and the original bytes are copied untouched.

What cannot be copied is found by content rather than by the reference's list of 23 file names:
a JPEG with four components (CMYK/YCCK, which decoders either refuse or decode with wrong
colours), an image that is not a JPEG at all (ImageNet's one PNG, or any RGBA/palette/GIF...), or a
JPEG variant libjpeg's 8-bit build cannot read. Those go through PIL and are saved as an RGB JPEG
at quality 100, the quality the reference's `ImageCoder` uses for the same conversions.

Anything that cannot be read -- empty, truncated, not an image, an absurd declared size -- raises
`ImageRejected` with a short reason that ends up in MANIFEST.json.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

JPEG_QUALITY = 100
# PIL's own decompression-bomb threshold (about 9459 x 9459). The largest ILSVRC-2012 image is far
# below it; a declared size above it is a broken or hostile file, and a trainer would try to decode it.
MAX_PIXELS = 89_478_485

_SOI = b"\xff\xd8"
_EOI = b"\xff\xd9"
# Start-of-frame markers (C4 DHT, C8 JPG and CC DAC are not frames).
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
# Huffman baseline / extended / progressive, 8-bit: what every JPEG decoder of a trainer reads.
_COPYABLE_SOF = frozenset({0xC0, 0xC1, 0xC2})
_SOS = 0xDA
_APP14 = 0xEE
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


class ImageRejected(Exception):
    """The file cannot become a record; str(e) is the reason, one short line."""


@dataclass(frozen=True)
class JpegHeader:
    width: int
    height: int
    components: int
    precision: int
    sof: int  # the start-of-frame marker byte, 0xC0 baseline, 0xC2 progressive, ...
    adobe_transform: int | None  # APP14 "Adobe" colour transform: 0 none/CMYK, 1 YCbCr, 2 YCCK


@dataclass(frozen=True)
class PreparedImage:
    data: bytes  # JPEG bytes for image/encoded
    height: int
    width: int
    converted: str | None = None  # why it was re-encoded (e.g. "CMYK JPEG"), None when copied untouched


def read_jpeg_header(data: bytes) -> JpegHeader:
    """Walk the JPEG segments up to the first scan; check an end-of-image marker follows the scan data.

    Raises ImageRejected for a file that is not a JPEG, is cut short or has no frame header.
    Entropy-coded data cannot contain FF D9 (a literal FF is always followed by 00 or a restart
    marker), so finding FF D9 after the first scan header means the file was not cut short.
    """
    n = len(data)
    if n < 4 or not data.startswith(_SOI):
        raise ImageRejected("not a JPEG (no start-of-image marker)")
    pos = 2
    frame: tuple[int, int, int, int, int] | None = None
    adobe: int | None = None
    while True:
        # libjpeg skips stray bytes before a marker (with a warning), so do the same.
        nxt = data.find(b"\xff", pos)
        if nxt < 0:
            raise ImageRejected("truncated JPEG (ends inside the header)")
        pos = nxt
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            raise ImageRejected("truncated JPEG (ends inside the header)")
        marker = data[pos]
        pos += 1
        if marker == 0x00 or marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # stuffed byte, TEM, restart: no length field
        if marker == 0xD8 or marker == 0xD9:
            raise ImageRejected("corrupt JPEG (image marker before the first scan)")
        if pos + 2 > n:
            raise ImageRejected("truncated JPEG (ends inside the header)")
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2:
            raise ImageRejected(f"corrupt JPEG (segment FF{marker:02X} has length {length})")
        end = pos + length
        if end > n:
            raise ImageRejected("truncated JPEG (ends inside the header)")
        if marker in _SOF_MARKERS:
            if length < 8:
                raise ImageRejected("corrupt JPEG (short frame header)")
            frame = (marker, data[pos + 2], (data[pos + 3] << 8) | data[pos + 4],
                     (data[pos + 5] << 8) | data[pos + 6], data[pos + 7])
        elif marker == _APP14 and length >= 14 and data[pos + 2:pos + 7] == b"Adobe":
            adobe = data[pos + 13]
        elif marker == _SOS:
            if frame is None:
                raise ImageRejected("corrupt JPEG (scan before any frame header)")
            if data.rfind(_EOI, end) < 0:  # from the end: a whole file's EOI is in its last bytes
                raise ImageRejected("truncated JPEG (no end-of-image marker)")
            sof, precision, height, width, components = frame
            return JpegHeader(width=width, height=height, components=components, precision=precision,
                              sof=sof, adobe_transform=adobe)
        pos = end


def sniff_format(data: bytes) -> str:
    """"JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP", or "unknown" from the first bytes."""
    if data.startswith(_SOI):
        return "JPEG"
    for sig, name in _SIGNATURES:
        if data.startswith(sig):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return "unknown"


def _check_size(width: int, height: int, max_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise ImageRejected(f"declared size {width}x{height} is empty")
    if width * height > max_pixels:
        raise ImageRejected(f"declared size {width}x{height} exceeds {max_pixels} pixels (decompression bomb)")


# High-bit-depth greyscale is scaled to 8 bits a tile of at most this many pixels at a time, so that the numpy
# arrays of the scaling stay a few MB whatever the image's size (whole, a 16-bit PNG under MAX_PIXELS took 1.8 GB).
_TILE_PIXELS = 1 << 20


def _to_rgb(img):
    """`img` as RGB. A high-bit-depth greyscale one is scaled to 8 bits tile by tile (`_TILE_PIXELS`) and then
    closed, its memory released before the RGB copy is made: at most about 5 bytes a pixel at once (its own 2 or 4,
    the 8-bit greyscale's 1; then that 1 and RGB's 3), 450 MB at MAX_PIXELS."""
    from PIL import Image

    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("I", "F") or mode.startswith("I;16"):
        # High-bit-depth greyscale: PIL's convert() would clip at 255; scale to 8 bits as decode_png does.
        import numpy as np

        top = 255 if mode == "F" else 65535
        width, height = img.size
        rows, cols = max(1, _TILE_PIXELS // width), min(width, _TILE_PIXELS)
        grey = Image.new("L", img.size)
        for y in range(0, height, rows):
            for x in range(0, width, cols):
                box = (x, y, min(x + cols, width), min(y + rows, height))
                arr = np.clip(np.asarray(img.crop(box)).astype(np.float64 if mode == "F" else np.int64), 0, top)
                grey.paste(Image.fromarray((arr if mode == "F" else arr >> 8).astype(np.uint8), "L"), box[:2])
        img.close()
        return grey.convert("RGB")
    return img.convert("RGB")  # L, 1, P, PA, LA, RGBA, CMYK (PIL undoes Adobe inversion), YCbCr...


def reencode_as_jpeg(data: bytes, what: str, max_pixels: int = MAX_PIXELS, show_mode: bool = False) -> PreparedImage:
    """Decode any image PIL reads and save it as an RGB JPEG at quality 100 (deterministic bytes).

    `what` names the input for messages; with show_mode its PIL mode (RGBA, P...) is added."""
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bomb warnings (checked below), palette-transparency notes
        try:
            img = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as e:
            raise ImageRejected(f"declared size exceeds PIL's limit (decompression bomb): {e}") from None
        except UnidentifiedImageError:
            raise ImageRejected("not an image (no decoder recognises the content)") from None
        except (OSError, SyntaxError, ValueError) as e:
            raise ImageRejected(f"unreadable {what}: {_one_line(e)}") from None
        width, height = img.size
        _check_size(width, height, max_pixels)
        try:
            img.load()
            rgb = _to_rgb(img)
        except (OSError, SyntaxError, ValueError, EOFError) as e:
            raise ImageRejected(f"undecodable {what}: {_one_line(e)}") from None
    out = io.BytesIO()
    rgb.save(out, "JPEG", quality=JPEG_QUALITY)
    if show_mode:
        what = f"{what} ({img.mode})"
    return PreparedImage(out.getvalue(), height=rgb.height, width=rgb.width, converted=what)


def verify_decodes(data: bytes) -> None:
    """Fully decode a JPEG with PIL (slow; only for the optional full check)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with Image.open(io.BytesIO(data)) as img:
                img.load()
        except Exception as e:  # noqa: BLE001 - any decoder failure means the same thing here
            raise ImageRejected(f"undecodable JPEG: {_one_line(e)}") from None


def prepare_image(data: bytes, max_pixels: int = MAX_PIXELS, verify_decode: bool = False) -> PreparedImage:
    """The bytes, height and width to store for one input file, or ImageRejected with the reason.

    An 8-bit baseline/progressive JPEG with 1 or 3 components is copied byte for byte (greyscale
    too: every reader decodes with channels=3, as the reference keeps them). Everything else that
    PIL can decode is re-encoded as an RGB JPEG.
    """
    if not data:
        raise ImageRejected("empty file")
    fmt = sniff_format(data)
    if fmt != "JPEG":
        if fmt == "unknown":
            # Still let PIL try (WebP, TGA...), but never as "JPEG".
            return reencode_as_jpeg(data, "non-JPEG image", max_pixels, show_mode=True)
        return reencode_as_jpeg(data, f"{fmt} image", max_pixels, show_mode=True)
    head = read_jpeg_header(data)
    _check_size(head.width, head.height, max_pixels)
    if head.components == 4:
        what = "YCCK JPEG" if head.adobe_transform == 2 else "CMYK JPEG"
        return reencode_as_jpeg(data, what, max_pixels)
    if head.sof not in _COPYABLE_SOF or head.precision != 8 or head.components not in (1, 3):
        return reencode_as_jpeg(data, f"JPEG variant SOF{head.sof - 0xC0}/{head.precision}-bit/"
                                      f"{head.components} components", max_pixels)
    if verify_decode:
        verify_decodes(data)
    return PreparedImage(data, height=head.height, width=head.width)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:200]
