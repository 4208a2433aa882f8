"""GPU sampler on NVML (nvidia-smi's view), through pynvml (the nvidia-ml-py package).

Counters per GPU ``i`` (machine rank -1): ``gpuI_util_percent``, ``gpuI_mem_util_percent``,
``gpuI_mem_used_bytes``, ``gpuI_power_watts``, ``gpuI_sm_clock_mhz``, ``gpuI_pcie_rx_bytes_per_s``,
``gpuI_pcie_tx_bytes_per_s``; per process (keyed by pid, mapped to its rank by the launcher):
``gpuI_mem_used_bytes``. A value NVML does not give on this GPU is left out.

With no NVIDIA driver (or no GPU) :attr:`GpuSampler.available` is False, :attr:`reason` says why, and the
sampler does nothing else: the launcher writes the reason into the manifest's notes.
"""

from __future__ import annotations

import threading
import time

from ddltrace.collectors.system_sampler import check_rate

MACHINE = -1


def _nvml():
    import pynvml  # nvidia-ml-py

    return pynvml


class GpuSampler:
    """Sample every GPU at ``hz`` (per second) until :meth:`stop`."""

    def __init__(self, hz: float = 10.0):
        check_rate(hz)
        self.hz = hz
        self.rows: list[tuple[int, str, int, float]] = []
        self.available = False
        self.reason = ""
        self.devices: list[str] = []
        self._handles: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            nvml = _nvml()
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.devices = [_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError, ...
            self.reason = f"GPU sampler off: NVML not usable here ({type(exc).__name__}: {exc})"
            return
        if not self._handles:
            self.reason = "GPU sampler off: NVML found no GPU"
            return
        self.available = True

    def start(self) -> GpuSampler:
        if self.available:
            self._thread = threading.Thread(target=self._loop, name="ddltrace-gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> list[tuple[int, str, int, float]]:
        """Stop and return rows (pid or -1, name, t_ns, value)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.available:
            try:
                _nvml().nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass
        return self.rows

    def _loop(self) -> None:
        period = 1.0 / self.hz
        while not self._stop.wait(period):
            self.sample()

    def sample(self) -> None:
        nvml = _nvml()
        t_ns = time.time_ns()
        for i, h in enumerate(self._handles):
            p = f"gpu{i}_"
            util = self._read(nvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                self.rows += [(MACHINE, p + "util_percent", t_ns, float(util.gpu)),
                              (MACHINE, p + "mem_util_percent", t_ns, float(util.memory))]
            mem = self._read(nvml.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                self.rows.append((MACHINE, p + "mem_used_bytes", t_ns, float(mem.used)))
            for name, value, scale in (
                ("power_watts", self._read(nvml.nvmlDeviceGetPowerUsage, h), 1e-3),  # mW
                ("sm_clock_mhz", self._read(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM), 1.0),
                ("pcie_rx_bytes_per_s", self._read(nvml.nvmlDeviceGetPcieThroughput, h,
                                                   nvml.NVML_PCIE_UTIL_RX_BYTES), 1024.0),  # KB/s
                ("pcie_tx_bytes_per_s", self._read(nvml.nvmlDeviceGetPcieThroughput, h,
                                                   nvml.NVML_PCIE_UTIL_TX_BYTES), 1024.0),
            ):
                if value is not None:
                    self.rows.append((MACHINE, p + name, t_ns, float(value) * scale))
            try:
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if proc.usedGpuMemory is not None:
                        self.rows.append((int(proc.pid), p + "mem_used_bytes", t_ns, float(proc.usedGpuMemory)))
            except Exception:  # noqa: BLE001 - not supported on this GPU
                pass

    @staticmethod
    def _read(query, *args):
        """``query(*args)``, or None where NVML does not give it (NVML_ERROR_NOT_SUPPORTED and friends)."""
        try:
            return query(*args)
        except Exception:  # noqa: BLE001 - any NVML error means: value not available
            return None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
