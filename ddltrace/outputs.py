"""Writing what a command makes (a report folder, a Chrome trace): all of it or nothing, and one line when the
disk or the folder refuses.

- :func:`check_writable` asks the kernel, before the work starts, whether an output can be made where it is
  asked for (a folder is made there and removed): a read-only or foreign folder is one line, not a traceback
  after minutes of analysis.
- :func:`output_folder` builds a folder's files in a temporary sibling and moves them into place only when every
  one is written: a failed or interrupted write (a full disk) leaves neither partial files nor an empty folder.
- :func:`write_file` writes one file's bytes through to the disk.
- :func:`save_measured` writes a file of measurements atomically; where the disk refuses, it keeps them in the
  system's temporary folder and names that file in its one line (minutes of measuring are not lost).
- :func:`refused` turns the ``OSError`` of a write into the :class:`DdltraceError` line naming the output, in the
  system's words (:func:`os_reason`, also for pyarrow's errors).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ddltrace.errors import DdltraceError


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(folder: str | os.PathLike, what: str) -> None:
    """Refuse (:class:`DdltraceError`) a ``folder`` in which ``what`` cannot be made; a folder not made yet is
    checked at its nearest existing parent, where it would be made."""
    folder = Path(folder)
    where = _nearest_existing(folder)
    if not where.is_dir():
        raise DdltraceError(f"{where}: not a folder, so {what} cannot be written in {folder}")
    try:
        tempfile.TemporaryDirectory(dir=where, prefix=".ddltrace-check-").cleanup()
    except OSError as exc:
        raise DdltraceError(f"{where}: cannot write {what} there ({exc.strerror or exc})") from None


def refuse_inside(out: str | os.PathLike, folder: str | os.PathLike, what: str) -> None:
    """Refuse (one line) an output ``out`` at or inside ``folder``, the input ``what`` the command reads (a trace
    store, a record folder): writing there would change or remove what it reads."""
    out_path, inside = Path(out).resolve(), Path(folder).resolve()
    if out_path == inside or inside in out_path.parents:
        raise DdltraceError(f"{out}: inside {folder}, {what} this command reads; choose an output outside it")


def refuse_in_store(out: str | os.PathLike) -> None:
    """Refuse (one line) a file output ``out`` inside a trace store (a folder above it with a store's manifest and
    timeline folder: a folder of the user's that merely holds one of the two is not taken for a store): it would
    replace or add to the store's own files."""
    from ddltrace.store import MANIFEST

    for folder in Path(out).resolve().parents:
        if (folder / MANIFEST).is_file() and (folder / "timeline").is_dir():
            raise DdltraceError(f"{out}: inside the trace store {folder}; choose an output outside it")


def refuse_other_file(out: str | os.PathLike, what: str, is_mine) -> None:
    """Refuse (one line) an output file ``out`` that exists and is not ``what`` (``is_mine(path)`` False: a file
    this command did not write), or that lies in a trace store (:func:`refuse_in_store`); a ``what`` it wrote
    before is replaced."""
    refuse_in_store(out)
    path = Path(out)
    if path.is_dir():
        raise DdltraceError(f"{out}: a folder; give a file name for {what}")
    if path.exists() and not is_mine(path):
        raise DdltraceError(f"{out}: exists and is not {what}, which alone would be replaced; choose another "
                            "output, or remove it yourself")


def json_with_keys(path: Path, keys: tuple[str, ...]) -> bool:
    """Whether ``path`` is a JSON object with every one of ``keys`` (a file of ddltrace's own of one kind)."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and all(key in doc for key in keys)


#: Writes the disk refuses (full, over quota, read-only, file too large), whatever the output.
DISK_REFUSED = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def os_errno(exc: OSError) -> int | None:
    """The errno of an OSError, also of pyarrow's, which says it in its text ("... [errno 28] ...")."""
    found = re.search(r"\[errno (\d+)\]", str(exc))
    return exc.errno or (int(found.group(1)) if found else None)


def os_reason(exc: OSError) -> str:
    """The system's words for an OSError (:func:`os_errno`), else its text."""
    number = os_errno(exc)
    return os.strerror(number) if number else str(exc)


def refused(exc: OSError, output: str | os.PathLike, what: str) -> DdltraceError:
    """The one line for an ``OSError`` met while writing ``what`` to ``output`` (nothing of it is left)."""
    return DdltraceError(f"{output}: cannot write {what} ({os_reason(exc)}); nothing was written")


#: The random part of :func:`temporary_beside`'s names, as a glob pattern; and of the names ``tempfile.mkdtemp``
#: gave before it (a dead writer of an older version may have left one).
TEMPORARY_PARTS = ("[0-9a-f]" * 12, "[a-z0-9_]" * 8)


def temporary_beside(path: Path) -> Path:
    """The name of ``path``'s temporary file or folder beside it, ``.NAME.XXXXXXXXXXXX.tmp``: random (48 bits), so
    no other writer picks it, and known before the file exists, so that its removal cannot miss a file or folder
    made the instant a SIGTERM or Ctrl-C arrives (with ``mkstemp`` or ``mkdtemp`` the name came back some bytecodes
    after it was made: a signal handled in between left it)."""
    return path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"


@contextlib.contextmanager
def output_folder(out: str | os.PathLike, what: str) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``out`` to write into; when the block ends without error its files
    are moved into ``out`` (the folder renamed into place when ``out`` does not exist yet, else file by file,
    each rename atomic). On an error the temporary folder is removed, ``out`` is left as it was, and an
    ``OSError`` becomes :func:`refused`'s line."""
    out = Path(out)
    staging = temporary_beside(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()  # (made within the block that removes it: see temporary_beside)
        yield staging
        if out.exists():
            for item in sorted(staging.iterdir()):
                os.replace(item, out / item.name)
            staging.rmdir()
        else:
            os.replace(staging, out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise refused(exc, out, what) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and flush it to the disk (a full disk fails here, not after the rename)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def save_measured(path: str | os.PathLike, text: str, what: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, renamed into place). Where that fails,
    nothing is left beside ``path``; ``text`` is written to a new file in the system's temporary folder and the
    :class:`DdltraceError` names both: measurements that took minutes are not lost to a read-only or full disk."""
    path = Path(path)
    tmp = temporary_beside(path)
    try:
        try:
            write_file(tmp, text.encode())
            os.replace(tmp, path)
            return path
        finally:
            with contextlib.suppress(OSError):  # (missing or read-only: unlink fails with EROFS, not ENOENT)
                tmp.unlink()
    except OSError as exc:
        reason = os_reason(exc)
    try:
        fd, kept = tempfile.mkstemp(prefix=f"ddltrace-{path.stem}-", suffix=path.suffix or ".json")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError as exc:
        raise DdltraceError(f"{path}: cannot write {what} ({reason}); nor keep it in the temporary folder "
                            f"({os_reason(exc)}): what was measured is lost") from None
    raise DdltraceError(f"{path}: cannot write {what} ({reason}); what was measured is kept in {kept}")
