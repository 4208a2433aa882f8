"""``ddltrace calibrate``'s GEMM rates with torch (collectors/microbench/gpu.py) leave the user's TF32 setting as
they found it. Framework tier: torch is not in the default test venv; this runs in .venvs/torch (torch 2.13 CPU)."""

from __future__ import annotations

import json
import subprocess

from conftest import REPO

#: Run in the torch venv: the real ``gemm_rates`` of gpu.py (loaded from its file: that venv has torch, not
#: ddltrace) with ``torch.backends.cuda.matmul.allow_tf32`` first True, then False, on the CPU with a timer that
#: records the flag at each timing; once as it is, once with the third timing raising. JSON on stdout.
SCRIPT = r"""
import importlib.util, json, sys, time
import torch

spec = importlib.util.spec_from_file_location("gpu", sys.argv[1])
gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu)
assert not torch.cuda.is_available()


def cpu_timed(fn):
    seen.append(torch.backends.cuda.matmul.allow_tf32)
    if len(seen) == fail_at:
        raise RuntimeError("timing failed")
    start = time.perf_counter()
    fn()
    took = max(time.perf_counter() - start, 1e-9)
    return took, [took]


results = []
for before in (True, False):
    for fail_at in (None, 3):
        torch.backends.cuda.matmul.allow_tf32 = before
        seen, rates, raised = [], {}, None
        try:
            rates = gpu.gemm_rates(cpu_timed, torch.device("cpu"), 8)
        except RuntimeError as exc:
            raised = str(exc)
        results.append(dict(before=before, fail_at=fail_at, seen=seen, raised=raised, rates=sorted(rates),
                            after=torch.backends.cuda.matmul.allow_tf32))
print(json.dumps(results))
"""


def test_gemm_rates_restore_the_users_tf32_setting(framework_python):
    """No GPU can exist here (the machine has none; torch is the CPU wheel), so the CUDA-dependent part of
    ``torch_rates`` (the copies to and from the device, and its timer, which synchronises the device) is replaced by
    a CPU timer and the GEMMs run on the CPU; what is tested is the real ``gemm_rates``' handling of
    ``torch.backends.cuda.matmul.allow_tf32``, which torch lets one set and read without CUDA: TF32 allowed for the
    tf32 GEMM alone, and the flag set back to the value the user had, True or False, also when a timing raises
    (before: it was left False whatever it had been, and as the tf32 GEMM left it after an exception)."""
    python = framework_python("pytorch")
    done = subprocess.run([str(python), "-c", SCRIPT, str(REPO / "collectors" / "microbench" / "gpu.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    gemms = sorted(f"gemm_{name}_muladd_per_s" for name in ("f32", "tf32", "f16", "bf16", "f64"))
    assert [(r["before"], r["fail_at"]) for r in results] == [(True, None), (True, 3), (False, None), (False, 3)]
    for r in results:
        assert r["after"] is r["before"], r
        if r["fail_at"] is None:
            assert (r["seen"], r["raised"], r["rates"]) == ([False, True, False, False, False], None, gemms), r
        else:
            assert (r["seen"], r["raised"], r["rates"]) == ([False, True, False], "timing failed", []), r
