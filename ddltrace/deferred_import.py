"""A module imported at its first use rather than at the ``import`` statements that name it.

``ddltrace import`` defers pyarrow (with pyarrow.parquet, 45 ms of its start here): a large trace file is read by
processes forked from the command (:mod:`ddltrace.collectors.importers.chrome_split`), and a reader decodes JSON
into NumPy columns without pyarrow. With pyarrow deferred, the readers are forked before it is loaded, and the
command loads it while they read (importing pyarrow.parquet, which reads the stand-in's ``__path__``, from the
reading's ``while_readers_start`` hook) instead of before.

:func:`defer` puts a stand-in module in ``sys.modules``: ``import pyarrow as pa`` binds it without loading
anything, and the first attribute read from it (``pa.Table``, or an ``import pyarrow.parquet``, which reads the
package's ``__path__``) imports the real module and copies its names into the stand-in, so that later reads are
plain module attribute reads. A module already imported is left as it is, so deferring never changes what an
already running process has.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


class _Deferred(types.ModuleType):
    """The stand-in: it holds the real module's spec (what the import statement checks) and nothing else until an
    attribute is read from it."""

    def __getattr__(self, name: str):
        return getattr(load(self.__name__), name)


def defer(name: str) -> None:
    """Put off importing the top-level module ``name`` until an attribute is read from it (nothing when it is
    already imported, or cannot be found)."""
    if name in sys.modules or "." in name:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in


def load(name: str) -> types.ModuleType:
    """The module ``name``, imported now if it was deferred (its stand-in then holds the module's names)."""
    module = sys.modules.get(name)
    if not isinstance(module, _Deferred):
        return importlib.import_module(name)
    del sys.modules[name]
    try:
        real = importlib.import_module(name)
    except BaseException:
        sys.modules[name] = module
        raise
    module.__dict__.update(real.__dict__)
    return real


def deferred(name: str) -> bool:
    """Whether ``name`` is deferred and not yet loaded."""
    return isinstance(sys.modules.get(name), _Deferred)
