"""calibrate --conv-algorithms (collectors/microbench/conv_algorithms.py): the GEMM and FFT convolutions compute the
same forward and backward as a direct loop, their workspace is the buffers' sizes from the shapes (and what
tracemalloc sees allocated), the geometry comes out of the DNN description (or the command says what is missing),
and plan batch solves Chang's program on the file written, within the memory budget."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from ddltrace.cli import main
from ddltrace.collectors.microbench import conv_algorithms as ca
from ddltrace.collectors.microbench.conv_algorithms import ConvGeometry
from ddltrace.errors import DdltraceError
from ddltrace.models import chang
from ddltrace.models.dnn import load_dnn, parse_dnn

GEOMETRIES = [
    ConvGeometry("same", 3, 9, 4, 3, 1, 1, 9),  # stride 1, padding 1 (AlexNet's conv3-5, VGG's)
    ConvGeometry("strided", 2, 20, 3, 5, 4, 2, 5),  # stride 4, padding 2 (AlexNet's conv1, smaller)
    ConvGeometry("valid", 2, 11, 3, 3, 2, 0, 5),  # no padding, stride 2
    ConvGeometry("first", 3, 8, 2, 3, 1, 1, 8, data_grad=False),  # on the data: dW only
]


def direct(g: ConvGeometry, t: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """y, dx, dw of the convolution (cross-correlation, as the frameworks' conv layers) by its definition, float64."""
    x, w, dy = (t[key].astype(np.float64) for key in ("x", "w", "dy"))
    p, s, k = g.padding, g.stride, g.kernel
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    y, dxp, dw = np.zeros(dy.shape), np.zeros(xp.shape), np.zeros(w.shape)
    for i, j in itertools.product(range(g.out_rows), repeat=2):
        patch = xp[:, :, i * s:i * s + k, j * s:j * s + k]
        y[:, :, i, j] = np.einsum("nchw,fchw->nf", patch, w)
        dw += np.einsum("nf,nchw->fchw", dy[:, :, i, j], patch)
        dxp[:, :, i * s:i * s + k, j * s:j * s + k] += np.einsum("nf,fchw->nchw", dy[:, :, i, j], w)
    return y, dxp[:, :, p:p + g.in_rows, p:p + g.in_rows], dw


@pytest.mark.parametrize("g", GEOMETRIES, ids=lambda g: g.name)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gemm_and_fft_compute_the_convolution_forward_and_backward(g, dtype):
    batch = 3
    truth = direct(g, ca.tensors(g, batch, dtype))
    results = {}
    for kind in ca.ALGORITHMS:
        t = ca.tensors(g, batch, dtype)
        ca.step(ca.KINDS[kind](g, batch, dtype), t)
        results[kind] = (t["y"], t["dx"], t["dw"])
        assert (t["dx"] is None) == (not g.data_grad)
    tolerance = 1e-12 if dtype == np.float64 else 2e-5
    for name, index in (("y", 0), ("dx", 1), ("dw", 2)):
        if not g.data_grad and name == "dx":
            continue
        scale = np.max(np.abs(truth[index]))
        gemm, fft = results["gemm"][index], results["fft"][index]
        assert np.max(np.abs(gemm - fft)) <= tolerance * scale, (name, "gemm vs fft")
        for kind, got in (("gemm", gemm), ("fft", fft)):
            assert np.max(np.abs(got - truth[index])) <= tolerance * scale, (name, kind)


def test_a_second_step_gives_the_same_answer():
    """The buffers are reused from step to step (the padded input's border, dY's zeros between the strided outputs):
    a second step on other data is still right."""
    g = GEOMETRIES[1]
    for kind in ca.ALGORITHMS:
        algo = ca.KINDS[kind](g, 2, np.float64)
        ca.step(algo, ca.tensors(g, 2, np.float64, seed=1))
        t = ca.tensors(g, 2, np.float64, seed=2)
        ca.step(algo, t)
        for got, want in zip((t["y"], t["dx"], t["dw"]), direct(g, t), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.max(np.abs(want)))


def gemm_bytes(g: ConvGeometry, n: int, b: int) -> int:
    """im2col's matrix (C k^2 x N Ho^2), Y's matrix (K x N Ho^2), the padded input (when padded)."""
    cols = g.in_channels * g.kernel ** 2 * n * g.out_rows ** 2
    ymat = g.out_channels * n * g.out_rows ** 2
    padded = n * g.in_channels * (g.in_rows + 2 * g.padding) ** 2 if g.padding else 0
    return b * (cols + ymat + padded)


def fft_bytes(g: ConvGeometry, n: int, b: int) -> int:
    """Three padded real arrays of F x F maps, then the peak of the transforms alive at once (complex, F (F/2 + 1)
    frequencies): forward X^ W^ Y^ and Y's F x F inverse; backward X^ W^ dY^ dW^; dW's inverse beside dX^; dX's."""
    from scipy.fft import next_fast_len

    f = next_fast_len(g.in_rows + 2 * g.padding, real=True)
    c, k = g.in_channels, g.out_channels
    real, cplx = b * f * f, 2 * b * f * (f // 2 + 1)
    persistent = real * (n * c + c * k + n * k)
    phases = [cplx * (n * c + c * k + n * k) + real * n * k, cplx * (n * c + 2 * c * k + n * k),
              cplx * ((n * c if g.data_grad else 0) + c * k) + real * c * k]
    if g.data_grad:
        phases.append(cplx * n * c + real * n * c)
    return persistent + max(phases)


@pytest.mark.parametrize("g", GEOMETRIES, ids=lambda g: g.name)
def test_the_workspace_is_the_buffers_sizes_from_the_shapes_and_what_is_allocated(g):
    batch, dtype = 4, np.float32
    for kind, formula in (("gemm", gemm_bytes), ("fft", fft_bytes)):
        t = ca.tensors(g, batch, dtype)
        algo, traced = ca.traced_first_step(kind, g, batch, dtype, t, 1)
        want = formula(g, batch, 4)
        assert algo.ws.peak == want == ca.KINDS[kind].workspace_bytes(g, batch, 4), kind
        # tracemalloc saw the buffers and little else (numpy's iterator buffers, Python objects): no hidden copy
        assert want <= traced <= want + 160 * 1024, (kind, traced, want)
    assert ca.KINDS["fft"].workspace_bytes(g, batch, 8) == fft_bytes(g, batch, 8)


def test_the_geometry_comes_from_alexnet_s_description():
    geos = {g.name: g for g in ca.conv_geometries(load_dnn("alexnet"))}
    assert list(geos) == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    c1 = geos["conv1"]  # 3 x 224 x 224 -> 64 x 55 x 55 with 11 x 11 filters: stride 4, padding 2
    assert (c1.in_channels, c1.in_rows, c1.out_channels, c1.kernel, c1.stride, c1.padding, c1.out_rows) == \
        (3, 224, 64, 11, 4, 2, 55)
    assert not c1.data_grad  # on the data
    c2 = geos["conv2"]  # below it pool1: 64 x 27 x 27
    assert (c2.in_channels, c2.in_rows, c2.stride, c2.padding, c2.out_rows, c2.data_grad) == (64, 27, 1, 2, 27, True)
    assert (geos["conv5"].in_channels, geos["conv5"].out_channels, geos["conv5"].padding) == (384, 256, 1)
    for g in geos.values():  # the rule gives back the description's rows
        assert (g.in_rows + 2 * g.padding - g.kernel) // g.stride + 1 == g.out_rows


def _description(**conv) -> dict:
    layer = {"name": "c1", "type": "conv", "neurons": 4 * 8 * 8, "fan_in": 27, "weights": 108, "rows": 8,
             "kernel": 3, "channels": 4, **conv}
    return {"format": "ddltrace-dnn/1", "name": "tiny", "bytes_per_value": 4,
            "input": {"neurons": 3 * 8 * 8, "rows": 8}, "layers": [{k: v for k, v in layer.items() if v is not None}]}


@pytest.mark.parametrize("change, message", [
    ({"kernel": None}, "c1 has no kernel"),
    ({"fan_in": 36}, "fan_in / kernel^2 = 4 input channels, but input has 3"),
    ({"fan_in": 28}, "fan_in 28 is not a multiple of kernel^2 = 9"),
    ({"neurons": 4 * 8 * 7}, "square feature maps are assumed"),
    ({"rows": 30, "neurons": 4 * 30 * 30}, "no stride and padding (0 to 2) take 8 rows to 30"),
])
def test_a_description_that_lacks_the_geometry_is_refused_saying_what(tmp_path, capsys, change, message):
    path = tmp_path / "tiny.json"
    raw = _description(**change)
    path.write_text(json.dumps(raw))
    code = main(["calibrate", "--conv-algorithms", "--dnn", str(path), "--out", str(tmp_path / "o.json"), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "cannot measure convolution algorithms" in err
    assert not (tmp_path / "o.json").exists()


def test_options_of_the_other_run_are_refused(tmp_path, capsys):
    out = str(tmp_path / "o.json")
    assert main(["calibrate", "--conv-algorithms", "--dnn", "alexnet", "--only", "cpu", "--out", out]) == 2
    assert "--only belongs to the hardware profile's run" in capsys.readouterr().err
    assert main(["calibrate", "--dnn", "alexnet", "--out", out]) == 2
    assert "--dnn goes with --conv-algorithms" in capsys.readouterr().err
    assert main(["calibrate", "--conv-algorithms", "--out", out]) == 2
    assert "needs --dnn" in capsys.readouterr().err
    assert main(["calibrate", "--conv-algorithms", "--dnn", "mlp-2-10k-2", "--out", out]) == 2
    assert "mlp-2-10k-2: cannot measure convolution algorithms: it has no conv layer" in capsys.readouterr().err
    half = tmp_path / "half.json"
    half.write_text(json.dumps({**_description(), "bytes_per_value": 2}))
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(half), "--out", out]) == 2
    assert "bytes_per_value 2: the CPU algorithms run in float32 (4) or float64 (8) only" in capsys.readouterr().err


def test_a_spread_is_read_and_checked():
    raw = _description(algorithms={"gemm": {"2": {"time_s": 0.5, "workspace_bytes": 10, "time_spread_s": 0.01,
                                                  "forward_s": 0.2}}})
    assert parse_dnn(raw).layers[0].algorithms["gemm"][2].time_spread_s == 0.01
    raw["layers"][0]["algorithms"]["gemm"]["2"]["time_spread_s"] = -1
    with pytest.raises(DdltraceError, match=r"gemm\[2\]\.time_spread_s must be a finite number >= 0"):
        parse_dnn(raw)


def test_calibrate_writes_tables_that_plan_batch_solves_within_the_budget(tmp_path, capsys):
    """Two small conv layers measured at batches 1 and 2; the file is a DNN description whose tables plan batch
    reads; with a budget that holds GEMM's workspace but not FFT's everywhere, its choice fits and is the fastest
    that fits (all combinations tried)."""
    raw = {"format": "ddltrace-dnn/1", "name": "two-convs", "source": "a test", "bytes_per_value": 4,
           "input": {"neurons": 3 * 12 * 12, "rows": 12},
           "layers": [{"name": "c1", "type": "conv", "neurons": 8 * 12 * 12, "fan_in": 27, "weights": 216,
                       "rows": 12, "kernel": 3, "channels": 8},
                      {"name": "p1", "type": "pool", "neurons": 8 * 6 * 6, "fan_in": 4, "rows": 6, "kernel": 2,
                       "channels": 8},
                      {"name": "c2", "type": "conv", "neurons": 16 * 6 * 6, "fan_in": 72, "weights": 1152,
                       "rows": 6, "kernel": 3, "channels": 16},
                      {"name": "fc", "type": "fc", "neurons": 10, "fan_in": 576}]}
    src, out = tmp_path / "two.json", tmp_path / "two-algorithms.json"
    src.write_text(json.dumps(raw))
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(src), "--batches", "2,1", "--repeats", "2",
                 "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "c2" in text and f"written to {out}" in text
    written = json.loads(out.read_text())
    assert "calibrate --conv-algorithms" in written["source"] and written["source"].startswith("a test; ")
    assert written["algorithm_tables"]["layers"]["c2"]["in_rows"] == 6
    assert "algorithms" not in written["layers"][1] and "algorithms" not in written["layers"][3]
    dnn = load_dnn(out)
    geos = {g.name: g for g in ca.conv_geometries(dnn)}
    for layer in (dnn.layers[0], dnn.layers[2]):
        assert set(layer.algorithms) == {"gemm", "fft"}
        for kind, formula in (("gemm", gemm_bytes), ("fft", fft_bytes)):
            assert set(layer.algorithms[kind]) == {1, 2}
            for batch, cost in layer.algorithms[kind].items():
                assert cost.time_s > 0 and cost.time_spread_s is not None and cost.time_spread_s >= 0
                assert cost.workspace_bytes == formula(geos[layer.name], batch, 4)
    entry = written["layers"][0]["algorithms"]["gemm"]["2"]
    assert entry["runs"] >= 2 and 0 < entry["forward_s"] < entry["time_s"] and entry["cpu_s"] > 0

    batch = 2
    base = chang.memory_bytes(dnn, batch)
    ws = {(layer.name, kind): layer.algorithms[kind][batch].workspace_bytes
          for layer in dnn.layers if layer.algorithms for kind in ("gemm", "fft")}
    # room for every GEMM and for one FFT, the smaller: the program has to leave the other layer's FFT out
    small_fft = min(ws[("c1", "fft")] - ws[("c1", "gemm")], ws[("c2", "fft")] - ws[("c2", "gemm")])
    budget = base + ws[("c1", "gemm")] + ws[("c2", "gemm")] + small_fft + 1
    assert main(["plan", "batch", "--dnn", str(out), "--gpu-memory", str(int(budget)), "--batches", "2",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    choice = result["choices"][0]
    assert choice["feasible"] and result["tables_source"] == dnn.source
    assert choice["memory_bytes"] + choice["workspace_bytes"] <= budget
    assert choice["workspace_bytes"] == sum(ws[(name, kind)] for name, kind in choice["algorithms"].items())
    times = {(layer.name, kind): layer.algorithms[kind][batch].time_s
             for layer in dnn.layers if layer.algorithms for kind in ("gemm", "fft")}
    fits = [dict(zip(("c1", "c2"), mix, strict=True)) for mix in itertools.product(("gemm", "fft"), repeat=2)
            if base + ws[("c1", mix[0])] + ws[("c2", mix[1])] <= budget]
    assert {"c1": "fft", "c2": "fft"} not in fits
    best = min(fits, key=lambda mix: sum(times[(name, kind)] for name, kind in mix.items()))
    assert choice["algorithms"] == best
    assert choice["time_s"] == pytest.approx(sum(times[(n, k)] for n, k in best.items()))
    spreads = [dnn.layers[0 if n == "c1" else 2].algorithms[k][batch].time_spread_s for n, k in best.items()]
    assert choice["time_spread_s"] == pytest.approx(float(np.hypot(*spreads)))


def test_clock_cpu_puts_the_cpu_time_in_time_s(tmp_path, capsys):
    src, out = tmp_path / "tiny.json", tmp_path / "tiny-algorithms.json"
    src.write_text(json.dumps(_description()))
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(src), "--batches", "1", "--repeats", "1",
                 "--clock", "cpu", "--quick", "--out", str(out), "--quiet"]) == 0
    written = json.loads(out.read_text())
    assert written["algorithm_tables"]["clock"] == "cpu" and "median cpu time of 1 runs" in written["source"]
    for entry in written["layers"][0]["algorithms"].values():
        e = entry["1"]
        assert (e["time_s"], e["time_spread_s"]) == (e["cpu_s"], e["cpu_spread_s"]) and e["wall_s"] > 0
        # one thread's CPU time within its own wall time (the process's read whole clock ticks of BLAS's idle worker)
        assert e["cpu_s"] <= 1.01 * e["wall_s"] + 2e-5
        assert e["runs"] == 1  # --quick: no runs added for busy ones
    capsys.readouterr()
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(src), "--clock", "cpu", "--threads", "2",
                 "--out", str(out), "--quiet"]) == 2
    assert "--clock cpu needs one thread" in capsys.readouterr().err
