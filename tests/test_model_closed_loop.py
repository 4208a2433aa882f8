"""Workers that pull, compute and push one after another (the reference ps-sgd job) are a closed loop, not
Hashemi's max(network, worker): at w = 1 the worker waits for the server's update and both transfers every batch.
Fitted with Hashemi's max, that wait went into c_p, and a B that slows only compute (a CPU quota, where the
server's cost is a sleep) slowed it too: the server-bound job's w = 1 on the quota B was predicted +54 %
(/work/runs/nh1.log). ``model fit --serial-comm`` fits the closed loop (mean value analysis) instead."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ddltrace.analyses.fit_hashemi import HashemiFit
from ddltrace.cli import main
from ddltrace.errors import DdltraceError
from ddltrace.models import hashemi, transfer
from ddltrace.models.hashemi import Constants, Workload

WL = Workload(d=4096, b=64, n_f=2, n_w=40000, epochs=1, s=8, serial=True)
#: the server-bound reference job on A: 106 us of compute per sample, 12 ms of server time per update
TRUE = Constants(c_p=106e-6, c_u=12e-3, r_net=3e-10, lat_net=2e-5)


def test_the_closed_loop_by_hand():
    think = WL.b * TRUE.c_p
    t = TRUE.r_net * WL.s * WL.n_w + TRUE.lat_net
    batches = WL.d / WL.b
    # one worker: everything in a row, its compute, the weights, the push and the update
    alone = TRUE.c_u + 2 * t
    assert hashemi.t_phase(1, WL, TRUE) == pytest.approx(batches * (think + alone))
    # two: the server holds the other worker with the probability one worker's cycle gives it, and takes a push
    # in while it applies the previous one
    q1 = alone / (think + alone)
    both = t + max(TRUE.c_u, t)
    assert hashemi.t_phase(2, WL, TRUE) == pytest.approx(batches * (think + both * (1 + q1)) / 2)
    # many: the server's throughput
    assert hashemi.t_phase(64, WL, TRUE) == pytest.approx(batches * both, rel=1e-3)
    w_star, cause = hashemi.knee(WL, TRUE)
    assert (w_star, cause) == (pytest.approx((think + alone) / both), "server")
    assert hashemi.bound_by(hashemi.phase_terms(1, WL, TRUE)) == "worker"
    assert hashemi.bound_by(hashemi.phase_terms(4, WL, TRUE)) == "server/network"
    # a slow link: the message outlasts the update, the network binds
    slow = Constants(c_p=TRUE.c_p, c_u=1e-3, r_net=4e-8)
    assert hashemi.knee(WL, slow)[1] == "network"
    assert hashemi.t_phase(64, WL, slow) == pytest.approx(batches * 2 * 4e-8 * 8 * 40000, rel=1e-3)
    # a fractional w lies between its integers
    assert hashemi.t_phase(1, WL, TRUE) > hashemi.t_phase(1.5, WL, TRUE) > hashemi.t_phase(2, WL, TRUE)
    # overlapping workers keep Hashemi's max
    paper = Workload(d=4096, b=64, n_f=2, n_w=40000, epochs=1, s=8)
    assert hashemi.t_phase(1, paper, TRUE) == pytest.approx(max(WL.d * TRUE.c_p,
                                                                hashemi.t_net(WL.d, 1, paper, TRUE)))


def test_the_server_takes_a_push_in_during_its_send_at_the_links_duplex_share():
    """With other workers in the loop the server holds t + max(c_u, t (1 - net_duplex / 2)) per update: 0 keeps
    the directions taking turns (t + max(c_u, t), the model before), 1 a full-duplex link (half the push left after
    the send, on average); alone, c_u + 2 t whatever the link. Carried to B, B's profile's net_duplex is taken as
    it is, A's kept where B's profile has none."""
    t, c_u = 13.4e-3, 1.7e-3
    assert hashemi.server_service(1, c_u, t, 1.0) == hashemi.server_service(1, c_u, t) == c_u + 2 * t
    assert hashemi.server_service(4, c_u, t) == hashemi.server_service(4, c_u, t, 0.0) == 2 * t
    assert hashemi.server_service(4, c_u, t, 1.0) == pytest.approx(1.5 * t)
    assert hashemi.server_service(4, 12e-3, t, 1.0) == pytest.approx(t + 12e-3)  # the update outlasts the rest
    slow = Constants(c_p=TRUE.c_p, c_u=c_u, r_net=4.2e-8)
    duplex = Constants(c_p=TRUE.c_p, c_u=c_u, r_net=4.2e-8, net_duplex=1.0)
    message = 4.2e-8 * WL.s * WL.n_w
    assert hashemi.t_phase(64, WL, duplex) == pytest.approx(WL.d / WL.b * 1.5 * message, rel=1e-3)
    assert hashemi.t_phase(1, WL, duplex) == hashemi.t_phase(1, WL, slow)
    assert hashemi.t_phase(4, WL, duplex) < hashemi.t_phase(4, WL, slow)
    assert hashemi.knee(WL, duplex)[0] > hashemi.knee(WL, slow)[0]
    a = {"constants": {"r_net": {"value": 4.2e-8, "uncertainty": 0.0}, "net_duplex": {"value": 0.0,
                                                                                     "uncertainty": 0.0}}}
    ratios = {"sample": 1.0, "update": 1.0, "held": {"r_net": 1.0}, "missing": {}}
    for b_record, want in (({"constants": {"r_net": {"value": 4.2e-8, "uncertainty": 0.0},
                                           "net_duplex": {"value": 0.98, "uncertainty": 0.01}}}, 0.98),
                           ({"constants": {"r_net": {"value": 4.2e-8, "uncertainty": 0.0}}}, 0.3)):
        on_b, _, _ = transfer.carry(replace(slow, net_duplex=0.3), WL, a, b_record, ratios)
        assert on_b.net_duplex == want
    # a profile's share above 1 is named, not carried (0 is a measured value)
    with pytest.raises(DdltraceError, match="net_duplex = 1.5: a share, must be at most 1"):
        transfer.profile_record({"constants": {"net_duplex": {"value": 1.5, "uncertainty": 0.0}}}, "B.json", 8.0)
    assert transfer.profile_record({"constants": {"net_duplex": {"value": 0.0, "uncertainty": 0.0}}}, "B.json",
                                   8.0)["constants"]["net_duplex"]["value"] == 0.0


def _runs(k: Constants) -> list[dict]:
    return [{"w": w, "b": 64, "d": 4096, "epochs": 1, "phase_s": hashemi.t_phase(w, WL, k)} for w in (1, 2, 4)]


def test_the_closed_loop_fit_keeps_the_servers_time_out_of_c_p():
    runs = _runs(TRUE)
    profile = {"r_net": TRUE.r_net, "lat_net": TRUE.lat_net}
    closed = HashemiFit(d=4096, n_f=2, n_w=40000, profile=profile, serial=True).fit(runs)
    assert closed.constants_.c_p == pytest.approx(TRUE.c_p, rel=1e-3)
    assert closed.constants_.c_u == pytest.approx(TRUE.c_u, rel=1e-3)
    assert closed.to_dict()["workload"]["serial"] is True
    paper = HashemiFit(d=4096, n_f=2, n_w=40000, profile=profile).fit(runs)
    assert paper.constants_.c_p > 2 * TRUE.c_p  # the max puts the w = 1 wait for the server into c_p


def test_a_quota_b_slows_the_workers_compute_not_the_servers_sleep(tmp_path, capsys):
    """B = A's CPU under half a core's quota: calibrate saw compute 2x; A's ranks had a core each; the server's
    12 ms per update are a sleep (its busy time did not grow as the share fell). On B at w = 1 the phase is the
    compute slowed 2x plus the server's time as it was: the model fitted as a closed loop says so."""
    shares = {1: 1.0, 2: 0.9, 4: 0.45}
    runs = [dict(r, ranks=r["w"] + 1, cpu_share=shares[r["w"]], server_busy_s=64 * 12e-3, label=f"w{r['w']}")
            for r in _runs(TRUE)]
    values = {"C_muladd": 2e-11, "C_act": 1e-9, "C_err": 1e-9, "r_net": TRUE.r_net, "lat_net": TRUE.lat_net}
    profile = {"machine": {"usable_cores": 2, "cpu_allowance": {"cores": 2, "quota_cores": None}},
               "constants": {name: {"value": value, "uncertainty": 0} for name, value in values.items()}}
    quota = json.loads(json.dumps(profile))
    quota["machine"]["cpu_allowance"]["quota_cores"] = 0.5
    for name in ("C_muladd", "C_act", "C_err"):
        quota["constants"][name]["value"] *= 2
    (tmp_path / "A.json").write_text(json.dumps(profile))
    (tmp_path / "B.json").write_text(json.dumps(quota))
    csv = tmp_path / "runs.csv"
    columns = ["label", "w", "b", "d", "epochs", "phase_s", "ranks", "cpu_share", "server_busy_s"]
    csv.write_text("\n".join([",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in runs]) + "\n")
    expected = 4096 * TRUE.c_p * 2 + 64 * (TRUE.c_u + 2 * (TRUE.r_net * 8 * 40000 + TRUE.lat_net))  # in a row
    for extra, within in ((["--serial-comm"], 0.01), ([], None)):
        model = tmp_path / f"model{len(extra)}.json"
        assert main(["model", "fit", "--csv", str(csv), "--dnn", "mlp-2-10k-2", "--profile", str(tmp_path / "A.json"),
                     "--out", str(model), *extra]) == 0
        capsys.readouterr()
        assert main(["model", "predict", str(model), "--workers", "1,2,4", "--profile", str(tmp_path / "B.json"),
                     "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        if within:
            assert rows[0]["profile_s"] == pytest.approx(expected, rel=within)
            assert rows[0]["profile_bound_by"] == "worker"
        else:  # Hashemi's max slows the server's wait with the compute
            assert rows[0]["profile_s"] > 1.3 * expected
    on_b = transfer.server_split(TRUE.c_u, transfer.profile_record(profile, "A", 8), runs)
    assert on_b["cpu_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert on_b["server_s"] == pytest.approx(12e-3)
