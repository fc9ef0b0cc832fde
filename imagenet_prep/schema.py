"""The ImageNet record: the one table its encoder, parse spec, checks and readers derive from.

The 15 features of TensorFlow's `build_imagenet_data.py` (`_convert_to_example`), which
TF-official, TPU and Graphcore's CNN input pipelines parse. Scalars are one value; the
bounding-box lists hold one value per box (none for most training images).
"""

from shardkit.example import BYTES, FLOAT, INT64
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
