"""The secret-shared protocol of vertical linear models (``protocol="shared"``, the default).

Any number of data parties: A, the label party, its *partner* B (the first other data party
named), and further parties C, D, ... Nobody sees a gradient, a residual, a partial score or
another party's weights in the clear. Each of these exists only as two additive integer
shares, held by A and B. A share is statistically hiding: masks are
:data:`~vfl.linear.common.KAPPA` bits longer than the value. The construction is that of
FATE's SSHE-LR and SecretFlow's HESS-LR (Paillier for the cross products, additive shares for
the rest), extended to more parties by keeping the shares with two of them. What vflink adds:

* **Fixed mini-batches.** The batches are drawn once from the agreed seed and visited in a
  fresh order every epoch, as FATE's hetero-LR does. Each batch's Gram matrix is therefore
  shared once, at setup, and an epoch costs no encryption of per-row values: per batch,
  only one multi-exponentiation per output, column group and other party, and a few packed
  decryptions.
* **Shares kept small.** After every product, each holder reduces its share of a value with
  a public bound modulo ``2**(bound + RHO)`` (the bit budget: :mod:`vfl.linear.budget`).
  A's share lies in ``[0, M)``, B's in ``[-M, 0)``. This is exact unless A's share (uniform
  modulo ``M``) falls within the bound of the modulus' edge, which has probability below
  ``2**-RHO`` per value (:data:`~vfl.linear.budget.RHO`). Two holders are what keeps this
  exact: shares among three would wrap.
* **Sizes from public numbers only.** Every packing and bound follows from the column
  counts, the outputs, the batch size, the key size and the row count; the feature bound is
  :func:`~vfl.linear.model.public_feature_bits` of the row count (a standardised column never
  exceeds ``sqrt(rows)``), so no message says how extreme a party's values are.

The maths. Both losses (:mod:`vfl.linear.losses`) have the gradient numerator
``N = X^T (X w - t) = G w - tau`` for a batch, where ``G = X^T X`` is the joint Gram matrix
(A's columns, its intercept last, then B's, C's, ...) and ``tau = X^T t``.

* **Setup.**
  * Every party P keeps its ``G_PP`` in plaintext.
  * For parties P before Q, ``G_PQ = X_P^T X_Q``: Q multiplies P's encrypted packed rows by
    its own columns and masks the result; P's share is the masked value, Q's minus the mask.
  * ``X_P^T t`` for every P but A: A multiplies P's encrypted rows by the targets, the same
    way; P's share goes to B (a further party hands it over; with a coordinator, the
    coordinator does).
  * The result: ``G = sum_P S_P``, where ``S_P`` holds ``G_PP`` and P's shares of its cross
    blocks (P's block row and column; zero elsewhere). Each party encrypts the columns of its
    ``S_P`` for every batch, packed, and sends them to A and B (to whichever it is not):
    under the key of the holder that does not receive them.
* **Per batch.** With ``w = v_A + v_B``: ``N = sum_P S_P v_A + sum_P S_P v_B - tau``. For each
  P other than itself, holder H raises P's encrypted columns to its share ``v_H``, masks the
  packed result and sends it to the other holder, which decrypts it: every ``S_P`` a holder
  gets is encrypted under the other holder's key (a further party encrypts its ``S_P`` once
  under each holder's key, for the other holder), or under the coordinator's, which then
  decrypts and hands the slots over. So a holder sums the columns it gets once, at setup,
  and raises ``sum_{P != H} S_P`` per batch: one multi-exponentiation and one decryption per
  holder, whatever the number of parties (slots one bit wider from three parties on). H's
  share is minus its mask. A further party takes no part after setup
  (``benchmarks/vfl_lr.py`` prints the cost).
  * **Update.** Heavy-ball momentum (or SGD), linear in the gradient:
    ``velocity = beta velocity + N / (c rows) + alpha w; w -= step_p * velocity``, each
    party's block with its own step (:func:`~vfl.linear.common.shared_step`). A and B apply
    it to their own shares, truncating locally, which is exact to 2 units of ``2**-W_BITS``.
    A then re-randomises the shares with a fresh uniform offset and sends that offset to B.
  * **Averaging.** The model of an epoch is the mean of its iterates, which is linear, so
    each holder averages its own shares. SGD goes on from the last iterate. On
    default_credit this keeps the test AUC within 0.007 of scikit-learn for every seed,
    where the last iterate strayed by up to 0.018.
  * **Loss.** ``|X w - t|^2 = <w, N - tau> + |t|^2``, at the epoch's model over all rows.
    A sends its shares of ``w`` and ``N - tau`` encrypted under its **loss key**, a key pair
    it makes for this and nothing else; B multiplies in its own and returns the encrypted
    sum. A decrypts it and refuses a total outside its public bounds
    (:meth:`~vfl.linear.budget.Sizes.squares_bound`), naming B.
  * **Control.** Before each epoch A tells every party to go on, restart (the loss
    diverged or stalled: :class:`~vfl.training.LossCurve`) or stop. There is no keep bit:
    every party keeps its shares of every epoch's model and is told which one to go back to
    only at a restart, and which one to end with at the stop.
* **At the end.** A and B send every party their shares of that party's weights, so each
  learns its own part of the model, and only that.

Keys: without a coordinator each data party owns one and decrypts only values masked by
another party. What it encrypts for a peer's computations it encrypts with that peer's base,
and a result computed from it is re-randomised by a full-length power of that base before it
comes back (:mod:`vfl.crypto.rerandomize`). With a coordinator (``protocol=
"shared_coordinator"``), the coordinator holds the only key (A's loss key aside). The party
that masked a value sends it to the coordinator, which decrypts it and hands the slots to the
other holder, each request checked against the layout it derives from the public plans. So
nobody has a decryption of ciphertexts it chose: the party that picks what is decrypted never
sees the result, and the party that sees it never picked it.

**What each role learns.**

* A: the number of every party's columns, every party's curvature bound (one number each,
  which sets that party's default step), the loss once per epoch, and its own final
  weights.
* B and every further party: the number of every party's columns and of outputs, the row
  count, the curvature bounds, when the fit restarts or stops (and the epoch it goes back to
  or ends with), and its own final weights.
* The coordinator: the public plans (with the curvature bounds) and nothing else. Every
  value it decrypts carries a mask ``KAPPA`` bits longer than the value.

Nobody learns another party's gradient, residual, score or label. Each party's view is made
of values masked by another party's fresh OS randomness, so an attack on it,
:class:`vfl.audit.LabelSolveAudit` for example, recovers no more than chance (tested for
every party, with two and three). The final weights are the model itself. What they reveal
about the training data is the model's leakage (membership, attribute inference), which no
protocol for training removes.

**A party that deviates** (tested message by message in ``tests/vfl/linear/
test_deviation_shared.py``; the table is in the manual's threat model):

* Every decryption is checked: the count and layout of every request and answer, every slot
  within its mask's width (:meth:`~vfl.crypto.PaillierPrivateKey.decrypt_packed`), the loss
  within its public bounds. A failed check stops the job, naming the sender.
* B cannot steer the loss into a decryption oracle: the loss key encrypts only A's loss
  terms, so the setup's ciphertexts (A's rows, its Gram columns) multiplied into the loss
  decrypt to noise, which the bounds refuse. What B can still do is add a small multiple of
  one of A's loss terms (a fresh uniform share of the epoch's weights or gradient numerator
  over all rows) and so move the loss within its bounds. Without a keep bit, that moves
  only when the fit restarts or stops: at most ``1 + 6 + 2`` such events per fit (a stop,
  the divergence restarts, the stall shrinks), each an epoch index.
* A deviating party can shift the shares it sends or forwards (an additive attack): that
  spoils the model (a denial of service) and moves the loss A sees, not a decryption.
* .. warning:: A label party that sends chosen values instead of its loss terms learns,
  from the loss, chosen combinations of B's shares, and so the epoch's weights and
  gradient numerator over all rows (aggregates such as ``X_B^T X`` over the epochs; no
  row). Closing that takes authenticated shares (SPDZ-style MACs), which vflink does not
  implement.
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
from vfl.crypto.masked import DecryptedSlots, DecryptionRequest, mask_slots, serve_decryption
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import PackingLayout, pack_rows
from vfl.crypto.parallel import map_processes, multiexp_big_worker
from vfl.crypto.policy import Base, PublicKeyMessage, vector_from
from vfl.crypto.rerandomize import rerandomize
from vfl.crypto.slots import PeerRows
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
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
from vfl.linear.model import FEATURE_BITS, check_feature_bound
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
    "party_order",
]

logger = logging.getLogger(__name__)

SS = VLR.child("ss")


@dataclass(frozen=True)
class Plan(Message):
    """A data party's public plan, to every other and to the coordinator: its design columns
    (the label party's intercept included) and its rows. No magnitude of its values: every
    bound is derived from the row count (:class:`~vfl.linear.budget.Sizes`)."""

    KIND = "shared-protocol plan"
    columns: int
    rows: int
    curvature: float = 0.0
    """Its block's curvature bound (:func:`~vfl.training.optimizers.curvature_bound`), from
    which the parties derive its default step: one number, which says how large and how
    correlated its standardised columns are."""


@dataclass(frozen=True)
class Integers(Message):
    """Plain integers: a fresh re-randomising offset, an initial or final weight share, a
    share forwarded to the partner."""

    KIND = "integer shares"
    values: list[int]


def party_order(spec: FitSpec) -> list[str]:
    """The data parties in protocol order: the label party, its partner (the first other data
    party named), then the rest. The label party and its partner hold the shares; every
    party's Gram share is multiplied by both."""
    return [spec.label_party, *(p for p in spec.data_parties if p != spec.label_party)]


class _Keys:
    """A data party's keys: its own (or the coordinator's), each peer's, and, per peer, its
    own key encrypting with that peer's base (what the peer computes on and returns to us
    lies in the group of its base, so its re-randomisation hides how it computed:
    :mod:`vfl.crypto.rerandomize`)."""

    def __init__(self, fed: Federation, spec: FitSpec, peers: list[str]) -> None:
        self.coordinator = spec.coordinator
        self.secret: PaillierPrivateKey | None = None
        self.for_peer: dict[str, PaillierPrivateKey] = {}
        if self.coordinator is not None:
            self.key = spec.policy.accept(
                VLR.recv(fed, self.coordinator, "key", PublicKeyMessage), self.coordinator
            )
            self.peer_keys = dict.fromkeys(peers, self.key)
            return
        self.key, self.secret = spec.policy.generate()
        VLR.broadcast(fed, "key", PublicKeyMessage.of(self.key), to=peers)
        self.peer_keys = {
            p: spec.policy.accept(VLR.recv(fed, p, "key", PublicKeyMessage), p) for p in peers
        }
        for p in peers:
            SS.send(fed, p, "base", Base(h_s=self.peer_keys[p].base_bytes()))
        for p in peers:
            try:
                self.for_peer[p] = self.secret.for_base(SS.recv(fed, p, "base", Base).h_s)
            except ValueError as exc:
                Base.refuse(p, "h_s", str(exc))

    def encrypt(self, plaintexts: list[int], peer: str, workers: Any) -> list[Any]:
        """Our inputs to ``peer``'s computations: under our key with its base, or under the
        coordinator's."""
        key = self.for_peer.get(peer) or self.key
        return key.raw_encrypt(plaintexts, workers=workers)


class SharedDataRole(DataParty):
    """A data party's side of the secret-shared protocol (the label party's when ``targets``
    is given); see the module docstring. It shares with the revealing protocols' roles only
    their common start (:class:`~vfl.linear.common.DataParty`); its integer arithmetic is
    :mod:`vfl.linear.budget`."""

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        self.order = party_order(spec)
        self.me = self.order.index(fed.name)
        self.peers = [p for p in self.order if p != fed.name]
        self.fed = fed
        outputs = self.agree_outputs(fed)
        if self.is_label and spec.coordinator is not None:
            VLR.send(fed, spec.coordinator, "outputs", Outputs(count=outputs))
        seed = agree_seed(fed, spec.data_parties, VLR.tag("seed"), spec.random_state)
        self.keys = _Keys(fed, spec, self.peers)
        check_feature_bound(fed.name, self.x, len(self.x))
        x_int = np.round(self.x * 2.0**FEATURE_BITS).astype(np.int64)
        curvature = curvature_bound(x_int / 2.0**FEATURE_BITS, spec.batch_size, spec.loss.c)
        plan = Plan(columns=self.x.shape[1], rows=len(self.x), curvature=curvature)
        followers = self.peers + ([spec.coordinator] if spec.coordinator else [])
        SS.broadcast(fed, "plan", plan, to=followers)
        plans = {fed.name: plan}
        for p in self.peers:
            theirs = SS.recv(fed, p, "plan", Plan)
            if theirs.rows != len(self.x):
                Plan.refuse(p, "rows", f"is {theirs.rows}; this party has {len(self.x)} rows")
            if not 0 < theirs.curvature <= 2.0**60:  # NaN fails this too
                Plan.refuse(p, "curvature", f"is {theirs.curvature}, not a curvature bound")
            plans[p] = theirs
        self.sizes = _sizes(spec, [plans[p] for p in self.order], outputs, self.keys.key.n_length)
        shares = self._setup(x_int, seed)
        rates = [shared_step(spec, plans[p].curvature) for p in self.order]
        result = self._train(shares, seed, rates)
        if spec.learning_rate is not None and min(rates) < spec.learning_rate:
            result.notes.append(
                f"learning_rate={spec.learning_rate:g} is beyond the secret-shared protocol's "
                "stability bound; the parties stepped by "
                + ", ".join(f"{r:.3g} ({p})" for p, r in zip(self.order, rates, strict=True))
                + f", {STABLE:g} times the default step"
            )
        result.setup_seconds = shares["setup_seconds"]
        if spec.keep_views:
            result.view = self.views
        return result

    # -- who does what -----------------------------------------------------------------------

    @property
    def core(self) -> bool:
        """Whether this party holds shares (the label party and its partner)."""
        return self.me < 2

    # -- the two moves: send a masked value, receive one -------------------------------------

    def send_masked(
        self,
        tag: str,
        index: int,
        owner: str,
        vector: EncryptedVector,
        layout: PackingLayout,
        *,
        by_owner: bool = True,
    ) -> tuple[int, ...]:
        """Mask ``vector`` (packed signed slots under ``owner``'s key, or the coordinator's)
        and send it on its way to the party the other share is for: to ``owner`` to decrypt,
        or, with a coordinator, to the coordinator, which hands the slots to that party.
        Without a coordinator the result gets a full-length power of our base: when the owner
        encrypted every input, with our base (``by_owner``: a peer's rows at setup, the other
        holder's ``S`` between two parties), that alone hides how it was computed, and the
        masks are added as plaintexts; when a further party encrypted some (its ``S_P``
        under the owner's key), the masks are encrypted afresh as well
        (:func:`~vfl.crypto.masked.mask_slots`). Returns the masks (our share is minus
        each)."""
        if self.keys.coordinator is None and by_owner:
            masked, masks = mask_slots(vector, layout, for_key_owner=True)
        else:
            if self.keys.coordinator is None:
                vector = rerandomize(vector, for_key_owner="base")
            masked, masks = mask_slots(vector, layout)
        if self.keys.coordinator is None:
            SS.send(self.fed, owner, tag, Encrypted(data=masked.to_wire()), index)
        else:
            request = DecryptionRequest(data=masked.to_wire(), layout=layout.to_dict())
            _relayed(tag, index).send(self.fed, self.keys.coordinator, "req", request)
        return masks.masks

    def receive_opened(
        self, tag: str, index: int, computer: str, owner: str, layout: PackingLayout
    ) -> list[int]:
        """The slots of a value ``computer`` masked for us (ciphertexts under ``owner``'s
        key): decrypted by us (we are the owner), forwarded by the owner, or handed over by
        the coordinator. Nobody but the party that masked them chose these ciphertexts."""
        fed = self.fed
        if self.keys.coordinator is not None:
            tags = _relayed(tag, index)
            answer = tags.recv(fed, self.keys.coordinator, "plain", DecryptedSlots)
            return _count(answer.slots, layout, self.keys.coordinator)
        if owner == fed.name:
            return self.decrypt(tag, index, computer, layout)
        forwarded = SS.recv(fed, owner, f"{tag}-fwd", Integers, index)
        return _count(forwarded.values, layout, owner)

    def decrypt(self, tag: str, index: int, computer: str, layout: PackingLayout) -> list[int]:
        """Receive a masked value ``computer`` computed under our key and decrypt its slots;
        every slot must fit its mask's width (else the job stops, naming the sender)."""
        data = SS.recv(self.fed, computer, tag, Encrypted, index).data
        vector = vector_from(self.keys.key, data, computer)
        if vector.shape != (layout.n_ciphertexts,) or vector.exponent != 0:
            Encrypted.refuse(computer, "data", f"has shape {vector.shape}, not this step's")
        if self.keys.secret is None:
            raise RuntimeError(f"party {self.fed.name!r} holds no key to decrypt {tag!r} with")
        try:
            slots = self.keys.secret.decrypt_packed(vector, layout, workers=self.spec.workers)
        except ValueError as exc:
            Encrypted.refuse(computer, "data", f"does not decrypt as this step's values: {exc}")
        return [int(v) for v in slots]

    def forward(self, tag: str, index: int, computer: str, to: str, layout: PackingLayout) -> None:
        """A party outside the two share holders: decrypt what ``computer`` masked under our
        key and forward the slots to ``to``, the other share holder (no coordinator; with
        one, the coordinator hands them over and we see nothing)."""
        if self.keys.coordinator is not None:
            return
        slots = self.decrypt(tag, index, computer, layout)
        SS.send(self.fed, to, f"{tag}-fwd", Integers(values=slots), index)

    # -- setup -------------------------------------------------------------------------------

    def _setup(self, x_int: np.ndarray[Any, Any], seed: int) -> dict[str, Any]:
        spec, sizes, fed, me = self.spec, self.sizes, self.fed, self.me
        began = time.perf_counter()
        self.views: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        peer_rows = self._exchange_rows(x_int)
        fixed, _ = Schedule(len(x_int), spec.batch_size, seed).fixed()
        k_out, m = sizes.outputs, len(self.order)
        t_int = None
        if self.targets is not None:
            if np.any(np.abs(self.targets) > SCORE_BOUND):
                raise ValueError(f"party {fed.name!r}: targets beyond {SCORE_BOUND:g}")
            t_int = np.round(self.targets * 2.0 ** (FEATURE_BITS + W_BITS)).astype(np.int64)
        s_mats, taus, t_squares = [], [], []
        mine = sizes.block(me)
        for b, rows in enumerate(fixed):
            s = np.zeros((sizes.joint, sizes.joint), dtype=object)
            tau = np.zeros((sizes.joint, k_out), dtype=object)
            s[mine, mine] = gram(x_int[rows], x_int[rows], sizes.gram_bits)
            # cross Gram blocks X_p^T X_q (p < q): q multiplies p's rows by its columns and
            # keeps minus its masks; p's share is the masked value
            for p in range(m):
                for q in range(p + 1, m):
                    if me not in (p, q):
                        continue
                    layout, packing = sizes.gram_layout(p, q), sizes.row_packing(p)
                    if me == q:
                        owner = self.order[p]
                        product = peer_rows[owner].combine(
                            rows, x_int[rows], to_key_owner=False, workers=spec.workers
                        )
                        masks = self.send_masked("gram", b, owner, product, layout)
                        h = -by_rows(masks, packing, sizes.blocks[q])
                    else:
                        got = self.receive_opened("gram", b, self.order[q], fed.name, layout)
                        h = by_rows(got, packing, sizes.blocks[q])
                    s[sizes.block(p), sizes.block(q)] = h
                    s[sizes.block(q), sizes.block(p)] = h.T
            # X_p^T t: the label party multiplies p's rows by the targets; the masked value is
            # p's share, which a party outside the two share holders hands to the partner
            if t_int is not None:
                tau[mine] = exact(x_int[rows]).T @ exact(t_int[rows])
                t_squares.append(int(np.sum(exact(t_int[rows]) ** 2)))
                for p in range(1, m):
                    owner = self.order[p]
                    product = peer_rows[owner].combine(
                        rows, t_int[rows], to_key_owner=False, workers=spec.workers
                    )
                    masks = self.send_masked("tau", b, owner, product, sizes.tau_layout(p))
                    tau[sizes.block(p)] = -by_rows(masks, sizes.row_packing(p), k_out)
            else:
                for p in range(1, m):
                    if p != me and me != 1:
                        continue
                    layout = sizes.tau_layout(p)
                    if me > 1:  # ours, decrypted here (or by the coordinator) for the partner
                        self.forward("tau", b, self.order[0], self.order[1], layout)
                        continue
                    got = self.receive_opened("tau", b, self.order[0], self.order[p], layout)
                    tau[sizes.block(p)] = by_rows(got, sizes.row_packing(p), k_out)
            s_mats.append(s)
            taus.append(tau)
        # every batch's S, and their sum (for the epoch's loss), encrypted once per share
        # holder, columns packed, for its products
        span = len(fixed)
        s_mats.append(sum(s_mats[1:], s_mats[0]))
        taus.append(sum(taus[1:], taus[0]))
        zero = np.ones((sizes.joint, sizes.joint), dtype=bool)  # S_P's structural zeros
        zero[mine, :] = False
        zero[:, mine] = False
        shared_cts: list[Any] | None = None
        for c in (0, 1):  # S_P for each holder: under the other holder's key (or K's)
            if c == me:
                continue
            holder = self.order[c]
            key = self.keys.key if self.core else self.keys.peer_keys[self.order[1 - c]]
            if shared_cts is None or self.keys.coordinator is None:
                plains: list[int | None] = []
                for b, s in enumerate(s_mats):
                    packing = sizes.product_packing(span if b == span else 1)
                    plains += pack_columns(s, packing, int(key.n), zero)
                live = [p for p in plains if p is not None]
                if self.core:  # our own key, with the other holder's base
                    encrypted = iter(self.keys.encrypt(live, holder, spec.workers))
                else:
                    encrypted = iter(key.raw_encrypt(live, workers=spec.workers))
                shared_cts = [mpz(1) if p is None else next(encrypted) for p in plains]
            sent = 0
            for b in range(span + 1):
                size = sizes.joint * sizes.groups(span if b == span else 1)
                block = EncryptedVector(key, shared_cts[sent : sent + size], 0, fresh=True)
                SS.send(fed, holder, "s", Encrypted(data=block.to_wire()), b)
                sent += size
        peer_s: dict[int, list[list[Any]]] = {}
        if self.core:  # every S_P we get is under the other holder's key (or K's)
            under = self.keys.peer_keys[self.order[1 - me]]
            for p, owner in enumerate(self.order):
                if p == me:
                    continue
                blocks = []
                for b in range(span + 1):
                    data = SS.recv(fed, owner, "s", Encrypted, b).data
                    block = vector_from(under, data, owner)
                    size = sizes.joint * sizes.groups(span if b == span else 1)
                    if block.shape != (size,) or block.exponent != 0:
                        Encrypted.refuse(owner, "data", f"holds {block.shape} encrypted columns")
                    blocks.append(block.ciphertexts)
                peer_s[p] = blocks
        # they are all under one key: their sum, column by column, is the sum of the other
        # parties' Gram shares, raised once per batch whatever the number of parties
        combined: list[list[Any]] = []
        if self.core:
            nsq = self.keys.peer_keys[self.order[1 - me]].nsquare
            for b in range(span + 1):
                columns = [blocks[b] for blocks in peer_s.values()]
                combined.append([_product(cts, nsq) for cts in zip(*columns, strict=True)])
        return {
            "fixed": fixed,
            "s": s_mats,
            "tau": taus,
            "t_squares": sum(t_squares),
            "peer_s": combined,
            "setup_seconds": time.perf_counter() - began,
        }

    def _exchange_rows(self, x_int: np.ndarray[Any, Any]) -> dict[str, PeerRows]:
        """Our encrypted rows to every peer and theirs to us (each party's packing from the
        public sizes, refused otherwise): once for all under the coordinator's key; per peer,
        with its base, under our own."""
        spec, sizes = self.spec, self.sizes
        packing = sizes.row_packing(self.me)
        n = int(self.keys.key.n)

        def rows_for(peer: str) -> Any:
            def own_rows(lo: int, hi: int) -> list[list[Any]]:
                plain = pack_rows(x_int[lo:hi], packing, n)
                return [self.keys.encrypt(p, peer, spec.workers) for p in plain]

            return own_rows

        rounds = [self.peers] if self.keys.coordinator is not None else [[p] for p in self.peers]
        received: dict[str, PeerRows] = {}
        for peers in rounds:
            own = (self.keys.key, packing, rows_for(peers[0]))
            keys = {p: self.keys.peer_keys[p] for p in peers}
            received.update(
                exchange_rows(self.fed, own, keys, len(x_int), spec.batch_size, spec.workers)
            )
        for p, rows in received.items():
            if rows.packing != sizes.row_packing(self.order.index(p)):
                Plan.refuse(p, "columns", "do not match the packing of its encrypted rows")
        return received

    # -- training ----------------------------------------------------------------------------

    def _initial_shares(self) -> np.ndarray[Any, Any]:
        """Shares of the starting weights (zeros, or this party's part for a warm start): each
        party splits its own weights into a uniform share for the label party and the rest
        for the partner (keeping its own where it is one of them)."""
        sizes, fed, label, partner = self.sizes, self.fed, self.order[0], self.order[1]
        w = self.part.weights(with_intercept=self.is_label)
        w_int = exact(np.round(np.asarray(w, dtype=float) * 2.0**W_BITS).astype(np.int64))
        m = sizes.weight_modulus
        given = uniform(w_int.shape, m)  # the label party's share of our block
        rest = reduce_share(w_int - given, m, False)  # the partner's
        v = np.zeros((sizes.joint, sizes.outputs), dtype=object)
        mine = sizes.block(self.me)
        if self.me == 0:
            SS.send(fed, partner, "init", Integers(values=flat(rest)))
            v[mine] = given
        elif self.me == 1:
            SS.send(fed, label, "init", Integers(values=flat(given)))
            v[mine] = rest
        else:
            SS.send(fed, label, "init", Integers(values=flat(given)))
            SS.send(fed, partner, "init", Integers(values=flat(rest)))
            return v
        for p in range(len(self.order)):
            if p != self.me:
                block = sizes.block(p)
                shape = (block.stop - block.start, sizes.outputs)
                got = SS.recv(fed, self.order[p], "init", Integers)
                v[block] = _unflat(got, shape, self.order[p])
        return v

    def _train(self, shares: dict[str, Any], seed: int, rates: list[float]) -> FitResult:
        spec, sizes, fed = self.spec, self.sizes, self.fed
        v = self._initial_shares()
        fixed = shares["fixed"]
        _, orders = Schedule(len(self.x), spec.batch_size, seed).fixed()
        result = FitResult(part=None, steps=list(rates))
        curve = loss_curve(spec, self.targets)
        followers = self.peers + ([spec.coordinator] if spec.coordinator else [])
        mine = sizes.block(self.me)
        if self.is_label:
            self.loss_key, self.loss_secret = spec.policy.generate()
            SS.send(fed, self.order[1], "loss-key", PublicKeyMessage.of(self.loss_key))
            # the loss terms' obfuscators, drawn in the background while the batches run
            # (the partner waits while we encrypt them: a pool empties that wait)
            self.loss_key.start_obfuscator_pool(self._loss_terms())
        elif self.me == 1:
            message = SS.recv(fed, self.order[0], "loss-key", PublicKeyMessage)
            self.loss_key = spec.policy.accept(message, self.order[0])
        optimizers = [make_optimizer(spec.optimizer, learning_rate=r) for r in rates]
        velocity = np.zeros_like(v)
        models = [v]  # every epoch's model: we are told which to keep only when it matters
        kept = 0
        epoch = 0
        stopped = False
        shown = EpochProgress(fed.name, spec.max_iter, spec.verbose if self.is_label else 0)
        while True:
            if self.is_label:
                stop = epoch >= spec.max_iter or stopped
                kept = len(curve.values) if curve.keep else kept
                told = kept if stop or curve.restart else -1
                control = self._control(stop, curve.restart, told)
                SS.broadcast(fed, "epoch", control, to=followers)
            else:
                control = SS.recv(fed, self.order[0], "epoch", EpochControl)
                if (control.stop or control.restart) and not 0 <= control.kept < len(models):
                    EpochControl.refuse(self.order[0], "kept", f"is {control.kept}")
                kept = control.kept
            if control.restart:  # diverged: back to the kept shares, a smaller step
                v, velocity = models[kept], np.zeros_like(v)
                rates = [r * RESTART_FACTOR for r in rates]
                optimizers = [make_optimizer(spec.optimizer, learning_rate=r) for r in rates]
            if control.stop:
                break
            began = time.perf_counter()
            total = np.zeros_like(v)
            for position, b in enumerate(next(orders)):
                n_share = self._gradient(shares, b, 1, v, position)
                if not self.core:
                    continue
                if spec.keep_views:  # our share of our gradient numerator, for audits
                    scaled = floats(n_share[mine], 2 * FEATURE_BITS + W_BITS)
                    self.views.append((fixed[b].copy(), scaled))
                v, velocity = self._step(optimizers, epoch, fixed[b], n_share, v, velocity)
                total = total + v
            # the epoch's model is the mean of its iterates (tail averaging: SGD goes on from
            # the last one); shares average to shares of the mean, in their own ranges
            model = total // len(fixed)
            models.append(model)
            loss = self._epoch_loss(shares, model)
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
        if self.is_label:
            self.loss_key.stop_obfuscator_pool()
        self._reveal(models[kept])
        result.part = self.part
        return result

    def _control(self, stop: bool, restart: bool, kept: int) -> EpochControl:
        """The label party's word before an epoch: no keep bit (every party keeps every
        epoch's model), the kept epoch only at a restart or the stop."""
        return EpochControl(stop=stop, restart=restart, kept=kept)

    def _step(
        self,
        optimizers: list[Optimizer],
        epoch: int,
        rows: np.ndarray[Any, Any],
        n_share: np.ndarray[Any, Any],
        v: np.ndarray[Any, Any],
        velocity: np.ndarray[Any, Any],
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """One optimiser step on the two share holders' shares (each party's block with its
        step), each truncating its own (exact to a unit of ``2**-W_BITS`` per product), then a
        fresh re-randomisation of weights and velocity: the label party adds uniform offsets
        and sends them to its partner, which subtracts them."""
        spec, sizes, fed = self.spec, self.sizes, self.fed
        factors = [
            fixed_point_step(o, epoch, spec.loss.c, len(rows), spec.alpha) for o in optimizers
        ]
        to_n, to_alpha, beta, _ = factors[0]
        step = np.empty((sizes.joint, 1), dtype=object)
        for p in range(len(self.order)):
            step[sizes.block(p)] = factors[p][3]
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
            SS.send(fed, self.order[1], "offset", Integers(values=flat(offset)))
            both = reduce_share(both + offset, modulus, True)
        else:
            got = SS.recv(fed, self.order[0], "offset", Integers)
            offset = _unflat(got, both.shape, self.order[0])
            both = reduce_share(both - offset, modulus, False)
        return both[: len(v)], both[len(v) :]

    def _gradient(
        self, shares: dict[str, Any], b: int, span: int, v: np.ndarray[Any, Any], index: int
    ) -> np.ndarray[Any, Any]:
        """Our reduced share of ``N = G w - tau`` of batch ``b`` (or of all batches, ``span``
        of them; ``index``: the step's position in the epoch, which tags its messages): each
        share holder raises every other party's encrypted ``S_P`` columns (all under the other
        holder's key, or the coordinator's) to its share and masks the result for the other
        holder, which decrypts it (or the coordinator does and hands the slots over). Returns
        zeros at a further party, which holds no share and takes no part after setup."""
        sizes, me, order = self.sizes, self.me, self.order
        layout, packing = sizes.product_layout(span), sizes.product_packing(span)
        tag = "prod" if span == 1 else "prod-all"
        if not self.core:  # a further party takes no part after setup
            return np.zeros((sizes.joint, sizes.outputs), dtype=object)
        sign = 1 if me == 0 else -1
        e = v * sign  # non-negative at both holders
        groups = packing.groups
        share = np.zeros((sizes.joint, sizes.outputs), dtype=object)
        other = order[1 - me]
        under = self.keys.peer_keys[other]  # the others' S, summed, under the other's key
        columns = shares["peer_s"][b]
        jobs = []
        for k in range(sizes.outputs):
            for g in range(groups):
                live = [c for c in range(sizes.joint) if columns[c * groups + g] != 1]
                bases = [columns[c * groups + g] for c in live]
                jobs.append((bases, [int(e[c, k]) for c in live], under.nsquare))
        products = map_processes(multiexp_big_worker, jobs, self.spec.workers)
        vector = EncryptedVector(under, products, 0)
        # the other holder encrypted its own S with our base: a full-length power of it
        masks = self.send_masked(tag, index, other, vector, layout, by_owner=len(order) == 2)
        share = share - sign * by_rows(masks, packing, sizes.outputs)
        got = self.receive_opened(tag, index, other, self.fed.name, layout)
        share = share - sign * by_rows(got, packing, sizes.outputs)
        s, tau = shares["s"][b], shares["tau"][b]
        return reduce_share(s @ v + share - tau, sizes.n_modulus(span), self.is_label)

    def _epoch_loss(self, shares: dict[str, Any], v: np.ndarray[Any, Any]) -> float:
        """The mean training loss of the epoch's model (its mean iterate, shares ``v``) over
        all rows; the label party learns it, the others return 0.0. ``|X w - t|^2 =
        <w, N - tau> + |t|^2`` from the holders' shares of ``N`` over all batches; the
        partner's cross terms travel under the label party's loss key, a key used for nothing
        else, and the total must lie within its public bounds."""
        sizes, fed = self.sizes, self.fed
        span = len(shares["fixed"])
        n_share = self._gradient(shares, span, span, v, span)
        if not self.core:
            return 0.0
        modulus = sizes.n_modulus(span)
        # + lambda w (intercept excluded): <w, m> is then |X w - t|^2 - |t|^2 plus the
        # penalty, so the tracked loss is the objective minimised (protocol.penalty_term)
        penalised = v * sizes.penalty
        penalised[sizes.d_a - 1] = 0
        m_share = reduce_share(n_share - shares["tau"][span] + penalised, modulus, self.is_label)
        own = dot(v, m_share)
        label = self.order[0]
        if not self.is_label:
            got = vector_from(self.loss_key, SS.recv(fed, label, "loss", Encrypted).data, label)
            if got.shape != (2 * v.size,) or got.exponent != 0:
                Encrypted.refuse(label, "data", f"holds {got.shape} loss terms")
            total = self._loss_reply(got, m_share, v, own)
            SS.send(fed, label, "loss-total", Encrypted(data=total.to_wire()))
            return 0.0
        terms = self.loss_key.raw_encrypt(flat(v) + flat(m_share))
        self.loss_key.start_obfuscator_pool(self._loss_terms())  # the next epoch's
        vector = EncryptedVector(self.loss_key, terms, 0, fresh=True)
        SS.send(fed, self.order[1], "loss", Encrypted(data=vector.to_wire()))
        partner = self.order[1]
        data = SS.recv(fed, partner, "loss-total", Encrypted).data
        total = vector_from(self.loss_key, data, partner)
        if total.shape != (1,) or total.exponent != 0:
            Encrypted.refuse(partner, "data", "is not one loss term")
        n = int(self.loss_key.n)
        raw = int(self.loss_secret.raw_decrypt(total.ciphertexts)[0])
        value = raw - n if raw > n // 2 else raw
        squares = own + shares["t_squares"] - value
        bound = sizes.squares_bound()
        if not 0 <= squares <= bound:
            Encrypted.refuse(
                partner,
                "data",
                f"makes the loss total {squares:.3g} units, outside its public bounds "
                f"[0, {float(bound):.3g}]: its loss terms, or a share that reached it, were "
                "not computed as the protocol says (with more than two data parties, a share "
                "may have come from another party)",
            )
        scaled = squares / 2.0 ** (2 * (FEATURE_BITS + W_BITS))
        return self.spec.loss.mean_loss(scaled, len(self.x), sizes.outputs)

    def _loss_terms(self) -> int:
        """How many values the label party encrypts under its loss key per epoch."""
        return 2 * self.sizes.joint * self.sizes.outputs

    def _loss_reply(
        self,
        got: EncryptedVector,
        m_share: np.ndarray[Any, Any],
        v: np.ndarray[Any, Any],
        own: int,
    ) -> EncryptedVector:
        """The partner's encrypted part of the loss: the cross terms ``<v_A, m_B> + <m_A,
        v_B>`` and its own ``<v_B, m_B>``, negated, re-randomised uniformly (the label party
        owns the loss key and encrypted the inputs)."""
        exps = [-int(x) for x in m_share.reshape(-1)] + [-int(x) for x in v.reshape(-1)]
        key = self.loss_key
        cross = EncryptedVector(key, [multiexp_big(got.ciphertexts, exps, key.nsquare)], 0)
        own_ct = key.raw_encrypt([(-own) % int(key.n)])
        total = cross + EncryptedVector(key, own_ct, 0)
        return rerandomize(total, for_key_owner=True)

    def _reveal(self, v: np.ndarray[Any, Any]) -> None:
        """The two share holders send every party its block of their shares; each keeps its
        own weights, and only those."""
        sizes, fed, order = self.sizes, self.fed, self.order
        if self.core:
            for p, name in enumerate(order):
                if p != self.me:
                    SS.send(fed, name, "final", Integers(values=flat(v[sizes.block(p)])))
        mine = sizes.block(self.me)
        shape = (mine.stop - mine.start, sizes.outputs)
        total = v[mine] if self.core else np.zeros(shape, dtype=object)
        for c in (0, 1):
            if c != self.me:
                total = total + _unflat(SS.recv(fed, order[c], "final", Integers), shape, order[c])
        w = floats(total, W_BITS)
        if not np.all(np.abs(w) < 2.0**W_INT_BITS):
            raise FloatingPointError(
                f"party {fed.name!r}: weights beyond {2**W_INT_BITS}; training diverged "
                "(lower learning_rate or standardize the features)"
            )
        self.part.set_weights(w, with_intercept=self.is_label)


def _product(ciphertexts: tuple[Any, ...], nsquare: Any) -> Any:
    """The homomorphic sum of ciphertexts under one key (the trivial 1 stays 1)."""
    out = ciphertexts[0]
    for c in ciphertexts[1:]:
        if c != 1:
            out = c if out == 1 else out * c % nsquare
    return out


def _count(values: list[int], layout: PackingLayout, sender: str) -> list[int]:
    if len(values) != layout.count:
        DecryptedSlots.refuse(sender, "slots", f"holds {len(values)} values, not {layout.count}")
    return [int(x) for x in values]


def _unflat(message: Integers, shape: tuple[int, ...], sender: str) -> np.ndarray[Any, Any]:
    if len(message.values) != math.prod(shape):
        Integers.refuse(sender, "values", f"holds {len(message.values)}, not {math.prod(shape)}")
    out = np.empty(shape, dtype=object)
    out.reshape(-1)[:] = [int(x) for x in message.values]
    return out


def _sizes(spec: FitSpec, plans: list[Plan], outputs: int, key_bits: int) -> Sizes:
    order = party_order(spec)
    for name, p in zip(order, plans, strict=True):
        if not 1 <= p.columns <= 100_000 or not 1 <= p.rows <= 10**9:
            Plan.refuse(name, "columns", f"plan {p} is not a usable design")
    rows = plans[0].rows
    penalty = round(penalty_weight(spec, rows) * 2.0 ** (2 * FEATURE_BITS))
    blocks = tuple(p.columns for p in plans)
    return Sizes(blocks, outputs, spec.batch_size, key_bits, rows, penalty)


class SharedCoordinatorRole:
    """The key holder of ``protocol="shared_coordinator"``: it decrypts each masked share
    that one party sends for another and hands the slots to that other party, every request
    checked against the layout derived from the public plans. It decrypts no loss: the label
    party has its own loss key."""

    def __init__(self, spec: FitSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> FitResult:
        spec = self.spec
        order = party_order(spec)
        public_key, private_key = spec.policy.generate()
        VLR.broadcast(fed, "key", PublicKeyMessage.of(public_key), to=order)
        plans = {p: SS.recv(fed, p, "plan", Plan) for p in order}
        outputs = int(VLR.recv(fed, order[0], "outputs", Outputs).count)
        rows = plans[order[0]].rows
        for p in order[1:]:
            if plans[p].rows != rows:
                Plan.refuse(p, "rows", f"is {plans[p].rows}; the label party has {rows}")
        if not spec.batch_size:  # derived from the row count, as the data parties do
            spec = replace(spec, batch_size=auto_batch_size(max(rows, 1)))
        sizes = _sizes(spec, [plans[p] for p in order], outputs, public_key.n_length)
        batches = Schedule(rows, spec.batch_size, 0).batches_per_epoch()
        m = len(order)

        def relay(tag: str, index: int, sender: int, receiver: int, layout: PackingLayout) -> None:
            serve_decryption(
                fed,
                order[sender],
                _relayed(tag, index),
                private_key,
                expected=layout.n_ciphertexts,
                layout=layout,
                answer_to=order[receiver],
            )

        for b in range(batches):
            for i in range(m):
                for j in range(i + 1, m):
                    relay("gram", b, j, i, sizes.gram_layout(i, j))
            for j in range(1, m):
                relay("tau", b, 0, 1, sizes.tau_layout(j))
        epochs = 0
        while not SS.recv(fed, order[0], "epoch", EpochControl).stop:
            for index, span in [*((b, 1) for b in range(batches)), (batches, batches)]:
                tag = "prod" if span == 1 else "prod-all"
                for c in (0, 1):
                    relay(tag, index, c, 1 - c, sizes.product_layout(span))
            epochs += 1
        return FitResult(part=None, n_iter=epochs)


def _relayed(tag: str, index: int) -> Namespace:
    """The tags of one decryption the coordinator relays (step ``tag``, position ``index``)."""
    return SS.child(f"{tag}-b{index}")
