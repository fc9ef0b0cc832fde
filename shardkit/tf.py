"""The quiet TensorFlow import shared by every reader that parses records with TensorFlow, and its errors in brief."""

import os
import re


def import_tensorflow():
    """TensorFlow, imported only by the readers that parse records with it, and without its start-up banners."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # only parsing: silences the oneDNN banner
    import tensorflow as tf

    return tf


def op_error_text(error) -> str:
    """The gist of a tf.errors.OpError: its first line without the graph's function and node names."""
    text = (error.message or type(error).__name__).splitlines()[0]
    text = re.sub(r"\{\{[^}]*\}\}\s*", "", text)  # {{function_node __wrapped__IteratorGetNext...}}
    text = re.sub(r"^.*?transformation with iterator: [\w:]+:\s*", "", text)
    text = re.sub(r"\s*\[\[\{\{node [^]]*\]\]", "", text)
    return text if len(text) <= 160 else text[:157] + "..."
