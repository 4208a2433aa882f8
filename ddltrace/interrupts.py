"""SIGTERM as an exception, so that a command stopped by ``kill`` (or a batch system's time limit) cleans up as
one stopped by Ctrl-C does: its ``with`` blocks and ``finally`` clauses run (scratch folders removed).

Python's default for SIGTERM ends the process at once, cleaning nothing. Within :func:`sigterm_unwinds` a SIGTERM
raises :class:`Terminated` in the main thread instead; the command line prints one line and exits 143
(128 + SIGTERM), as a shell reports a process ended by it. A process forked inside the block (a pool's worker)
keeps the default: it ends at once, as before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading


class Terminated(KeyboardInterrupt):
    """A SIGTERM received within :func:`sigterm_unwinds` (a :class:`KeyboardInterrupt`, so that what stops cleanly
    on Ctrl-C stops cleanly on it too)."""


@contextlib.contextmanager
def sigterm_unwinds():
    """Within the block, a SIGTERM to this process raises :class:`Terminated` in its main thread. Nothing changes
    outside the main thread, or where SIGTERM already has a handler of its own (or is ignored)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a process forked within the block: end as the default would
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
