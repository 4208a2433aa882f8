"""System sampler on psutil (dstat's view): the machine and the job's process tree, at a fixed rate.

Counters (names carry their unit; rates are per second over the last interval):

- machine (rank -1): ``cpu_percent`` (all cores, 0-100), ``cpuN_percent`` per core, ``mem_used_bytes``,
  ``mem_available_bytes``, ``disk_read_bytes_per_s``, ``disk_write_bytes_per_s``, ``net_sent_bytes_per_s``,
  ``net_recv_bytes_per_s``, ``ctx_switches_per_s``; the job's tree as a whole: ``job_cpu_percent``
  (100 = one core), ``job_rss_bytes``, ``job_processes``;
- each process of the tree (keyed by pid, mapped to its rank by the launcher): ``cpu_percent`` (100 = one
  core), ``rss_bytes``, ``ctx_switches_per_s``.

Sampling runs on a thread of the launcher; its cost at 10 Hz is measured by benchmarks/sampler_cost.py.
"""

from __future__ import annotations

import threading
import time

import psutil

MACHINE = -1


class SystemSampler:
    """Sample at ``hz`` (samples per second) until :meth:`stop`; ``root_pid`` is the job's top process."""

    def __init__(self, hz: float = 10.0, root_pid: int | None = None):
        if hz <= 0:
            raise ValueError(f"sample rate must be > 0 Hz, got {hz}")
        self.hz = hz
        self.root_pid = root_pid
        self.rows: list[tuple[int, str, int, float]] = []  # (pid or -1, name, t_ns, value)
        self.pids_seen: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: dict[int, psutil.Process] = {}
        self._last: dict = {}
        self._ctx: dict[int, int] = {}

    def start(self) -> SystemSampler:
        self._prime()
        self._thread = threading.Thread(target=self._loop, name="ddltrace-system-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[tuple[int, str, int, float]]:
        """Stop sampling (after one last sample) and return the rows (pid or -1, name, t_ns, value)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.rows

    def _loop(self) -> None:
        period = 1.0 / self.hz
        next_t = time.monotonic() + period
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self.sample()
            next_t += period
            if next_t < time.monotonic():  # fell behind: skip, do not burst
                next_t = time.monotonic() + period
        self.sample()

    def _prime(self) -> None:
        psutil.cpu_percent(percpu=True)
        self._last = {"t": time.monotonic(), **self._totals()}

    @staticmethod
    def _totals() -> dict:
        disk = psutil.disk_io_counters()
        net = psutil.net_io_counters()
        return {
            "disk_read_bytes": disk.read_bytes if disk else 0, "disk_write_bytes": disk.write_bytes if disk else 0,
            "net_sent_bytes": net.bytes_sent if net else 0, "net_recv_bytes": net.bytes_recv if net else 0,
            "ctx_switches": psutil.cpu_stats().ctx_switches,
        }

    def _tree(self) -> list[psutil.Process]:
        if self.root_pid is None:
            return []
        try:
            root = self._procs.get(self.root_pid) or psutil.Process(self.root_pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return []
        out = []
        for proc in procs:
            known = self._procs.get(proc.pid)
            if known is None:
                self._procs[proc.pid] = proc
                try:
                    proc.cpu_percent(None)  # the first call only primes the counter
                except psutil.Error:
                    pass
                continue
            out.append(known)
        return out

    def sample(self) -> None:
        """Take one sample now."""
        t_ns = time.time_ns()
        now = time.monotonic()
        rows = self.rows
        cores = psutil.cpu_percent(percpu=True)
        rows.append((MACHINE, "cpu_percent", t_ns, sum(cores) / max(len(cores), 1)))
        rows.extend((MACHINE, f"cpu{i}_percent", t_ns, float(v)) for i, v in enumerate(cores))
        mem = psutil.virtual_memory()
        rows.append((MACHINE, "mem_used_bytes", t_ns, float(mem.used)))
        rows.append((MACHINE, "mem_available_bytes", t_ns, float(mem.available)))
        totals = self._totals()
        dt = max(now - self._last["t"], 1e-9)
        for key, value in totals.items():
            rows.append((MACHINE, f"{key}_per_s", t_ns, (value - self._last[key]) / dt))
        self._last = {"t": now, **totals}
        job_cpu = job_rss = 0.0
        tree = self._tree()
        for proc in tree:
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent(None)
                    rss = float(proc.memory_info().rss)
                    ctx = proc.num_ctx_switches()
            except psutil.Error:
                continue
            switches = ctx.voluntary + ctx.involuntary
            last = self._ctx.get(proc.pid)
            self._ctx[proc.pid] = switches
            self.pids_seen.add(proc.pid)
            rows.append((proc.pid, "cpu_percent", t_ns, cpu))
            rows.append((proc.pid, "rss_bytes", t_ns, rss))
            if last is not None:
                rows.append((proc.pid, "ctx_switches_per_s", t_ns, (switches - last) / dt))
            job_cpu += cpu
            job_rss += rss
        if self.root_pid is not None:
            rows.append((MACHINE, "job_cpu_percent", t_ns, job_cpu))
            rows.append((MACHINE, "job_rss_bytes", t_ns, job_rss))
            rows.append((MACHINE, "job_processes", t_ns, float(len(tree))))
