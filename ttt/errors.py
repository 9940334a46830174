"""User-facing errors: one line, naming what is wrong and what is valid."""


class TttError(Exception):
    """An error caused by the user's input or files, shown at the CLI as one line without a traceback."""
