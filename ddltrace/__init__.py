"""ddltrace: profiling and trace analysis for distributed deep-learning training.

The core: the timeline schema (:mod:`ddltrace.timeline`), the trace store (:mod:`ddltrace.store`), the
Chrome trace export (:mod:`ddltrace.chrome`) and the command line (:mod:`ddltrace.cli`).
Collectors live in :mod:`ddltrace.collectors`, analyses in :mod:`ddltrace.analyses`.
"""



def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use: importing importlib.metadata takes 20-30 ms that ``ddltrace
    --help`` need not pay."""
    if name != "__version__":
        raise AttributeError(f"module 'ddltrace' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("ddltrace")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = "0.0.0+source"
    globals()["__version__"] = value
    return value
