"""Reading one large Chrome trace file with several processes.

Each of the ``n`` processes (the caller and ``n - 1`` forked from it) inflates the whole file itself (gzip is fast:
54 MB of text in 0.03 s) and cuts its text into the same pieces, at the last event boundary of each piece's text
(no decoding needed to cut), but decodes only the pieces it is the first to reach (:class:`_Claims`), each into a
builder of its own (the reader of :mod:`.chrome` in its ``share`` mode): a process that has less of the machine
(another job on its core, the caller's own work after the fork) decodes fewer pieces, instead of every n-th. The
pieces' builders are joined in file order (:meth:`_Builder.absorb`): the same :class:`ChromeTrace` one process reads
(tests/test_chrome_split.py compares every real Chrome trace of the corpus). Memory stays bounded as in one
process: each process holds a piece at a time, and the columns.

Anything only one reader can follow (a piece that does not decode, an event larger than a piece, damage of any kind,
a process lost) and the file is read again by one process from the start, so damage is reported as it always is.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from pathlib import Path

from ddltrace.collectors.importers import source as source_module
from ddltrace.collectors.importers.chrome import ChromeTrace, Unshared, _Builder, _Reader
from ddltrace.collectors.importers.source import GZIP_MAGIC, ByteSource

#: Files smaller than this (bytes on disk; gzip: compressed) are read by one process: below it the forks and the
#: joining cost more than the second process gains.
MIN_PLAIN, MIN_GZIP = 16 << 20, 1 << 20
#: Called in the calling process once its readers are forked, before it reads its own pieces: work it has to do
#: anyway, done while the others read (``ddltrace import`` loads pyarrow there: :mod:`ddltrace.deferred_import`).
while_readers_start: Callable[[], None] | None = None
#: Seconds a reader waits for the claim token (held for microseconds by the reader that has it): longer means a
#: reader died holding it, and the file is read by one process.
CLAIM_WAIT_S = 10.0


def worth_splitting(path: str | Path) -> bool:
    """Whether ``path`` is large enough to be read by several processes."""
    try:
        with open(path, "rb") as fh:
            compressed = fh.read(2) == GZIP_MAGIC
        return os.path.getsize(path) >= (MIN_GZIP if compressed else MIN_PLAIN)
    except OSError:
        return False


def read_split(path: str | Path, root: _Builder, make: Callable[[], _Builder], processes: int) -> ChromeTrace | None:
    """``path`` read by ``processes`` processes into ``root`` (untouched unless this succeeds); None when it must be
    read by one process (too small, or anything :class:`Unshared`)."""
    if processes < 2 or not hasattr(os, "fork") or not worth_splitting(path):
        return None
    workers: list[tuple[int, int]] = []
    claims = _Claims()
    try:
        for k in range(1, processes):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                os.close(read_end)
                _worker(path, make, (k, processes), claims, write_end)
            os.close(write_end)
            workers.append((pid, read_end))
        if while_readers_start is not None:
            while_readers_start()
        try:
            reader = _Reader(ByteSource(path), root, share=(0, processes), make=make, claim=claims)
            reader.run()
            pieces, count = reader.pieces, reader.piece + 1  # (the text after the last piece: this reader's)
        except Unshared:
            pieces = None  # the other readers' pieces are of no use: they are stopped below
        while workers and pieces is not None:
            theirs = _collect(workers[0][1])
            _reap(workers[:1])
            workers.pop(0)
            pieces = None if pieces is None or theirs is None else pieces + theirs
    finally:
        claims.close()
        for pid, read_end in workers:  # unshared, an error or an interrupt in this process: no use for the others
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.close(read_end)
        _reap(workers)
    if pieces is None or sorted(number for number, _ in pieces) != list(range(count)):
        return None  # (each piece decoded once, by whoever claimed it: anything else is read again by one process)
    for _, state in sorted(pieces, key=lambda piece: piece[0]):
        root.absorb(state)
    return root.finish()


class _Claims:
    """Which reader decodes each piece: the first to reach it. A pipe holds one 8-byte token, the number of the
    next piece no reader has taken; a reader at piece ``k`` takes the token (one read of 8 bytes: one reader gets
    it, the others find the pipe empty), keeps the piece if the token says ``k`` and puts back ``k + 1``, else puts
    the token back as it was (a reader ahead took ``k``). Readers cut the same pieces in the same order, so the
    token is never below ``k``."""

    def __init__(self):
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        os.write(self.write_end, bytes(8))

    def __call__(self, piece: int) -> bool:
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            try:
                token = os.read(self.read_end, 8)
                break
            except BlockingIOError:  # another reader holds it: wait until it is put back
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.read_end], [], [], left)[0]:
                    raise Unshared(f"no claim on piece {piece} within {CLAIM_WAIT_S:g} s (a reader lost)") from None
        following = int.from_bytes(token, "little")
        mine = following == piece
        os.write(self.write_end, (piece + 1 if mine else following).to_bytes(8, "little"))
        if following < piece:
            raise Unshared(f"piece {piece} reached before piece {following} was claimed")
        return mine

    def close(self) -> None:
        for end in (self.read_end, self.write_end):
            with contextlib.suppress(OSError):
                os.close(end)


def _worker(path, make: Callable[[], _Builder], share: tuple[int, int], claims: _Claims, write_end: int) -> None:
    """A forked reader: its pieces' states, pickled, to ``write_end`` (nothing when it could not read them). It
    never returns: whatever happens, the process ends here."""
    try:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle (it kills this process)
            source_module.progress_hook = None  # the caller shows the progress
            reader = _Reader(ByteSource(path), make(), share=share, make=make, claim=claims)
            reader.run()
            payload = pickle.dumps(reader.pieces, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # noqa: BLE001 - any failure means: read the file in one process
            payload = b""
        with contextlib.suppress(OSError), os.fdopen(write_end, "wb") as out:  # (the caller may be gone)
            out.write(payload)
    finally:
        os._exit(0)


def _collect(read_end: int) -> list[tuple[int, dict]] | None:
    """A worker's pieces; None when it sent nothing whole (it failed, or was killed before or while writing)."""
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    try:
        return pickle.loads(payload) if payload else None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):  # cut short mid-write
        return None


def _reap(workers: list[tuple[int, int]]) -> None:
    for pid, _ in workers:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
