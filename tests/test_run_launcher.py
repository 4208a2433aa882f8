"""``ddltrace run --launcher`` with a launcher that is not MPI's (here ``env``, which runs the command on this
machine) and no MPI compiler to be found: the job runs without the PMPI wrapper (a framework or plain job
across nodes need not use MPI), the notes say MPI calls are not recorded, the process the launcher started is
a rank, and its node agent's link to the launching process completes with a clock offset measured within its
uncertainty (one machine: the true offset is 0). No root needed."""

from __future__ import annotations

import sys

from ddltrace.cli import main
from ddltrace.collectors import launcher
from ddltrace.store import TraceStore


def test_a_launcher_job_without_mpi_runs_without_the_wrapper(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "_mpicc_of", lambda _launcher: None)
    monkeypatch.setattr(launcher, "find_tool", lambda _name: None)
    store = tmp_path / "store"
    assert main(["run", "--no-progress", "--launcher", "env", "--launcher-addr", "127.0.0.1", "--out", str(store),
                 "--", sys.executable, "-c", "import time; time.sleep(0.5)"]) == 0
    printed = capsys.readouterr()
    s = TraceStore.open(store)
    assert s.ranks == [0] and s.rank_info(0)["role"] == "process"
    assert any("the PMPI wrapper was not built, so MPI calls are not recorded" in n for n in s.manifest["notes"])
    (host, link), = s.run["node_links"].items()
    assert link["state"] == "complete" and link["shared"] is True and link["files"] == 0, printed.out
    clock = s.manifest["clock"]
    assert abs(clock["node_offsets_ns"][host]) <= clock["node_uncertainty_ns"][host]
    assert abs(clock["node_end_offsets_ns"][host]) <= clock["node_end_uncertainty_ns"][host]
    assert "rss_bytes" in set(s.counters([0])["name"])


def test_a_node_that_cannot_reach_the_launching_process_still_samples(tmp_path):
    """The address given does not answer (TEST-NET-1, as a firewalled login node): the agent samples all the
    same, its notes say why there is no clock ping-pong, and the run writes its store (a shared folder here)."""
    store = tmp_path / "store"
    assert main(["run", "--no-progress", "--launcher", "env", "--launcher-addr", "192.0.2.1", "--out", str(store),
                 "--", sys.executable, "-c", "import time; time.sleep(0.5)"]) == 0
    s = TraceStore.open(store)
    assert any("cannot reach the launching process at 192.0.2.1:" in n for n in s.manifest["notes"])
    assert "node_links" not in s.run and "node_offsets_ns" not in (s.manifest.get("clock") or {})
    assert "rss_bytes" in set(s.counters([0])["name"])
