"""shardkit: the core both data libraries build on: committed, verified record shards.

Modules (plain functions and small classes, no Luigi, no TensorFlow at import):
  errors    PrepError, the one exception users see: one line, what is wrong and where
  atomic    temporary + fsync + no-clobber rename commits, receipts, dead writers' temporaries removed
  records   TFRecord framing and CRCs, RecordWriter, index files, finding record files
  example   tf.train.Example bytes: deterministic encoder, TensorFlow-free decoder
  schema    Feature / Schema: one declarative table per record type; encoder, tf spec and checks derive from it
  manifest  MANIFEST.json: every file with its sha256, size and record count
  pool      worker processes: spawned for checks in item order, or a forked child per item for writers
  fetch     the resumable, verified downloader (Range resume, back-off, the fetch lock, size and hashes, commit)
  progress  the progress(done, total) callback, the terminal bar, each stage's closing log line
  report    the self-contained HTML page of a dataset's report; plots, its figures
  signals   SIGTERM as an exception, so that open atomic writes remove their temporaries
  tf        the quiet TensorFlow import for readers that parse with TensorFlow
  cli       the command-line runner: argparse, one call, `PROG: error: ...` lines

`wikiprep` and `imagenet_prep` import this package and never each other.
"""
