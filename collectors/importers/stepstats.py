"""TensorFlow 1.x ``RunMetadata.step_stats`` as protobuf text (``str(run_metadata.step_stats)``, ``.pbtxt``).

The timeline JSON is made from this, but the text keeps what the JSON drops: a ``RecvTensor`` node's label
"[32768B] [495.5Mb/s] edge_7_MatMul/ReadVariableOp from /job:ps/.../CPU:0 to /job:worker/.../CPU:0" names
the tensor, its size and both devices. Each ``dev_stats`` is a device (the same device can appear twice: the
RPC receives and the executor's nodes); each ``node_stats`` one node run: ``all_start_nanos`` (ns since the
epoch; ``all_start_micros`` in older files) plus ``all_end_rel_nanos``/``_micros``.

Events: the op type from ``timeline_label`` ("name = Op(inputs)") as the name, categorised by the TF1 rules;
lanes ``cpu:0/thread <id>`` for executor nodes (a GPU's: ``host/gpu:0 executor/thread <id>``, its streams'
``gpu:0/stream:7/thread <id>``, as the TF1 JSON) and ``cpu:0/RecvTensor <i>`` for receives (packed, they overlap).
Receives get ``bytes`` (the output's requested bytes, else the label's), ``peer`` (the sending task's rank),
and ``tag`` (CRC-32 of the edge name: the same tensor carries the same tag everywhere). Ranks as for the TF1
JSON: ``/job:worker/task:k`` is rank k, other jobs (ps) are numbered after the workers by the import command.

Each receive whose producing node (the edge name without ``edge_<n>_``) ran on the sending task in the same
file is a matched message: it cannot end before its producer ended, on two clocks (``RankPart.messages``).
"""

from __future__ import annotations

import codecs
import re
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from ddltrace.arrow_timeline import optional_integers
from ddltrace.collectors.importers import protowire as pw
from ddltrace.collectors.importers.base import (
    ImportContext,
    Importer,
    RankPart,
    build_timeline,
    rank_from_path,
    register,
)
from ddltrace.collectors.importers.source import ByteSource
from ddltrace.collectors.importers.tensorflow import tf1_lane_prefix
from ddltrace.errors import DdltraceError

FORMAT = "tf1-stepstats"
_SNIFF = re.compile(rb"^\s*(?:#[^\n]*\n\s*)*(?:step_stats\s*:?\s*[{<]\s*)?dev_stats\s*:?\s*[{<]\s*device\s*:")
_TOKEN = re.compile(r"""\s*(?:#[^\n]*(?:\n|$)\s*)*(?:("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|([{}<>\[\]:,;])|"""
                    r"""([^\s{}<>\[\]:,;"'#]+))""", re.S)
_DEVICE = re.compile(r"^(?:/job:(?P<job>[^/]+)/replica:\d+/task:(?P<task>\d+))?"
                     r"(?:/device:|/)(?P<kind>[A-Za-z_]+):(?P<index>\d+)(?P<rest>/.*)?$")
_OP = re.compile(r" = ([\w.>:-]+)\(")
_RECV_LABEL = re.compile(r"^(?:\[(?P<size>[\d.]+)\s*(?P<unit>[KMGT]?i?B)\]\s*)?(?:\[[^\]]*\]\s*)?(?P<edge>\S+) "
                         r"from (?P<src>\S+) to (?P<dst>\S+)\s*$")
_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
          "TiB": 2**40}
_EDGE = re.compile(r"^edge_\d+_(.+?)(?::\d+)?$")
_COMM_RECV = {"RecvTensor", "_Recv", "_HostRecv"}


def sniff(head: bytes, path: Path) -> bool:
    return bool(_SNIFF.search(head))


def parse_text(text: str) -> tuple[dict, bool]:
    """A protobuf text message as nested dicts of lists (every field repeated), without the schema.
    Returns the tree and whether the text ended inside a message (truncated; what was complete is kept)."""
    root: dict = {}
    stack = [root]
    name: str | None = None
    in_list = False
    for m in _TOKEN.finditer(text):
        string, punct, word = m.groups()
        if punct is not None:
            if punct in "{<":
                child: dict = {}
                stack[-1].setdefault(name or "?", []).append(child)
                stack.append(child)
                name = None
            elif punct in "}>":
                if len(stack) > 1:
                    stack.pop()
                name = None
            elif punct == "[":
                in_list = name is not None
            elif punct == "]":
                in_list, name = False, None
            continue
        if name is None:
            name = word if word is not None else string.strip("\"'")
            continue
        if string is not None:
            value = codecs.escape_decode(string[1:-1].encode("utf-8", "surrogateescape"))[0].decode("utf-8",
                                                                                                   "replace")
        else:
            value = word
        stack[-1].setdefault(name, []).append(value)
        if not in_list:
            name = None
    for open_message in stack[1:]:
        open_message["__truncated__"] = True
    return root, len(stack) > 1


def _first(msg: dict, key: str, default=None):
    """The first value of a scalar field (a message where a value belongs, as in a damaged file, is passed over)."""
    values = [v for v in msg.get(key, ()) if not isinstance(v, dict)]
    return values[0] if values else default


def _messages(msg: dict, key: str) -> list[dict]:
    """The sub-messages of a field (a value where a message belongs, as in a damaged file, is passed over)."""
    return [v for v in msg.get(key, ()) if isinstance(v, dict)]


def _int(msg: dict, key: str) -> int | None:
    value = _first(msg, key)
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return None
    return number if number is None or abs(number) < 1 << 62 else None  # beyond int64 ns: not a time or size


def _dev_stats(tree: dict) -> list[dict]:
    if "dev_stats" in tree:
        return _messages(tree, "dev_stats")
    for child in _messages(tree, "step_stats"):
        if "dev_stats" in child:
            return _messages(child, "dev_stats")
    return []


def _ident(match: re.Match) -> tuple[str, int]:
    return match.group("job") or "localhost", int(match.group("task") or 0)


def _output_bytes(node: dict) -> int | None:
    total, seen = 0, False
    for output in _messages(node, "output"):
        for desc in _messages(output, "tensor_description"):
            for alloc in _messages(desc, "allocation_description"):
                value = _int(alloc, "requested_bytes")
                if value is not None:
                    total, seen = total + value, True
    return total if seen else None


def _pack(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Greedy lanes for overlapping intervals (first lane free at each start), in input order."""
    order = np.argsort(starts, kind="stable")
    lane_end: list[int] = []
    lanes = np.zeros(len(starts), dtype=np.int64)
    for i in order:
        for k, end in enumerate(lane_end):
            if end <= starts[i]:
                lanes[i], lane_end[k] = k, ends[i]
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(ends[i])
    return lanes


def peer_placeholder(identity: tuple[str, int]) -> int:
    """A negative peer value standing for a task the import command numbers later (a ps task): the same for
    the same task in every file, resolved with ``RankPart.info['peer_identities']``."""
    return -1 - (zlib.crc32(f"{identity[0]}/{identity[1]}".encode()) & 0x3FFFFFFF)


def read(path: Path, ctx: ImportContext):
    source = ByteSource(path)
    text = source.read_all().decode("utf-8", "replace")
    tree, truncated = parse_text(text)
    report = ctx.report
    if report is not None:
        report.problems.extend(source.problems)
        if truncated:
            report.problems.append(f"{path}: text ends inside a message (truncated); complete nodes kept")
    yield from _read_tree(tree, path, ctx, "protobuf text")


#: The binary messages' fields that the reader uses: message -> {field number: (name, the field's message or
#: "int" / "str")}, from tensorflow/core/framework/step_stats.proto, tensor_description.proto,
#: allocation_description.proto and protobuf/config.proto (RunMetadata).
_SCHEMA = {
    "RunMetadata": {1: ("step_stats", "StepStats")},
    "StepStats": {1: ("dev_stats", "DeviceStepStats")},
    "DeviceStepStats": {1: ("device", "str"), 2: ("node_stats", "NodeExecStats")},
    "NodeExecStats": {1: ("node_name", "str"), 2: ("all_start_micros", "int"), 5: ("all_end_rel_micros", "int"),
                      7: ("output", "NodeOutput"), 8: ("timeline_label", "str"), 10: ("thread_id", "int"),
                      13: ("all_start_nanos", "int"), 16: ("all_end_rel_nanos", "int")},
    "NodeOutput": {3: ("tensor_description", "TensorDescription")},
    "TensorDescription": {4: ("allocation_description", "AllocationDescription")},
    "AllocationDescription": {1: ("requested_bytes", "int")},
}


#: The messages that hold others: one cut short by the end of the file keeps what it holds before the cut.
_CONTAINERS = {"RunMetadata", "StepStats", "DeviceStepStats"}


def decode_binary(data: bytes, kind: str, skipped: Counter, cut: bool = False) -> dict:
    """A binary message as the text parser's tree (field name -> list of values), only the fields in
    :data:`_SCHEMA`; a sub-message that does not decode is left out and counted in ``skipped``. ``cut``: the
    message is cut short by the end of the file (its last field runs past it): a container's last message is
    read the same way, a node or value cut short is left out and counted."""
    tree: dict = {}
    schema = _SCHEMA[kind]
    found = pw.fields_to_cut(data) if cut else ((n, w, v, False) for n, w, v in pw.fields(data))
    for number, _wire, value, short in found:
        if number not in schema:
            continue
        name, field_kind = schema[number]
        if short and field_kind not in _CONTAINERS:
            skipped[f"{field_kind if field_kind in _SCHEMA else name} cut short by the end of the file"] += 1
        elif short:
            tree.setdefault(name, []).append(decode_binary(value, field_kind, skipped, cut=True))
        elif field_kind == "int":
            tree.setdefault(name, []).append(pw.signed(value))
        elif field_kind == "str":
            tree.setdefault(name, []).append(pw.text(value))
        else:
            try:
                tree.setdefault(name, []).append(decode_binary(pw.message(value), field_kind, skipped))
            except ValueError:
                skipped[f"undecodable {field_kind} messages"] += 1
    return tree


def sniff_binary(head: bytes, path: Path) -> bool:
    """A ``.pb`` file (not XPlane's) that starts as a RunMetadata or a StepStats: one or two messages in field 1,
    then a DeviceStepStats whose device name (field 1) starts with "/"."""
    name = path.name.removesuffix(".gz")
    if not name.endswith(".pb") or name.endswith(".xplane.pb"):
        return False
    pos = 0
    for _ in range(3):
        if head[pos:pos + 1] != b"\x0a":
            return False
        try:
            _size, pos = pw.varint(head, pos + 1)
        except ValueError:
            return False
        if head[pos:pos + 2] in (b"/j", b"/d", b"/c", b"/g", b"/l"):  # /job:, /device:, /cpu:, /gpu:, /localhost
            return True
    return False


def read_binary(path: Path, ctx: ImportContext):
    source = ByteSource(path)
    data = source.read_all()
    skipped: Counter = Counter()
    tree, truncated = {}, False
    for cut in (False, True):  # whole, else cut short by the end of the file (its complete nodes kept)
        try:
            skipped.clear()
            tree = decode_binary(data, "RunMetadata", skipped, cut)
            if not _dev_stats(tree):  # a bare StepStats
                skipped.clear()
                tree = decode_binary(data, "StepStats", skipped, cut)
        except ValueError as exc:
            if cut:
                raise DdltraceError(f"{path}: not a readable RunMetadata / StepStats protobuf ({exc})") from exc
            continue
        truncated = cut
        break
    if truncated and not any(dev.get("node_stats") for dev in _dev_stats(tree)):
        raise DdltraceError(f"{path}: not a readable RunMetadata / StepStats protobuf (cut short before its "
                            "first complete node)")
    if ctx.report is not None:
        ctx.report.problems.extend(source.problems)
        if truncated:
            ctx.report.problems.append(f"{path}: the protobuf ends inside a message (truncated); complete nodes "
                                       "kept")
        ctx.report.skipped.update(skipped)
    yield from _read_tree(tree, path, ctx, "binary protobuf")


def _read_tree(tree: dict, path: Path, ctx: ImportContext, what: str):
    """The ranks' parts from a StepStats tree (from the text or the binary form)."""
    report = ctx.report
    devices = _dev_stats(tree)
    if not devices:
        raise DdltraceError(f"{path}: no dev_stats in this {what} (not a TensorFlow StepStats)")
    rows = []  # ident, lane, name, start, dur, bytes, peer ident, tag
    produced: dict[tuple, int] = {}  # (ident, node name) -> end of the node's last run
    receives = []  # (row index, edge, src ident)
    skipped: Counter = Counter()
    for dev in devices:
        device = _first(dev, "device", "")
        m = _DEVICE.match(device)
        nodes = _messages(dev, "node_stats")
        if m is None:
            skipped[f"nodes on an unrecognised device name ({device!r})"] += len(nodes)
            continue
        rest = m.group("rest") or ""
        if rest == "/stream:all":
            skipped["duplicate GPU events (/stream:all)"] += len(nodes)
            continue
        ident, lane_prefix = _ident(m), tf1_lane_prefix(m)
        for node in nodes:
            start = _int(node, "all_start_nanos")
            dur = _int(node, "all_end_rel_nanos") if start is not None else None
            if start is None:
                micros = _int(node, "all_start_micros")
                if micros is None:
                    skipped["incomplete node_stats (no start time)" if node.get("__truncated__") is None
                            else "node cut off by the end of the file"] += 1
                    continue
                start = micros * 1000
            if dur is None:
                dur = (_int(node, "all_end_rel_micros") or 0) * 1000
            if dur < 0:
                skipped["negative duration"] += 1
                continue
            node_name = _first(node, "node_name", "")
            label = _first(node, "timeline_label", "")
            op = _OP.search(label)
            name = "RecvTensor" if node_name == "RecvTensor" else op.group(1) if op else node_name or "?"
            produced[(ident, node_name)] = max(produced.get((ident, node_name), 0), start + dur)
            nbytes = peer = tag = None
            if name in _COMM_RECV:
                nbytes = _output_bytes(node)
                rm = _RECV_LABEL.match(label)
                if rm:
                    if nbytes is None and rm.group("size"):
                        nbytes = int(float(rm.group("size")) * _UNITS.get(rm.group("unit"), 1))
                    src = _DEVICE.match(rm.group("src"))
                    if src is not None:
                        peer = _ident(src)
                        tag = zlib.crc32(rm.group("edge").encode()) & 0x7FFFFFFF
                        receives.append((len(rows), rm.group("edge"), peer))
            lane = f"{lane_prefix}/RecvTensor" if name == "RecvTensor" else \
                f"{lane_prefix}/thread {_int(node, 'thread_id') or 0}"
            rows.append((ident, lane, name, start, dur, nbytes, peer, tag))
    if report is not None:
        report.events += len(rows) + sum(skipped.values())
        report.skipped.update(skipped)
    if not rows:
        raise DdltraceError(f"{path}: no node_stats with times in this StepStats text")

    ops = Counter(r[0] for r in rows if r[2] != "RecvTensor")
    producer = max((i for i in ops if i[0] in ("worker", "localhost")), key=lambda i: ops[i], default=None)
    idents = sorted({r[0] for r in rows} | {r[6] for r in rows if r[6] is not None})

    def rank_of(ident):
        if ident[0] not in ("worker", "localhost"):
            return ident
        return rank_from_path(path, ctx.rank_from, ctx, default=ident[1]) if ident == producer else ident[1]

    ranks = {ident: rank_of(ident) for ident in idents}
    peer_code = {ident: (r if isinstance(r, int) else peer_placeholder(ident)) for ident, r in ranks.items()}
    placeholders = {str(peer_code[i]): list(i) for i in idents if not isinstance(ranks[i], int)}

    messages = defaultdict(list)  # receiving ident -> (src rank, dst rank, send_ns, recv_end_ns)
    for index, edge, src in receives:
        em = _EDGE.match(edge)
        sent = produced.get((src, em.group(1))) if em else None
        if sent is not None:
            row = rows[index]
            messages[row[0]].append((ranks[src], ranks[row[0]], sent, row[3] + row[4]))

    for ident in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == ident]
        lanes: dict[str, int] = {}
        lane_names = [r[1] for r in mine]
        recv = np.array([r[2] == "RecvTensor" for r in mine])
        starts = np.array([r[3] for r in mine], dtype=np.int64)
        durs = np.array([r[4] for r in mine], dtype=np.int64)
        for prefix in {n for n, is_recv in zip(lane_names, recv, strict=True) if is_recv}:
            sel = np.flatnonzero([n == prefix for n in lane_names])
            for i, k in zip(sel, _pack(starts[sel], starts[sel] + durs[sel]), strict=True):
                lane_names[i] = f"{prefix} {k}"
        lane_codes = np.array([lanes.setdefault(n, len(lanes)) for n in lane_names], dtype=np.int64)
        keys: dict[str, int] = {}
        key_codes = np.array([keys.setdefault(r[2], len(keys)) for r in mine], dtype=np.int64)
        timeline = build_timeline(
            rank=0 if isinstance(ranks[ident], tuple) else ranks[ident], lane_codes=lane_codes,
            lane_table=list(lanes), key_codes=key_codes, key_table=[("Op", k) for k in keys],
            start_ns=starts, dur_ns=durs, fmt=FORMAT, ctx=ctx,
            extra={"bytes": optional_integers([r[5] for r in mine], pa.int64()),
                   "peer": optional_integers([peer_code[r[6]] if r[6] is not None else None for r in mine],
                                             pa.int32()),
                   "tag": optional_integers([r[7] for r in mine], pa.int32())})
        if report is not None:
            report.intervals += len(timeline)
        job, task = ident
        info = {"format": FORMAT, "file": str(path), "role": job, "task": task, "device_job": f"/job:{job}/task:{task}",
                "time_base": "ns since the Unix epoch (each task's wall clock)"}
        used = {str(v) for v in timeline.column("peer").to_pylist() if v is not None and v < 0}
        if used:
            info["peer_identities"] = {k: v for k, v in placeholders.items() if k in used}
        msgs = messages.get(ident)
        frame = _messages_frame(msgs) if msgs else None
        yield RankPart(rank=ranks[ident], timeline=timeline, info=info, clock="epoch", messages=frame)


def _messages_frame(messages: list[tuple]):
    """The matched messages (src, dst, send_ns, recv_ns) as the frame clock alignment reads."""
    import pandas as pd

    return pd.DataFrame(messages, columns=["src", "dst", "send_ns", "recv_ns"])


register(Importer(FORMAT, "TensorFlow 1.x RunMetadata.step_stats as protobuf text (RecvTensor bytes and peers)",
                  sniff, read))
register(Importer(FORMAT + "-pb", "TensorFlow 1.x RunMetadata / StepStats as binary protobuf (.pb, .pb.gz)",
                  sniff_binary, read_binary))
