"""The base class of the errors a user can fix from the message alone."""
from __future__ import annotations


class UserError(Exception):
    """Bad input or a missing or damaged file, said in one sentence: the `horovod-q8` command
    prints the message alone on stderr and exits 1, without a traceback."""
