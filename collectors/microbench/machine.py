"""The machine's description from the OS, and its core clock from a dependent add chain.

Hardware counters are often unavailable on virtual machines (``perf stat``: not supported), and the clock
in /proc/cpuinfo is the nominal one; a chain of dependent integer adds retires one add per core cycle on
every x86-64 and AArch64 core, so adds per second is the clock the benchmarks actually ran at.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from ddltrace.collectors.microbench import ccompile
from ddltrace.collectors.microbench.measure import Measurement, repeat, robust_spread, usable_cores

_SIZE_SUFFIX = {"K": 1024, "M": 1024**2, "G": 1024**3}


def _parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in _SIZE_SUFFIX:
        return int(float(text[:-1]) * _SIZE_SUFFIX[text[-1]])
    return int(text)


def cache_sizes() -> dict[str, int]:
    """Data cache sizes of CPU 0 in bytes, keyed 'L1', 'L2', 'L3' (sysfs); empty if the OS does not say."""
    caches: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = (index / "level").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            caches[f"L{level}"] = size
    return caches


def llc_bytes() -> int:
    """The last-level cache size in bytes (32 MiB when the OS does not say)."""
    caches = cache_sizes()
    return caches[max(caches)] if caches else 32 * 1024**2


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def vector_bits() -> int:
    """The widest SIMD registers the CPU's flags announce (512 for AVX-512, 256 for AVX2/AVX, else 128)."""
    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    if "avx512f" in flags:
        return 512
    if "avx2" in flags or "avx" in flags:
        return 256
    return 128


CGROUP_ROOT = Path("/sys/fs/cgroup")


def _quota_cores(own: str, root: Path) -> tuple[float | None, float | None, str | None]:
    """The tightest CPU quota (cores) on the cgroup ``own`` and its ancestors under ``root``, its period (s) and
    file: cgroup v1 ``cpu.cfs_quota_us / cpu.cfs_period_us`` (-1: none), v2 ``cpu.max`` ("max 100000": none)."""
    best, best_period, where = None, None, None
    path = root / own.lstrip("/")
    while True:
        try:
            if (path / "cpu.max").exists():
                quota, period = (path / "cpu.max").read_text().split()[:2]
                cores = None if quota == "max" else int(quota) / int(period)
                name = path / "cpu.max"
            else:
                quota, period = (path / "cpu.cfs_quota_us").read_text(), (path / "cpu.cfs_period_us").read_text()
                cores = int(quota) / int(period) if int(quota) > 0 else None
                name = path / "cpu.cfs_quota_us"
        except (OSError, ValueError, ZeroDivisionError):
            cores, name = None, None
        if cores is not None and (best is None or cores < best):
            best, best_period, where = cores, int(period) / 1e6, str(name)
        if path == root or root not in path.parents:
            return best, best_period, where
        path = path.parent


def cpu_allowance(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> dict:
    """The CPU this process may use: ``cores`` (its affinity mask) and ``quota_cores`` (the tightest CFS quota of
    its cgroup and their ancestors, in cores: 0.5 is half a core's time; None without one), ``quota_period_s``
    (the CFS period it is granted in) and the file the quota came from. A quota caps a share of the time, not a
    core's speed: the transfer to another machine (``ddltrace.models.transfer``) needs both."""
    quota, period, where = None, None, None
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, own = line.split(":", 2)
        if controllers == "":  # cgroup v2: the unified hierarchy (under 'unified' on a hybrid v1 machine)
            base = root / "unified" if (root / "unified" / "cgroup.controllers").exists() else root
        elif "cpu" in controllers.split(","):
            base = next((root / name for name in (controllers, "cpu", "cpu,cpuacct") if (root / name).is_dir()),
                        None)
            if base is None:
                continue
        else:
            continue
        cores, every, source = _quota_cores(own, base)
        if cores is not None and (quota is None or cores < quota):
            quota, period, where = cores, every, source
    return {"cores": usable_cores(), "quota_cores": quota, "quota_period_s": period, "quota_source": where}


def describe() -> dict:
    """CPU model, cores, cache sizes, memory, kernel, Python: what the profile records about the machine."""
    import psutil

    info = _cpuinfo()
    mem = psutil.virtual_memory()
    nominal = info.get("cpu MHz")
    return {
        "hostname": platform.node(),
        "cpu_model": info.get("model name") or platform.processor() or platform.machine(),
        "architecture": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": usable_cores(),
        "cpu_allowance": cpu_allowance(),
        "cache_bytes": cache_sizes(),
        "vector_bits": vector_bits(),
        "fma": "fma" in info.get("flags", "").split() or platform.machine() == "aarch64",
        "nominal_clock_hz": float(nominal) * 1e6 if nominal else None,
        "memory_bytes": int(mem.total),
        "kernel": f"{platform.system()} {platform.release()}",
        "virtualized": "hypervisor" in info.get("flags", "").split(),
        "python": platform.python_version(),
    }


def core_clock(run_time: float = 0.002, runs: int = 30) -> tuple[Measurement | None, str]:
    """The core clock in Hz from a dependent add chain, or None and the reason. Many short runs (``run_time``
    seconds each, shorter than a scheduler time slice): other processes can only slow a run down, so the value
    is the fastest run and the uncertainty the spread of the fastest quarter."""
    lib = ccompile.load_kernels()
    if lib is None:
        return None, ccompile.last_note()
    if lib.add_chain(1) < 0:
        return None, f"no add-chain kernel for {platform.machine()}"
    iters = 1000

    def once() -> float:
        nonlocal iters
        while True:
            t0 = time.perf_counter()
            lib.add_chain(iters)
            dt = time.perf_counter() - t0
            if dt >= run_time:
                return 100 * iters / dt
            iters = int(iters * max(2.0, 1.2 * run_time / max(dt, 1e-6)))

    meas = repeat(once, repeats=runs, unit="Hz", extra=0)
    fastest = sorted(meas.values)[-max(2, runs // 4):]
    meas.value, meas.spread = max(meas.values), robust_spread(fastest)
    return meas, ""


def peak_muladd_per_s(clock_hz: float, dtype_bytes: int, fma_units: int = 2) -> float:
    """Peak multiply-adds per second of one core: clock x FMA units x SIMD lanes (vector width / value size)."""
    return clock_hz * fma_units * vector_bits() / (8 * dtype_bytes)
