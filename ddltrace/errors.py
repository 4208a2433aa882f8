"""The errors ddltrace raises on bad input.

Every error a user can cause (a wrong path, a truncated trace, a store from a newer ddltrace, a peer that
never answers) is a :class:`DdltraceError`: the command line prints its message on one line and exits 2.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


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


class DamagedStoreWarning(UserWarning):
    """A damaged part of a trace store (one rank's file, one manifest entry): it is named and left out, and the
    rest of the store is used. The command line prints it as one ``ddltrace: warning:`` line."""


def one_line(text: str) -> str:
    """``text`` safe to print on one line of a terminal: control characters (newlines, escape sequences from a
    file's names or a manifest's strings) written as ``\\n``, ``\\x1b``."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
