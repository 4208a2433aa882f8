"""The errors ddltrace raises on bad input.

Every error a user can cause (a wrong path, a truncated trace, a store from a newer ddltrace, a peer that
never answers) is a :class:`DdltraceError`: the command line prints its message on one line and exits 2.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class DdltraceError(Exception):
    """Bad input or environment: the message names the file or thing and what is wrong."""


class SchemaError(DdltraceError, ValueError):
    """A timeline or counters table that breaks the schema; ``problems`` lists every violation."""

    def __init__(self, table: str, problems: list[str]):
        self.table = table
        self.problems = list(problems)
        super().__init__(f"invalid {table}: " + "; ".join(self.problems))


class StoreError(DdltraceError):
    """A trace store that cannot be read or written (missing, corrupt, too new, ...)."""
