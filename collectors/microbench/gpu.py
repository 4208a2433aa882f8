"""GPU description through NVML (nvidia-ml-py) and, when torch is installed, copy bandwidths and GEMM rates.

Without a GPU (no driver, no device, no NVML library) :func:`describe` returns an empty list and the reason,
which ``ddltrace calibrate`` prints as one line.
"""

from __future__ import annotations

import time


def describe() -> tuple[list[dict], str]:
    """([one dict per GPU: name, memory, clocks, PCIe generation and width], '') or ([], why there is none)."""
    try:
        import pynvml
    except ImportError:
        return [], "no GPU: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], f"no GPU: NVML cannot start ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return [], "no GPU: NVML sees no device"
        gpus = []
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append({
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                "sm_clock_max_hz": _safe(lambda h=h: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) * 1e6),
                "mem_clock_max_hz": _safe(lambda h=h: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM) * 1e6),
                "pcie_generation": _safe(lambda h=h: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                "pcie_generation_max": _safe(lambda h=h: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
                "pcie_width": _safe(lambda h=h: pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
                "pcie_width_max": _safe(lambda h=h: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
            })
        return gpus, ""
    finally:
        pynvml.nvmlShutdown()


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - NVML raises per-field "not supported" on some boards
        return None


def torch_rates(device: int = 0, quick: bool = True) -> tuple[dict, str]:
    """Host-to-device and device-to-host bandwidth (B/s, pinned memory) and GEMM rate (multiply-adds/s) per
    dtype on ``device`` with torch; ({}, why not) without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return {}, "torch is not installed: no copy bandwidths or GEMM rates"
    if not torch.cuda.is_available():
        return {}, "torch sees no CUDA device"
    dev = torch.device("cuda", device)
    nbytes = (256 if quick else 1024) * 2**20
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)

    def timed(fn, reps=5):
        fn()
        torch.cuda.synchronize(dev)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(dev)
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2], times

    rates: dict = {}
    t, ts = timed(lambda: gpu.copy_(host, non_blocking=True))
    rates["h2d_bytes_per_s"] = {"value": nbytes / t, "values": [nbytes / x for x in ts]}
    t, ts = timed(lambda: host.copy_(gpu, non_blocking=True))
    rates["d2h_bytes_per_s"] = {"value": nbytes / t, "values": [nbytes / x for x in ts]}
    rates.update(gemm_rates(timed, dev, 4096 if quick else 8192))
    return rates, ""


def gemm_rates(timed, dev, n: int) -> dict:
    """GEMM rate (multiply-adds/s) of two random ``n`` x ``n`` matrices on ``dev`` per dtype (f32, tf32, f16, bf16,
    f64), ``timed(fn)`` giving (median seconds, every run's seconds) of ``fn``. TF32 is allowed
    (``torch.backends.cuda.matmul.allow_tf32``) for the tf32 GEMM alone; the flag is set back to the value it had
    (the user's), also when a timing raises."""
    import torch

    found = torch.backends.cuda.matmul.allow_tf32
    rates = {}
    try:
        for name, dtype in (("f32", torch.float32), ("tf32", torch.float32), ("f16", torch.float16),
                            ("bf16", torch.bfloat16), ("f64", torch.float64)):
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            t, ts = timed(lambda a=a, b=b: a @ b)
            rates[f"gemm_{name}_muladd_per_s"] = {"value": n**3 / t, "values": [n**3 / x for x in ts]}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = found
    return rates
