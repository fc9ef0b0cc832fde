"""The one exception type users see.

Every stage raises `PrepError` for bad input: a message of one line saying what is
wrong and in which file, URL or parameter. The command-line entry points and the Luigi
tasks print that line (never a traceback) and exit non-zero.
"""


class PrepError(Exception):
    """Bad input or a failed check, explained in one line for the user."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
