"""Keeping freed memory for reuse instead of handing it back to the kernel (glibc's ``malloc`` only).

By default glibc maps every block above 128 KiB (a threshold it raises as such blocks are freed) on its own and
unmaps it when freed, and trims the heap's top once 128 KiB of it are free: the next block of that size is new memory,
and each of its 4 KiB pages faults on first touch. On this project's VM a fault costs about 3 µs, and ``ddltrace
import`` of HTA's df_index_resolver trace (2.9 MiB gzip, 54 MB of JSON) faulted 30,000 times in its two processes:
the inflated text, each decoded piece's columns, the joined table, the Arrow columns, each new. With the blocks kept
in the heap up to :data:`MMAP_THRESHOLD` and the heap not trimmed below :data:`TRIM_THRESHOLD`, a block freed is used
again: 23,000 faults (the median of 30 runs each way, interleaved; benchmarks/import_speed.py prints the count),
0.03 s less CPU time. The memory stays the process's until it exits; the import's peak is unchanged (the blocks are
reused, not added). Readers forked afterwards inherit the setting. ``ddltrace analyze`` and ``report`` set it too:
``analyze`` of that trace's store faulted 38,400 times before, 26,800 after, 0.08 s less system time (median of 12
fresh processes each way, interleaved: wall 0.907 -> 0.818 s).
"""

from __future__ import annotations

#: Blocks up to this size (bytes) come from the heap (glibc's largest allowed value on 64-bit).
MMAP_THRESHOLD = 32 << 20
#: The heap's free top is handed back to the kernel only beyond this (bytes).
TRIM_THRESHOLD = 512 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Set glibc's thresholds as above for this process; False where the C library has no ``mallopt`` (musl,
    macOS) or refuses a value, and nothing changes."""
    import ctypes  # (already loaded by NumPy: no start-up cost here)

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
