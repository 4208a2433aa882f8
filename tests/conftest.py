"""Shared fixtures: a small real store built through the public API."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "sample_traces"))


# The property tests (tests/test_import_fuzz.py, tests/test_damaged_store.py) draw new cases on every run of `make
# test`, and every case they ever failed on is pinned as an @example. DDLTRACE_HYPOTHESIS=ci (.ci/run) draws the same
# cases each run instead, so that CI judges a change on the code it brings, not on the draw.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("DDLTRACE_HYPOTHESIS"):
    settings.load_profile(os.environ["DDLTRACE_HYPOTHESIS"])


@pytest.fixture(scope="session")
def hung_job(tmp_path_factory):
    """test_faults' hung job (rank 2 asleep, the others at a barrier) under `ddltrace run --np 3`, stopped by Ctrl-C:
    (its store, the hang finding of `analyze --json`). Run once for the tests of two files (8 s a run)."""
    from test_faults import HUNG_JOB, stopped_by_ctrl_c

    return stopped_by_ctrl_c(tmp_path_factory.mktemp("hung"), HUNG_JOB)


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

#: Test files that run alone, after the others (``make test``: the rest on several processes first, pytest-xdist):
#: what they measure or make would change with another test beside them. Simulated nodes and shaped links (a link's
#: rate, /etc/hosts), cgroup quotas and throttles, timed calibrations and the predictions checked against real runs,
#: real MPI jobs whose waits, stragglers and overheads are the figures, signals sent to running jobs, and real Dask
#: clusters with their timeouts.
SERIAL = {
    # simulated nodes, shaped links
    "test_cluster", "test_demo_cluster", "test_merge_cli", "test_node_link", "test_node_link_lost",
    "test_node_traffic", "test_probe", "test_probe_netns", "test_run_cluster", "test_run_cluster_local",
    "test_run_cluster_node_killed", "test_run_cluster_process", "test_slow_link", "test_slow_node",
    "test_slow_node_cluster",
    # cgroups, loop disks, calibrations and the predictions made from them
    "test_calibrate", "test_conv_algorithms_fields", "test_disk_throttle", "test_microbench",
    "test_model_cpu_shares", "test_model_init_on_b", "test_model_transfer", "test_model_transfer_share",
    "test_new_hardware", "test_new_hardware_b_runs",
    "test_quota_stretches",
    # real jobs and what they measure, signals
    "test_detectors", "test_faults", "test_frameworks_bootstrap", "test_interrupted_shares", "test_pmpi",
    "test_pmpi_comm_ids", "test_pmpi_comm_spawn", "test_pmpi_openmpi", "test_rank_ended_first", "test_pmpi_sendrecv",
    "test_run", "test_run_abrupt", "test_run_interrupted", "test_run_launcher", "test_run_seen_alive",
    "test_samplers", "test_wait_states", "test_workload_job",
    # real Dask clusters and worker pools, with timeouts
    "test_dask_cluster", "test_executor",
}


def pytest_collection_modifyitems(config, items):
    unknown = sorted(name for name in SERIAL if not (REPO / "tests" / f"{name}.py").exists())
    if unknown:  # a renamed file would otherwise leave the serial part without a word
        raise pytest.UsageError(f"tests/conftest.py: SERIAL names no such test file: {', '.join(unknown)}")
    for item in items:
        if item.path.stem in SERIAL:
            item.add_marker(pytest.mark.serial)


# The framework tier (tests/frameworks/: real TensorFlow, MXNet and PyTorch jobs, each in its own virtual
# environment) runs with `make test-frameworks`, not in the default suite.
collect_ignore = [] if os.environ.get("DDLTRACE_FRAMEWORK_TESTS") else ["frameworks"]
