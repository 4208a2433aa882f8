"""Progress lines of a command that goes through a big store rank by rank (``analyze`` reading it, ``export``
writing it out)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: A store this big gets progress lines on stderr (ranks or events, from its manifest).
PROGRESS_RANKS, PROGRESS_EVENTS = 64, 1_000_000
#: Seconds between two progress lines.
PROGRESS_EVERY_S = 2.0


def rank_progress(say: Callable[[str], None], done_word: str) -> Callable[[int, int, int], None]:
    """``progress(done, total, events)`` for the ranks' loop: a line through ``say`` at most every
    :data:`PROGRESS_EVERY_S` seconds and at the last rank: ranks ``done_word`` (read, written) of all, the events
    so far and their rate (events per second of wall time since this call)."""
    started = last = time.perf_counter()

    def progress(done: int, total: int, events: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= PROGRESS_EVERY_S or done == total:
            last = now
            say(f"{done} of {total} ranks {done_word}, {events:,} events, "
                f"{events / max(now - started, 1e-9):,.0f} events/s")

    return progress
