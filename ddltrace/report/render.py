"""Rendering a :class:`~ddltrace.report.Report` as one self-contained HTML page and as Markdown.

The HTML embeds every figure as a base64 PNG and its style sheet inline: it opens from disk or as an e-mail
attachment with no network access. Every string that may come from a trace goes through :func:`html.escape`
(HTML) or :func:`_md_escape` (Markdown).
"""

from __future__ import annotations

import base64
import html as _html
import numbers

import pandas as pd

from ddltrace import __version__
from ddltrace.store import rank_runs

_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0 auto;
       max-width: 1000px; padding: 1.5em; color: #222; line-height: 1.45; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.meta { color: #666; font-size: 0.85em; }
.verdict { background: #f4f6fa; border-left: 4px solid #4C72B0; padding: 0.6em 1em; font-size: 1.05em; }
.finding { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 1em; margin: 0.8em 0; }
.sev { display: inline-block; padding: 0 0.5em; border-radius: 3px; color: white; font-size: 0.8em;
       text-transform: uppercase; margin-right: 0.5em; }
.sev-error { background: #C44E52; } .sev-warning { background: #DD8452; } .sev-info { background: #4C72B0; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: right; } th { background: #f4f4f4; }
td.key, th.key { text-align: left; }
figure { margin: 1em 0; page-break-inside: avoid; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
.scroll { overflow-x: auto; }
a.thumb { display: inline-block; margin: 0.3em 0; text-decoration: none; color: #555; font-size: 0.85em; }
a.thumb img { display: block; max-width: 420px; max-height: 220px; border: 1px solid #ddd; }
.perfetto { background: #f7f7f7; padding: 0.5em 1em; font-size: 0.9em; }
.perfetto button { font-size: 1em; padding: 0.2em 0.8em; cursor: pointer; }
@media print { body { max-width: none; padding: 0; } .finding, figure, table { page-break-inside: avoid; } }
"""


def _e(value) -> str:
    return _html.escape(str(value), quote=True)


def _md_escape(value) -> str:
    text = str(value).replace("\\", "\\\\")
    for ch in "`*_{}[]<>()#+-!|":
        text = text.replace(ch, "\\" + ch)
    return text


def _cell(column: str, value) -> str:
    """One table cell with its unit, chosen by the column's name as the analyses name their fields: a category
    or ``*_ns`` is a duration, ``*_s`` seconds, ``*_bytes`` a byte count, ``*_bytes_per_s`` a rate, ``share_*``,
    ``overlap*`` and ``efficiency*`` fractions shown as per cent; a list of ranks comma-separated; never Python's
    exponent form or repr. '-' where the figure has no value (NaN, None, pandas' NA: the title says why)."""
    from ddltrace.timeline import CATEGORIES
    from ddltrace.units import format_bytes, format_ns, format_percent, three_digits

    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if column.endswith("_bytes_per_s"):
        return f"{three_digits(value / 1e6)} MB/s"
    if column in CATEGORIES or column.endswith("_ns"):
        return format_ns(value)
    if column.endswith("_s"):
        return format_ns(value * 1e9)
    if column.endswith("_bytes"):
        return format_bytes(value)
    if column.startswith(("share_", "overlap", "efficiency")):
        return format_percent(value)
    return str(value) if isinstance(value, numbers.Integral) else three_digits(value)


def _header(column: str) -> str:
    """A column's heading: its name less the unit suffix :func:`_cell` reads (``total_ns`` -> ``total``), since
    each cell carries its unit (QA: a ``total_ns`` column of cells reading "6 s")."""
    for suffix in ("_bytes_per_s", "_ns", "_s", "_bytes"):
        if column.endswith(suffix) and len(column) > len(suffix):
            return column[:-len(suffix)]
    return column


def _table_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = [str(frame.index.name or "")] + [_header(str(c)) for c in frame.columns]
    rows = [[str(index)] + [_cell(str(column), value) for column, value in zip(frame.columns, row, strict=True)]
            for index, row in zip(frame.index, frame.itertuples(index=False), strict=True)]
    return header, rows


def html(report) -> str:
    """The report as one HTML page (str)."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(report.title)}</h1>",
             f'<p class="meta">ddltrace {_e(__version__)} &middot; {_e(report.created)} &middot; stores: '
             + ", ".join(f"<code>{_e(s)}</code>" for s in report.stores) + "</p>",
             '<p class="verdict">' + " ".join(_e(s) for s in report.verdict) + "</p>",
             *_html_missing(report),
             *_html_left_out(report),
             *_html_import_problems(report),
             *_html_perfetto(report),
             "<h2>Findings</h2>"]
    if not report.findings:
        parts.append("<p>No findings.</p>")
    for group in group_findings(report.findings):
        parts.extend(_html_card(report, group))
    if report.not_made:
        holdings, groups, said_once = _not_made_groups(report)
        parts.append("<h2>Not made from this input</h2>")
        parts.extend(f"<p>{_e(line)}.</p>" for line in holdings)
        for held, some in [(None, groups), *((f"Where {s.held}:", s.analyses) for s in said_once)]:
            parts.extend([f"<p>{_e(held)}</p>"] if held else [])
            parts.append("<ul>" + "".join(f"<li><b>{_e(g.title)}</b>{_e(g.rest(*_several(report)))}</li>"
                                          for g in some) + "</ul>")
    if report.clocks:
        parts.append("<h2>Clocks</h2>")
        parts.extend(f"<p>{_e(line)}</p>" for line in _clock_intro(report))
        parts.append("<ul>" + "".join(f"<li><code>{_e(store)}</code>: {_e(line)}</li>"
                                      for store, line in _clock_lines(report)) + "</ul>")
    if report.gpu:  # the GPU analyses not made are with the others (the section points there)
        parts.append("<h2>GPU</h2>")
        for store, tables in report.gpu:
            parts.append(f"<p>Store <code>{_e(store)}</code>: times with their unit, shares of the window "
                         f"named in each title.</p>")
            for title, frame in tables:
                parts.append(f"<h3>{_e(title)}</h3>" + _html_table(frame.set_index(frame.columns[0])))
        if _gpu_not_made(report):
            parts.append(f"<p>{_e(_GPU_NOT_MADE)}</p>")
    parts.append("<h2>Figures</h2>")
    if len(report.stores) > 1:
        parts.append(f"<p>{_e(_of_which_run(report))}</p>")
    for fig in report.figures:
        data = base64.b64encode(fig.png).decode()
        parts.append(f'<figure id="fig-{_e(fig.key)}"><h3>{_e(fig.title)}</h3>'
                     f'<img alt="{_e(fig.title)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{_e(fig.caption)}</figcaption></figure>")
    parts.append("<h2>Tables</h2>")
    if len(report.stores) > 1:
        parts.append(f"<p>{_e(_of_which_run(report))}</p>")
    for title, frame in report.tables:
        parts.append(f"<h3>{_e(title)}</h3>" + _html_table(frame))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _missing_lines(report) -> list[tuple[str, list[str]]]:
    """Per store with missing ranks: its sentence and a line per rank named (rank and why), or per run of
    consecutive ranks missing for the same reason (:func:`~ddltrace.store.rank_runs`)."""
    out = []
    for store, named, count, world in report.missing:
        more = f" (and {count - len(named)} more)" if count > len(named) else ""
        out.append((f"{store}: {count} of {world} ranks {'has' if count == 1 else 'have'} no usable timeline{more}; "
                    f"everything in this report is of the other {world - count}.",
                    [f"rank {first}: {why}" if first == last else f"ranks {first}-{last}: {why}"
                     for first, last, why in rank_runs(named)]))
    return out


def _html_missing(report) -> list[str]:
    if not report.missing:
        return []
    parts = ["<h2>Missing ranks</h2>"]
    for sentence, ranks in _missing_lines(report):
        parts.append(f"<p>{_e(sentence)}</p><ul>" + "".join(f"<li>{_e(r)}</li>" for r in ranks) + "</ul>")
    return parts


LEFT_OUT = "The runs below could not be read and are left out; everything in this report is of the others:"


def _html_left_out(report) -> list[str]:
    if not report.left_out:
        return []
    return ["<h2>Runs left out</h2>", f"<p>{_e(LEFT_OUT)}</p><ul>"
            + "".join(f"<li>{_e(why)}</li>" for _, why in report.left_out) + "</ul>"]


def _import_problems_sentence(store: str) -> str:
    return (f"What the import found wrong in the files of {store} (everything in this report is of what it could "
            "read):")


def _html_import_problems(report) -> list[str]:
    parts = ["<h2>Import problems</h2>"] if report.import_problems else []
    for store, problems in report.import_problems:
        parts.append(f"<p>{_e(_import_problems_sentence(store))}</p><ul>"
                     + "".join(f"<li>{_e(p)}</li>" for p in problems) + "</ul>")
    return parts


def group_findings(findings: list) -> list[list]:
    """The findings grouped by detector (id), in the order of each group's costliest: a finding found in several
    runs of a series is one card with a row per run."""
    groups: dict[str, list] = {}
    for finding in findings:
        groups.setdefault(finding.id, []).append(finding)
    return list(groups.values())


def _run_label(report, store: str | None) -> str:
    """'w = 8 (STORE)': which run of the report a finding is about."""
    if not store:
        return "-"
    w = report.workers.get(store)
    return f"w = {w} ({store})" if w is not None else store


def _scope(finding) -> str:
    scope = f"phase {finding.phase}"
    if finding.ranks:
        scope += ", ranks " + ", ".join(str(r) for r in finding.ranks[:32])
        if len(finding.ranks) > 32:
            scope += f" (and {len(finding.ranks) - 32} more)"
    return scope


def _group_title(group: list) -> str:
    """The detector's name, common to the group's titles (the words before the first colon, less a qualifier in
    parentheses one run has and another has not: "GPU idle waiting for the host (launch-bound)" beside "GPU idle
    waiting for the host"); the detector's id where they have no words in common."""
    import os.path

    heads = [f.title.split(":", 1)[0] for f in group]
    if len(set(heads)) == 1:
        return heads[0]
    common = os.path.commonprefix(heads)
    if any(head[len(common):len(common) + 1] not in ("", " ") for head in heads):  # a word cut short
        common = common.rsplit(" ", 1)[0] if " " in common else ""
    return common.split(" (", 1)[0].strip() or group[0].id


_SEVERITY_ORDER = ("info", "warning", "error")


def _worst(group: list) -> str:
    return max((f.severity for f in group), key=lambda s: _SEVERITY_ORDER.index(s) if s in _SEVERITY_ORDER else 0)


def _html_card(report, group: list) -> list[str]:
    """One finding card: a single finding as before, or a finding of several runs with a row per run and the
    evidence side by side; the figure that shows it as a thumbnail linking to the full one."""
    first = group[0]
    parts = ['<div class="finding">']
    if len(group) == 1:
        where = f" &middot; {_e(_run_label(report, first.store))}" if len(report.stores) > 1 else ""
        parts.append(f'<h3><span class="sev sev-{_e(first.severity)}">{_e(first.severity)}</span>'
                     f"{_e(first.title)}</h3>")
        parts.append(f'<p class="meta">{_e(first.id)}{where} &middot; {_e(_scope(first))}</p>')
        parts.append(f"<p><b>Cost:</b> {_e(first.cost)}"
                     + (f" ({_e(first.cost_basis)})" if first.cost_basis else "") + "</p>")
        if first.evidence:
            parts.append("<table>" + "".join(f'<tr><td class="key">{_e(k)}</td><td>{_e(q)}</td></tr>'
                                             for k, q in first.evidence.items()) + "</table>")
    else:
        worst = _worst(group)
        parts.append(f'<h3><span class="sev sev-{_e(worst)}">{_e(worst)}</span>{_e(_group_title(group))}: '
                     f"found in {len(group)} runs</h3>")
        parts.append(f'<p class="meta">{_e(first.id)} &middot; one row per run</p>')
        parts.append('<div class="scroll"><table><tr><th class="key">run</th><th class="key">finding</th>'
                     '<th>cost</th><th class="key">where</th></tr>'
                     + "".join(f'<tr><td class="key">{_e(_run_label(report, f.store))}</td>'
                               f'<td class="key"><span class="sev sev-{_e(f.severity)}">{_e(f.severity)}</span>'
                               f"{_e(f.title)}</td><td>{_e(f.cost)}</td><td class=\"key\">{_e(_scope(f))}</td></tr>"
                               for f in group) + "</table></div>")
        if first.cost_basis:
            parts.append(f'<p class="meta">cost: {_e(first.cost_basis)}</p>')
        keys = list(dict.fromkeys(k for f in group for k in f.evidence))
        if keys:
            parts.append('<div class="scroll"><table><tr><th class="key">evidence</th>'
                         + "".join(f"<th>{_e(_column_label(report, f.store))}</th>" for f in group) + "</tr>"
                         + "".join(f'<tr><td class="key">{_e(k)}</td>'
                                   + "".join(f"<td>{_e(f.evidence.get(k, '-'))}</td>" for f in group) + "</tr>"
                                   for k in keys) + "</table></div>")
    if first.advice:
        parts.append(f"<p><b>What to try:</b> {_e(first.advice)}</p>")
    key = report.finding_figures.get(first.id)
    fig = next((f for f in report.figures if f.key == key), None)
    if fig is not None:
        data = base64.b64encode(fig.png).decode()
        parts.append(f'<a class="thumb" href="#fig-{_e(fig.key)}" title="the full figure">'
                     f'<img alt="{_e(fig.title)}" src="data:image/png;base64,{data}">'
                     f"<span>{_e(fig.title)}{_e(_figure_run(report))}</span></a>")
    parts.append("</div>")
    return parts


def _same_workers(report, store: str | None) -> bool:
    """Whether another run of the report has the workers of ``store``'s: then 'w = N' alone names neither."""
    w = report.workers.get(store)
    return sum(v == w for v in report.workers.values()) > 1


def _column_label(report, store: str | None) -> str:
    """A run's column in a finding's evidence: 'w = 8', or 'w = 4 (STORE)' where two runs have 4 workers."""
    return _run_label(report, store) if _same_workers(report, store) else f"w = {report.workers.get(store, '?')}"


def _main_run(report) -> str:
    """The run the figures and per-run tables are of: the one with the most workers (the last of the stores)."""
    return report.stores[-1]


def _the_main_run(report) -> str:
    """'w = 8 run': the run the figures and trace.json are of, its store named where another run has as many
    workers ('w = 4 (STORE) run')."""
    main = _main_run(report)
    return f"{_run_label(report, main)} run" if _same_workers(report, main) else \
        f"w = {report.workers.get(main, '?')} run"


def _figure_run(report) -> str:
    """' (w = 8 run)' after a figure's title when the report holds several runs (:func:`_the_main_run`)."""
    return f" ({_the_main_run(report)})" if len(report.stores) > 1 else ""


def _of_which_run(report) -> str:
    """Under Figures and Tables of a report of several runs: which run the figures and tables of one run show."""
    series = "; the scaling series' are of every run" if any(f.key == "scaling" for f in report.figures) else ""
    return (f"The figures and tables of one run are of {_run_label(report, _main_run(report))}, the run with the most "
            f"workers{series}.")


#: Opens trace.json (written beside the page) in Perfetto UI by its postMessage protocol: PING until the UI
#: answers PONG, then post the trace's bytes. Fetching the file works when the page is served over HTTP; from
#: disk (file://) the browser forbids it, so the button asks for the file instead.
_PERFETTO_JS = """
(function () {
  var ui = "https://ui.perfetto.dev", button = document.getElementById("perfetto-open"),
      picker = document.getElementById("perfetto-file");
  function open(buffer, name) {
    var win = window.open(ui);
    if (!win) { alert("The browser blocked the pop-up: allow pop-ups for this page, or open " + ui
                      + " and drop " + name + " onto it."); return; }
    var timer = setInterval(function () { win.postMessage("PING", ui); }, 50);
    window.addEventListener("message", function onPong(event) {
      if (event.origin !== ui || event.data !== "PONG") return;
      clearInterval(timer); window.removeEventListener("message", onPong);
      win.postMessage({perfetto: {buffer: buffer, title: document.title, fileName: name}}, ui);
    });
  }
  button.addEventListener("click", function () {
    fetch(button.dataset.trace).then(function (r) { if (!r.ok) throw r.status; return r.arrayBuffer(); })
      .then(function (b) { open(b, button.dataset.trace); }, function () { picker.click(); });
  });
  picker.addEventListener("change", function () {
    var file = picker.files[0];
    if (file) file.arrayBuffer().then(function (b) { open(b, file.name); });
  });
})();
"""


def _html_perfetto(report) -> list[str]:
    """The 'Open in Perfetto UI' button for trace.json beside the page, and the way by hand."""
    if report.trace_store is None:
        return [f'<p class="perfetto">{_e(report.trace_left_out)}</p>'] if report.trace_left_out else []
    from ddltrace.report import TRACE_FILE

    which = f" of the {_the_main_run(report)}" if len(report.stores) > 1 else ""
    return [f'<p class="perfetto"><button id="perfetto-open" data-trace="{TRACE_FILE}">Open in Perfetto UI</button> '
            f'<input id="perfetto-file" type="file" accept=".json" hidden> '
            f'to zoom into every event{_e(which)} where the static timelines end: the Chrome trace '
            f'<a href="{TRACE_FILE}">{TRACE_FILE}</a> written beside this page (from disk the browser asks for the '
            f'file: pick {TRACE_FILE}). By hand: open <a href="https://ui.perfetto.dev" target="_blank" '
            f'rel="noopener">ui.perfetto.dev</a> and drop {TRACE_FILE} onto it.</p>',
            f"<script>{_PERFETTO_JS}</script>"]


def _html_table(frame: pd.DataFrame) -> str:
    header, rows = _table_cells(frame)
    return ('<div class="scroll"><table><tr>' + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
            + "</table></div>")


def _gpu_not_made(report) -> list:
    """The GPU analyses not made (no device work, no stream ids, no correlation ids, one rank only, no
    communication kernel): listed with the others under "Not made from this input", pointed to from the GPU
    section."""
    return [s for s in report.not_made if s.analysis.startswith("gpu")]


#: What the GPU section says of the GPU analyses not made (listed once, with the others).
_GPU_NOT_MADE = ('The GPU analyses not made from this input are listed under "Not made from this input", each '
                 "with what it needs.")


def _not_made_groups(report) -> tuple[list[str], list, list]:
    """What each store holds ('STORE holds ...', once per store), each analysis not made once, with the stores
    it was not made from (:func:`~ddltrace.analyses.requirements.group`): several stores say a reason once; and what
    the input holds that stops several analyses, said once with them
    (:func:`~ddltrace.analyses.requirements.by_holding`)."""
    from ddltrace.analyses.requirements import by_holding, group, holdings_lines

    groups = group(report.not_made, report.holdings)
    return holdings_lines(report.not_made, report.holdings), *by_holding(groups, _several(report)[0])


def _several(report) -> tuple[bool, tuple[str, ...]]:
    """The arguments of :meth:`~ddltrace.analyses.requirements.NotMade.rest`: whether the report is of several
    stores, and which."""
    return len(report.stores) > 1, tuple(report.stores)


def _clock_intro(report) -> list[str]:
    """What the Clocks section shows, and what its offsets and uncertainties mean (the legend of the first store
    with offsets: :meth:`~ddltrace.clock_alignment.ClockAlignment.legend`)."""
    intro = ["How each store's ranks (and nodes) were put on one clock, from its manifest: per kind of offset, the "
             "largest |offset| and the largest uncertainty over the start and end measurements (each rank's: "
             "ddltrace info STORE). A wait between two ranks is known to within twice the largest uncertainty."]
    aligned = [clock for _, clock in report.clocks if clock.groups and not clock.problem]
    if not aligned:
        return intro
    legend = max(aligned, key=lambda c: any(o.end_offset_ns is not None for g in c.groups for o in g.offsets)).legend()
    return [*intro, legend[0].upper() + legend[1:] + "."]


def _clock_lines(report) -> list[tuple[str, str]]:
    """Per store: its clocks' summary (:meth:`~ddltrace.clock_alignment.ClockAlignment.summary`) and, where offsets
    were applied, the largest |drift| of each kind that has one and how each kind was measured."""
    out = []
    for store, clock in report.clocks:
        line = clock.summary()
        if clock.groups and not clock.problem:
            line += "".join(f"; max |drift| of the {g.kind} clocks {g.max_abs_drift_ppm:g} ppm" for g in clock.groups
                            if g.max_abs_drift_ppm is not None) + f" ({clock.methods()})"
        out.append((store, line))
    return out


def _md_table(title: str, frame: pd.DataFrame) -> list[str]:
    header, rows = _table_cells(frame)
    return [f"### {_md_escape(title)}", "", "| " + " | ".join(_md_escape(h) for h in header) + " |",
            "|" + "---|" * len(header), *["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows], ""]


def _figure_title(report, key: str) -> str:
    return next((f.title for f in report.figures if f.key == key), key)


def _md_card(report, group: list) -> list[str]:
    """One finding (or a finding of several runs, a row per run) in Markdown, with its figure inline."""
    first = group[0]
    lines = []
    if len(group) == 1:
        lines += [f"### [{first.severity.upper()}] {_md_escape(first.title)}", ""]
        where = f"{_md_escape(_run_label(report, first.store))}, " if len(report.stores) > 1 else ""
        lines += [f"`{first.id}`, {where}{_md_escape(_scope(first))}", ""]
        lines += [f"**Cost:** {_md_escape(first.cost)}"
                  + (f" ({_md_escape(first.cost_basis)})" if first.cost_basis else ""), ""]
        if first.evidence:
            lines += ["| evidence | value |", "|---|---|"]
            lines += [f"| {_md_escape(k)} | {_md_escape(q)} |" for k, q in first.evidence.items()]
            lines.append("")
    else:
        lines += [f"### [{_worst(group).upper()}] {_md_escape(_group_title(group))}: found in {len(group)} runs", "",
                  f"`{first.id}`, one row per run", "", "| run | finding | cost | where |", "|---|---|---|---|"]
        lines += [f"| {_md_escape(_run_label(report, f.store))} | [{f.severity.upper()}] {_md_escape(f.title)} | "
                  f"{_md_escape(f.cost)} | {_md_escape(_scope(f))} |" for f in group]
        lines.append("")
        if first.cost_basis:
            lines += [f"cost: {_md_escape(first.cost_basis)}", ""]
        keys = list(dict.fromkeys(k for f in group for k in f.evidence))
        if keys:
            lines += ["| evidence | " + " | ".join(_md_escape(_column_label(report, f.store)) for f in group) + " |",
                      "|---|" + "---|" * len(group)]
            lines += [f"| {_md_escape(k)} | " + " | ".join(_md_escape(f.evidence.get(k, "-")) for f in group) + " |"
                      for k in keys]
            lines.append("")
    if first.advice:
        lines += [f"**What to try:** {_md_escape(first.advice)}", ""]
    key = report.finding_figures.get(first.id)
    if key:
        title = _md_escape(_figure_title(report, key) + _figure_run(report))
        lines += [f"![{title}]({key}.png)", ""]
    return lines


def markdown(report) -> str:
    """The report as Markdown, figures referenced as ``<key>.png`` files beside it (str)."""
    lines = [f"# {_md_escape(report.title)}", "",
             f"ddltrace {__version__}, {report.created}; stores: "
             + ", ".join(f"`{s.replace('`', '')}`" for s in report.stores), "",
             "> " + " ".join(_md_escape(s) for s in report.verdict), ""]
    if report.trace_left_out:
        lines += [_md_escape(report.trace_left_out), ""]
    if report.trace_store is not None:
        from ddltrace.report import TRACE_FILE

        which = f" of the {_md_escape(_the_main_run(report))}" if len(report.stores) > 1 else ""
        lines += [f"To zoom into every event{which}: open <https://ui.perfetto.dev> and drop [{TRACE_FILE}]"
                  f"({TRACE_FILE}) (the Chrome trace beside this file) onto it.", ""]
    if report.missing:
        lines += ["## Missing ranks", ""]
        for sentence, ranks in _missing_lines(report):
            lines += [_md_escape(sentence), "", *[f"- {_md_escape(r)}" for r in ranks], ""]
    if report.left_out:
        lines += ["## Runs left out", "", _md_escape(LEFT_OUT), "",
                  *[f"- {_md_escape(why)}" for _, why in report.left_out], ""]
    if report.import_problems:
        lines += ["## Import problems", ""]
        for store, problems in report.import_problems:
            lines += [_md_escape(_import_problems_sentence(store)), "", *[f"- {_md_escape(p)}" for p in problems], ""]
    lines += ["## Findings", ""]
    if not report.findings:
        lines += ["No findings.", ""]
    for group in group_findings(report.findings):
        lines += _md_card(report, group)
    if report.not_made:
        holdings, groups, said_once = _not_made_groups(report)
        lines += ["## Not made from this input", ""]
        lines += [f"{_md_escape(line)}.\n" for line in holdings]
        lines += [f"- **{_md_escape(g.title)}**{_md_escape(g.rest(*_several(report)))}" for g in groups]
        lines.append("")
        for once in said_once:
            lines += [_md_escape(f"Where {once.held}:"), ""]
            lines += [f"- **{_md_escape(g.title)}**{_md_escape(g.rest(*_several(report)))}" for g in once.analyses]
            lines.append("")
    if report.clocks:
        lines += ["## Clocks", ""]
        lines += [f"{_md_escape(line)}\n" for line in _clock_intro(report)]
        lines += [f"- `{store.replace('`', '')}`: {_md_escape(line)}" for store, line in _clock_lines(report)]
        lines.append("")
    if report.gpu:  # the GPU analyses not made are with the others (the section points there)
        lines += ["## GPU", ""]
        for store, tables in report.gpu:
            lines += [f"Store `{store.replace('`', '')}`: times with their unit, shares of the window named in "
                      f"each title.", ""]
            for title, frame in tables:
                lines += _md_table(title, frame.set_index(frame.columns[0]))
        if _gpu_not_made(report):
            lines += [_md_escape(_GPU_NOT_MADE), ""]
    lines += ["## Figures", ""]
    if len(report.stores) > 1:
        lines += [_md_escape(_of_which_run(report)), ""]
    for fig in report.figures:
        lines += [f"### {_md_escape(fig.title)}", "", f"![{_md_escape(fig.title)}]({fig.key}.png)", "",
                  _md_escape(fig.caption), ""]
    lines += ["## Tables", ""]
    if len(report.stores) > 1:
        lines += [_md_escape(_of_which_run(report)), ""]
    for title, frame in report.tables:
        lines += _md_table(title, frame)
    return "\n".join(lines)
