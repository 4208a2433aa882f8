"""The PMPI wrapper: intercepts MPI calls of every rank into a crash-safe memory-mapped record file.

- :mod:`.table`: the intercepted calls (the wrappers are generated from it),
- :mod:`.generate`: the C generator, :mod:`.build`: build with ``mpicc`` and cache,
- ``runtime.c``: the record file written by each rank, :mod:`.records`: its reader and timeline.

The names below are loaded when first used, so that reading :mod:`.table` (an importer's record names) does not load
the reader's pandas.
"""

from importlib import import_module

#: name -> the submodule that defines it
_FROM = {"build_wrapper": "build", "RankRecords": "records", "read_records": "records", "to_timeline": "records"}

__all__ = sorted(_FROM)


def __getattr__(name: str):
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_FROM[name]}"), name)
