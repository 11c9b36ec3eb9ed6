"""The roles of vertical linear training: label party, passive parties, coordinator.

Each role is an object built with its own party's data only and called with that party's
federation; it returns a :class:`FitResult` (it never writes to the estimator). The estimator
builds them in :mod:`vfl.linear.base`; :mod:`vfl.estimator` runs them in simulation or
deployment.

The label party drives the epochs. Per batch, every data party computes its partial scores
``u_p = X_p W_p`` (one column per output) and its vector ``z_p`` -- ``u_A - t(y)`` at the label
party, ``u_k`` at a passive party -- and the gradient exchange (:mod:`vfl.linear.exchange`)
gives each party ``X_p^T sum_q z_q``, its gradient numerator. The loss needs
``|sum_q z_q|^2``, which splits into the label party's ``|z_A|^2``, each passive's
``2 w_k^T G_k + |u_k|^2`` (``G_k`` the share it decrypted, so ``w_k^T G_k`` is the inner product
of its scores with the others') and, with two or more passives, cross terms ``-2 u_k . u_l``:
each passive but the last sends its encrypted scores to every later one, which returns the
inner products encrypted. Every encrypted piece of the loss is a multiple of
``2**LOSS_EXPONENT``. The label party learns the total once per epoch.

Under ``coordinator`` no party reads the decryption of ciphertexts it chose
(:mod:`vfl.linear.routing`). A passive party's gradient request is assembled by the label
party, the label party's by the first passive party: the receiver sends its assembler only
its masks, in the clear, and the coordinator answers the receiver. The loss goes the same
way: the passives' pieces and cross terms go to the first passive party, not to the label
party, which sends it its masks and adds its own ``|z_A|^2`` to what the coordinator
returns. What each role sees: a data party, its own exact gradient of each batch (the
label party also the loss of each epoch) and, as an assembler, ciphertexts and the masks
of the party it assembles for, never the masked value; the coordinator, values masked
``KAPPA`` (40) bits beyond their bound. The cost is the same: one decryption per data party
and batch and one per epoch, the masks encrypted once by the assembler instead of the
receiver, as many messages.

What the coordinator checks (:func:`check_setup`, then every request): every party trains the
label party's outputs and has its rows; each party's packing is the one the public sizes
give (rows, batch size, contributing parties, key bits, its column count:
:class:`~vfl.linear.exchange.PublicSizes`) and the one its peers received; each gradient
request comes from the receiver's assembler with exactly the masked layout of the
receiver's packing, and each loss request from the first passive party with the layout of
one value within :data:`~vfl.linear.losses.LOSS_BOUND` (:func:`loss_layout`). Nothing a
party announces sizes what the coordinator decrypts: a packing chosen by the requester (one
1020-bit slot per ciphertext) would have it open one whole plaintext per column and batch.

.. warning::
   The coordinator cannot see past the masks, nor an assembler into the ciphertexts it
   multiplies: a deviating assembler (or a party whose share it multiplies in) can put
   other ciphertexts under the coordinator's key into a request of the agreed layout --
   e.g. a third party's encrypted rows -- and have them opened for the receiver, behind
   nothing but the receiver's own masks. The deviating party itself sees nothing, so this
   leaks only to two data parties pooling what they see. A party's own encrypted rows are
   ciphertexts of its choosing too (see :mod:`vfl.linear.exchange`). A party can also send
   values of its own within their public bounds that the protocol did not compute: under
   label DP, rows not clipped to the agreed norm get less noise than their gradients need,
   and no peer can tell (a packing is the same whatever the rows). Malicious parties are
   out of scope.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from vfl.crypto import EncryptedVector
from vfl.crypto.kernels import multiexp_rows
from vfl.crypto.keys import PaillierPublicKey
from vfl.crypto.masked import serve_decryption
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import PackingLayout
from vfl.crypto.policy import PublicKeyMessage, vector_from
from vfl.federation.base import Federation
from vfl.linear.common import (
    DataParty,
    FitResult,
    FitSpec,
    finish,
    loss_curve,
    party_step,
    penalty_weight,
    show_epoch,
)
from vfl.linear.exchange import GRAD, SCORE_BITS, GradientExchange, PublicSizes
from vfl.linear.losses import LOSS_BOUND, MAX_OUTPUTS, SCORE_BOUND, check_scores, penalty
from vfl.linear.messages import VLR, SetupCounts
from vfl.linear.model import FEATURE_BITS
from vfl.linear.poisson_math import masked_layout
from vfl.linear.routing import assemble, assembler_of, receive_opened, send_masks, slot_masks
from vfl.privacy.mechanisms import gaussian_noise
from vfl.progress import EpochProgress
from vfl.training.control import EpochControl
from vfl.training.convergence import RESTART_FACTOR
from vfl.training.optimizers import make_optimizer
from vfl.training.schedule import Schedule, agree_seed, auto_batch_size

__all__ = [
    "LOSS_EXPONENT",
    "CoordinatorRole",
    "DataRole",
    "check_setup",
    "label_sensitivity",
    "loss_layout",
    "loss_piece",
    "project",
    "record_label_dp",
    "weight_radius",
]

logger = logging.getLogger(__name__)

LOSS = VLR.child("loss")
"""The tags of the label party's routed loss decryption (``vlr/loss/masks``, ``req``,
``plain``)."""
LOSS_EXPONENT = -2 * SCORE_BITS
"""Every encrypted piece of the loss is a multiple of ``2**LOSS_EXPONENT`` (the cross terms,
products of two scores at ``2**-SCORE_BITS``, are exactly that)."""


class DataRole(DataParty):
    """A data party's side of the revealing protocols (``coordinator``, ``two_party``; the
    label party's when ``targets`` is given): see the module docstring and
    :class:`~vfl.linear.common.DataParty` for the parameters."""

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        began = time.perf_counter()
        outputs = self.agree_outputs(fed)
        seed = agree_seed(fed, spec.data_parties, VLR.tag("seed"), spec.random_state)
        exchange = GradientExchange(
            fed,
            self.x,
            list(spec.data_parties),
            label_party=spec.label_party,
            outputs=outputs,
            batch_size=spec.batch_size,
            coordinator=spec.coordinator,
            policy=spec.policy,
            workers=spec.workers,
            keep_view=spec.keep_views,
        )
        if spec.label_noise is not None and self.targets is not None:
            exchange.noise = {
                p: label_sensitivity(spec, peer.packing.columns, outputs) * spec.label_noise
                for p, peer in exchange.peers.items()
            }
        if spec.coordinator is not None:  # it decrypts only requests of the derived size
            VLR.send(fed, spec.coordinator, "setup", exchange.setup_counts())
        setup = time.perf_counter() - began
        schedule = Schedule(len(self.x), spec.batch_size, seed)
        w = self.part.weights(with_intercept=self.is_label)
        trainer: _Trainer
        if self.targets is not None:
            trainer = _LabelTrainer(fed, spec, self.x, w, exchange, self.targets)
        else:
            trainer = _PassiveTrainer(fed, spec, self.x, w, exchange)
        result = trainer.run(schedule)
        if spec.label_noise is not None and self.targets is not None:
            record_label_dp(spec, fed.name, result.n_iter)
        self.part.set_weights(trainer.kept, with_intercept=self.is_label)
        result.part, result.setup_seconds, result.view = self.part, setup, exchange.view
        return result


class _Trainer:
    def __init__(
        self,
        fed: Federation,
        spec: FitSpec,
        x: np.ndarray[Any, Any],
        w: np.ndarray[Any, Any],
        exchange: GradientExchange,
    ) -> None:
        self.fed, self.spec, self.x, self.w, self.exchange = fed, spec, x, w, exchange
        self.rate = party_step(spec, x)
        self.optimizer = make_optimizer(spec.optimizer, learning_rate=self.rate)
        self.model = w  # the last epoch's mean iterate
        self.kept = w  # what the fit returns: the model of the best epoch (LossCurve)
        self._sum: np.ndarray[Any, Any] = np.zeros_like(w)
        self._steps = 0
        self.radius = weight_radius(x, len(spec.data_parties))

    def step(self, grad: np.ndarray[Any, Any], rows: int, epoch: int, intercept: bool) -> None:
        scaled = grad / (self.spec.loss.c * rows) + penalty(self.w, self.spec.alpha, intercept)
        self.w = project(self.optimizer.step(self.w, scaled, epoch), self.radius)
        self._sum = self._sum + self.w
        self._steps += 1

    def start_epoch(self) -> None:
        self._sum, self._steps = np.zeros_like(self.w), 0

    def end_epoch(self) -> None:
        """The epoch's model is the mean of its iterates (each party its own weights; the
        optimiser goes on from the last iterate)."""
        if self._steps:
            self.model = self._sum / self._steps

    def penalty_term(self, intercept: bool) -> float:
        """This party's share of the penalty in the loss's sum-of-squares units, at the
        epoch's model: the tracked loss is the objective ``loss + alpha |w|^2 / 2`` (the
        intercept unpenalised), so early stopping and the divergence rule follow what is
        minimised, not the data term alone (which a strong penalty makes rise)."""
        w = self.model[:-1] if intercept else self.model
        return penalty_weight(self.spec, len(self.x)) * float(np.sum(w * w))

    def control(self, message: EpochControl) -> bool:
        """Follow the label party's word: keep the last epoch's model if it says so, or go
        back to the kept one with a smaller step and a fresh optimiser (a divergence); True
        to go on."""
        if message.restart:
            self.w = self.kept
            self.rate *= RESTART_FACTOR
            self.optimizer = make_optimizer(self.spec.optimizer, learning_rate=self.rate)
        elif message.keep:
            self.kept = self.model
        return not message.stop

    def run(self, schedule: Schedule) -> FitResult:
        raise NotImplementedError


class _LabelTrainer(_Trainer):
    """The label party: drives the epochs, computes ``z = u_A - t(y)`` and learns the loss."""

    def __init__(
        self,
        fed: Federation,
        spec: FitSpec,
        x: np.ndarray[Any, Any],
        w: np.ndarray[Any, Any],
        exchange: GradientExchange,
        targets: np.ndarray[Any, Any],
    ) -> None:
        super().__init__(fed, spec, x, w, exchange)
        self.t = targets
        self.own = 0.0
        self.followers = [*spec.passives, *([spec.coordinator] if spec.coordinator else [])]

    def run(self, schedule: Schedule) -> FitResult:
        with EpochProgress(self.fed.name, self.spec.max_iter, self.spec.verbose) as shown:
            return self._run(schedule, shown)

    def _run(self, schedule: Schedule, shown: EpochProgress) -> FitResult:
        result = FitResult(part=None, steps=[self.rate])
        curve = loss_curve(self.spec, self.t)
        epochs = schedule.epochs()
        for epoch in range(self.spec.max_iter):
            began = time.perf_counter()
            control = EpochControl(stop=False, keep=curve.keep, restart=curve.restart)
            VLR.broadcast(self.fed, "epoch", control, to=self.followers)
            self.control(control)
            self.start_epoch()
            for rows in next(epochs):
                self.train_batch(rows, epoch)
            self.end_epoch()
            self.own += self.penalty_term(intercept=True)
            loss = self.epoch_loss(len(self.x))
            result.epoch_seconds.append(time.perf_counter() - began)
            stop = curve.add(loss)
            show_epoch(shown, epoch, loss, self.rate, curve)
            if stop:
                result.converged = not curve.gave_up
                break
        control = EpochControl(stop=True, keep=curve.keep)
        VLR.broadcast(self.fed, "epoch", control, to=self.followers)
        self.control(control)
        finish(result, curve)
        return result

    def train_batch(self, rows: np.ndarray[Any, Any], epoch: int) -> None:
        x = self.x[rows]
        u = x @ self.w
        check_scores(u, self.fed.name)
        z = u - self.t[rows]
        grad = x.T @ z + self.exchange.remote(rows, z)
        if self.spec.label_noise is not None:  # its own weights, too, follow noisy gradients
            columns = self.x.shape[1] - 1
            sigma = label_sensitivity(self.spec, columns, z.shape[1], intercept=True)
            noise = gaussian_noise(grad.shape, sigma=sigma * self.spec.label_noise)
            grad = grad + np.round(noise * 2.0**FEATURE_BITS) / 2.0**FEATURE_BITS
        self.own += float(np.sum(z * z))
        self.step(grad, len(rows), epoch, intercept=True)

    def epoch_loss(self, n: int) -> float:
        """The epoch's mean training loss: the passive parties' part of ``|sum_q z_q|^2``
        (their pieces and cross terms), decrypted once, plus its own ``|z_A|^2`` and penalty.

        Under ``coordinator`` it chooses no ciphertext of that decryption: the first passive
        party assembles the request from the pieces and the masks this party sends it, and
        the coordinator answers this party (:mod:`vfl.linear.routing`)."""
        own, self.own = self.own, 0.0
        if self.exchange.secret is not None:  # two_party: the one passive's piece, our key
            (passive,) = self.spec.passives
            piece = loss_piece(self.exchange.key, self.fed, passive)
            rest = float(self.exchange.secret.decrypt(piece)[0])
        else:
            holder = self.spec.coordinator
            if holder is None:
                raise RuntimeError("no key holder to decrypt the loss")
            masks = slot_masks(loss_layout(self.exchange.key.n_length), LOSS_EXPONENT)
            send_masks(self.fed, self.exchange.assembler(self.fed.name), LOSS, masks)
            (value,) = receive_opened(self.fed, holder, LOSS, masks)
            rest = math.ldexp(value, LOSS_EXPONENT)
        return self.spec.loss.mean_loss(rest + own, n, self.t.shape[1])


class _PassiveTrainer(_Trainer):
    """A passive party: ``z = u_k``, its partial scores; it sends its loss piece per epoch.

    With two or more passives, the cross terms ``-2 u_k . u_l`` of the loss: each passive
    but the last sends its encrypted scores to every later one, which returns ``u_k . u_l``
    under encryption to the first passive party, the assembler of the label party's loss
    request (:func:`~vfl.linear.routing.assembler_of`), never to the label party, which
    must not choose what is decrypted for it."""

    def __init__(
        self,
        fed: Federation,
        spec: FitSpec,
        x: np.ndarray[Any, Any],
        w: np.ndarray[Any, Any],
        exchange: GradientExchange,
    ) -> None:
        super().__init__(fed, spec, x, w, exchange)
        self.position = spec.passives.index(fed.name)
        self.piece = 0.0
        self.cross: EncryptedVector | None = None  # at the loss's assembler: the cross terms
        self.assembler = exchange.assembler(spec.label_party)

    def run(self, schedule: Schedule) -> FitResult:
        label = self.spec.label_party
        epochs = schedule.epochs()
        epoch = 0
        while self.control(VLR.recv(self.fed, label, "epoch", EpochControl)):
            self.start_epoch()
            for rows in next(epochs):
                self.train_batch(rows, epoch)
            self.end_epoch()
            self.piece += self.penalty_term(intercept=False)
            self.send_loss_piece()
            self.piece = 0.0
            epoch += 1
        return FitResult(part=None, n_iter=epoch)

    def train_batch(self, rows: np.ndarray[Any, Any], epoch: int) -> None:
        x = self.x[rows]
        u = x @ self.w
        check_scores(u, self.fed.name)
        later = self.spec.passives[self.position + 1 :]
        if later:  # for the cross terms of the later passives
            scores = self.exchange.key.encrypt(u.ravel(), precision=2.0**-SCORE_BITS)
            for p in later:
                VLR.send(self.fed, p, "u", Encrypted(data=scores.to_wire()))
        remote = self.exchange.remote(rows, u)
        grad = x.T @ u + remote
        self.piece += float(2 * np.sum(self.w * remote) + np.sum(u * u))
        if self.position:
            self.send_cross_sum(u)
        elif len(self.spec.passives) > 1:
            self.add_cross_sums()
        self.step(grad, len(rows), epoch, intercept=False)

    def send_cross_sum(self, u: np.ndarray[Any, Any]) -> None:
        """``sum over earlier passives l of u . u_l``, under encryption, to the assembler of
        the label party's loss."""
        key = self.exchange.key
        others = []
        for q in self.spec.passives[: self.position]:
            other = vector_from(key, VLR.recv(self.fed, q, "u", Encrypted).data, q)
            if other.shape != (u.size,) or other.exponent != -SCORE_BITS:
                Encrypted.refuse(q, "data", f"are not {u.size} scores at exponent {-SCORE_BITS}")
            others.append(other)
        # exact fixed-point integers, so the result's exponent is the same public constant in
        # every batch (a data-dependent exponent would tell the label party |u|'s magnitude)
        flat = np.round(u.ravel() * 2.0**SCORE_BITS).astype(np.int64)
        products = [multiexp_rows(o.ciphertexts, [flat], key.nsquare)[0] for o in others]
        total = EncryptedVector(key, products[:1], LOSS_EXPONENT)
        for c in products[1:]:
            total = total + EncryptedVector(key, [c], LOSS_EXPONENT)
        VLR.send(self.fed, self.assembler, "cross-sum", Encrypted(data=total.to_wire()))

    def add_cross_sums(self) -> None:
        """The loss's assembler: ``-2 u_k . u_l`` from every later passive, kept encrypted."""
        for p in self.spec.passives[1:]:
            total = loss_piece(self.exchange.key, self.fed, p, "cross-sum") * -2
            self.cross = total if self.cross is None else self.cross + total

    def send_loss_piece(self) -> None:
        """The epoch's piece ``2 w^T G + |u|^2`` (and penalty), encrypted: to the label party
        (``two_party``, under its key) or to the assembler of its loss request; the
        assembler itself assembles the request (:meth:`assemble_loss`)."""
        fed, label, coordinator = self.fed, self.spec.label_party, self.exchange.coordinator
        if coordinator is not None and self.assembler == fed.name:
            self.assemble_loss(coordinator)
            return
        piece = self.exchange.keys[label].encrypt(
            np.array([self.piece]), precision=2.0**LOSS_EXPONENT
        )
        to = label if coordinator is None else self.assembler
        VLR.send(fed, to, "loss-piece", Encrypted(data=piece.to_wire()))

    def assemble_loss(self, coordinator: str) -> None:
        """The label party's loss request: our piece, the other passives' encrypted pieces
        and the epoch's cross terms, masked by the label party's masks, to ``coordinator``,
        which answers the label party (:func:`~vfl.linear.routing.assemble`)."""
        key, fed = self.exchange.key, self.fed
        # our piece added to the ciphertext 1 (of 0) costs no encryption: the fresh
        # encryption of the masks re-randomises the request
        total = EncryptedVector(key, [1], LOSS_EXPONENT) + self.piece
        for p in self.spec.passives[1:]:
            total = total + loss_piece(key, fed, p)
        if self.cross is not None:
            total, self.cross = total + self.cross, None
        layout = loss_layout(key.n_length)
        assemble(fed, self.spec.label_party, coordinator, LOSS, total, layout)


def loss_piece(
    key: PaillierPublicKey, fed: Federation, sender: str, step: str = "loss-piece"
) -> EncryptedVector:
    """One encrypted value of the loss at :data:`LOSS_EXPONENT` from ``sender`` (its epoch's
    piece, or a batch's cross term with ``step="cross-sum"``), or a refusal naming it."""
    piece = vector_from(key, VLR.recv(fed, sender, step, Encrypted).data, sender)
    if piece.shape != (1,) or piece.exponent != LOSS_EXPONENT:
        Encrypted.refuse(
            sender,
            "data",
            f"holds {piece.shape} values at exponent {piece.exponent}, not one at {LOSS_EXPONENT}",
        )
    return piece


def loss_layout(key_bits: int) -> PackingLayout:
    """The layout of the label party's loss request under ``coordinator``: one value within
    :data:`~vfl.linear.losses.LOSS_BOUND` at :data:`LOSS_EXPONENT`, derived from public
    numbers only (the coordinator pins the request to it)."""
    return masked_layout(1, LOSS_BOUND, LOSS_EXPONENT, key_bits)


def weight_radius(x: np.ndarray[Any, Any], parties: int) -> float:
    """The norm a party's weights (per output) are kept within, from its own rows ``x``:
    ``|u_p| <= SCORE_BOUND / (4 P)`` whatever the step, so a diverging run stays within the
    encryption's bounds, shows in the epoch loss and restarts (never reached otherwise)."""
    peak = float(np.sqrt(np.max(np.einsum("ij,ij->i", x, x)))) if x.size else 0.0
    return SCORE_BOUND / (4 * parties * max(peak, 1e-12))


def project(w: np.ndarray[Any, Any], radius: float) -> np.ndarray[Any, Any]:
    """``w`` with each output's column scaled to a norm of at most ``radius``."""
    norms = np.linalg.norm(w, axis=0)
    out: np.ndarray[Any, Any] = w * np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    return out


class CoordinatorRole:
    """The key holder: sends its public key, checks every data party's setup against the
    packings it derives from the public sizes (:func:`check_setup`), then decrypts masked
    gradient shares (one per data party and batch, each of its party's derived layout) and
    the loss once per epoch, each request from the receiver's assembler and each answer to
    the receiver (:mod:`vfl.linear.routing`)."""

    def __init__(self, spec: FitSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        label = spec.label_party
        parties = [label, *spec.passives]
        public_key, private_key = spec.policy.generate()
        VLR.broadcast(fed, "key", PublicKeyMessage.of(public_key), to=parties)
        counts = {p: VLR.recv(fed, p, "setup", SetupCounts) for p in parties}
        layouts = check_setup(counts, label, public_key.n_length, batch_size=spec.batch_size)
        rows = counts[label].rows or 0  # checked by check_setup
        batch = spec.batch_size or auto_batch_size(rows)  # 0: derived from the rows
        per_epoch = Schedule(rows, batch, 0).batches_per_epoch()
        by = {p: assembler_of(p, label, spec.data_parties) for p in parties}
        loss = loss_layout(public_key.n_length)
        epochs = 0
        while not VLR.recv(fed, label, "epoch", EpochControl).stop:
            for _ in range(per_epoch):
                for p in parties:  # each assembler sends its requests in this order
                    serve_decryption(
                        fed,
                        by[p],
                        GRAD,
                        private_key,
                        expected=layouts[p].n_ciphertexts,
                        layout=layouts[p],
                        answer_to=p,
                    )
            serve_decryption(
                fed,
                by[label],
                LOSS,
                private_key,
                expected=loss.n_ciphertexts,
                layout=loss,
                answer_to=label,
            )
            epochs += 1
        return FitResult(part=None, n_iter=epochs)


def check_setup(
    counts: dict[str, SetupCounts], label: str, key_bits: int, *, batch_size: int = 0
) -> dict[str, PackingLayout]:
    """Each data party's gradient-request layout, derived by the coordinator from public
    sizes only, after checking every party's setup against it.

    Every party must train the label party's number of outputs, announce the label party's
    row count, and use the row packing it announced to its peers (a party that inflates its
    packing towards the coordinator alone is refused); and that packing must be the one
    :class:`~vfl.linear.exchange.PublicSizes` gives for the rows, ``batch_size``, the other
    data parties (the contributors to each share), the ``key_bits`` and the party's column
    count -- a packing of the party's own choosing (one wide slot per ciphertext: whole
    plaintexts per request) is refused, naming the party.

    Parameters
    ----------
    counts : dict of str to SetupCounts
        What each data party sent, the label party's included.
    label : str
        The label party.
    key_bits : int
        Bits of the coordinator's key.
    batch_size : int
        The job's batch size; 0: :func:`~vfl.training.schedule.auto_batch_size` of the rows.

    Returns
    -------
    dict of str to PackingLayout
        Per party, the masked layout of its gradient requests (one per batch).

    Raises
    ------
    MessageError
        A party's setup differs from the derived one (names the party and the field).
    """
    outputs, rows = counts[label].outputs, counts[label].rows
    if not 1 <= outputs <= MAX_OUTPUTS:
        SetupCounts.refuse(label, "outputs", f"is {outputs}, not between 1 and {MAX_OUTPUTS}")
    if rows is None or rows < 1:
        SetupCounts.refuse(label, "rows", f"is {rows!r}, not a row count")
    for p, c in counts.items():
        if c.outputs != outputs:
            SetupCounts.refuse(p, "outputs", f"is {c.outputs}; the label party trains {outputs}")
        for q, seen in counts.items():
            if q != p and seen.peer_packings.get(p) != c.packing:
                SetupCounts.refuse(
                    p,
                    "packing",
                    f"is {c.packing}, but party {q!r} received {seen.peer_packings.get(p)}",
                )
        if c.rows != rows:
            SetupCounts.refuse(p, "rows", f"is {c.rows!r}; the label party has {rows}")
    sizes = PublicSizes(
        rows=rows,
        batch_size=batch_size or auto_batch_size(rows),
        contributors=len(counts) - 1,
        masked=True,
    )
    return {
        p: sizes.check(SetupCounts, p, c.packing, key_bits).masked_layout(outputs)
        for p, c in counts.items()
    }


def label_sensitivity(
    spec: FitSpec, columns: int, outputs: int, *, intercept: bool = False
) -> float:
    """How much one label moves a batch's gradient numerator ``X^T z`` of a party with
    ``columns`` clipped columns (L2): the target ``t = 2(2y - 1)`` moves by 4 per output it
    touches (two for a one-vs-rest relabelling), times the row's norm bound (with the
    intercept's 1 at the label party)."""
    clip = spec.row_clip if spec.row_clip is not None else math.sqrt(columns)
    norm = math.sqrt(clip**2 + 1) if intercept else clip
    return 4.0 * norm * (math.sqrt(2) if outputs > 1 else 1.0)


def record_label_dp(spec: FitSpec, holder: str, epochs: int) -> None:
    """Write the labels' spend to the ledger: per epoch every label is in one batch, whose
    noisy gradient goes to each passive and into the label party's own weights."""
    if spec.ledger is None or spec.label_noise is None or epochs == 0:
        return
    spec.ledger.record(
        holder=holder,
        data="labels (vertical training, label DP)",
        mechanism="gaussian",
        noise_multiplier=spec.label_noise,
        sampling_rate=1.0,
        steps=epochs * (1 + len(spec.passives)),
    )
