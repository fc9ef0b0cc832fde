"""The ImageNet record: the one table its encoder, parse spec, checks and readers derive from.

The 15 features of TensorFlow's `build_imagenet_data.py` (`_convert_to_example`), which
TF-official, TPU and Graphcore's CNN input pipelines parse. Scalars are one value; the
bounding-box lists hold one value per box (none for most training images).
"""

from shardkit.example import BYTES, FLOAT, INT64, bytes_entry_head, example_head, feature_entry
from shardkit.schema import Feature, Schema

IMAGENET_IMAGE = Schema("ImageNet", [
    Feature("image/encoded", BYTES, (), "the JPEG bytes (RGB, baseline or progressive)"),
    Feature("image/format", BYTES, (), "always b'JPEG'"),
    Feature("image/filename", BYTES, (), "the file's name, e.g. n01440764_10026.JPEG"),
    Feature("image/height", INT64, (), "pixels, from the JPEG header"),
    Feature("image/width", INT64, (), "pixels, from the JPEG header"),
    Feature("image/colorspace", BYTES, (), "always b'RGB'"),
    Feature("image/channels", INT64, (), "always 3"),
    Feature("image/class/label", INT64, (), "1..1000: position in the sorted synset list (0 is unused)"),
    Feature("image/class/synset", BYTES, (), "the WordNet id, e.g. b'n01440764'"),
    Feature("image/class/text", BYTES, (), "the synset's human-readable names"),
    Feature("image/object/bbox/xmin", FLOAT, None, "box left edges, fractions of the width"),
    Feature("image/object/bbox/xmax", FLOAT, None, "box right edges, fractions of the width"),
    Feature("image/object/bbox/ymin", FLOAT, None, "box top edges, fractions of the height"),
    Feature("image/object/bbox/ymax", FLOAT, None, "box bottom edges, fractions of the height"),
    Feature("image/object/bbox/label", INT64, None, "each box's label: image/class/label repeated"),
])


class RecordEncoder:
    """`IMAGENET_IMAGE.encode` of one image's record, as the bytes before and after its JPEG bytes.

    The record is `head + data + tail`: the image (~110 KB, nearly all of a record) is written as it
    was read, never copied into a record, and the lengths that precede it are computed from its size
    (`bytes_entry_head`). The other entries are the schema's own (`feature_entry`, by its kinds, in
    the name order `encode_example` sorts them in), in two runs: those before the image (for ImageNet
    the label's and the constants), and those after its file name (the size, empty box lists). Each
    run is made once per distinct values it holds, so a record costs a few dictionary lookups; the
    file name, different for every image, is encoded each time.
    """

    ENCODED, FILENAME = "image/encoded", "image/filename"

    def __init__(self, synsets: list[str], names: list[str]):
        self.synsets, self.names = synsets, names
        order = sorted(IMAGENET_IMAGE.names, key=str.encode)
        at = order.index(self.ENCODED)
        if order[at + 1] != self.FILENAME:  # the tail is the name's entry + one run
            raise AssertionError(f"{self.FILENAME} no longer follows {self.ENCODED} in the record")
        self._kind = {f.name: f.kind for f in IMAGENET_IMAGE.features}
        self._runs = ((order[:at], {}), (order[at + 2:], {}))  # (names, {their values: their entries})

    def values(self, height: int, width: int, label: int, filename: str, boxes) -> dict[str, tuple]:
        """Every feature's values but image/encoded: build_imagenet_data.py's _convert_to_example."""
        xmin, ymin, xmax, ymax = zip(*boxes) if boxes else ((), (), (), ())
        return {
            "image/height": (height,),
            "image/width": (width,),
            "image/colorspace": (b"RGB",),
            "image/channels": (3,),
            "image/class/label": (label,),
            "image/class/synset": (self.synsets[label - 1].encode(),),
            "image/class/text": (self.names[label - 1].encode("utf-8"),),
            "image/object/bbox/xmin": xmin,
            "image/object/bbox/xmax": xmax,
            "image/object/bbox/ymin": ymin,
            "image/object/bbox/ymax": ymax,
            "image/object/bbox/label": (label,) * len(boxes),
            "image/format": (b"JPEG",),
            "image/filename": (filename.encode("utf-8"),),
        }

    def around(self, size: int, height: int, width: int, label: int, filename: str, boxes=()) -> tuple[bytes, bytes]:
        """(head, tail) of the record of an image of `size` JPEG bytes: head + data + tail == IMAGENET_IMAGE.encode."""
        values = self.values(height, width, label, filename, boxes)
        before, rest = [self._run(names, cache, values) for names, cache in self._runs]
        after = feature_entry(self.FILENAME, BYTES, values[self.FILENAME]) + rest
        data_head = bytes_entry_head(self.ENCODED, size)
        return example_head(len(before) + len(data_head) + size + len(after)) + before + data_head, after

    def _run(self, names: list[str], cache: dict, values: dict) -> bytes:
        key = tuple([values[name] for name in names])
        run = cache.get(key)
        if run is None:
            run = b"".join([feature_entry(name, self._kind[name], v) for name, v in zip(names, key)])
            if len(cache) < 100_000:  # box coordinates take many values: a bound, not a leak
                cache[key] = run
        return run
