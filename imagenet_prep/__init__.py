"""imagenet_prep: ImageNet (ILSVRC-2012) to the sharded TFRecords of TensorFlow's build_imagenet_data.py.

Modules (plain library code, no Luigi):
  convert  make_plan / write_plan / read_plan / write_shard / finalize, and convert_dataset (all in one)
  labels   the 1000 synsets and names (package data), validation label files, devkit meta.mat, bbox XML
  images   JPEG header facts without decoding; CMYK/PNG/other images re-encoded as RGB JPEG
  schema   IMAGENET_IMAGE: the 15 features of a record, the table encoder, parse spec and checks derive from;
           RecordEncoder: a record's bytes around its image's, so that the image is never copied into it
  reader   a shard folder read back: its shards found, their records parsed with TensorFlow
  verify   verify: every check of a finished shard folder, stopping at the first problem
  stats    stats: counts, per-class histogram and image sizes -> stats.json, report.txt, PNG charts
  samples  a small ImageNet-shaped tree drawn by code, with ImageNet's quirks
  cli      the `imagenet-prep` command: argparse, one library call per command
"""
