"""The DNN description format: a small JSON file the models read (layers, neurons, fan-in, weights, outputs).

Example (the 2-10K-2 MLP of Hashemi et al.)::

    {
      "format": "ddltrace-dnn/1",
      "name": "mlp-2-10k-2",
      "source": "Hashemi et al. 2016, section 4.2.2",
      "bytes_per_value": 8,
      "input": {"neurons": 2},
      "layers": [
        {"name": "hidden", "type": "fc", "neurons": 10000, "fan_in": 2},
        {"name": "output", "type": "fc", "neurons": 2, "fan_in": 10000}
      ]
    }

Per layer (counts are per sample):

- ``name`` (text, unique), ``type``: one of :data:`LAYER_TYPES`. ``conv`` and ``pool`` are locally connected
  (a stripe of a layer needs only the matching stripe of the layer below, plus a halo); the rest are fully
  connected to the layer below.
- ``neurons``: outputs of the layer (for a convolution: height x width x channels), > 0.
- ``fan_in``: inputs of one neuron (kernel x kernel x input channels; for fc the layer below's neurons), >= 0.
  ``neurons * fan_in`` is the layer's connections: its multiply-adds per sample (Yan's W(l)).
- ``weights``: trainable weights (parameters without biases); default ``neurons * fan_in`` (fc), required for
  conv layers, whose weights are shared. ``biases``: default the output channels for conv (when ``channels``
  is given), else ``neurons`` for fc and 0 for pool.
- ``output_bytes``: bytes of the layer's output for one sample; default ``neurons * bytes_per_value``.
- ``rows`` (output rows) and ``kernel`` (kernel height): optional, for locally connected layers; they set the
  halo a stripe needs from the layer below (``kernel // 2`` rows). ``channels``: optional output channels.
- ``stride`` (rows the window moves, >= 1) and ``padding`` (zero rows added on each side, >= 0): optional, for
  conv and pool layers, with ``kernel``. Where both are given with the layer's and the layer below's ``rows``
  (``input.rows`` below the first), they must take the rows below to the layer's: ``(below + 2 padding - kernel)
  // stride + 1 == rows`` (:func:`window_rows`; a pool may round up instead, as Caffe's do). ``ddltrace calibrate
  --conv-algorithms`` runs a conv layer with them and infers what is not given from the rows.
- ``algorithms``: optional per-layer algorithm table for Chang's mini-batch program:
  ``{"gemm": {"32": {"time_s": 0.012, "workspace_bytes": 1.0e6}, "64": {...}}, "fft": {...}}``
  (time of one mini-batch of that size through the layer, forward and backward, and the workspace it needs).
  Optional per entry: ``time_spread_s`` (the time's spread, seconds, >= 0: ``ddltrace calibrate --conv-algorithms``
  writes 1.4826 x the runs' median absolute deviation); other fields of an entry (that command's ``forward_s``,
  ``runs``, ...) are kept in the file and not read.

Top level: ``format`` (``ddltrace-dnn/1``), ``name``, ``source`` (where the numbers come from), ``notes``,
``bytes_per_value`` (4 for float, 8 for double), ``input``: ``{"neurons": n, "rows": r}`` (one sample's values).
``algorithm_tables``: what ``ddltrace calibrate --conv-algorithms`` wrote (not read), except ``partial``, present
where that run was interrupted: the tables of the conv layers it lists in ``not_measured`` are missing
(:attr:`DNN.partial_tables`).

Load with :func:`load_dnn` (a path, or the name of a bundled description: :func:`bundled_dnns`); every
problem is reported at once in one :class:`~ddltrace.errors.DdltraceError` naming the file and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddltrace.errors import DdltraceError

FORMAT = "ddltrace-dnn/1"
LAYER_TYPES = ("conv", "pool", "fc", "softmax", "norm", "act")
LOCAL_TYPES = ("conv", "pool")
_BUNDLED = Path(__file__).with_name("dnns")


@dataclass(frozen=True)
class AlgorithmCost:
    """One algorithm of one layer at one mini-batch size: time in seconds, workspace in bytes, and the time's spread
    in seconds where the table gives one (a measured table does)."""

    time_s: float
    workspace_bytes: float
    time_spread_s: float | None = None


@dataclass(frozen=True)
class Layer:
    """One layer; counts per sample (see the module docstring for each field)."""

    name: str
    type: str
    neurons: int
    fan_in: int
    weights: int
    biases: int
    output_bytes: float
    rows: int | None = None
    kernel: int | None = None
    channels: int | None = None
    algorithms: dict[str, dict[int, AlgorithmCost]] = field(default_factory=dict)
    stride: int | None = None
    padding: int | None = None

    @property
    def connections(self) -> int:
        """Multiply-adds of one forward pass of one sample (Yan's W(l))."""
        return self.neurons * self.fan_in

    @property
    def parameters(self) -> int:
        """Weights plus biases."""
        return self.weights + self.biases

    @property
    def local(self) -> bool:
        """Locally connected (conv, pool): a stripe needs only the matching stripe below plus a halo."""
        return self.type in LOCAL_TYPES


@dataclass(frozen=True)
class DNN:
    """A DNN description: input, ordered layers, bytes per value and where the numbers come from."""

    name: str
    layers: tuple[Layer, ...]
    bytes_per_value: int = 4
    input_neurons: int = 0
    input_rows: int | None = None
    source: str = ""
    notes: str = ""
    partial_tables: bool = False
    """The algorithm tables are those of an interrupted calibrate run (``algorithm_tables.partial``): some conv
    layers' are missing."""

    @property
    def parameters(self) -> int:
        """All weights and biases."""
        return sum(layer.parameters for layer in self.layers)

    @property
    def model_bytes(self) -> float:
        """Bytes of all parameters."""
        return float(self.parameters * self.bytes_per_value)

    @property
    def connections(self) -> int:
        """Multiply-adds of one forward pass of one sample."""
        return sum(layer.connections for layer in self.layers)

    def halo_fraction(self, index: int) -> float:
        """Fraction of the layer below that a stripe of local layer ``index`` needs beyond its own stripe, per side."""
        layer = self.layers[index]
        below_rows = self.layers[index - 1].rows if index > 0 else self.input_rows
        if not layer.local or not layer.kernel or not below_rows:
            return 0.0
        return min(1.0, (layer.kernel // 2) / below_rows)


def _finite(value: Any) -> bool:
    """Whether ``value`` is a JSON number that is finite (Python's json reads NaN, Infinity and 1e400 as floats)."""
    return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and math.isfinite(value))


def _positive_int(value: Any, where: str, problems: list[str], *, zero: bool = False) -> int | None:
    if not _finite(value) or value != int(value) or (value < 0 if zero else value <= 0):
        problems.append(f"{where} must be a {'non-negative' if zero else 'positive'} integer, got {value!r}")
        return None
    return int(value)


def window_rows(below_rows: int, kernel: int, stride: int, padding: int, *, ceil: bool = False) -> int:
    """Rows out of a ``kernel``-row window moved by ``stride`` rows over ``below_rows`` rows with ``padding`` zero rows
    on each side: ``(below_rows + 2 padding - kernel) // stride + 1``, rounded up with ``ceil`` (Caffe's pooling)."""
    span = below_rows + 2 * padding - kernel
    return (-(-span // stride) if ceil else span // stride) + 1


def _parse_window(raw: Mapping, where: str, ltype: Any, sizes: tuple, problems: list[str]) -> tuple:
    """(stride, padding) of a layer, each None where not given; a problem for a bad value, a layer that is not
    conv or pool, no kernel, or, where ``sizes`` (below rows, kernel, rows) are all known and both are given, rows
    they do not reach (:func:`window_rows`)."""
    given = [key for key in ("stride", "padding") if raw.get(key) is not None]
    before = len(problems)
    stride = _positive_int(raw["stride"], f"{where}.stride", problems) if "stride" in given else None
    padding = _positive_int(raw["padding"], f"{where}.padding", problems, zero=True) if "padding" in given else None
    if not given or len(problems) > before:
        return stride, padding
    if ltype not in LOCAL_TYPES:
        problems.append(f"{where}.{given[0]}: only conv and pool layers have a stride and padding, not {ltype!r}")
    elif sizes[1] is None:
        problems.append(f"{where}.{given[0]} needs the layer's kernel")
    elif stride is not None and padding is not None and None not in sizes:
        below, kernel, rows = sizes
        reached = {window_rows(below, kernel, stride, padding, ceil=ceil) for ceil in (False, ltype == "pool")}
        if rows not in reached:
            problems.append(f"{where}.stride and .padding: stride {stride} and padding {padding} take the {below} rows "
                            f"below to {min(reached)} with kernel {kernel}, not to the layer's rows {rows}")
    return stride, padding


def _parse_algorithms(raw: Any, where: str, problems: list[str]) -> dict[str, dict[int, AlgorithmCost]]:
    if not isinstance(raw, Mapping):
        problems.append(f"{where} must be an object {{algorithm: {{batch: {{time_s, workspace_bytes}}}}}}")
        return {}
    table: dict[str, dict[int, AlgorithmCost]] = {}
    for algo, per_batch in raw.items():
        if not isinstance(per_batch, Mapping) or not per_batch:
            problems.append(f"{where}.{algo} must be a non-empty object keyed by mini-batch size")
            continue
        table[algo] = {}
        for batch, cost in per_batch.items():
            spot = f"{where}.{algo}[{batch}]"
            try:
                b = int(batch)
            except ValueError:
                problems.append(f"{spot}: the key must be a mini-batch size (an integer)")
                continue
            if not isinstance(cost, Mapping):
                problems.append(f"{spot} must be an object with time_s and workspace_bytes")
                continue
            values = []
            for key in ("time_s", "workspace_bytes"):
                v = cost.get(key)
                if not _finite(v) or v < 0:
                    problems.append(f"{spot}.{key} must be a finite number >= 0, got {v!r}")
                values.append(v)
            spread = cost.get("time_spread_s")
            if spread is not None and (not _finite(spread) or spread < 0):
                problems.append(f"{spot}.time_spread_s must be a finite number >= 0, got {spread!r}")
            elif all(_finite(v) for v in values):
                table[algo][b] = AlgorithmCost(float(values[0]), float(values[1]),
                                               None if spread is None else float(spread))
    return table


def parse_dnn(data: Any, source: str = "DNN description") -> DNN:
    """Validate a DNN description (already parsed JSON); every problem is listed in one DdltraceError."""
    if not isinstance(data, Mapping):
        raise DdltraceError(f"{source}: a DNN description must be a JSON object")
    problems: list[str] = []
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        problems.append(f"format is {fmt!r}, this ddltrace reads {FORMAT!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        problems.append("'name' must be a non-empty string")
    bpv = data.get("bytes_per_value", 4)
    if bpv not in (1, 2, 4, 8):
        problems.append(f"bytes_per_value must be 1, 2, 4 or 8, got {bpv!r}")
        bpv = 4
    raw_input = data.get("input", {})
    input_neurons, input_rows = 0, None
    if not isinstance(raw_input, Mapping):
        problems.append("'input' must be an object {\"neurons\": n}")
    else:
        input_neurons = _positive_int(raw_input.get("neurons"), "input.neurons", problems) or 0
        if raw_input.get("rows") is not None:
            input_rows = _positive_int(raw_input.get("rows"), "input.rows", problems)
    raw_layers = data.get("layers")
    layers: list[Layer] = []
    if not isinstance(raw_layers, list) or not raw_layers:
        problems.append("'layers' must be a non-empty list")
        raw_layers = []
    seen: set[str] = set()
    below_rows = input_rows
    for i, raw in enumerate(raw_layers):
        where = f"layers[{i}]"
        if not isinstance(raw, Mapping):
            problems.append(f"{where} must be an object")
            continue
        lname = raw.get("name", f"layer{i}")
        where = f"layers[{i}] ({lname})"
        if lname in seen:
            problems.append(f"{where}: duplicate layer name")
        seen.add(lname)
        unknown = set(raw) - {"name", "type", "neurons", "fan_in", "weights", "biases", "output_bytes", "rows",
                              "kernel", "channels", "stride", "padding", "algorithms", "notes"}
        if unknown:
            problems.append(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        ltype = raw.get("type")
        if ltype not in LAYER_TYPES:
            problems.append(f"{where}.type must be one of {', '.join(LAYER_TYPES)}, got {ltype!r}")
        before = len(problems)
        neurons = _positive_int(raw.get("neurons"), f"{where}.neurons", problems)
        fan_in = _positive_int(raw.get("fan_in"), f"{where}.fan_in", problems, zero=True)
        rows, kernel, channels = (_positive_int(raw[key], f"{where}.{key}", problems)
                                  if raw.get(key) is not None else None for key in ("rows", "kernel", "channels"))
        stride, padding = _parse_window(raw, where, ltype, (below_rows, kernel, rows), problems)
        below_rows = rows
        if "weights" in raw:
            weights = _positive_int(raw.get("weights"), f"{where}.weights", problems, zero=True)
        elif ltype == "conv":
            problems.append(f"{where}.weights is required for a conv layer (its weights are shared)")
            weights = None
        elif ltype in ("fc", "softmax"):
            weights = None if neurons is None or fan_in is None else neurons * fan_in
        else:
            weights = 0
        if "biases" in raw:
            biases = _positive_int(raw.get("biases"), f"{where}.biases", problems, zero=True)
        elif ltype == "conv":
            biases = channels or 0
        elif ltype in ("fc", "softmax"):
            biases = neurons
        else:
            biases = 0
        output_bytes = raw.get("output_bytes")
        if output_bytes is None:
            output_bytes = (neurons or 0) * bpv
        elif not _finite(output_bytes) or output_bytes < 0:
            problems.append(f"{where}.output_bytes must be a finite number >= 0, got {output_bytes!r}")
        algorithms = _parse_algorithms(raw["algorithms"], f"{where}.algorithms", problems) \
            if "algorithms" in raw else {}
        if len(problems) == before and ltype in LAYER_TYPES:
            layers.append(Layer(str(lname), ltype, neurons, fan_in, weights, biases or 0, float(output_bytes),
                                rows, kernel, channels, algorithms, stride=stride, padding=padding))
    if problems:
        shown = problems[:8] + ([f"... and {len(problems) - 8} more"] if len(problems) > 8 else [])
        raise DdltraceError(f"{source}: invalid DNN description: " + "; ".join(shown))
    tables = data.get("algorithm_tables")
    return DNN(name=name, layers=tuple(layers), bytes_per_value=int(bpv), input_neurons=input_neurons,
               input_rows=input_rows, source=str(data.get("source", "")), notes=str(data.get("notes", "")),
               partial_tables=isinstance(tables, Mapping) and bool(tables.get("partial")))


def bundled_dnns() -> list[str]:
    """Names of the DNN descriptions that ship with ddltrace."""
    return sorted(p.stem for p in _BUNDLED.glob("*.json"))


def load_dnn(path_or_name: str | Path) -> DNN:
    """Read a DNN description from a JSON file, or by the name of a bundled one (see :func:`bundled_dnns`)."""
    path = Path(path_or_name)
    if not path.exists() and (_BUNDLED / f"{path_or_name}.json").exists():
        path = _BUNDLED / f"{path_or_name}.json"
    if not path.exists():
        raise DdltraceError(f"{path_or_name}: no such DNN description file, and no bundled DNN of that name "
                            f"(bundled: {', '.join(bundled_dnns())})")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise DdltraceError(f"{path}: cannot read DNN description ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DdltraceError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_dnn(data, str(path))
