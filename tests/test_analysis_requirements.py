"""Each analysis runs only where its input holds what it needs (issue 20, item 1).

IPM keeps per-call totals per rank, which the importer lays end to end: wait states matched on that invented
layout reported "Barrier Completion: 152 s" on a 6 s, 64-rank run whose MPI_Barrier total is 0.243 s. Here the
real file goes through import, analyze and report; the expected numbers come from the XML itself.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from shared_data import SHARED

from ddltrace.analyses.run_analysis import analyze_store
from ddltrace.analyses.synthetic import write_ps_store
from ddltrace.cli import main

IPM64 = SHARED / "wild_traces/ipm_hunold_1494937738"
needs_ipm = pytest.mark.skipif(not IPM64.is_dir(), reason=f"{IPM64} is not here (the shared real traces)")


def ipm_totals(folder: Path) -> dict:
    """Per rank, from the XML: wall time and the total time of each MPI call (s)."""
    (path,) = folder.glob("*.ipm.xml")
    out = {}
    for task in ET.parse(path).getroot().iter("task"):
        funcs: dict[str, float] = {}
        for func in task.iter("func"):
            funcs[func.get("name")] = funcs.get(func.get("name"), 0.0) + float(func.text)
        out[int(task.get("mpi_rank"))] = {"wtime": float(task.find("perf").get("wtime")), "funcs": funcs}
    return out


@pytest.fixture(scope="module")
def ipm64(tmp_path_factory):
    out = tmp_path_factory.mktemp("ipm64") / "store"
    assert main(["import", str(IPM64), "--out", str(out)]) == 0
    return out


@needs_ipm
def test_no_wait_states_from_per_call_aggregates(ipm64, capsys):
    truth = ipm_totals(IPM64)
    barrier_s = sum(t["funcs"].get("MPI_Barrier", 0.0) for t in truth.values())
    assert len(truth) == 64 and barrier_s < 1  # the file: 0.243 s of MPI_Barrier over all 64 ranks
    capsys.readouterr()
    assert main(["analyze", str(ipm64), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not [f for f in doc["findings"] if f["id"].startswith("wait_state_")], doc["findings"]
    assert doc["stores"][0]["wait_states_ns"] == []  # not made, so no figures (it held a row of zeros per rank)
    skipped = {s["analysis"]: s for s in doc["not_made"]}
    assert {"wait_states", "phases", "sequential_init", "ps_saturation"} <= set(skipped)
    assert "per-call totals" in skipped["wait_states"]["holds"] and "timeline" in skipped["wait_states"]["needs"]
    store = doc["stores"][0]
    assert "aggregates" in store["capabilities"] and "timeline" not in store["capabilities"]
    # what can be made from totals is the file's: barrier time per rank and over all ranks
    barrier = {row["rank"]: row["barrier"] for row in store["breakdown_ns"]}
    for rank, t in truth.items():
        assert barrier[rank] == pytest.approx(t["funcs"].get("MPI_Barrier", 0.0) * 1e9, abs=2)
    assert sum(barrier.values()) == pytest.approx(barrier_s * 1e9, abs=64 * 2)


@needs_ipm
def test_text_output_says_what_was_not_made_and_why(ipm64, capsys):
    capsys.readouterr()
    assert main(["analyze", str(ipm64)]) == 0
    out = capsys.readouterr().out
    assert "Barrier Completion" not in out and "wait states (all ranks" not in out
    not_made = out.split("Not made from this input", 1)[1].split("Breakdown of", 1)[0]
    assert "per-call totals per rank (ipm)" in not_made
    assert "- costly wait states (Scalasca's patterns): needs a real timeline" in not_made
    assert "- phases and steps" in not_made
    assert "no phases or steps: this input holds per-call totals" in out


@needs_ipm
def test_report_headline_and_not_made_section(ipm64, tmp_path, capsys):
    assert main(["report", str(ipm64), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "r" / "findings.json").read_text())
    assert not [f for f in doc["findings"] if f["id"].startswith("wait_state_")]
    assert {"wait_states", "timeline_figures"} <= {s["analysis"] for s in doc["not_made"]}
    md = (tmp_path / "r" / "report.md").read_text()
    verdict = next(line for line in md.splitlines() if line.startswith("> "))
    assert "Barrier Completion" not in verdict
    assert "## Not made from this input" in md
    assert not (tmp_path / "r" / "timeline.png").exists()  # no picture of the importer's invented layout
    assert not (tmp_path / "r" / "trace.json").exists()  # nor a Chrome trace of it for Perfetto UI, and why not
    plain = md.replace("\\", "")  # Markdown's escapes
    assert "No trace.json beside this report:" in plain and "holds per-call totals, not a timeline" in plain
    assert 'id="perfetto-open"' not in (tmp_path / "r" / "report.html").read_text()


def test_a_timeline_with_messages_gets_every_analysis_it_holds(tmp_path):
    from ddltrace.analyses.requirements import ANALYSES
    from ddltrace.analyses.run_analysis import not_made

    run = analyze_store(write_ps_store(tmp_path / "ps", workers=4, steps=12, seed=3).path)
    assert {"timeline", "messages", "collectives", "mpi_calls"} <= run.capabilities
    assert "hosts" not in run.capabilities  # every rank on the one host "synthetic"
    assert all(run.can(key) for key in ANALYSES if ANALYSES[key].min_stores == 1 and not key.startswith("node_"))
    assert len(run.wait_states)  # the server's workers wait for it
    made_alone = {s.analysis for s in not_made([run])}
    # a comparison of runs needs more than one store; the GPU analyses, device work (one line for all of them);
    # the per-node view, ranks on two or more hosts (its parts are judged only where it is made)
    assert made_alone == {"scaling", "gpu", "node_traffic"}
    assert "ranks on two or more hosts" in next(s.needs for s in not_made([run]) if s.analysis == "node_traffic")


@needs_ipm
def test_model_fit_refuses_per_call_aggregates(ipm64, tmp_path, capsys):
    other = tmp_path / "copy"
    assert main(["import", str(IPM64), "--out", str(other)]) == 0
    capsys.readouterr()
    assert main(["model", "fit", str(ipm64), str(other), "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(ipm64) in err[0] and "needs a real timeline" in err[0]
    assert "per-call totals" in err[0]


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"


def test_too_few_ranks_for_the_initialisation_staircase_is_said(capsys):
    """seq-w2 (a server and 2 workers): sequential initialisation's fit against the rank number needs
    seq_init.min_ranks (4) ranks, and the store's 3 were passed over in silence. analyze's JSON and text now list
    it as not made with the count the store holds; with the threshold at 3 it is made, and not listed."""
    from ddltrace.analyses.thresholds import DEFAULTS
    from ddltrace.store import TraceStore

    store = SAMPLES / "seq-w2" / "store"
    ranks = len(TraceStore.open(store).ranks)
    least = DEFAULTS["seq_init.min_ranks"].value
    assert ranks == 3 < least
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    skipped = {s["analysis"]: s for s in json.loads(capsys.readouterr().out)["not_made"]}
    within = skipped["sequential_init"]
    assert within["title"] == "sequential initialisation" and within["store"] == str(store)
    assert f"{least:g} or more ranks" in within["needs"] and "(seq_init.min_ranks)" in within["needs"]
    assert within["holds"] == f"{ranks} ranks" and within["reason"].endswith(f"; the input holds {ranks} ranks")
    across = skipped["sequential_init_across_runs"]  # one store: one worker count, the series fit needs three
    assert "3 or more worker counts" in across["needs"] and across["holds"] == "1 store at w = 2"
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out.split("Not made from this input", 1)[1].split("Breakdown of", 1)[0]
    assert f"\n    - sequential initialisation: needs {least:g} or more ranks" in text
    assert f"(seq_init.min_ranks); the input holds {ranks} ranks\n" in text
    assert main(["analyze", str(store), "--json", "--threshold", f"seq_init.min_ranks={ranks}"]) == 0
    assert "sequential_init" not in {s["analysis"] for s in json.loads(capsys.readouterr().out)["not_made"]}


def test_a_store_without_device_work_says_why_once(capsys):
    """seq-w2 holds no device work. analyze listed its GPU analyses as not made for that ("needs device work on a
    device lane"), then each GPU detector again for the same reason in its own words (four more lines). The text
    says it once, the GPU findings named in the GPU analyses' line; --json keeps an entry per store and detector
    (machines read each), marked ``said_with: "gpu"``."""
    from ddltrace.analyses.findings import REQUIREMENTS, load_detectors

    load_detectors()
    gpu = [name for name, r in REQUIREMENTS.items() if "device" in r.needs]
    assert len(gpu) >= 4
    store = SAMPLES / "seq-w2" / "store"
    capsys.readouterr()
    assert main(["analyze", str(store)]) == 0
    text = capsys.readouterr().out.split("Not made from this input", 1)[1].split("Breakdown of", 1)[0]
    (line,) = [line for line in text.splitlines() if "device work" in line]
    assert text.count("device work") == 2  # needs device work ...; the input holds no device work
    assert line.startswith("    - GPU analyses (temporal") and ") and GPU findings (" in line
    assert ": needs device work on a device lane; the input holds no device work (" in line
    assert all(line.count(REQUIREMENTS[name].title) == 1 for name in gpu), line
    assert main(["analyze", str(store), "--json"]) == 0
    said = {s["analysis"]: s.get("said_with") for s in json.loads(capsys.readouterr().out)["not_made"]}
    assert said["gpu"] is None and all(said[name] == "gpu" for name in gpu)
    assert list(said.values()).count("gpu") == len(gpu)


def test_stores_too_few_for_a_series_or_a_threshold_are_said(capsys):
    """Two stores (w = 2 and 4, one batch size): cache cliff (two batch sizes at one w), parameter-server saturation
    and sequential initialisation across runs (three worker counts) were passed over in silence, as were the
    stragglers of a store with fewer workers than straggler.min_ranks; each is now listed with what the stores
    hold: their w and batch size, read here from their manifests."""
    from ddltrace.analyses.run_analysis import job_config
    from ddltrace.store import TraceStore

    paths = [SAMPLES / "seq-w2" / "store", SAMPLES / "seq-w4" / "store"]
    stores = [TraceStore.open(p) for p in paths]
    w = [int(job_config(s)["workers"]) for s in stores]
    (batch,) = {int(job_config(s)["batch"]) for s in stores}
    workers4 = len(stores[1].ranks) - 1  # all ranks but the server (the workload's server_rank)
    assert w == [2, 4] and workers4 == 4
    capsys.readouterr()
    assert main(["analyze", *map(str, paths), "--json", "--threshold", "straggler.min_ranks=5"]) == 0
    skipped = {s["analysis"]: s for s in json.loads(capsys.readouterr().out)["not_made"]}
    series = ", ".join(map(str, paths))
    cliff = skipped["cache_cliff"]
    assert cliff["store"] == series and cliff["holds"] == f"2 stores: w = 2, batch {batch}; w = 4, batch {batch}"
    ps = skipped["ps_saturation_across_runs"]
    assert ps["title"] == "parameter-server saturation across runs" and "3 or more worker counts" in ps["needs"]
    assert ps["holds"] == f"2 stores at batch {batch}, w = 2, 4"
    assert skipped["sequential_init_across_runs"]["holds"] == "2 stores at w = 2, 4"
    straggler = skipped["stragglers"]
    assert straggler["store"] == str(paths[1]) and straggler["holds"] == f"{workers4} workers with a steady state"
    assert "5 or more workers" in straggler["needs"] and "(straggler.min_ranks)" in straggler["needs"]


def test_the_report_says_each_reason_once_for_all_its_stores(tmp_path):
    """A report of three stores listed every analysis not made once per store (three "slow node: needs ranks on
    two or more hosts", each GPU analysis twice: in "Not made" and in the GPU section). Now each analysis is one
    line naming its stores ("every store" when all), what each store holds is said once, and findings.json keeps
    one entry per store for machines."""
    from ddltrace.report.render import _md_escape as md_escape
    from ddltrace.store import TraceStore

    paths = [SAMPLES / f"seq-w{w}" / "store" for w in (2, 4, 8)]
    ranks = [len(TraceStore.open(p).ranks) for p in paths]
    out = tmp_path / "r"
    assert main(["report", *map(str, paths), "--out", str(out), "--quiet"]) == 0
    md = (out / "report.md").read_text()
    section = md.split("## Not made from this input", 1)[1].split("\n## ", 1)[0]
    items = [line for line in section.splitlines() if line.startswith("- **")]
    titles = [line.split("**")[1] for line in items]
    assert len(titles) == len(set(titles)) and "slow node" in titles
    assert "- **slow node** \\(every store\\): needs ranks on two or more hosts" in items
    for path, n in zip(paths, ranks, strict=True):
        assert section.count(f"{md_escape(str(path))} holds a timeline of {n} ranks.") == 1
    (seq,) = [line for line in items if line.startswith("- **sequential initialisation** ")]
    assert md_escape(str(paths[0])) in seq and md_escape(str(paths[1])) not in seq  # w = 2: 3 ranks, the others 5, 9
    assert seq.endswith(f"the input holds {ranks[0]} ranks")
    assert "GPU analyses \\(temporal" in section and "Not computed from this input" not in md  # once, not twice
    doc = json.loads((out / "findings.json").read_text())
    assert [s["store"] for s in doc["not_made"] if s["analysis"] == "slow_node"] == list(map(str, paths))


PING_PONG = SHARED / "mpi_traces" / "pipit-ping-pong-otf2"


@pytest.mark.skipif(not PING_PONG.is_dir(), reason=f"{PING_PONG} is not here (the shared real traces)")
def test_no_parameter_server_is_said(tmp_path, capsys):
    """pipit's OTF2 ping-pong (two ranks sending to each other): parameter-server saturation needs a server, and
    the store, with messages on a timeline, has none; it was passed over in silence."""
    pytest.importorskip("otf2")
    store = tmp_path / "pp"
    assert main(["import", str(PING_PONG), "--out", str(store)]) == 0
    capsys.readouterr()
    assert main(["analyze", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"timeline", "messages"} <= set(doc["stores"][0]["capabilities"])  # what the detector declares
    (ps,) = [s for s in doc["not_made"] if s["analysis"] == "ps_saturation"]
    assert ps["needs"].startswith("a parameter server") and ps["holds"] == "no server among its 2 ranks"


def test_no_compute_on_any_worker_is_said(tmp_path):
    """Two ranks whose time is all I/O and MPI (no compute recorded): Rudra's overlap is compute over compute plus
    exposed communication, so the low-overlap detector has nothing to measure; it was passed over in silence. The
    I/O-bound detector still measures (the share of I/O is 100 %)."""
    from ddltrace.analyses.findings import detect
    from ddltrace.analyses.thresholds import Thresholds
    from ddltrace.store import write_store
    from ddltrace.timeline import make_timeline

    rows = []
    for rank in (0, 1):
        for step in range(6):
            t = step * 3_000_000
            rows.append({"rank": rank, "name": "read", "category": "io", "start_ns": t, "dur_ns": 2_000_000})
            rows.append({"rank": rank, "name": "MPI_Allreduce", "category": "comm", "start_ns": t + 2_000_000,
                         "dur_ns": 1_000_000, "bytes": 64, "comm": 0, "source": "pmpi"})
    store = write_store(tmp_path / "io", make_timeline(rows), run={"world_size": 2})
    run = analyze_store(store.path)
    assert (run.table(run.main_phase)["compute"] == 0).all()
    findings, skipped = detect([run], Thresholds())
    (short,) = [s for s in skipped if s.analysis == "low_overlap"]
    assert short.holds == "no compute time on any worker " + ("in the steady state" if run.main_phase == "steady"
                                                              else "over the whole run")
    assert "io_bound" in {f.id for f in findings}
