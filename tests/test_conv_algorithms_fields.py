"""calibrate --conv-algorithms with a conv layer's own stride and padding (the DNN description's optional fields,
checked by the loader; inferred from the rows only where absent, and the output says where), the bundled descriptions'
published strides and paddings, and an interrupted run: a complete file of the finished layers, marked partial, that
plan batch reads, naming the layers it lacks."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from ctrl_c import default_sigint

from ddltrace.cli import main
from ddltrace.collectors.microbench import conv_algorithms as ca
from ddltrace.interrupts import Terminated
from ddltrace.models.dnn import load_dnn


def _conv(name: str, below_channels: int, channels: int, rows: int, kernel: int, **window) -> dict:
    """A conv layer of square maps: ``rows`` x ``rows`` x ``channels`` out of ``below_channels`` in."""
    fan_in = below_channels * kernel * kernel
    return {"name": name, "type": "conv", "neurons": rows * rows * channels, "fan_in": fan_in,
            "weights": fan_in * channels, "rows": rows, "kernel": kernel, "channels": channels, **window}


def _description(layers: list[dict], rows: int = 8, channels: int = 3) -> dict:
    return {"format": "ddltrace-dnn/1", "name": "tiny", "source": "a test", "bytes_per_value": 4,
            "input": {"neurons": channels * rows * rows, "rows": rows}, "layers": layers}


def _write(tmp_path, raw: dict):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(raw))
    return path


def test_a_layer_s_stride_and_padding_are_used_and_the_output_names_those_inferred(tmp_path, capsys):
    """8 rows to 4 with kernel 3: the inference finds stride 2, padding 1; the layer's stride 3, padding 2 (also 4
    rows) are used instead. A layer with its padding only gets the smallest stride that fits; one with neither gets
    both inferred, and the output's line and the file name those."""
    src = _write(tmp_path, _description([_conv("given", 3, 4, 4, 3, stride=3, padding=2),
                                         _conv("half", 4, 4, 2, 3, padding=0),
                                         _conv("none", 4, 4, 2, 1)]))
    geos = {g.name: g for g in ca.conv_geometries(load_dnn(src))}
    assert (geos["given"].stride, geos["given"].padding, geos["given"].inferred) == (3, 2, ())
    assert (geos["half"].stride, geos["half"].padding, geos["half"].inferred) == (1, 0, ("stride",))
    assert (geos["none"].stride, geos["none"].padding, geos["none"].inferred) == (1, 0, ("stride", "padding"))
    out = tmp_path / "o.json"
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(src), "--batches", "1", "--repeats", "1", "--quick",
                 "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "inferred from the rows, not in the description: half stride 1; none stride 1, padding 0" in text
    written = json.loads(out.read_text())
    layers = written["algorithm_tables"]["layers"]
    assert (layers["given"]["stride"], layers["given"]["padding"], layers["given"]["inferred"]) == (3, 2, [])
    assert layers["none"]["inferred"] == ["stride", "padding"]
    assert written["layers"][0]["stride"] == 3 and "inferred" not in written["layers"][0]["notes"]
    assert "stride and padding inferred from the rows" in written["layers"][2]["notes"]


@pytest.mark.parametrize("window, message", [
    ({"stride": 0}, "layers[0] (c1).stride must be a positive integer, got 0"),
    ({"padding": -1}, "layers[0] (c1).padding must be a non-negative integer, got -1"),
    ({"stride": "2"}, "layers[0] (c1).stride must be a positive integer, got '2'"),
    ({"kernel": None, "stride": 1}, "layers[0] (c1).stride needs the layer's kernel"),
    ({"stride": 2, "padding": 1}, "layers[0] (c1).stride and .padding: stride 2 and padding 1 take the 8 rows below "
                                  "to 4 with kernel 3, not to the layer's rows 8"),
])
def test_a_bad_stride_or_padding_is_refused_in_one_line_naming_file_layer_and_field(tmp_path, capsys, window,
                                                                                     message):
    layer = {k: v for k, v in {**_conv("c1", 3, 4, 8, 3), **window}.items() if v is not None}
    src = _write(tmp_path, _description([layer]))
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(src), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err == f"ddltrace: error: {src}: invalid DNN description: {message}\n"
    assert not (tmp_path / "o.json").exists()


def test_only_conv_and_pool_layers_have_a_stride(tmp_path, capsys):
    fc = {"name": "fc", "type": "fc", "neurons": 10, "fan_in": 192, "stride": 1}
    src = _write(tmp_path, _description([_conv("c1", 3, 3, 8, 3, stride=1, padding=1), fc]))
    assert main(["calibrate", "--conv-algorithms", "--dnn", str(src), "--out", str(tmp_path / "o.json")]) == 2
    assert "layers[1] (fc).stride: only conv and pool layers have a stride and padding, not 'fc'" in \
        capsys.readouterr().err


def test_the_bundled_descriptions_carry_the_published_strides_and_paddings():
    """VGG (Simonyan and Zisserman 2015, section 2.1, configuration A of table 1): every conv stride 1, padding 1,
    every pool 2 x 2 stride 2; AlexNet (Krizhevsky et al. 2012 section 3.5, as tf_cnn_benchmarks builds it): conv1
    stride 4 (its padding: the 224-pixel input padded to 227 there, inferred here), conv2-5 stride 1 and 'SAME'
    padding, pools 3 x 3 stride 2 (section 3.4). Project Adam's reconstructions publish none: all inferred."""
    vgg = {g.name: g for g in ca.conv_geometries(load_dnn("vgg11"))}
    assert all((g.stride, g.padding, g.inferred) == (1, 1, ()) for g in vgg.values()) and len(vgg) == 8
    assert {(layer.stride, layer.padding) for layer in load_dnn("vgg11").layers if layer.type == "pool"} == {(2, 0)}
    alexnet = {g.name: (g.stride, g.padding, g.inferred) for g in ca.conv_geometries(load_dnn("alexnet"))}
    assert alexnet == {"conv1": (4, 2, ("padding",)), "conv2": (1, 2, ()), "conv3": (1, 1, ()), "conv4": (1, 1, ()),
                       "conv5": (1, 1, ())}
    assert {(layer.stride, layer.padding) for layer in load_dnn("alexnet").layers if layer.type == "pool"} == {(2, 0)}
    for name in ("mnist-adam", "imagenet22k-adam"):
        assert all(g.inferred == ("stride", "padding") for g in ca.conv_geometries(load_dnn(name)))


def _stop_at(layer: str, stop: KeyboardInterrupt):
    """A progress callback that raises ``stop`` when the measurement reaches ``layer``."""
    def progress(step: str) -> None:
        if step.split()[0] == layer:
            raise stop
    return progress


def test_an_interrupt_before_any_layer_is_finished_writes_nothing_and_a_sigterm_reads_143(tmp_path):
    src = _write(tmp_path, _description([_conv("c1", 3, 4, 8, 3), _conv("c2", 4, 4, 8, 3)]))
    with pytest.raises(KeyboardInterrupt):
        ca.calibrate(str(src), [1], repeats=1, progress=_stop_at("c1", KeyboardInterrupt()), extra=0)
    partial = ca.calibrate(str(src), [1], repeats=1, progress=_stop_at("c2", Terminated()), extra=0)
    assert partial["algorithm_tables"]["partial"] == {"stopped_by": "SIGTERM", "measured": ["c1"],
                                                      "not_measured": ["c2"]}
    code, line = ca.interruption(partial, "p.json")
    assert code == 143 and line.startswith("ddltrace: terminated (SIGTERM): p.json is partial")


def test_ctrl_c_mid_measurement_writes_the_finished_layers_marked_partial_which_plan_batch_reads(tmp_path,
                                                                                                 capsys):
    """A real run sent SIGINT while it measures c2 (c1 finished, c3 not begun): exit 130, one line naming the file;
    the file holds c1's tables only and says so; the tables c3 had before are dropped; plan batch solves on c1 and
    names c2 and c3 as lacking. (Before: no file at all.)"""
    c3 = _conv("c3", 64, 8, 8, 3)
    c3["algorithms"] = {"gemm": {"1": {"time_s": 1.0, "workspace_bytes": 1}}}  # a table from elsewhere: not kept
    src = _write(tmp_path, _description([_conv("c1", 1, 16, 96, 3, stride=1, padding=1),
                                         _conv("c2", 16, 64, 96, 5, stride=1, padding=2), c3], rows=96, channels=1))
    out = tmp_path / "partial.json"
    child = subprocess.Popen([sys.executable, "-m", "ddltrace", "calibrate", "--conv-algorithms", "--dnn", str(src),
                              "--batches", "1", "--repeats", "8", "--quick", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    seen = []
    while not any(" c2 " in line for line in seen) and child.poll() is None:  # one progress line per layer
        seen.append(child.stderr.readline())
    time.sleep(0.2)  # inside c2's runs (about 2 s of them)
    child.send_signal(signal.SIGINT)
    stdout, err = child.communicate(timeout=60)
    assert child.returncode == 130, (seen, err)
    assert err.splitlines()[-1] == (f"ddltrace: interrupted: {out} is partial, the tables of the 1 conv layer "
                                    "finished (c1); not measured: c2, c3")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["partial.json", "tiny.json"]  # no temporary left
    written = json.loads(out.read_text())
    assert written["algorithm_tables"]["partial"] == {"stopped_by": "SIGINT", "measured": ["c1"],
                                                      "not_measured": ["c2", "c3"]}
    assert set(written["layers"][0]["algorithms"]) == {"gemm", "fft"}
    assert [("algorithms" in layer) for layer in written["layers"]] == [True, False, False]
    assert "tables given before were dropped" in written["layers"][2]["notes"]
    assert "partial: interrupted, no tables for c2, c3" in written["source"] and "c1 " in stdout

    assert main(["plan", "batch", "--dnn", str(out), "--gpu-memory", "1GiB", "--batches", "1"]) == 0
    assert ("no algorithm table for c2, c3 (partial tables: calibrate --conv-algorithms was interrupted before "
            "them): those layers add no time and no workspace below") in capsys.readouterr().out
    assert main(["plan", "batch", "--dnn", str(out), "--gpu-memory", "1GiB", "--batches", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["tables_partial"], result["layers_without_tables"]) == (True, ["c2", "c3"])
    c1 = written["layers"][0]["algorithms"]
    fastest = min(c1, key=lambda kind: c1[kind]["1"]["time_s"])
    assert result["choices"][0]["algorithms"] == {"c1": fastest}
    assert result["choices"][0]["time_s"] == pytest.approx(c1[fastest]["1"]["time_s"])
