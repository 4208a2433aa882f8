"""HTA's own figures for the tests that compare with it: HTA (HolisticTraceAnalysis) runs in its own venv,
.venvs/hta (``make hta``), through the benchmark's child script; the tests skip,
saying so, where it is absent. Each trace folder is given to HTA once per test session."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HTA_VENV = REPO / ".venvs" / "hta"
HTA_PYTHON = HTA_VENV / "bin" / "python"
#: HTA's package in its venv (a venv whose install failed half-way has a python but no ``hta``).
HTA_INSTALLED = HTA_PYTHON.exists() and any(HTA_VENV.glob("lib/python*/site-packages/hta/__init__.py"))
NEEDS_HTA = pytest.mark.skipif(not HTA_INSTALLED, reason=f"HTA is not installed in {HTA_VENV} ('make hta' makes "
                                                         f"it; 'make test' tries to)")


def _benchmark(name: str):
    """The module of ``benchmarks/NAME.py`` (its HTA child script is what the tests run)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def hta_figures(folder: Path, rounding: bool = True) -> dict:
    """Per rank (a str key), what benchmarks/gpu_vs_hta.py's HTA child computes on the ``*.json.gz`` of
    ``folder``: temporal breakdown, overlap, launch statistics and queue lengths. ``rounding=False``: with HTA's
    rounding of nanosecond times to whole microseconds switched off (``HTA_DISABLE_NS_ROUNDING=1``)."""
    bench = _benchmark("gpu_vs_hta")
    with tempfile.TemporaryDirectory() as tmp:
        for f in folder.glob("*.json.gz"):
            shutil.copy(f, Path(tmp) / f.name)
        done = subprocess.run([str(HTA_PYTHON), "-c", bench._HTA_CHILD, tmp, "all"], capture_output=True,
                              text=True, check=True,
                              env={**os.environ, **({} if rounding else {bench.HTA_NO_ROUNDING: "1"})})
    return json.loads(done.stdout.strip().splitlines()[-1])


@functools.cache
def hta_trace_diff(control: Path, test: Path, device: str) -> dict:
    """HTA's trace diff (benchmarks/trace_diff_vs_hta.py's child) of the ``*.json.gz`` of two folders for ``device``
    ("ALL", "CPU", "GPU"): ``names``, per name [control count, test count, control µs, test µs]; ``changes``, the
    names per change of ``ops_diff``."""
    with tempfile.TemporaryDirectory() as tmp:
        for side, folder in (("c", control), ("t", test)):
            (Path(tmp) / side).mkdir()
            for f in folder.glob("*.json.gz"):
                shutil.copy(f, Path(tmp) / side / f.name)
        done = subprocess.run([str(HTA_PYTHON), "-c", _benchmark("trace_diff_vs_hta").HTA_CHILD, f"{tmp}/c", f"{tmp}/t",
                               device], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
