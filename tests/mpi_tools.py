"""Whether this machine can build and run MPI jobs (MPICH's wheel beside this Python: ``make install``), as a
pytest mark for the tests that run real ones."""

from __future__ import annotations

import pytest

from ddltrace.collectors.mpi_env import find_tool

HAVE_MPI = find_tool("mpicc") is not None and find_tool("mpiexec") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="no mpicc/mpiexec beside this Python (make install)")
