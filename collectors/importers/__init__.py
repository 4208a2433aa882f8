"""Importers of other tools' traces: each module registers the formats it recognises (by content).

Sniffing order is registration order: specific formats first, the generic Chrome trace last.
"""

from ddltrace.collectors.importers import (  # noqa: F401  (registration happens on import)
    cntk,
    ddltrace_export,
    horovod,
    ipm,
    kineto,
    mxnet,
    nsys,
    otf2_archive,
    rocprof,
    stepstats,
    tensorflow,
    xplane,
)
from ddltrace.collectors.importers import generic as _generic  # noqa: F401  (last: the catch-all)
from ddltrace.collectors.importers.base import REGISTRY, ImportContext, Importer, RankPart, detect, get_importer
from ddltrace.collectors.importers.categories import Categorizer, explain

__all__ = ["REGISTRY", "Categorizer", "ImportContext", "Importer", "RankPart", "detect", "explain", "get_importer"]
