"""Reading a trace file as a stream of bytes: plain or gzip, with progress and damage recorded.

A corrupt or truncated gzip stream does not raise: the bytes decoded before the damage are kept and the
problem (with the compressed byte offset) is added to :attr:`ByteSource.problems`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

try:  # ISA-L inflates gzip about 1.6x faster than zlib; same results
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a dependency, zlib the fallback
    _zlib = zlib

from ddltrace.errors import DdltraceError

GZIP_MAGIC = b"\x1f\x8b"
#: Bytes read per step from a plain file, and from a gzip file (it inflates ~10-20x).
READ_SIZE = 4 << 20
GZIP_READ_SIZE = 16 << 10


#: Called with each ByteSource after every piece it reads (progress display); None when nobody listens.
progress_hook = None


def _progress(source: ByteSource) -> None:
    if progress_hook is not None:
        progress_hook(source)


class ByteSource:
    """One input file. ``chunks()`` yields its (decompressed) bytes; ``consumed`` counts file bytes read."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                self.compressed = fh.read(2) == GZIP_MAGIC
        except OSError as exc:
            raise DdltraceError(f"{self.path}: cannot read ({exc.strerror})") from exc
        self.consumed = 0
        self.problems: list[str] = []

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
            offset = 0
            while True:
                block = fh.read(GZIP_READ_SIZE)
                if not block:
                    if not inflater.eof:
                        problem(f"gzip stream truncated at compressed byte {offset} (kept what was decoded)")
                    return
                try:
                    out = inflater.decompress(block)
                except (zlib.error, _zlib.error) as exc:
                    problem(f"corrupt gzip data near compressed byte {offset} ({exc}); kept what was decoded")
                    return
                offset += len(block)
                self.consumed = offset
                if keep_problems:
                    _progress(self)
                if out:
                    yield out
                while inflater.eof and inflater.unused_data:  # concatenated gzip members
                    rest = inflater.unused_data
                    if not rest.startswith(GZIP_MAGIC):
                        problem(f"{len(rest)} bytes of trailing garbage after the gzip stream ignored")
                        break
                    inflater = _zlib.decompressobj(16 + zlib.MAX_WBITS)
                    try:
                        out = inflater.decompress(rest)
                    except (zlib.error, _zlib.error) as exc:
                        problem(f"corrupt gzip member near compressed byte {offset} ({exc})")
                        return
                    if out:
                        yield out
