"""System sampler (dstat's view): the machine and the job's process tree, at a fixed rate.

Counters (names carry their unit; rates are per second over the last interval):

- machine (rank -1): ``cpu_percent`` (all cores, 0-100), ``cpuN_percent`` per core, ``mem_used_bytes``
  (total minus available), ``mem_available_bytes``, ``disk_read_bytes_per_s``, ``disk_write_bytes_per_s``
  (the physical disks: :func:`physical_disks`),
  ``net_sent_bytes_per_s``, ``net_recv_bytes_per_s`` (all interfaces, loopback included),
  ``ctx_switches_per_s``; per network interface other than loopback present at the start,
  ``net_IFACE_sent_bytes`` and ``net_IFACE_recv_bytes`` (bytes since the sampler started; Linux only); the
  job's tree as a whole: ``job_cpu_percent`` (100 = one core), ``job_rss_bytes``, ``job_processes``;
- each process of the tree (keyed by pid, mapped to its rank by the launcher): ``cpu_percent`` (100 = one
  core; over the last :data:`CPU_WINDOW_S`, from that long after the process is first seen), ``rss_bytes``, and at
  each tree rescan (1 Hz) ``ctx_switches_per_s``.

On Linux the values are read straight from /proc, one file per value group (psutil's general path costs
about 4x more here); elsewhere psutil gives them. The tree is rescanned (a walk of /proc, the costly part)
at the start and 0.1, 0.3, 0.7 and 1.5 s after (when a job starts its processes), then every
``tree_refresh_s``. Cost at 10 Hz: benchmarks/sampler_cost.py.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable

import psutil

from ddltrace.options import SAMPLE_HZ

MACHINE = -1
_LINUX = os.path.exists("/proc/stat") and os.path.exists("/proc/self/stat")
_TICK = os.sysconf("SC_CLK_TCK") if _LINUX else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if _LINUX else 4096


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as fh:
        return fh.read()


def _machine_linux(whole_disks: set[str]) -> tuple[list[float], dict[str, float], float, float, dict]:
    """(per-core busy and total jiffies pairs flattened, cumulative totals, mem total, mem available,
    {interface: (bytes sent, bytes received)} since boot)."""
    cores, totals = [], {}
    for line in _read("/proc/stat").split(b"\n"):
        if line.startswith(b"cpu") and line[3:4] != b" ":
            v = [int(x) for x in line.split()[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0)
            cores.append((sum(v[:8]) - idle, sum(v[:8])))
        elif line.startswith(b"ctxt "):
            totals["ctx_switches"] = float(line.split()[1])
    mem = {}
    for line in _read("/proc/meminfo").split(b"\n")[:8]:
        parts = line.split()
        if len(parts) >= 2:
            mem[parts[0]] = int(parts[1]) * 1024
    read = write = 0
    for line in _read("/proc/diskstats").split(b"\n"):
        parts = line.split()
        if len(parts) > 9 and parts[2].decode() in whole_disks:
            read += int(parts[5]) * 512  # sectors of 512 bytes, whatever the device's sector size
            write += int(parts[9]) * 512
    sent = recv = 0
    interfaces = {}
    for line in _read("/proc/net/dev").split(b"\n")[2:]:
        if b":" in line:
            name, rest = line.split(b":", 1)
            fields = rest.split()
            recv += int(fields[0])
            sent += int(fields[8])
            interfaces[name.strip().decode()] = (int(fields[8]), int(fields[0]))
    totals.update(disk_read_bytes=read, disk_write_bytes=write, net_sent_bytes=sent, net_recv_bytes=recv)
    total = mem.get(b"MemTotal:", 0)
    return cores, totals, total, mem.get(b"MemAvailable:", 0), interfaces


def _proc_linux(pid: int) -> tuple[float, float]:
    """(CPU seconds so far, resident bytes) of one process, from /proc/PID/stat."""
    data = _read(f"/proc/{pid}/stat")
    fields = data[data.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE


def _tree_linux(root: int) -> list[int]:
    """``root`` and its descendants, from /proc/PID/task/TID/children (touches only the job's processes,
    where psutil reads every process's stat file)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        out.append(pid)
        for tid in tids:
            try:
                todo.extend(int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split())
            except OSError:
                continue
    return out


def physical_disks(sys_block: str = "/sys/block") -> set[str]:
    """The whole disks whose reads and writes the disk counters sum: those of /sys/block that are a device, not
    one the kernel makes on top of others (loop, device-mapper, md, zram: under /sys/devices/virtual). The bytes
    a loop device writes reach the disk its file is on and were counted twice (20 MB written to a loop disk's
    file system read as 40 MB); a loop device on tmpfs, and zram, write no disk."""
    if not os.path.isdir(sys_block):
        return set()
    return {name for name in os.listdir(sys_block)
            if not os.path.realpath(os.path.join(sys_block, name)).startswith("/sys/devices/virtual/")}


_HAS_CHILDREN = _LINUX and os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def check_rate(hz: float) -> None:
    """Refuse a sampling rate (samples per second) outside :data:`ddltrace.options.SAMPLE_HZ` (0.01 to 1000):
    NaN or infinity make a busy loop, 1e-300 a sleep that overflows and kills the sampler's thread."""
    if not (math.isfinite(hz) and SAMPLE_HZ[0] <= hz <= SAMPLE_HZ[1]):
        raise ValueError(f"sample rate {hz!r} Hz: expected {SAMPLE_HZ[0]:g} to {SAMPLE_HZ[1]:g} Hz")


FIRST_RESCAN_S = 0.1  # the first look again at the job's process tree, in s; the interval doubles up to the refresh
#: A process's ``cpu_percent`` is its CPU time over at least the last this many seconds: CPU time comes in clock
#: ticks (10 ms), so over one 10 ms sample (100 Hz) a single-threaded process read 0, 100, 200 or 300 % (QA); over
#: 0.2 s a tick is 5 % of a core.
CPU_WINDOW_S = 0.2


class SystemSampler:
    """Sample at ``hz`` (samples per second) until :meth:`stop`; ``root_pid`` is the job's top process, or
    ``roots`` gives the top processes at each tree rescan (a node agent: the ranks started on its node)."""

    def __init__(self, hz: float = 10.0, root_pid: int | None = None, tree_refresh_s: float = 1.0,
                 roots: Callable[[], list[int]] | None = None):
        check_rate(hz)
        self.hz = hz
        self.root_pid = root_pid
        self.roots = roots if roots is not None else (lambda: [root_pid]) if root_pid is not None else None
        self.tree_refresh_s = tree_refresh_s  # how often new processes are looked for (a /proc walk), in s
        self.rows: list[tuple[int, str, int, float]] = []  # (pid or -1, name, t_ns, value)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._whole_disks = physical_disks()
        self._last: dict = {}
        self._interfaces0: dict[str, tuple[int, int]] = {}  # interface -> (sent, received) bytes at the start
        self._cpu: dict[int, list[tuple[float, float]]] = {}  # pid -> its (monotonic s, CPU s) of CPU_WINDOW_S
        self._ctx: dict[int, tuple[float, int]] = {}
        self._members: list[int] = []
        self._tree_at = -1e9
        self._scans = 0

    def start(self) -> SystemSampler:
        if _LINUX:
            self._interfaces0 = {k: v for k, v in _machine_linux(self._whole_disks)[4].items() if k != "lo"}
        self._machine(time.time_ns(), time.monotonic(), emit=False)
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

    def sample(self) -> None:
        """Take one sample now."""
        t_ns, now = time.time_ns(), time.monotonic()
        self._machine(t_ns, now, emit=True)
        self._processes(t_ns, now)

    def _machine(self, t_ns: int, now: float, emit: bool) -> None:
        interfaces = {}
        if _LINUX:
            cores, totals, mem_total, mem_avail, interfaces = _machine_linux(self._whole_disks)
        else:
            cores = [(p, 100.0) for p in psutil.cpu_percent(percpu=True)]
            disk, net, vm = psutil.disk_io_counters(), psutil.net_io_counters(), psutil.virtual_memory()
            totals = {"ctx_switches": psutil.cpu_stats().ctx_switches,
                      "disk_read_bytes": disk.read_bytes if disk else 0,
                      "disk_write_bytes": disk.write_bytes if disk else 0,
                      "net_sent_bytes": net.bytes_sent if net else 0, "net_recv_bytes": net.bytes_recv if net else 0}
            mem_total, mem_avail = vm.total, vm.available
        last, self._last = self._last, {"t": now, "cores": cores, **totals}
        if not emit or not last:
            return
        rows = self.rows
        if _LINUX:
            percent = [100.0 * (b - lb) / (t - lt) if t > lt else 0.0
                       for (b, t), (lb, lt) in zip(cores, last["cores"], strict=False)]
        else:
            percent = [b for b, _ in cores]
        rows.append((MACHINE, "cpu_percent", t_ns, sum(percent) / max(len(percent), 1)))
        rows.extend((MACHINE, f"cpu{i}_percent", t_ns, float(v)) for i, v in enumerate(percent))
        rows.append((MACHINE, "mem_used_bytes", t_ns, float(mem_total - mem_avail)))
        rows.append((MACHINE, "mem_available_bytes", t_ns, float(mem_avail)))
        dt = max(now - last["t"], 1e-9)
        for key, value in totals.items():
            rows.append((MACHINE, f"{key}_per_s", t_ns, (value - last[key]) / dt))
        for name, (sent0, recv0) in self._interfaces0.items():
            if name in interfaces:
                sent, recv = interfaces[name]
                rows.append((MACHINE, f"net_{name}_sent_bytes", t_ns, float(sent - sent0)))
                rows.append((MACHINE, f"net_{name}_recv_bytes", t_ns, float(recv - recv0)))

    def _processes(self, t_ns: int, now: float) -> None:
        if self.roots is None:
            return
        # a job starts its processes (MPI ranks, workers) in its first moments: look again 0.1, 0.3, 0.7, 1.5 s
        # after the start, then every tree_refresh_s (a short job's ranks are seen, a long job pays for few walks)
        rescan = now - self._tree_at >= min(self.tree_refresh_s, FIRST_RESCAN_S * 2 ** max(self._scans - 1, 0))
        if rescan:
            self._tree_at = now
            self._scans += 1
            members: list[int] = []
            for root_pid in self.roots():
                if _HAS_CHILDREN:
                    members += _tree_linux(root_pid)
                else:
                    try:
                        root = psutil.Process(root_pid)
                        members += [root.pid] + [p.pid for p in root.children(recursive=True)]
                    except psutil.Error:
                        pass
            self._members = list(dict.fromkeys(members))
        job_cpu = job_rss = 0.0
        cpu_measured = False
        alive = []
        for pid in self._members:
            try:
                if _LINUX:
                    cpu_s, rss = _proc_linux(pid)
                else:
                    proc = psutil.Process(pid)
                    times = proc.cpu_times()
                    cpu_s, rss = times.user + times.system, proc.memory_info().rss
                if rescan:
                    ctx = psutil.Process(pid).num_ctx_switches()
                    switches = ctx.voluntary + ctx.involuntary
            except (OSError, ValueError, IndexError, psutil.Error):
                continue
            alive.append(pid)
            # the rate over the samples of the last CPU_WINDOW_S (the oldest kept at least that old): a sample
            # closer to the window's start than that is not yet a rate (the first 0.2 s of a process)
            seen = self._cpu.setdefault(pid, [])
            seen.append((now, cpu_s))
            while len(seen) > 2 and now - seen[1][0] >= CPU_WINDOW_S:
                del seen[0]
            if now - seen[0][0] >= CPU_WINDOW_S:
                cpu = 100.0 * (cpu_s - seen[0][1]) / (now - seen[0][0])
                self.rows.append((pid, "cpu_percent", t_ns, cpu))
                job_cpu += cpu
                cpu_measured = True
            self.rows.append((pid, "rss_bytes", t_ns, float(rss)))
            job_rss += rss
            if rescan:
                prev_ctx = self._ctx.get(pid)
                self._ctx[pid] = (now, switches)
                if prev_ctx is not None and now > prev_ctx[0]:
                    self.rows.append((pid, "ctx_switches_per_s", t_ns, (switches - prev_ctx[1]) / (now - prev_ctx[0])))
        self._members = alive
        if cpu_measured:
            self.rows.append((MACHINE, "job_cpu_percent", t_ns, job_cpu))
        self.rows.append((MACHINE, "job_rss_bytes", t_ns, job_rss))
        self.rows.append((MACHINE, "job_processes", t_ns, float(len(alive))))
