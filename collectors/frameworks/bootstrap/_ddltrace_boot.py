"""What every framework's bootstrap shares: who this process is, where it writes, the step window, the
clock mark, and a hook that runs when the framework's module has been imported. Standard library only.

Environment set by ``ddltrace run --framework``:

- ``DDLTRACE_FRAMEWORK``: pytorch, mxnet, tf, horovod or cntk;
- ``DDLTRACE_FW_DIR``: the run's framework folder; each process writes into ``<host>-<pid>/`` below it
  the framework's trace files and ``meta.json`` (identity, window, files, clock marks, how it ended);
- ``DDLTRACE_FW_STEPS``: ``FIRST-LAST``, the training steps to profile (counted from 1, inclusive);
- ``DDLTRACE_FW_RECORD_SHAPES``: ``1`` to have torch.profiler record each op's input shapes (``--record-shapes``).

A process whose framework never starts a step writes nothing (a launcher such as torchrun's agent).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.util
import json
import os
import socket
import sys
import time

FRAMEWORK_MODULES = {"pytorch": "_ddltrace_torch", "mxnet": "_ddltrace_mxnet", "tf": "_ddltrace_tf",
                     "horovod": "_ddltrace_horovod", "cntk": "_ddltrace_cntk"}
MARK_NAME = "ddltrace.mark"  # the event each bootstrap records in the framework's profile at a known wall time


def identity() -> dict:
    """Role, index within the role, rank and world size of this process, from the launcher's environment
    (TF_CONFIG, DMLC_*, Horovod / MPI, torchrun's RANK); None where the launch does not say."""
    env = os.environ
    if env.get("TF_CONFIG"):
        try:
            config = json.loads(env["TF_CONFIG"])
            task, cluster = config.get("task", {}), config.get("cluster", {})
            role, index = str(task.get("type", "worker")), int(task.get("index", 0))
        except (ValueError, TypeError, AttributeError):
            config = None
        if config is not None:
            chiefs = len(cluster.get("chief", []))
            workers = chiefs + len(cluster.get("worker", []))
            rank = index if role == "chief" else index + chiefs if role == "worker" else None
            return {"role": role, "index": index, "rank": rank, "world_size": workers or None, "from": "TF_CONFIG"}
    if env.get("DMLC_ROLE"):
        role = env["DMLC_ROLE"]
        index = env.get("DMLC_WORKER_ID") if role == "worker" else env.get("DMLC_SERVER_ID")
        index = int(index) if index not in (None, "") else None
        return {"role": role, "index": index, "rank": index if role == "worker" else None,
                "world_size": int(env["DMLC_NUM_WORKER"]) if env.get("DMLC_NUM_WORKER") else None,
                "from": "DMLC_ROLE"}
    for rank_var, size_var in (("HOROVOD_RANK", "HOROVOD_SIZE"), ("RANK", "WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                               ("PMIX_RANK", "PMIX_SIZE")):
        if env.get(rank_var, "").isdigit():
            rank = int(env[rank_var])
            size = int(env[size_var]) if env.get(size_var, "").isdigit() else None
            return {"role": "worker", "index": rank, "rank": rank, "world_size": size, "from": rank_var}
    return {"role": "worker", "index": None, "rank": None, "world_size": None, "from": None}


def window() -> tuple[int, int]:
    """(first, last) step to profile, counted from 1, both included."""
    text = os.environ.get("DDLTRACE_FW_STEPS", "5-9")
    first, _, last = text.partition("-")
    first, last = int(first), int(last or first)
    if first < 1 or last < first:
        raise ValueError(f"DDLTRACE_FW_STEPS={text!r}: want FIRST-LAST with 1 <= FIRST <= LAST")
    return first, last


def _test_node_offset_ns(host: str) -> int:
    """The test clock offset of node ``host`` (DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS="HOST:NS,..."; 0 if none)."""
    for entry in filter(None, os.environ.get("DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS", "").split(",")):
        name, _, ns = entry.rpartition(":")
        if name == host:
            return int(ns)
    return 0


class Process:
    """This process's folder and ``meta.json`` (rewritten atomically on every update)."""

    def __init__(self, framework: str):
        self.framework = framework
        self.first, self.last = window()
        self.meta = {"framework": framework, "pid": os.getpid(), "ppid": os.getppid(), "host": socket.gethostname(),
                     "argv": list(sys.argv), **identity(), "steps": [self.first, self.last], "files": [], "marks": [],
                     "notes": [], "started_ns": time.time_ns()}
        self.folder = os.path.join(os.environ["DDLTRACE_FW_DIR"], f"{self.meta['host']}-{os.getpid()}")
        atexit.register(self._record_end)  # registered first, so it runs after the framework's exit hooks

    def path(self, name: str) -> str:
        """A file in this process's folder (created on first use)."""
        os.makedirs(self.folder, exist_ok=True)
        return os.path.join(self.folder, name)

    def update(self, **fields) -> None:
        """Merge ``fields`` into the meta and write it (temporary file + rename)."""
        self.meta.update(fields)
        target = self.path("meta.json")
        with open(target + ".tmp", "w") as fh:
            json.dump(self.meta, fh, indent=1, default=str)
        os.replace(target + ".tmp", target)

    def add_file(self, name: str, fmt: str | None = None) -> None:
        """Record a trace file written in the folder (``fmt``: an importer name, else sniffed)."""
        self.meta["files"].append({"path": name, "format": fmt})
        self.update()

    def add_mark(self, t0_ns: int, t1_ns: int) -> None:
        """Record that the framework event named MARK_NAME ran between wall times t0 and t1 (ns; moved by the
        test hook DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS, as if this node's clock were off: docs/COLLECTORS.md)."""
        shift = _test_node_offset_ns(self.meta["host"])
        self.meta["marks"].append({"wall_ns": (t0_ns + t1_ns) // 2 + shift, "half_width_ns": (t1_ns - t0_ns) // 2})
        self.update()

    def note(self, text: str) -> None:
        self.meta["notes"].append(text)
        self.update()

    def _record_end(self) -> None:
        """At Python's exit, in a process that wrote its meta: that Python's exit ran (``exited_ns``, wall ns), and
        the uncaught exception it dies of, if any (Python sets ``sys.last_value`` when it prints one). A process
        ended by a signal, ``os.abort`` or ``os._exit`` runs no exit hook: its meta lacks ``exited_ns``."""
        if not os.path.exists(os.path.join(self.folder, "meta.json")):
            return
        now = time.time_ns()
        error = getattr(sys, "last_value", None)
        if error is not None:
            self.update(ended_by=f"an uncaught {type(error).__name__}: {error}"[:500], ended_by_ns=now, exited_ns=now)
        else:
            self.update(exited_ns=now)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Call ``callback(module)`` once ``name`` has been imported (after its code ran)."""

    def __init__(self, name: str, callback):
        self.name, self.callback, self.busy = name, callback, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return None
        original, callback = spec.loader.exec_module, self.callback

        def exec_module(module):
            original(module)
            callback(module)

        spec.loader.exec_module = exec_module  # this spec's own loader instance: nothing else is touched
        sys.meta_path.remove(self)
        return spec


def after_import(name: str, callback) -> None:
    """Run ``callback(module)`` when module ``name`` is first imported (now, if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def install() -> None:
    """Start the bootstrap of the framework named in DDLTRACE_FRAMEWORK."""
    framework = os.environ["DDLTRACE_FRAMEWORK"]
    if framework not in FRAMEWORK_MODULES:
        raise ValueError(f"DDLTRACE_FRAMEWORK={framework!r}: not one of {', '.join(FRAMEWORK_MODULES)}")
    importlib.import_module(FRAMEWORK_MODULES[framework]).install(Process(framework))
