"""Generate the C wrappers from :mod:`table` (one function per table entry and per ``_c`` twin present).

``generate(available)`` returns C source; ``available`` is the set of ``PMPI_*`` symbols the MPI library
exports, so a wrapper is generated only for what the library has (Open MPI 5 lacks most ``_c`` twins). The calls
that make and free communicators (:data:`~ddltrace.collectors.pmpi.table.MAKERS`) get wrappers that keep the
runtime's communicator ids and record the call, its ``comm`` the id of the communicator made or freed.
"""

from __future__ import annotations

import re

from ddltrace.collectors.pmpi.table import (
    MAKERS,
    PSEUDO,
    REQUEST_DONE,
    SENDRECV_RECEIVED,
    WRAPPERS,
    Maker,
    Wrapper,
    makers_hash,
    record_names,
    table_hash,
)

_PLAIN = {"COUNTS": "const int {}[]", "DISPLS": "const int {}[]", "COUNT": "int {}"}
_LARGE = {"COUNTS": "const MPI_Count {}[]", "DISPLS": "const MPI_Aint {}[]", "COUNT": "MPI_Count {}"}


def _params(params: str, large: bool) -> tuple[str, list[str]]:
    """The C parameter list for one binding, and the parameter names in order."""
    if params == "void":
        return "void", []
    decls, args = [], []
    for raw in params.split(","):
        raw = raw.strip()
        placeholder = raw.split()[0]
        if placeholder in _PLAIN:
            name = raw.split()[1]
            decls.append((_LARGE if large else _PLAIN)[placeholder].format(name))
        else:
            name = re.sub(r"\[\]$", "", raw.split()[-1].lstrip("*"))
            decls.append(raw)
        args.append(name)
    return ", ".join(decls), args


def _expr(expr: str, large: bool) -> str:
    return re.sub(r"\bSUM\(", "ddlt_sum_bytes_c(" if large else "ddlt_sum_bytes_i(", expr)


def _function(w: Wrapper, fn_id: int, large: bool) -> str:
    name = w.name + ("_c" if large else "")
    decl, args = _params(w.params, large)
    call = f"P{name}({', '.join(args)})"
    lines = [f"int {name}({decl})", "{"]
    if w.kind == "init":
        lines += [
            "    int64_t t0 = ddlt_now();",
            f"    int ret = {call};",
            f"    ddlt_after_init(t0, ddlt_now(), {fn_id}, ret);",
            "    return ret;",
            "}",
        ]
        return "\n".join(lines)
    if w.kind == "finalize":
        lines += [
            f"    if (!ddlt_active) return {call};",  # a rank that records nothing still takes part in the sync
            "    ddlt_before_finalize();",
            f"    ddlt_rec *r = ddlt_on ? ddlt_begin({fn_id}) : NULL;",
            f"    int ret = {call};",
            "    ddlt_after_finalize(r, ret);",
            "    return ret;",
            "}",
        ]
        return "\n".join(lines)
    lines.append(f"    if (!ddlt_on) return {call};")
    if w.status:
        lines.append(f"    MPI_Status ddlt_st; if ({w.status} == MPI_STATUS_IGNORE) {w.status} = &ddlt_st;")
    if w.pre:
        lines.append(f"    {w.pre}")
    if w.comm:  # its id, and its ranks' world ranks (DDLT_PEER), in ddlt_ci
        lines.append(f"    ddlt_comm_info *ddlt_ci = ddlt_comm({w.comm});")
    lines.append(f"    ddlt_rec *r = ddlt_begin({fn_id});")
    if w.comm:
        lines.append("    ddlt_set_comm(r, ddlt_ci);")
    if w.known:
        lines.append(f"    {w.known}")
    lines += [f"    int ret = {call};", "    int64_t t1 = ddlt_now();"]
    for column in ("bytes", "peer", "tag", "request", "aux"):
        expr = getattr(w, column)
        if expr is None:
            continue
        if column == "peer" and w.comm:
            expr = f"DDLT_PEER({expr})"
        lines.append(f"    r->{column} = {_expr(expr, large)};")
    if w.flag:
        lines.append(f"    if (ret == MPI_SUCCESS && *{w.flag}) r->flags |= DDLT_F_COMPLETED;")
    lines.append("    ddlt_end(r, ret, t1);")
    if w.done:
        lines.append(f"    if (ret == MPI_SUCCESS) {{ {w.done} }}")
    if w.post:
        lines.append(f"    {w.post}")
    lines += ["    return ret;", "}"]
    return "\n".join(lines)


def _maker(m: Maker, fn_id: int) -> str:
    """The wrapper of a call that makes or frees communicators: its record's ``comm`` is the id of the one made
    (agreed after the call, inside the record's time) or freed (its id before the call forgets it)."""
    decl, args = _params(m.params, False)
    call = f"P{m.name}({', '.join(args)})"
    body = [f"    if (!ddlt_active) return {call};", f"    ddlt_rec *r = ddlt_on ? ddlt_begin({fn_id}) : NULL;"]
    if m.kind == "free":
        body += [f"    if (r) ddlt_set_comm(r, ddlt_comm(*{m.new}));", f"    ddlt_comm_forget(*{m.new});",
                 f"    int ret = {call};"]
    else:
        hook = f"ddlt_comm_idup({args[0]}, {m.new})" if m.kind == "idup" else f"ddlt_comm_made(*{m.new})"
        body += [f"    int ret = {call};", f"    int64_t id = ret == MPI_SUCCESS ? {hook} : DDLT_NA64;",
                 "    if (r) r->comm = id;"]
    body += ["    if (r) ddlt_end(r, ret, ddlt_now());", "    return ret;"]
    return "\n".join([f"int {m.name}({decl})", "{", *body, "}"])


def generate(available: set[str] | None = None) -> str:
    """C source of every wrapper whose ``PMPI_`` symbol is in ``available`` (None: all of them)."""
    ids = {name: i + 1 for i, name in enumerate(record_names()) if name}
    out = [
        "/* Generated by ddltrace.collectors.pmpi.generate from table.py: do not edit. */",
        f"#define DDLT_TABLE_HASH {table_hash()}u",
        f"#define DDLT_MAKERS_HASH {makers_hash()}u",
        f"#define DDLT_FN_CLOCK_SYNC {ids[PSEUDO[0][0]]}",
        f"#define DDLT_FN_REQUEST_DONE {ids[REQUEST_DONE]}",
        f"#define DDLT_FN_SENDRECV_RECEIVED {ids[SENDRECV_RECEIVED]}",
        '#include "runtime.c"',
        "",
    ]
    for w in WRAPPERS:
        for large in (False, True) if w.large else (False,):
            name = w.name + ("_c" if large else "")
            if available is not None and "P" + name not in available:
                continue
            out.append(_function(w, ids[name], large))
            out.append("")
    for m in MAKERS:
        if available is None or "P" + m.name in available:
            out += [_maker(m, ids[m.name]), ""]
    return "\n".join(out)
