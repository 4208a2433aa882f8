"""ddltrace: profiling and trace analysis for distributed deep-learning training.

The core: the timeline schema (:mod:`ddltrace.timeline`), the trace store (:mod:`ddltrace.store`), the
Chrome trace export (:mod:`ddltrace.chrome`) and the command line (:mod:`ddltrace.cli`).
Collectors live in :mod:`ddltrace.collectors`, analyses in :mod:`ddltrace.analyses`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ddltrace")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
