"""The quiet TensorFlow import shared by every reader that parses records with TensorFlow."""

import os


def import_tensorflow():
    """TensorFlow, imported only by the readers that parse records with it, and without its start-up banners."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # only parsing: silences the oneDNN banner
    import tensorflow as tf

    return tf
