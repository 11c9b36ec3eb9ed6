"""The roles of vertical Poisson regression: label party A, passive party B, coordinator C.

As FATE's hetero Poisson regression (a coordinator, "arbiter", holds the Paillier key), with
the gradient sums decrypted under masks (:mod:`vfl.crypto.masked`) and the loss computed from
encrypted pieces. The arithmetic, its bounds and fixed point are in
:mod:`vfl.linear.poisson_math`.

Setup.

1. C makes a key pair and sends the public key to A and B (``vpr/key``).
2. A and B agree on the batch seed (``vpr/seed``) and tell each other their row count, column
   count (A's with the intercept) and batch size (``vpr/plan``); each refuses batches too
   small for the other's column count (:func:`~vfl.training.schedule.check_batch_size`).
   Both tell C the same, plus the other's column count (``vpr/plan``); C refuses a mismatch,
   naming the party, and derives the layout of every request it will decrypt from these
   public numbers and its key's bits alone (:func:`~vfl.linear.poisson_math.masked_layout`
   of the public :func:`~vfl.linear.poisson_math.gradient_bound`): a request packed as
   its sender chose (one value per ciphertext, whole plaintexts) is refused, naming it.
   Past the layout C cannot check: a party that deviates can still fill a request with
   other ciphertexts under C's key, which gets it what a design of indicator columns gets
   it honestly (see the warning of :class:`~vfl.linear.VerticalPoissonRegression`). The
   requests are not routed through the other data party as the linear models' are
   (:mod:`vfl.linear.routing`): each is computed from its receiver's own plaintext columns
   (the label party's loss from its rates and counts), which no other party holds, so a
   forwarder could not check what it forwards.
3. Nothing of the targets leaves A, not even encrypted: a party holding ciphertexts under
   C's key could slip them into its masked requests and have C decrypt them (the loss's
   ``sum y u_B`` is formed by A from B's encrypted scores instead).

Per batch (A drives the epochs with ``vpr/epoch``, as the other linear protocols):

1. B -> A ``vpr/exp``: ``[[exp(u_B)]]`` of the batch's rows, fresh encryptions under C's key;
2. A -> B ``vpr/residual``: ``[[r]] = e exp(u_A) * [[exp(u_B)]] - y``, re-randomised;
3. A and B each -> C ``vpr/grad/req``, C -> each ``vpr/grad/plain``: ``[[X_p^T r]]`` (one
   multi-exponentiation per column), masked with fresh OS randomness ``KAPPA`` (40) bits
   longer than the value, decrypted by C, unmasked by the party: its exact gradient
   numerator, and a step of its own optimiser on its own weights.

Per epoch, the objective of the epoch's model (each party's mean iterate) over all rows:

4. B -> A ``vpr/exp-all``: ``[[exp(u_B)]]`` of every row, ``vpr/scores-all``: ``[[u_B]]`` of
   every row (both in parts), and ``vpr/loss-piece``: ``[[n alpha/2 |w_B|^2]]``;
5. A -> C ``vpr/loss/req``, C -> A ``vpr/loss/plain``: ``[[sum mu]]`` (one
   multi-exponentiation of B's ``[[exp(u_B)]]`` to A's rates ``e exp(u_A)``) minus
   ``[[sum y u_B]]`` (one of B's ``[[u_B]]`` to A's targets) plus B's penalty and A's own part,
   masked, decrypted once.

The exact loss of the epoch's model, rather than the running loss of the iterates, costs B
one more encryption per row and epoch; the running loss wanders by 1e-3 on a dvisits-like
table, more than the model's improvements, and early stopping would keep a lucky epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np
from scipy.special import xlogy

from vfl.crypto import EncryptedVector
from vfl.crypto.kernels import multiexp_big, multiexp_rows
from vfl.crypto.keys import PaillierPublicKey
from vfl.crypto.masked import decrypt_masked, serve_decryption
from vfl.crypto.messages import Encrypted
from vfl.crypto.policy import KeyPolicy, PublicKeyMessage, vector_from
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
from vfl.linear.common import FitResult
from vfl.linear.losses import penalty
from vfl.linear.model import FEATURE_BITS, PartyModel
from vfl.linear.poisson_math import (
    EXP_BITS,
    GRADIENT_EXPONENT,
    LABEL_BITS,
    LOSS_EXPONENT,
    PIECE_EXPONENT,
    RATE_BITS,
    RESIDUAL_EXPONENT,
    SCORE_BITS,
    check_partial_scores,
    gradient_bound,
    half_deviance,
    loss_bound,
    masked_layout,
    penalty_value,
    to_fixed,
)
from vfl.progress import EpochProgress
from vfl.training.control import EpochControl
from vfl.training.convergence import RESTART_FACTOR, LossCurve
from vfl.training.optimizers import make_optimizer
from vfl.training.schedule import Schedule, agree_seed, check_batch_size

__all__ = [
    "DECAY_STEPS",
    "LABELS_PER_MESSAGE",
    "VPR",
    "PartyWeights",
    "PoissonCoordinatorRole",
    "PoissonDataRole",
    "PoissonPlan",
    "PoissonSpec",
    "label_loss_part",
    "residuals",
]

logger = logging.getLogger(__name__)

VPR = Namespace("vpr")
LABELS_PER_MESSAGE = 2**16
"""Encrypted targets per setup message (32 MiB with 2048-bit keys)."""
DECAY_STEPS = 16
"""Adam's step halves after ``max(DECAY_STEPS, batches per epoch)`` steps (see
:class:`PartyWeights`)."""


@dataclass(frozen=True)
class PoissonPlan(Message):
    """A data party's public numbers: its rows, its columns (the label party's with the
    intercept), the batch size; to the coordinator also the other data party's columns as
    that party announced them."""

    KIND = "poisson plan"
    rows: int
    columns: int
    batch_size: int
    peer_columns: int = 0


@dataclass(frozen=True)
class PoissonSpec:
    """What every role of a fit agrees on."""

    label_party: str
    passive: str
    coordinator: str
    max_iter: int
    batch_size: int
    tol: float | None
    patience: int
    learning_rate: float
    optimizer: str
    alpha: float
    policy: KeyPolicy
    workers: Any
    random_state: int | None
    keep_views: bool = False
    verbose: int = 0


class PartyWeights:
    """One party's weights through training (the plaintext twin runs the same object).

    Per batch, a step of its optimiser on ``numerator / rows + alpha w`` (the intercept, last
    at the label party, unpenalised). Adam's step decays as ``learning_rate / (1 + t / T)``
    after ``t`` steps, ``T = max(16, batches per epoch)`` (about ``1 / (1 + epoch)``): at a
    constant step its mini-batch noise holds the coefficients 0.01-0.03 from the optimum
    on a dvisits-like table, with the decay within 0.003 (momentum and SGD decay on their
    own). Each epoch's model is the mean of its iterates. After each epoch
    the label party's word: keep that model, or (a divergence) go back to the kept one with
    the step times :data:`~vfl.training.convergence.RESTART_FACTOR` and a fresh optimiser.
    """

    def __init__(
        self,
        spec: PoissonSpec,
        w: np.ndarray[Any, Any],
        *,
        intercept: bool,
        batches: int,
    ) -> None:
        self.spec, self.intercept = spec, intercept
        self.w = self.model = self.kept = np.asarray(w, dtype=float)
        self.rate = spec.learning_rate
        self.optimizer = make_optimizer(spec.optimizer, learning_rate=self.rate)
        self.period = max(DECAY_STEPS, batches) if spec.optimizer == "adam" else 0
        self._sum = np.zeros_like(self.w)
        self._steps = self._t = 0

    def start_epoch(self) -> None:
        self._sum, self._steps = np.zeros_like(self.w), 0

    def step(self, numerator: np.ndarray[Any, Any], rows: int, epoch: int) -> None:
        grad = numerator / rows + penalty(self.w.copy(), self.spec.alpha, self.intercept)
        if self.period:
            self.optimizer.learning_rate = self.rate / (1.0 + self._t / self.period)
        self.w = self.optimizer.step(self.w, grad, epoch)
        self._sum = self._sum + self.w
        self._steps += 1
        self._t += 1

    def end_epoch(self) -> None:
        if self._steps:
            self.model = self._sum / self._steps

    def follow(self, control: EpochControl) -> bool:
        """Apply the label party's word; True to go on."""
        if control.restart:
            self.w = self.kept
            self.rate *= RESTART_FACTOR
            self.optimizer = make_optimizer(self.spec.optimizer, learning_rate=self.rate)
        elif control.keep:
            self.kept = self.model
        return not control.stop


def residuals(
    exp_b: EncryptedVector, rate: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
) -> EncryptedVector:
    """``[[e exp(u_A) exp(u_B) - y]]`` from ``[[exp(u_B)]]`` (exponent ``-EXP_BITS``), the
    label party's ``rate = e exp(u_A)`` and targets: each ciphertext raised to the rate's fixed
    point, then ``y`` subtracted; exponent :data:`RESIDUAL_EXPONENT`, not re-randomised (its
    ``to_wire`` does that)."""
    nsq = exp_b.public_key.nsquare
    powers = to_fixed(rate, RATE_BITS)
    products = [gmpy2.powmod(c, k, nsq) for c, k in zip(exp_b.ciphertexts, powers, strict=True)]
    return EncryptedVector(exp_b.public_key, products, exp_b.exponent - RATE_BITS) - y


def label_loss_part(
    y: np.ndarray[Any, Any], exposure: np.ndarray[Any, Any], u: np.ndarray[Any, Any]
) -> float:
    """The label party's plaintext part of the summed half deviance,
    ``sum [y log y - y - y (log e + u_A)]``; with ``[[sum mu]]`` and ``-[[sum y u_B]]`` the
    whole."""
    return float(np.sum(xlogy(y, y) - y - y * (np.log(exposure) + u)))


def _gradient(x_int: np.ndarray[Any, Any], r: EncryptedVector) -> EncryptedVector:
    """``[[x^T r]]`` for features already in fixed point (``(rows, columns)`` int64)."""
    products = multiexp_rows(r.ciphertexts, list(x_int.T), r.public_key.nsquare)
    return EncryptedVector(r.public_key, products, r.exponent - FEATURE_BITS)


class PoissonDataRole:
    """A data party's side of training (the label party's when ``targets`` is given).

    Parameters
    ----------
    spec : PoissonSpec
    part : PartyModel
        This party's fresh part (the label party's with its starting intercept).
    x : array (rows, columns)
        Its design matrix, ``part.design(frame)``.
    targets, exposure : arrays (rows,), optional
        At the label party only.
    """

    def __init__(
        self,
        spec: PoissonSpec,
        part: PartyModel,
        x: np.ndarray[Any, Any],
        targets: np.ndarray[Any, Any] | None = None,
        exposure: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.spec, self.part = spec, part
        self.is_label = targets is not None
        self.features = x
        self.x = np.column_stack([x, np.ones(len(x))]) if self.is_label else x
        self.x_int = np.rint(np.ldexp(self.x, FEATURE_BITS)).astype(np.int64)
        self.y = targets
        self.exposure = exposure if exposure is not None else np.ones(len(x))
        self.view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] | None = (
            [] if spec.keep_views else None
        )

    @property
    def other(self) -> str:
        spec = self.spec
        return spec.passive if self.is_label else spec.label_party

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        began = time.perf_counter()
        key = spec.policy.accept(
            VPR.recv(fed, spec.coordinator, "key", PublicKeyMessage), spec.coordinator
        )
        parties = [spec.label_party, spec.passive]
        seed = agree_seed(fed, parties, VPR.tag("seed"), spec.random_state)
        peer_columns = self.agree_plan(fed)
        rows, columns = self.x.shape
        plan = PoissonPlan(rows, columns, spec.batch_size, peer_columns)
        VPR.send(fed, spec.coordinator, "plan", plan)
        setup = time.perf_counter() - began
        schedule = Schedule(rows, spec.batch_size, seed)
        weights = PartyWeights(
            spec,
            self.part.weights(with_intercept=self.is_label)[:, 0],
            intercept=self.is_label,
            batches=schedule.batches_per_epoch(),
        )
        if self.is_label:
            result = self.lead(fed, key, schedule, weights)
        else:
            result = self.follow(fed, key, schedule, weights)
        self.part.set_weights(weights.kept[:, None], with_intercept=self.is_label)
        result.part, result.setup_seconds, result.view = self.part, setup, self.view
        return result

    # -- setup ---------------------------------------------------------------------------------

    def agree_plan(self, fed: Federation) -> int:
        """Exchange the public plan with the other data party; its column count."""
        spec, other = self.spec, self.other
        rows, columns = self.x.shape
        VPR.send(fed, other, "plan", PoissonPlan(rows, columns, spec.batch_size))
        theirs = VPR.recv(fed, other, "plan", PoissonPlan)
        if theirs.rows != rows:
            PoissonPlan.refuse(other, "rows", f"is {theirs.rows}; party {fed.name!r} has {rows}")
        if theirs.batch_size != spec.batch_size:
            PoissonPlan.refuse(
                other,
                "batch_size",
                f"is {theirs.batch_size}; party {fed.name!r} uses {spec.batch_size}",
            )
        if not 1 <= theirs.columns < rows:
            PoissonPlan.refuse(other, "columns", f"is {theirs.columns}, not a column count")
        # its gradient of each batch is X^T r over our residuals: enough rows per batch that
        # it cannot be solved for per-row values (checked by us, not only by it)
        check_batch_size(other, rows, theirs.columns, spec.batch_size)
        return theirs.columns

    # -- training --------------------------------------------------------------------------------

    def open_gradient(
        self, fed: Federation, rows: np.ndarray[Any, Any], r: EncryptedVector
    ) -> np.ndarray[Any, Any]:
        """This party's exact gradient numerator ``X[rows]^T r``, decrypted by the coordinator
        under masks."""
        encrypted = _gradient(self.x_int[rows], r)
        values = decrypt_masked(
            fed,
            self.spec.coordinator,
            VPR.child("grad"),
            encrypted,
            bound=gradient_bound(len(self.x)),
        )
        out = np.asarray(values, dtype=float)
        if self.view is not None:
            self.view.append((rows.copy(), out.copy()))
        return out

    def lead(
        self, fed: Federation, key: PaillierPublicKey, schedule: Schedule, weights: PartyWeights
    ) -> FitResult:
        """The label party: drives the epochs, computes the residuals, learns the loss of each
        epoch's model over all rows."""
        spec, name = self.spec, fed.name
        if self.y is None:
            raise RuntimeError("only the label party leads the epochs")
        y, e = self.y, self.exposure
        initial = half_deviance(y, e * np.exp(self.x @ weights.w)) / len(y)
        curve = LossCurve.restarting(spec.tol, spec.patience, initial)
        epochs = schedule.epochs()
        with EpochProgress(name, spec.max_iter, spec.verbose) as shown:
            return self._epochs(fed, key, weights, curve, (y, e, epochs), shown)

    def _epochs(
        self,
        fed: Federation,
        key: PaillierPublicKey,
        weights: PartyWeights,
        curve: LossCurve,
        data: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], Any],
        shown: EpochProgress,
    ) -> FitResult:
        """The label party's epochs (``data``: its counts, its exposure and the schedule's
        epochs), each shown live with ``verbose`` and logged."""
        spec, name, other = self.spec, fed.name, self.other
        y, e, epochs = data
        result = FitResult(part=None)
        followers = [other, spec.coordinator]
        for epoch in range(spec.max_iter):
            began = time.perf_counter()
            control = EpochControl(stop=False, keep=curve.keep, restart=curve.restart)
            VPR.broadcast(fed, "epoch", control, to=followers)
            weights.follow(control)
            weights.start_epoch()
            for rows in next(epochs):
                u = self.x[rows] @ weights.w
                check_partial_scores(u, name)
                exp_b = vector_from(key, VPR.recv(fed, other, "exp", Encrypted).data, other)
                if exp_b.shape != (len(rows),) or exp_b.exponent != -EXP_BITS:
                    Encrypted.refuse(
                        other,
                        "data",
                        f"holds {exp_b.shape} values at exponent {exp_b.exponent}, not "
                        f"{len(rows)} at {-EXP_BITS}",
                    )
                r = residuals(exp_b, e[rows] * np.exp(u), y[rows])
                VPR.send(fed, other, "residual", Encrypted(data=r.to_wire()))
                weights.step(self.open_gradient(fed, rows, r), len(rows), epoch)
            weights.end_epoch()
            loss = self.model_loss(fed, key, weights.model)
            result.epoch_seconds.append(time.perf_counter() - began)
            stop = curve.add(loss)
            shown.update(epoch + 1, loss=loss, step=weights.rate, best=curve.best_epoch)
            if curve.restart:
                shown.note(f"epoch {epoch + 1} diverged: back to epoch {curve.best_epoch}")
            if stop:
                result.converged = not curve.gave_up
                break
        control = EpochControl(stop=True, keep=curve.keep)
        VPR.broadcast(fed, "epoch", control, to=followers)
        weights.follow(control)
        result.best_epoch, result.restarts = curve.best_epoch, list(curve.restarts)
        result.gave_up = curve.gave_up
        result.loss_curve, result.n_iter = list(curve.values), len(curve.values)
        return result

    def model_loss(
        self, fed: Federation, key: PaillierPublicKey, model: np.ndarray[Any, Any]
    ) -> float:
        """The objective at the epoch's model over all rows (half mean deviance plus penalty):
        ``[[sum mu]]`` by one multi-exponentiation of the passive party's ``[[exp(u_B)]]``
        (all rows) to the label party's rates, minus the passive party's ``[[sum y u_B - n
        alpha/2 |w_B|^2]]``, plus the label party's own part; decrypted once by the
        coordinator under a mask."""
        other, y, e = self.other, self.y, self.exposure
        if y is None:
            raise RuntimeError("only the label party learns the loss")
        u = self.x @ model
        check_partial_scores(u, fed.name)
        powers = to_fixed(e * np.exp(u), RATE_BITS)
        nsq = key.nsquare
        mu = gmpy2.mpz(1)  # each part multiplied in as it arrives: no copy of all rows held
        for lo, ciphertexts in _receive_parts(fed, key, other, "exp-all", len(y), -EXP_BITS):
            mu = mu * multiexp_big(ciphertexts, powers[lo : lo + len(ciphertexts)], nsq) % nsq
        counts = np.rint(np.ldexp(y, LABEL_BITS)).astype(object)  # exact: y * 2**LABEL_BITS
        yu = gmpy2.mpz(1)  # [[sum y u_B]], formed here: the targets never leave this party
        for lo, ciphertexts in _receive_parts(fed, key, other, "scores-all", len(y), -SCORE_BITS):
            exponents = [int(c) for c in counts[lo : lo + len(ciphertexts)]]
            yu = yu * multiexp_big(ciphertexts, exponents, nsq) % nsq
        penalty = vector_from(key, VPR.recv(fed, other, "loss-piece", Encrypted).data, other)
        if penalty.shape != (1,) or penalty.exponent != PIECE_EXPONENT:
            Encrypted.refuse(
                other,
                "data",
                f"holds {penalty.shape} values at exponent {penalty.exponent}, not "
                f"one penalty at {PIECE_EXPONENT}",
            )
        piece = EncryptedVector(key, [yu], PIECE_EXPONENT) - penalty
        if piece.shape != (1,) or piece.exponent != PIECE_EXPONENT:
            Encrypted.refuse(
                other,
                "data",
                f"holds {piece.shape} values at exponent {piece.exponent}, not "
                f"one loss piece at {PIECE_EXPONENT}",
            )
        total = EncryptedVector(key, [mu], RESIDUAL_EXPONENT) - piece
        own = label_loss_part(y, e, u) + len(y) * penalty_value(
            model, self.spec.alpha, fed.name, intercept=True
        )
        value = total + own
        if value.exponent != LOSS_EXPONENT:
            raise RuntimeError("the loss is not at the agreed exponent")
        out = decrypt_masked(
            fed, self.spec.coordinator, VPR.child("loss"), value, bound=loss_bound(len(y))
        )
        return float(out[0]) / len(y)

    def follow(
        self,
        fed: Federation,
        key: PaillierPublicKey,
        schedule: Schedule,
        weights: PartyWeights,
    ) -> FitResult:
        """The passive party: ``[[exp(u_B)]]`` per batch; for the loss of each epoch's model,
        ``[[exp(u_B)]]`` and ``[[u_B]]`` of every row and ``[[n alpha/2 |w_B|^2]]``."""
        name, label = fed.name, self.other
        epochs = schedule.epochs()
        epoch = 0
        while weights.follow(VPR.recv(fed, label, "epoch", EpochControl)):
            weights.start_epoch()
            for rows in next(epochs):
                u = self.x[rows] @ weights.w
                check_partial_scores(u, name)
                exp_b = self.encrypt_exp(key, u)
                VPR.send(fed, label, "exp", Encrypted(data=exp_b.to_wire()))
                r = vector_from(key, VPR.recv(fed, label, "residual", Encrypted).data, label)
                if r.shape != (len(rows),) or r.exponent != RESIDUAL_EXPONENT:
                    Encrypted.refuse(
                        label,
                        "data",
                        f"holds {r.shape} residuals at exponent {r.exponent}, not "
                        f"{len(rows)} at {RESIDUAL_EXPONENT}",
                    )
                weights.step(self.open_gradient(fed, rows, r), len(rows), epoch)
            weights.end_epoch()
            self.send_model_scores(fed, key, weights.model)
            epoch += 1
        return FitResult(part=None, n_iter=epoch)

    def encrypt_exp(self, key: PaillierPublicKey, u: np.ndarray[Any, Any]) -> EncryptedVector:
        """``[[exp(u)]]`` at exponent ``-EXP_BITS``: fresh encryptions."""
        plain = to_fixed(np.exp(u), EXP_BITS)
        ciphertexts = key.raw_encrypt(plain, workers=self.spec.workers)
        return EncryptedVector(key, ciphertexts, -EXP_BITS, fresh=True)

    def send_model_scores(
        self,
        fed: Federation,
        key: PaillierPublicKey,
        model: np.ndarray[Any, Any],
    ) -> None:
        """For the loss of the epoch's model: ``[[exp(u_B)]]`` and ``[[u_B]]`` of every row
        (in parts) and ``[[n alpha/2 |w_B|^2]]``, all under the coordinator's key."""
        label = self.other
        u = self.x @ model
        check_partial_scores(u, fed.name)
        for k, lo in enumerate(range(0, len(u), LABELS_PER_MESSAGE)):
            exp_b = self.encrypt_exp(key, u[lo : lo + LABELS_PER_MESSAGE])
            VPR.send(fed, label, "exp-all", Encrypted(data=exp_b.to_wire()), k)
        for k, lo in enumerate(range(0, len(u), LABELS_PER_MESSAGE)):
            part = key.encrypt(
                u[lo : lo + LABELS_PER_MESSAGE],
                precision=2.0**-SCORE_BITS,
                workers=self.spec.workers,
            )
            VPR.send(fed, label, "scores-all", Encrypted(data=part.to_wire()), k)
        own = len(u) * penalty_value(model, self.spec.alpha, fed.name, intercept=False)
        penalty = key.encrypt(np.array([own]), precision=2.0**PIECE_EXPONENT)
        VPR.send(fed, label, "loss-piece", Encrypted(data=penalty.to_wire()))


def _receive_parts(
    fed: Federation, key: PaillierPublicKey, sender: str, step: str, n: int, exponent: int
) -> Iterator[tuple[int, list[Any]]]:
    """``(first row, ciphertexts)`` of one value per row from ``sender``, part by part
    (:data:`LABELS_PER_MESSAGE` each), each checked for its size and exponent."""
    for k, lo in enumerate(range(0, n, LABELS_PER_MESSAGE)):
        size = min(n, lo + LABELS_PER_MESSAGE) - lo
        vec = vector_from(key, VPR.recv(fed, sender, step, Encrypted, k).data, sender)
        if vec.shape != (size,) or vec.exponent != exponent:
            Encrypted.refuse(
                sender,
                "data",
                f"holds {vec.shape} values at exponent {vec.exponent}, not {size} at {exponent}",
            )
        yield lo, vec.ciphertexts


class PoissonCoordinatorRole:
    """The key holder: sends its public key, checks the data parties' plans against each
    other, then decrypts per batch one masked gradient request of each data party and per
    epoch the label party's masked loss, each pinned to the layout it derives itself."""

    def __init__(self, spec: PoissonSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        label, passive = spec.label_party, spec.passive
        public_key, private_key = spec.policy.generate()
        VPR.broadcast(fed, "key", PublicKeyMessage.of(public_key), to=[label, passive])
        plans = {p: VPR.recv(fed, p, "plan", PoissonPlan) for p in (label, passive)}
        rows = plans[label].rows
        if rows < 1:
            PoissonPlan.refuse(label, "rows", f"is {rows}, not a row count")
        for p, q in ((label, passive), (passive, label)):
            plan = plans[p]
            if plan.rows != rows:
                PoissonPlan.refuse(p, "rows", f"is {plan.rows}; party {label!r} has {rows}")
            if plan.batch_size != spec.batch_size:
                PoissonPlan.refuse(
                    p, "batch_size", f"is {plan.batch_size}; this job's is {spec.batch_size}"
                )
            if plan.peer_columns != plans[q].columns:  # q told p one count and us another
                PoissonPlan.refuse(
                    q,
                    "columns",
                    f"is {plans[q].columns} to the coordinator, but party {p!r} received "
                    f"{plan.peer_columns}",
                )
            if not 1 <= plan.columns <= rows:
                PoissonPlan.refuse(p, "columns", f"is {plan.columns}, not a column count")
        bits = public_key.n_length
        layouts = {
            p: masked_layout(plans[p].columns, gradient_bound(rows), GRADIENT_EXPONENT, bits)
            for p in (label, passive)
        }
        loss_layout = masked_layout(1, loss_bound(rows), LOSS_EXPONENT, bits)
        per_epoch = Schedule(rows, spec.batch_size, 0).batches_per_epoch()
        epochs = 0
        while not VPR.recv(fed, label, "epoch", EpochControl).stop:
            for _ in range(per_epoch):
                for p in (label, passive):
                    serve_decryption(
                        fed,
                        p,
                        VPR.child("grad"),
                        private_key,
                        expected=layouts[p].n_ciphertexts,
                        layout=layouts[p],
                    )
            serve_decryption(
                fed,
                label,
                VPR.child("loss"),
                private_key,
                expected=loss_layout.n_ciphertexts,
                layout=loss_layout,
            )
            epochs += 1
        return FitResult(part=None, n_iter=epochs)
