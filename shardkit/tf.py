"""The quiet TensorFlow import shared by every reader that parses records with TensorFlow, and its errors in brief."""

import importlib.util
import os
import re
import sys
import tempfile

from .errors import PrepError

# What TensorFlow's C++ start-up writes to file descriptor 2 before its logging is set up, twice (once per library
# that carries it), which no setting silences since TensorFlow 2.16, TF_CPP_MIN_LOG_LEVEL included: absl's notice,
# and the oneDNN banner (TF_ENABLE_ONEDNN_OPTS=0 drops it, and oneDNN's kernels with it: training twice as slow).
_START_UP_BANNER = re.compile(rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
                              rb"STDERR\n|I\d{4} [\d:.]+ +\d+ port\.cc:\d+\] oneDNN custom operations are on\.")


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported (it is an optional extra: `pip install 'wikiprep[tensorflow]'`)."""
    return importlib.util.find_spec("tensorflow") is not None


def import_tensorflow():
    """TensorFlow, imported only by the readers that parse records with it, and without its start-up banners;
    PrepError when it is not installed."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # only parsing: oneDNN's kernels are of no use
    if not tensorflow_installed():
        raise PrepError("this needs TensorFlow, which is not installed (pip install 'wikiprep[tensorflow]')")
    return import_quietly()


def import_quietly():
    """`import tensorflow`, without its start-up banners (`_START_UP_BANNER`, and the INFO lines TF_CPP_MIN_LOG_LEVEL
    2 leaves out): what the import writes to file descriptor 2 is held and passed on without them, so a trainer's
    two processes do not each print them twice. Anything else (a warning, another thread's log line) still shows."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        stderr = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow as tf
        finally:
            sys.stderr.flush()
            os.dup2(stderr, 2)
            os.close(stderr)
            held.seek(0)
            rest = b"".join(line for line in held if not _START_UP_BANNER.match(line))
            while rest:
                rest = rest[os.write(2, rest):]
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
