"""What the tests on the simulated cluster (collectors/cluster.py) share: the marks that skip them, with the
reason, where root, iproute2, util-linux or MPICH is missing, and a job run across the nodes by the CLI's
``ddltrace run --launcher``."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.collectors import cluster as cl
from ddltrace.collectors.mpi_env import find_tool, mpi_flavour

MPIEXEC = find_tool("mpiexec")
NEEDS_CLUSTER = [
    pytest.mark.skipif(cl.missing_tools() is not None, reason=str(cl.missing_tools())),
    pytest.mark.skipif(find_tool("mpicc") is None or MPIEXEC is None, reason="MPI (the mpich wheel) not installed"),
    pytest.mark.skipif(MPIEXEC is not None and mpi_flavour(MPIEXEC) != "mpich",
                       reason="the simulated cluster is entered through MPICH's hydra"),
]


def run_on_cluster(cluster: cl.Cluster, out: Path, job: list[str], *, ppn: int, options: tuple = ()) -> str:
    """Run ``job`` with ``ppn`` ranks per node under ``ddltrace run --launcher`` into the store ``out``; what the
    command printed, on stdout and stderr (its notes: 'py-spy: ptrace not permitted'), which must exit 0."""
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", printed)
        mp.setattr(sys, "stderr", printed)
        code = main(["run", "--no-progress", *options, "--launcher", cluster.mpiexec(MPIEXEC, ppn=ppn),
                     "--out", str(out), "--", *job])
    assert code == 0, printed.getvalue()
    return printed.getvalue()
