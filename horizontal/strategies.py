"""Federated optimisation strategies: what clients do locally and how the server steps.

A strategy is a small stateless object (a hyperparameter of the estimator, cloned with it):

* :attr:`Strategy.local` -- what each client runs in a round (:class:`LocalPlan`): local
  epochs of mini-batch SGD, or one full-batch gradient step (FedSGD); a proximal term
  (FedProx); control variates (Scaffold);
* :meth:`Strategy.server_step` -- how the server moves the global model, given the round's
  *mean update* (``mean_delta``: the clients' ``local - global`` averaged by
  :func:`horizontal.aggregate.weighted_mean` with weights ``n_k``, or the differentially
  private mean of :mod:`horizontal.privacy`), and its own state (momentum, moments,
  control variate), which the server role keeps for one fit.

Averaging is kept out of the strategies on purpose: it is where privacy acts (clipping,
noise), while a server optimiser is post-processing of the mean and costs no privacy.

=============  ======================================================  ======================
strategy       client                                                   server step
=============  ======================================================  ======================
``FedSGD``     one full-batch gradient step (lr)                        ``w + mean``
``FedAvg``     ``local_epochs`` of mini-batch SGD (or Adam)             ``w + mean``
``FedProx``    the same, loss ``+ mu/2 ||w - w_global||^2``             ``w + mean``
``FedAvgM``    as FedAvg                                                heavy-ball momentum
``FedAdam``    as FedAvg                                                Adam on ``-mean``
``Scaffold``   SGD with the correction ``c - c_k`` (control variates)   ``w + lr * mean``;
                                                                        ``c += sum n_k/n dc_k``
``FedLBFGS``   its full-batch gradient and objective, no training       L-BFGS, line search
=============  ======================================================  ======================

The estimators' default, ``strategy="auto"``, is where it applies (no DP, no secure or robust
aggregation, no compression, every client in every round) FedLBFGS for a linear model and
FedAvg with local Adam for a network; FedAvg elsewhere.

References: McMahan et al. 2017 (FedSGD, FedAvg); Li et al. 2020 (FedProx); Hsu et al. 2019
(FedAvgM); Reddi et al. 2021 (FedAdam); Karimireddy et al. 2020 (Scaffold, option II); Liu
and Nocedal 1989 (L-BFGS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "STRATEGIES",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedLBFGS",
    "FedProx",
    "FedSGD",
    "LocalPlan",
    "Scaffold",
    "Strategy",
    "get_strategy",
]

Vector = np.ndarray[Any, Any]


@dataclass(frozen=True)
class LocalPlan:
    """What a client runs in a round."""

    full_batch: bool = False
    """One gradient step on all its rows (FedSGD) instead of ``local_epochs`` of mini-batches."""
    mu: float = 0.0
    """FedProx's proximal weight: the local loss gets ``mu / 2 * ||w - w_global||^2``."""
    scaffold: bool = False
    """Correct each local gradient by ``c - c_k`` and report the control variate's change."""
    gradient: bool = False
    """Train nothing: report the full-batch gradient of the objective at the sent weights
    (as ``delta = -gradient``) and the objective itself (FedLBFGS)."""
    optimizer: str = "sgd"
    """The local optimiser: ``"sgd"``, or ``"adam"`` (a fresh one each round)."""


@dataclass(frozen=True)
class Strategy:
    """Base of the strategies (see the module docstring)."""

    name: ClassVar[str] = ""

    @property
    def local(self) -> LocalPlan:
        return LocalPlan()

    def server_step(
        self,
        weights: Vector,
        mean_delta: Vector,
        state: dict[str, Any],
        *,
        control_step: Vector | None = None,
        objective: float | None = None,
    ) -> Vector:
        """The next global model. ``state`` is the server's own (empty at the first round);
        ``control_step`` serves Scaffold: the change of the global control variate, the
        replying clients' changes weighted by their share of all rows; ``objective`` the
        pooled training objective at ``weights`` (for the strategies that ask for it)."""
        out: Vector = weights + mean_delta
        return out

    def result(self, weights: Vector, state: dict[str, Any]) -> Vector:
        """The model the fit has reached: the global model (FedLBFGS: its best accepted
        point, not the next one it will try)."""
        return weights

    def converged(self, state: dict[str, Any]) -> bool:
        """Whether to stop before ``rounds`` (FedLBFGS's convergence test)."""
        return False

    def check(self) -> None:
        """Refuse hyperparameters out of range (ValueError naming the parameter)."""


@dataclass(frozen=True)
class FedAvg(Strategy):
    """Federated averaging: ``local_epochs`` of mini-batch SGD, then ``w + mean update``.

    ``local_optimizer="adam"``: each client runs Adam instead of SGD, a fresh one every round
    (no optimiser state outlives a round, so a round's update is a function of the global
    model and the client's rows alone, as with SGD). It is the estimators' default for
    networks: on tables where SGD's fixed step plateaus below Adam's solution, it reaches
    the same network trained centrally by Adam (scikit-learn's ``MLPClassifier`` recipe).
    """

    name: ClassVar[str] = "fedavg"
    local_optimizer: str = "sgd"

    @property
    def local(self) -> LocalPlan:
        return LocalPlan(optimizer=self.local_optimizer)

    def check(self) -> None:
        if self.local_optimizer not in ("sgd", "adam"):
            raise ValueError(
                f'FedAvg(local_optimizer=...) must be "sgd" or "adam", got {self.local_optimizer!r}'
            )


@dataclass(frozen=True)
class FedSGD(Strategy):
    """One full-batch gradient step per client and round: with weights ``n_k``, a round is
    one step of full-batch gradient descent on the pooled rows (``learning_rate``)."""

    name: ClassVar[str] = "fedsgd"

    @property
    def local(self) -> LocalPlan:
        return LocalPlan(full_batch=True)


@dataclass(frozen=True)
class FedProx(Strategy):
    """FedAvg whose clients add ``mu / 2 * ||w - w_global||^2`` to their loss, which holds
    their models near the global one on skewed data. ``mu = 0`` is FedAvg."""

    name: ClassVar[str] = "fedprox"
    mu: float = 0.01

    @property
    def local(self) -> LocalPlan:
        return LocalPlan(mu=float(self.mu))

    def check(self) -> None:
        if not self.mu >= 0:
            raise ValueError(f"FedProx(mu=...) must be >= 0, got {self.mu!r}")


@dataclass(frozen=True)
class FedAvgM(Strategy):
    """FedAvg with server momentum: ``v = momentum * v + mean``; ``w + server_lr * v``."""

    name: ClassVar[str] = "fedavgm"
    server_lr: float = 1.0
    momentum: float = 0.9

    def server_step(
        self,
        weights: Vector,
        mean_delta: Vector,
        state: dict[str, Any],
        *,
        control_step: Vector | None = None,
        objective: float | None = None,
    ) -> Vector:
        velocity = self.momentum * state.get("velocity", np.zeros_like(weights)) + mean_delta
        state["velocity"] = velocity
        out: Vector = weights + self.server_lr * velocity
        return out

    def check(self) -> None:
        if not self.server_lr > 0 or not 0 <= self.momentum < 1:
            raise ValueError(
                f"FedAvgM needs server_lr > 0 and 0 <= momentum < 1, got {self.server_lr!r}, "
                f"{self.momentum!r}"
            )


@dataclass(frozen=True)
class FedAdam(Strategy):
    """Adam at the server on the pseudo-gradient ``-mean`` (Reddi et al. 2021): moments
    ``m``, ``v``; ``w + server_lr * m / (sqrt(v) + tau)`` (no bias correction, as there)."""

    name: ClassVar[str] = "fedadam"
    server_lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3

    def server_step(
        self,
        weights: Vector,
        mean_delta: Vector,
        state: dict[str, Any],
        *,
        control_step: Vector | None = None,
        objective: float | None = None,
    ) -> Vector:
        m = self.beta1 * state.get("m", np.zeros_like(weights)) + (1 - self.beta1) * mean_delta
        v = self.beta2 * state.get("v", np.zeros_like(weights)) + (1 - self.beta2) * mean_delta**2
        state["m"], state["v"] = m, v
        out: Vector = weights + self.server_lr * m / (np.sqrt(v) + self.tau)
        return out

    def check(self) -> None:
        if not self.server_lr > 0 or not self.tau > 0:
            raise ValueError("FedAdam needs server_lr > 0 and tau > 0")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError("FedAdam needs 0 <= beta1, beta2 < 1")


@dataclass(frozen=True)
class Scaffold(Strategy):
    """Stochastic controlled averaging (Karimireddy et al. 2020, option II): each client
    corrects its local gradients by ``c - c_k`` (the server's and its own control variate),
    then updates ``c_k += (w_global - w_local) / (steps * lr) - c``; the server moves
    ``w + server_lr * mean`` and ``c += sum over replies of (n_k / n) dc_k``, ``n`` all
    clients' rows (the control variate of the row-weighted objective FedAvg's mean also
    targets; the paper's equal weights when the clients are of one size). Against client
    drift on skewed data; the control variates double what a client sends."""

    name: ClassVar[str] = "scaffold"
    server_lr: float = 1.0

    @property
    def local(self) -> LocalPlan:
        return LocalPlan(scaffold=True)

    def server_step(
        self,
        weights: Vector,
        mean_delta: Vector,
        state: dict[str, Any],
        *,
        control_step: Vector | None = None,
        objective: float | None = None,
    ) -> Vector:
        if control_step is not None:
            state["control"] = state.get("control", np.zeros_like(weights)) + control_step
        out: Vector = weights + self.server_lr * mean_delta
        return out

    def check(self) -> None:
        if not self.server_lr > 0:
            raise ValueError(f"Scaffold(server_lr=...) must be > 0, got {self.server_lr!r}")


@dataclass(frozen=True)
class FedLBFGS(Strategy):
    """L-BFGS at the server on the pooled full-batch gradient (:mod:`horizontal.lbfgs`):
    each round every client sends the gradient of its objective at the sent weights and the
    objective summed over its rows (nothing is trained locally); weighted by ``n_k`` they
    are the pooled objective and gradient, so the rounds are the evaluations of a pooled
    L-BFGS with a backtracking line search -- the solver scikit-learn's
    ``LogisticRegression`` uses by default, which reaches the same model in tens of rounds
    where FedAvg's SGD needs hundreds on correlated columns. The estimators' ``tol`` bounds
    the largest gradient entry at convergence (as there).

    A round's objective must be that of the same rows as the last one: every client takes
    part (``client_fraction=1``), and when the set of replying clients changes (a dropout)
    the memory restarts from the new objective. Not with client-level DP (noisy gradients
    break the line search), robust aggregation or compression, whose inexact means it does
    not model.

    Reference: Liu and Nocedal (1989); Nocedal and Wright, *Numerical Optimization*, ch. 7.
    """

    name: ClassVar[str] = "lbfgs"
    memory: int = 10

    @property
    def local(self) -> LocalPlan:
        return LocalPlan(full_batch=True, gradient=True)

    def server_step(
        self,
        weights: Vector,
        mean_delta: Vector,
        state: dict[str, Any],
        *,
        control_step: Vector | None = None,
        objective: float | None = None,
    ) -> Vector:
        from horizontal.lbfgs import lbfgs_step

        if objective is None:
            raise ValueError("FedLBFGS needs the pooled objective of every round")
        return lbfgs_step(
            state, weights, objective, -mean_delta, memory=self.memory, tol=state["tol"]
        )

    def result(self, weights: Vector, state: dict[str, Any]) -> Vector:
        out: Vector = state.get("x", weights)
        return out

    def converged(self, state: dict[str, Any]) -> bool:
        return bool(state.get("converged", False))

    def check(self) -> None:
        if isinstance(self.memory, bool) or not isinstance(self.memory, int) or self.memory < 1:
            raise ValueError(f"FedLBFGS(memory=...) must be an integer >= 1, got {self.memory!r}")


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (FedSGD, FedAvg, FedProx, FedAvgM, FedAdam, Scaffold, FedLBFGS)
}
"""The strategies by name (``strategy="fedprox"`` builds ``FedProx()``)."""


def get_strategy(strategy: str | Strategy) -> Strategy:
    """A strategy object from a name or an object (checked)."""
    if isinstance(strategy, str):
        if strategy.lower() not in STRATEGIES:
            raise ValueError(
                f"strategy must be one of {sorted(STRATEGIES)} or a Strategy object, got "
                f"{strategy!r}"
            )
        strategy = STRATEGIES[strategy.lower()]()
    if not isinstance(strategy, Strategy):
        raise ValueError(f"strategy must be a name or a Strategy object, got {strategy!r}")
    strategy.check()
    return strategy
