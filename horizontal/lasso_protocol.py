"""The federated Lasso's protocol (:mod:`horizontal.lasso` describes it and holds the
estimator): its messages, what every party agrees on (:class:`LassoSpec`), and the roles --
:class:`LassoClient` at each hospital, :class:`LassoServer` taking the proximal steps --
written once against a :class:`~vfl.federation.Federation`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
from vfl.progress import EpochProgress

if TYPE_CHECKING:
    from horizontal.lasso import LassoDP

__all__ = [
    "LASSO",
    "LassoClient",
    "LassoResult",
    "LassoServer",
    "LassoSpec",
    "soft_threshold",
]

logger = logging.getLogger("vflink.horizontal")

LASSO = Namespace("lasso")

Vector = np.ndarray[Any, Any]


def soft_threshold(v: Vector, threshold: float) -> Vector:
    """``sign(v) max(|v| - threshold, 0)``: the proximal operator of ``threshold ||.||_1``."""
    out: Vector = np.sign(v) * np.maximum(np.abs(v) - threshold, 0.0)
    return out


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile(Message):
    KIND = "lasso profile"
    rows: int
    columns: list[str]
    sums: np.ndarray | None = None
    squares: np.ndarray | None = None
    target_sum: float = 0.0


@dataclass(frozen=True)
class Means(Message):
    KIND = "lasso pooled means"
    x: np.ndarray
    y: float


@dataclass(frozen=True)
class Curvature(Message):
    """A client's largest eigenvalue of its centred ``X_k^T X_k``."""

    KIND = "lasso curvature"
    value: float


@dataclass(frozen=True)
class Point(Message):
    KIND = "lasso point"
    round: int
    coef: np.ndarray
    stop: bool = False
    support: np.ndarray | None = None  # under DP with select: the coordinates to send


@dataclass(frozen=True)
class Gradient(Message):
    KIND = "lasso gradient"
    round: int
    values: np.ndarray


@dataclass(frozen=True)
class LassoSpec:
    server: str
    clients: tuple[str, ...]
    alpha: float
    l1_ratio: float
    fit_intercept: bool
    max_iter: int
    tol: float
    fista: bool
    privacy: LassoDP | None
    secure_aggregation: Any
    warm_start: Vector | None = None
    ledger: Any = None
    verbose: int = 0


@dataclass
class LassoResult:
    coef: Vector
    intercept: float = 0.0
    n_iter: int = 0
    lipschitz: float = 0.0
    seconds: float = 0.0
    history: list[float] = field(default_factory=list)  # the step's size per round
    round_seconds: list[float] = field(default_factory=list)  # each round's, at the server
    support: Vector | None = None  # DP's selected columns


# -- the roles -----------------------------------------------------------------------------------


class LassoClient:
    """A client: its rows ``x`` and targets ``y`` (columns named ``columns``)."""

    def __init__(self, spec: LassoSpec, x: Vector, y: Vector, columns: list[str]) -> None:
        self.spec, self.x, self.y, self.columns = spec, x, y, columns

    def __call__(self, fed: Federation) -> None:
        spec, server = self.spec, self.spec.server
        x, y = self.x, self.y
        profile = Profile(rows=len(x), columns=self.columns)
        if spec.fit_intercept:
            profile = Profile(
                rows=len(x),
                columns=self.columns,
                sums=x.sum(axis=0),
                squares=(x**2).sum(axis=0),
                target_sum=float(y.sum()),
            )
        LASSO.send(fed, server, "profile", profile)
        means = LASSO.recv(fed, server, "means", Means)
        if means.x.shape != (x.shape[1],):
            Means.refuse(server, "x", f"has shape {means.x.shape}")
        xc, yc = x - means.x, y - means.y
        gram = xc @ xc.T if len(xc) < xc.shape[1] else xc.T @ xc  # the same largest eigenvalue
        largest = float(np.linalg.eigvalsh(gram)[-1]) if len(xc) else 0.0
        LASSO.send(fed, server, "curvature", Curvature(value=largest))
        privacy = spec.privacy
        channel = None  # secure aggregation's c key, kept across the rounds (ChannelKey)
        while True:
            point = LASSO.recv(fed, server, "point", Point)
            if point.stop:
                return
            grad = xc.T @ (xc @ point.coef - yc)
            if point.support is not None:
                if point.support.dtype.kind not in "iu" or np.any(point.support >= len(grad)):
                    Point.refuse(server, "support", "is not a set of column positions")
                grad = grad[point.support]
            if privacy is not None:
                selecting = point.round == spec.max_iter  # the selection's release
                z = (
                    privacy.selection_multiplier()
                    if selecting
                    else privacy.multiplier(spec.max_iter)
                )
                grad = self._private(grad, len(xc), privacy, z, fed.name)
            if spec.secure_aggregation is not None:
                from horizontal.secagg import ChannelKey, client_round

                channel = channel or ChannelKey()
                client_round(
                    fed,
                    server,
                    grad,
                    spec.secure_aggregation,
                    point.round,
                    clients=len(spec.clients),
                    channel=channel,
                )
            else:
                LASSO.send(
                    fed, server, "grad", Gradient(round=point.round, values=grad), point.round
                )

    def _private(self, grad: Vector, rows: int, privacy: LassoDP, z: float, name: str) -> Vector:
        """The client's clipped average gradient, with its noise (local) or its share of the
        round's noise (central under secure aggregation)."""
        from horizontal.aggregate import clip_to_norm
        from vfl.privacy import gaussian_noise

        clipped, _ = clip_to_norm(grad / max(rows, 1), privacy.clip)
        if privacy.where == "local":
            if self.spec.ledger is not None:
                self.spec.ledger.record(
                    holder=name,
                    data="its whole data (Lasso gradients, local noise)",
                    mechanism="gaussian",
                    noise_multiplier=z,
                    steps=1,
                )
            return clipped + gaussian_noise(clipped.size, sigma=z * privacy.clip)
        if self.spec.secure_aggregation is not None:  # distributed central noise
            t = self.spec.secure_aggregation.threshold
            return clipped + gaussian_noise(clipped.size, sigma=z * privacy.clip / math.sqrt(t))
        return clipped


class LassoServer:
    """The server: pools the means and the curvature bound, steps the coefficients."""

    def __init__(self, spec: LassoSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> LassoResult:
        spec = self.spec
        began = time.perf_counter()
        clients = list(spec.clients)
        profiles = {
            c: Profile.from_payload(p, c)
            for c, p in fed.gather(clients, LASSO.tag("profile")).items()
        }
        columns = profiles[clients[0]].columns
        for c in clients[1:]:
            if profiles[c].columns != columns:
                raise ValueError(
                    f"client {c!r} has other columns than {clients[0]!r}: every client needs the "
                    "same columns in the same order"
                )
        rows = sum(p.rows for p in profiles.values())
        p = len(columns)
        mean_x: Vector = np.zeros(p)
        mean_y = 0.0
        if spec.fit_intercept:
            sums: Vector = np.sum([_vector(pr.sums, p, c, "sums") for c, pr in profiles.items()], 0)
            squares: Vector = np.sum(
                [_vector(pr.squares, p, c, "squares") for c, pr in profiles.items()], axis=0
            )
            mean_x = sums / rows
            variance = squares / rows - mean_x**2
            flat = [
                columns[j]
                for j in np.flatnonzero(variance <= 1e-12 * np.maximum(1, squares / rows))
            ]
            if flat:
                raise ValueError(
                    f"column {flat[0]!r} is constant over every client's rows: it carries no "
                    "information, drop it"
                )
            mean_y = sum(pr.target_sum for pr in profiles.values()) / rows
        LASSO.broadcast(fed, "means", Means(x=mean_x, y=mean_y), to=clients)
        curvature = {
            c: Curvature.from_payload(v, c).value
            for c, v in fed.gather(clients, LASSO.tag("curvature")).items()
        }
        lipschitz = sum(curvature.values()) / rows
        if spec.privacy is not None:  # the mean of average gradients: each client's bound
            lipschitz = max(v / profiles[c].rows for c, v in curvature.items())
        lipschitz = max(lipschitz, 1e-12)
        x = spec.warm_start.copy() if spec.warm_start is not None else np.zeros(p)
        point = x.copy()
        result = LassoResult(coef=x, lipschitz=lipschitz)
        privacy = spec.privacy
        z = privacy.multiplier(spec.max_iter) if privacy is not None else 0.0
        support = None
        if privacy is not None and privacy.select is not None:  # private support selection
            selection = spec.max_iter  # its own round index, after the iterations' 0..T-1
            LASSO.broadcast(fed, "point", Point(round=selection, coef=np.zeros(p)), to=clients)
            z_select = privacy.selection_multiplier()
            noisy = self._gradient(fed, clients, p, rows, selection, z_select)
            keep = min(privacy.select, p)
            support = np.sort(np.argsort(-np.abs(noisy))[:keep]).astype(np.int64)
            result.support = support
        with EpochProgress(fed.name, spec.max_iter, spec.verbose, desc="round") as shown:
            self._rounds(fed, clients, result, (x, point, p, rows, z, support), shown)
        x = result.coef
        LASSO.broadcast(fed, "point", Point(round=result.n_iter, coef=x, stop=True), to=clients)
        if privacy is not None and spec.ledger is not None and privacy.where == "central":
            spec.ledger.record(
                holder="every client",
                data="its whole data (Lasso gradients, central noise)",
                mechanism="gaussian",
                noise_multiplier=z,
                steps=result.n_iter,
            )
            if support is not None:
                spec.ledger.record(
                    holder="every client",
                    data="its whole data (the Lasso's support selection, central noise)",
                    mechanism="gaussian",
                    noise_multiplier=privacy.selection_multiplier(),
                    steps=1,
                )
        result.intercept = float(mean_y - mean_x @ x) if spec.fit_intercept else 0.0
        result.seconds = time.perf_counter() - began
        return result

    def _rounds(
        self,
        fed: Federation,
        clients: list[str],
        result: LassoResult,
        start: tuple[Vector, Vector, int, int, float, Vector | None],
        shown: EpochProgress,
    ) -> None:
        """The proximal steps from ``start`` (the coefficients, the point, the columns, the
        rows, the noise multiplier, DP's support), each shown live (``verbose``); the
        coefficients, rounds and steps end in ``result``."""
        spec = self.spec
        x, point, p, rows, z, support = start
        lipschitz, momentum = result.lipschitz, 1.0
        for round_ in range(spec.max_iter):
            began = time.perf_counter()
            LASSO.broadcast(
                fed, "point", Point(round=round_, coef=point, support=support), to=clients
            )
            grad = self._gradient(
                fed, clients, p if support is None else len(support), rows, round_, z
            )
            if support is not None:
                full = np.zeros(p)
                full[support] = grad
                grad = full
            step = point - grad / lipschitz
            new = soft_threshold(step, spec.alpha * spec.l1_ratio / lipschitz)
            if spec.l1_ratio < 1:
                new = new / (1 + spec.alpha * (1 - spec.l1_ratio) / lipschitz)
            if support is not None:  # the columns outside the selected support stay at zero
                mask = np.zeros(p, dtype=bool)
                mask[support] = True
                new[~mask] = 0.0
            moved = float(np.max(np.abs(new - x))) if p else 0.0
            result.history.append(moved)
            result.round_seconds.append(time.perf_counter() - began)
            shown.update(round_ + 1, step=moved)
            if spec.fista and spec.privacy is None:  # momentum would pile up DP's noise
                following = (1 + math.sqrt(1 + 4 * momentum**2)) / 2
                point = new + (momentum - 1) / following * (new - x)
                momentum = following
            else:
                point = new
            x = new
            result.coef = x
            result.n_iter = round_ + 1
            if spec.privacy is None and moved < spec.tol:
                shown.note(f"converged: no coefficient moved {spec.tol:g} or more")
                break

    def _gradient(
        self, fed: Federation, clients: list[str], p: int, rows: int, round_: int, z: float
    ) -> Vector:
        """The round's gradient of the smooth part (pooled, or under DP the clients' mean)."""
        spec = self.spec
        if spec.secure_aggregation is not None:
            from horizontal.secagg import server_round

            total, survivors = server_round(fed, clients, p, spec.secure_aggregation, round_)
            count = len(survivors)
        else:
            got = fed.gather(clients, LASSO.tag("grad", round_))
            total = np.zeros(p)
            for c, payload in got.items():
                message = Gradient.from_payload(payload, c)
                if message.round != round_ or message.values.shape != (p,):
                    Gradient.refuse(c, "values", f"is not round {round_}'s {p} numbers")
                total += message.values
            count = len(got)
        privacy = spec.privacy
        if privacy is None:
            out: Vector = total / rows
            return out
        if privacy.where == "central" and spec.secure_aggregation is None:
            from vfl.privacy import gaussian_noise

            total = total + gaussian_noise(p, sigma=z * privacy.clip)
        mean: Vector = total / max(count, 1)
        return mean


def _vector(value: Any, size: int, client: str, name: str) -> Vector:
    if value is None or np.shape(value) != (size,):
        Profile.refuse(client, name, f"is not {size} numbers")
    out: Vector = np.asarray(value, dtype=np.float64)
    return out
