"""A real Dask distributed cluster on this machine for the tests: one ``dask scheduler`` and ``workers`` ``dask
worker`` processes (the commands of this interpreter's environment), on localhost ports the system chooses (port 0,
the address read back from the scheduler file), stopped when the ``with`` block ends whatever happened in it.

Used by tests/test_dask_cluster.py and benchmarks/dask_speedup.py. Each worker runs one task at a time
(``--nthreads 1``) and without a nanny (``--no-nanny``), so that the process a test kills is the worker itself and
nothing starts it again: its tasks must be run again elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import distributed

from ddltrace.collectors.scoped import Scoped

DASK = str(Path(sys.executable).with_name("dask"))
START_TIMEOUT_S = 60


class LocalDaskCluster(Scoped):
    def __init__(self, folder: Path, workers: int = 2, env: dict[str, str] | None = None,
                 scheduler_env: dict[str, str] | None = None, worker_prefix: list[str] | None = None):
        """``env``: added to the workers' environment; ``scheduler_env``: to the scheduler's; ``worker_prefix``: a
        command that runs each worker's (``unshare ... sh -c '...; exec "$@"'``)."""
        self.worker_prefix = list(worker_prefix or [])
        self.folder, self.count = Path(folder), workers
        self.env = {**os.environ, **(env or {})}
        self.scheduler_env = {**os.environ, **(scheduler_env or {})}
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}  # by worker name
        self.address = ""
        self.client = None

    def __enter__(self) -> LocalDaskCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        return super().__enter__()

    def _make(self) -> None:
        info = self.folder / "scheduler.json"
        self.scheduler = self._spawn("scheduler", [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                                   "--no-dashboard", "--scheduler-file", str(info)],
                                     self.scheduler_env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (info.exists() and info.stat().st_size):
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start: {self._log('scheduler')}")
            time.sleep(0.1)
        self.address = json.loads(info.read_text())["address"]
        for i in range(self.count):
            name = f"w{i}"
            self.workers[name] = self._spawn(name, [
                *self.worker_prefix, DASK, "worker", self.address, "--name", name, "--nthreads", "1", "--no-nanny",
                "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "0", "--local-directory",
                str(self.folder / name)], self.env)
        self.client = distributed.Client(self.address, timeout=START_TIMEOUT_S, set_as_default=False)
        self.client.wait_for_workers(self.count, timeout=START_TIMEOUT_S)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115 - the process holds it open
        with log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text()[-2000:] if path.exists() else "(no log)"

    def busy_worker(self) -> tuple[str, str] | None:
        """(name, address) of a worker holding a task now, per the scheduler; None when none does."""
        names = {addr: w["name"] for addr, w in self.client.scheduler_info(n_workers=-1)["workers"].items()}
        for addr, keys in self.client.processing().items():
            if keys and addr in names:
                return names[addr], addr
        return None

    def kill(self, name: str) -> int:
        """SIGKILL worker ``name`` (no goodbye to the scheduler); its exit status once reaped."""
        process = self.workers[name]
        process.send_signal(signal.SIGKILL)
        return process.wait(timeout=30)

    def close(self) -> None:
        """Ask the scheduler to stop its workers and itself; then SIGTERM, then SIGKILL, what is still running."""
        asked = False
        if self.client is not None:
            if self.scheduler is not None and self.scheduler.poll() is None:  # else shutdown waits to reconnect
                with contextlib.suppress(Exception):
                    self.client.shutdown()
                    asked = True
            self.client.close(timeout=5)
        processes = [p for p in [*self.workers.values(), self.scheduler] if p is not None]
        for stop, grace_s in ((None, 2 if asked else 0), (subprocess.Popen.terminate, 3), (subprocess.Popen.kill, 10)):
            running = [p for p in processes if p.poll() is None]
            if not running:
                return
            for process in running:
                if stop is not None:
                    stop(process)
            deadline = time.monotonic() + grace_s
            while any(p.poll() is None for p in running) and time.monotonic() < deadline:
                time.sleep(0.05)
