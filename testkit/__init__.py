"""testkit: code the tests and benchmarks use, outside the data path.

Nothing under wikiprep/, imagenet_prep/, shardkit/ or workflows/ imports it.
  instances       every instance of a run as plain feature dicts, in memory (the writer's bytes, readable)
  reference_bert  a plain port of google-research/bert's create_pretraining_data.py: the independent oracle
  synthetic_dump  a Wikipedia dump of any size in the dumps-site layout, for benchmarks and slicing tests
  lddl/           NVIDIA LDDL's torch loader, unmodified (its README says which commit): reads the Parquet layout
"""
