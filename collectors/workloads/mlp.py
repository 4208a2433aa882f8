"""The network of Hashemi et al. (paper 002, section 4.2): 2 inputs -> d_h sigmoid units -> 2 outputs, in numpy.

There are no biases, as in the paper's count n_w = d_i * d_h + d_h * d_o (40K weights for d_h = 10K). The
output layer is a softmax with cross-entropy loss (nats). All weights live in one flat float64 vector of
n_w values, the unit a parameter server stores and the payload of every pull and push message.
"""

from __future__ import annotations

import numpy as np

N_INPUTS = 2
N_OUTPUTS = 2


def n_weights(hidden: int) -> int:
    """n_w = d_i * d_h + d_h * d_o (count of float64 values)."""
    return N_INPUTS * hidden + hidden * N_OUTPUTS


def init_weights(hidden: int, seed: int) -> np.ndarray:
    """Gaussian weights scaled by 1/sqrt(fan-in), deterministic from ``seed``."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, 1.0 / np.sqrt(N_INPUTS), size=N_INPUTS * hidden)
    w2 = rng.normal(0.0, 1.0 / np.sqrt(hidden), size=hidden * N_OUTPUTS)
    return np.concatenate([w1, w2])


def _split(weights: np.ndarray, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    split = N_INPUTS * hidden
    return weights[:split].reshape(N_INPUTS, hidden), weights[split:].reshape(hidden, N_OUTPUTS)


def _sigmoid_(x: np.ndarray) -> np.ndarray:
    """sigmoid(x), computed in place (x is overwritten and returned)."""
    np.negative(x, out=x)
    with np.errstate(over="ignore"):  # exp overflows to inf for x < -709: sigmoid is then 0, as it should be
        np.exp(x, out=x)
    x += 1.0
    return np.reciprocal(x, out=x)


def loss_and_gradient(weights: np.ndarray, x: np.ndarray, y: np.ndarray, hidden: int,
                      out: np.ndarray) -> float:
    """Forward and backward pass on one batch: writes dLoss/dweights into ``out`` and returns the summed loss.

    ``x`` is (b, 2) float64, ``y`` (b,) integer labels in {0, 1}. The gradient is of the batch's mean loss;
    the returned value is the batch's summed cross-entropy (nats), so means over many batches weigh samples.
    """
    w1, w2 = _split(weights, hidden)
    h = _sigmoid_(x @ w1)
    z = h @ w2
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -np.log(np.maximum(p[rows, y], 1e-300)).sum()
    dz = p
    dz[rows, y] -= 1.0
    dz /= len(y)
    g1, g2 = _split(out, hidden)
    np.matmul(h.T, dz, out=g2)
    dh = dz @ w2.T
    dh *= h
    np.subtract(1.0, h, out=h)  # h is not needed after this: reuse it for sigmoid' = h * (1 - h)
    dh *= h
    np.matmul(x.T, dh, out=g1)
    return float(loss)


def mean_loss(weights: np.ndarray, x: np.ndarray, y: np.ndarray, hidden: int) -> float:
    """Mean cross-entropy (nats per sample) of the network on (x, y)."""
    scratch = np.empty_like(weights)
    return loss_and_gradient(weights, x, y, hidden, scratch) / len(y)
