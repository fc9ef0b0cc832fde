"""wikiprep: Wikipedia dumps to BERT pre-training TFRecords, one plain library module per stage."""

__version__ = "0.1.0"
