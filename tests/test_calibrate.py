"""``ddltrace calibrate``: the quick run end to end, sections, bad input, no compiler, no GPU, --compare."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddltrace.cli import main
from ddltrace.collectors.microbench import feedforward, gpu, machine
from ddltrace.collectors.microbench import profile as prof

DDLTRACE = str(Path(sys.executable).parent / "ddltrace")


def _check_constants(profile: dict) -> None:
    assert profile["constants"]
    for name, c in profile["constants"].items():
        assert math.isfinite(c["value"]) and c["value"] > 0, name
        assert math.isfinite(c["uncertainty"]) and c["uncertainty"] >= 0, name
        assert c["unit"] and c["description"], name


def test_quick_calibration_end_to_end(tmp_path):
    out = tmp_path / "profile.json"
    env = dict(os.environ, DDLTRACE_CACHE=str(tmp_path / "cache"))  # as on a fresh install: kernels not yet built
    proc = subprocess.run([DDLTRACE, "calibrate", "--quick", "--out", str(out), "--disk-path", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    profile = json.loads(out.read_text())
    assert prof.problems(profile) == []
    _check_constants(profile)
    from ddltrace import __version__

    assert profile["ddltrace_version"] == __version__ and profile["quick"] is True
    for key in ("cpu_model", "usable_cores", "cache_bytes", "memory_bytes", "kernel"):
        assert profile["machine"][key]
    names = set(profile["constants"])
    for needed in ("C_muladd", "C_act", "C_err", "C_muladd_gemv_f32", "C_muladd_gemm_f64", "C_act_tanh_numpy_f64",
                   "C_err_sigmoid_numpy_f32", "C_interf_H2_cache", "C_interf_H2_mem", "r_m", "w_m", "mem_bw_triad",
                   "r_d", "w_d", "disk_iops_4k", "lat_net", "r_net", "C_nbw", "C_ncost"):
        if needed.startswith("C_interf") and profile["machine"]["usable_cores"] < 2:
            continue
        assert needed in names, needed
    if shutil.which(os.environ.get("DDLTRACE_CC") or os.environ.get("CC") or "cc"):
        assert {"C_muladd_loop_f64", "core_clock_hz", "gemm_peak_fraction_f64"} <= names
        assert list((tmp_path / "cache" / "microbench").glob("kernels-*.so"))  # built on first use
    curve = profile["curves"]["C_muladd_gemv_f64"]
    assert curve["x_unit"] == "B" and len(curve["points"]) >= 4
    # the summary table prints each constant with its unit
    assert "profile written to" in proc.stdout
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("r_m "))
    assert "s/B" in line and "B/s" in line and "%" in line
    # ... the file's value, uncertainty and definition (the table had no definition, nor said what kind of
    # uncertainty it printed)
    r_m = profile["constants"]["r_m"]
    assert prof.format_value(r_m["value"], "s/B") in line and r_m["description"] in line
    assert f"± {100 * r_m['uncertainty'] / r_m['value']:.2g} %" in line
    assert "uncertainty: one standard uncertainty" in proc.stdout
    assert "calibrate [" in proc.stderr  # the progress line


def test_no_compiler_still_calibrates_the_cpu_with_numpy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DDLTRACE_CC", str(tmp_path / "no" / "cc"))
    monkeypatch.setenv("DDLTRACE_CACHE", str(tmp_path / "cache"))
    # smaller segments than the machine's caches call for, to keep the test short; the pipeline is the real one
    monkeypatch.setattr(feedforward, "segment_sizes", lambda quick, neurons=False: [16384, 262144])
    monkeypatch.setattr(machine, "llc_bytes", lambda: 1 << 20)
    out = tmp_path / "p.json"
    assert main(["calibrate", "--quick", "--only", "cpu", "--out", str(out)]) == 0
    profile = prof.load(out)
    _check_constants(profile)
    names = set(profile["constants"])
    assert {"C_muladd_gemv_f64", "C_muladd_gemm_f32", "C_act_sigmoid_numpy_f32", "C_err_tanh_numpy_f64"} <= names
    assert not any("_loop_" in n for n in names) and "core_clock_hz" not in names
    assert any("no C compiler" in n for n in profile["notes"])
    assert "note: no C compiler" in capsys.readouterr().out


def test_json_output_is_the_profile(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--only", "gpu", "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) and printed["format"] == prof.FORMAT


def test_no_gpu_is_a_line_in_the_output(tmp_path, capsys):
    if gpu.describe()[0]:
        pytest.skip("this machine has a GPU")
    out = tmp_path / "p.json"
    assert main(["calibrate", "--only", "gpu", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert [ln for ln in text.splitlines() if ln.startswith("note: no GPU: ")]
    assert json.loads(out.read_text())["machine"]["gpus"] == []


@pytest.mark.parametrize("argv,message", [
    (["--only", "cpu,tpu"], "--only 'cpu,tpu': unknown section(s) tpu"),
    (["--only", "disk", "--disk-path", "/nonexistent/dir"], "/nonexistent/dir: disk benchmark directory does not"),
    (["--only", "disk", "--disk-size", "0"], "--disk-size: 0 is out of range"),
    # (every case is given --out below) QA s20: --only with --compare was ignored, every constant listed
    (["--compare", "/nonexistent/a.json", "/nonexistent/b.json", "--only", "cpu"],
     "calibrate --compare: --only, --out go with a measurement; --compare lists every constant of the two profiles"),
])
def test_bad_input_is_one_line(argv, message, tmp_path, capsys):
    out = tmp_path / "p.json"
    try:
        code = main(["calibrate", *argv, "--out", str(out)])
    except SystemExit as exc:  # argparse's range checks (ddltrace/options.py) exit while parsing
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0
    assert not out.exists()


def test_compare_names_a_profile_it_cannot_read(capsys):
    assert main(["calibrate", "--compare", "/nonexistent/a.json", "/nonexistent/b.json"]) == 2
    assert capsys.readouterr().err.strip() == "ddltrace: error: /nonexistent/a.json: no such profile"


def test_disk_without_room_fails_before_measuring(tmp_path, capsys):
    free_mib = shutil.disk_usage(tmp_path).free // 2**20
    out = tmp_path / "p.json"
    assert main(["calibrate", "--only", "cpu,disk", "--disk-path", str(tmp_path), "--disk-size",
                 str(free_mib + 1), "--out", str(out)]) == 2
    assert "not enough room" in capsys.readouterr().err
    assert not out.exists()


def test_ctrl_c_keeps_what_was_measured_and_says_so(tmp_path):
    """Ctrl-C in the middle of a calibration lost everything measured before it ('ddltrace: interrupted', no file);
    now the profile keeps the sections done (and any constant of the cut section already whole), names the cut
    section and those not started, and the exit status is 130."""
    out = tmp_path / "p.json"
    proc = subprocess.Popen([DDLTRACE, "calibrate", "--quick", "--only", "mem,net,gpu", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a shell
    for line in proc.stderr:  # progress lines: one per section
        if line.rstrip().endswith("] net"):
            proc.send_signal(signal.SIGINT)
            break
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    profile = prof.load(out)
    assert profile["sections"] == ["mem"] and profile["interrupted"] == "net"
    assert {"r_m", "w_m", "mem_bw_triad"} <= set(profile["constants"])
    assert set(profile["not_measured"]) == {"net", "gpu"} and "not started" in profile["not_measured"]["gpu"]
    assert "note: section net not measured in full: interrupted (Ctrl-C)" in stdout
    last = stderr.strip().splitlines()[-1]
    assert last == (f"ddltrace: interrupted during the net section; {out} keeps the "
                    f"{len(profile['constants'])} constants measured (mem in full)")


def _peer_that_stops_after_the_hello():
    """A TCP server that answers the probe's hello as a probe server does, then closes the connection at the next
    request: a peer that stops in the middle of the network section. Returns (HOST:PORT, the listening socket)."""
    import socket
    import threading

    from ddltrace.collectors.microbench import network

    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(network.REQUEST.size, socket.MSG_WAITALL)
                if len(head) == network.REQUEST.size and network.REQUEST.unpack(head)[1] == network.OP_HELLO:
                    conn.sendall(network.HELLO_REPLY.pack(network.MAGIC, network.VERSION, network.MAX_MESSAGE))
                    conn.recv(network.REQUEST.size, socket.MSG_WAITALL)  # the next request: closed unanswered

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}", listener


def test_a_failed_section_is_named_and_the_others_kept(tmp_path, capsys):
    """A section that failed (here the peer stops answering after its hello) threw away every section measured
    before or after it; now the others are measured and written, the failed one named in one line, exit 2."""
    peer, listener = _peer_that_stops_after_the_hello()
    out = tmp_path / "p.json"
    try:
        code = main(["calibrate", "--quick", "--quiet", "--only", "net,mem", "--peer", peer, "--out", str(out)])
    finally:
        listener.close()
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"ddltrace: error: section net failed: peer {peer}: ")
    profile = prof.load(out)
    assert profile["sections"] == ["mem"] and "interrupted" not in profile
    assert {"r_m", "w_m"} <= set(profile["constants"]) and "r_net" not in profile["constants"]
    assert profile["not_measured"]["net"].startswith(f"failed: peer {peer}")
    assert err.endswith(f"{out} keeps the {len(profile['constants'])} constants measured (mem in full)")


def test_a_disk_that_fails_mid_way_loses_only_the_disk_section(tmp_path):
    """The disk benchmark's writes fail part-way (a file size limit, RLIMIT_FSIZE: EFBIG, as a device error would):
    that was a traceback and no profile; now the disk section is named in one line and the memory section kept."""
    import resource

    out = tmp_path / "p.json"

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 * 2**20, 2 * 2**20))  # the profile is far smaller

    proc = subprocess.run([DDLTRACE, "calibrate", "--quick", "--quiet", "--only", "mem,disk", "--disk-path",
                           str(tmp_path), "--disk-size", "4", "--out", str(out)], capture_output=True, text=True,
                          timeout=120, preexec_fn=limit_file_size)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"ddltrace: error: section disk failed: {tmp_path}: the disk benchmark's I/O "
                                  "failed (File too large)")
    profile = prof.load(out)
    assert profile["sections"] == ["mem"] and "r_m" in profile["constants"] and "r_d" not in profile["constants"]
    assert not list(tmp_path.glob(".ddltrace-disk-probe-*"))  # its file removed


def _two_profiles(folder, r_m_of_b: float):
    """Profiles A and B saved in ``folder``: r_m 100 ps/B in A, ``r_m_of_b`` in B, and w_m in B only."""
    a = prof.new_profile({"hostname": "a", "cpu_model": "A"}, True, ["mem"])
    b = prof.new_profile({"hostname": "b", "cpu_model": "B"}, True, ["mem"])
    prof.add_constant(a, "r_m", 1e-10, 1e-12, "s/B", "memory read time per byte")
    prof.add_constant(b, "r_m", r_m_of_b, 1e-12, "s/B", "memory read time per byte")
    prof.add_constant(b, "w_m", 2e-10, 1e-12, "s/B", "memory write time per byte")
    return prof.save(a, folder / "a.json"), prof.save(b, folder / "b.json")


def test_compare_two_profiles(tmp_path, capsys):
    pa, pb = _two_profiles(tmp_path, 1.001e-10)
    assert main(["calibrate", "--compare", str(pa), str(pb)]) == 0
    text = capsys.readouterr().out
    assert "same within 2 sigma" in text and "only in B" in text and "100 ps/B (10 GB/s)" in text


def test_compare_prints_both_uncertainties_and_refuses_different_units(tmp_path, capsys):
    """The compare table printed A's and B's values without their uncertainties (the verdict's inputs), and
    compared a constant recorded in different units by the two profiles as if the numbers were alike."""
    pa, pb = _two_profiles(tmp_path, 1.5e-10)
    b = prof.load(pb)
    prof.add_constant(b, "r_m", 1.25e-10 * 8, 2e-12, "s/bit", "memory read time per bit")  # a unit of its own
    prof.add_constant(b, "w_m", 2e-10, 4e-12, "s/B", "memory write time per byte")
    a = prof.load(pa)
    prof.add_constant(a, "w_m", 1e-10, 3e-12, "s/B", "memory write time per byte")
    prof.save(a, pa), prof.save(b, pb)
    assert main(["calibrate", "--compare", str(pa), str(pb)]) == 0
    rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("r_m", "w_m"))}
    assert "± 3 %" in rows["w_m"] and "± 2 %" in rows["w_m"] and "2 x" in rows["w_m"]  # 3e-12 / 1e-10, 4e-12 / 2e-10
    assert "units differ (s/B vs s/bit)" in rows["r_m"] and " x " not in rows["r_m"]
    records = {r["constant"]: r for r in prof.compare_constants(a, b)}
    assert records["r_m"]["ratio"] is None and records["r_m"]["b_unit"] == "s/bit"


def test_compare_json_gives_each_constant_of_the_two_profiles(tmp_path, capsys):
    """--json with --compare printed the table, which no JSON reader takes; now each constant with both values."""
    pa, pb = _two_profiles(tmp_path, 1.5e-10)
    assert main(["calibrate", "--compare", str(pa), str(pb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {c["constant"]: c for c in doc["constants"]}
    assert (doc["a"], doc["b"]) == (str(pa), str(pb)) and set(by_name) == {"r_m", "w_m"}
    assert by_name["r_m"]["a"] == 1e-10 and by_name["r_m"]["b"] == 1.5e-10 and by_name["r_m"]["unit"] == "s/B"
    assert by_name["r_m"]["ratio"] == pytest.approx(1.5) and by_name["r_m"]["verdict"] == "differs"
    assert by_name["w_m"]["a"] is None and by_name["w_m"]["verdict"] == "only in B"


@pytest.mark.parametrize("b_value, verdict", [(598e-12, "differs"), (380e-12, "same within 2 sigma")])
def test_a_constant_and_its_reciprocal_get_one_verdict(b_value, verdict):
    """r_net and C_nbw = 8 / r_net are one measurement: compared on the log scale they get one verdict (QA: the
    quota profiles' r_net 254 -> 598 ps/B +- 17 %, 31 % read 'same within 2 sigma' and their C_nbw 'differs',
    the test made on the values themselves)."""
    a, b = (prof.new_profile({}, quick=True, sections=["net"]) for _ in "ab")
    for profile, value, spread in ((a, 254e-12, 0.17), (b, b_value, 0.31)):
        prof.add_constant(profile, "r_net", value, spread * value, "s/B", "network time per byte")
        prof.add_constant(profile, "C_nbw", 8 / value, spread * 8 / value, "bit/s", "network bandwidth")
    verdicts = {r["constant"]: r["verdict"] for r in prof.compare_constants(a, b)}
    assert verdicts == {"r_net": verdict, "C_nbw": verdict}


def test_quiet_leaves_stderr_empty_and_the_summary_on_stdout(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--quick", "--only", "mem", "--quiet", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "profile written to" in captured.out
    assert "r_m" in json.loads(out.read_text())["constants"]


def test_compare_s_legend_states_the_rule_its_verdicts_follow(tmp_path, capsys):
    """QA: the legend said "'differs': |B - A| above twice the two in quadrature" while the verdict compares |ln(B /
    A)| with twice the relative uncertainties in quadrature. r_m 100 ps/B ± 1 % against 150 ps/B ± 20 %: |B - A| =
    50 ps is under twice 30 ps, |ln 1.5| = 0.405 over twice 0.2: 'differs', as the legend now says. And a fitted
    model given as B is named as one, as optimize and model predict name it."""
    pa, pb = _two_profiles(tmp_path, 1.5e-10)
    b = prof.load(pb)
    prof.add_constant(b, "r_m", 1.5e-10, 3e-11, "s/B", "memory read time per byte")
    prof.save(b, pb)
    assert main(["calibrate", "--compare", str(pa), str(pb)]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("r_m"))
    assert row.endswith("differs")
    assert math.log(1.5) > 2 * math.hypot(0.01, 0.2) and 5e-11 < 2 * math.hypot(1e-12, 3e-11)  # the two rules part
    assert "'differs': |ln(B / A)| above twice the two relative uncertainties in quadrature" in text
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"model": "hashemi-asgd", "constants": {}, "workload": {}}))
    assert main(["calibrate", "--compare", str(pa), str(model)]) == 2
    expected = f"ddltrace: error: {model}: a fitted model ('ddltrace model fit --out'), not a hardware profile"
    assert capsys.readouterr().err.strip() == expected + " (written by 'ddltrace calibrate')"
