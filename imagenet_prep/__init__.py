"""imagenet_prep: ImageNet (ILSVRC-2012) to the sharded TFRecords of TensorFlow's build_imagenet_data.py.

Modules (plain library code, no Luigi):
  convert  make_plan / write_plan / read_plan / write_shard / finalize, and convert_dataset (all in one)
  labels   the 1000 synsets and names (package data), validation label files, devkit meta.mat, bbox XML
  images   JPEG header facts without decoding; CMYK/PNG/other images re-encoded as RGB JPEG
  samples  a small ImageNet-shaped tree drawn by code, with ImageNet's quirks
  cli      the `imagenet-prep` command: convert, verify, stats
"""
