"""The framework tier: each framework's virtual environment (made by `make test-frameworks`), and a
helper that runs `ddltrace run --framework` on a job as a user would."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).parent / "jobs"
VENVS = {"pytorch": "torch", "mxnet": "mxnet", "tf": "tf", "horovod": "horovod"}


@pytest.fixture
def framework_python():
    """``framework_python("mxnet")``: the Python of that framework's venv (.venvs/<name>), or a skip."""
    def find(name: str) -> Path:
        python = REPO / ".venvs" / VENVS.get(name, name) / "bin" / "python"
        if not python.exists():
            pytest.skip(f"no {python} (make test-frameworks builds it)")
        return python
    return find


def ddltrace_run(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    """``ddltrace run ARGS`` in a subprocess (the CLI exactly as a user starts it); output kept for the assert
    messages."""
    env = {k: v for k, v in os.environ.items() if k != "DDLTRACE_FRAMEWORK_TESTS"}
    return subprocess.run([sys.executable, "-m", "ddltrace", "run", "--no-progress", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a job's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def report_verdict(store: Path, out: Path) -> str:
    """The category `ddltrace report` names as the largest share of the workers' time."""
    from ddltrace.cli import main

    assert main(["report", str(store), "--out", str(out), "--quiet"]) == 0
    text = (out / "report.md").read_text().replace("\\", "")
    return re.search(r"largest share of time is (\w+)", text).group(1)
