"""The NVML sampler's counters joined with the trace (analyses/gpu_counters.py), through the sampler's own code
path: there is no GPU here, so a stand-in for pynvml replays a recorded sequence of readings (one per sample:
utilisation, memory, power, SM clock, PCIe), ``GpuSampler.sample`` reads them as it reads NVML, the launcher's
``_counters`` turns its rows into the machine's counters, and a store holds them beside a device timeline laid
over the sampling period. Every joined figure is checked against the samples the sampler returned."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
from nvml_standin import OneGpuNvml

from ddltrace.analyses.run_analysis import analyze_store, not_made
from ddltrace.cli import main
from ddltrace.collectors import gpu_sampler
from ddltrace.collectors.launcher import _counters
from ddltrace.store import write_store

#: Readings per sample: kernel and memory utilisation (%), memory used (MiB), power (mW), SM clock (MHz),
#: PCIe receive and transmit (KB/s): idle, a burst of training steps, idle again.
RECORDED = [(0, 0, 900, 61_000, 345, 20, 10), (0, 0, 900, 62_000, 345, 25, 12), (93, 41, 30_100, 296_000, 1980,
            180_000, 9_000), (97, 45, 30_200, 301_000, 1980, 175_000, 8_800), (95, 44, 30_200, 299_000, 1965,
            182_000, 9_100), (98, 47, 30_300, 305_000, 1980, 178_000, 9_000), (41, 12, 30_300, 140_000, 1410,
            60_000, 3_000), (0, 0, 30_300, 70_000, 345, 30, 15)]


class ReplayedNvml(OneGpuNvml):
    """pynvml's calls the sampler makes, answering each sample with the next recorded reading."""

    def __init__(self, readings):
        self.readings = list(readings)
        self.now = None

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetUtilizationRates(self, h):
        self.now = self.readings.pop(0)  # the first call of a sample
        return type("Util", (), {"gpu": self.now[0], "memory": self.now[1]})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Mem", (), {"used": self.now[2] * 2**20})()

    def nvmlDeviceGetPowerUsage(self, h):
        return self.now[3]

    def nvmlDeviceGetClockInfo(self, h, which):
        return self.now[4]

    def nvmlDeviceGetPcieThroughput(self, h, which):
        return self.now[5] if which == self.NVML_PCIE_UTIL_RX_BYTES else self.now[6]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []


@pytest.fixture
def sampled(monkeypatch, tmp_path):
    """A store: the sampler's counters of the recorded readings, and a device timeline from the third sample to
    the seventh (kernels of 1 ms every 2 ms)."""
    nvml = ReplayedNvml(RECORDED)
    monkeypatch.setattr(gpu_sampler, "_nvml", lambda: nvml)
    sampler = gpu_sampler.GpuSampler(hz=100)
    assert sampler.available
    for _ in RECORDED:
        sampler.sample()
        time.sleep(0.003)  # samples apart in time, as the sampler's thread takes them
    rows = sampler.stop()
    counters = _counters(rows, {})[-1]
    times = sorted(set(counters["t_ns"]))
    lo, hi = times[2], times[6]
    starts = np.arange(lo, hi - 1_000_000, 2_000_000)
    timeline = pd.DataFrame({"rank": 0, "lane": "gpu:0/stream 7", "name": "sm80_xmma_gemm", "category": "compute",
                             "start_ns": starts, "dur_ns": 1_000_000})
    timeline.loc[len(timeline) - 1, "dur_ns"] = hi - int(starts[-1])  # the last kernel ends at the 7th sample
    store = write_store(tmp_path / "store", timeline, counters=counters, run={"world_size": 1})
    return store.path, counters, (lo, hi), timeline


def test_counters_in_the_device_window_beside_the_trace_busy_share(sampled):
    path, counters, (lo, hi), timeline = sampled
    run = analyze_store(path)
    assert "nvml" in run.capabilities
    from ddltrace.analyses.gpu_counters import joined

    table = joined(run.nvml, run.gpu.temporal_table()).set_index("counter")
    inside = counters[(counters["t_ns"] >= lo) & (counters["t_ns"] <= hi)]
    assert len(set(inside["t_ns"])) == 5  # samples 3 to 7
    for name, unit in (("util_percent", "%"), ("mem_used_bytes", "bytes"), ("power_watts", "W"),
                       ("sm_clock_mhz", "MHz"), ("pcie_rx_bytes_per_s", "bytes/s")):
        values = inside[inside["name"] == f"gpu0_{name}"]["value"]
        got = table.loc[name]
        assert got["samples"] == 5 and got["unit"] == unit
        assert got["mean"] == pytest.approx(values.mean()) and got["max"] == values.max()
        assert got["min"] == values.min()
    # the recorded readings, in the sampler's units: 93-98 % busy, 41 % at the window's end
    assert table.loc["util_percent", "mean"] == pytest.approx((93 + 97 + 95 + 98 + 41) / 5)
    assert table.loc["power_watts", "max"] == 305.0 and table.loc["pcie_rx_bytes_per_s", "min"] == 60_000 * 1024
    busy = timeline["dur_ns"].sum() / (hi - lo)
    assert table.loc["util_percent", "trace_busy_share"] == pytest.approx(busy)


def test_analyze_and_report_show_the_counters(sampled, tmp_path, capsys):
    path, *_ = sampled
    capsys.readouterr()
    assert main(["analyze", str(path)]) == 0
    text = capsys.readouterr().out
    assert "NVML counters in each device's window" in text and "power_watts" in text
    assert main(["analyze", str(path), "--json"]) == 0
    nvml = json.loads(capsys.readouterr().out)["stores"][0]["gpu"]["nvml"]
    assert {r["counter"] for r in nvml} >= {"util_percent", "power_watts", "pcie_tx_bytes_per_s"}
    out = tmp_path / "report"
    assert main(["report", str(path), "--out", str(out)]) == 0
    assert (out / "gpu_nvml.png").is_file() and "NVML counters" in (out / "report.md").read_text()


def test_without_counters_the_join_is_not_made(tmp_path):
    timeline = pd.DataFrame({"rank": 0, "lane": "gpu:0/stream 7", "name": "k", "category": "compute",
                             "start_ns": [0, 2_000_000], "dur_ns": 1_000_000})
    run = analyze_store(write_store(tmp_path / "store", timeline).path)
    reasons = {s.analysis: s.reason for s in not_made([run])}
    assert "NVML sampler's GPU counters" in reasons["gpu_nvml"]
