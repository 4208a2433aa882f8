"""`ddltrace analyze`: findings with evidence, the breakdown table, JSON, --fail-on, thresholds, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddltrace.analyses.synthetic import write_ps_store
from ddltrace.cli import main

DATA = Path(__file__).resolve().parent / "data"

MS = 1_000_000


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze")
    write_ps_store(root / "healthy", workers=4, steps=12, seed=5)
    write_ps_store(root / "sequential", workers=4, steps=12, init="sequential", read_ns=20 * MS)
    write_ps_store(root / "healthy_w2", workers=2, steps=24, seed=6)
    return root


def analyze(capsys, *argv):
    rc = main(["analyze", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_healthy_run_prints_no_findings_and_the_breakdown(stores, capsys):
    rc, out, err = analyze(capsys, stores / "healthy", "--fail-on", "warning")
    assert rc == 0 and err == ""
    assert "No findings" in out
    assert "Breakdown of" in out and "average" in out and "slowest (rank" in out
    lines = [line for line in out.splitlines() if line.strip().startswith(("0 ", "1 ", "2 ", "3 ", "4 "))]
    assert len(lines) == 5 and "server" in lines[0] and all("%" in line and "ms" in line for line in lines)


def test_findings_with_evidence_and_fail_on(stores, capsys):
    rc, out, _ = analyze(capsys, stores / "sequential")
    assert rc == 0
    assert "[WARNING] Sequential initialisation" in out
    assert "slope" in out and "ms/rank" in out and "what to try:" in out
    assert analyze(capsys, stores / "sequential", "--fail-on", "warning")[0] == 1
    assert analyze(capsys, stores / "sequential", "--fail-on", "error")[0] == 0


def test_thresholds_from_the_command_line_and_a_config_file(stores, capsys, tmp_path):
    rc, out, _ = analyze(capsys, stores / "sequential", "--threshold", "seq_init.spread_min=2", "--fail-on", "warning")
    assert rc == 0 and "Sequential initialisation" not in out
    config = tmp_path / "strict.toml"
    config.write_text("[thresholds.seq_init]\nerror_share = 0.05\n")
    rc, out, _ = analyze(capsys, stores / "sequential", "--config", config, "--fail-on", "error")
    assert rc == 1 and "[ERROR] Sequential initialisation" in out


def test_json_output(stores, capsys):
    rc, out, _ = analyze(capsys, stores / "sequential", stores / "healthy", "--json", "--fail-on", "warning")
    assert rc == 1
    doc = json.loads(out)
    assert [f["id"] for f in doc["findings"] if f["severity"] != "info"] == ["sequential_init"]
    finding = doc["findings"][0]
    assert finding["evidence"]["slope"]["unit"] == "ns/rank"
    assert finding["evidence"]["slope"]["value"] == pytest.approx(20 * MS, rel=0.05)
    assert finding["store"].endswith("sequential") and finding["ranks"] == [1, 2, 3, 4]
    store = doc["stores"][0]
    assert len(store["phases"]) == 5 and store["roles"]["0"] == "server"
    for rank, phases in zip(store["breakdown_ns"], store["phases"], strict=True):
        assert rank["total_ns"] == phases["end_ns"] - phases["start_ns"]
    assert doc["thresholds"]["ps.busy_min"] == 0.8


def test_a_series_gives_the_scaling_study(stores, capsys):
    rc, out, _ = analyze(capsys, stores / "healthy_w2", stores / "healthy")
    assert rc == 0 and "Scaling study" in out and "E lemma" in out
    doc = json.loads(analyze(capsys, stores / "healthy_w2", stores / "healthy", "--json")[1])
    assert [row["workers"] for row in doc["scaling"]] == [2, 4]
    assert doc["scaling"][1]["speedup_steady"] == pytest.approx(4, rel=0.1)


@pytest.mark.parametrize("argv, message", [
    (["no-such-store"], "no-such-store: no such trace store"),
    (["{healthy}", "--threshold", "nope=1"], "unknown threshold"),
    (["{healthy}", "--threshold", "ps.busy_min=much"], "not a number"),
    (["{healthy}", "--config", "missing.toml"], "missing.toml: cannot read config"),
    # out of range (QA s20: accepted, and overlap.min=5 flagged any run's overlap as low)
    (["{healthy}", "--threshold", "overlap.min=5"], "overlap.min='5': must be from 0 to 1"),
    (["{healthy}", "--threshold", "ps.busy_min=-1"], "ps.busy_min='-1': must be from 0 to 1 (fraction of "
                                                     "the server's steady state)"),
    (["{healthy}", "--threshold", "straggler.min_ranks=1e400"], "straggler.min_ranks='1e400': must be a whole "
                                                                "number of ranks, at least 3"),
    (["{healthy}", "--threshold", "straggler.min_ranks=2"], "must be a whole number of ranks, at least 3"),
    (["{healthy}", "--threshold", "seq_init.min_ranks=5.5"], "must be a whole number of ranks, at least 3"),
    (["{healthy}", "--threshold", "gpu.late_min_instances=2.5"], "must be a whole number of collectives, at least 1"),
    (["{healthy}", "--threshold", "hang.blocked_min_ns=inf"], "must be finite and at least 0 (ns)"),
])
def test_bad_input_is_one_line_and_exit_2(stores, capsys, argv, message):
    rc, out, err = analyze(capsys, *[a.format(healthy=stores / "healthy") for a in argv])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_config_or_rules_file_not_in_utf8_is_one_line_and_exit_2(stores, capsys, tmp_path):
    """A Latin-1 TOML given to --config (analyze, report) or --rules (import): one line naming the file and the
    byte (before: a UnicodeDecodeError traceback, exit 1), and the import writes no store."""
    latin1 = tmp_path / "seuils.toml"
    latin1.write_bytes('# seuil réglé\n[thresholds]\n"ps.busy_min" = 0.7\n'.encode("latin-1"))
    for argv in (["analyze", stores / "healthy", "--config", latin1],
                 ["report", stores / "healthy", "--config", latin1, "--out", tmp_path / "report"],
                 ["import", DATA / "torch_gloo" / "rank0.pt.trace.json.gz", "--out", tmp_path / "store",
                  "--rules", latin1]):
        rc = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert rc == 2 and f"{latin1}: not UTF-8 text (byte 0xe9 at offset 9)" in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "store").exists()


def test_the_installed_command(stores):
    exe = Path(sys.executable).parent / "ddltrace"
    done = subprocess.run([str(exe), "analyze", str(stores / "sequential"), "--json", "--fail-on", "warning"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["findings"][0]["id"] == "sequential_init"


def test_help_teaches_the_thresholds(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "--fail-on" in out and "ps.busy_min=0.8" in out


def test_the_overlap_of_the_finding_and_of_the_table_say_their_phase(capsys):
    """Issue 18 item 2: the low-overlap finding measures the steady state while the table shows the whole run;
    each says which, and the table has the finding's column, whose median worker is the finding's figure."""
    store = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd" / "seq-w8" / "store"
    rc, out, _ = analyze(capsys, store)
    assert rc == 0
    title = next(line for line in out.splitlines() if "Low communication overlap" in line)
    assert "in the steady state" in title
    finding = float(title.split(": ", 1)[1].split(" %")[0])
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Breakdown of"))
    header = lines[at + 1].split()
    assert "overlap(run)" in header and "overlap(steady)" in header and "overlap" not in header
    column = 2 * (header.index("overlap(steady)") - len(header)) + 1  # from the right: each "49.7 %" is 2 cells
    workers = [cells for cells in map(str.split, lines[at + 2:]) if cells[1:2] == ["worker"]]
    assert len(workers) == 8
    steady = sorted(float(cells[column - 1]) for cells in workers if cells[column] == "%")
    assert len(steady) == 8
    assert finding == pytest.approx((steady[3] + steady[4]) / 2, abs=0.06)
    assert any(line.strip().startswith("overlap(P):") and "steady" in line for line in lines[at:])


def test_a_job_that_did_not_end_well_is_said_by_info_and_analyze(tmp_path, capsys):
    """A job whose rank was killed (mpiexec's exit code 9, every rank ended abruptly): info and analyze say so,
    with the ranks (QA: analyze said 'No findings' and neither showed the exit code); a job that ended well gets no
    such line."""
    from ddltrace.store import write_store
    from ddltrace.timeline import make_timeline

    rows = [{"rank": r, "name": "work", "category": "compute", "start_ns": 1000 * i, "dur_ns": 500}
            for r in (0, 1) for i in range(5)]
    for name, run, ended in (("killed", {"exit_code": 9}, "abrupt"), ("fine", {"exit_code": 0}, "normal")):
        write_store(tmp_path / name, make_timeline(rows), run={"world_size": 2, **run},
                    rank_info={r: {"ended": ended} for r in (0, 1)})
    assert main(["info", str(tmp_path / "killed")]) == 0
    assert "job ended   exit code 9" in capsys.readouterr().out
    rc, out, _ = analyze(capsys, tmp_path / "killed")
    assert rc == 0 and (f"The job in {tmp_path / 'killed'} did not end well: exit code 9; rank 0, 1 ended abruptly"
                        in out)
    assert json.loads(analyze(capsys, tmp_path / "killed", "--json")[1])["stores"][0]["exit_code"] == 9
    assert "did not end well" not in analyze(capsys, tmp_path / "fine")[1]


PS_SGD = Path(__file__).resolve().parent.parent / "sample_traces" / "ps-sgd"


def test_a_store_given_twice_is_refused_by_any_path(tmp_path, capsys):
    """The same store twice (QA: every finding twice and a 'series' of two identical runs, exit 0), as report
    refuses it: by the same path, another spelling of it, or a link to it."""
    store = PS_SGD / "seq-w4" / "store"
    (tmp_path / "link").symlink_to(store)
    for other in (store, Path(str(store) + "/"), tmp_path / "link"):
        assert main(["analyze", str(store), str(other), "--quiet"]) == 2
        assert "given twice" in capsys.readouterr().err


def test_a_run_that_cannot_be_read_among_several_is_left_out_and_named(tmp_path, capsys):
    """An empty folder and a missing store beside two good runs: named on stderr, in a line before the analysis
    and in --json's left_out, and the others analysed (QA: the whole analysis refused, exit 2). None readable:
    one line, exit 2."""
    (tmp_path / "empty").mkdir()
    good = [str(PS_SGD / f"seq-w{w}" / "store") for w in (1, 4)]
    given = [good[0], str(tmp_path / "empty"), str(tmp_path / "gone"), good[1]]
    assert main(["analyze", *given, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert f"ddltrace analyze: warning: {tmp_path / 'empty'}: no files to import; left out, the other runs are " \
           "used" in err
    assert out.startswith(f"Left out: {tmp_path / 'empty'}: no files to import (the other runs are analysed).\n"
                          f"Left out: {tmp_path / 'gone'}: no such trace store (the other runs are analysed).\n")
    assert "ddltrace analyze: 2 stores" in out
    assert main(["analyze", *given, "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    empty, gone = f"{tmp_path / 'empty'}: no files to import", f"{tmp_path / 'gone'}: no such trace store"
    assert doc["left_out"] == [{"input": str(tmp_path / "empty"), "reason": empty},
                               {"input": str(tmp_path / "gone"), "reason": gone}]
    assert [s["store"] for s in doc["stores"]] == good
    assert main(["analyze", str(tmp_path / "empty"), str(tmp_path / "gone"), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"ddltrace: error: nothing to analyze: none of the 2 runs given could be read ({empty})"


def test_the_scaling_study_names_each_runs_series_and_the_runs_left_out(capsys):
    """Runs of two jobs given together (par and seq): each row names its store and series, the series are compared
    apart, and the run of no series is named as left out, with why (QA: one series through both jobs)."""
    given = [str(PS_SGD / name / "store") for name in ("par-w1", "par-w2", "seq-w2")]
    assert main(["analyze", *given, "--quiet"]) == 0
    out = capsys.readouterr().out
    table = out.split("Scaling study", 1)[1].splitlines()
    header = re.split(r"\s{2,}", table[1].strip())
    assert header[:3] == ["series", "store", "w"]
    cells = [re.split(r"\s{2,}", line.strip())[:3] for line in table[2:5]]
    par, seq = "ps-sgd init=parallel, batch 64", "ps-sgd init=sequential, batch 64"
    assert cells == [[par, given[0], "1"], [par, given[1], "2"], [seq, given[2], "2"]]
    assert f"  {given[2]} (w = 2, ps-sgd init=sequential, batch 64): left out, no other run of its job at its " \
           "batch size" in out


def test_a_folder_of_stores_is_its_stores(tmp_path, capsys):
    """`analyze runs/` where runs/ holds stores side by side: each store is a run (QA: each store's parquet files
    were read as trace files, 'not a trace format ddltrace knows', and report kept only a trace beside them). A
    folder of stores beside other files: one line saying so."""
    import shutil

    runs = tmp_path / "runs"
    for w in (1, 2):
        shutil.copytree(PS_SGD / f"par-w{w}" / "store", runs / f"w{w}.store")
    assert main(["analyze", str(runs), "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["store"] for s in doc["stores"]] == [str(runs / "w1.store"), str(runs / "w2.store")]
    assert [r["workers"] for r in doc["scaling"]] == [1, 2]
    (runs / "run.json").write_text("{}")
    assert main(["analyze", str(runs), "--quiet"]) == 2
    assert f"{runs}: holds trace stores (w1.store, w2.store) and other files (run.json)" in capsys.readouterr().err
