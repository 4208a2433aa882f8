"""Convolution algorithm tables for Chang et al.'s mini-batch program (paper 001, section 3.1.2), measured.

``ddltrace calibrate --conv-algorithms --dnn alexnet --batches 1,2,4,8 --out alexnet-algorithms.json`` runs every
``conv`` layer of a DNN description with two real convolution algorithms, forward and backward, at each mini-batch
size, and writes the description back with each conv layer's ``algorithms`` table (``ddltrace/models/dnn.py``):
``{"gemm": {"4": {"time_s": ..., "time_spread_s": ..., "workspace_bytes": ...}}, "fft": {...}}``, which
``ddltrace plan batch --dnn FILE`` reads.

The algorithms (numpy and scipy on this machine's CPU, in the description's precision: float32 for
``bytes_per_value`` 4, float64 for 8):

- ``gemm``: im2col + matrix multiply (Chetlur et al. 2014's lowering, one BLAS GEMM per pass for the whole
  mini-batch). Forward: the padded input's k x k windows copied into the column matrix ``cols`` (C k k rows,
  N Ho Wo columns), ``Y = W cols`` (K x C k k times that). Backward: ``dW = dY cols^T``; ``dcols = W^T dY``
  scattered back onto the padded input (col2im) for dX. Workspace: ``cols``, the K x N Ho Wo matrix of Y (and of
  dY, in the same buffer), and the padded input (also dX's accumulator), when the padding is not 0.
- ``fft``: FFT convolution (Mathieu et al. 2013): every map zero-padded to F x F (F = scipy.fft.next_fast_len of
  the padded input's rows, real), transformed with scipy.fft's rfftn, the channels contracted frequency by
  frequency (a batched complex GEMM over the F (F/2 + 1) frequencies), transformed back. Forward
  ``Y^ = X^ conj(W^)``, backward ``dX^ = dY^ W^``, ``dW^ = sum_n conj(dY^) X^``. A strided layer is computed at
  stride 1 and every s-th output kept (the FFT has no strided form: cuDNN's FFT algorithms refuse stride > 1;
  here the cost shows). Workspace: the three padded real arrays (input, weights, dY upsampled to stride 1), and
  at the peak the transforms alive at once (X^, W^, Y^ and Y's F x F inverse in the forward pass; X^, W^, dY^,
  dW^ in the backward one), each counted from the arrays' nbytes as they are allocated and freed.

Backward is both gradients, of the weights and of the layer's input, except for a layer with no parameters
below it (the first conv layer on the data), whose input gradient no one needs: only dW, as frameworks do.
Biases are left out (the same add for either algorithm).

Time: one mini-batch through the layer, forward + backward (``forward_s``: the forward part), the median of
``repeats`` runs (each run long enough to time: several steps when one is short; the first, traced, step is the
warm-up) with its spread, 1.4826 x the runs' median absolute deviation (measure.repeat, which adds runs when other
processes were busy: ``busy_runs``), in wall seconds (``wall_s``, ``wall_spread_s``) and in CPU seconds
(``cpu_s``, ``cpu_spread_s``: what the step cost, whoever else ran; the calling thread's CPU time with one thread,
the process's with more); ``time_s`` and ``time_spread_s``, which
``plan batch`` reads, are the wall ones, or the CPU ones with ``clock="cpu"`` (calibrate's ``--clock cpu``, one
thread only), steadier on a machine others share.
BLAS and scipy.fft run on one thread by default (``threads``; calibrate's ``--threads N``), as calibrate's other
CPU constants are per core: on a machine others share, more threads than idle cores make a run wait for the slowest.
``workspace_traced_bytes``: what tracemalloc saw allocated above the start during the first step, the buffers
included (a check on ``workspace_bytes``; pocketfft's per-thread line buffers and the BLAS library's own packing
buffers are not Python allocations and are in neither).

Geometry: ``ddltrace/models/dnn.py`` gives a conv layer's output rows, kernel, output channels and fan_in, and
optionally its stride and padding. Input channels = fan_in / kernel^2 (checked against the layer below's channels);
the input's rows are the layer below's (``input.rows`` for the first); square maps (neurons = rows^2 x channels,
checked); stride and padding: the layer's where given, else inferred: the smallest stride, then the smallest padding
(0 to kernel - 1), with ``(in_rows + 2 padding - kernel) // stride + 1 == rows`` (AlexNet's conv1: 224 -> 55 with
kernel 11 and its stride 4 gives padding 2). The geometry used is written in the layer's notes and under
``algorithm_tables.layers``, with what was inferred (``inferred``); :func:`summary` names those layers.

Interrupted (Ctrl-C, SIGTERM): the layers finished by then keep their tables, the others have none, and
``algorithm_tables.partial`` says which (:func:`interruption`); ``plan batch`` reads such a file and names the layers
it lacks. Interrupted before the first layer was finished, :func:`calibrate` lets the interrupt through.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ddltrace.collectors.microbench.measure import blas_threads, repeat, robust_spread
from ddltrace.errors import DdltraceError
from ddltrace.models.dnn import DNN, load_dnn, window_rows

ALGORITHMS = ("gemm", "fft")
DEFAULT_BATCHES = (1, 2, 4, 8)
DEFAULT_REPEATS = 3
MIN_RUN_S = 0.02
"""A timed run lasts at least this long: steps shorter than it are repeated within the run and averaged."""
DTYPES = {4: np.float32, 8: np.float64}


@dataclass(frozen=True)
class ConvGeometry:
    """One conv layer's shapes as the benchmark runs it (square maps)."""

    name: str
    in_channels: int
    in_rows: int
    out_channels: int
    kernel: int
    stride: int
    padding: int
    out_rows: int
    data_grad: bool = True
    """Whether the backward pass computes the input's gradient (False for a conv layer with no parameters below)."""
    inferred: tuple[str, ...] = ()
    """Which of ``stride`` and ``padding`` the description does not give: found from the rows (module docstring)."""

    @property
    def padded_rows(self) -> int:
        return self.in_rows + 2 * self.padding

    def describe(self) -> str:
        return (f"input {self.in_channels} x {self.in_rows} x {self.in_rows}, {self.out_channels} filters "
                f"{self.kernel} x {self.kernel}, stride {self.stride}, padding {self.padding} -> {self.out_channels} "
                f"x {self.out_rows} x {self.out_rows}; backward: dW{' and dX' if self.data_grad else ' only'}" +
                (f"; {' and '.join(self.inferred)} inferred from the rows" if self.inferred else ""))


def stride_and_padding(in_rows: int, kernel: int, out_rows: int, stride: int | None = None,
                       padding: int | None = None) -> tuple[int, int] | None:
    """The given ``stride`` and ``padding``, and for each not given the smallest stride, then the smallest padding
    (0 to kernel - 1), that take ``in_rows`` to ``out_rows`` rows with a ``kernel`` window; None when none does."""
    strides = range(1, max(in_rows, 1) + 1) if stride is None else (stride,)
    paddings = range(kernel) if padding is None else (padding,)
    for s in strides:
        for p in paddings:
            if in_rows + 2 * p >= kernel and window_rows(in_rows, kernel, s, p) == out_rows:
                return s, p
    return None


def _unreached(layer, below_rows: int) -> str:
    """Why no stride and padding take ``below_rows`` to the rows of conv ``layer``, naming those it gives."""
    given = [f"{key} {getattr(layer, key)}" for key in ("stride", "padding") if getattr(layer, key) is not None]
    sought = {0: f"stride and padding (0 to {layer.kernel - 1})", 2: "other stride and padding",
              1: "stride" if layer.stride is None else f"padding (0 to {layer.kernel - 1})"}[len(given)]
    return (f"layer {layer.name}: no {sought} take {below_rows} rows to {layer.rows} with kernel {layer.kernel}" +
            (f" and the layer's {' and '.join(given)}" if given else ""))


def conv_geometries(dnn: DNN) -> list[ConvGeometry]:
    """Each conv layer's geometry from the description (module docstring); every problem in one DdltraceError."""
    problems: list[str] = []
    geometries: list[ConvGeometry] = []
    below_name, below_rows = "input", dnn.input_rows
    below_channels = (dnn.input_neurons // dnn.input_rows ** 2 if dnn.input_rows and
                      dnn.input_neurons % dnn.input_rows ** 2 == 0 else None)
    for index, layer in enumerate(dnn.layers):
        if layer.type == "conv":
            where = f"layer {layer.name}"
            lacking = [key for key in ("rows", "kernel", "channels") if getattr(layer, key) is None]
            k = layer.kernel
            if lacking:
                problems.append(f"{where} has no {', '.join(lacking)} (the benchmark needs the output rows, the "
                                "kernel and the output channels)")
            elif below_rows is None:
                problems.append(f"{where}: {below_name} has no rows, so the layer's input size is unknown" +
                                (" (give input.rows)" if below_name == "input" else ""))
            elif layer.neurons != layer.rows ** 2 * layer.channels:
                problems.append(f"{where}: neurons {layer.neurons} is not rows^2 x channels = {layer.rows}^2 x "
                                f"{layer.channels} (square feature maps are assumed)")
            elif layer.fan_in % (k * k):
                problems.append(f"{where}: fan_in {layer.fan_in} is not a multiple of kernel^2 = {k * k}")
            elif below_channels is not None and layer.fan_in // (k * k) != below_channels:
                problems.append(f"{where}: fan_in / kernel^2 = {layer.fan_in // (k * k)} input channels, but "
                                f"{below_name} has {below_channels} (a grouped convolution? this benchmark runs "
                                "ungrouped ones)")
            elif (found := stride_and_padding(below_rows, k, layer.rows, layer.stride, layer.padding)) is None:
                problems.append(_unreached(layer, below_rows))
            else:
                inferred = tuple(key for key in ("stride", "padding") if getattr(layer, key) is None)
                geometries.append(ConvGeometry(layer.name, layer.fan_in // (k * k), below_rows, layer.channels, k,
                                               found[0], found[1], layer.rows,
                                               data_grad=any(lower.parameters for lower in dnn.layers[:index]),
                                               inferred=inferred))
        below_name, below_rows = f"the layer below it ({layer.name})", layer.rows
        below_channels = layer.channels or (layer.neurons // layer.rows ** 2 if layer.rows and
                                            layer.neurons % layer.rows ** 2 == 0 else None)
    if not geometries and not problems:
        problems.append("it has no conv layer")
    if problems:
        raise DdltraceError(f"{dnn.name}: cannot measure convolution algorithms: " + "; ".join(problems))
    return geometries


class _Workspace:
    """The bytes of an algorithm's own arrays alive now and at most (their nbytes, as they are allocated and freed)."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0

    def take(self, array: np.ndarray) -> np.ndarray:
        self.live += array.nbytes
        self.peak = max(self.peak, self.live)
        return array

    def give(self, array: np.ndarray) -> None:
        self.live -= array.nbytes


class GemmConv:
    """im2col + GEMM for the whole mini-batch (module docstring)."""

    name = "gemm"

    def __init__(self, g: ConvGeometry, batch: int, dtype, workers: int = 1):
        self.g, self.batch = g, batch
        self.ws = _Workspace()
        columns = batch * g.out_rows ** 2
        self.xpad = self.ws.take(np.zeros((batch, g.in_channels, g.padded_rows, g.padded_rows), dtype)) \
            if g.padding else None
        self.cols = self.ws.take(np.empty((g.in_channels * g.kernel ** 2, columns), dtype))
        self.mat = self.ws.take(np.empty((g.out_channels, columns), dtype))

    @staticmethod
    def workspace_bytes(g: ConvGeometry, batch: int, itemsize: int) -> int:
        """The buffers' bytes from the shapes: padded input (padding > 0), cols, Y's matrix."""
        padded = batch * g.in_channels * g.padded_rows ** 2 if g.padding else 0
        columns = batch * g.out_rows ** 2
        return itemsize * (padded + g.in_channels * g.kernel ** 2 * columns + g.out_channels * columns)

    def _cols6(self) -> np.ndarray:
        g = self.g
        return self.cols.reshape(g.in_channels, g.kernel, g.kernel, self.batch, g.out_rows, g.out_rows)

    def forward(self, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
        g, p, h = self.g, self.g.padding, self.g.in_rows
        xp = x
        if self.xpad is not None:  # the border zeroed again: col2im accumulates dX in this buffer
            xp = self.xpad
            xp[:, :, :p], xp[:, :, p + h:], xp[:, :, p:p + h, :p], xp[:, :, p:p + h, p + h:] = 0, 0, 0, 0
            xp[:, :, p:p + h, p:p + h] = x
        sn, sc, sh, sw = xp.strides
        windows = np.lib.stride_tricks.as_strided(
            xp, shape=(self.batch, g.in_channels, g.kernel, g.kernel, g.out_rows, g.out_rows),
            strides=(sn, sc, sh, sw, sh * g.stride, sw * g.stride), writeable=False)
        np.copyto(self._cols6(), windows.transpose(1, 2, 3, 0, 4, 5))
        np.dot(w.reshape(g.out_channels, -1), self.cols, out=self.mat)
        np.copyto(y, self.mat.reshape(g.out_channels, self.batch, g.out_rows, g.out_rows).transpose(1, 0, 2, 3))

    def backward(self, dy: np.ndarray, w: np.ndarray, dx: np.ndarray | None, dw: np.ndarray) -> None:
        g, p, h, s = self.g, self.g.padding, self.g.in_rows, self.g.stride
        np.copyto(self.mat.reshape(g.out_channels, self.batch, g.out_rows, g.out_rows), dy.transpose(1, 0, 2, 3))
        np.dot(self.mat, self.cols.T, out=dw.reshape(g.out_channels, -1))
        if dx is None:
            return
        np.dot(w.reshape(g.out_channels, -1).T, self.mat, out=self.cols)  # dcols, in cols' buffer
        target = dx if self.xpad is None else self.xpad
        target.fill(0)
        dcols, span = self._cols6(), s * (g.out_rows - 1) + 1
        for i in range(g.kernel):
            for j in range(g.kernel):
                view = target[:, :, i:i + span:s, j:j + span:s]
                np.add(view, dcols[:, i, j].transpose(1, 0, 2, 3), out=view)
        if self.xpad is not None:
            np.copyto(dx, self.xpad[:, :, p:p + h, p:p + h])


class FftConv:
    """FFT convolution with scipy.fft, channels contracted per frequency (module docstring).

    Layout: maps are F x F first and (batch, channel) last, so that rfftn over axes (0, 1) gives the transforms
    frequency-major, a (frequencies, N, C) stack the batched GEMM takes without a transpose. The inverse is an
    in-place ifft over axis 0, then irfft over axis 1: pocketfft's multi-axis c2r would copy its input first."""

    name = "fft"

    def __init__(self, g: ConvGeometry, batch: int, dtype, workers: int = 1):
        from scipy import fft as sfft

        self.g, self.batch, self.workers, self._fft = g, batch, workers, sfft
        self.size = sfft.next_fast_len(g.padded_rows, real=True)
        f, n, c, k = self.size, batch, g.in_channels, g.out_channels
        self.ws = _Workspace()
        self.xq = self.ws.take(np.zeros((f, f, n, c), dtype))
        self.wq = self.ws.take(np.zeros((f, f, c, k), dtype))
        self.dyq = self.ws.take(np.zeros((f, f, n, k), dtype))
        self.xf = self.wf = None

    @staticmethod
    def fft_size(g: ConvGeometry) -> int:
        from scipy.fft import next_fast_len

        return next_fast_len(g.padded_rows, real=True)

    @classmethod
    def workspace_bytes(cls, g: ConvGeometry, batch: int, itemsize: int) -> int:
        """The peak of the buffers from the shapes (the phases of :meth:`forward` and :meth:`backward`)."""
        f = cls.fft_size(g)
        freq = f * (f // 2 + 1)
        n, c, k, z = batch, g.in_channels, g.out_channels, 2 * itemsize  # z: a complex value's bytes
        x_hat, w_hat, y_hat = z * freq * n * c, z * freq * c * k, z * freq * n * k
        real = itemsize * f * f
        phases = [x_hat + w_hat + y_hat + real * n * k,  # forward: X^, W^, Y^ and Y's inverse
                  x_hat + 2 * w_hat + y_hat,  # backward: X^, W^, dY^, dW^ (then dX^ in X^'s place)
                  (x_hat if g.data_grad else 0) + w_hat + real * c * k]  # dW's inverse beside dX^
        if g.data_grad:
            phases.append(x_hat + real * n * c)  # dX's inverse
        return real * (n * c + c * k + n * k) + max(phases)

    def _rfft(self, a: np.ndarray) -> np.ndarray:
        return self.ws.take(self._fft.rfftn(a, axes=(0, 1), workers=self.workers))

    def _irfft(self, a: np.ndarray) -> np.ndarray:
        self._fft.ifft(a, axis=0, overwrite_x=True, workers=self.workers)
        return self.ws.take(self._fft.irfft(a, n=self.size, axis=1, workers=self.workers))

    def _stack(self, a: np.ndarray, rows: int, cols: int) -> np.ndarray:
        return a.reshape(self.size * (self.size // 2 + 1), rows, cols)

    def forward(self, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
        g, p, h, k = self.g, self.g.padding, self.g.in_rows, self.g.kernel
        n, c, kk, span = self.batch, g.in_channels, g.out_channels, g.stride * (g.out_rows - 1) + 1
        np.copyto(self.xq[p:p + h, p:p + h], x.transpose(2, 3, 0, 1))
        np.copyto(self.wq[:k, :k], w.transpose(2, 3, 1, 0))
        self.xf, self.wf = self._rfft(self.xq), self._rfft(self.wq)
        np.conjugate(self.wf, out=self.wf)
        y_hat = self.ws.take(np.matmul(self._stack(self.xf, n, c), self._stack(self.wf, c, kk)))
        full = self._irfft(y_hat.reshape(self.size, self.size // 2 + 1, n, kk))
        self.ws.give(y_hat)
        del y_hat
        np.copyto(y, full[0:span:g.stride, 0:span:g.stride].transpose(2, 3, 0, 1))
        self.ws.give(full)

    def backward(self, dy: np.ndarray, w: np.ndarray, dx: np.ndarray | None, dw: np.ndarray) -> None:
        g, p, h, k, s = self.g, self.g.padding, self.g.in_rows, self.g.kernel, self.g.stride
        n, c, kk, span = self.batch, g.in_channels, g.out_channels, s * (g.out_rows - 1) + 1
        np.copyto(self.dyq[0:span:s, 0:span:s], dy.transpose(2, 3, 0, 1))
        dy_hat = self._rfft(self.dyq)
        np.conjugate(dy_hat, out=dy_hat)
        dw_hat = self.ws.take(np.matmul(self._stack(self.xf, n, c).transpose(0, 2, 1), self._stack(dy_hat, n, kk)))
        self.ws.give(self.xf)
        self.xf = None
        dx_hat = None
        if dx is not None:
            np.conjugate(dy_hat, out=dy_hat)
            np.conjugate(self.wf, out=self.wf)
            dx_hat = self.ws.take(np.matmul(self._stack(dy_hat, n, kk), self._stack(self.wf, c, kk).transpose(0, 2, 1)))
        self.ws.give(dy_hat)
        self.ws.give(self.wf)
        del dy_hat
        self.wf = None
        full = self._irfft(dw_hat.reshape(self.size, self.size // 2 + 1, c, kk))
        self.ws.give(dw_hat)
        del dw_hat
        np.copyto(dw, full[:k, :k].transpose(3, 2, 0, 1))
        self.ws.give(full)
        del full
        if dx_hat is not None:
            full = self._irfft(dx_hat.reshape(self.size, self.size // 2 + 1, n, c))
            self.ws.give(dx_hat)
            del dx_hat
            np.copyto(dx, full[p:p + h, p:p + h].transpose(2, 3, 0, 1))
            self.ws.give(full)


KINDS: dict[str, type] = {"gemm": GemmConv, "fft": FftConv}


def tensors(g: ConvGeometry, batch: int, dtype, seed: int = 0) -> dict[str, np.ndarray | None]:
    """Inputs x, w, dy (standard normal) and outputs y, dx (None without data_grad), dw of one step."""
    rng = np.random.default_rng(seed)
    shape = {"x": (batch, g.in_channels, g.in_rows, g.in_rows),
             "w": (g.out_channels, g.in_channels, g.kernel, g.kernel),
             "dy": (batch, g.out_channels, g.out_rows, g.out_rows)}
    out = {name: rng.standard_normal(dims).astype(dtype) for name, dims in shape.items()}
    out["y"] = np.empty(shape["dy"], dtype)
    out["dx"] = np.empty(shape["x"], dtype) if g.data_grad else None
    out["dw"] = np.empty(shape["w"], dtype)
    return out


def step(algo, t: dict) -> None:
    """One training step of the layer: forward, then backward."""
    algo.forward(t["x"], t["w"], t["y"])
    algo.backward(t["dy"], t["w"], t["dx"], t["dw"])


def traced_first_step(kind: str, g: ConvGeometry, batch: int, dtype, t: dict, workers: int):
    """The algorithm built and run once under tracemalloc: (the algorithm, the traced peak above the start)."""
    import scipy.fft  # noqa: F401  (imported before the tracing: its modules are not the algorithm's workspace)

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        algo = KINDS[kind](g, batch, dtype, workers)
        step(algo, t)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()
    return algo, peak


def measure_one(kind: str, g: ConvGeometry, batch: int, dtype, repeats: int, workers: int, clock: str = "wall",
                extra: int | None = None) -> dict:
    """One table entry: the step's median wall and CPU times and their spreads (``time_s`` the one of ``clock``),
    its forward part, the workspace (module docstring). ``extra``: runs added for busy ones (measure.repeat's)."""
    t = tensors(g, batch, dtype)
    t0 = time.perf_counter()
    algo, traced = traced_first_step(kind, g, batch, dtype, t, workers)  # (also the warm-up: pages touched)
    took = time.perf_counter() - t0
    if took < 5 * MIN_RUN_S:  # the traced first step is slower than the others: one more sizes the runs
        t0 = time.perf_counter()
        step(algo, t)
        took = time.perf_counter() - t0
    steps = max(1, math.ceil(MIN_RUN_S / max(took, 1e-9)))
    forward_parts: list[float] = []
    cpu_parts: list[float] = []
    # CPU time: the calling thread's with one thread (BLAS's idle worker thread is charged to the process in whole
    # clock ticks: 3 ms steps read 7 ms of process time), the process's with more
    cpu_clock = time.thread_time if workers == 1 else time.process_time

    def run() -> float:
        fwd = bwd = 0.0
        c0 = cpu_clock()
        for _ in range(steps):
            a = time.perf_counter()
            algo.forward(t["x"], t["w"], t["y"])
            b = time.perf_counter()
            algo.backward(t["dy"], t["w"], t["dx"], t["dw"])
            fwd, bwd = fwd + b - a, bwd + time.perf_counter() - b
        cpu_parts.append((cpu_clock() - c0) / steps)
        forward_parts.append(fwd / steps)
        return (fwd + bwd) / steps

    m = repeat(run, repeats=repeats, extra=extra)
    cpu, cpu_spread = float(np.median(cpu_parts)), robust_spread(cpu_parts)
    return {"time_s": cpu if clock == "cpu" else m.value, "time_spread_s": cpu_spread if clock == "cpu" else m.spread,
            "wall_s": m.value, "wall_spread_s": m.spread, "cpu_s": cpu, "cpu_spread_s": cpu_spread,
            "forward_s": float(np.median(forward_parts)), "workspace_bytes": algo.ws.peak,
            "workspace_traced_bytes": traced, "runs": len(m.values), "steps_per_run": steps, "busy_runs": m.busy_runs}


def measured_layers(geometries: list[ConvGeometry], batches: list[int], dtype, repeats: int, threads: int = 1,
                    progress: Callable[[str], None] | None = None, clock: str = "wall",
                    extra: int | None = None) -> Iterator[tuple[str, dict[str, dict[str, dict]]]]:
    """(layer, {algorithm: {batch: entry}}) for each geometry once every algorithm and batch size of it is measured
    (scipy.fft on ``threads`` workers; the caller sets BLAS's threads)."""
    total, done = len(geometries) * len(ALGORITHMS) * len(batches), 0
    for g in geometries:
        table: dict[str, dict[str, dict]] = {kind: {} for kind in ALGORITHMS}
        for batch in batches:
            for kind in ALGORITHMS:
                if progress:
                    progress(f"{g.name} {kind} batch {batch} ({done + 1}/{total})")
                table[kind][str(batch)] = measure_one(kind, g, batch, dtype, repeats, threads, clock, extra)
                done += 1
        yield g.name, table


def measure_tables(geometries: list[ConvGeometry], batches: list[int], dtype, repeats: int, threads: int = 1,
                   progress: Callable[[str], None] | None = None, clock: str = "wall",
                   extra: int | None = None) -> tuple[dict[str, dict[str, dict[str, dict]]], KeyboardInterrupt | None]:
    """({layer: {algorithm: {batch: entry}}}, None) for every geometry (:func:`measured_layers`); interrupted
    (Ctrl-C, SIGTERM) after at least one layer, (the finished layers' tables, the interrupt)."""
    tables: dict[str, dict[str, dict[str, dict]]] = {}
    try:
        for name, table in measured_layers(geometries, batches, dtype, repeats, threads, progress, clock, extra):
            tables[name] = table
    except KeyboardInterrupt as stop:
        if not tables:
            raise
        return tables, stop
    return tables, None


def dnn_path(name: str) -> Path:
    """The file of a DNN description given as a path or a bundled name (as load_dnn resolves it)."""
    from ddltrace.models import dnn as dnn_module

    path = Path(name)
    if not path.exists():
        path = Path(dnn_module.__file__).with_name("dnns") / f"{name}.json"
    return path


def calibrate(dnn_ref: str, batches: list[int], repeats: int = DEFAULT_REPEATS, threads: int = 1,
              progress: Callable[[str], None] | None = None, clock: str = "wall", extra: int | None = None) -> dict:
    """Measure the tables of every conv layer of ``dnn_ref`` (a path or a bundled name); the description with
    them (module docstring), ready to write: partial where interrupted after a layer was finished. ``clock``:
    ``time_s`` from the wall clock, or the calling thread's CPU time (one thread only); ``extra``: runs added for
    busy ones (measure.repeat's; 0 for none)."""
    dnn = load_dnn(dnn_ref)
    dtype = DTYPES.get(dnn.bytes_per_value)
    if dtype is None:
        raise DdltraceError(f"{dnn.name}: bytes_per_value {dnn.bytes_per_value}: the CPU algorithms run in float32 "
                            "(4) or float64 (8) only")
    if not batches or any(b < 1 for b in batches):
        raise DdltraceError(f"batch sizes must be >= 1, got {batches}")
    if clock not in ("wall", "cpu"):
        raise DdltraceError(f"clock {clock!r}: wall or cpu")
    if clock == "cpu" and threads != 1:
        raise DdltraceError("--clock cpu needs one thread (--threads 1): the CPU time of one thread is the step's time")
    geometries = conv_geometries(dnn)
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.perf_counter()
    with blas_threads(threads) as blas_set:
        if not blas_set and clock == "cpu":
            raise DdltraceError("--clock cpu needs one thread, and numpy's BLAS library's threads cannot be set here "
                                "(not OpenBLAS, MKL or BLIS): use the wall clock")
        tables, stop = measure_tables(geometries, batches, dtype, repeats, threads, progress, clock, extra)
    run = {"created_utc": started.isoformat(timespec="seconds"), "seconds": round(time.perf_counter() - t0, 3),
           "threads": threads, "blas_threads_set": blas_set, "dtype": np.dtype(dtype).name, "batches": batches,
           "repeats": repeats, "clock": clock}
    raw = json.loads(dnn_path(dnn_ref).read_text())
    _fill_layers(raw, geometries, tables)
    raw["algorithm_tables"] = _tables_meta(run, geometries)
    if stop is not None:
        raw["algorithm_tables"]["partial"] = _partial(geometries, tables, stop)
    raw["source"] = _source(raw.get("source", ""), raw["algorithm_tables"])
    return raw


def _fill_layers(raw: dict, geometries: list[ConvGeometry], tables: dict) -> None:
    """Each measured conv layer of the description ``raw`` gets its table and its geometry in its notes; a conv layer
    not measured (an interrupted run) loses the table it had, and its notes say so."""
    by_name = {g.name: g for g in geometries}
    for layer in raw["layers"]:
        g = by_name.get(layer.get("name"))
        if g is None:
            continue
        replaced = " (tables given before were replaced)" if "algorithms" in layer else ""
        if g.name in tables:
            layer["algorithms"] = tables[g.name]
            note = f"algorithm tables: {g.describe()}{replaced}"
        else:
            layer.pop("algorithms", None)
            note = ("no algorithm tables: the measurement was interrupted before this layer was finished" +
                    replaced.replace("replaced", "dropped"))
        layer["notes"] = f"{layer['notes']}; {note}" if layer.get("notes") else note


def _partial(geometries: list[ConvGeometry], tables: dict, stop: KeyboardInterrupt) -> dict:
    """``algorithm_tables.partial``: the interrupt, the conv layers measured and those not."""
    from ddltrace.interrupts import Terminated

    return {"stopped_by": "SIGTERM" if isinstance(stop, Terminated) else "SIGINT",
            "measured": [g.name for g in geometries if g.name in tables],
            "not_measured": [g.name for g in geometries if g.name not in tables]}


def _source(given: str, meta: dict) -> str:
    """The description's ``source`` extended with the tables' machine, date, libraries and method."""
    machine, threads = meta["machine"], meta["threads"]
    partial = meta.get("partial")
    return (f"{given}; algorithm tables measured {meta['created_utc']} on {machine['hostname']} "
            f"({machine['cpu_model']}, {threads} thread{'s' if threads > 1 else ''}, numpy {meta['numpy']}, "
            f"scipy {meta['scipy']}) "
            "by 'ddltrace calibrate --conv-algorithms': CPU convolutions, GEMM (im2col + BLAS) and FFT "
            f"(scipy.fft), forward and backward, {meta['dtype']}; time_s the median {meta['clock']} time of "
            f"{meta['repeats']} runs, time_spread_s 1.4826 x their MAD, workspace_bytes the algorithm's own buffers "
            "at their peak (see algorithm_tables)" +
            (f"; partial: interrupted, no tables for {', '.join(partial['not_measured'])}" if partial else "")
            ).lstrip("; ")


def _tables_meta(run: dict, geometries: list[ConvGeometry]) -> dict:
    """``algorithm_tables``: the run's options (``run``), the machine, the libraries, each entry field's meaning and
    each conv layer's geometry."""
    import scipy

    from ddltrace.collectors.microbench.machine import describe

    clock = run["clock"]
    return {
        **run, "machine": describe(), "numpy": np.__version__, "scipy": scipy.__version__,
        "python": platform.python_version(), "device": "cpu",
        "algorithms": {"gemm": "im2col + one BLAS GEMM per pass for the mini-batch (numpy.dot)",
                       "fft": "scipy.fft rfftn over F x F, a batched complex GEMM per frequency (numpy.matmul), "
                              "inverse; strided layers computed at stride 1 and subsampled"},
        "entry": {"time_s": f"median seconds of one mini-batch through the layer, forward + backward: "
                            f"{'cpu_s' if clock == 'cpu' else 'wall_s'} (clock)",
                  "time_spread_s": "its spread: 1.4826 x the median absolute deviation of the runs (seconds)",
                  "wall_s": "median wall seconds per step", "wall_spread_s": "1.4826 x the MAD of wall_s",
                  "cpu_s": "median CPU seconds per step, of the calling thread with one thread (of the process, "
                           "all its threads, with more): on a machine others share, closer than wall_s to what a "
                           "dedicated core's step would take",
                  "cpu_spread_s": "1.4826 x the MAD of cpu_s over the runs",
                  "forward_s": "median wall seconds of the forward part",
                  "workspace_bytes": "peak bytes of the algorithm's own buffers (arrays' nbytes), inputs, outputs "
                                     "and weights excluded",
                  "workspace_traced_bytes": "tracemalloc's peak above the start over the first step (a check)",
                  "runs": "timed runs", "steps_per_run": "steps averaged in one run",
                  "busy_runs": "runs during which other processes used over a quarter of a core"},
        "layers": {g.name: asdict(g) for g in geometries},
        "method": "ddltrace/collectors/microbench/conv_algorithms.py; docs/CALIBRATION.md",
    }


def interruption(description: dict, path: str | os.PathLike) -> tuple[int, str] | None:
    """For a partial description written to ``path``: (the exit status, 130 after Ctrl-C and 143 after SIGTERM,
    one line saying so); None for a complete one."""
    partial = description["algorithm_tables"].get("partial")
    if not partial:
        return None
    terminated = partial["stopped_by"] == "SIGTERM"
    measured, missing = partial["measured"], partial["not_measured"]
    return (143 if terminated else 130,
            f"ddltrace: {'terminated (SIGTERM)' if terminated else 'interrupted'}: {path} is partial, the tables of "
            f"the {len(measured)} conv layer{'s' if len(measured) > 1 else ''} finished ({', '.join(measured)}); "
            f"not measured: {', '.join(missing)}")


def save(description: dict, path: str | os.PathLike) -> Path:
    """Write the description as JSON (atomically); where it cannot be written, DdltraceError naming the path and the
    file in the temporary folder that keeps the measured tables (:func:`ddltrace.outputs.save_measured`)."""
    from ddltrace.outputs import save_measured

    return save_measured(path, json.dumps(description, indent=1, allow_nan=False) + "\n", "the DNN description")


def summary(description: dict) -> list[str]:
    """Lines of a table: per layer and batch, each algorithm's time with its spread and its workspace."""
    from ddltrace.units import format_bytes

    lines = [f"{'layer':<8} {'batch':>5}  " + "  ".join(f"{kind + ' time':>22}  {kind + ' workspace':>14}"
                                                       for kind in ALGORITHMS) + "  faster"]
    for layer in description["layers"]:
        table = layer.get("algorithms")
        if not table or layer.get("name") not in description["algorithm_tables"]["layers"]:
            continue
        for batch in table[ALGORITHMS[0]]:
            cells, times = [], {}
            for kind in ALGORITHMS:
                e = table[kind][batch]
                times[kind] = e["time_s"]
                cells.append(f"{1e3 * e['time_s']:>11.3f} ± {1e3 * e['time_spread_s']:.3f} ms".rjust(22) +
                             f"  {format_bytes(e['workspace_bytes']):>14}")
            lines.append(f"{layer['name']:<8} {batch:>5}  " + "  ".join(cells) + f"  {min(times, key=times.get)}")
    inferred = inferred_words(description["algorithm_tables"]["layers"])
    return lines + ([f"inferred from the rows, not in the description: {inferred} (give a conv layer's stride and "
                     "padding to fix them)"] if inferred else [])


def inferred_words(geometries: dict[str, dict]) -> str:
    """'conv1 padding 2; conv2 stride 2, padding 0': the stride and padding inferred per layer, of the geometries
    written under ``algorithm_tables.layers`` ('' where none was)."""
    return "; ".join(f"{name} " + ", ".join(f"{key} {g[key]}" for key in g["inferred"])
                     for name, g in geometries.items() if g.get("inferred"))
