"""Compiling the C kernels with the system compiler, once per source and compiler (cached).

The compiler is ``$DDLTRACE_CC``, else ``$CC``, else ``cc``. The shared library lands in
``$DDLTRACE_CACHE`` (default ``~/.cache/ddltrace``)/microbench, named by a hash of the source, the compiler's
version and the flags, so a new compiler or new source rebuilds and an unchanged one loads at once.
Without a compiler :func:`load_kernels` returns ``None`` with the reason in :func:`last_note`: the numpy
forms of every benchmark still run.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ["-O3", "-march=native", "-fPIC", "-shared"]
FALLBACK_FLAGS = ["-O3", "-fPIC", "-shared"]

_state: dict[str, object] = {}


def compiler() -> str:
    """The C compiler setting: ``$DDLTRACE_CC``, else ``$CC``, else ``cc``."""
    return os.environ.get("DDLTRACE_CC") or os.environ.get("CC") or "cc"


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``$DDLTRACE_CACHE/microbench`` (default ``~/.cache/ddltrace``)."""
    base = os.environ.get("DDLTRACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ddltrace")
    return Path(base) / "microbench"


def last_note() -> str:
    """Why the kernels are not available ('' when they are)."""
    return str(_state.get("note", ""))


def _compile(cc_path: str, source: Path, flags: list[str], out: Path) -> str:
    """Compile ``source`` into ``out``; returns '' on success, else the compiler's last error line."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp_out = Path(tmp) / out.name
        proc = subprocess.run([cc_path, *flags, "-o", str(tmp_out), str(source), "-lm"],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            return lines[-1] if lines else f"exit status {proc.returncode}"
        os.replace(tmp_out, out)
    return ""


def build(source: Path = SOURCE) -> tuple[Path | None, str]:
    """The compiled shared library for ``source`` (building it if needed) and a note ('' if all went well)."""
    cc = compiler()
    cc_path = shutil.which(cc)
    if cc_path is None:
        return None, f"no C compiler ({cc!r} not found; set DDLTRACE_CC): the compiled kernels are skipped"
    try:
        version = subprocess.run([cc_path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"C compiler {cc_path} does not run ({exc}): the compiled kernels are skipped"
    text = source.read_bytes()
    notes = []
    for flags in (FLAGS, FALLBACK_FLAGS):
        key = hashlib.sha256(text + version.encode() + cc_path.encode() + " ".join(flags).encode()).hexdigest()[:16]
        out = cache_dir() / f"{source.stem}-{key}.so"
        if out.exists():
            return out, ""
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            err = _compile(cc_path, source, flags, out)
        except (OSError, subprocess.TimeoutExpired) as exc:
            err = str(exc)
        if not err:
            return out, ""
        notes.append(f"{cc_path} {' '.join(flags)}: {err}")
    return None, "the C kernels did not compile (" + "; ".join(notes) + "): the compiled kernels are skipped"


def load_kernels() -> ctypes.CDLL | None:
    """The kernels library with argument types set, or None (see :func:`last_note`). Cached per process."""
    key = (compiler(), str(cache_dir()))
    if _state.get("key") == key:
        return _state.get("lib")  # type: ignore[return-value]
    path, note = build()
    lib = None
    if path is not None:
        try:
            lib = _declare(ctypes.CDLL(str(path)))
        except OSError as exc:
            note = f"{path}: cannot be loaded ({exc}): the compiled kernels are skipped"
    _state.update(key=key, lib=lib, note=note)
    return lib


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, n, d = ctypes.c_void_p, ctypes.c_long, ctypes.c_double
    for suf in ("f64", "f32"):
        getattr(lib, f"muladd_loop_{suf}").argtypes = [p, p, p, n, n]
        for name in ("act_sigmoid", "act_tanh"):
            getattr(lib, f"{name}_{suf}").argtypes = [p, p, n]
        for name in ("err_sigmoid", "err_tanh"):
            getattr(lib, f"{name}_{suf}").argtypes = [p, p, p, n]
    lib.stream_copy.argtypes = [p, p, n]
    lib.stream_scale.argtypes = [p, p, d, n]
    lib.stream_add.argtypes = [p, p, p, n]
    lib.stream_triad.argtypes = [p, p, p, d, n]
    lib.stream_sum.argtypes = [p, n]
    lib.stream_sum.restype = d
    lib.stream_fill.argtypes = [p, d, n]
    lib.add_chain.argtypes = [n]
    lib.add_chain.restype = n
    return lib
