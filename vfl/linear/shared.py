"""The secret-shared protocol of vertical linear models (``protocol="shared"``, the default).

Two data parties: A, the label party, and B. Nobody sees a gradient, a residual, a partial
score or another party's weights in the clear. Each of these exists only as two additive
integer shares, one per party. A share is statistically hiding: masks are
:data:`~vfl.linear.common.KAPPA` bits longer than the value. The construction is that of
FATE's SSHE-LR and SecretFlow's HESS-LR: Paillier for the cross products, additive shares
for the rest. What vflink adds:

* **Fixed mini-batches.** The batches are drawn once from the agreed seed and visited in a
  fresh order every epoch, as FATE's hetero-LR does. Each batch's Gram matrix is therefore
  shared once, at setup, and an epoch costs no encryption of per-row values: per batch,
  only one multi-exponentiation per output and column group, and a few packed decryptions.
* **Shares kept small.** After every product, each party reduces its share of a value with
  a public bound modulo ``2**(bound + RHO)`` (the bit budget: :mod:`vfl.linear.budget`).
  The label party's share lies in ``[0, M)``, the other's in ``[-M, 0)``. This is exact
  unless the label party's share (uniform modulo ``M``) falls within the bound of the
  modulus' edge, which has probability below ``2**-RHO`` per value
  (:data:`~vfl.linear.budget.RHO`).

The maths. Both losses (:mod:`vfl.linear.losses`) have the gradient numerator
``N = X^T (X w - t) = G w - tau`` for a batch, where ``G = X^T X`` is the joint Gram matrix
(A's columns, its intercept last, then B's) and ``tau = X^T t``.

* **Setup.**
  * ``G_AA`` and ``G_BB`` stay in plaintext with their owners.
  * ``G_AB = X_A^T X_B``: B multiplies A's encrypted packed rows by its own columns and
    returns the result masked. A's share ``H_A`` is the masked value, B's share ``H_B`` is
    minus the mask.
  * ``X_B^T t``: A multiplies B's encrypted rows by the targets, the same way.
  * The result: ``G = S_A + S_B`` with ``S_A = [[G_AA, H_A], [H_A^T, 0]]`` and
    ``S_B = [[0, H_B], [H_B^T, G_BB]]``. Each party encrypts the columns of its ``S_P`` for
    every batch, packed, under its key, and sends them to the other party once.
* **Per batch.** With ``w = v_A + v_B``:
  ``N = S_A v_A + S_B v_B + S_A v_B + S_B v_A - tau``. For a cross product ``S_P v_Q``,
  party Q raises P's encrypted columns to its share, masks the packed result and returns
  it. P's share is the masked value, Q's is minus its mask.
  * **Update.** Heavy-ball momentum (or SGD), linear in the gradient:
    ``velocity = beta velocity + N / (c rows) + alpha w; w -= step_p * velocity``, the label
    party's block with its step and B's with B's (:func:`~vfl.linear.common.shared_step`).
    Each party applies it to its own
    shares, truncating locally, which is exact to 2 units of ``2**-W_BITS``. The label
    party then re-randomises the shares with a fresh uniform offset and sends that offset
    to B.
  * **Averaging.** The model of an epoch is the mean of its iterates, which is linear, so
    each party averages its own shares. SGD goes on from the last iterate. On
    default_credit this keeps the test AUC within 0.007 of scikit-learn for every seed,
    where the last iterate strayed by up to 0.018.
  * **Loss.** ``|X w - t|^2 = <w, N - tau> + |t|^2``, at the epoch's model over all rows.
    A sends its shares of ``w`` and ``N - tau`` encrypted; B multiplies in its own and keeps
    the encrypted sum. Once per epoch the label party learns the total.
* **At the end.** Each party sends the other party its share of the other party's weights,
  so each learns its own part of the model, and only that.

Keys: each party owns one and decrypts only values masked by the other party. A share sent
to the owner of the key is first re-randomised by a uniform ``r**n``, since the owner knows
the randomness of the ciphertexts it was computed from (:mod:`vfl.crypto.rerandomize`). With
a coordinator (``protocol="shared_coordinator"``), the coordinator holds the only key and
decrypts every masked share for the party it belongs to. It checks each request against the
layout it derives from the public plan.

**What each role learns.**

* The label party: the number of B's columns, B's curvature bound (one number, from which
  both derive B's step), the loss once per epoch, and its own final weights.
* B: the number of the label party's columns and outputs, the row count, the label party's
  curvature bound, per epoch the keep bit and the restart bit (the loss rose past the
  divergence rule, or stalled: :class:`~vfl.training.LossCurve`), and its own final weights.
* The coordinator: the public plans (with both curvature bounds) and nothing else. Every
  value it decrypts carries a mask ``KAPPA`` bits longer than the value.

Neither data party learns a gradient, a residual, a score or a label. Each party's view is
made of values masked by the other party's fresh OS randomness, so an attack on it,
:class:`vfl.audit.LabelSolveAudit` for example, recovers no more than chance. The final
weights are the model itself. What they reveal about the training data is the model's
leakage (membership, attribute inference), which no protocol for training removes.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from gmpy2 import mpz

from vfl.crypto import EncryptedVector
from vfl.crypto.kernels import multiexp_big
from vfl.crypto.keys import PaillierPrivateKey
from vfl.crypto.masked import decrypt_masked, mask_slots, request_slots, serve_decryption
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import PackingLayout, pack_rows
from vfl.crypto.parallel import map_processes, multiexp_big_worker
from vfl.crypto.policy import Base, PublicKeyMessage, vector_from
from vfl.crypto.rerandomize import rerandomize
from vfl.federation.base import Federation
from vfl.federation.messages import Message
from vfl.linear.budget import (
    LR_BITS,
    W_BITS,
    W_INT_BITS,
    Sizes,
    by_rows,
    dot,
    exact,
    fixed_point_step,
    flat,
    floats,
    gram,
    pack_columns,
    reduce_share,
    uniform,
)
from vfl.linear.common import (
    STABLE,
    DataParty,
    FitResult,
    FitSpec,
    finish,
    loss_curve,
    penalty_weight,
    shared_step,
    show_epoch,
)
from vfl.linear.exchange import exchange_rows
from vfl.linear.losses import SCORE_BOUND
from vfl.linear.messages import VLR, Outputs
from vfl.linear.model import FEATURE_BITS, feature_bits
from vfl.progress import EpochProgress
from vfl.training.control import EpochControl
from vfl.training.convergence import RESTART_FACTOR
from vfl.training.optimizers import Optimizer, curvature_bound, make_optimizer
from vfl.training.schedule import Schedule, agree_seed, auto_batch_size

__all__ = [
    "SS",
    "Integers",
    "Plan",
    "SharedCoordinatorRole",
    "SharedDataRole",
]

logger = logging.getLogger(__name__)

SS = VLR.child("ss")


@dataclass(frozen=True)
class Plan(Message):
    """A data party's public plan, to the other and to the coordinator: its design columns
    (the label party's intercept included), the bits of its largest fixed-point feature and
    its rows."""

    KIND = "shared-protocol plan"
    columns: int
    feature_bits: int
    rows: int
    curvature: float = 0.0
    """Its block's curvature bound (:func:`~vfl.training.optimizers.curvature_bound`), from
    which both parties derive its default step: one number, which says how large and how
    correlated its standardised columns are."""


@dataclass(frozen=True)
class Integers(Message):
    """Plain integers: a fresh re-randomising offset, an initial or final weight share."""

    KIND = "integer shares"
    values: list[int]


class _Link:
    """A data party's keys and the two moves of the protocol: send a masked share, open one."""

    def __init__(self, fed: Federation, spec: FitSpec, peer: str) -> None:
        self.fed, self.spec, self.peer = fed, spec, peer
        self.coordinator = spec.coordinator
        self.secret: PaillierPrivateKey | None
        if self.coordinator is not None:
            self.key = spec.policy.accept(
                VLR.recv(fed, self.coordinator, "key", PublicKeyMessage), self.coordinator
            )
            self.peer_key, self.secret = self.key, None
        else:
            self.key, self.secret = spec.policy.generate()
            VLR.send(fed, peer, "key", PublicKeyMessage.of(self.key))
            self.peer_key = spec.policy.accept(VLR.recv(fed, peer, "key", PublicKeyMessage), peer)
            SS.send(fed, peer, "base", Base(h_s=self.peer_key.base_bytes()))
            try:
                self.secret = self.secret.for_base(SS.recv(fed, peer, "base", Base).h_s)
            except ValueError as exc:
                Base.refuse(peer, "h_s", str(exc))
        self.views: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []

    def encrypt(self, plaintexts: list[int]) -> list[Any]:
        """Encrypt our inputs to the other party's computations: under our key with its base
        (no coordinator), or under the coordinator's."""
        return (self.secret or self.key).raw_encrypt(plaintexts, workers=self.spec.workers)

    def for_owner(self, vector: EncryptedVector) -> EncryptedVector:
        """Re-randomise a result computed from the peer's ciphertexts before it goes to the
        peer: without a coordinator the peer owns the key and knows its inputs' randomness,
        so the result gets a full-length power of our base, in whose group the peer encrypted
        every input (:mod:`vfl.crypto.rerandomize`); the coordinator knows no input's
        randomness, so the fresh encryption of the masks suffices."""
        if self.coordinator is None:
            return rerandomize(vector, for_key_owner="base")
        return vector

    def share_out(
        self, tag: str, vector: EncryptedVector, layout: PackingLayout
    ) -> tuple[int, ...]:
        """Mask ``vector`` (packed signed slots under the peer's key), send it to the peer and
        return the masks (our share is minus each)."""
        vector = self.for_owner(vector)
        masked, masks = mask_slots(vector, layout)
        SS.send(self.fed, self.peer, tag, Encrypted(data=masked.to_wire()))
        return masks.masks

    def open(self, tag: str, layout: PackingLayout) -> list[int]:
        """Receive a masked share from the peer and decrypt its slots (ours, or via the
        coordinator)."""
        vector = vector_from(self.key, SS.recv(self.fed, self.peer, tag, Encrypted).data, self.peer)
        if vector.shape != (layout.n_ciphertexts,) or vector.exponent != 0:
            Encrypted.refuse(self.peer, "data", f"has shape {vector.shape}, not this step's")
        if self.secret is not None:
            slots = self.secret.decrypt_packed(vector, layout, workers=self.spec.workers)
            return [int(v) for v in slots]
        if self.coordinator is None:
            raise RuntimeError("no key to open the share with")
        return request_slots(self.fed, self.coordinator, SS.child(tag), vector, layout)


class SharedDataRole(DataParty):
    """A data party's side of the secret-shared protocol (the label party's when ``targets``
    is given); see the module docstring. It shares with the revealing protocols' roles only
    their common start (:class:`~vfl.linear.common.DataParty`); its integer arithmetic is
    :mod:`vfl.linear.budget`."""

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        if len(spec.data_parties) != 2:
            raise ValueError("the secret-shared protocol takes exactly two data parties")
        outputs = self.agree_outputs(fed)
        if self.is_label and spec.coordinator is not None:
            VLR.send(fed, spec.coordinator, "outputs", Outputs(count=outputs))
        seed = agree_seed(fed, spec.data_parties, VLR.tag("seed"), spec.random_state)
        peer = next(p for p in spec.data_parties if p != fed.name)
        link = _Link(fed, spec, peer)
        x_int = np.round(self.x * 2.0**FEATURE_BITS).astype(np.int64)
        curvature = curvature_bound(x_int / 2.0**FEATURE_BITS, spec.batch_size, spec.loss.c)
        plan = Plan(
            columns=self.x.shape[1],
            feature_bits=feature_bits(self.x),
            rows=len(self.x),
            curvature=curvature,
        )
        SS.send(fed, peer, "plan", plan)
        if spec.coordinator is not None:
            SS.send(fed, spec.coordinator, "plan", plan)
        theirs = SS.recv(fed, peer, "plan", Plan)
        if theirs.rows != len(self.x):
            Plan.refuse(peer, "rows", f"is {theirs.rows}; this party has {len(self.x)} rows")
        if not 0 < theirs.curvature <= 2.0**60:  # NaN fails this too; columns are not constant
            Plan.refuse(peer, "curvature", f"is {theirs.curvature}, not a curvature bound")
        plans = {spec.label_party: plan if self.is_label else theirs}
        plans[peer if self.is_label else fed.name] = theirs if self.is_label else plan
        sizes = _sizes(spec, plans, outputs, link.key.n_length)
        shares = self._setup(fed, link, sizes, x_int, seed)
        rates = [shared_step(spec, plans[p].curvature) for p in (spec.label_party, peer_b(spec))]
        result = self._train(fed, link, sizes, shares, seed, rates)
        if spec.learning_rate is not None and min(rates) < spec.learning_rate:
            result.notes.append(
                f"learning_rate={spec.learning_rate:g} is beyond the secret-shared protocol's "
                f"stability bound; the parties stepped by {rates[0]:.3g} (label party) and "
                f"{rates[1]:.3g} (the other), {STABLE:g} times the default step"
            )
        result.setup_seconds = shares["setup_seconds"]
        if spec.keep_views:
            result.view = link.views
        return result

    # -- setup -------------------------------------------------------------------------------

    def _setup(
        self,
        fed: Federation,
        link: _Link,
        sizes: Sizes,
        x_int: np.ndarray[Any, Any],
        seed: int,
    ) -> dict[str, Any]:
        spec, is_label = self.spec, self.is_label
        began = time.perf_counter()
        packing = sizes.row_packing(is_label)
        n = int(link.key.n)

        def own_rows(lo: int, hi: int) -> list[list[Any]]:
            return [link.encrypt(plain) for plain in pack_rows(x_int[lo:hi], packing, n)]

        peer_rows = exchange_rows(
            fed,
            (link.key, packing, own_rows),
            {link.peer: link.peer_key},
            len(x_int),
            spec.batch_size,
            spec.workers,
        )[link.peer]
        if peer_rows.packing != sizes.row_packing(not is_label):
            Plan.refuse(link.peer, "columns", "do not match the packing of its encrypted rows")
        fixed, _ = Schedule(len(x_int), spec.batch_size, seed).fixed()
        d_a, d_b, k_out = sizes.d_a, sizes.d_b, sizes.outputs
        t_int = None
        if self.targets is not None:
            if np.any(np.abs(self.targets) > SCORE_BOUND):
                raise ValueError(f"party {fed.name!r}: targets beyond {SCORE_BOUND:g}")
            t_int = np.round(self.targets * 2.0 ** (FEATURE_BITS + W_BITS)).astype(np.int64)
        s_mats, taus, t_squares = [], [], []
        gram_l, tau_l = sizes.gram_layout, sizes.tau_layout
        a_pack, b_pack = sizes.row_packing(True), sizes.row_packing(False)
        for rows in fixed:
            own = gram(x_int[rows], x_int[rows], sizes.gram_bits)
            s = np.zeros((sizes.joint, sizes.joint), dtype=object)
            tau = np.zeros((sizes.joint, k_out), dtype=object)
            if t_int is not None:  # the label party: X_B^T t for B, then its share of G_AB
                product = peer_rows.combine(
                    rows, t_int[rows], to_key_owner=False, workers=spec.workers
                )
                masks = link.share_out("tau", product, tau_l)
                tau[d_a:] = -by_rows(masks, b_pack, k_out)
                tau[:d_a] = exact(x_int[rows]).T @ exact(t_int[rows])
                h = by_rows(link.open("gram", gram_l), a_pack, d_b)
                s[:d_a, :d_a] = own
                t_squares.append(int(np.sum(exact(t_int[rows]) ** 2)))
            else:
                product = peer_rows.combine(
                    rows, x_int[rows], to_key_owner=False, workers=spec.workers
                )
                masks = link.share_out("gram", product, gram_l)
                h = -by_rows(masks, a_pack, d_b)
                tau[d_a:] = by_rows(link.open("tau", tau_l), b_pack, k_out)
                s[d_a:, d_a:] = own
            s[:d_a, d_a:] = h
            s[d_a:, :d_a] = h.T
            s_mats.append(s)
            taus.append(tau)
        # every batch's S, and their sum (for the epoch's loss), encrypted once, columns
        # packed, for the other party's products
        span = len(fixed)
        s_mats.append(sum(s_mats[1:], s_mats[0]))
        taus.append(sum(taus[1:], taus[0]))
        zero = np.zeros((sizes.joint, sizes.joint), dtype=bool)  # S_P's structural zeros
        if is_label:
            zero[d_a:, d_a:] = True
        else:
            zero[:d_a, :d_a] = True
        plains: list[int | None] = []
        for b, s in enumerate(s_mats):
            plains += pack_columns(s, sizes.product_packing(span if b == span else 1), n, zero)
        # groups known to be zero (the zero block of S_P) travel as the trivial ciphertext 1
        encrypted = iter(link.encrypt([p for p in plains if p is not None]))
        cts = [mpz(1) if p is None else next(encrypted) for p in plains]
        sent = 0
        for b in range(len(s_mats)):
            size = sizes.joint * sizes.groups(span if b == span else 1)
            block = EncryptedVector(link.key, cts[sent : sent + size], 0, fresh=True)
            SS.send(fed, link.peer, "s", Encrypted(data=block.to_wire()), b)
            sent += size
        peer_s = []
        for b in range(span + 1):
            block = vector_from(
                link.peer_key, SS.recv(fed, link.peer, "s", Encrypted, b).data, link.peer
            )
            size = sizes.joint * sizes.groups(span if b == span else 1)
            if block.shape != (size,) or block.exponent != 0:
                Encrypted.refuse(link.peer, "data", f"holds {block.shape} encrypted columns")
            peer_s.append(block.ciphertexts)
        return {
            "fixed": fixed,
            "s": s_mats,
            "tau": taus,
            "t_squares": sum(t_squares),
            "peer_s": peer_s,
            "setup_seconds": time.perf_counter() - began,
        }

    # -- training ----------------------------------------------------------------------------

    def _initial_shares(self, fed: Federation, link: _Link, sizes: Sizes) -> np.ndarray[Any, Any]:
        """Shares of the starting weights (zeros, or this party's part for a warm start): each
        party splits its own weights with a uniform share for the label party."""
        w = self.part.weights(with_intercept=self.is_label)
        w_int = exact(np.round(np.asarray(w, dtype=float) * 2.0**W_BITS).astype(np.int64))
        m = sizes.weight_modulus
        v = np.zeros((sizes.joint, sizes.outputs), dtype=object)
        mine = slice(0, sizes.d_a) if self.is_label else slice(sizes.d_a, sizes.joint)
        theirs = slice(sizes.d_a, sizes.joint) if self.is_label else slice(0, sizes.d_a)
        if self.is_label:  # our uniform share of our weights; the rest is B's
            own = uniform(w_int.shape, m)
            given = reduce_share(w_int - own, m, False)
            SS.send(fed, link.peer, "init", Integers(values=flat(given)))
        else:  # the label party's uniform share of our weights
            given = uniform(w_int.shape, m)
            SS.send(fed, link.peer, "init", Integers(values=flat(given)))
            own = reduce_share(w_int - given, m, False)
        v[mine] = own
        shape = (theirs.stop - theirs.start, sizes.outputs)
        v[theirs] = _unflat(SS.recv(fed, link.peer, "init", Integers), shape, link.peer)
        return v

    def _train(
        self,
        fed: Federation,
        link: _Link,
        sizes: Sizes,
        shares: dict[str, Any],
        seed: int,
        rates: list[float],
    ) -> FitResult:
        spec = self.spec
        v = self._initial_shares(fed, link, sizes)
        fixed = shares["fixed"]
        _, orders = Schedule(len(self.x), spec.batch_size, seed).fixed()
        result = FitResult(part=None, steps=list(rates))
        curve = loss_curve(spec, self.targets)
        followers = [p for p in [link.peer, spec.coordinator] if p is not None]
        mine = slice(0, sizes.d_a) if self.is_label else slice(sizes.d_a, sizes.joint)
        optimizers = [make_optimizer(spec.optimizer, learning_rate=r) for r in rates]
        velocity = np.zeros_like(v)
        model = kept = v
        epoch = 0
        stopped = False
        shown = EpochProgress(fed.name, spec.max_iter, spec.verbose if self.is_label else 0)
        while True:
            if self.is_label:
                stop = epoch >= spec.max_iter or stopped
                control = EpochControl(stop=stop, keep=curve.keep, restart=curve.restart)
                SS.broadcast(fed, "epoch", control, to=followers)
            else:
                control = SS.recv(fed, spec.label_party, "epoch", EpochControl)
            if control.restart:  # diverged: back to the kept shares, a smaller step
                v, velocity = kept, np.zeros_like(v)
                rates = [r * RESTART_FACTOR for r in rates]
                optimizers = [make_optimizer(spec.optimizer, learning_rate=r) for r in rates]
            elif control.keep:  # the epoch just finished is the best so far: keep its shares
                kept = model
            if control.stop:
                break
            began = time.perf_counter()
            total = np.zeros_like(v)
            for b in next(orders):
                rows = fixed[b]
                n_share = self._gradient(link, sizes, shares, b, 1, v)
                if spec.keep_views:  # our share of our gradient numerator, for audits
                    scaled = floats(n_share[mine], 2 * FEATURE_BITS + W_BITS)
                    link.views.append((rows.copy(), scaled))
                v, velocity = self._step(
                    fed, link, sizes, optimizers, epoch, rows, n_share, v, velocity
                )
                total = total + v
            # the epoch's model is the mean of its iterates (tail averaging: SGD goes on from
            # the last one); shares average to shares of the mean, in their own ranges
            model = total // len(fixed)
            loss = self._epoch_loss(fed, link, sizes, shares, model)
            if self.is_label:
                result.epoch_seconds.append(time.perf_counter() - began)
                stopped = curve.add(loss)
                result.converged = stopped and not curve.gave_up
                show_epoch(shown, epoch, loss, rates[0], curve)
            epoch += 1
        shown.close()
        if self.is_label:
            finish(result, curve)
        result.n_iter = epoch
        self._reveal(fed, link, sizes, kept)
        result.part = self.part
        return result

    def _step(
        self,
        fed: Federation,
        link: _Link,
        sizes: Sizes,
        optimizers: list[Optimizer],
        epoch: int,
        rows: np.ndarray[Any, Any],
        n_share: np.ndarray[Any, Any],
        v: np.ndarray[Any, Any],
        velocity: np.ndarray[Any, Any],
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """One optimiser step on shares (the label party's block with its step, B's with
        B's), each party truncating its own (exact to a unit of ``2**-W_BITS`` per product),
        then a fresh re-randomisation of weights and velocity: the label party adds uniform
        offsets and sends them to B, which subtracts them."""
        spec = self.spec
        factors = [
            fixed_point_step(o, epoch, spec.loss.c, len(rows), spec.alpha) for o in optimizers
        ]
        to_n, to_alpha, beta, _ = factors[0]
        step = np.empty((sizes.joint, 1), dtype=object)
        step[: sizes.d_a], step[sizes.d_a :] = factors[0][3], factors[1][3]
        one = 1 << LR_BITS
        decay = np.full((sizes.joint, 1), to_alpha, dtype=object)
        decay[sizes.d_a - 1] = 0  # no penalty on the intercept
        gradient = (n_share * to_n) // (one << (2 * FEATURE_BITS)) + (v * decay) // one
        velocity = (velocity * beta) // one + gradient
        v = v - (velocity * step) // one
        modulus = sizes.weight_modulus
        both = np.concatenate([v, velocity])
        if self.is_label:
            offset = uniform(both.shape, modulus)
            SS.send(fed, link.peer, "offset", Integers(values=flat(offset)))
            both = reduce_share(both + offset, modulus, True)
        else:
            offset = _unflat(SS.recv(fed, link.peer, "offset", Integers), both.shape, link.peer)
            both = reduce_share(both - offset, modulus, False)
        return both[: len(v)], both[len(v) :]

    def _gradient(
        self,
        link: _Link,
        sizes: Sizes,
        shares: dict[str, Any],
        b: int,
        span: int,
        v: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """Our reduced share of ``N = G w - tau`` of batch ``b`` (or of all batches, ``span``
        of them): the other party's columns raised to our share, masked and sent to it; ours
        raised to its share, opened."""
        sign = 1 if self.is_label else -1
        layout, packing = sizes.product_layout(span), sizes.product_packing(span)
        groups = packing.groups
        nsq = link.peer_key.nsquare
        columns = shares["peer_s"][b]
        e = v * sign  # non-negative at both parties
        jobs = []
        for k in range(sizes.outputs):
            for g in range(groups):
                live = [c for c in range(sizes.joint) if columns[c * groups + g] != 1]
                bases = [columns[c * groups + g] for c in live]
                jobs.append((bases, [int(e[c, k]) for c in live], nsq))
        products = map_processes(multiexp_big_worker, jobs, self.spec.workers)
        tag = "prod" if span == 1 else "prod-all"
        masks = link.share_out(tag, EncryptedVector(link.peer_key, products, 0), layout)
        share = -sign * by_rows(masks, packing, sizes.outputs)
        opened = by_rows(link.open(tag, layout), packing, sizes.outputs)
        share = share - sign * opened
        s, tau = shares["s"][b], shares["tau"][b]
        return reduce_share(s @ v + share - tau, sizes.n_modulus(span), self.is_label)

    def _epoch_loss(
        self,
        fed: Federation,
        link: _Link,
        sizes: Sizes,
        shares: dict[str, Any],
        v: np.ndarray[Any, Any],
    ) -> float:
        """The mean training loss of the epoch's model (its mean iterate, shares ``v``) over
        all rows (the label party learns it; B returns 0.0): ``|X w - t|^2 =
        <w, N - tau> + |t|^2`` from shares of ``N`` over all batches; the cross terms of the
        inner product travel encrypted."""
        span = len(shares["fixed"])
        n_share = self._gradient(link, sizes, shares, span, span, v)
        modulus = sizes.n_modulus(span)
        # + lambda w (intercept excluded): <w, m> is then |X w - t|^2 - |t|^2 plus the
        # penalty, so the tracked loss is the objective minimised (protocol.penalty_term)
        penalised = v * sizes.penalty
        penalised[sizes.d_a - 1] = 0
        m_share = reduce_share(n_share - shares["tau"][span] + penalised, modulus, self.is_label)
        own = dot(v, m_share)
        if not self.is_label:
            got = vector_from(
                link.peer_key, SS.recv(fed, link.peer, "loss", Encrypted).data, link.peer
            )
            if got.shape != (2 * v.size,) or got.exponent != 0:
                Encrypted.refuse(link.peer, "data", f"holds {got.shape} loss terms")
            exps = [-int(x) for x in m_share.reshape(-1)] + [-int(x) for x in v.reshape(-1)]
            nsq = link.peer_key.nsquare
            cross = EncryptedVector(link.peer_key, [multiexp_big(got.ciphertexts, exps, nsq)], 0)
            own_ct = link.peer_key.raw_encrypt([(-own) % int(link.peer_key.n)])
            total = cross + EncryptedVector(link.peer_key, own_ct, 0)
            total = link.for_owner(total)
            SS.send(fed, link.peer, "loss-total", Encrypted(data=total.to_wire()))
            return 0.0
        terms = link.encrypt(flat(v) + flat(m_share))
        SS.send(
            fed,
            link.peer,
            "loss",
            Encrypted(data=EncryptedVector(link.key, terms, 0, fresh=True).to_wire()),
        )
        total = vector_from(
            link.key, SS.recv(fed, link.peer, "loss-total", Encrypted).data, link.peer
        )
        if total.shape != (1,) or total.exponent != 0:
            Encrypted.refuse(link.peer, "data", "is not one loss term")
        if link.secret is not None:
            n = int(link.key.n)
            raw = int(link.secret.raw_decrypt(total.ciphertexts)[0])
            value = raw - n if raw > n // 2 else raw
        elif link.coordinator is not None:
            value = int(
                decrypt_masked(
                    fed,
                    link.coordinator,
                    SS.child("loss"),
                    total,
                    bound=sizes.loss_bound(span),
                    exact=True,
                )[0]
            )
        else:
            raise RuntimeError("no key to open the loss with: neither ours nor a coordinator's")
        squares = (own + shares["t_squares"] - value) / 2.0 ** (2 * (FEATURE_BITS + W_BITS))
        return self.spec.loss.mean_loss(squares, len(self.x), sizes.outputs)

    def _reveal(self, fed: Federation, link: _Link, sizes: Sizes, v: np.ndarray[Any, Any]) -> None:
        """Each party sends the other its share of the other's weights and keeps its own."""
        mine = slice(0, sizes.d_a) if self.is_label else slice(sizes.d_a, sizes.joint)
        theirs = slice(sizes.d_a, sizes.joint) if self.is_label else slice(0, sizes.d_a)
        SS.send(fed, link.peer, "final", Integers(values=flat(v[theirs])))
        got = _unflat(SS.recv(fed, link.peer, "final", Integers), v[mine].shape, link.peer)
        w = floats(v[mine] + got, W_BITS)
        if not np.all(np.abs(w) < 2.0**W_INT_BITS):
            raise FloatingPointError(
                f"party {fed.name!r}: weights beyond {2**W_INT_BITS}; training diverged "
                "(lower learning_rate or standardize the features)"
            )
        self.part.set_weights(w, with_intercept=self.is_label)


def peer_b(spec: FitSpec) -> str:
    """The data party that is not the label party."""
    return next(p for p in spec.data_parties if p != spec.label_party)


def _unflat(message: Integers, shape: tuple[int, ...], sender: str) -> np.ndarray[Any, Any]:
    if len(message.values) != math.prod(shape):
        Integers.refuse(sender, "values", f"holds {len(message.values)}, not {math.prod(shape)}")
    out = np.empty(shape, dtype=object)
    out.reshape(-1)[:] = [int(x) for x in message.values]
    return out


def _sizes(spec: FitSpec, plans: dict[str, Plan], outputs: int, key_bits: int) -> Sizes:
    label = spec.label_party
    other = next(p for p in spec.data_parties if p != label)
    a, b = plans[label], plans[other]
    for name, p in ((label, a), (other, b)):
        if not 1 <= p.columns <= 100_000 or not 1 <= p.feature_bits <= 200:
            Plan.refuse(name, "columns", f"plan {p} is not a usable design")
    penalty = round(penalty_weight(spec, a.rows) * 2.0 ** (2 * FEATURE_BITS))
    return Sizes(
        a.columns,
        b.columns,
        outputs,
        a.feature_bits,
        b.feature_bits,
        spec.batch_size,
        key_bits,
        penalty,
    )


class SharedCoordinatorRole:
    """The key holder of ``protocol="shared_coordinator"``: it decrypts each masked share for
    the party it belongs to, every request checked against the layout derived from the public
    plans, and the loss once per epoch."""

    def __init__(self, spec: FitSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        label = spec.label_party
        other = next(p for p in spec.data_parties if p != label)
        public_key, private_key = spec.policy.generate()
        VLR.broadcast(fed, "key", PublicKeyMessage.of(public_key), to=[label, other])
        plans = {p: SS.recv(fed, p, "plan", Plan) for p in (label, other)}
        outputs = int(VLR.recv(fed, label, "outputs", Outputs).count)
        rows = plans[label].rows
        if not spec.batch_size:  # derived from the row count, as the data parties do
            spec = replace(spec, batch_size=auto_batch_size(max(rows, 1)))
        sizes = _sizes(spec, plans, outputs, public_key.n_length)
        if plans[other].rows != rows:
            Plan.refuse(other, "rows", f"is {plans[other].rows}; the label party has {rows}")
        batches = Schedule(rows, spec.batch_size, 0).batches_per_epoch()

        def serve(party: str, tag: str, layout: PackingLayout) -> None:
            serve_decryption(
                fed,
                party,
                SS.child(tag),
                private_key,
                expected=layout.n_ciphertexts,
                layout=layout,
            )

        for _ in range(batches):
            serve(label, "gram", sizes.gram_layout)
            serve(other, "tau", sizes.tau_layout)
        epochs = 0
        while not SS.recv(fed, label, "epoch", EpochControl).stop:
            for _ in range(batches):
                serve(label, "prod", sizes.product_layout())
                serve(other, "prod", sizes.product_layout())
            serve(label, "prod-all", sizes.product_layout(batches))
            serve(other, "prod-all", sizes.product_layout(batches))
            serve_decryption(fed, label, SS.child("loss"), private_key, expected=1, count=1)
            epochs += 1
        return FitResult(part=None, n_iter=epochs)
