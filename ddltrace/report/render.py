"""Rendering a :class:`~ddltrace.report.Report` as one self-contained HTML page and as Markdown.

The HTML embeds every figure as a base64 PNG and its style sheet inline: it opens from disk or as an e-mail
attachment with no network access. Every string that may come from a trace goes through :func:`html.escape`
(HTML) or :func:`_md_escape` (Markdown).
"""

from __future__ import annotations

import base64
import html as _html

import pandas as pd

from ddltrace import __version__

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
@media print { body { max-width: none; padding: 0; } .finding, figure, table { page-break-inside: avoid; } }
"""


def _e(value) -> str:
    return _html.escape(str(value), quote=True)


def _md_escape(value) -> str:
    text = str(value).replace("\\", "\\\\")
    for ch in "`*_{}[]<>()#+-!|":
        text = text.replace(ch, "\\" + ch)
    return text


def _table_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    frame = frame.copy()
    header = [str(frame.index.name or "")] + [str(c) for c in frame.columns]
    rows = []
    for index, row in frame.iterrows():
        cells = [str(index)]
        for value in row:
            if isinstance(value, float):
                cells.append("" if value != value else f"{value:.4g}")
            else:
                cells.append(str(value))
        rows.append(cells)
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
             "<h2>Findings</h2>"]
    if not report.findings:
        parts.append("<p>No findings.</p>")
    for finding in report.findings:
        parts.append('<div class="finding">')
        parts.append(f'<h3><span class="sev sev-{_e(finding.severity)}">{_e(finding.severity)}</span>'
                     f"{_e(finding.title)}</h3>")
        scope = f"phase: {finding.phase}"
        if finding.ranks:
            scope += ", ranks: " + ", ".join(str(r) for r in finding.ranks[:32])
            if len(finding.ranks) > 32:
                scope += f" (and {len(finding.ranks) - 32} more)"
        parts.append(f'<p class="meta">{_e(finding.id)} &middot; {_e(scope)}</p>')
        parts.append(f"<p><b>Cost:</b> {_e(finding.cost)}"
                     + (f" ({_e(finding.cost_basis)})" if finding.cost_basis else "") + "</p>")
        if finding.evidence:
            parts.append("<table>" + "".join(f'<tr><td class="key">{_e(k)}</td><td>{_e(q)}</td></tr>'
                                             for k, q in finding.evidence.items()) + "</table>")
        if finding.advice:
            parts.append(f"<p><b>What to try:</b> {_e(finding.advice)}</p>")
        key = report.finding_figures.get(finding.id)
        if key:
            parts.append(f'<p>Figure: <a href="#fig-{_e(key)}">{_e(_figure_title(report, key))}</a></p>')
        parts.append("</div>")
    if report.not_made:
        parts.append("<h2>Not made from this input</h2><ul>")
        parts.extend(f"<li><b>{_e(s.title)}</b> ({_e(s.store)}): {_e(s.reason)}</li>" for s in report.not_made)
        parts.append("</ul>")
    if report.gpu or _gpu_not_made(report):
        parts.append("<h2>GPU</h2>")
        for store, tables in report.gpu:
            parts.append(f"<p>Store <code>{_e(store)}</code>: times with their unit, shares of the window "
                         f"named in each title.</p>")
            for title, frame in tables:
                parts.append(f"<h3>{_e(title)}</h3>" + _html_table(frame.set_index(frame.columns[0])))
        not_made = _gpu_not_made(report)
        if not_made:
            parts.append("<p><b>Not computed from this input:</b></p><ul>")
            parts.extend(f"<li><b>{_e(s.title)}</b> ({_e(s.store)}): {_e(s.reason)}</li>" for s in not_made)
            parts.append("</ul>")
    parts.append("<h2>Figures</h2>")
    for fig in report.figures:
        data = base64.b64encode(fig.png).decode()
        parts.append(f'<figure id="fig-{_e(fig.key)}"><h3>{_e(fig.title)}</h3>'
                     f'<img alt="{_e(fig.title)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{_e(fig.caption)}</figcaption></figure>")
    parts.append("<h2>Tables</h2>")
    for title, frame in report.tables:
        parts.append(f"<h3>{_e(title)}</h3>" + _html_table(frame))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _missing_lines(report) -> list[tuple[str, list[str]]]:
    """Per store with missing ranks: its sentence and one line per rank named (rank and why)."""
    out = []
    for store, named, count, world in report.missing:
        more = f" (and {count - len(named)} more)" if count > len(named) else ""
        out.append((f"{store}: {count} of {world} ranks have no usable timeline{more}; everything in this report is "
                    f"of the other {world - count}.", [f"rank {rank}: {why}" for rank, why in named]))
    return out


def _html_missing(report) -> list[str]:
    if not report.missing:
        return []
    parts = ["<h2>Missing ranks</h2>"]
    for sentence, ranks in _missing_lines(report):
        parts.append(f"<p>{_e(sentence)}</p><ul>" + "".join(f"<li>{_e(r)}</li>" for r in ranks) + "</ul>")
    return parts


def _html_table(frame: pd.DataFrame) -> str:
    header, rows = _table_cells(frame)
    return ('<div class="scroll"><table><tr>' + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
            + "</table></div>")


def _gpu_not_made(report) -> list:
    """The GPU analyses not made, each with its reason (no device work, no stream ids, no correlation ids,
    one rank only, no communication kernel)."""
    return [s for s in report.not_made if s.analysis.startswith("gpu")]


def _md_table(title: str, frame: pd.DataFrame) -> list[str]:
    header, rows = _table_cells(frame)
    return [f"### {_md_escape(title)}", "", "| " + " | ".join(_md_escape(h) for h in header) + " |",
            "|" + "---|" * len(header), *["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows], ""]


def _figure_title(report, key: str) -> str:
    return next((f.title for f in report.figures if f.key == key), key)


def markdown(report) -> str:
    """The report as Markdown, figures referenced as ``<key>.png`` files beside it (str)."""
    lines = [f"# {_md_escape(report.title)}", "",
             f"ddltrace {__version__}, {report.created}; stores: "
             + ", ".join(f"`{s.replace('`', '')}`" for s in report.stores), "",
             "> " + " ".join(_md_escape(s) for s in report.verdict), ""]
    if report.missing:
        lines += ["## Missing ranks", ""]
        for sentence, ranks in _missing_lines(report):
            lines += [_md_escape(sentence), "", *[f"- {_md_escape(r)}" for r in ranks], ""]
    lines += ["## Findings", ""]
    if not report.findings:
        lines += ["No findings.", ""]
    for finding in report.findings:
        lines.append(f"### [{finding.severity.upper()}] {_md_escape(finding.title)}")
        lines.append("")
        scope = f"`{finding.id}`, phase {_md_escape(finding.phase)}"
        if finding.ranks:
            scope += ", ranks " + ", ".join(str(r) for r in finding.ranks[:32])
        lines += [scope, ""]
        lines += [f"**Cost:** {_md_escape(finding.cost)}"
                  + (f" ({_md_escape(finding.cost_basis)})" if finding.cost_basis else ""), ""]
        if finding.evidence:
            lines += ["| evidence | value |", "|---|---|"]
            lines += [f"| {_md_escape(k)} | {_md_escape(q)} |" for k, q in finding.evidence.items()]
            lines.append("")
        if finding.advice:
            lines += [f"**What to try:** {_md_escape(finding.advice)}", ""]
        key = report.finding_figures.get(finding.id)
        if key:
            lines += [f"Figure: [{_md_escape(_figure_title(report, key))}]({key}.png)", ""]
    if report.not_made:
        lines += ["## Not made from this input", ""]
        lines += [f"- **{_md_escape(s.title)}** ({_md_escape(s.store)}): {_md_escape(s.reason)}"
                  for s in report.not_made]
        lines.append("")
    if report.gpu or _gpu_not_made(report):
        lines += ["## GPU", ""]
        for store, tables in report.gpu:
            lines += [f"Store `{store.replace('`', '')}`: times with their unit, shares of the window named in "
                      f"each title.", ""]
            for title, frame in tables:
                lines += _md_table(title, frame.set_index(frame.columns[0]))
        not_made = _gpu_not_made(report)
        if not_made:
            lines += ["Not computed from this input:", ""]
            lines += [f"- **{_md_escape(s.title)}** ({_md_escape(s.store)}): {_md_escape(s.reason)}"
                      for s in not_made]
            lines.append("")
    lines += ["## Figures", ""]
    for fig in report.figures:
        lines += [f"### {_md_escape(fig.title)}", "", f"![{_md_escape(fig.title)}]({fig.key}.png)", "",
                  _md_escape(fig.caption), ""]
    lines += ["## Tables", ""]
    for title, frame in report.tables:
        lines += _md_table(title, frame)
    return "\n".join(lines)
