"""The protobuf wire format, read without a schema compiler or the protobuf package: the fields of one
message's bytes, and the checks that a field holds what the reader's schema says it holds.

A damaged or foreign message raises :class:`ValueError` (never an unrelated exception), so a reader can skip and
count what does not decode.
"""

from __future__ import annotations

from collections.abc import Iterator


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("varint runs past the end")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of a message: an int for varints, bytes otherwise."""
    pos, end = 0, len(message(data))
    while pos < end:
        key, pos = varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, pos = varint(data, pos)
        elif kind in (1, 2, 5):
            size, pos = ({1: 8, 5: 4}[kind], pos) if kind != 2 else varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
            if pos > end:
                raise ValueError("a field runs past the end")
        else:
            raise ValueError(f"unsupported wire type {kind}")
        yield number, kind, value


def fields_to_cut(data: bytes) -> Iterator[tuple[int, int, int | bytes, bool]]:
    """As :func:`fields`, with a flag, for a message cut short by the end of the data: a length-delimited field
    that runs past the end is yielded with the bytes there are and True (it is the last); a number or a key cut
    short ends the fields."""
    pos, end = 0, len(data)
    while pos < end:
        try:
            key, pos = varint(data, pos)
            kind = key & 7
            if kind == 0:
                value, pos = varint(data, pos)
            elif kind == 2:
                size, pos = varint(data, pos)
                if pos + size > end:
                    yield key >> 3, kind, data[pos:], True
                    return
                value, pos = data[pos:pos + size], pos + size
            elif kind in (1, 5):
                size = 8 if kind == 1 else 4
                if pos + size > end:
                    return
                value, pos = data[pos:pos + size], pos + size
            else:
                raise ValueError(f"unsupported wire type {kind}")
        except ValueError as exc:
            if "runs past the end" in str(exc):
                return
            raise
        yield key >> 3, kind, value, False


def number(v) -> int:
    """A varint field's value (ValueError when the field holds bytes: not this schema)."""
    if not isinstance(v, int):
        raise ValueError("a number field holds bytes")
    return v


def signed(v) -> int:
    """An int64 varint's value (negative numbers are written as 10-byte two's complement)."""
    v = number(v)
    return v - (1 << 64) if v >= 1 << 63 else v


def text(v) -> str:
    """A length-delimited field's value as text (ValueError when the field holds a number)."""
    if not isinstance(v, bytes):
        raise ValueError("a text field holds a number")
    return v.decode("utf-8", "replace")


def message(v) -> bytes:
    """A nested message's bytes (ValueError when the field holds a number)."""
    if not isinstance(v, bytes):
        raise ValueError("a message field holds a number")
    return v
