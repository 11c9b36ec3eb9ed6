"""Optimisers a party runs on its own weights (the same as running them centrally, since
every update is elementwise): a small abstract base and a name registry.

``make_optimizer("adam", learning_rate=0.05)`` builds one; an unknown name raises a
``ValueError`` listing the known ones.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

__all__ = [
    "ADAM_RATE",
    "OPTIMIZERS",
    "Adam",
    "Momentum",
    "Optimizer",
    "Sgd",
    "block_step",
    "curvature_bound",
    "make_optimizer",
]

ADAM_RATE = 0.05
"""Adam's default step (it normalises each coordinate's step, so no curvature is needed)."""


class Optimizer(abc.ABC):
    """Updates weights of any shape from gradients of the same shape."""

    def __init__(self, learning_rate: float) -> None:
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
        self.learning_rate = float(learning_rate)

    @abc.abstractmethod
    def step(
        self, weights: np.ndarray[Any, Any], gradient: np.ndarray[Any, Any], epoch: int
    ) -> np.ndarray[Any, Any]:
        """The updated weights (a new array) after one step in ``epoch`` (from 0)."""

    def linear_step(self, epoch: int) -> tuple[float, float] | None:
        """``(beta, step)`` when the update is linear in the gradient --
        ``velocity = beta * velocity + gradient; weights -= step * velocity`` -- which is what
        secret-shared training can run on shares; None otherwise (Adam)."""
        return None


class Sgd(Optimizer):
    """Gradient descent with the step decayed as ``learning_rate / (1 + epoch)``."""

    def step(
        self, weights: np.ndarray[Any, Any], gradient: np.ndarray[Any, Any], epoch: int
    ) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = weights - self.learning_rate / (1.0 + epoch) * gradient
        return out

    def linear_step(self, epoch: int) -> tuple[float, float]:
        return 0.0, self.learning_rate / (1.0 + epoch)


class Momentum(Optimizer):
    """Heavy-ball momentum (Polyak 1964): ``velocity = beta * velocity + gradient``, then
    ``weights -= learning_rate / sqrt(1 + epoch) * velocity`` with ``beta = 0.9``. Linear in
    the gradient, so the secret-shared protocol runs it on shares; on correlated features it
    converges about as Adam does where plain SGD lags (vehicle, breast cancer)."""

    beta = 0.9

    def __init__(self, learning_rate: float) -> None:
        super().__init__(learning_rate)
        self.velocity: np.ndarray[Any, Any] | None = None

    def step(
        self, weights: np.ndarray[Any, Any], gradient: np.ndarray[Any, Any], epoch: int
    ) -> np.ndarray[Any, Any]:
        beta, step = self.linear_step(epoch)
        v = gradient if self.velocity is None else beta * self.velocity + gradient
        self.velocity = v
        out: np.ndarray[Any, Any] = weights - step * v
        return out

    def linear_step(self, epoch: int) -> tuple[float, float]:
        return self.beta, self.learning_rate / np.sqrt(1.0 + epoch)


class Adam(Optimizer):
    """Adam (Kingma and Ba 2015) with the usual defaults ``beta1=0.9``, ``beta2=0.999``."""

    def __init__(
        self, learning_rate: float, *, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8
    ) -> None:
        super().__init__(learning_rate)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.m: np.ndarray[Any, Any] | None = None
        self.v: np.ndarray[Any, Any] | None = None
        self.t = 0

    def step(
        self, weights: np.ndarray[Any, Any], gradient: np.ndarray[Any, Any], epoch: int
    ) -> np.ndarray[Any, Any]:
        if self.m is None or self.v is None:
            self.m, self.v = np.zeros_like(gradient), np.zeros_like(gradient)
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        out: np.ndarray[Any, Any] = weights - self.learning_rate * m_hat / (
            np.sqrt(v_hat) + self.eps
        )
        return out


OPTIMIZERS: dict[str, type[Optimizer]] = {"adam": Adam, "momentum": Momentum, "sgd": Sgd}
"""The registry: name -> class."""


def make_optimizer(name: str, *, learning_rate: float) -> Optimizer:
    """A fresh optimiser by name (``ValueError`` listing the known names otherwise)."""
    cls = OPTIMIZERS.get(name)
    if cls is None:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {name!r}")
    return cls(learning_rate)


def curvature_bound(x: np.ndarray[Any, Any], batch_size: int, c: float = 1.0) -> float:
    """A bound on the curvature a party's own columns ``x`` (rows, columns) add to a quadratic
    loss ``|X w - t|^2 / (2 c rows)`` on a mini-batch: ``(lambda_max(x^T x / n) +
    max_i |x_i|^2 / batch_size) / c``. The first term is the whole table's curvature along
    this party's block; the second covers one extreme row landing in a small batch (the
    cause of the divergence reported on heavy-tailed credit tables). One number, computed by
    the party from its own rows."""
    n = len(x)
    if n == 0 or x.shape[1] == 0:
        return 0.0
    gram = x.T @ x / n
    largest = float(np.linalg.eigvalsh(gram)[-1])
    peak = float(np.max(np.einsum("ij,ij->i", x, x)))
    return (largest + peak / min(batch_size, n)) / c


def block_step(curvature: float, parties: int, alpha: float) -> float:
    """The default step of a linear optimiser (momentum, SGD) on one party's block of weights:
    ``1 / (parties * (curvature + alpha))``.

    Why it is safe: the joint curvature ``lambda_max([X_1 ... X_P]^T [X_1 ... X_P])`` is at
    most the sum of the blocks' (Cauchy-Schwarz), so with block ``p`` stepping by ``s_p`` the
    preconditioned curvature is at most ``sum_p s_p L_p = 1``, below heavy-ball momentum's
    (beta 0.9) stability limit of ``2 (1 + beta) = 3.8`` and plain gradient descent's 2. Each
    party's step thus follows its own columns' scale and correlation, with no constant tuned
    to one table."""
    return 1.0 / (max(parties, 1) * (curvature + alpha))
