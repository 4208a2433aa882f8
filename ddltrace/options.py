"""Range-checked numbers for the command line: every numeric option of every verb is parsed by one of these.

``type=integer(1, MAX_COUNT)`` or ``type=number(0.01, 1000, unit="Hz")`` in ``add_argument`` refuses, when the
arguments are parsed, what is not a number, NaN and the infinities, and anything outside the range, so a bad
value is argparse's one usage line (exit 2) and never reaches a sleep, a socket timeout or a C integer::

    ddltrace run: error: argument --sample-hz: nan is not a finite number (expected 0.01 to 1000 Hz) (see --help)

:func:`finite` checks a number given inside another option (``--fix NAME=VALUE``, ``--what-if``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from ddltrace.errors import DdltraceError

#: The largest count (ranks, workers, samples, ...) an option takes: a C int, as MPI counts them.
MAX_COUNT = 2**31 - 1
#: The system and GPU samplers' rates, in samples per second: slower, a job ends before its first sample and a
#: sampler's sleep can overflow; faster, a sampler is a busy loop that costs the job its CPU.
SAMPLE_HZ = (0.01, 1000.0)


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _expected(low: float | None, high: float | None, unit: str, low_open: bool) -> str:
    suffix = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{'above ' if low_open else ''}{_shown(low)}{' up' if low_open else ''} to {_shown(high)}{suffix}"
    if low is not None:
        return f"{'above' if low_open else 'at least'} {_shown(low)}{suffix}"
    return f"at most {_shown(high)}{suffix}" if high is not None else "a number"


def integer(low: int | None = None, high: int | None = MAX_COUNT, unit: str = "") -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high`` (both included; None: unbounded)."""

    def parse(text: str) -> int:
        expected = _expected(low, high, unit, False)
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (expected {expected})") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range (expected {expected})")
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float | None = None, high: float | None = None, unit: str = "", *,
           low_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number from ``low`` to ``high`` (``low_open``: ``low`` itself excluded)."""

    def parse(text: str) -> float:
        expected = _expected(low, high, unit, low_open)
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number (expected {expected})") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number (expected {expected})")
        below = low is not None and (value <= low if low_open else value < low)
        if below or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} is out of range (expected {expected})")
        return value

    parse.__name__ = "number"
    return parse


#: The largest magnitude of a number given to the models (in its own unit: s, B, samples, ...): far past any
#: machine's or job's, and small enough that their products and quotients stay finite (1e300 made infinities).
LARGEST = 1e15


def positive(unit: str = "") -> Callable[[str], float]:
    """An argparse ``type``: a finite number above 0, at most :data:`LARGEST`."""
    return number(0, LARGEST, unit, low_open=True)


def finite(text: str, what: str) -> float:
    """``text`` as a finite number; :class:`DdltraceError` naming ``what`` (the option and item) otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise DdltraceError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise DdltraceError(f"{what}: {text} is not a finite number")
    return value
