"""The thresholds the detectors use: documented defaults, overridable from the command line or a config file.

Every threshold has a name, a default, a unit and a reason. ``ddltrace analyze --threshold KEY=VALUE`` and
``--config FILE`` (JSON, or TOML with the keys at the top level or under ``[thresholds]``) change them; an unknown
key, a value that is not a number, or one out of the threshold's range (a share above 1, a negative or infinite
value) is bad input (:class:`~ddltrace.errors.DdltraceError`).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ddltrace.errors import DdltraceError


@dataclass(frozen=True)
class Threshold:
    """One threshold: its default ``value``, its ``unit`` and ``why`` it has that default; a value given for it
    must be finite and from ``low`` to ``high`` (a share at most 1; a count of ranks at least what its test needs)."""

    value: float
    unit: str
    why: str
    low: float = 0.0
    high: float = math.inf
    #: a count (of ranks, of collectives): a whole number
    whole: bool = False


def _share(value: float, unit: str, why: str) -> Threshold:
    """A threshold that is a share of something: from 0 to 1."""
    return Threshold(value, unit, why, high=1.0)


#: Every threshold, by name. docs/ANALYSES.md repeats this table.
DEFAULTS: dict[str, Threshold] = {
    # sequential initialisation
    "seq_init.min_ranks": Threshold(4, "ranks", "a line through fewer points is significant by chance too often",
                                    low=3, whole=True),
    "seq_init.r2_min": _share(
        0.8, "1", "a staircase explains most of the rank-to-rank variation; noise in a parallel start does not"),
    "seq_init.p_max": _share(0.01, "1", "the slope must be significant at 1 % (two-sided t test on the slope)"),
    "seq_init.spread_min": Threshold(
        0.25, "fraction of the job's initialisation",
        "the staircase (slope x rank range) must be a sizeable part of the job's initialisation (from the end of "
        "MPI_Init to the first step) to matter"),
    "seq_init.spread_min_ns": Threshold(1e6, "ns", "below 1 ms the stagger is launch jitter, not serialised work"),
    "seq_init.error_share": _share(
        0.5, "fraction of the run", "initialisation above half of the run is an error (paper 002: > 90 % at 64 nodes)"),
    "seq_init.growth_min": Threshold(
        1.5, "ratio", "across runs: initialisation at the largest w over that at the smallest w, with a linear fit"),
    "seq_init.series_r2_min": _share(0.8, "1", "across runs: initialisation time linear in w"),
    # parameter-server saturation
    "ps.busy_min": _share(
        0.8, "fraction of the server's steady state",
        "at 80 % utilisation a queueing server already makes requests wait ~4 service times (M/M/1: rho / (1 - rho))"),
    "ps.client_wait_min": _share(
        0.2, "fraction of a worker's steady state",
        "the server is only a bottleneck if its clients wait on it (Late Sender with the server as sender)"),
    "ps.knee_gain_min": _share(
        0.1, "fraction", "across runs: a step to more workers that cuts the steady state by < 10 % is past the knee"),
    "ps.wait_growth_min": Threshold(
        1.5, "ratio", "across runs: wait per update at the largest w over the smallest w"),
    "ps.rise_min": Threshold(
        0.1, "fraction", "across runs: the steady state at the largest w at least 10 % above that at the knee rises "
        "again (an error); less is within the run-to-run noise of a shared machine"),
    # stragglers
    "straggler.z_min": Threshold(
        3.5, "1", "robust z (0.6745 (x - median) / MAD) above 3.5 is an outlier (Iglewicz and Hoaglin)"),
    "straggler.excess_min": Threshold(
        0.25, "fraction above the median", "a rank less than 25 % slower than the median is noise on a shared machine"),
    "straggler.mad_floor": Threshold(
        0.02, "fraction of the median", "floor on the MAD, so identical ranks do not make any difference infinite"),
    "straggler.min_ranks": Threshold(3, "ranks", "a median and a MAD need three ranks", low=3, whole=True),
    # staleness
    "staleness.violation_max": _share(
        0.05, "fraction of gradients", "Rudra: sigma <= 2n holds for nearly all updates; over 5 % above it warns"),
    # I/O and input pipeline
    "hang.blocked_min_ns": Threshold(
        1e9, "ns", "a rank a second inside one MPI call when its job was stopped was waiting for another rank, not "
        "moving data"),
    "io.share_max": _share(
        0.25, "fraction of the steady state", "a quarter of every step in I/O means the input pipeline sets the pace"),
    # communication overlap
    "overlap.min": _share(
        0.5, "1", "Rudra's overlap = compute / (compute + exposed comm); below 50 % communication dominates"),
    # cache cliff
    "cache.jump_min": Threshold(
        2.0, "ratio", "time per sample doubling between adjacent batch sizes is a cliff (paper 002 saw ~100x)"),
    # slow link between nodes
    "slow_link.ratio_max": Threshold(
        0.05, "ratio", "a pair of nodes whose peak bandwidth is under 1/20 of the fastest pair's is a slow link: on "
        "a loaded 2-core machine equal links' peaks fell to 0.13 of the fastest, a 100 Mbit/s link among "
        "Gbit/s ones is below 0.01; smaller slowdowns are found against the calibrated bandwidth (--profile)"),
    "slow_link.profile_ratio": Threshold(
        0.5, "ratio", "with a hardware profile: a pair under half the calibrated bandwidth (1 / r_net) is slow; "
        "MPI over TCP reaches most of the raw TCP goodput the calibration measures"),
    "slow_link.min_bytes": Threshold(
        65536, "bytes", "messages of 64 KiB and more: below that a transfer's time is mostly latency, not bandwidth"),
    # slow node
    "slow_node.excess_min": Threshold(
        0.25, "fraction above the other nodes' median", "as for a straggler: a node's fastest rank less than 25 % "
        "slower per step than the other nodes is noise on a shared machine"),
    "slow_node.wait_share_min": _share(
        0.5, "fraction of the node's excess compute per step", "the other nodes' ranks wait at least half the "
        "excess per step at collectives: in a synchronous step they wait about all of it"),
    # GPU jobs
    "gpu.host_wait_min": _share(
        0.2, "fraction of the device's window", "a device idle a fifth of its time with nothing queued, waiting for "
        "the host to launch work: a faster host side (or fewer, larger kernels) would give back that much"),
    "gpu.exposed_comm_min": _share(
        0.1, "fraction of the device's window", "communication kernels running with no compute kernel beside them "
        "for a tenth of the device's time; HTA's traces of well-tuned data-parallel jobs show a few per cent"),
    "gpu.launch_short_share_min": _share(
        0.5, "fraction of the host wait", "launch-bound when most of the devices' host wait is in gaps under 1 ms "
        "(the host's overhead between launches); real traces part at 5-24 % and 70-100 %"),
    "gpu.late_share_min": _share(
        0.8, "fraction of the matched collectives", "a rank that arrives last at four collectives in five delays "
        "nearly every one: chance spreads the last place over the ranks"),
    "gpu.late_min_instances": Threshold(5, "collectives", "fewer matched collectives say little about a pattern",
                                        low=1, whole=True),
    "gpu.late_lead_min_ns": Threshold(
        50e3, "ns", "the late rank's median lead over the next latest: below 50 µs it is launch jitter"),
    "host.late_wait_share_min": _share(
        0.8, "fraction of all ranks' caused wait", "the rank the others wait for takes four fifths of their wait at "
        "the collectives: in a healthy job it is spread over the ranks"),
    "host.late_wait_step_min": Threshold(
        0.25, "fraction of the step time", "the others wait for it a quarter of a step or more (as "
        "straggler.excess_min): healthy ResNet-18 DDP jobs on an H100 over gloo caused 0.1 to 23.6 %"),
    "gpu.busbw_ratio": Threshold(
        0.5, "ratio", "a collective whose bus bandwidth is under half the calibrated link's (1 / r_net) moves its "
        "data far slower than the link allows (nccl-tests reach 80-95 % of it on large messages)"),
    "gpu.busbw_min_bytes": Threshold(
        1 << 20, "bytes", "collectives of 1 MiB and more: below that their time is mostly latency (nccl-tests' "
        "bus bandwidth levels off above a few MiB)"),
    "gpu.reserved_share_max": _share(
        0.9, "fraction of the device's memory", "an allocator holding nine tenths of the device leaves less than "
        "one more layer's activations free: PyTorch's allocator then frees its cache and retries cudaMalloc, "
        "synchronising the device, and a larger batch runs out of memory"),
    # wait states
    "wait_states.share_max": _share(
        0.3, "fraction of the steady state", "a Scalasca wait state costing 30 % of the average rank's steady state"),
}


class Thresholds(Mapping[str, float]):
    """The thresholds in force: the defaults with any overrides. ``th["ps.busy_min"]`` gives a float."""

    def __init__(self, overrides: Mapping[str, float] | None = None):
        self._values = {key: float(t.value) for key, t in DEFAULTS.items()}
        self.overridden: dict[str, float] = {}
        for key, value in (overrides or {}).items():
            self._set(key, value, "threshold")

    def _set(self, key: str, value, where: str) -> None:
        if key not in DEFAULTS:
            raise DdltraceError(f"{where} {key!r}: unknown threshold (known: {', '.join(sorted(DEFAULTS))})")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise DdltraceError(f"{where} {key}={value!r}: not a number") from None
        if number != number:  # NaN
            raise DdltraceError(f"{where} {key}: NaN is not a threshold")
        t = DEFAULTS[key]
        if not (math.isfinite(number) and t.low <= number <= t.high) or t.whole and number != int(number):
            unit = "" if t.unit == "1" else f" ({t.unit})"  # (a ratio, an R², a p-value: no unit to name)
            if t.whole:
                bound = f"a whole number of {t.unit}, at least {t.low:g}"
            elif math.isfinite(t.high):
                bound = f"from {t.low:g} to {t.high:g}{unit}"
            else:
                bound = f"finite and at least {t.low:g}{unit}"
            raise DdltraceError(f"{where} {key}={value!r}: must be {bound}")
        self._values[key] = number
        self.overridden[key] = number

    def __getitem__(self, key: str) -> float:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def with_assignments(self, assignments: Iterable[str]) -> Thresholds:
        """A copy with ``KEY=VALUE`` strings applied (as given on the command line)."""
        out = Thresholds(self.overridden)
        for text in assignments:
            key, sep, value = text.partition("=")
            if not sep:
                raise DdltraceError(f"--threshold {text!r}: expected KEY=VALUE")
            out._set(key.strip(), value.strip(), "--threshold")
        return out

    def with_config(self, path: str | Path) -> Thresholds:
        """A copy with the thresholds of a JSON or TOML file applied."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DdltraceError(f"{path}: cannot read config ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise DdltraceError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
                                ) from None
        try:
            data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
            raise DdltraceError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'TOML'} "
                                f"({exc})") from None
        if not isinstance(data, dict):
            raise DdltraceError(f"{path}: expected a table of thresholds")
        data = data.get("thresholds", data)
        out = Thresholds(self.overridden)
        for key, value in _flatten(data):
            out._set(key, value, f"{path}:")
        return out


def _flatten(data: Mapping, prefix: str = "") -> Iterator[tuple[str, object]]:
    """{"ps": {"busy_min": 0.8}} and {"ps.busy_min": 0.8} both give ("ps.busy_min", 0.8)."""
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value
