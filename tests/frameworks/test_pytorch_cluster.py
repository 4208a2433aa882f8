"""A real torch 2.13 gloo DDP job across 2 simulated nodes (collectors/cluster.py): `torchrun --nnodes 2` with
c10d rendezvous on node 0, started on each node by MPICH's hydra as a plain process starter, under
`ddltrace run --framework pytorch --launcher ...`, the store's folder on each node's own disk (node-local
`--out`: each node's profiles and samples are gathered at the end). Each node's worker becomes its rank with
its node's host;
the node agents' clock ping-pong with the launching process removes a clock offset injected on node 1 (test
hook), within its stated uncertainty, and puts node 1's framework events back on the common clock.

Needs root, iproute2, util-linux, MPICH (hydra) and .venvs/torch; skips with the reason where any is missing."""

from __future__ import annotations

import pytest
from conftest import JOBS, ddltrace_run

from ddltrace.collectors import cluster as cl
from ddltrace.collectors.mpi_env import find_tool
from ddltrace.store import TraceStore

MPIEXEC = find_tool("mpiexec")
OFFSET_NS = 200_000_000  # node 1's collectors' clock 200 ms ahead: far more than the ranks' step skew

pytestmark = [pytest.mark.skipif(cl.missing_tools() is not None, reason=str(cl.missing_tools())),
              pytest.mark.skipif(MPIEXEC is None, reason="MPICH's mpiexec (the mpich wheel) not installed")]


def test_torchrun_across_two_nodes(framework_python, tmp_path, monkeypatch):
    python = framework_python("pytorch")
    local = tmp_path / "local"
    local.mkdir()
    store = local / "store"
    with cl.Cluster(2) as cluster:
        cluster.local_disk(local)
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")  # gloo's address: the node's own interface
        monkeypatch.setenv("DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS", f"{cluster.nodes[1].host}:{OFFSET_NS}")
        result = ddltrace_run("--framework", "pytorch", "--steps", "3-6", "--launcher",
                              cluster.mpiexec(MPIEXEC, ppn=1), "--launcher-addr", cluster.host_addr,
                              "--out", store, "--", python, "-m", "torch.distributed.run", "--nnodes", "2",
                              "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                              f"{cluster.nodes[0].host}:29511", JOBS / "torch_ddp.py", "--steps", "8",
                              "--width", "256", "--batch", "64")
        hosts = [n.host for n in cluster.nodes]
    assert result.returncode == 0, result.stderr[-3000:]
    s = TraceStore.open(store)
    assert s.ranks == [0, 1] and s.world_size == 2 and s.run["framework"] == "pytorch"
    assert sorted(s.rank_info(r)["host"] for r in s.ranks) == hosts
    assert all(s.rank_info(r)["backend"] == "gloo" for r in s.ranks)
    assert set(s.run["nodes"]) == set(hosts)
    # each node's part (its worker's profile, its agent's samples) came over the node agent's link
    links = s.run["node_links"]
    assert {h: (link["state"], link["shared"]) for h, link in links.items()} == dict.fromkeys(hosts,
                                                                                              ("complete", False))
    assert all(link["files"] >= 3 for link in links.values())
    names = set(s.counters([-1])["name"])
    assert {f"cpu_percent@{h}" for h in hosts} <= names and {f"net_eth0_sent_bytes@{h}" for h in hosts} <= names
    clock = s.manifest["clock"]
    for host, injected in zip(hosts, (0, OFFSET_NS), strict=True):
        for at in ("node_offsets_ns", "node_end_offsets_ns"):
            unc = clock[at.replace("offsets", "uncertainty")][host]
            assert abs(clock[at][host] + injected) <= unc, (host, at, clock)
    # gloo's all-reduce ties the ranks' steps together: on the common clock they start together (not 200 ms
    # apart, as node 1's uncorrected events would)
    timeline = s.timeline()
    steps = timeline[timeline["name"].str.startswith("ProfilerStep#")]
    starts = steps.pivot_table(index="name", columns="rank", values="start_ns", aggfunc="min").dropna()
    assert len(starts) >= 3
    skew = (starts[1] - starts[0]).abs().median()
    assert skew < OFFSET_NS / 4, starts
