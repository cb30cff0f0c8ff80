"""The errors ncclean raises on purpose.

Every error a user can act on is an :class:`NcCleanError`; its message is one line that says what
is wrong and, where it helps, what to do. The command line turns these into that line on stderr and
exit code 2. Anything else escaping the library is a bug.
"""

from __future__ import annotations


class NcCleanError(Exception):
    """Base class: a problem with the input or the request, not a bug in ncclean."""


class InputNotFoundError(NcCleanError):
    """The input path does not exist."""


class NotParquetError(NcCleanError):
    """The input exists but is not readable Parquet."""


class CorruptInputError(NcCleanError):
    """An input file is cut short or damaged inside: a truncated webdataset tar, a member that
    cannot be read. Re-download or re-create it; reading on would lose rows without a word."""


class EmptyInputError(NcCleanError):
    """The input holds no rows (or a folder holds no Parquet files)."""


class SchemaError(NcCleanError):
    """A required column is missing or has the wrong type, or shards disagree on the schema."""


class InvalidRowsError(NcCleanError):
    """``--strict`` was given and some rows are invalid."""


class OutputError(NcCleanError):
    """The output cannot be written where asked (it is the input, or the folder is not writable)."""


class BadOptionError(NcCleanError):
    """An option value is out of range or inconsistent with the input."""


class IndexFileError(NcCleanError):
    """A noise index file does not fit the corpus it is applied to."""


class UnknownMethodError(NcCleanError):
    """No method, or more than one, answers to the requested name."""


class CheckpointError(NcCleanError):
    """A matcher checkpoint is missing, unreadable or of another format."""


class FitError(NcCleanError):
    """A fit cannot be read, or does not fit the corpus or options it is applied to."""
