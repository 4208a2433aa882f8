"""Communicators the PMPI wrapper did not see made before (MPI_Comm_spawn / spawn_multiple and MPI_Comm_get_parent,
MPI_Comm_connect / accept, MPI_Comm_join, the MPI-4 MPI_Comm_create_from_group and MPI_Intercomm_create_from_groups)
get an id agreed by their processes, across MPI worlds too; MPI_Mrecv names its sender by world rank; the calls that
make and free communicators are rows, their time MPI time.

Before, those communicators kept each process's handle (flag COMM_HANDLE: under Open MPI another in each process, no
message matched), MPI_Mrecv recorded its status's source as a rank in the probe's communicator and no communicator,
the time inside MPI_Comm_split and the like was the rank's own work ("outside MPI"), and a spawned process whose world
rank had no file among the job's wrote one as if it were a rank of the job."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ddltrace.analyses.wait_states import match_messages, mpi_calls
from ddltrace.collectors.mpi_env import find_tool, mpiexec_command
from ddltrace.collectors.pmpi import build_wrapper, read_records, to_timeline
from ddltrace.collectors.pmpi.records import COMM_HANDLE, COMM_MADE, OUTSIDE_MPI, PEER_IN_COMM
from ddltrace.errors import DdltraceError
from tests.test_pmpi_comm_ids import HAVE_MPICH, HAVE_OPENMPI, OPENMPI

#: The job (C: its spawned children are the same program). MPICH's MPI_Open_port needs its ofi netmod: under the UCX
#: one it fails ("no space for port_name tag": UCX's address does not fit MPI_MAX_PORT_NAME).
JOB = r"""
/* Parents (2 ranks): a matched probe and receive on a split, communicators from groups, one by MPI_Comm_join, and 3
   spawned children (MPI_Comm_spawn; with argument "multiple" MPI_Comm_spawn_multiple): across the spawn's
   intercommunicator, their merge, and one by connect / accept. Each communicator's messages carry its tag. */
#include <mpi.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { T_MRECV = 11, T_SPLIT, T_FROM_GROUP, T_FROM_GROUPS, T_JOIN, T_SPAWN = 21, T_MERGED, T_CONNECT, T_PORT = 99 };

static void ring(MPI_Comm c, int tag) { /* each rank to the next, from the one before */
    int rank, size, x = 0;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    MPI_Sendrecv_replace(&x, 1, MPI_INT, (rank + 1) % size, tag, (rank + size - 1) % size, tag, c,
                         MPI_STATUS_IGNORE);
}

static void across(MPI_Comm inter, int tag) { /* rank r with the other group's rank r, where it has one */
    int rank, remote, x = 0;
    MPI_Comm_rank(inter, &rank);
    MPI_Comm_remote_size(inter, &remote);
    if (rank < remote) MPI_Sendrecv_replace(&x, 1, MPI_INT, rank, tag, rank, tag, inter, MPI_STATUS_IGNORE);
}

static int joined_socket(int rank) { /* a TCP connection between ranks 0 and 1, over the loopback */
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    int port = 0, fd;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (rank == 0) {
        int ls = socket(AF_INET, SOCK_STREAM, 0);
        bind(ls, (struct sockaddr *)&a, sizeof a);
        listen(ls, 1);
        getsockname(ls, (struct sockaddr *)&a, &len);
        port = ntohs(a.sin_port);
        MPI_Send(&port, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
        fd = accept(ls, NULL, NULL);
        close(ls);
    } else {
        MPI_Recv(&port, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        a.sin_port = htons(port);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        connect(fd, (struct sockaddr *)&a, sizeof a);
    }
    return fd;
}

static void parent(const char *self, int rank, int multiple) {
    MPI_Comm split, from_group, from_groups, joined, inter, merged, conn;
    MPI_Group world, mine, other;
    MPI_Message msg;
    char port[MPI_MAX_PORT_NAME] = {0}, *child_argv[] = {"child", NULL};
    int x = 0, them = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) usleep(100000); /* rank 0 waits 100 ms in MPI_Comm_split */
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &split); /* reversed: rank r is 1 - r there */
    ring(split, T_SPLIT);
    if (rank == 0) {
        MPI_Send(&x, 1, MPI_INT, 0, T_MRECV, split); /* to world rank 1 */
    } else {
        MPI_Mprobe(MPI_ANY_SOURCE, T_MRECV, split, &msg, MPI_STATUS_IGNORE);
        MPI_Mrecv(&x, 1, MPI_INT, &msg, MPI_STATUS_IGNORE); /* from its rank 1, world rank 0 */
    }
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Comm_create_from_group(world, "ddltrace.test.group", MPI_INFO_NULL, MPI_ERRORS_RETURN, &from_group);
    ring(from_group, T_FROM_GROUP);
    MPI_Group_incl(world, 1, &rank, &mine);
    MPI_Group_incl(world, 1, &them, &other);
    MPI_Intercomm_create_from_groups(mine, 0, other, 0, "ddltrace.test.groups", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                     &from_groups);
    across(from_groups, T_FROM_GROUPS);
    MPI_Comm_join(joined_socket(rank), &joined);
    across(joined, T_JOIN);
    if (multiple) { /* the same 3 children, as 2 commands */
        char *commands[] = {(char *)self, (char *)self}, **argvs[] = {child_argv, child_argv};
        int counts[] = {2, 1};
        MPI_Info infos[] = {MPI_INFO_NULL, MPI_INFO_NULL};
        MPI_Comm_spawn_multiple(2, commands, argvs, counts, infos, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    } else {
        MPI_Comm_spawn(self, child_argv, 3, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, MPI_ERRCODES_IGNORE);
    }
    across(inter, T_SPAWN);
    MPI_Intercomm_merge(inter, 0, &merged); /* parents first */
    ring(merged, T_MERGED);
    if (rank == 0) {
        MPI_Open_port(MPI_INFO_NULL, port);
        MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, T_PORT, inter);
    }
    MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &conn);
    across(conn, T_CONNECT);
    MPI_Comm_disconnect(&conn);
    if (rank == 0) MPI_Close_port(port);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    MPI_Comm_disconnect(&joined);
    MPI_Comm_free(&from_groups);
    MPI_Comm_free(&from_group);
    MPI_Comm_free(&split);
    MPI_Group_free(&mine);
    MPI_Group_free(&other);
    MPI_Group_free(&world);
}

static void child(int rank) {
    MPI_Comm inter, merged, conn;
    char port[MPI_MAX_PORT_NAME] = {0};
    MPI_Comm_get_parent(&inter);
    across(inter, T_SPAWN);
    MPI_Intercomm_merge(inter, 1, &merged);
    ring(merged, T_MERGED);
    if (rank == 0) MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, T_PORT, inter, MPI_STATUS_IGNORE);
    MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &conn);
    across(conn, T_CONNECT);
    MPI_Comm_disconnect(&conn);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        child(rank);
    } else {
        parent(argv[0], rank, argc > 1 && strcmp(argv[1], "multiple") == 0);
    }
    MPI_Finalize();
    return 0;
}
"""
PARENTS, CHILDREN = 2, 3
#: The tags of the communicators' messages (JOB's enum): within the parents' world, and across the two worlds.
SPLIT, FROM_GROUP, FROM_GROUPS, JOIN = 12, 13, 14, 15
SPAWN, MERGED, CONNECT = 21, 22, 23
MRECV = 11
HASHED = 2**61  # runtime.h DDLT_COMM_HASHED_BIT: an id made by a hash (a communicator across worlds)
RUNS = {"mpich": (False, "spawn"), "mpich_multiple": (False, "multiple"), "openmpi_multiple": (True, "multiple")}


def run_job(tmp: Path, openmpi: bool, mode: str) -> dict:
    """JOB on PARENTS ranks under the wrapper; every process's records: ``("parent", r)`` and ``("child", r)``."""
    bin_dir = OPENMPI / "bin" if openmpi else None
    mpicc = str(bin_dir / "mpicc") if openmpi else find_tool("mpicc")
    (tmp / "job.c").write_text(JOB)
    subprocess.run([mpicc, "-o", str(tmp / "job"), str(tmp / "job.c")], check=True)
    rec = tmp / "rec"
    rec.mkdir()
    cmd, env = mpiexec_command(PARENTS, [str(tmp / "job"), mode],
                               mpiexec=str(bin_dir / "mpiexec") if openmpi else None)
    env = {**os.environ, **env, "LD_PRELOAD": str(build_wrapper(mpicc if openmpi else None)),
           "DDLTRACE_PMPI_DIR": str(rec), **({} if openmpi else {"MPIR_CVAR_CH4_NETMOD": "ofi"})}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for path in sorted(rec.iterdir()):
        rr = read_records(path)
        out["parent" if path.name.startswith("rank-") else "child", rr.rank] = rr
    return out


@pytest.fixture(scope="module", params=list(RUNS))
def run(request, tmp_path_factory):
    openmpi, mode = RUNS[request.param]
    if not (HAVE_OPENMPI if openmpi else HAVE_MPICH):
        pytest.skip("no Open MPI venv" if openmpi else "no MPICH")
    return run_job(tmp_path_factory.mktemp(request.param), openmpi, mode)


def tagged(run: dict, tag: int) -> dict:
    """Each process's send and receive halves of the messages of ``tag``: (who, rank) -> records."""
    out = {}
    for who, rr in run.items():
        rows = pd.concat([pd.DataFrame(part[part["tag"] == tag]) for part in (rr.records, rr.received)])
        if len(rows):
            out[who] = rows
    return out


def comm_of(run: dict, tag: int) -> int:
    """The one communicator id of the messages of ``tag``."""
    return int(pd.concat(tagged(run, tag).values())["comm"].iloc[0])


def test_spawned_processes_write_files_of_their_own(run):
    """The 3 children are of another MPI world: extra files (left out of the store), not rank files. Before, child
    2 wrote rank-00002.pmpi, a third rank of a job of 2."""
    assert sorted(run) == [("child", r) for r in range(CHILDREN)] + [("parent", r) for r in range(PARENTS)]
    assert all(rr.path.name.startswith("extra-") and rr.world_size == CHILDREN
               for (who, _), rr in run.items() if who == "child")


def test_every_communicator_has_one_id_on_its_processes_in_both_worlds(run):
    """Each communicator's id is the same on all its processes and agreed (not a handle); within the parents' world
    it is of the usual kind, across worlds a hashed one (the worlds' ranks and counts repeat)."""
    members = {SPLIT: PARENTS, FROM_GROUP: PARENTS, FROM_GROUPS: PARENTS, JOIN: PARENTS, SPAWN: 2 * PARENTS,
               MERGED: PARENTS + CHILDREN, CONNECT: 2 * PARENTS}
    ids = {}
    for tag, n in members.items():
        rows = tagged(run, tag)
        assert len(rows) == n, (tag, list(rows))
        found = pd.concat(rows.values())
        assert found["comm"].nunique() == 1 and (found["flags"] & COMM_HANDLE == 0).all(), (tag, found)
        ids[tag] = int(found["comm"].iloc[0])
        assert ids[tag] >= COMM_MADE and bool(ids[tag] & HASHED) == (tag >= SPAWN), (tag, hex(ids[tag]))
    assert len(set(ids.values())) == len(ids)


def test_a_peer_outside_the_world_is_its_rank_in_the_communicator_flagged(run):
    """A partner in the other world has no world rank here: the record keeps its rank in the communicator, flagged
    PEER_IN_COMM, record by record (on the merged communicator, a partner of one's own world is a world rank)."""
    for tag in (SPLIT, FROM_GROUP, FROM_GROUPS, JOIN):  # the parents' world: the other parent's world rank
        for (_, r), rows in tagged(run, tag).items():
            assert (rows["peer"] == 1 - r).all() and (rows["flags"] & PEER_IN_COMM == 0).all(), (tag, r, rows)
    for tag in (SPAWN, CONNECT):  # process r of each world with the other's r: its rank in the remote group
        for (_, r), rows in tagged(run, tag).items():
            assert (rows["peer"] == r).all() and (rows["flags"] & PEER_IN_COMM != 0).all(), (tag, r, rows)
    size = PARENTS + CHILDREN  # the merge: parents 0-1, then children 2-4; a ring, sent to the next
    for (who, r), rows in tagged(run, MERGED).items():
        me = r if who == "parent" else PARENTS + r
        for partner, half in (((me + 1) % size, 0), ((me - 1) % size, 1)):  # the send half, then the receive half
            row = rows.iloc[half]
            same_world = (partner < PARENTS) == (who == "parent")
            want = (partner if who == "parent" else partner - PARENTS) if same_world else partner
            assert (int(row["peer"]), bool(row["flags"] & PEER_IN_COMM)) == (want, not same_world), (who, r, row)


def test_an_mrecv_names_its_sender_by_world_rank_on_its_probes_communicator(run):
    """World rank 0 sends to world rank 1 on the reversed split (where it is rank 1); rank 1 takes the message by
    MPI_Mprobe + MPI_Mrecv. Before, the Mrecv's peer was 1 (the rank in the split) and its communicator none."""
    rr = run["parent", 1]
    t = to_timeline(rr)
    mrecv = t[t["name"] == "MPI_Mrecv"]
    split = comm_of(run, SPLIT)
    assert len(mrecv) == 1 and int(mrecv["peer"].iloc[0]) == 0 and int(mrecv["comm"].iloc[0]) == split
    calls = mpi_calls(pd.concat([to_timeline(run["parent", r]) for r in range(PARENTS)], ignore_index=True))
    matched = match_messages(calls)
    assert ((matched["name_r"] == "MPI_Mrecv") & (matched["tag"] == MRECV) & (matched["comm"] == split)).sum() == 1


def test_communicator_calls_are_rows_and_their_time_is_mpi_time(run):
    """Rank 0 waits 100 ms in MPI_Comm_split for rank 1: a row of its own (category barrier, comm the split's id),
    none of it 'outside MPI'. Before, no row: the 100 ms read as rank 0's own work. Each call that made a
    communicator names it, on each of its processes."""
    t = to_timeline(run["parent", 0])
    split = t[t["name"] == "MPI_Comm_split"].iloc[0]
    assert split["dur_ns"] >= 50e6 and split["category"] == "barrier"  # (100 ms less scheduling noise)
    assert int(split["comm"]) == comm_of(run, SPLIT)
    outside = t[(t["name"] == OUTSIDE_MPI) & (t["start_ns"] < split["start_ns"] + split["dur_ns"])
                & (t["start_ns"] + t["dur_ns"] > split["start_ns"])]
    assert len(outside) == 0 or outside["dur_ns"].max() < 1e6  # (the gaps that touch it end where it begins)
    spawn = "MPI_Comm_spawn_multiple" if "MPI_Comm_spawn_multiple" in set(t["name"]) else "MPI_Comm_spawn"
    made = {"MPI_Comm_create_from_group": FROM_GROUP, "MPI_Intercomm_create_from_groups": FROM_GROUPS,
            "MPI_Comm_join": JOIN, spawn: SPAWN, "MPI_Intercomm_merge": MERGED, "MPI_Comm_accept": CONNECT}
    for (who, r), rr in run.items():
        t = to_timeline(rr)
        calls = made if who == "parent" else {"MPI_Intercomm_merge": MERGED, "MPI_Comm_connect": CONNECT}
        for name, tag in calls.items():
            row = t[t["name"] == name]
            assert len(row) == 1 and int(row["comm"].iloc[0]) == comm_of(run, tag), (who, r, name)
        freed = t[t["name"].isin(["MPI_Comm_free", "MPI_Comm_disconnect"])]
        assert len(freed) == (7 if who == "parent" else 3) and (freed["comm"] >= COMM_MADE).all()


def test_a_file_whose_communicator_calls_are_another_list_is_refused(run, tmp_path):
    """Their ids come after the call table's: a file written with another list of them (its hash at byte 1684) is
    refused in one line, not misnamed."""
    data = bytearray(run["parent", 0].path.read_bytes())
    data[1684:1688] = (int.from_bytes(data[1684:1688], "little") ^ 1).to_bytes(4, "little")
    (tmp_path / "other.pmpi").write_bytes(bytes(data))
    with pytest.raises(DdltraceError, match="another list of communicator calls"):
        read_records(tmp_path / "other.pmpi")
