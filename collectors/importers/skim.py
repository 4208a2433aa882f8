"""Following one JSON value too large to hold, keeping only a bounded copy of it.

The Chrome reader hands an event here when its text runs past its limit without ending: a name of a GiB, a GiB of
spaces inside an event, brackets that never close. :class:`Skimmer` follows the JSON structure (strings with their
escapes, brackets, commas) piece by piece, with one ``find`` or one regex match per string or run of spaces,
brackets or literal text, and keeps a compact copy: whitespace outside strings dropped, each string cut to its first
``string_keep`` bytes (at a character and escape boundary), the copy itself capped at ``limit`` bytes (beyond it only
the structure is followed, and the value is marked :attr:`Skimmer.too_large`). Memory: the copy, whatever the
value's size.
"""

from __future__ import annotations

import re

#: One token outside strings: whitespace, a quote, a run of openers, a run of closers, a comma, other text.
_TOKEN = re.compile(rb'(\s+)|(")|([\[{]+)|([\]}]+)|(,)|([^"\[\]{}\s,]+)')
_SPACE, _QUOTE, _OPEN, _CLOSE, _COMMA, _TEXT = range(1, 7)


class Skimmer:
    """One JSON value, fed in pieces (:meth:`feed`) until it ends; :attr:`copy` holds its compact text."""

    def __init__(self, string_keep: int, limit: int):
        self.string_keep = string_keep
        self.limit = limit
        self.copy = bytearray()
        self.too_large = False  # the copy passed ``limit``: the value is only followed
        self.consumed = 0  # bytes fed and followed
        self.opened = False  # the value is an object or array (it started with an opener)
        self.depth = 0
        self.in_string = False
        self.escaped = False  # in a string, the next byte is escaped (the piece ended after a lone backslash)
        self.string_start = 0  # where the current string's text begins in the copy
        self.string_size = 0  # bytes of the current string seen
        self.cut_strings = 0  # strings cut to ``string_keep`` bytes

    def feed(self, data: bytes, start: int = 0) -> int | None:
        """Follow ``data`` from ``start``: the index in it just past the value's end when the value ends there,
        else None (all of ``data`` followed)."""
        end = self._follow(data, start)
        self.consumed += (len(data) if end is None else end) - start
        return end

    def _follow(self, data: bytes, pos: int) -> int | None:
        end = len(data)
        while pos < end:
            if self.in_string:
                pos = self._string(data, pos)
                continue
            m = _TOKEN.match(data, pos)
            kind, stop = m.lastindex, m.end()
            if kind == _QUOTE:
                self._keep(b'"')
                self.in_string, self.string_start, self.string_size = True, len(self.copy), 0
            elif kind == _OPEN:
                self.opened = True
                self.depth += stop - pos
                self._keep(data[pos:stop])
            elif kind == _CLOSE:
                if self.depth == 0:  # the closer of the enclosing array: the value ended before it
                    return pos
                closing = min(stop - pos, self.depth)
                self.depth -= closing
                self._keep(data[pos:pos + closing])
                if self.depth == 0:
                    return pos + closing
            elif kind == _COMMA:
                if self.depth == 0:
                    return pos
                self._keep(b",")
            elif kind == _TEXT:
                self._keep(data[pos:stop])
            pos = stop
        return None

    def _string(self, data: bytes, pos: int) -> int:
        """Follow a string's text from ``pos``; where to go on (past its closing quote, or the end of ``data``)."""
        end = len(data)
        if self.escaped:
            self.escaped = False
            self._keep_string(data, pos, pos + 1)
            return pos + 1
        search = pos
        while (quote := data.find(b'"', search)) >= 0:
            if _backslashes_before(data, pos, quote) % 2 == 0:
                self._keep_string(data, pos, quote)
                self._close_string()
                return quote + 1
            search = quote + 1
        self.escaped = _backslashes_before(data, pos, end) % 2 == 1
        self._keep_string(data, pos, end)
        return end

    def _keep_string(self, data: bytes, start: int, stop: int) -> None:
        room = self.string_keep - self.string_size
        if room > 0:
            self._keep(data[start:start + min(room, stop - start)])
        self.string_size += stop - start

    def _close_string(self) -> None:
        self.in_string = False
        if self.string_size > self.string_keep:
            self.cut_strings += 1
            if not self.too_large:
                del self.copy[self.string_start + _clean_cut(self.copy[self.string_start:]):]
        self._keep(b'"')

    def _keep(self, text: bytes) -> None:
        if self.too_large:
            return
        if len(self.copy) + len(text) > self.limit:
            self.too_large = True
            self.copy = bytearray()
            return
        self.copy += text


def _backslashes_before(data: bytes, start: int, at: int) -> int:
    """How many backslashes end ``data[start:at]``."""
    segment = data[start:at]
    return len(segment) - len(segment.rstrip(b"\\"))


def _clean_cut(text: bytearray) -> int:
    """The length of the longest prefix of a cut string's text that ends neither inside an escape nor inside a
    UTF-8 character."""
    size = len(text)
    slash = text.rfind(b"\\", max(0, size - 6))
    if slash >= 0 and _backslashes_before(bytes(text), 0, slash + 1) % 2:  # an escape begins there
        escape = text[slash:]
        if len(escape) < 2 or (escape[1:2] == b"u" and len(escape) < 6):
            size = slash
    for back in range(1, min(4, size) + 1):  # a multi-byte character missing its last bytes
        byte = text[size - back]
        if byte & 0xC0 == 0x80:
            continue
        if byte >= 0xC0 and back < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4):
            size -= back
        break
    return size
