"""Build the PMPI wrapper library with the MPI compiler wrapper, once per MPI library, and cache it.

The wrapper must link libmpi itself (mpi4py opens libmpi RTLD_LOCAL, so ``PMPI_*`` would not resolve
otherwise) and must be built against the same MPI as the launcher, so the cache key is made of the
``mpicc`` used, what ``mpicc -show`` links, the library file's identity, and the sources: the runtime's, and the
wrappers as this process generates them (from the call table it imported, not the table's file, which may have
changed since: a key of the file's text once named a wrapper generated from the table before). Cache folder:
``$DDLTRACE_CACHE`` or ``~/.cache/ddltrace``, ``pmpi/<key>/libddltrace_pmpi.so``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import subprocess
from pathlib import Path

from ddltrace.collectors.mpi_env import find_tool
from ddltrace.collectors.pmpi.generate import generate
from ddltrace.errors import DdltraceError

_HERE = Path(__file__).parent
LIB_NAME = "libddltrace_pmpi.so"


def cache_root() -> Path:
    """Where built wrappers are kept."""
    base = os.environ.get("DDLTRACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ddltrace")
    return Path(base) / "pmpi"


def _show(mpicc: str) -> list[str]:
    for flag in ("-show", "--showme"):  # MPICH, Open MPI
        try:
            proc = subprocess.run([mpicc, flag], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return shlex.split(proc.stdout.strip())
    raise DdltraceError(f"{mpicc}: does not say how it links MPI (neither -show nor --showme works)")


def mpi_library(mpicc: str) -> Path:
    """The libmpi shared library that ``mpicc`` links (followed through linker scripts and symlinks)."""
    words = _show(mpicc)
    dirs = [w[2:] for w in words if w.startswith("-L")]
    libs = [w[2:] for w in words if w.startswith("-l")]
    for lib in [x for x in libs if x == "mpi"] + libs:
        for folder in dirs + ["/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"]:
            candidate = Path(folder) / f"lib{lib}.so"
            if candidate.exists():
                return _resolve(candidate)
    raise DdltraceError(f"{mpicc}: cannot find the MPI library it links (looked for lib{libs} in {dirs})")


def _resolve(path: Path) -> Path:
    path = path.resolve()
    head = path.read_bytes()[:256]
    if head.startswith(b"\x7fELF"):
        return path
    match = re.search(rb"(?:INPUT|GROUP)\s*\(\s*([^\s)]+)", head)  # a linker script: INPUT(libmpi.so.12)
    if not match:
        raise DdltraceError(f"{path}: neither a shared library nor a linker script")
    target = Path(match.group(1).decode())
    return _resolve(target if target.is_absolute() else path.parent / target)


def exported_pmpi(library: Path) -> set[str]:
    """The ``PMPI_*`` names found in the library's dynamic string table (a scan of its bytes)."""
    data = library.read_bytes()
    return {m.decode() for m in re.findall(rb"(?<=\x00)(PMPI_[A-Za-z0-9_]+)(?=\x00)", data)}


def build_wrapper(mpicc: str | None = None, *, quiet: bool = True) -> Path:
    """Path of the wrapper library for the MPI that ``mpicc`` belongs to, building it on first use."""
    mpicc = mpicc or find_tool("mpicc")
    if mpicc is None:
        raise DdltraceError("mpicc: no MPI compiler wrapper found beside this Python or on PATH; the PMPI "
                            "wrapper cannot be built (install the MPI extra: pip install '<ddltrace checkout>[mpi]', "
                            "or put your MPI's mpicc on PATH)")
    if os.sep in mpicc:
        mpicc = os.path.abspath(mpicc)
    library = mpi_library(mpicc)
    sources = {name: (_HERE / name).read_text() for name in ("runtime.c", "runtime.h")}
    sources["wrappers.c"] = generate(None)  # every wrapper of the table in memory (the build keeps the library's)
    stat = library.stat()
    key = hashlib.sha256("\0".join([
        os.path.realpath(mpicc), " ".join(_show(mpicc)), str(library), str(stat.st_size), str(int(stat.st_mtime)),
        *sources.values()]).encode()).hexdigest()[:16]
    folder = cache_root() / key
    out = folder / LIB_NAME
    if out.exists():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        for name in ("runtime.c", "runtime.h"):
            (folder / name).write_text(sources[name])
        (folder / "wrappers.c").write_text(generate(exported_pmpi(library)))
        tmp = folder / f".{LIB_NAME}.{os.getpid()}"
        cmd = [mpicc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(folder / "wrappers.c"), "-lpthread"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
        except OSError as exc:
            raise DdltraceError(f"{mpicc}: cannot run ({exc.strerror})") from exc
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise DdltraceError(f"{folder / 'wrappers.c'}: {Path(mpicc).name} failed to build the PMPI wrapper: "
                                f"{first}")
        os.replace(tmp, out)
    return out
