"""What must be the same in this command (the Dask client), the scheduler and the workers of ``--scheduler``, and
the check of it: from what ddltrace imports there, and from the versions distributed reports
(``Client.get_versions``: each process's ``importlib.metadata`` versions and Python's ``sys.version_info``).

The tasks are ddltrace's functions, pickled by reference, with their arguments; the scheduler unpickles them, the
workers run them and send back their results (a rank's summary: pandas DataFrames and NumPy arrays), pickled too.
So what must match is what pickles and carries them:

- ddltrace, as imported (a worker without it breaks its connection on the first task, and the tasks wait for ever),
  on the scheduler and every worker;
- Python, to its minor version (3.11.x: pickles and the bytecode of functions pickled by value), dask,
  distributed and cloudpickle, on the scheduler and every worker;
- msgpack (distributed's messages), numpy, pandas and pyarrow (the results), on every worker.

Versions are compared as versions (PEP 440, ``packaging.version``, which dask itself requires): "2026.8" is
"2026.8.0"; a version that does not parse is compared as text. Other packages distributed compares (tornado, toolz,
lz4) carry no task: a difference there is said on one line, not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

#: What the scheduler must have as this command has it (it unpickles the tasks).
SCHEDULER_MUST_MATCH = ("python", "dask", "distributed", "cloudpickle")
#: What is compared on the scheduler at all: distributed's ``scheduler_relevant_packages`` (its other packages
#: never touch a task there).
SCHEDULER_COMPARED = (*SCHEDULER_MUST_MATCH, "tornado", "toolz", "lz4")
#: What every worker must have as this command has it (it runs the tasks and pickles their results).
WORKERS_MUST_MATCH = (*SCHEDULER_MUST_MATCH, "msgpack", "numpy", "pandas", "pyarrow")
#: Asked of distributed beyond its own list (required: dask, distributed, msgpack, cloudpickle, tornado, toolz;
#: optional: numpy, pandas, lz4).
EXTRA_PACKAGES = ("pyarrow",)


@dataclass(frozen=True)
class Difference:
    """``where`` ("the scheduler", "the worker at ADDRESS") has ``package`` at ``theirs`` (None: not installed)
    where this command has ``ours``; ``matters``: the tasks need them to be the same."""

    where: str
    package: str
    theirs: str | None
    ours: str | None
    matters: bool

    def text(self) -> str:
        has = f"has no {self.package}" if self.theirs is None else f"has {self.package} {self._shown(self.theirs)}"
        return f"{self.where} {has}, while this command runs {self.package} {self._shown(self.ours)}"

    def _shown(self, version: str | None) -> str:
        if version is None:
            return "(not installed)"
        return ".".join(version.split(".")[:3]) if self.package == "python" else version


def same_version(package: str, ours: Any, theirs: Any) -> bool:
    """Whether two versions of ``package`` are the same as far as the tasks go: Python's to the minor version
    (distributed reports it as "3.11.9.final.0"), the others as PEP 440 versions (as text where one does not
    parse, or is not text)."""
    if not isinstance(ours, str) or not isinstance(theirs, str):
        return ours == theirs
    if package == "python":
        return ours.split(".")[:2] == theirs.split(".")[:2]
    try:
        return Version(ours) == Version(theirs)
    except InvalidVersion:
        return ours == theirs


def _packages(report: Any) -> dict:
    """The ``packages`` table of one process's report (empty when it sent none: a worker that did not answer)."""
    packages = report.get("packages") if isinstance(report, Mapping) else None
    return dict(packages) if isinstance(packages, Mapping) else {}


def differences(versions: Mapping[str, Any]) -> list[Difference]:
    """Every package whose version on the scheduler or a worker differs from this command's, in
    ``Client.get_versions()``'s report (``client``, ``scheduler``, ``workers`` by address), the ones the tasks need
    first (see the module for which)."""
    ours = _packages(versions.get("client"))
    scheduler = _packages(versions.get("scheduler"))
    places = [("the scheduler", {k: v for k, v in scheduler.items() if k in SCHEDULER_COMPARED},
               SCHEDULER_MUST_MATCH)]
    workers = versions.get("workers")
    places += [(f"the worker at {address}", _packages(report), WORKERS_MUST_MATCH)
               for address, report in sorted((workers or {}).items()) if _packages(report)]
    found = []
    for where, theirs, must in places:
        for package in sorted(theirs):
            if not same_version(package, ours.get(package), theirs[package]):
                found.append(Difference(where, package, theirs[package], ours.get(package), package in must))
    return sorted(found, key=lambda d: not d.matters)


def ddltrace_differences(found: Mapping[str, Any], ours: str) -> dict[str, Any]:
    """Of ``found`` (where: the ddltrace version imported there, or the exception its import raised), the places
    whose ddltrace is not this one."""
    return {where: v for where, v in found.items() if isinstance(v, BaseException) or not same_version("ddltrace",
                                                                                                       ours, v)}
