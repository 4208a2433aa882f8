"""Trace files where a store is expected: ``analyze`` and ``report`` take a trace file or folder (anything ``ddltrace
import`` reads: a Kineto trace, a folder of ranks' traces, an OTF2 archive, ...) as well as a trace store, and
import it into a temporary store first, as ``ddltrace import PATH --out STORE`` would (its summary on stderr).

A folder is a store when it holds ``manifest.json`` or a store's own folders (``timeline/``, ``counters/``: a store
whose manifest is missing gets the store's error, not an import). The temporary stores are removed when the
command ends, however it ends (an error, Ctrl-C, a SIGTERM: :mod:`ddltrace.cli`); ``ddltrace import`` keeps
one.
"""

from __future__ import annotations

import contextlib
import io
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ddltrace.errors import DdltraceError
from ddltrace.store import is_store_folder, temporary_writes

#: The options of ``ddltrace import`` its errors may tell the user to give, which ``analyze`` and ``report`` lack.
_IMPORT_OPTIONS = ("--format", "--rank-from", "--rules", "--align")


def is_trace_input(path: str) -> bool:
    """Whether ``path`` is trace files to import, not a store (a missing path is left to the store's error)."""
    p = Path(path)
    if p.is_file():
        return True
    return p.is_dir() and not is_store_folder(p)


@contextlib.contextmanager
def as_stores(paths: list[str], verb: str, quiet: bool, left: list | None = None
              ) -> Iterator[tuple[list[str], dict[str, str]]]:
    """(``paths`` with each trace input replaced by a temporary store of it, removed on leaving; each temporary
    store's path -> the trace it holds, what the output calls the run). A line on stderr says which were imported,
    and the import's summary follows it unless ``quiet``. With ``left`` (several runs that stand alone: analyze,
    report, whose inputs :func:`stores_in` has expanded), a trace that cannot be imported, where others are given,
    is left out with a warning naming it (:func:`left_out`) and appended to ``left`` as (path, why)."""
    temporary: Path | None = None
    stores, labels = [], {}
    try:
        for i, path in enumerate(paths):
            if not is_trace_input(path):
                stores.append(path)
                continue
            while temporary is None:  # held before it is made (see _scratch_name), so a SIGTERM after mkdir removes it
                temporary = _scratch_name(verb)
                try:
                    temporary.mkdir(mode=0o700)
                except FileExistsError:  # another's (a name drawn twice): not this command's to remove
                    temporary = None
            out = temporary / f"store-{i}"
            if not quiet:
                print(f"ddltrace {verb}: {path} is a trace, not a store: importing it into a temporary store "
                      f"('ddltrace import {path} --out STORE' keeps one)", file=sys.stderr, flush=True)
            try:
                with temporary_writes():  # (removed below: written for speed, not to be kept)
                    _import(path, out, quiet)
            except DdltraceError as exc:
                if any(option in str(exc) for option in _IMPORT_OPTIONS):
                    exc = DdltraceError(f"{exc} (ddltrace {verb} imports a trace with import's defaults: give "
                                        f"'ddltrace import {path} --out STORE' the options, then {verb} STORE)")
                if left is None or len(paths) == 1:
                    raise exc from None
                left_out(verb, exc)
                left.append((path, str(exc)))
                continue
            stores.append(str(out))
            labels[str(out)] = path
        yield stores, labels
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def stores_in(path: str) -> list[str]:
    """``path``, or, for a folder that is no store but holds stores (a run's stores side by side: w1.store, w2.store,
    ...), those stores in name order. A folder of stores beside other files is refused in one line: its files were
    read as traces and the stores' own files called unknown formats."""
    folder = Path(path)
    if not folder.is_dir() or is_store_folder(folder):
        return [path]
    inside = sorted(folder.iterdir())
    stores = [str(p) for p in inside if p.is_dir() and is_store_folder(p)]
    if not stores:
        return [path]
    others = [p.name for p in inside if not (p.is_dir() and is_store_folder(p)) and not p.name.startswith(".")]
    if others:
        raise DdltraceError(f"{path}: holds trace stores ({', '.join(Path(s).name for s in stores[:3])}"
                            f"{', ...' if len(stores) > 3 else ''}) and other files ({', '.join(others[:3])}"
                            f"{', ...' if len(others) > 3 else ''}): give the stores, or the trace files, by name")
    return stores


def refuse_twice(paths: list[str]) -> None:
    """Refuse a store or trace given twice (the same folder or file, by any path or link): its findings would be
    found "in 2 runs" and its two runs a scaling series of one worker count."""
    seen: dict[Path, str] = {}
    for path in paths:
        where = Path(path).resolve()
        if where in seen:
            also = f" (as {seen[where]} too)" if seen[where] != path else ""
            raise DdltraceError(f"{path}: given twice{also}; give each run once")
        seen[where] = path


def left_out(verb: str, exc: Exception) -> None:
    """The warning on an input left out of a command over several runs (it could not be read: ``exc`` says why)."""
    print(f"ddltrace {verb}: warning: {exc}; left out, the other runs are used", file=sys.stderr, flush=True)


def usable(paths: list, verb: str, use: Callable, left: list) -> list:
    """``use(path)`` of each of ``paths``, leaving out (with :func:`left_out`'s warning, appended to ``left`` as
    (path, why)) one that raises :class:`DdltraceError` where several runs were given; with one given, or none
    usable, the error is the command's."""
    done = []
    for path in paths:
        try:
            done.append(use(path))
        except DdltraceError as exc:
            if len(paths) + len(left) == 1:
                raise
            left_out(verb, exc)
            left.append((path, str(exc)))
    if not done:
        raise DdltraceError(f"nothing to {verb}: none of the {len(left)} runs given could be read ({left[0][1]})")
    return done


def _scratch_name(verb: str) -> Path:
    """A name for the command's scratch folder, ``ddltrace-VERB-`` and 16 random hex digits in the temporary
    directory. The caller holds it before making the folder: with ``tempfile.mkdtemp`` the path came back some
    bytecodes after ``mkdir``, and a SIGTERM handled there (a busy machine may stop the process right after the
    call) left the folder behind with nothing naming it."""
    return Path(tempfile.gettempdir()) / f"ddltrace-{verb}-{secrets.token_hex(8)}"


def _import(path: str, out: Path, quiet: bool) -> None:
    """``ddltrace import PATH --out OUT`` with its defaults, its summary on stderr (stdout is the command's own)."""
    from ddltrace.cli import build_parser
    from ddltrace.commands import import_trace

    args = build_parser("import").parse_args(["import", path, "--out", str(out),
                                              *(["--progress", "never"] if quiet else [])])
    with contextlib.redirect_stdout(io.StringIO() if quiet else sys.stderr):
        import_trace.run(args)
