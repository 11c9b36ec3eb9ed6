"""Differential privacy for horizontal training: client-level (central or local) and
record-level (DP-SGD at each client), every spend in the privacy ledger.

Three settings, passed as ``privacy=`` to the estimators:

* :class:`ClientDP` -- **client-level DP-FedAvg, central** (McMahan et al. 2018): each
  sampled client clips its update to L2 norm ``clip``; the server sums the clipped updates,
  adds Gaussian noise of standard deviation ``noise_multiplier * clip`` and divides by the
  *expected* number of clients ``q N`` (a fixed denominator, so one client's presence moves
  the mean by at most ``clip / (q N)``). Clients are Poisson-sampled with rate ``q =
  client_fraction`` from the OS's randomness, which is what amplification by sampling
  assumes. The guarantee covers a whole client's data, against anyone who sees the global
  models -- but the server must be trusted to add the noise. With ``adaptive=True`` the
  clipping norm follows a target quantile of the update norms (Andrew et al. 2021): each
  client also reports whether its norm was within the clip, the server counts those bits
  with Gaussian noise of its own and moves the clip geometrically; the update noise is
  raised so that the pair spends what ``noise_multiplier`` alone would.
* :class:`LocalDP` -- **client-level, local**: each client clips its update and adds the
  noise itself before sending, trusting nobody; the server averages the noisy updates. The
  server sees who took part, so sampling amplifies nothing, and the mean carries ``m``
  clients' noise, ``sqrt(m)`` times the central noise over ``m`` clients: the price of not
  trusting the server (``examples/horizontal_hospitals.py`` prints the difference).
* :class:`RecordDP` -- **record-level DP-SGD at each client** (Abadi et al. 2016): each
  local step draws a Poisson sample of the client's records, takes their per-sample
  gradients from Opacus (``opacus.GradSampleModule``, not hand-written), clips each to
  ``max_grad_norm``, adds Gaussian noise and steps. The guarantee is per record, towards
  everyone who sees the client's updates, accounted per client.

Each records what it spends in the :class:`vfl.privacy.PrivacyLedger` (dp-accounting's RDP
accountant by default): ``ClientDP`` one Poisson-sampled Gaussian per round for the holder
``"every client"``; ``LocalDP`` and ``RecordDP`` per client, each time it takes part. The
estimators' ``epsilon_`` is the largest epsilon any holder spent; with ``report_rounds=True``
the epsilon so far is also logged after each round and kept in its record
(``rounds_[r].epsilon``); and
:meth:`FederatedClassifier.save` writes the ledger beside the model.

Noise is drawn from the OS's randomness (:func:`vfl.privacy.gaussian_noise`), never from
``random_state``.

Standardisation under DP (``standardize=True``, the default) releases the clients' column
statistics through the Gaussian mechanism, record-level, each client's spend in the ledger
(:mod:`horizontal.scaling`); ``standardize=False`` leaves the scaling to the user.

What DP does not cover here: the label set (the estimators refuse a missing ``classes=``
under DP), the number of rows a client sends with its update (used as FedAvg weight without
DP; DP averages without weights), and timing.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from horizontal.aggregate import clip_to_norm
from vfl.extras import require
from vfl.privacy.accounting import resolve_noise_multiplier
from vfl.privacy.checks import check_positive_finite, check_probability
from vfl.privacy.mechanisms import gaussian_noise

__all__ = ["ClientDP", "LocalDP", "RecordDP", "clipped_sum", "largest_epsilon"]

Vector = np.ndarray[Any, Any]
EVERY_CLIENT = "every client"


def poisson_sample(clients: list[str], rate: float) -> list[str]:
    """Each client independently with probability ``rate``, from the OS's randomness (what
    amplification by sampling assumes)."""
    draw = secrets.SystemRandom()
    return [c for c in clients if draw.random() < rate]


def _largest_client_epsilon(spec: Any) -> float | None:
    return largest_epsilon(spec.ledger, spec.clients)


def largest_epsilon(ledger: Any, clients: Any) -> float | None:
    """The largest epsilon any holder of the ledger has spent (``"every client"`` or a
    client of ``clients``); None without a ledger or a spend. A client's own entries (its
    DP standardisation, say) are composed with those of ``"every client"``, which cover its
    records too."""
    if ledger is None:
        return None
    from vfl.privacy.accounting import epsilon

    entries = ledger.entries
    shared = [e for e in entries if e.holder == EVERY_CLIENT]
    found = [float(ledger.epsilon(holder=EVERY_CLIENT))] if shared else []
    for holder in ledger.holders():
        if holder == EVERY_CLIENT or holder not in clients:
            continue
        if not shared:
            found.append(float(ledger.epsilon(holder=holder)))
            continue
        own = [e for e in entries if e.holder == holder]
        events = [e.event() for e in [*shared, *own]]
        found.append(float(epsilon(events, delta=ledger.delta, accountant=ledger.accountant)))
    return max(found, default=None)


@dataclass(frozen=True)
class ClientDP:
    """Client-level DP-FedAvg with central noise (see the module docstring).

    Parameters
    ----------
    noise_multiplier : float, optional
        Noise standard deviation over the clipping norm; or give ``epsilon`` and it is
        calibrated to the fit's rounds and sampling rate.
    epsilon : float, optional
        The target epsilon over the whole fit (at ``delta``).
    delta : float
        The delta of the guarantee (default 1e-5).
    clip : float
        The L2 norm each client's update is clipped to (the initial one when adaptive).
    adaptive : bool
        Follow ``target_quantile`` of the update norms (Andrew et al. 2021).
    target_quantile, clip_lr : float
        The quantile of update norms the clip tracks, and its geometric step size.
    count_noise : float, optional
        Standard deviation of the noise on the count of unclipped clients (default: a
        twentieth of the expected clients per round, as the paper suggests).
    report_rounds : bool
        Compute the epsilon spent so far after every round, log it (``vflink.horizontal``,
        INFO) and keep it in ``rounds_[r].epsilon``; otherwise only at the end
        (``epsilon_``), which is cheaper.
    """

    noise_multiplier: float | None = None
    epsilon: float | None = None
    delta: float = 1e-5
    clip: float = 1.0
    adaptive: bool = False
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    count_noise: float | None = None
    report_rounds: bool = False

    client_level = True
    record_level = False

    # -- agreed before the fit -------------------------------------------------------------

    def check(self, estimator: Any, n_clients: int) -> None:
        check_probability("delta", self.delta)
        check_positive_finite("clip", self.clip)
        self.multiplier(estimator.rounds, estimator.client_fraction)
        if self.adaptive:
            check_probability("target_quantile", self.target_quantile)
            check_positive_finite("clip_lr", self.clip_lr)
            rate = estimator.client_fraction
            self.update_multiplier(rate * n_clients, estimator.rounds, rate)

    def multiplier(self, rounds: int, rate: float) -> float:
        """The total noise multiplier the ledger accounts for."""
        return resolve_noise_multiplier(
            noise_multiplier=self.noise_multiplier,
            epsilon=self.epsilon,
            delta=self.delta,
            steps=rounds,
            sampling_rate=rate,
            what="ClientDP",
        )

    def count_sigma(self, expected: float) -> float:
        return self.count_noise if self.count_noise is not None else max(expected / 20, 1e-3)

    def update_multiplier(self, expected: float, rounds: int = 1, rate: float = 1.0) -> float:
        """The update noise multiplier: the total one, raised when the clipped-count bits
        take their share (Andrew et al. 2021, Theorem 1)."""
        z = self.multiplier(rounds, rate)
        if not self.adaptive:
            return z
        sigma_b = self.count_sigma(expected)
        if not z < 2 * sigma_b:
            raise ValueError(
                f"adaptive clipping: the noise multiplier {z:.3g} must be below twice the count "
                f"noise ({2 * sigma_b:.3g}); raise count_noise or lower the noise"
            )
        return float((z**-2 - (2 * sigma_b) ** -2) ** -0.5)

    @property
    def initial_clip(self) -> float:
        return float(self.clip)

    # -- the client ------------------------------------------------------------------------

    def client_release(
        self, delta: Vector, clip: float | None, spec: Any, client: str
    ) -> tuple[Vector, bool | None]:
        """The clipped update, and (adaptive) whether it was within the clip already."""
        clipped, norm = clip_to_norm(delta, float(clip if clip is not None else self.clip))
        return clipped, (bool(norm <= (clip or self.clip)) if self.adaptive else None)

    def noise_share(self, size: int, clip: float | None, spec: Any) -> Vector:
        """Under secure aggregation (distributed noise): this client's share of the round's
        noise, ``N(0, (z C)^2 / t)`` with ``t`` the secure aggregation's threshold, so that
        the sum of the at least ``t`` surviving clients carries the whole ``N(0, (z C)^2)``
        the ledger accounts for. The server never sees a noise-free sum; clients that
        collude with it can subtract their own shares, so against ``k`` colluders the noise
        left is that of ``t - k`` clients."""
        norm = float(clip if clip is not None else self.clip)
        expected = spec.client_fraction * len(spec.clients)
        z = self.update_multiplier(expected, spec.rounds, spec.client_fraction)
        out: Vector = gaussian_noise(
            size, sigma=z * norm / math.sqrt(spec.secure_aggregation.threshold)
        )
        return out

    # -- the server ------------------------------------------------------------------------

    def poisson_sample(self, clients: list[str], rate: float) -> list[str]:
        return poisson_sample(clients, rate)

    def server_mean(
        self,
        deltas: Vector,
        unclipped: list[bool | None],
        clip: float | None,
        n_clients: int,
        weights: Vector,
        spec: Any,
    ) -> tuple[Vector, float | None]:
        """The noisy mean ``(sum of clipped updates + noise) / (q N)`` and the next clip
        (``deltas``: the replies' updates as rows)."""
        norm = float(clip if clip is not None else self.clip)
        rounds, rate = spec.rounds, spec.client_fraction
        expected = rate * n_clients
        total = np.zeros_like(weights)
        for d in deltas:  # clipped again here: the guarantee must not rest on the clients
            total += clip_to_norm(d, norm)[0]
        z = self.update_multiplier(expected, rounds, rate)
        mean = (total + gaussian_noise(total.size, sigma=z * norm)) / expected
        if not self.adaptive:
            return mean, clip
        count = sum(1 for bit in unclipped if bit) + float(
            gaussian_noise(1, sigma=self.count_sigma(expected))[0]
        )
        fraction = count / expected
        return mean, norm * math.exp(-self.clip_lr * (fraction - self.target_quantile))

    def record_round(self, spec: Any, round_: int, n_clients: int) -> float | None:
        """Record the round's spend (at the server); the epsilon so far."""
        ledger = spec.ledger
        if ledger is None:
            return None
        z = self.multiplier(spec.rounds, spec.client_fraction)
        where = (
            "distributed noise under secure aggregation"
            if getattr(spec, "secure_aggregation", None) is not None
            else "central noise"
        )
        ledger.record(
            holder=EVERY_CLIENT,
            data=f"its whole data (client-level DP-FedAvg, {where})",
            mechanism="gaussian",
            noise_multiplier=z,
            sampling_rate=spec.client_fraction,
            steps=1,
        )
        return float(ledger.epsilon(holder=EVERY_CLIENT)) if self.report_rounds else None


@dataclass(frozen=True)
class LocalDP:
    """Client-level DP with local noise: each client clips and noises its own update.

    Parameters
    ----------
    noise_multiplier : float, optional
        Noise standard deviation over ``clip``, added by each client to each update; or
        ``epsilon``, calibrated to ``rounds`` releases (a client sampled every round).
    epsilon, delta : float
        As :class:`ClientDP`.
    clip : float
        The L2 norm each update is clipped to.
    """

    noise_multiplier: float | None = None
    epsilon: float | None = None
    delta: float = 1e-5
    clip: float = 1.0
    report_rounds: bool = False

    client_level = True
    record_level = False
    adaptive = False

    def check(self, estimator: Any, n_clients: int) -> None:
        check_probability("delta", self.delta)
        check_positive_finite("clip", self.clip)
        self.multiplier(estimator.rounds)

    def multiplier(self, rounds: int) -> float:
        return resolve_noise_multiplier(
            noise_multiplier=self.noise_multiplier,
            epsilon=self.epsilon,
            delta=self.delta,
            steps=rounds,
            what="LocalDP",
        )

    @property
    def initial_clip(self) -> float:
        return float(self.clip)

    def client_release(
        self, delta: Vector, clip: float | None, spec: Any, client: str
    ) -> tuple[Vector, bool | None]:
        """The clipped update with this client's own noise; its spend in the ledger."""
        z = self.multiplier(spec.rounds)
        clipped, _ = clip_to_norm(delta, self.clip)
        if spec.ledger is not None:
            spec.ledger.record(
                holder=client,
                data="its whole data (client-level, local noise)",
                mechanism="gaussian",
                noise_multiplier=z,
                steps=1,
            )
        return clipped + gaussian_noise(clipped.size, sigma=z * self.clip), None

    def poisson_sample(self, clients: list[str], rate: float) -> list[str]:
        return poisson_sample(clients, rate)

    def server_mean(
        self,
        deltas: Vector,
        unclipped: list[bool | None],
        clip: float | None,
        n_clients: int,
        weights: Vector,
        spec: Any,
    ) -> tuple[Vector, float | None]:
        """The plain mean of the (already noisy) updates; zero when nobody replied."""
        if not len(deltas):
            return np.zeros_like(weights), clip
        return np.mean(deltas, axis=0), clip

    def record_round(self, spec: Any, round_: int, n_clients: int) -> float | None:
        """The largest epsilon of any client so far (each records its own releases)."""
        return _largest_client_epsilon(spec) if self.report_rounds else None


def clipped_sum(per_sample: list[Any], max_norm: float) -> tuple[list[Any], Any]:
    """DP-SGD's clipping: each record's gradient (its slices of every parameter's
    ``grad_sample``, shape ``(records, *parameter shape)``) scaled to an L2 norm of at most
    ``max_norm``, summed over the records; and the norms before clipping."""
    import torch

    rows = per_sample[0].shape[0]
    flat = torch.cat([g.reshape(rows, -1) for g in per_sample], dim=1)
    norms = torch.linalg.vector_norm(flat, dim=1)
    factor = torch.clamp(max_norm / (norms + 1e-12), max=1.0)
    return [torch.einsum("i,i...->...", factor, g) for g in per_sample], norms


@dataclass(frozen=True)
class RecordDP:
    """Record-level DP-SGD at each client (Opacus per-sample gradients; see the module
    docstring).

    Parameters
    ----------
    noise_multiplier : float, optional
        Noise standard deviation over ``max_grad_norm``, per local step; or ``epsilon``,
        calibrated per client to its own schedule (every round, ``local_epochs`` of
        ``rows / batch_size`` steps at sampling rate ``batch_size / rows``) at the fit.
    epsilon, delta : float
        As :class:`ClientDP`.
    max_grad_norm : float
        The L2 norm each record's gradient is clipped to.
    """

    noise_multiplier: float | None = None
    epsilon: float | None = None
    delta: float = 1e-5
    max_grad_norm: float = 1.0
    report_rounds: bool = False

    client_level = False
    record_level = True
    adaptive = False

    def check(self, estimator: Any, n_clients: int) -> None:
        check_probability("delta", self.delta)
        check_positive_finite("max_grad_norm", self.max_grad_norm)
        if (self.noise_multiplier is None) == (self.epsilon is None):
            raise ValueError("RecordDP: give exactly one of noise_multiplier= and epsilon=")
        if self.noise_multiplier is not None:
            check_positive_finite("noise_multiplier", self.noise_multiplier)
        else:
            check_positive_finite("epsilon", self.epsilon)
        require("opacus", for_="RecordDP (per-sample gradients)")

    def schedule(self, rows: int, spec: Any) -> tuple[float, int]:
        """A client's sampling rate and steps per round."""
        rate = min(1.0, spec.batch_size / rows)
        return rate, spec.local_epochs * max(1, round(1 / rate))

    def client_multiplier(self, rows: int, spec: Any) -> float:
        rate, steps = self.schedule(rows, spec)
        return resolve_noise_multiplier(
            noise_multiplier=self.noise_multiplier,
            epsilon=self.epsilon,
            delta=self.delta,
            steps=steps * spec.rounds,
            sampling_rate=rate,
            what="RecordDP",
        )

    def record_round(self, spec: Any, round_: int, n_clients: int) -> float | None:
        """The largest epsilon of any client so far (each records its own steps)."""
        return _largest_client_epsilon(spec) if self.report_rounds else None

    def local_train(self, module: Any, x: Any, y: Any, loss_fn: Any, spec: Any, client: str) -> int:
        """DP-SGD over this client's rows for one round; records the spend; the steps."""
        import torch
        from opacus import GradSampleModule

        n = len(x)
        rate, steps = self.schedule(n, spec)
        z = self.client_multiplier(n, spec)
        summed = type(loss_fn)(reduction="sum")
        draw = np.random.default_rng(secrets.randbits(64))  # the sample must stay secret
        wrapped = GradSampleModule(module, loss_reduction="sum")
        params = [p for p in module.parameters() if p.requires_grad]
        expected = rate * n
        alpha = float(spec.alpha or 0.0)
        try:
            for _ in range(steps):
                rows = torch.as_tensor(np.flatnonzero(draw.random(n) < rate))
                for p in params:
                    p.grad, p.grad_sample = None, None
                total = [torch.zeros_like(p) for p in params]
                if len(rows):
                    # inputs that need a gradient keep torch's full backward hooks (which
                    # Opacus uses) from warning; warnings filters are not thread-safe
                    batch = x[rows].clone().requires_grad_(True)
                    summed(wrapped(batch), y[rows]).backward()
                    total, _ = clipped_sum([p.grad_sample for p in params], self.max_grad_norm)
                with torch.no_grad():
                    for p, g in zip(params, total, strict=True):
                        noise = torch.as_tensor(
                            gaussian_noise(p.numel(), sigma=z * self.max_grad_norm), dtype=p.dtype
                        ).view_as(p)
                        step = (g + noise) / expected
                        if alpha and p.ndim >= 2:  # the L2 penalty: no record in it
                            step = step + alpha * p
                        p -= spec.learning_rate * step
        finally:
            wrapped.remove_hooks()
            for p in params:
                p.grad, p.grad_sample = None, None
        if spec.ledger is not None:
            spec.ledger.record(
                holder=client,
                data="its records (record-level DP-SGD)",
                mechanism="gaussian",
                noise_multiplier=z,
                sampling_rate=rate,
                steps=steps,
            )
        return steps
