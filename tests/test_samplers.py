"""System sampler (psutil), GPU sampler without a driver, py-spy stacks (real, and refused)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import time

import psutil
import pytest
from nvml_standin import OneGpuNvml

from ddltrace.collectors import loop_disk
from ddltrace.collectors.gpu_sampler import GpuSampler
from ddltrace.collectors.launcher import RunConfig, run_job
from ddltrace.collectors.mpi_env import find_tool
from ddltrace.collectors.pyspy_stacks import PySpyRecorder, stacks_to_rows
from ddltrace.collectors.system_sampler import MACHINE, SystemSampler
from ddltrace.store import TraceStore


def test_system_sampler_sees_the_machine_and_the_process_tree():
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1: pass"])
    try:
        sampler = SystemSampler(hz=20, root_pid=os.getpid()).start()
        time.sleep(0.6)
        rows = sampler.stop()
    finally:
        child.kill()
        child.wait()
    names = {(key == MACHINE, name) for key, name, _, _ in rows}
    for name in ("cpu_percent", "cpu0_percent", "mem_used_bytes", "mem_available_bytes", "disk_read_bytes_per_s",
                 "net_sent_bytes_per_s", "ctx_switches_per_s", "job_cpu_percent", "job_rss_bytes"):
        assert (True, name) in names, name
    ncpu = psutil.cpu_count()
    cpu = [v for k, n, _, v in rows if k == MACHINE and n == "cpu_percent"]
    assert len(cpu) >= 5 and all(0 <= v <= 100 for v in cpu)
    child_cpu = [v for k, n, _, v in rows if k == child.pid and n == "cpu_percent"]
    assert child_cpu and max(child_cpu) > 20 and max(child_cpu) <= 100 * ncpu  # the busy child shows
    assert any(k == os.getpid() and n == "rss_bytes" and v > 10e6 for k, n, _, v in rows)
    times = [t for k, n, t, _ in rows if k == MACHINE and n == "cpu_percent"]
    assert times == sorted(times)
    with pytest.raises(ValueError):
        SystemSampler(hz=0)


def test_a_processs_cpu_at_a_high_rate_is_a_rate_over_enough_clock_ticks():
    """A process busy half of each 20 ms (a loop of 10 ms busy, 10 ms asleep) sampled at 100 Hz: CPU time comes in
    10 ms ticks, so a rate over one 10 ms sample read 0, 100, 200 or 300 % (QA); over the sampler's 0.2 s window
    every sample is within 30 points of the mean (on a busy machine the child gets less than its half of a core:
    the mean is no more than its 50 %)."""
    code = ("import time\nend = time.time() + 2.5\nwhile time.time() < end:\n    t = time.time()\n"
            "    while time.time() - t < 0.01: pass\n    time.sleep(0.01)\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        sampler = SystemSampler(hz=100, root_pid=child.pid).start()
        time.sleep(2.0)
        rows = sampler.stop()
    finally:
        child.kill()
        child.wait()
    cpu = [v for k, n, _, v in rows if k == child.pid and n == "cpu_percent"]
    assert len(cpu) > 100, len(cpu)  # at the sampling rate, from 0.2 s on
    mean = sum(cpu) / len(cpu)
    assert 10 <= mean <= 60 and all(abs(v - mean) <= 30 for v in cpu), (mean, sorted(cpu)[:3] + sorted(cpu)[-3:])


def test_gpu_sampler_without_driver_records_why_and_does_nothing():
    gpu = GpuSampler(hz=10)
    if gpu.available:
        pytest.skip(f"this machine has an NVIDIA driver and {len(gpu.devices)} GPU(s)")
    assert "NVML" in gpu.reason or "GPU" in gpu.reason
    gpu.start()
    time.sleep(0.2)
    assert gpu.stop() == []


def test_pyspy_chrometrace_becomes_stack_rows(tmp_path):
    events = [
        {"ph": "B", "name": "<module>", "ts": 0, "tid": 1, "args": {"filename": "/x/train.py", "line": 3}},
        {"ph": "B", "name": "load", "ts": 10, "tid": 1, "args": {"filename": "/x/data.py", "line": 7}},
        {"ph": "E", "name": "load", "ts": 40, "tid": 1, "args": {"filename": "/x/data.py", "line": 7}},
        {"ph": "E", "name": "<module>", "ts": 50, "tid": 1, "args": {"filename": "/x/train.py", "line": 3}},
    ]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    rows = stacks_to_rows(path, start_ns=1_000_000)
    assert list(rows["name"]) == ["<module> (train.py:3)", "<module> (train.py:3);load (data.py:7)",
                                  "<module> (train.py:3)"]
    assert list(rows["start_ns"]) == [1_000_000, 1_010_000, 1_040_000]
    assert list(rows["dur_ns"]) == [10_000, 30_000, 10_000]
    assert set(rows["lane"]) == {"python"}


JOB = "import time\ndef load_batch():\n    t = time.time()\n    while time.time() - t < 0.05: pass\n" \
      "for _ in range(12): load_batch()\n"


def test_pyspy_samples_a_python_job(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py")], out=tmp_path / "store",
                               pyspy=True, pyspy_rate_hz=50, stream=io.StringIO()))
    store = TraceStore.open(tmp_path / "store")
    if any("ptrace not permitted" in n for n in result.notes):
        pytest.skip("ptrace is not permitted on this machine")
    tl = store.timeline()
    stacks = tl[tl["lane"] == "python"]
    assert len(stacks) and set(stacks["source"]) == {"py-spy"}
    assert stacks["name"].str.contains("load_batch (job.py:4)", regex=False).any()


def test_pyspy_stacks_of_a_process_that_is_not_a_rank_are_said_not_kept(tmp_path):
    """The command is a shell that starts the Python job: py-spy samples the job, but the store holds the command's
    process (the shell) only, so the job's stacks are not kept, and a note says so with its pid (QA: 0 stacks, and
    nothing said)."""
    (tmp_path / "job.py").write_text(JOB)
    result = run_job(RunConfig(argv=["sh", "-c", f"{sys.executable} {tmp_path / 'job.py'}; true"],
                               out=tmp_path / "store", pyspy=True, pyspy_rate_hz=50, stream=io.StringIO()))
    if any("ptrace not permitted" in n for n in result.notes):
        pytest.skip("ptrace is not permitted on this machine")
    said = [n for n in result.notes if n.startswith("py-spy stacks of 1 Python process(es) that are not a rank")]
    assert said and "are not kept" in said[0], result.notes
    assert said[0] in TraceStore.open(tmp_path / "store").manifest["notes"]


# Each rank alternates a busy function and a sleeping one and logs when each ran (time.time_ns, the clock the
# store's rows are on). py-spy leaves idle samples out unless told --idle, and its chrometrace then keeps the
# last busy stack open across the sleep: every sleep was attributed to the busy function, and the sleeping one
# never appeared (hot_loop 1.51 s where the job measured 1.20 s busy and 0.80 s asleep).
HOT_AND_IDLE_JOB = """
import json, sys, time
from mpi4py import MPI
def hot_loop(sec):
    end = time.perf_counter() + sec
    while time.perf_counter() < end:
        pass
def idle_wait(sec):
    time.sleep(sec)
comm = MPI.COMM_WORLD
time.sleep(1.0)  # py-spy attaches to the ranks within about 0.5 s of their start
sleeps = []
for _ in range(3):
    hot_loop(0.2)
    t = time.time_ns()
    idle_wait(0.2)
    sleeps.append((t, time.time_ns()))
json.dump(sleeps, open(sys.argv[1] + f"/rank{comm.Get_rank()}.json", "w"))
comm.Barrier()
"""


@pytest.mark.skipif(find_tool("mpiexec") is None, reason="no mpiexec beside this Python")
def test_pyspy_attributes_a_sleep_to_the_sleeping_function_not_the_last_busy_one(tmp_path):
    (tmp_path / "job.py").write_text(HOT_AND_IDLE_JOB)
    result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py"), str(tmp_path)], np=2,
                               out=tmp_path / "store", pyspy=True, pyspy_rate_hz=100, stream=io.StringIO()))
    if any("ptrace not permitted" in n for n in result.notes):
        pytest.skip("ptrace is not permitted on this machine")
    assert result.exit_code == 0
    store = TraceStore.open(tmp_path / "store")
    for rank, tl in store.iter_timeline():
        stacks = tl[tl["source"] == "py-spy"]
        sleeps = json.loads((tmp_path / f"rank{rank}.json").read_text())
        asleep = sum(b - a for a, b in sleeps)
        idle = stacks[stacks["name"].str.contains("idle_wait (", regex=False)]
        assert idle["dur_ns"].sum() > asleep / 2, (rank, stacks.groupby("name")["dur_ns"].sum())
        # the busy function's rows inside the job's sleeps, less a margin of two 10 ms samples at each edge
        hot = stacks[stacks["name"].str.contains("hot_loop (", regex=False)]
        start, end = hot["start_ns"].to_numpy(), (hot["start_ns"] + hot["dur_ns"]).to_numpy()
        inside = sum(max(0, min(e, b - 20_000_000) - max(s, a + 20_000_000))
                     for a, b in sleeps for s, e in zip(start, end, strict=True))
        assert inside < asleep / 4, (rank, inside, asleep)


def test_pyspy_refused_is_said_and_the_run_goes_on(tmp_path, monkeypatch):
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Permission Denied: Try running again with elevated permissions' >&2\n"
                    "exit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("DDLTRACE_PYSPY", str(fake))
    rec = PySpyRecorder(tmp_path / "out")
    assert rec.pyspy == str(fake)
    (tmp_path / "job.py").write_text("import time\ntime.sleep(0.5)\n")
    result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py")], out=tmp_path / "store",
                               pyspy=True, stream=io.StringIO()))
    assert result.exit_code == 0
    store = TraceStore.open(tmp_path / "store")
    notes = store.manifest["notes"]
    assert any("ptrace not permitted" in n and "Permission Denied" in n for n in notes), notes
    assert store.rank_info(0)["ended"] == "normal" and len(store.timeline()) == 1


class _FakeNvml(OneGpuNvml):
    """An NVML stand-in with fixed readings, to check names and unit conversions (the real library needs
    an NVIDIA driver; on such a machine the launcher uses it unchanged)."""

    class _Util:
        gpu, memory = 87, 40

    class _Mem:
        used = 3 * 2**30

    class _Proc:
        pid, usedGpuMemory = 4242, 2**30

    def nvmlDeviceGetName(self, h):
        return b"Fake GPU"

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._Util()

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._Mem()

    def nvmlDeviceGetPowerUsage(self, h):
        return 250_000  # mW

    def nvmlDeviceGetClockInfo(self, h, which):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetPcieThroughput(self, h, which):
        return 1000 if which == self.NVML_PCIE_UTIL_RX_BYTES else 10  # KB/s

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [self._Proc()]


def test_gpu_sampler_names_and_units(monkeypatch):
    from ddltrace.collectors import gpu_sampler

    fake = _FakeNvml()
    monkeypatch.setattr(gpu_sampler, "_nvml", lambda: fake)
    gpu = GpuSampler(hz=10)
    assert gpu.available and gpu.devices == ["Fake GPU"]
    gpu.sample()
    got = {(k, n): v for k, n, _, v in gpu.rows}
    assert got[(MACHINE, "gpu0_util_percent")] == 87 and got[(MACHINE, "gpu0_mem_util_percent")] == 40
    assert got[(MACHINE, "gpu0_power_watts")] == 250.0
    assert got[(MACHINE, "gpu0_pcie_rx_bytes_per_s")] == 1000 * 1024.0
    assert got[(MACHINE, "gpu0_pcie_tx_bytes_per_s")] == 10 * 1024.0
    assert got[(MACHINE, "gpu0_mem_used_bytes")] == 3 * 2**30 and got[(4242, "gpu0_mem_used_bytes")] == 2**30
    assert (MACHINE, "gpu0_sm_clock_mhz") not in got  # not supported: left out, no crash


# Rank 0 writes 16 MB with fsync to a file system on a loop device whose file is on a real disk, and logs when.
# The loop device's writes reach that disk: both were summed, and the machine's disk_write_bytes_per_s over the
# write read twice the bytes written (40 MB for 20 MB). The job syncs first, so that what earlier tests left to write
# back (a CI machine's disk read 28.8 MB here) is on the disk before the write it times.
LOOP_WRITE_JOB = """
import json, os, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == 0:
    data = os.urandom(16_000_000)
    os.sync()
    time.sleep(0.3)
    start = time.time_ns()
    fd = os.open(os.path.join(sys.argv[1], "data.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    json.dump([start, time.time_ns()], open(sys.argv[2], "w"))
    time.sleep(0.3)
comm.Barrier()
"""


def _on_a_physical_disk(path) -> bool:
    number = os.stat(path).st_dev
    link = f"/sys/dev/block/{os.major(number)}:{os.minor(number)}"
    return os.path.exists(link) and not os.path.realpath(link).startswith("/sys/devices/virtual/")


@pytest.mark.skipif(loop_disk.missing() is not None, reason=str(loop_disk.missing()))
@pytest.mark.skipif(find_tool("mpiexec") is None, reason="no mpiexec beside this Python")
def test_disk_counters_count_a_loop_disks_writes_once(tmp_path):
    if not _on_a_physical_disk(tmp_path):
        pytest.skip(f"{tmp_path} is not on a physical disk: a loop disk there writes no disk")
    (tmp_path / "job.py").write_text(LOOP_WRITE_JOB)
    with loop_disk.LoopDisk(tmp_path, size_mib=64) as disk:
        result = run_job(RunConfig(argv=[sys.executable, str(tmp_path / "job.py"), str(disk.mount),
                                         str(tmp_path / "wrote.json")], np=2, out=tmp_path / "store",
                                   sample_hz=20, stream=io.StringIO()))
    assert result.exit_code == 0
    start, end = json.loads((tmp_path / "wrote.json").read_text())
    counters = TraceStore.open(tmp_path / "store").counters()
    rate = counters[(counters["rank"] == MACHINE) & (counters["name"] == "disk_write_bytes_per_s")]
    rate = rate.sort_values("t_ns")
    t, value = rate["t_ns"].to_numpy(), rate["value"].to_numpy()
    # each sample is the rate over the interval since the one before: the intervals that touch the write
    touches = (t[1:] > start) & (t[:-1] < end + 200_000_000)
    written = float((value[1:] * (t[1:] - t[:-1]) / 1e9)[touches].sum())
    assert 0.8 * 16e6 <= written < 1.5 * 16e6, written  # once (other writers of this disk add a little)
