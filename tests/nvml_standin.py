"""The part of pynvml's interface that every NVML stand-in of the GPU sampler's tests answers alike: one GPU, and
the constants the sampler passes back (the real library needs an NVIDIA driver)."""

from __future__ import annotations


class OneGpuNvml:
    """A machine of one GPU; a subclass answers the per-device readings."""

    NVML_CLOCK_SM, NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 1, 0, 1

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i
