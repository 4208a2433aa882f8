"""The DNN description format: bundled descriptions load, bad ones get one clear error naming the field."""

from __future__ import annotations

import json

import pytest

from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import bundled_dnns, load_dnn, parse_dnn


def test_bundled_descriptions_match_their_papers():
    assert {"mlp-2-10k-2", "mnist-adam", "imagenet22k-adam", "alexnet", "vgg11"} <= set(bundled_dnns())
    mlp = load_dnn("mlp-2-10k-2")
    assert mlp.parameters == 40_000 and mlp.bytes_per_value == 8  # paper 002 eq. 10: n_w = 40K doubles
    mnist = load_dnn("mnist-adam")
    assert [layer.type for layer in mnist.layers] == ["conv", "conv", "fc", "fc", "softmax"]
    assert 2.3e6 < mnist.connections < 2.7e6  # "about 2.5 million connections"
    imagenet = load_dnn("imagenet22k-adam")
    assert [layer.type for layer in imagenet.layers].count("conv") == 5 and len(imagenet.layers) == 8
    assert imagenet.connections > 2e9 and imagenet.layers[-1].neurons == 22000
    vgg = load_dnn("vgg11")
    assert abs(vgg.parameters - 132.9e6) < 0.2e6  # VGG11 has 132.9 M parameters (1001 classes)
    alexnet = load_dnn("alexnet")
    assert alexnet.halo_fraction(0) == pytest.approx(5 / 224)


def test_defaults_for_fc_and_output_bytes():
    dnn = parse_dnn({"name": "x", "bytes_per_value": 8, "input": {"neurons": 3},
                     "layers": [{"name": "h", "type": "fc", "neurons": 4, "fan_in": 3}]})
    layer = dnn.layers[0]
    assert (layer.weights, layer.biases, layer.output_bytes, layer.connections) == (12, 4, 32.0, 12)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(layers=[]), "'layers' must be a non-empty list"),
    (lambda d: d["layers"][0].update(neurons=-3), r"layers\[0\] \(h\)\.neurons must be a positive integer"),
    (lambda d: d["layers"][0].update(type="lstm"), r"layers\[0\] \(h\)\.type must be one of"),
    (lambda d: d["layers"][0].update(colour="red"), r"unknown field\(s\) colour"),
    (lambda d: d["layers"].append({"name": "h", "type": "fc", "neurons": 1, "fan_in": 4}), "duplicate layer name"),
    (lambda d: d["layers"].append({"name": "c", "type": "conv", "neurons": 1, "fan_in": 4}),
     "weights is required for a conv layer"),
    (lambda d: d.update(bytes_per_value=3), "bytes_per_value must be 1, 2, 4 or 8"),
    (lambda d: d["layers"][0].update(algorithms={"fft": {"64": {"time_s": -1, "workspace_bytes": 0}}}),
     r"algorithms\.fft\[64\]\.time_s must be a finite number >= 0"),
    (lambda d: d.update(format="other/2"), "this ddltrace reads 'ddltrace-dnn/1'"),
])
def test_validation_names_the_field(tmp_path, mutate, message):
    data = {"format": "ddltrace-dnn/1", "name": "x", "input": {"neurons": 3},
            "layers": [{"name": "h", "type": "fc", "neurons": 4, "fan_in": 3}]}
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DdltraceError, match=message) as info:
        load_dnn(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", ["neurons", "fan_in", "weights", "rows", "kernel", "stride", "padding"])
def test_a_non_finite_number_is_named_not_a_traceback(tmp_path, field, bad):
    """QA s20: NaN, Infinity and 1e400 (Python's json reads them all) in an integer field raised ValueError or
    OverflowError from int() (a traceback, exit 1 on every command that reads a description)."""
    layer = {"name": "c", "type": "conv", "neurons": 64, "fan_in": 9, "weights": 36, "rows": 4, "kernel": 3,
             "stride": 1, "padding": 0, "channels": 4}
    layer[field] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "x", "input": {"neurons": 36, "rows": 6}, "layers": [layer]}))
    kind = "non-negative" if field in ("fan_in", "weights", "padding") else "positive"
    with pytest.raises(DdltraceError, match=rf"layers\[0\] \(c\)\.{field} must be a {kind} integer, got "
                                            rf"{bad!r}") as info:
        load_dnn(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("key", ["time_s", "workspace_bytes", "time_spread_s"])
def test_an_infinite_cost_in_an_algorithm_table_is_refused(key):
    """QA s20: time_s Infinity passed the check (a traceback from scipy's milp), time_spread_s Infinity printed
    '± inf s'."""
    cost = {"time_s": 1e-3, "workspace_bytes": 10, "time_spread_s": 1e-5, key: float("inf")}
    with pytest.raises(DdltraceError, match=rf"gemm\[8\]\.{key} must be a finite number >= 0, got inf"):
        parse_dnn({"name": "x", "input": {"neurons": 3}, "layers": [
            {"name": "c", "type": "conv", "neurons": 4, "fan_in": 3, "weights": 3, "algorithms": {"gemm": {"8": cost}}}
        ]})


def test_every_problem_at_once_and_unreadable_files(tmp_path):
    with pytest.raises(DdltraceError) as info:
        parse_dnn({"name": "", "layers": [{"name": "a", "type": "fc", "neurons": 0, "fan_in": -1}]}, "d.json")
    text = str(info.value)
    assert "'name'" in text and "neurons" in text and "fan_in" in text
    (tmp_path / "broken.json").write_text("{ not json")
    with pytest.raises(DdltraceError, match="not valid JSON"):
        load_dnn(tmp_path / "broken.json")
    with pytest.raises(DdltraceError, match="no bundled DNN of that name"):
        load_dnn("resnet-9000")
