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
     r"algorithms\.fft\[64\]\.time_s must be a number >= 0"),
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
