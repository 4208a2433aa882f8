"""A slower CPU on this machine: each process of a job in a cgroup (v1 ``cpu`` controller) of its own with a CFS
quota, so that every process runs at most ``share`` of one core (needs root and a cgroup v1 ``cpu`` hierarchy).

A quota throttles in bursts of its period: with the default period of 100 ms and a share of 0.5, a process runs
50 ms and then waits 50 ms, so a microbenchmark timing runs of a few milliseconds would mostly see the core at
full speed. :class:`CpuQuota` uses a period of 10 ms (``period_s``) and the benchmark that calibrates it
(``ddltrace calibrate --cpu-window``) times runs of several periods: the calibration and the job both see the
core's rate averaged over many periods, ``share`` of its speed (on this VM: 2.12x a busy loop's time at 0.5,
where the fastest of forty 5 ms runs saw 1.0x).

Processes enter through :attr:`CpuQuota.wrapper`, a shell script that makes the cgroup ``<root>/<name>`` (name:
the MPI rank from ``PMI_RANK``, else its own pid), sets the period and quota and writes its own pid there before
it runs its arguments (children stay in it); everything it made is removed, and every process still in it
killed, when the ``with`` block ends, at interpreter exit, and, for an owner that died, by the next
:class:`CpuQuota` made on this machine.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ddltrace.collectors import cgroup_v1
from ddltrace.errors import DdltraceError

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
_PREFIX = "ddlquota"

_WRAPPER = """#!/bin/sh
# ddltrace CPU quota {tag}: run "$@" in a cgroup of its own with {share:g} of a core (period {period} us)
d="{root}/${{PMI_RANK:+rank}}${{PMI_RANK:-pid$$}}"
mkdir -p "$d" && echo {period} > "$d/cpu.cfs_period_us" && echo {quota} > "$d/cpu.cfs_quota_us" \\
  && echo $$ > "$d/cgroup.procs" || {{ echo "ddltrace cpu quota: cannot enter $d" >&2; exit 97; }}
exec "$@"
"""


def missing() -> str | None:
    """Why a CPU quota cannot be set here, or None."""
    if os.geteuid() != 0:
        return "a CPU quota needs root (cgroup v1 cpu controller)"
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        return f"a CPU quota needs the cgroup v1 cpu controller at {CPU_ROOT} (cpu.cfs_quota_us absent)"
    return None


class CpuQuota(cgroup_v1.GroupOwner):
    """Every process started through :attr:`wrapper` gets ``share`` (0 < share <= 1) of one core, in bursts of
    ``period_s`` seconds (1 ms to 1 s)."""

    def __init__(self, share: float, period_s: float = 0.010):
        if not 0 < share <= 1:
            raise DdltraceError(f"cpu quota: the share of a core must be in (0, 1], got {share}")
        if not 0.001 <= period_s <= 1.0:
            raise DdltraceError(f"cpu quota: the period must be 1 ms to 1 s, got {period_s} s")
        why = missing()
        if why:
            raise DdltraceError(why)
        self.share, self.period_us = share, int(round(period_s * 1e6))
        self.quota_us = max(1000, int(round(self.period_us * share)))  # the kernel's smallest quota is 1 ms
        super().__init__(CPU_ROOT, _PREFIX)

    def _make(self) -> None:
        self.root.mkdir()
        self._write_wrapper("in-quota", _WRAPPER.format(tag=self.tag, root=self.root, period=self.period_us,
                                                        quota=self.quota_us, share=self.quota_us / self.period_us))

    def throttled(self) -> dict[str, dict[str, int]]:
        """Per cgroup made so far: the kernel's cpu.stat (nr_periods, nr_throttled, throttled_time in ns)."""
        out = {}
        for group in sorted(p for p in self.root.iterdir() if p.is_dir()) if self.root.exists() else []:
            with contextlib.suppress(OSError):
                out[group.name] = {k: int(v) for k, v in (line.split() for line in
                                                          (group / "cpu.stat").read_text().splitlines())}
        return out


def remove_stale() -> list[str]:
    """Remove the cgroups that quotas of processes no longer alive left behind; their names."""
    return cgroup_v1.remove_stale(CPU_ROOT, _PREFIX)
