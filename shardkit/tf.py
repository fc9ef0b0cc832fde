"""The quiet TensorFlow import shared by every reader that parses records with TensorFlow, and its errors in brief."""

import importlib.util
import os
import re

from .errors import PrepError


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported (it is an optional extra: `pip install 'wikiprep[tensorflow]'`)."""
    return importlib.util.find_spec("tensorflow") is not None


def import_tensorflow():
    """TensorFlow, imported only by the readers that parse records with it, and without its start-up banners;
    PrepError when it is not installed."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # only parsing: silences the oneDNN banner
    if not tensorflow_installed():
        raise PrepError("this needs TensorFlow, which is not installed (pip install 'wikiprep[tensorflow]')")
    import tensorflow as tf

    return tf


def error_text(error: BaseException, limit: int = 160) -> str:
    """What a TensorFlow error says about the input, for a one-line message: without the function and node
    names (`{{function_node ...}}`, `[[node ...]]`), the op (`[Op:ParseExampleV2]`) and a failing C++
    function's name (`jpeg::Uncompress failed.`), at most `limit` characters."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    text = re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:[^\]]*\]|\b\w+(?:::\w+)+ failed\.", " ", text)
    text = re.sub(r"^.*?transformation with iterator: [\w:]+:", " ", text)  # tf.data's pipeline, not the input
    text = " ".join(text.split()).strip(" .")
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."
