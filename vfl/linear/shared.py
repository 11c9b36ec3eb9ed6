"""The secret-shared protocol of vertical linear models (``protocol="shared"``, the default).

Two data parties: A, the label party, and B. Nobody sees a gradient, a residual, a partial
score or another party's weights in the clear. Each of these exists only as two additive
integer shares, one per party. A share is statistically hiding: masks are
:data:`~vfl.linear.exchange.KAPPA` bits longer than the value. The construction is that of
FATE's SSHE-LR and SecretFlow's HESS-LR: Paillier for the cross products, additive shares
for the rest. What vflink adds:

* **Fixed mini-batches.** The batches are drawn once from the agreed seed and visited in a
  fresh order every epoch, as FATE's hetero-LR does. Each batch's Gram matrix is therefore
  shared once, at setup, and an epoch costs no encryption of per-row values: per batch,
  only one multi-exponentiation per output and column group, and a few packed decryptions.
* **Shares kept small.** After every product, each party reduces its share of a value with
  a public bound modulo ``2**(bound + RHO)``. The label party's share lies in ``[0, M)``,
  the other's in ``[-M, 0)``. This is exact unless the label party's share (uniform modulo
  ``M``) falls within the bound of the modulus' edge, which has probability below
  ``2**-RHO`` per value (``RHO = 64``).

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
    party's block with its step and B's with B's (:func:`~vfl.linear.protocol.shared_step`).
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
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from gmpy2 import mpz

from vfl.crypto import EncryptedVector
from vfl.crypto.kernels import multiexp_big
from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.masked import (
    DecryptedSlots,
    DecryptionRequest,
    decrypt_masked,
    mask_slots,
    serve_decryption,
)
from vfl.crypto.packing import PackingLayout, RowPacking, pack_rows
from vfl.crypto.parallel import map_processes, multiexp_big_worker
from vfl.crypto.policy import Base, PublicKeyMessage, vector_from
from vfl.crypto.rerandomize import rerandomize
from vfl.federation.base import Federation
from vfl.federation.messages import Message
from vfl.linear.exchange import KAPPA, GradientExchange, PeerRows
from vfl.linear.losses import SCORE_BOUND
from vfl.linear.messages import VLR, Encrypted, EpochControl, Outputs
from vfl.linear.model import FEATURE_BITS, feature_bits
from vfl.linear.protocol import (
    STABLE,
    DataRole,
    FitResult,
    FitSpec,
    finish,
    loss_curve,
    penalty_weight,
    shared_step,
    show_epoch,
)
from vfl.progress import EpochProgress
from vfl.training.convergence import RESTART_FACTOR
from vfl.training.optimizers import Optimizer, curvature_bound, make_optimizer
from vfl.training.schedule import Schedule, agree_seed, auto_batch_size

__all__ = [
    "RHO",
    "W_BITS",
    "Integers",
    "Plan",
    "SharedCoordinatorRole",
    "SharedDataRole",
    "Sizes",
    "fixed_point_step",
]

logger = logging.getLogger(__name__)

SS = VLR.child("ss")
W_BITS = 24
"""Weights are shared as integers at scale ``2**W_BITS``."""
W_INT_BITS = 16
"""Public bound on a weight's magnitude: ``|w| < 2**W_INT_BITS``."""
T_BITS = int(math.log2(SCORE_BOUND)) + FEATURE_BITS + W_BITS + 1
"""Bits of a target at scale ``2**(FEATURE_BITS + W_BITS)`` (``|t| <= SCORE_BOUND``)."""
RHO = 48
"""Bits by which a reduced share exceeds its value's bound (a failure, of probability below
``2**-RHO`` per value, is loud: it throws the weights far beyond their bound, which the end
of training refuses)."""
LR_BITS = 64
"""Fixed-point precision of the learning-rate factors."""


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


@dataclass(frozen=True)
class Sizes:
    """Every bound and layout of a fit, derived by all parties alike from the public plans."""

    d_a: int
    d_b: int
    outputs: int
    fb_a: int
    fb_b: int
    batch_size: int
    key_bits: int
    penalty: int = 0
    """``penalty_weight`` at the scale of ``N`` over that of the weights (``2**(2 *
    FEATURE_BITS)``), an integer both data parties derive from the public alpha and rows (0
    at the coordinator, which is not told the penalty and uses no layout that depends on
    it: the products' layout does not, and it opens the loss as one exact value)."""

    @property
    def joint(self) -> int:
        return self.d_a + self.d_b

    @property
    def row_bits(self) -> int:
        return (2 * self.batch_size).bit_length()

    @property
    def gram_bits(self) -> int:
        return 2 * max(self.fb_a, self.fb_b) + self.row_bits

    def row_packing(self, label: bool) -> RowPacking:
        """The packing of the label party's rows (multiplied by B's columns into ``G_AB``) or
        of B's (multiplied by the targets into ``X_B^T t``)."""
        if label:
            return RowPacking.plan(self.gram_bits, self.d_a, self.key_bits, kappa=KAPPA)
        bits = self.fb_b + T_BITS + self.row_bits
        return RowPacking.plan(bits, self.d_b, self.key_bits, kappa=KAPPA)

    @property
    def gram_layout(self) -> PackingLayout:
        return GradientExchange.share_layout(self.row_packing(True), self.d_b)

    @property
    def tau_layout(self) -> PackingLayout:
        return GradientExchange.share_layout(self.row_packing(False), self.outputs)

    def share_bits(self, span: int = 1) -> int:
        """Bits of the entries of ``S_P`` summed over ``span`` batches (own Grams and shares
        of the cross Gram matrix)."""
        return max(self.gram_layout.slot_bits, self.gram_bits) + 1 + span.bit_length()

    @property
    def weight_modulus(self) -> int:
        return 1 << (W_INT_BITS + W_BITS + RHO)

    def product_layout(self, span: int = 1) -> PackingLayout:
        """The packed ``S_P e`` (``S_P`` summed over ``span`` batches) for ``outputs`` columns
        ``e``: shares of the weights, negated at B."""
        value_bits = (
            self.share_bits(span) + self.weight_modulus.bit_length() + self.joint.bit_length() + 2
        )
        slots = (self.key_bits - 2) // (value_bits + KAPPA + 1)
        if slots < 1:
            raise ValueError(f"a {self.key_bits}-bit key is too small for the shared protocol")
        groups = -(-self.joint // slots)
        return PackingLayout(self.outputs * groups * slots, value_bits, KAPPA, slots)

    def groups(self, span: int = 1) -> int:
        return -(-self.joint // self.product_layout(span).slots)

    def n_modulus(self, span: int = 1) -> int:
        """Shares of ``N`` and ``N - tau`` (over ``span`` batches) are reduced modulo this."""
        rows = self.row_bits + span.bit_length()
        weights = 2 * max(self.fb_a, self.fb_b) + rows + W_INT_BITS + W_BITS
        # room for + penalty * w (<= penalty * 2**(W_INT_BITS + W_BITS)) beside G w
        weights = max(weights, self.penalty.bit_length() + W_INT_BITS + W_BITS) + 1
        targets = rows + max(self.fb_a, self.fb_b) + T_BITS
        return 1 << (max(weights + self.joint.bit_length(), targets) + 2 + RHO)

    def loss_bound(self, span: int) -> float:
        """Bound on the encrypted cross terms of the loss over ``span`` batches."""
        bits = (
            self.weight_modulus.bit_length()
            + self.n_modulus(span).bit_length()
            + (4 * self.joint * self.outputs).bit_length()
        )
        return 2.0**bits


def _reduce(values: np.ndarray[Any, Any], modulus: int, first: bool) -> np.ndarray[Any, Any]:
    """A share reduced modulo ``modulus``: into ``[0, M)`` at the label party (``first``),
    ``[-M, 0)`` at the other."""
    out = np.empty(values.shape, dtype=object)
    flat_in, flat_out = values.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in.tolist()):
        r = int(v) % modulus
        flat_out[i] = r if first else r - modulus
    return out


def _uniform(shape: tuple[int, ...], modulus: int) -> np.ndarray[Any, Any]:
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = secrets.randbelow(modulus)
    return out


def _ints(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(a).astype(object)


def _gram(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], bits: int) -> np.ndarray[Any, Any]:
    """``x^T y`` of int64 matrices whose entries are below ``2**bits`` in magnitude, exact
    (object integers when int64 could overflow)."""
    if bits < 63:
        return _ints(x.T @ y)
    return _ints(x).T @ _ints(y)  # type: ignore[no-any-return]


def fixed_point_step(
    optimizer: Optimizer, epoch: int, c: float, rows: int, alpha: float
) -> tuple[int, int, int, int]:
    """The integer factors (at scale ``2**LR_BITS``) of one step of a linear optimiser on
    shares: ``1 / (c rows)`` for ``N`` and ``alpha`` for the weights (the gradient), ``beta``
    for the velocity and the step size."""
    linear = optimizer.linear_step(epoch)
    if linear is None:
        raise ValueError(f"{type(optimizer).__name__} is not linear in the gradient")
    beta, step = linear
    scale = 2.0**LR_BITS
    return (
        round(scale / (c * rows)),
        round(alpha * scale),
        round(beta * scale),
        round(step * scale),
    )


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
        request = DecryptionRequest(data=vector.to_wire(), layout=layout.to_dict())
        SS.child(tag).send(self.fed, self.coordinator, "req", request)
        answer = SS.child(tag).recv(self.fed, self.coordinator, "plain", DecryptedSlots)
        if len(answer.slots) != layout.count:
            DecryptedSlots.refuse(self.coordinator, "slots", f"holds {len(answer.slots)} values")
        return [int(v) for v in answer.slots]


def _by_rows(
    values: list[int] | tuple[int, ...], packing_per_ct: int, groups: int, rows: int, outputs: int
) -> np.ndarray[Any, Any]:
    """Slots laid out output-major, then group, then slot, as a ``(rows, outputs)`` array
    (padding slots dropped)."""
    out = np.empty((rows, outputs), dtype=object)
    for k in range(outputs):
        for g in range(groups):
            base = (k * groups + g) * packing_per_ct
            for j in range(packing_per_ct):
                r = g * packing_per_ct + j
                if r < rows:
                    out[r, k] = int(values[base + j])
    return out


class SharedDataRole(DataRole):
    """A data party's side of the secret-shared protocol (the label party's when ``targets``
    is given); see the module docstring."""

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

        peer_rows = PeerRows.exchange(
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
            own = _gram(x_int[rows], x_int[rows], sizes.gram_bits)
            s = np.zeros((sizes.joint, sizes.joint), dtype=object)
            tau = np.zeros((sizes.joint, k_out), dtype=object)
            if t_int is not None:  # the label party: X_B^T t for B, then its share of G_AB
                product = peer_rows.combine(
                    rows, t_int[rows], to_key_owner=False, workers=spec.workers
                )
                masks = link.share_out("tau", product, tau_l)
                tau[d_a:] = -_by_rows(masks, b_pack.per_ct, b_pack.groups, d_b, k_out)
                tau[:d_a] = _ints(x_int[rows]).T @ _ints(t_int[rows])
                h = _by_rows(link.open("gram", gram_l), a_pack.per_ct, a_pack.groups, d_a, d_b)
                s[:d_a, :d_a] = own
                t_squares.append(int(np.sum(_ints(t_int[rows]) ** 2)))
            else:
                product = peer_rows.combine(
                    rows, x_int[rows], to_key_owner=False, workers=spec.workers
                )
                masks = link.share_out("gram", product, gram_l)
                h = -_by_rows(masks, a_pack.per_ct, a_pack.groups, d_a, d_b)
                tau[d_a:] = _by_rows(
                    link.open("tau", tau_l), b_pack.per_ct, b_pack.groups, d_b, k_out
                )
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
            layout = sizes.product_layout(span if b == span else 1)
            plains += _pack_columns(s, layout, link.key, zero)
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
        w_int = _ints(np.round(np.asarray(w, dtype=float) * 2.0**W_BITS).astype(np.int64))
        m = sizes.weight_modulus
        v = np.zeros((sizes.joint, sizes.outputs), dtype=object)
        mine = slice(0, sizes.d_a) if self.is_label else slice(sizes.d_a, sizes.joint)
        theirs = slice(sizes.d_a, sizes.joint) if self.is_label else slice(0, sizes.d_a)
        if self.is_label:  # our uniform share of our weights; the rest is B's
            own = _uniform(w_int.shape, m)
            SS.send(fed, link.peer, "init", Integers(values=_flat(_reduce(w_int - own, m, False))))
        else:  # the label party's uniform share of our weights
            given = _uniform(w_int.shape, m)
            SS.send(fed, link.peer, "init", Integers(values=_flat(given)))
            own = _reduce(w_int - given, m, False)
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
                    scaled = _floats(n_share[mine], 2 * FEATURE_BITS + W_BITS)
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
            offset = _uniform(both.shape, modulus)
            SS.send(fed, link.peer, "offset", Integers(values=_flat(offset)))
            both = _reduce(both + offset, modulus, True)
        else:
            offset = _unflat(SS.recv(fed, link.peer, "offset", Integers), both.shape, link.peer)
            both = _reduce(both - offset, modulus, False)
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
        layout, groups = sizes.product_layout(span), sizes.groups(span)
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
        share = -sign * _by_rows(masks, layout.slots, groups, sizes.joint, sizes.outputs)
        opened = _by_rows(link.open(tag, layout), layout.slots, groups, sizes.joint, sizes.outputs)
        share = share - sign * opened
        s, tau = shares["s"][b], shares["tau"][b]
        return _reduce(s @ v + share - tau, sizes.n_modulus(span), self.is_label)

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
        m_share = _reduce(n_share - shares["tau"][span] + penalised, modulus, self.is_label)
        own = _dot(v, m_share)
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
        terms = link.encrypt(_flat(v) + _flat(m_share))
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
        else:
            assert link.coordinator is not None
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
        squares = (own + shares["t_squares"] - value) / 2.0 ** (2 * (FEATURE_BITS + W_BITS))
        return self.spec.loss.mean_loss(squares, len(self.x), sizes.outputs)

    def _reveal(self, fed: Federation, link: _Link, sizes: Sizes, v: np.ndarray[Any, Any]) -> None:
        """Each party sends the other its share of the other's weights and keeps its own."""
        mine = slice(0, sizes.d_a) if self.is_label else slice(sizes.d_a, sizes.joint)
        theirs = slice(sizes.d_a, sizes.joint) if self.is_label else slice(0, sizes.d_a)
        SS.send(fed, link.peer, "final", Integers(values=_flat(v[theirs])))
        got = _unflat(SS.recv(fed, link.peer, "final", Integers), v[mine].shape, link.peer)
        w = _floats(v[mine] + got, W_BITS)
        if not np.all(np.abs(w) < 2.0**W_INT_BITS):
            raise FloatingPointError(
                f"party {fed.name!r}: weights beyond {2**W_INT_BITS}; training diverged "
                "(lower learning_rate or standardize the features)"
            )
        self.part.set_weights(w, with_intercept=self.is_label)


def peer_b(spec: FitSpec) -> str:
    """The data party that is not the label party."""
    return next(p for p in spec.data_parties if p != spec.label_party)


def _pack_columns(
    s: np.ndarray[Any, Any],
    layout: PackingLayout,
    key: PaillierPublicKey,
    zero: np.ndarray[Any, Any],
) -> list[int | None]:
    """The plaintexts of ``s``'s columns, each cut into groups of ``layout.slots`` signed
    slots (column-major: column ``c``, group ``g`` at ``c * groups + g``); None for a group
    whose rows lie in the structurally zero block of ``S_P`` (public, as the block is)."""
    rows = s.shape[0]
    groups = -(-rows // layout.slots)
    n = int(key.n)
    out: list[int | None] = []
    for c in range(s.shape[1]):
        for g in range(groups):
            cut = range(g * layout.slots, min(rows, (g + 1) * layout.slots))
            if all(zero[r, c] for r in cut):
                out.append(None)
                continue
            acc = 0
            for j, r in enumerate(cut):
                acc += int(s[r, c]) << (layout.slot_bits * j)
            out.append(acc % n)
    return out


def _dot(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> int:
    return int(sum(int(x) * int(y) for x, y in zip(a.reshape(-1), b.reshape(-1), strict=True)))


def _floats(a: np.ndarray[Any, Any], bits: int) -> np.ndarray[Any, Any]:
    flat = [math.ldexp(int(x), -bits) for x in a.reshape(-1)]
    out: np.ndarray[Any, Any] = np.array(flat, dtype=float).reshape(a.shape)
    return out


def _flat(a: np.ndarray[Any, Any]) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


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
