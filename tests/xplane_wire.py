"""The lines of an XPlane read with the bare protobuf wire reader, for tests that check the XPlane importer against
the file's own fields (tsl/profiler/protobuf/xplane.proto)."""

from __future__ import annotations

from collections.abc import Iterator

from ddltrace.collectors.importers import protowire as pw


def xplane_lines(plane_fields: list) -> Iterator[tuple[str, int, list[list]]]:
    """(name, timestamp ns, [fields of each event]) of each line of an XPlane, given the plane's fields
    (XPlane.lines = 3; XLine.name = 2, display_name = 11, which names the line where present, timestamp_ns = 3,
    events = 4)."""
    for line in (pw.message(v) for n, _k, v in plane_fields if n == 3):
        name, display, base_ns, events = "", "", 0, []
        for n, _k, v in pw.fields(line):
            if n == 2:
                name = pw.text(v)
            elif n == 11:
                display = pw.text(v)
            elif n == 3:
                base_ns = pw.signed(v)
            elif n == 4:
                events.append(list(pw.fields(pw.message(v))))
        yield display or name, base_ns, events


def map_entries(plane_fields: list, number: int) -> dict:
    """{key: value message} of a map field of an XPlane (entry: key = 1, value = 2): its event_metadata (4) or
    stat_metadata (5)."""
    out = {}
    for n, _k, v in plane_fields:
        if n == number:
            entry = {en: ev for en, _ek, ev in pw.fields(pw.message(v))}
            out[pw.signed(entry.get(1, 0))] = pw.message(entry.get(2, b""))
    return out


def metadata_name(meta: bytes) -> str:
    """The name (field 2) of an XEventMetadata or XStatMetadata."""
    return next((pw.text(v) for n, _k, v in pw.fields(meta) if n == 2), "")
