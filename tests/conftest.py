"""Shared fixtures: a small real store built through the public API."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sample_traces"))


@pytest.fixture
def tiny_store(tmp_path):
    """The sample store of sample_traces/make_sample_store.py, written to a temporary folder."""
    import make_sample_store

    from ddltrace.store import write_store
    from ddltrace.timeline import make_counters, make_timeline

    rows, counters = make_sample_store.build()
    return write_store(tmp_path / "tiny", make_timeline(rows), make_counters(counters),
                       run={"command": "python job.py", "world_size": 4},
                       rank_info={r: {"host": "node0", "ended": "normal"} for r in range(4)})

# The framework tier (tests/frameworks/: real TensorFlow, MXNet and PyTorch jobs, each in its own virtual
# environment) runs with `make test-frameworks`, not in the default suite.
collect_ignore = [] if os.environ.get("DDLTRACE_FRAMEWORK_TESTS") else ["frameworks"]
