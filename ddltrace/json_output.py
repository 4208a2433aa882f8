"""The ``--json`` output: frames as records and values as JSON text, with msgspec.

:func:`encode` writes the text ``json.dumps(value, indent=2, allow_nan=False)`` wrote for the value made JSON-ready
(keys as ``str(key)``, numpy scalars as Python numbers, NaN, infinities and ``pd.NA`` as null), byte for byte, in
a fourteenth of the time (HTA's df_index_resolver, 1.2 MB of JSON: 2.2 against 29.9 ms of CPU); :func:`records`
gives a frame's rows ready for it, a column at a time instead of a value at a time (``DataFrame.to_dict`` then a
clean of every value: ``to_json`` and the text of df_index_resolver's 2,020 collectives took 108 ms of CPU, 31 now).

The text is json's to the byte where msgspec's would differ: msgspec writes a float below 1e-4 or from 1e16 up as
``2.5e-7``, ``0.000025`` or ``1e16`` (the same value), Python as ``2.5e-07``, ``2.5e-05``, ``1e+16``; those floats go
to msgspec as their Python spelling (:class:`msgspec.Raw`), and characters outside printable ASCII, which msgspec
writes as they are, are escaped as ``\\uXXXX`` as json does (the output stays ASCII whatever the terminal's
encoding).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Floats from here up to :data:`_BIG` (and zero) are written the same by msgspec and by Python's ``repr``.
_SMALL, _BIG = 1e-4, 1e16
#: What json escapes with ``ensure_ascii`` and msgspec writes as it is: DEL and everything outside ASCII.
_NOT_ASCII = re.compile("[\x7f-\U0010ffff]")


class Records(list):
    """The rows of a frame as dicts of values ready for :func:`encode` (made by :func:`records`): it writes them
    as they are, without looking at each value again."""


def records(frame: pd.DataFrame, index: bool = False) -> Records:
    """The rows of ``frame`` as dicts (``str`` of each column's name to the row's value), ``index``: with the
    index first as columns (``reset_index``'s names); the values as ``DataFrame.to_dict(orient="records")`` gives
    them, made JSON-ready a column at a time (a missing value is written null)."""
    if index:
        frame = frame.reset_index()
    names = [str(name) for name in frame.columns]
    columns = [_column(series) for _, series in frame.items()]
    return Records(dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True))


def _column(series: pd.Series) -> list:
    """One column's values, JSON-ready: numbers (numpy's or pandas' nullable ones) and strings at once (NaN
    stays: :func:`encode` writes it null; a missing value of a nullable column is None), any other value one at a
    time (:func:`_ready`)."""
    import numpy as np
    import pandas as pd

    dtype = series.dtype
    if isinstance(dtype, np.dtype):
        return _numbers(series.to_numpy()) if dtype.kind in "iufb" else [_ready(v) for v in series.tolist()]
    if isinstance(dtype, pd.StringDtype) or getattr(dtype, "kind", "O") in "iufb":
        missing = series.isna().to_numpy()
        if isinstance(dtype, pd.StringDtype):
            out = series.tolist()
        else:  # Int64, Float64, boolean (pandas' masked arrays), Arrow's numbers: their values, a missing one 0
            out = _numbers(series.to_numpy(dtype=dtype.numpy_dtype, na_value=0))
        for i in np.flatnonzero(missing):
            out[i] = None
        return out
    return [_ready(v) for v in series.tolist()]


def _numbers(values: np.ndarray) -> list:
    """A numpy array of numbers as Python's, each float msgspec would spell otherwise as Python's text."""
    import numpy as np

    out = values.tolist()
    if values.dtype.kind == "f":
        size = np.abs(values)
        for i in np.flatnonzero(np.isfinite(values) & (size != 0) & ((size < _SMALL) | (size >= _BIG))):
            out[i] = _python_spelling(out[i])
    return out


def _python_spelling(x: float):
    """A finite float that msgspec would spell otherwise than Python: Python's text, written as it is."""
    import msgspec

    return msgspec.Raw(repr(x).encode())


def _ready(value):
    """``value`` ready for msgspec: dicts with ``str`` keys, tuples as lists, numpy scalars as Python values,
    NaN, infinities and ``pd.NA`` as None, a float msgspec would spell otherwise as Python's text; a
    :class:`Records` as it is."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None or kind is Records:
        return value
    if isinstance(value, float):  # numpy's float64 is one
        if not math.isfinite(value):
            return None
        value = float(value)
        return value if value == 0 or _SMALL <= abs(value) < _BIG else _python_spelling(value)
    if isinstance(value, dict):
        return {str(k): _ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_ready(v) for v in value]
    if kind.__module__ == "numpy" and hasattr(value, "item"):  # a numpy scalar: its Python value
        return _ready(value.item())
    from pandas import NA

    return None if value is NA else value


def encode(value) -> str:
    """``value`` as JSON text indented by two spaces, as ``json.dumps(value, indent=2, allow_nan=False)`` writes
    it once made JSON-ready (see the module); a value json cannot write (an object of another kind) raises
    TypeError."""
    import msgspec

    text = msgspec.json.format(msgspec.json.encode(_ready(value)), indent=2).decode()
    return text if text.isascii() and "\x7f" not in text else _NOT_ASCII.sub(_escaped, text)


def _escaped(match: re.Match) -> str:
    """One character as json writes it with ``ensure_ascii`` (a pair of surrogates beyond U+FFFF)."""
    code = ord(match.group())
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"
    return f"\\u{code:04x}"
