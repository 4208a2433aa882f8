"""ddltrace: profiling and trace analysis for distributed deep-learning training.

The core: the timeline schema (:mod:`ddltrace.timeline`), the trace store (:mod:`ddltrace.store`), the
Chrome trace export (:mod:`ddltrace.chrome`) and the command line (:mod:`ddltrace.cli`).
Collectors live in :mod:`ddltrace.collectors`, analyses in :mod:`ddltrace.analyses`.
"""

#: The version, the one place it is written (pyproject.toml reads it from here): a constant, not a lookup in the
#: installed metadata, which costs ``ddltrace import`` 20 ms of importlib.metadata.
__version__ = "0.1.0"
