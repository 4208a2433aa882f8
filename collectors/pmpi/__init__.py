"""The PMPI wrapper: intercepts MPI calls of every rank into a crash-safe memory-mapped record file.

- :mod:`.table`: the intercepted calls (the wrappers are generated from it),
- :mod:`.generate`: the C generator, :mod:`.build`: build with ``mpicc`` and cache,
- ``runtime.c``: the record file written by each rank, :mod:`.records`: its reader and timeline.
"""

from ddltrace.collectors.pmpi.build import build_wrapper
from ddltrace.collectors.pmpi.records import RankRecords, read_records, to_timeline

__all__ = ["RankRecords", "build_wrapper", "read_records", "to_timeline"]
