"""The bottleneck report: files, contents, self-containment, escaping, and a real render in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys

import pytest

from ddltrace.analyses.synthetic import ps_job, write_ps_store
from ddltrace.cli import main
from ddltrace.report import build_report
from ddltrace.store import TraceStore, write_store
from ddltrace.timeline import make_timeline

XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def sequential_series(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq")
    return [str(write_ps_store(root / f"w{w}", workers=w, init="sequential").path) for w in (1, 2, 4, 8)]


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    """A run whose event and host names are HTML: the report must show them as text."""
    timeline = ps_job(workers=2, steps=8)
    timeline["name"] = timeline["name"].where(timeline["name"] != "MPI_Send", XSS)
    path = tmp_path_factory.mktemp("xss") / "run"
    write_store(path, make_timeline(timeline), run={"command": XSS, "world_size": 3},
                rank_info={r: {"host": f"<img src=x onerror=alert(2)>{r}"} for r in range(3)})
    return str(path)


def test_report_files_and_order(sequential_series, tmp_path):
    files = build_report(sequential_series, tmp_path / "rep")
    html_text = files.html.read_text()
    md_text = files.markdown.read_text()
    doc = json.loads(files.findings.read_text())
    assert doc["stores"] == sequential_series
    assert doc["findings"], "a sequential-initialisation series has findings"
    # verdict, findings, figures, tables: in that order
    positions = [html_text.index(marker) for marker in
                 ('class="verdict"', "<h2>Findings</h2>", "<h2>Figures</h2>", "<h2>Tables</h2>")]
    assert positions == sorted(positions)
    # the findings are most severe first, in the HTML as in the JSON
    order = {"error": 2, "warning": 1, "info": 0}
    severities = [order[f["severity"]] for f in doc["findings"]]
    assert severities == sorted(severities, reverse=True)
    first = doc["findings"][0]["title"]
    assert html_text.index(first.split(":")[0][:30].replace("<", "&lt;")) < html_text.index("<h2>Figures</h2>")
    # every figure referenced by the Markdown exists beside it, and the HTML embeds them all
    referenced = re.findall(r"\]\(([\w]+\.png)\)", md_text)
    assert referenced and all((files.markdown.parent / name).exists() for name in referenced)
    assert {p.name for p in files.figures} >= {"scaling.png", "efficiency.png", "shares.png", "timeline.png"}
    figures_part = html_text[html_text.index("<h2>Figures</h2>"):]
    assert figures_part.count('src="data:image/png;base64,') == len(files.figures)
    # self-contained: no external resource but the Chrome trace beside it and Perfetto UI's address to open it in
    assert set(re.findall(r'(?:src|href)="(?!data:|#)([^"]*)"', html_text)) == {"trace.json",
                                                                                "https://ui.perfetto.dev"}


def test_sequential_series_verdict_names_sequential_initialisation(sequential_series, tmp_path):
    files = build_report(sequential_series, tmp_path / "rep")
    doc = json.loads(files.findings.read_text())
    verdict = re.search(r'<p class="verdict">(.*?)</p>', files.html.read_text(), re.S).group(1)
    top = doc["findings"][0]
    assert "sequential" in top["id"] or "init" in top["id"], top["id"]
    assert "initiali" in verdict.lower()


def test_saturated_server_verdict_names_saturation(tmp_path):
    stores = [str(write_ps_store(tmp_path / f"w{w}", workers=w, server_ns=4e6, compute_ns=10e6).path)
              for w in (1, 2, 4, 8)]
    files = build_report(stores, tmp_path / "rep")
    doc = json.loads(files.findings.read_text())
    assert "saturat" in doc["findings"][0]["id"]
    html_text = files.html.read_text()
    assert 'href="#fig-scaling"' in html_text  # the finding points at the scaling figure


def test_trace_strings_are_escaped(hostile_store, tmp_path):
    files = build_report([hostile_store], tmp_path / "rep")
    html_text = files.html.read_text()
    assert XSS not in html_text and "<img src=x" not in html_text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text
    from ddltrace.report.render import _PERFETTO_JS

    assert html_text.lower().count("<script") == 1 and f"<script>{_PERFETTO_JS}</script>" in html_text
    assert XSS not in files.markdown.read_text()


def test_report_command_and_bad_input(sequential_series, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", *sequential_series[:2], "--out", str(out), "--quiet"]) == 0
    assert "report.html" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "r2")]) == 2
    assert "no such trace store" in capsys.readouterr().err
    # an --out that holds files: one line, nothing touched (a second report mixed its files with the first's);
    # a trace store is never one
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"scaling.png", "efficiency.png", "trace.json"} <= first.keys()
    store = sequential_series[0]
    for options, line in ((["--out", str(out)],
                           f"{out}: already exists (choose another --out, or add --force to replace the report in it)"),
                          (["--out", store, "--force"],
                           f"{store}: a trace store; the report is not written into one (choose another --out)")):
        assert main(["report", store, *options, "--quiet"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"ddltrace: error: {line}"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    # --force replaces the report: the first's figures this one has not drawn are gone, the user's own file stays
    (out / "notes.txt").write_text("mine")
    assert main(["report", sequential_series[1], "--out", str(out), "--quiet", "--force"]) == 0
    names = {p.name for p in out.iterdir()}
    drawn = set(re.findall(r"\]\((\w+\.png)\)", (out / "report.md").read_text()))
    assert names == drawn | {"report.html", "report.md", "findings.json", "trace.json", "notes.txt"}
    assert "scaling.png" not in names and (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "findings.json").read_text())["stores"] == [sequential_series[1]]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

HARNESS = """<!DOCTYPE html><html><body><iframe id="r" src="report.html" width="1200" height="900"></iframe>
<script>
document.getElementById('r').addEventListener('load', () => {
  const doc = document.getElementById('r').contentDocument;
  const imgs = Array.from(doc.images);
  const result = {
    images: imgs.length,
    loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    scripts: doc.querySelectorAll('script').length,
    text: doc.body.innerText,
  };
  const pre = document.createElement('pre'); pre.id = 'result';
  pre.textContent = JSON.stringify(result); document.body.appendChild(pre);
});
</script></body></html>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make system-deps installs it)")
def test_renders_in_headless_chromium(hostile_store, tmp_path):
    files = build_report([hostile_store], tmp_path / "rep")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    shot = tmp_path / "shot.png"
    result = subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1200,2400", files.html.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Failed to load" in line]
    assert console == []
    harness = files.html.parent / "harness.html"
    harness.write_text(HARNESS)
    result = subprocess.run(flags + ["--allow-file-access-from-files", "--virtual-time-budget=10000",
                                     "--dump-dom", harness.as_uri()], capture_output=True, text=True, timeout=120)
    match = re.search(r'<pre id="result">(.*?)</pre>', result.stdout, re.S)
    assert match, result.stderr[-2000:]
    import html as _html

    state = json.loads(_html.unescape(match.group(1)))
    thumbnails = len(files.html.read_text().split("<h2>Figures</h2>")[0].split('class="thumb"')) - 1
    assert state["images"] == len(files.figures) + thumbnails and state["loaded"] == state["images"]
    assert state["scripts"] == 1  # the Perfetto button's
    assert XSS in state["text"]  # shown as text, not run


SAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"


def test_report_draws_a_fitted_model_beside_the_series(tmp_path, capsys):
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2, 4)]
    assert main(["model", "fit", *stores, "--out", str(tmp_path / "model.json")]) == 0
    capsys.readouterr()
    assert main(["report", *stores, "--model", str(tmp_path / "model.json"), "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    html_text = (tmp_path / "r" / "report.html").read_text()
    assert "beside the fitted model (dashed)" in html_text
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert main(["report", *stores, "--model", str(tmp_path / "bad.json"), "--out", str(tmp_path / "r2")]) == 2
    assert "bad.json: not a model" in capsys.readouterr().err
    # a model whose knee is under one worker (model.json holds the formula's w*, 0 or less too): no line at w* < 1
    model = json.loads((tmp_path / "model.json").read_text())
    model["knee"]["w"] = -0.03
    (tmp_path / "under.json").write_text(json.dumps(model))
    assert main(["report", *stores, "--model", str(tmp_path / "under.json"), "--out", str(tmp_path / "r3"),
                 "--quiet"]) == 0
    text = (tmp_path / "r3" / "report.html").read_text()
    assert "the knee w* is under 1 worker" in text and "with the knee w* where the server saturates" not in text


def test_a_model_that_is_no_fitted_model_or_has_no_series_to_go_beside_is_said(tmp_path, capsys):
    """QA s20: a JSON object that is no model (a store's manifest) given to --model with one store was taken without
    a word (exit 0), and with several refused only after the analysis; a real model with one store was left out of
    the report without a word."""
    stores = [str(SAMPLES / f"par-w{w}" / "store") for w in (1, 2)]
    manifest = str(SAMPLES / "par-w1" / "store" / "manifest.json")
    for given in (stores[:1], stores):
        assert main(["report", *given, "--model", manifest, "--out", str(tmp_path / "r"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines() == [f'ddltrace: error: {manifest}: not a fitted ASGD model (expected "model": '
                                            "\"hashemi-asgd\"; make one with 'ddltrace model fit')"], err
        assert "analysing" not in err and not (tmp_path / "r").exists()
    assert main(["model", "fit", *stores, "--out", str(tmp_path / "model.json")]) == 0
    assert main(["report", stores[0], "--model", str(tmp_path / "model.json"), "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    text = (tmp_path / "r" / "report.md").read_text().replace("\\", "")  # (Markdown's escapes)
    assert "the fitted model beside the scaling series (--model)**: needs a scaling series" in text
    assert "the input holds 1 run(s): w = 1" in text
    assert "beside the fitted model (dashed)" not in text


# -- issue 18 item 3, on the demo's own input -------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """The report of the demo's w = 4 and w = 8 runs (two runs with a sequential-initialisation finding each)."""
    out = tmp_path_factory.mktemp("demo") / "report"
    files = build_report([str(SAMPLES / f"seq-w{w}" / "store") for w in (4, 8)], out)
    return files


def _cards(html_text: str) -> list[str]:
    findings = html_text[html_text.index("<h2>Findings</h2>"):html_text.index("<h2>Figures</h2>")]
    return findings.split('<div class="finding">')[1:]


def test_a_finding_of_several_runs_is_one_card_with_a_row_per_run(demo_report):
    doc = json.loads(demo_report.findings.read_text())
    sequential = [f for f in doc["findings"] if f["id"] == "sequential_init"]
    assert sorted(f["store"] for f in sequential) == sorted(str(SAMPLES / f"seq-w{w}" / "store") for w in (4, 8))
    cards = [c for c in _cards(demo_report.html.read_text()) if "sequential_init" in c]
    assert len(cards) == 1
    card = cards[0]
    assert "found in 2 runs" in card
    for f in sequential:  # a row per run, naming its run, with its own title and cost
        w = 4 if "seq-w4" in f["store"] else 8
        row = next(r for r in card.split("<tr>") if f"w = {w} (" in r)
        assert f["store"] in row and html.escape(f["title"]) in row
    md_text = demo_report.markdown.read_text()
    assert md_text.count("Sequential initialisation: found in 2 runs") == 1


def test_each_finding_card_holds_its_figure(demo_report):
    html_text = demo_report.html.read_text()
    cards = _cards(html_text)
    with_figure = [c for c in cards if 'class="thumb"' in c]
    assert len(with_figure) >= 2
    for card in with_figure:
        key = re.search(r'href="#fig-([\w]+)"', card).group(1)
        image = re.search(r'src="(data:image/png;base64,[^"]+)"', card).group(1)
        figure = re.search(rf'<figure id="fig-{key}">.*?src="([^"]+)"', html_text, re.S).group(1)
        assert image == figure  # the card shows the very figure it names
    md_text = demo_report.markdown.read_text()
    findings_md = md_text[md_text.index("## Findings"):md_text.index("## Figures")]
    assert re.search(r"!\[[^\]]+\]\(timeline_init\.png\)", findings_md)


def test_the_run_opens_in_perfetto_ui_from_the_chrome_trace_beside_the_report(demo_report):
    import pyarrow.parquet as pq

    trace = demo_report.html.parent / "trace.json"
    assert demo_report.trace == trace
    events = json.loads(trace.read_text())["traceEvents"]
    store = SAMPLES / "seq-w8" / "store"  # the report's run: the one with the most workers
    rows = sum(pq.read_metadata(f).num_rows for f in (store / "timeline").glob("rank-*.parquet"))
    assert sum(e["ph"] == "X" for e in events) == rows
    html_text = demo_report.html.read_text()
    assert 'id="perfetto-open" data-trace="trace.json"' in html_text and 'href="https://ui.perfetto.dev"' in html_text
    assert "ui.perfetto.dev" in demo_report.markdown.read_text()


def test_the_slowest_is_defined_and_its_busy_time_shown_beside_the_average(tmp_path):
    """The slowest worker (the most busy time) may have a shorter bar than the average: the figure stacks busy time
    first and marks where it ends, and its label and caption say what slowest means."""
    from ddltrace.analyses.run_analysis import analyze_store
    from ddltrace.report import figures
    from ddltrace.units import format_ns

    run = analyze_store(SAMPLES / "seq-w8" / "store")
    pair = run.average_and_slowest(run.main_phase)
    busy = pair[["compute", "io", "memcpy"]].sum(axis=1) / 1e6
    fig = figures.average_slowest_figure(pair, "Steady state")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any("slowest" in label and "most busy time" in label for label in labels)
    marks = {round(float(line.get_xdata()[0]), 3) for line in ax.lines}
    assert marks == {round(float(b), 3) for b in busy}
    texts = [t.get_text() for t in ax.texts]
    assert f"busy {format_ns(busy.iloc[1] * 1e6)}" in texts and busy.iloc[1] >= busy.iloc[0]
    # the busy categories come first: the compute bars start at 0
    assert all(patch.get_x() == 0 for patch in ax.patches[:2])
    figures.plt.close(fig)


def test_a_busy_time_of_seconds_is_labelled_in_seconds():
    """The busy-time mark of a worker busy 12.3 s in the phase reads 'busy 12.3 s', not Python's '1.234e+04 ms'."""
    import pandas as pd

    from ddltrace.report import figures

    pair = pd.DataFrame({"compute": [12.345e9, 13.5e9], "io": [0.0, 0.0], "wait": [1e9, 0.5e9]},
                        index=["average", "slowest (rank 3)"])
    fig = figures.average_slowest_figure(pair, "Steady state")
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["busy 12.3 s", "busy 13.5 s"]
    figures.plt.close(fig)


def test_the_report_table_names_the_phase_of_each_overlap(demo_report):
    """Issue 18 item 2 in the report: the table's overlap columns say their phase, and the steady one's median worker
    is the low-overlap finding's figure."""
    doc = json.loads(demo_report.findings.read_text())
    finding = next(f for f in doc["findings"] if f["id"] == "low_overlap")
    assert "in the steady state" in finding["title"]
    tables = demo_report.html.read_text().split("<h2>Tables</h2>")[1]
    table = tables.split("<h3>Time per category and rank")[1].split("</table>")[0]
    rows = [re.findall(r"<t[hd]>(.*?)</t[hd]>", row) for row in table.split("<tr>")[1:]]
    header, body = rows[0], rows[1:]
    assert "overlap(run)" in header and "overlap(steady)" in header and "overlap" not in header
    steady = sorted(float(row[header.index("overlap(steady)")].removesuffix(" %")) / 100
                    for row in body if row[0] != "0")  # rank 0: the server; per cent to one decimal
    assert len(steady) == 8
    assert (steady[3] + steady[4]) / 2 == pytest.approx(finding["evidence"]["overlap_median"]["value"], abs=1e-3)


def test_the_report_shows_each_stores_clocks_as_its_manifest_has_them(demo_report):
    """The Clocks section (a line per store, from ddltrace/clock_alignment.py as info and analyze print it): the
    number of rank offsets, the largest |offset| and uncertainty over the start and end measurements, the largest
    |drift| and how they were measured, each the figure of the store's manifest (computed here from its clock entry),
    with its unit; findings.json holds each store's clock as ``info --json`` gives it."""
    from clock_truth import expected_rank_clocks

    from ddltrace.report.render import _md_escape
    from ddltrace.units import format_ns

    md = demo_report.markdown.read_text()
    section = md.split("## Clocks", 1)[1].split("\n## ", 1)[0].splitlines()
    page = demo_report.html.read_text()
    doc = json.loads(demo_report.findings.read_text())
    for w in (4, 8):
        store = SAMPLES / f"seq-w{w}" / "store"
        clock = json.loads((store / "manifest.json").read_text())["clock"]
        expected = expected_rank_clocks(clock)
        largest = max(abs(v) for e in expected for v in (e["offset_ns"], e["end_offset_ns"]))
        bound = max(v for e in expected for v in (e["uncertainty_ns"], e["end_uncertainty_ns"]))
        assert bound == clock["max_uncertainty_ns"] > 0
        drift = max(abs(e["drift_ppm"]) for e in expected)
        line = (f"{len(expected)} rank offset(s) onto rank {clock['reference_rank']}'s clock, max |offset| "
                f"{format_ns(largest)}, max uncertainty ±{format_ns(bound)}; max |drift| of the rank clocks "
                f"{drift:g} ppm (rank clocks: {clock['method']})")
        assert f"- `{store}`: {_md_escape(line)}" in section
        assert f"<li><code>{html.escape(str(store))}</code>: {html.escape(line)}</li>" in page
        (ranks,) = doc["clocks"][str(store)]["groups"]
        assert ranks["offsets"] == expected and ranks["max_uncertainty_ns"] == bound
    assert "ppm = ns per ms" in " ".join(section)  # what the figures mean, once


def test_a_store_without_device_work_says_so_once(demo_report):
    """The demo's stores hold no device work: the GPU analyses and the GPU findings are not made for that one
    reason, said once (each GPU detector added its own "needs device work" line beside the GPU analyses' one);
    findings.json keeps an entry per store and detector for machines, each marked as said with the GPU line."""
    from ddltrace.analyses.findings import REQUIREMENTS, load_detectors
    from ddltrace.report.render import _md_escape

    load_detectors()
    gpu = sorted(name for name, r in REQUIREMENTS.items() if "device" in r.needs)
    assert len(gpu) >= 4
    doc = json.loads(demo_report.findings.read_text())
    stores = [str(SAMPLES / f"seq-w{w}" / "store") for w in (4, 8)]
    for store in stores:
        said = {s["analysis"]: s.get("said_with") for s in doc["not_made"] if s["store"] == store}
        assert said["gpu"] is None and all(said[name] == "gpu" for name in gpu)
    md = demo_report.markdown.read_text()
    section = md.split("## Not made from this input", 1)[1].split("\n## ", 1)[0]
    page = demo_report.html.read_text()
    page_section = page.split("<h2>Not made from this input</h2>", 1)[1].split("<h2>", 1)[0]
    for text in (section, page_section):
        assert text.count("device work") == 2  # needs device work ...; each holds no device work
    (line,) = [line for line in section.splitlines() if "device work" in line]
    assert line.startswith("- **GPU analyses \\(temporal") and "\\(every store\\): needs device work" in line
    assert all(line.count(_md_escape(REQUIREMENTS[name].title)) == 1 for name in gpu), line


def test_a_figure_with_no_value_is_a_dash_not_none():
    """A table cell that holds no figure (None, pandas' NA: the per-node point-to-point bytes of a trace whose calls
    name no partner; NaN: the bandwidth across nodes where no message was matched) reads '-', as the text and the
    caption say, not Python's 'None' or a blank; a figure has its unit."""
    import pandas as pd

    from ddltrace.report.render import _table_cells

    index = pd.Index(["a", "b"], name="host")
    frame = pd.DataFrame({"bytes": pd.array([None, 3], dtype="Int64"),
                          "ns": pd.Series([None, 7], dtype=object, index=index),
                          "share_wait": [float("nan"), 0.5]}, index=index)
    header, rows = _table_cells(frame)
    assert header == ["host", "bytes", "ns", "share_wait"]
    assert rows == [["a", "-", "-", "-"], ["b", "3", "7", "50.0 %"]]


def test_the_report_tables_are_analyze_figures_with_their_units(demo_report, capsys):
    """The report's tables hold the figures of 'ddltrace analyze --json' of the same stores, each with its unit
    and never in Python's exponent form: the per-rank table printed '6.988e+08' (ns) for rank 0's compute, and
    the scaling series took the longest rank of each phase (the server's included) where analyze takes the
    workers' median (2.74 s against 2.4 s of initialisation at w = 8)."""
    from ddltrace.units import format_ns, format_percent

    stores = [str(SAMPLES / f"seq-w{w}" / "store") for w in (4, 8)]
    assert main(["analyze", *stores, "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    tables = demo_report.markdown.read_text().split("## Tables")[1].replace("\\", "")
    assert not re.search(r"\de[-+]\d", tables)

    def rows(title: str) -> dict[str, dict[str, str]]:
        lines = tables.split(f"### {title}")[1].split("\n\n")[1].splitlines()
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        return {cells[0]: dict(zip(header, cells, strict=True))
                for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}

    scaling = rows("Scaling series")
    assert sorted(scaling) == ["4", "8"]
    title = tables.split("### Scaling series")[1].split("\n")[0]  # what its '-' would mean, and its reference
    assert ("(one job at one batch size; phase times: medians over the workers, and over the series' runs at a "
            "worker count;") in title
    assert ("efficiency of the steady state against the series' run with the fewest workers; '-': no worker traced "
            "an MPI_Init (startup)") in title
    for run in doc["scaling"]:
        row = scaling[str(run["workers"])]
        assert [row["startup"], row["job_init"], row["steady"], row["total"]] == \
            [format_ns(run[k]) for k in ("startup_ns", "job_init_ns", "steady_ns", "total_ns")]
        assert row["efficiency_steady"] == format_percent(run["efficiency_steady"])
    per_rank = rows("Time per category and rank")
    w8 = next(s for s in doc["stores"] if s["workers"] == 8)
    assert sorted(per_rank, key=int) == [str(r["rank"]) for r in w8["breakdown_ns"]]
    for ref in w8["breakdown_ns"]:
        row = per_rank[str(ref["rank"])]
        assert row["compute"] == format_ns(ref["compute"]) and row["total"] == format_ns(ref["total_ns"])
        assert row["share_wait"] == format_percent(ref["wait"] / ref["total_ns"])
        assert row["overlap(run)"] == format_percent(ref["overlap"])


def test_superlinear_efficiency_stays_in_the_figure():
    """The efficiency figure's axis reaches the highest measured efficiency: the demo's w = 2 run is 113 % efficient
    against w = 1 (its steady state 3.80 s against 8.61 s) and was drawn above the figure's top at 110 %."""
    import pandas as pd

    from ddltrace.report import figures

    steady_s = [8.61, 3.80, 2.42, 1.68]
    series = pd.DataFrame({"workers": [1, 2, 4, 8], "steady_s": steady_s,
                           "efficiency_steady": [8.61 / (s * w) for s, w in zip(steady_s, (1, 2, 4, 8), strict=True)]})
    fig = figures.efficiency_figure(series, 0.234)
    line = fig.axes[0].lines[0]
    assert list(line.get_ydata()) == pytest.approx([100, 113.3, 88.9, 64.1], abs=0.1)
    assert fig.axes[0].get_ylim()[1] > 113.3


@pytest.mark.parametrize("text", ['{"traceEvents": [', '{"traceEvents": []}'])
def test_a_trace_with_no_event_is_one_line_and_no_report(tmp_path, capsys, text):
    """A trace cut before its first event (or holding none): the report was written all the same, exit 0, its verdict
    'the largest share of time is compute (0.0 %)' over a '0-worker run'. The import it makes first now refuses it
    (one line naming the file, exit 2: so do ``import`` and ``analyze``), and a store imported before that, of one
    rank of no events, is refused by report and analyze, one line each."""
    trace = tmp_path / "cut.json"
    trace.write_text(text)
    out = tmp_path / "r"
    for argv in (["report", trace, "--out", out, "--quiet"], ["analyze", trace, "--quiet"],
                 ["import", trace, "--out", tmp_path / "store"]):
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ddltrace: error: nothing imported from 1 file(s): {trace}: 0 events read, none kept as an "
                       "interval or a counter sample" + ("" if text.endswith("}") else
                                                         " (skipped: 1 events array never closed (tolerated))")]
    assert not out.exists() and not list(tmp_path.glob(".r.*")) and not (tmp_path / "store").exists()
    store = tmp_path / "old-store"  # as an import before this change wrote it
    TraceStore.create(store, run={"world_size": 1}).add_rank(0, make_timeline(), file=str(trace))
    for verb, argv in (("report", ["--out", out, "--quiet"]), ("analyze", [])):
        assert main([verb, str(store), *map(str, argv)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ddltrace: error: {store}: no rank holds a usable timeline ({trace}: rank 0 holds no "
                       f"events); nothing to {verb}"]
    assert not out.exists()


def test_the_verdict_names_the_largest_share_among_every_category(tmp_path):
    """The verdict's "largest share of time" is of every category: on a run whose ranks spend 90 % in MPI_Init
    (other) it said "compute (6.0 %), then wait (4.0 %)": the categories compared were compute, wait, barrier, io
    and comm only (on TF2's XPlane trace "compute (1.6 %)" beside 98 % idle; on HTA's cpu_only trace "comm (86.0 %),
    then compute (0.0 %)", a runner-up of nothing, now left out)."""
    ms = 1_000_000
    rows = []
    for rank in (0, 1):  # one lane each, covered end to end: MPI_Init, then compute and a little wait
        rows += [{"rank": rank, "name": "MPI_Init", "category": "other", "start_ns": 0, "dur_ns": 900 * ms},
                 {"rank": rank, "name": "step", "category": "compute", "start_ns": 900 * ms, "dur_ns": 60 * ms},
                 {"rank": rank, "name": "MPI_Wait", "category": "wait", "start_ns": 960 * ms, "dur_ns": 40 * ms}]
    path = tmp_path / "store"
    write_store(path, make_timeline(rows), run={"command": "job", "world_size": 2})
    files = build_report([str(path)], tmp_path / "rep")
    verdict = re.search(r'<p class="verdict">(.*?)</p>', files.html.read_text(), re.S).group(1)
    timeline = make_timeline(rows)
    share = timeline.groupby("category", observed=True)["dur_ns"].sum() / timeline["dur_ns"].sum()
    assert (f"the largest share of time is other ({100 * share['other']:.1f} %), then compute "
            f"({100 * share['compute']:.1f} %).") in verdict


def test_a_run_of_one_worker_has_no_average_beside_the_slowest(sequential_series, demo_report, tmp_path):
    """The average worker beside the slowest needs two workers: a run of one drew two equal bars, its worker as
    'average' and as 'slowest', while the stragglers were rightly not made ('needs two or more workers')."""
    one = build_report([sequential_series[0]], tmp_path / "w1")  # the server and one worker
    assert "avg_slowest.png" not in {p.name for p in one.figures} and not (one.html.parent / "avg_slowest.png").exists()
    assert "avg_slowest.png" in {p.name for p in demo_report.figures}  # w = 8


def test_collectives_matched_across_no_rank_show_no_wait(tmp_path, capsys):
    """One rank of a gloo job (tests/data/torch_gloo): its all-reduces match no other rank's, so no wait was
    measured; the collectives' table printed '0 ns' for it beside the skew's '-'."""
    trace = SAMPLES.parents[1] / "tests" / "data" / "torch_gloo" / "rank0.pt.trace.json.gz"
    assert main(["report", str(trace), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    md = (tmp_path / "r" / "report.md").read_text().replace("\\", "")
    table = md.split("### Collectives by kind")[1].split("\n\n")[1].splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    (row,) = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in table[2:]]
    assert row["collective"] == "allreduce" and row["matched"] == "0"
    assert row["skew median / max"] == "-" and row["wait"] == "-"
    assert "wait '-' where no instance was matched" in md


def test_two_runs_of_as_many_workers_are_told_apart_by_their_store(tmp_path):
    """A report of seq-w4 and par-w4: the staleness found in both is one card whose evidence columns read 'w = 4'
    and 'w = 4' (which is which?), its figure's thumbnail '(w = 4 run)', and the figures and tables of one run
    did not say which run they are of. Each now names its store where w alone names neither."""
    stores = [str(SAMPLES / name / "store") for name in ("par-w4", "seq-w4")]
    files = build_report(stores, tmp_path / "rep")
    page = files.html.read_text()
    doc = json.loads(files.findings.read_text())
    staleness = [f for f in doc["findings"] if f["id"] == "staleness"]
    (card,) = [c for c in _cards(page) if "staleness" in c]
    evidence = card.split('<th class="key">evidence</th>')[1].split("</tr>")[0]
    columns = re.findall(r"<th>(.*?)</th>", evidence)
    assert columns == [html.escape(f"w = 4 ({f['store']})") for f in staleness]
    for f in staleness:  # each column holds its own store's figure
        column = columns.index(html.escape(f"w = 4 ({f['store']})"))
        row = next(r for r in card.split("<tr>") if r.startswith('<td class="key">mean_staleness</td>'))
        assert re.findall(r"<td>(.*?)</td>", row)[column] == f"{f['evidence']['mean_staleness']['value']:.3g} updates"
    main = stores[1]  # sorted by workers, then name: seq-w4 last, the one the figures are of
    verdict = html.unescape(re.search(r'<p class="verdict">(.*?)</p>', page, re.S).group(1))
    first = doc["findings"][0]  # the dominant bottleneck: which run it is of, and which run the shares are of
    assert verdict.startswith(f"The dominant bottleneck, in the w = 4 run ({first['store']}): {first['title']}")
    assert f"across the workers of the 4-worker run ({main}), over their whole runs, the largest share" in verdict
    assert f"(w = 4 ({html.escape(main)}) run)</span>" in card
    assert f"to zoom into every event of the w = 4 ({html.escape(main)}) run where" in page  # trace.json's run
    assert f"To zoom into every event of the w = 4 ({main}) run: open" in files.markdown.read_text().replace("\\", "")
    said = html.escape(f"The figures and tables of one run are of w = 4 ({main}), the run with the most workers")
    for section in ("<h2>Figures</h2>", "<h2>Tables</h2>"):
        assert page.split(section)[1].lstrip().startswith(f"<p>{said}")
    md = files.markdown.read_text().replace("\\", "")
    assert f"| evidence | w = 4 ({staleness[0]['store']}) | w = 4 ({staleness[1]['store']}) |" in md


def test_the_steady_state_zoom_says_how_many_steps_it_shows(demo_report, tmp_path):
    """The zoom on steady-state steps said "Three steps in the middle of the steady state" whatever it showed: on a
    trace of one or two steps (HTA's cpu_only and AMD traces: one ProfilerStep) it shows those."""
    ms = 1_000_000
    rows = [{"rank": rank, "name": "forward", "category": "compute", "start_ns": start * ms, "dur_ns": 9 * ms,
             "step": step} for rank in (0, 1) for step, start in ((1, 0), (2, 10))]
    path = tmp_path / "store"
    write_store(path, make_timeline(rows), run={"command": "job", "world_size": 2})
    files = build_report([str(path)], tmp_path / "rep")
    md = files.markdown.read_text().replace("\\", "")
    caption = md.split("### A few steady-state steps, zoomed")[1].split("\n\n")[2]
    assert caption == "2 steps of rank 0 (the rank's only steps), and every rank over that time."
    demo = demo_report.markdown.read_text().replace("\\", "")  # of seq-w8, whose first worker is rank 1
    assert "3 steps of rank 1 (in the middle of the steady state), and every rank over that time." in demo


def test_the_shares_figure_says_its_window_and_it_is_each_rank_s_own(tmp_path):
    """The per-rank shares figure said "over the whole run" and its title no window: it is each rank's own window,
    first event to the end of its last, which differs between ranks that start apart. Rank 1 starts 10 ms after rank
    0; each rank's total in the per-rank table is its own span (20 ms and 10 ms), and the caption says so."""
    ms = 1_000_000
    rows = [{"rank": 0, "name": "forward", "category": "compute", "start_ns": 0, "dur_ns": 20 * ms},
            {"rank": 1, "name": "forward", "category": "compute", "start_ns": 10 * ms, "dur_ns": 5 * ms},
            {"rank": 1, "name": "MPI_Wait", "category": "wait", "start_ns": 15 * ms, "dur_ns": 5 * ms}]
    path = tmp_path / "store"
    write_store(path, make_timeline(rows), run={"command": "job", "world_size": 2})
    files = build_report([str(path)], tmp_path / "rep")
    md = files.markdown.read_text().replace("\\", "")
    caption = md.split("### Where each rank's time goes")[1].split("\n\n")[2]
    assert "each rank's own window, from its first event to the end of its last" in caption
    from ddltrace.analyses.run_analysis import analyze_store
    from ddltrace.store import TraceStore

    table = analyze_store(TraceStore.open(path)).table("all")
    assert table["total_ns"].tolist() == [20 * ms, 10 * ms]
    assert table.loc[1, "share_wait"] == 0.5


def test_categories_no_rank_has_are_left_out_of_the_per_rank_table(demo_report, capsys):
    """The demo's PMPI stores record no I/O, no copies, and no idle time (what no call covers is compute): the
    per-rank table showed '0 ns' and '0.0 %' columns of io, memcpy and idle for every rank, as if measured. They are
    left out, and the title names them; the others are still analyze's figures."""
    store = str(SAMPLES / "seq-w8" / "store")
    assert main(["analyze", store, "--json", "--quiet"]) == 0
    breakdown = json.loads(capsys.readouterr().out)["stores"][0]["breakdown_ns"]
    from ddltrace.timeline import CATEGORIES

    empty = [c for c in CATEGORIES if not any(row[c] for row in breakdown)]
    assert empty == ["io", "memcpy", "idle"]
    md = demo_report.markdown.read_text().replace("\\", "")
    title, _, header = md.split("### Time per category and rank")[1].split("\n")[:3]
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert not {*empty, *(f"share_{c}" for c in empty)} & set(columns)
    assert {"compute", "comm", "wait", "barrier", "other", "share_other"} <= set(columns)
    assert title.endswith("; no rank has time in io, memcpy, idle: left out)")


def test_ranks_missing_for_one_reason_are_one_line(tmp_path):
    """A store of 2 ranks of a world of 40 (as HTA's trace_filter holds 2 of 128): the Missing ranks section listed
    32 lines that said the same but for the rank's number, then '(and 6 more)'; consecutive ranks missing for one
    reason are one line now, every one of them named, and findings.json still lists each."""
    rows = [{"rank": rank, "name": "step", "category": "compute", "start_ns": 0, "dur_ns": 10_000_000}
            for rank in (0, 1)]
    path = tmp_path / "store"
    write_store(path, make_timeline(rows), run={"command": "job", "world_size": 40})
    files = build_report([str(path)], tmp_path / "rep")
    md = files.markdown.read_text().replace("\\", "")
    section = md.split("## Missing ranks")[1].split("\n## ")[0].strip().splitlines()
    manifest = path / "manifest.json"
    assert section == [f"{path}: 38 of 40 ranks have no usable timeline; everything in this report is of the other 2.",
                       "", f"- ranks 2-39: {manifest}: rank N of the world of 40 has no usable entry in the manifest"]
    doc = json.loads(files.findings.read_text())
    assert [m["rank"] for m in doc["missing_ranks"][str(path)]] == list(range(2, 40))


def test_a_finding_of_several_runs_is_named_by_what_its_titles_share():
    """HTA's AMD trace and Kineto's ResNet-50 trace both wait for the host, one 'launch-bound': their card was
    titled with the detector's id, 'gpu_host_bound: found in 2 runs'."""
    from ddltrace.analyses.findings import Finding
    from ddltrace.report.render import _group_title

    def finding(title):
        return Finding(id="gpu_host_bound", title=title, severity="warning")

    assert _group_title([finding("GPU idle waiting for the host (launch-bound): 37.9 % of a device's window"),
                         finding("GPU idle waiting for the host: 97.3 % of a device's window")]) == \
        "GPU idle waiting for the host"
    assert _group_title([finding("Staleness: mean 2.6"), finding("Staleness: mean 5.5")]) == "Staleness"
    assert _group_title([finding("Straggler: rank 1"), finding("Stragglers: ranks 2, 3")]) == "gpu_host_bound"


def test_the_hardware_profile_s_curves_are_drawn(sequential_series, tmp_path):
    """--profile drew no C_muladd figure from any profile 'ddltrace calibrate' writes: the report read curves as x
    and y arrays and the caches as machine.caches_bytes, where calibrate writes each curve's points ({x, y}) and
    machine.cache_bytes."""
    from ddltrace.report import profile_curves

    path = SAMPLES.parent / "ps-sgd-disk" / "A.json"
    profile = json.loads(path.read_text())
    curves = profile_curves(profile)
    assert sorted(curves) == sorted(name for name in profile["curves"] if "muladd" in name)
    for name, (x, y) in curves.items():
        points = sorted((p["x"], p["y"]) for p in profile["curves"][name]["points"])
        assert list(zip(x, y, strict=True)) == points
    files = build_report([sequential_series[1]], tmp_path / "rep", profile=str(path))
    assert "profile_muladd.png" in {p.name for p in files.figures}
    assert "the machine's caches" in files.markdown.read_text()


def test_a_store_given_twice_or_a_model_that_cannot_be_read_is_one_line(sequential_series, tmp_path, capsys):
    """A store given twice was reported as two runs ('2 runs, w = 2, 2', each finding 'found in 2 runs'), and a
    --model that does not exist was ignored without a word where the report has one run (exit 0)."""
    store = sequential_series[1]
    for args, line in (([store, store], f"{store}: given twice; give each run once"),
                       ([store, "--model", str(tmp_path / "none.json")],
                        f"{tmp_path / 'none.json'}: cannot read the model ([Errno 2] No such file or directory: "
                        f"'{tmp_path / 'none.json'}')")):
        assert main(["report", *args, "--out", str(tmp_path / "r"), "--quiet"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"ddltrace: error: {line}"]
        assert not (tmp_path / "r").exists()


def test_gpu_idle_without_correlation_ids_is_not_drawn_as_no_host_wait(tmp_path):
    """A TF 1.2 GPU timeline (the corpus' blackbox_tf1_timeline) links no launch to its kernel: which idle gap
    waited for the host is not measured, yet the figure drew 'idle: waiting for the host' in its legend at 0 ms
    for every device. It draws the idle time as one now, and says why."""
    from shared_data import corpus

    trace = corpus("blackbox_tf1_timeline", "timeline_01.json")
    if not trace.is_file():
        pytest.skip(f"{trace} absent (tests/data/wild/PROVENANCE.md says where it comes from)")
    from ddltrace.analyses.run_analysis import analyze_store
    from ddltrace.report import figures

    store = tmp_path / "store"
    assert main(["import", str(trace), "--out", str(store)]) == 0
    files = build_report([str(store)], tmp_path / "rep")
    md = files.markdown.read_text().replace("\\", "")
    assert "### GPU time per device, busy and idle" in md and "waiting for the host" not in md.split("## Figures")[1]
    assert "not measured: the trace links no launch to its kernel (no correlation ids)" in md
    run = analyze_store(store)
    fig = figures.gpu_idle_figure(run.gpu.temporal_table(), None)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["compute", "non-compute (comm, copies)", "idle"]
    bars = [p.get_width() for p in fig.axes[0].patches]  # per part, a bar per device: they fill the window (ms)
    devices = len(run.gpu.temporal_table())
    assert sum(bars) == pytest.approx(run.gpu.temporal_table()["window_ns"].sum() / 1e6)
    assert len(bars) == 3 * devices
    figures.plt.close(fig)


def test_the_staleness_histogram_counts_gradients_as_the_job_logged_them():
    """The staleness histogram's y axis read 'count' (of what?): it counts gradients, one bar per staleness, each
    the number of the job's gradients.csv rows of that staleness."""
    import csv
    from collections import Counter

    from ddltrace.analyses.run_analysis import analyze_store
    from ddltrace.report import _run_figures, figures

    run = analyze_store(SAMPLES / "seq-w8" / "store")
    with open(SAMPLES / "seq-w8" / "gradients.csv", newline="") as fh:
        logged = Counter(int(row["staleness"]) for row in csv.DictReader(fh))
    drawn = {}
    real = figures.histogram_figure

    def keep(*args, **kwargs):
        drawn["fig"] = fig = real(*args, **kwargs)
        drawn["bars"] = {round(p.get_x() + p.get_width() / 2): p.get_height() for p in fig.axes[0].patches}
        drawn["ylabel"], drawn["title"] = fig.axes[0].get_ylabel(), fig.axes[0].get_title()
        return fig

    figures.histogram_figure = keep
    try:
        keys = [f.key for f in _run_figures(run, {}, "")]
    finally:
        figures.histogram_figure = real
    assert "staleness" in keys and drawn["ylabel"] == "gradients"
    assert drawn["title"] == "Gradient staleness, every applied gradient"
    assert {s: n for s, n in drawn["bars"].items() if n} == dict(logged)


def test_an_event_name_of_thousands_of_characters_is_cut_in_the_table(tmp_path):
    """A C++ kernel's name runs to thousands of characters (HTA's trace_filter: 2,000): the event-name table showed
    it whole, a cell wider than the page; it is cut to NAME_CHARS with '...', as the title says."""
    from ddltrace.report import NAME_CHARS

    long = "void kernel<" + "at::GenericPackedTensorAccessor<float, 2ul>, " * 50 + ">()"
    rows = [{"rank": 0, "name": long, "category": "compute", "start_ns": 0, "dur_ns": 5_000_000},
            {"rank": 0, "name": "short", "category": "compute", "start_ns": 5_000_000, "dur_ns": 1_000_000}]
    path = tmp_path / "store"
    write_store(path, make_timeline(rows), run={"command": "job", "world_size": 1})
    md = build_report([str(path)], tmp_path / "rep").markdown.read_text().replace("\\", "")
    # (and the title names the run of a RUN/store folder, not every sample's 'ddltrace report: store')
    assert md.startswith(f"# ddltrace report: {tmp_path.name}/store\n")
    table = md.split("### Where the time goes by event name")[1]
    assert f"a name longer than {NAME_CHARS} characters cut)" in table.splitlines()[0]
    names = [line.split("|")[1].strip() for line in table.split("\n\n")[1].splitlines()[2:]]
    assert names == [long[:NAME_CHARS - 3] + "...", "short"]


def test_the_event_name_table_keeps_a_hosts_launch_apart_from_the_kernel_of_its_name(tmp_path):
    """XPlane names a host's launch after its kernel or copy: the table added the 24 host launches of MemcpyD2H
    (2.85 ms) to the 24 copies (77 us) as 48 calls. Host and device rows of one name are two rows, 'on' says
    which."""
    rows = [{"rank": 0, "name": "MemcpyD2H", "category": "memcpy", "lane": "host:cpu/tf_op", "start_ns": i * 1000,
             "dur_ns": 100} for i in range(3)]
    rows += [{"rank": 0, "name": "MemcpyD2H", "category": "memcpy", "lane": "gpu:0/stream:7",
              "start_ns": i * 1000 + 200, "dur_ns": 40} for i in range(3)]
    path = tmp_path / "store"
    write_store(path, make_timeline(rows), run={"command": "job", "world_size": 1})
    md = build_report([str(path)], tmp_path / "rep").markdown.read_text().replace("\\", "")
    table = md.split("### Where the time goes by event name")[1].split("\n\n")[1].splitlines()
    assert [c.strip() for c in table[0].split("|")[1:-1]] == ["name", "category", "on", "calls", "total",
                                                            "mean per call"]
    assert [[c.strip() for c in line.split("|")[1:-1]] for line in table[2:]] == [
        ["MemcpyD2H", "memcpy", "host", "3", "300 ns", "100 ns"], ["MemcpyD2H", "memcpy", "device", "3", "120 ns",
                                                                    "40 ns"]]


def test_runs_at_no_common_batch_size_are_no_scaling_series(sequential_series, tmp_path):
    """A run at batch 64 beside one at batch 128 (two jobs, as a GPU trace beside a ps-sgd store): analyze compares
    neither with the other (speedup and efficiency NaN), yet the report drew their phase times as one series and an
    efficiency figure with no measured point, and listed the scaling study as made."""
    other = str(write_ps_store(tmp_path / "b128", workers=2, batch_size=128).path)
    files = build_report([sequential_series[2], other], tmp_path / "rep")
    names = {p.name for p in files.figures}
    assert not {"scaling.png", "efficiency.png"} & names and "shares.png" in names
    md = files.markdown.read_text().replace("\\", "")
    assert "### Scaling series" not in md and "scaling series' are of every run" not in md
    doc = json.loads(files.findings.read_text())
    scaling = [s for s in doc["not_made"] if s["analysis"] == "scaling"]
    assert sorted(s["store"] for s in scaling) == sorted([sequential_series[2], other])
    assert all(s["holds"] == "w = 2, batch 128; w = 4, batch 64" for s in scaling)
    # (runs of one batch size are a series still: test_report_files_and_order)


def test_the_end_of_initialisation_label_stays_clear_of_the_title():
    """The whole-run timeline's 'end of init' label was drawn above the axes, over the title ('Whole run' and it
    ran into each other on the demo's w = 8 run): it is inside the axes now."""
    import numpy as np

    from ddltrace.report import figures

    rows = {rank: np.zeros(figures.PIXEL_COLUMNS, dtype=np.int8) for rank in range(9)}
    fig = figures.timeline_figure(rows, (0, 5_000_000_000), "Whole run", {"end of init": 2_700_000_000})
    fig.canvas.draw()
    ax = fig.axes[0]
    (label,) = [t for t in ax.texts if "end of init" in t.get_text()]
    box, inside, title = label.get_window_extent(), ax.get_window_extent(), ax.title.get_window_extent()
    assert inside.y0 <= box.y0 and box.y1 <= inside.y1 and not box.overlaps(title)
    figures.plt.close(fig)


def test_the_queue_figure_says_which_streams_it_draws():
    """TF2's XPlane profile launches on 9 streams of rank 0: the queue figure draws the 8 with the longest queues,
    and its caption said 'each stream'."""
    import pandas as pd

    from ddltrace.report import figures, queue_streams

    series = pd.DataFrame([{"device": "gpu:0", "stream": f"stream {s}", "t_ns": t, "queue_length": (s + 1) * (t % 2)}
                           for s in range(9) for t in range(4)])
    assert queue_streams(series) == "the 8 of its 9 streams with the longest queues"
    fig = figures.queue_figure(series, 1024, "q")
    drawn = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(drawn) == 8 and "gpu:0/stream 0" not in drawn  # stream 0's queue is the shortest
    figures.plt.close(fig)
    assert queue_streams(series[series["stream"].isin(["stream 1", "stream 2"])]) == "each of its 2 streams"


def test_a_column_heading_drops_the_unit_its_cells_carry():
    """A cell says its unit ('6 s'), so the heading does not say another (QA: 'total_ns' over '6 s')."""
    import pandas as pd

    from ddltrace.report.render import _table_cells

    frame = pd.DataFrame({"total_ns": [6e9], "steady_s": [1.5], "copied_bytes": [2048], "rate_bytes_per_s": [1e9],
                          "ns": [7]}, index=pd.Index([0], name="rank"))
    header, rows = _table_cells(frame)
    assert header == ["rank", "total", "steady", "copied", "rate", "ns"]
    assert rows == [["0", "6 s", "1.5 s", "2 KiB", "1000 MB/s", "7"]]


def test_a_run_that_cannot_be_read_among_several_is_left_out_and_named(tmp_path):
    """An empty folder and a missing store beside two good runs: the report is of the two, and a section names the
    runs left out and why (findings.json's left_out; QA: the whole report refused, exit 2)."""
    (tmp_path / "empty").mkdir()
    good = [str(SAMPLES / f"seq-w{w}" / "store") for w in (1, 4)]
    out = tmp_path / "rep"
    done = subprocess.run([sys.executable, "-m", "ddltrace", "report", good[0], str(tmp_path / "empty"),
                           str(tmp_path / "gone"), good[1], "--out", str(out), "--quiet"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"ddltrace report: warning: {tmp_path / 'gone'}: no such trace store; left out" in done.stderr
    md = (out / "report.md").read_text().replace("\\", "")
    section = md.split("## Runs left out", 1)[1].split("## Findings", 1)[0]
    assert f"- {tmp_path / 'empty'}: no files to import" in section
    assert f"- {tmp_path / 'gone'}: no such trace store" in section
    doc = json.loads((out / "findings.json").read_text())
    assert [x["input"] for x in doc["left_out"]] == [str(tmp_path / "empty"), str(tmp_path / "gone")]
    assert sorted(doc["stores"]) == sorted(good)


def test_the_initialisation_zoom_is_drawn_only_where_a_rank_initialises_and_marks_each_ranks_end(monkeypatch):
    """QA s21: on HTA's trace_filter (both ranks' first event is a ProfilerStep: init 0 ns in the breakdown) the
    report drew 0.2 ms of "Initialisation", the ranks' first events apart; on the DLRM trace its window ran to the
    last rank's first step, and 7 ms of rank 1's step read as its initialisation. The zoom is drawn only where a rank
    has one, and ticks each rank's own end."""
    from types import SimpleNamespace

    import numpy as np

    import ddltrace.report as report
    from ddltrace.report import figures

    def phase(start, init_end, end):
        return SimpleNamespace(start_ns=start, init_end_ns=init_end, end_ns=end)

    monkeypatch.setattr(report, "_steady_steps", lambda run: None)
    run = SimpleNamespace(phases={0: phase(0, 0, 20_000), 1: phase(200, 200, 19_000)}, can=lambda what: True)
    assert set(report.timeline_windows(run)) == {"whole"}
    run.phases = {0: phase(0, 100, 20_000), 1: phase(200, 7_700, 21_000)}
    assert report.timeline_windows(run)["init"] == (0, 7_700 + 7_700 // 20)
    rows = {rank: np.zeros(figures.PIXEL_COLUMNS, dtype=np.int8) for rank in run.phases}
    fig = figures.timeline_figure(rows, (0, 8_085), "Initialisation", row_marks={0: 100, 1: 7_700})
    segments = [seg for c in fig.axes[0].collections for seg in c.get_segments()]
    ticks = sorted(seg[0][0] for seg in segments if seg[0][0] == seg[1][0])  # the vertical ones
    assert ticks == [100 / 1e6, 7_700 / 1e6]  # ms since the window's start
    figures.plt.close(fig)
