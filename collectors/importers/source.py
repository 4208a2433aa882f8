"""Reading a trace file as a stream of bytes: plain or gzip, with progress and damage recorded.

A corrupt or truncated gzip stream does not raise: the bytes decoded before the damage are kept and the
problem (with the compressed byte offset) is added to :attr:`ByteSource.problems`. Inflation is bounded: no
piece is larger than ``READ_SIZE`` however well the data compresses (a GiB of spaces is 1 MB of gzip).
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

try:  # ISA-L inflates gzip about 1.6x faster than zlib; same results
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a dependency, zlib the fallback
    _zlib = zlib

from ddltrace.errors import DdltraceError

GZIP_MAGIC = b"\x1f\x8b"
#: Bytes read per step from a plain file, and from a gzip file (it inflates ~10-20x); no piece yielded is
#: larger than ``READ_SIZE``.
READ_SIZE = 4 << 20
GZIP_READ_SIZE = 16 << 10
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_a_file(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a trace file (one line naming it), or None for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{path}: no such file or folder" + (" (a symbolic link to nothing)" if os.path.islink(path) else "")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path}: a symbolic link loop ({exc.strerror})"
        return f"{path}: cannot read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
    return f"{path}: not a regular file ({kind})"


#: Called with each ByteSource after every piece it reads (progress display); None when nobody listens.
progress_hook = None


def _progress(source: ByteSource) -> None:
    if progress_hook is not None:
        progress_hook(source)


class ByteSource:
    """One input file. ``chunks()`` yields its (decompressed) bytes; ``consumed`` counts file bytes read."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if (why := not_a_file(self.path)) is not None:
            raise DdltraceError(why)
        try:
            self.size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                self.compressed = fh.read(2) == GZIP_MAGIC
        except OSError as exc:
            raise DdltraceError(f"{self.path}: cannot read ({exc.strerror})") from exc
        self.consumed = 0
        self.problems: list[str] = []
        #: (compressed byte, inflater's error) of a corrupt gzip stream once a read met it (:meth:`chunks`: as its line
        #: in ``problems`` says it, ``damage_line``); a stream that only ends early is not corrupt.
        self.damage: tuple[int, str] | None = None
        self.damage_line: str | None = None
        self._scanned = False  # whether gzip_damage inflated the file itself (its finding in _scanned_damage)
        self._scanned_damage: tuple[int, str] | None = None

    def head(self, size: int = 65536) -> bytes:
        """The first ``size`` decompressed bytes (fewer when the file is shorter or damaged)."""
        out = bytearray()
        for chunk in self._iter(keep_problems=False):
            out += chunk
            if len(out) >= size:
                break
        return bytes(out[:size])

    def chunks(self) -> Iterator[bytes]:
        """Every decompressed byte, in pieces; damage ends the stream and is recorded in ``problems``."""
        return self._iter(keep_problems=True)

    def read_all(self) -> bytes:
        return b"".join(self.chunks())

    def _iter(self, keep_problems: bool) -> Iterator[bytes]:
        def problem(text: str) -> None:
            if keep_problems:
                self.problems.append(f"{self.path}: {text}")

        with open(self.path, "rb") as fh:
            if not self.compressed:
                while block := fh.read(READ_SIZE):
                    self.consumed = fh.tell()
                    if keep_problems:
                        _progress(self)
                    yield block
                return
            inflater = _zlib.decompressobj(16 + zlib.MAX_WBITS)
            offset = member_start = member_out = 0  # where the gzip member starts, what it gave so far
            while True:
                block = fh.read(GZIP_READ_SIZE)
                if not block:
                    if not inflater.eof:
                        problem(f"gzip stream truncated at compressed byte {offset} (kept what was decoded)")
                    return
                offset += len(block)
                self.consumed = offset
                if keep_problems:
                    _progress(self)
                while block:
                    try:
                        out = inflater.decompress(block, READ_SIZE)
                    except (zlib.error, _zlib.error):
                        # the bytes this step inflated before the damage went with the exception: inflate the
                        # member again up to the damage, in small steps, and keep what it gives past member_out
                        where, error = yield from _inflate_up_to_damage(self.path, member_start, member_out,
                                                                    offset - len(block))
                        self.damage = where, error
                        if keep_problems:
                            self.damage_line = (f"{self.path}: corrupt gzip data at compressed byte {where} ({error}); "
                                                "kept what was decoded before it")
                            self.problems.append(self.damage_line)
                        return
                    if out:
                        member_out += len(out)
                        yield out
                    block = inflater.unconsumed_tail
                    if inflater.eof and inflater.unused_data:  # concatenated gzip members
                        block = inflater.unused_data
                        if not block.startswith(GZIP_MAGIC):
                            problem(f"{len(block)} bytes of trailing garbage after the gzip stream ignored")
                            return
                        inflater = _zlib.decompressobj(16 + zlib.MAX_WBITS)
                        member_start, member_out = offset - len(block), 0

    def gzip_damage(self) -> tuple[int, str] | None:
        """Where the gzip stream is corrupt (a compressed byte about where the inflater failed, its error: data that
        is not deflate, a wrong CRC or length), or None: not gzip, whole, or only cut short (or trailing garbage).
        What :meth:`chunks` met already, else the whole file inflated once (output discarded) and remembered."""
        if not self.compressed:
            return None
        if self.damage is not None:
            return self.damage
        if not self._scanned:
            self._scanned, self._scanned_damage = True, _gzip_damage(self.path)
        return self._scanned_damage



def _gzip_damage(path: Path) -> tuple[int, str] | None:
    """:meth:`ByteSource.gzip_damage` of the file at ``path``: a source of its own read through (output discarded,
    no progress or problems), the damage it met."""
    whole = ByteSource(path)
    for _ in whole._iter(keep_problems=False):
        pass
    return whole.damage

def _inflate_up_to_damage(path: Path, start: int, given: int, damaged_step: int) -> Iterator[bytes]:
    """Inflate the gzip member at file offset ``start`` again: in large steps up to ``damaged_step`` (the file
    offset of the step that failed), then one compressed byte at a time, yielding what it gives past its first
    ``given`` bytes (those were yielded already) until the damage; returns (the file offset of the damaged byte,
    the inflater's error). The failed step of 16 KiB inflates to several hundred KiB: without this, a corrupt
    CRC (the member's last 8 bytes) lost all of it."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    seen = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        offset = start
        while step := fh.read(min(GZIP_READ_SIZE, damaged_step - offset) if offset < damaged_step else 1):
            while step:
                try:
                    out = inflater.decompress(step, READ_SIZE)
                except zlib.error as exc:
                    return offset, str(exc)
                if seen + len(out) > given:
                    yield out[max(given - seen, 0):]
                seen += len(out)
                step = inflater.unconsumed_tail
            offset = fh.tell()
    return offset, "the damage was not found again"
