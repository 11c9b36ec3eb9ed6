"""The protected interactive layer: the top's first layer computed on encrypted embeddings, so
that the label party never sees a data party's raw embedding.

With ``protocol="protected"`` (or ``protocol=ProtectedLayer(...)``) the split network is::

    z = sum_p h_p W_p + (the label party's own h_L W_L) + b ;   outputs = top(relu(z))

where ``h_p`` is data party ``p``'s bottom output (``n x k``) and ``W_p`` (``k x m``) its block
of the first top layer. ``W_p`` is held by nobody: it is **additively shared**, ``W_p = A + B``
as exact fixed-point integers, the label party holding ``A`` and the data party ``B``. Both
parties hold a Paillier key (2048 bits by default); ``[x]_L`` is under the label party's key,
``[x]_P`` under the data party's. The data party also holds ``[A]_L``, the label party's
share under the label party's key, which it encrypted at the start and steps itself. Per
batch:

1. the data party computes ``[h A]_L`` from its ``[A]_L`` (one multi-exponentiation per row,
   the exponents its own ``h``), adds its plaintext ``h B``, and sends ``[z_p]_L = [h W_p]_L``;
   with it ``[B]_P`` (packed). The label party decrypts ``z_p`` -- the layer's output for
   this party, never ``h`` -- and runs the rest of the top;
2. with ``d = dLoss/dz``, the label party sends ``[d]_L`` and ``[g]_P = [d B^T]_P + d A^T``
   (``d`` there at :func:`_g_layout`'s precision), the gradient with respect to the
   embedding (the data party decrypts it and back-propagates through its bottom, as in
   plain split learning);
3. the data party computes ``[h^T d]_L``, adds a mask ``M`` (``kappa = 40`` bits beyond the
   value, from the OS; :func:`vfl.crypto.masked.mask_slots`) and sends it; the label party
   decrypts ``G + M`` only. The shares step by plain SGD, exactly: ``A -= eta (G + M)`` at
   the label party, ``B += eta M`` at the data party, so ``A + B`` takes the step
   ``-eta G`` and neither party learns ``G`` or ``W_p``; the data party steps ``[A]_L`` by
   the very ciphertexts it sent (``[A]_L [G + M]_L^(-eta)``).

The data party draws ``W_p``'s initial value (uniform, as ``nn.Linear`` does, from OS
randomness) and a uniform share ``B`` of ``kappa`` bits more, and gives the label party
``A = W_p - B``. Whatever crosses to the key's owner is re-randomised in the group of the
sender's base (:mod:`vfl.crypto.rerandomize`). Scoring uses the training key: the label party
keeps its key pair with its share, the data party ``[A]_L`` with its own (a data party asked
to score under another key refuses, naming the label party).

Why the data party steps ``[A]_L``: before, the label party sent ``[A]_L`` every batch, and a
label party that sent ``[A + Delta]_L`` read ``h Delta`` -- the raw embedding -- in ``z``. The
shares now live at ``2**-FW`` with ``FW = FH + FD + ETA_BITS`` fractional bits, so that the
step ``eta (G + M)`` needs no rounding and a ciphertext can follow it; every value of ``A`` is
one the protocol made. What a deviating party still gains
(``tests/vfl/split/test_protected_deviation.py``, docs/deviation.md): a label party that
sends a chosen ``d`` reads the inner products of the next batch's embeddings with a row of
this one (exactly the geometry the honest layer shows approximately); a data party that
sends ``[B + Delta]_P`` reads ``d`` in its gradient ``d (W + Delta)^T``. Closing these takes
authenticated shares or proofs that each encrypted value is the protocol's.

What each party learns. The label party: ``z_p = h_p W_p`` for every row it trains or scores
(the layer's output, the price of running the top in the clear), ``G + M`` (hidden by ``M``),
its share ``A`` (hidden by ``B``); not ``h_p``, not ``W_p``. A label party with auxiliary rows
can still fit a decoder from ``z_p`` to the features as it could from ``h_p`` -- the layer
hides the embedding, not what its output reveals (:func:`vfl.audit.split.split_privacy_audit`
measures both). Without any auxiliary rows, ``z_p`` keeps ``h_p``'s pairwise geometry:
``W_p W_p^T`` is near a multiple of the identity, so ``z_p z_p^T`` follows ``h_p h_p^T``
(correlation 0.96 per batch on FATE's breast table, ``benchmarks/split_geometry.py``) and
the label party learns which rows are alike (the ``"embedding-geometry"`` audit,
:class:`vfl.audit.split.EmbeddingGeometryAudit`; ``privacy=EmbeddingNoise(...)`` adds noise
to ``h_p`` before the layer and lowers it). The data party: the gradient with respect to its
embedding, as in plain split learning (label leakage through it is measured by the same
audit, and reduced by the same defences), and its share ``B``; not ``d``, ``G`` or ``W_p``
after the first step.

Choices and limits. The shared block steps by plain SGD at ``ProtectedLayer.learning_rate``
(Adam's per-coordinate scaling would need ``G`` in the clear); the label party's own block,
the bias, the rest of the top and every bottom use the estimator's optimiser. Fixed point:
``h`` with 24 fractional bits, ``d`` with 32 (in the embedding gradient ``g``, which only
feeds a bottom in floating point, with the most from 26 to 32 that packs a row of ``g`` in
its fewest ciphertexts: :func:`_g_layout`), ``W`` and the shares with 76, the learning rate
with 20 (the layer's rate is rounded to a multiple of ``2**-20``); a value beyond its bound
(``|h| < 2**12``, ``|d|, |W| < 2**8``) stops the fit with an error naming the party. The
slots are sized for the fit's batch size (public).
"""

from __future__ import annotations

import functools
import math
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from vfl.crypto import slots
from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.masked import mask_slots
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import MIN_KAPPA, RowPacking
from vfl.crypto.policy import Base, KeyPolicy, PublicKeyMessage, vector_from
from vfl.crypto.vector import EncryptedVector
from vfl.extras import optional
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
from vfl.federation.wire import CiphertextBlock

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["LAYER", "InteractiveTop", "LabelSide", "LayerShare", "ProtectedLayer", "SenderSide"]

LAYER = Namespace("split-layer")
"""The tags of the protected layer (``split-layer/encw/<epoch>/<batch>``, ...)."""

FH, FD = 24, 32
"""Fractional bits of the embeddings and of the gradients with respect to the layer's
output."""

ETA_BITS = 20
"""Fractional bits of the learning rate in the integer share update."""

FW = FH + FD + ETA_BITS
"""Fractional bits of the shared weights: a step ``eta * h^T d`` lands on them exactly, so
that the data party can step the label party's encrypted share as the label party steps it
(no rounding, which no ciphertext could follow)."""

HB, DB, WB = 12, 8, 8
"""Bounds, in bits, of ``|h|``, ``|d|`` and ``|W|``."""


KAPPA = MIN_KAPPA
"""Statistical hiding of the masked weight gradient and of the initial share (bits)."""

DECRYPT_THREADS = 2
"""Threads of a decryption (its ``p`` and ``q`` halves; capped at the machine's cores)."""


@dataclass(frozen=True)
class ProtectedLayer:
    """The option: the top's first layer on encrypted embeddings (see the module docstring).

    Parameters
    ----------
    width : int, optional
        The layer's outputs ``m``. Default: the default top's first hidden size (the layer
        *is* that layer); required with a top module of your own, which then takes ``m``
        inputs.
    learning_rate : float, optional
        Plain SGD step of the shared block (default: the estimator's ``learning_rate``).
    key_bits : int
        Paillier modulus of both parties' keys (2048 by default).
    insecure : bool
        Allow keys below 2048 bits (tests only; warns).
    workers : int, optional
        Worker processes of each party's multi-exponentiations and re-randomisations (default:
        one per core, at most 4).
    """

    width: int | None = None
    learning_rate: float | None = None
    key_bits: int = 2048
    insecure: bool = False
    workers: int | None = None

    def worker_count(self) -> int:
        """``workers``, or one per core (at most 4)."""
        return self.workers if self.workers is not None else min(os.cpu_count() or 1, 4)

    def check(self) -> None:
        if self.width is not None and (
            isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1
        ):
            raise ValueError(f"ProtectedLayer width must be a positive integer, got {self.width!r}")
        if self.learning_rate is not None and not (
            math.isfinite(self.learning_rate) and self.learning_rate > 0
        ):
            raise ValueError(
                f"ProtectedLayer learning_rate must be > 0, got {self.learning_rate!r}"
            )
        self.policy()

    def policy(self) -> KeyPolicy:
        if not 512 <= self.key_bits <= 8192:
            raise ValueError(f"ProtectedLayer key_bits must be 512..8192, got {self.key_bits}")
        if self.key_bits < 2048 and not self.insecure:
            raise ValueError(
                f"ProtectedLayer key_bits={self.key_bits} is below 2048: pass insecure=True "
                "(tests only)"
            )
        return KeyPolicy(self.key_bits, self.insecure)


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerSetup(Message):
    """The label party to a data party: the layer's width and the joined embedding width (the
    data party initialises its block as ``nn.Linear(joined, width)`` would)."""

    KIND = "protected layer setup"
    width: int
    joined: int


@dataclass(frozen=True)
class Share(Message):
    """The data party's initial ``A = W - B`` (exact integers, row-major ``k x m``)."""

    KIND = "weight share"
    values: list[int]


@dataclass
class LayerShare:
    """One party's state of the protected layer with one peer, kept with the fitted model.

    ``values``: its additive share of the block ``W_p`` (``k x m`` exact integers at
    ``2**-FW``); ``slot_bits``: the slots of the layer's packing. A data party also keeps
    the label party's share ``[A]_L`` as it stepped it (``encrypted``: packed rows under the
    label party's key, whose modulus is ``modulus``); the label party keeps its key's primes
    (``key``), the key that ``[A]_L`` is under."""

    values: np.ndarray[Any, Any]
    slot_bits: int = 0
    encrypted: list[int] | None = None
    modulus: int | None = None
    key: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Hexadecimal strings, for a model file."""
        out: dict[str, Any] = {
            "values": [[format(int(v), "x") for v in row] for row in self.values.tolist()],
            "slot_bits": self.slot_bits,
        }
        if self.encrypted is not None and self.modulus is not None:
            out["encrypted"] = [format(int(c), "x") for c in self.encrypted]
            out["modulus"] = format(int(self.modulus), "x")
        if self.key is not None:
            out["key"] = [format(int(v), "x") for v in self.key]
        return out

    @classmethod
    def from_dict(cls, data: Any, peer: str) -> LayerShare:
        if not isinstance(data, dict) or "values" not in data:
            raise ValueError(
                f"the protected-layer share with {peer!r} was saved by an earlier vflink, whose "
                "layer the data party could not follow: fit the model again"
            )
        values = np.array([[int(v, 16) for v in row] for row in data["values"]], dtype=object)
        encrypted = [int(c, 16) for c in data["encrypted"]] if "encrypted" in data else None
        modulus = int(data["modulus"], 16) if "modulus" in data else None
        key = tuple(int(v, 16) for v in data["key"]) if "key" in data else None
        return cls(values, int(data["slot_bits"]), encrypted, modulus, key)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Outputs(Message):
    """The data party's ``[z_p]_L`` and, in training, its ``[B]_P``."""

    KIND = "protected layer outputs"
    outputs: CiphertextBlock
    share: CiphertextBlock | None = None


@dataclass(frozen=True)
class Backward(Message):
    """The label party's ``[d]_L`` and ``[g]_P``."""

    KIND = "protected layer gradients"
    delta: CiphertextBlock
    grad: CiphertextBlock


# -- fixed point --------------------------------------------------------------------------------

_FIX = "lower the learning rate or bound the bottom's output (e.g. a tanh)"


def _uniform_share(shape: tuple[int, int]) -> np.ndarray[Any, Any]:
    """Signed integers uniform on ``kappa`` bits beyond any ``|W| < 2**WB`` at ``FW`` bits."""
    bits = FW + WB + KAPPA
    flat = [secrets.randbits(bits + 1) - (1 << bits) for _ in range(shape[0] * shape[1])]
    return np.array(flat, dtype=object).reshape(shape)


def _held_share(share: np.ndarray[Any, Any] | None, peer: str) -> np.ndarray[Any, Any]:
    """Our share of the protected layer's weights with ``peer``.

    Raises
    ------
    RuntimeError
        No share yet (neither connected in training nor given the fitted one).
    """
    if share is None:
        raise RuntimeError(
            f"the protected layer with {peer!r} has no share of the weights yet: "
            "connect in training, or give the fitted share to score"
        )
    return share


def _eta(learning_rate: float) -> int:
    """The learning rate at ``2**-ETA_BITS``: ``eta * G`` (``G`` at ``2**-(FH+FD)``) is then
    exactly at the weights' ``2**-FW``. A rate that rounds to 0 would never move the shared
    block: refused (0 itself means scoring, which steps nothing)."""
    eta = round(learning_rate * (1 << ETA_BITS))
    if learning_rate and eta == 0:
        raise ValueError(
            f"ProtectedLayer learning_rate {learning_rate:g} is below 2**-{ETA_BITS + 1}, the "
            "step the shared block can take: raise it"
        )
    return eta


def _layer_packing(
    k: int, m: int, key: PaillierPublicKey, rows: int | None, kept: LayerShare | None
) -> RowPacking:
    """The one packing of the label party's share, the layer's output and the masked weight
    gradient (rows of ``m`` slots), so that the data party can step the encrypted share by
    the masked gradient it computed: in training, slots wide enough for ``h W`` (``k`` terms)
    and for a masked ``h^T d`` of up to ``rows`` rows (the batch size, public); in scoring,
    the slots the fit used (kept with the share)."""
    if rows is None:
        if kept is None or kept.slot_bits < 1:
            raise ValueError("scoring through the protected layer needs the share of the fit")
        return RowPacking(m, kept.slot_bits, (key.n_length - 2) // kept.slot_bits)
    value_bits = max(_z_bits(k), _wg_bits(rows) + KAPPA + 1)
    return RowPacking.plan(value_bits, m, key.n_length, kappa=None)


def _check_rows(rows: int, bound: int | None, party: str) -> None:
    if bound is None or rows > bound:
        raise ValueError(
            f"party {party!r}: a training batch of {rows} rows through the protected layer, "
            f"whose slots were sized for {bound}"
        )


def _bits(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


def _z_bits(k: int) -> int:
    """Bits of the layer's output ``h W`` (``k`` terms) at ``2**-(FH+FW)``."""
    return FH + FW + HB + WB + _bits(k) + 1


def _wg_bits(rows: int) -> int:
    """Bits of the weight gradient ``h^T d`` (``rows`` terms) at ``2**-(FH+FD)``."""
    return FH + FD + HB + DB + _bits(rows) + 1


def _g_bits(m: int, fd: int = FD) -> int:
    """Bits of the embedding gradient ``d W^T`` (``m`` terms) at ``2**-(fd+FW)``."""
    return fd + FW + DB + WB + _bits(m) + 1


FDG_MIN = 26
"""The fewest fractional bits of ``d`` in the embedding gradient: ``d`` is a batch's gradient
(entries of 1e-3 down to 1e-7 late in a fit), rounded there with an absolute error of at most
``2**-27`` (7.5e-9: below float16's at 1e-5, 1.4e-8, the compression plain split learning
offers; on entries near 1e-7 a relative error of several per cent); ``FD`` rounds to
``2**-33``."""


@functools.lru_cache(maxsize=64)
def _g_layout(k: int, m: int, key_bits: int) -> tuple[int, int, RowPacking]:
    """The embedding gradient's fixed point and packing: ``(fd, bits, packing)``, ``d`` at
    ``2**-fd`` in ``g = d W^T``, ``|g| < 2**bits``, rows of ``k`` slots.

    ``g`` only feeds the data party's bottom, in floating point: it does not need the ``FD``
    bits that the weight gradient's exact step needs. So ``fd`` is the most, from
    :data:`FDG_MIN` up to ``FD``, that keeps a row of ``g`` in its fewest ciphertexts: with
    ``k = 16``, ``m = 32`` and 2048-bit keys, 27 bits put a row in one ciphertext where 32
    took two (the last holding one slot), which halves the gradient's multi-exponentiations,
    re-randomisations and decryptions and ``[B]_P``'s encryptions. Both parties compute it
    from public sizes."""

    def plan(fd: int) -> RowPacking:
        return slots.packing(_g_bits(m, fd), k, key_bits, masked=False)

    fewest = plan(FDG_MIN).groups
    fd = max(f for f in range(FDG_MIN, FD + 1) if plan(f).groups == fewest)
    return fd, _g_bits(m, fd), plan(fd)


# -- the two sides -------------------------------------------------------------------------------


class SenderSide:
    """A data party's side of the layer with the label party ``label``: its share ``B`` and
    the label party's share ``[A]_L`` as it steps it."""

    def __init__(
        self,
        layer: ProtectedLayer,
        label: str,
        width: int,
        learning_rate: float,
        share: LayerShare | None = None,
        rows: int | None = None,
    ) -> None:
        self.layer, self.label, self.k = layer, label, width
        self.eta, self.rows, self.kept = _eta(learning_rate), rows, share
        self.share = None if share is None else share.values  # B, k x m exact integers
        self.encrypted = (  # [A]_L, packed rows
            None if share is None or share.encrypted is None else [mpz(c) for c in share.encrypted]
        )
        self.modulus = None if share is None else share.modulus
        self.initial: np.ndarray[Any, Any] | None = None  # W's initial value (ours to know)

    def state(self) -> LayerShare | None:
        """What to keep of the layer as it is now (every step replaces, never changes, it)."""
        if self.share is None:
            return None
        return LayerShare(self.share, self.packing.slot_bits, self.encrypted, self.modulus)

    # setup --------------------------------------------------------------------------------------

    def connect(self, fed: Federation, *, training: bool) -> None:
        """Receive the label party's key (and the layer's shape); in training, make ours,
        exchange bases, send the initial share ``A`` and encrypt it for ourselves."""
        policy = self.layer.policy()
        self.peer_key = policy.accept(
            LAYER.recv(fed, self.label, "key", PublicKeyMessage), self.label
        )
        LAYER.send(fed, self.label, "base", Base(h_s=self.peer_key.base_bytes()))
        setup = LAYER.recv(fed, self.label, "setup", LayerSetup)
        if not 0 < setup.width <= 1 << 12 or setup.joined < self.k:
            LayerSetup.refuse(self.label, "width", f"is {setup.width} (joined {setup.joined})")
        self.m = setup.width
        self.packing = _layer_packing(
            self.k, self.m, self.peer_key, self.rows if training else None, self.kept
        )
        if not training:
            if self.share is None or self.share.shape != (self.k, self.m):
                raise ValueError("scoring through the protected layer needs this party's share")
            if self.encrypted is None or self.modulus != int(self.peer_key.n):
                PublicKeyMessage.refuse(
                    self.label,
                    "n",
                    "is not the key its share of the layer was stepped under in training: "
                    "score with the parts of one fit",
                )
            return
        self.key, secret = policy.generate()
        LAYER.send(fed, self.label, "pkey", PublicKeyMessage.of(self.key))
        base = LAYER.recv(fed, self.label, "pbase", Base)
        try:
            self.secret: PaillierPrivateKey = secret.for_base(base.h_s)
        except ValueError as exc:
            Base.refuse(self.label, "h_s", str(exc))
        bound = 1.0 / math.sqrt(setup.joined)
        rng = np.random.default_rng(secrets.randbits(128))
        self.initial = rng.uniform(-bound, bound, size=(self.k, self.m))
        w_int = np.array(
            [[int(v) for v in row] for row in np.rint(self.initial * 2.0**FW).tolist()],
            dtype=object,
        )
        self.share = _uniform_share((self.k, self.m))
        a0 = w_int - self.share
        LAYER.send(fed, self.label, "share", Share(values=[int(v) for v in a0.ravel()]))
        self.encrypted = list(slots.encrypt_rows(self.peer_key, a0, self.packing))
        self.modulus = int(self.peer_key.n)

    # per batch ---------------------------------------------------------------------------------

    def forward(
        self, fed: Federation, h: np.ndarray[Any, Any], *index: int, training: bool
    ) -> None:
        """Send ``[h W]_L`` for the rows of ``h`` (and ``[B]_P`` in training), computed from
        the label party's share as we stepped it: the label party sends none."""
        share = _held_share(self.share, self.label)
        if self.encrypted is None:
            raise RuntimeError(f"the protected layer with {self.label!r} has no encrypted share")
        key = self.peer_key
        self.h_int = slots.fixed(h, FH, HB, f"party {fed.name!r}: its embedding", _FIX)
        workers = self.layer.worker_count()
        out = slots.combine(
            self.encrypted, self.packing.groups, self.h_int, key.nsquare, workers=workers
        )
        out = slots.add_plain(out, self.h_int.astype(object) @ share, self.packing, key)  # + h B
        share_block = None
        if training:
            _, _, g_pack = _g_layout(self.k, self.m, self.key.n_length)
            sent = self._share_sent(share).T
            share_block = slots.block(self.key, slots.encrypt_rows(self.secret, sent, g_pack))
        LAYER.send(
            fed,
            self.label,
            "encz",
            Outputs(
                outputs=slots.block(key, slots.for_owner(key, out, workers=workers)),
                share=share_block,
            ),
            *index,
        )

    def _share_sent(self, share: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The share ``B`` the label party computes our gradient with (``[B]_P``)."""
        return share

    def backward(self, fed: Federation, *index: int) -> np.ndarray[Any, Any]:
        """The gradient with respect to our embedding (decrypted); sends the masked weight
        gradient and steps both shares: ours by the mask, the label party's (encrypted) by
        the masked gradient it decrypts."""
        share = _held_share(self.share, self.label)
        key, n_rows = self.peer_key, len(self.h_int)
        _check_rows(n_rows, self.rows, fed.name)
        message = LAYER.recv(fed, self.label, "encd", Backward, *index)
        fd, g_bits, g_pack = _g_layout(self.k, self.m, self.key.n_length)
        got = vector_from(self.key, message.grad, self.label)
        cts = slots.expect(got, n_rows * g_pack.groups, Backward, self.label, "grad")
        grad = slots.unpack_rows(
            self.secret.raw_decrypt(cts, workers=DECRYPT_THREADS),
            n_rows,
            g_pack,
            g_bits,
            int(self.key.n),
            "the protected layer's gradient",
        )
        groups = self.packing.groups
        delta = vector_from(key, message.delta, self.label)
        delta_cts = slots.expect(delta, n_rows * groups, Backward, self.label, "delta")
        products = slots.combine(
            delta_cts, groups, self.h_int.T, key.nsquare, workers=self.layer.worker_count()
        )
        # G = h^T d (k rows of m slots) under a mask M: the label party decrypts G + M and
        # steps A by it; we step B by M and [A]_L by the very ciphertexts we send
        masked, masks = mask_slots(
            EncryptedVector(key, products, 0),
            self.packing.masked_layout(self.k),
            for_key_owner=True,
            workers=self.layer.worker_count(),
        )
        LAYER.send(fed, self.label, "encg", Encrypted(data=masked.to_wire()), *index)
        self.encrypted = self._stepped(masked.ciphertexts, masks.masks)
        self.share = share + self.eta * slots.from_slots(masks.masks, self.k, self.packing)
        return grad.astype(np.float64) * 2.0 ** -(fd + FW)

    def _stepped(self, masked: list[Any], masks: tuple[int, ...]) -> list[Any]:
        """``[A - eta (G + M)]_L`` from the masked gradient we sent: each packed row times
        its ciphertext to the power ``-eta``, and the padding slots' masks (which neither
        share has a column for) added back, so that they stay 0."""
        key, packing = self.peer_key, self.packing
        n, nsq = key.n, key.nsquare
        out = []
        for index, (a, c) in enumerate(zip(self.encrypted or [], masked, strict=True)):
            used = len(packing.group(index % packing.groups))
            first = index * packing.per_ct
            pad = sum(
                masks[first + j] << (packing.slot_bits * j) for j in range(used, packing.per_ct)
            )
            out.append(a * gmpy2.powmod(c, -self.eta, nsq) * (1 + n * (self.eta * pad % n)) % nsq)
        return out


class LabelSide:
    """The label party's side of the layer with data party ``peer`` (its share ``A``)."""

    def __init__(
        self,
        layer: ProtectedLayer,
        peer: str,
        key: PaillierPublicKey,
        secret: PaillierPrivateKey,
        learning_rate: float,
        share: LayerShare | None = None,
        rows: int | None = None,
    ) -> None:
        self.layer, self.peer = layer, peer
        self.eta, self.rows, self.kept = _eta(learning_rate), rows, share
        self.key, self.secret = key, secret
        self.share = None if share is None else share.values  # A, k x m exact integers

    def state(self) -> LayerShare | None:
        """What to keep of the layer as it is now: our share and our key's primes."""
        if self.share is None:
            return None
        return LayerShare(
            self.share, self.packing.slot_bits, key=(int(self.secret.p), int(self.secret.q))
        )

    def connect(self, fed: Federation, width: int, joined: int, k: int, *, training: bool) -> None:
        self.m, self.k = width, k
        rows = self.rows if training else None
        self.packing = _layer_packing(k, width, self.key, rows, self.kept)
        LAYER.send(fed, self.peer, "key", PublicKeyMessage.of(self.key))
        try:
            self.secret = self.secret.for_base(LAYER.recv(fed, self.peer, "base", Base).h_s)
        except ValueError as exc:
            Base.refuse(self.peer, "h_s", str(exc))
        LAYER.send(fed, self.peer, "setup", LayerSetup(width=width, joined=joined))
        if not training:
            if self.share is None or self.share.shape != (k, width):
                raise ValueError(f"scoring needs the label party's share for party {self.peer!r}")
            return
        policy = self.layer.policy()
        self.peer_key = policy.accept(
            LAYER.recv(fed, self.peer, "pkey", PublicKeyMessage), self.peer
        )
        LAYER.send(fed, self.peer, "pbase", Base(h_s=self.peer_key.base_bytes()))
        values = LAYER.recv(fed, self.peer, "share", Share).values
        if len(values) != k * width:
            Share.refuse(self.peer, "values", f"holds {len(values)} integers, {k * width} expected")
        limit = 1 << (FW + WB + KAPPA + 2)
        if any(abs(v) > limit for v in values):
            Share.refuse(self.peer, "values", "holds integers beyond the share's bound")
        self.share = np.array(values, dtype=object).reshape(k, width)

    def forward(
        self, fed: Federation, n_rows: int, *index: int, training: bool
    ) -> np.ndarray[Any, Any]:
        """``z_p = h_p W_p`` for this batch's ``n_rows`` rows, decrypted (the data party
        computes it from our share as it stepped it: we send nothing)."""
        _held_share(self.share, self.peer)
        z_bits = _z_bits(self.k)
        message = LAYER.recv(fed, self.peer, "encz", Outputs, *index)
        got = vector_from(self.key, message.outputs, self.peer)
        out = slots.expect(got, n_rows * self.packing.groups, Outputs, self.peer, "outputs")
        if training:
            if message.share is None:
                Outputs.refuse(self.peer, "share", "is missing in training")
            _, _, g_pack = _g_layout(self.k, self.m, self.peer_key.n_length)
            theirs = vector_from(self.peer_key, message.share, self.peer)
            self.peer_share = slots.expect(
                theirs, self.m * g_pack.groups, Outputs, self.peer, "share"
            )
        z = slots.unpack_rows(
            self.secret.raw_decrypt(out, workers=DECRYPT_THREADS),
            n_rows,
            self.packing,
            z_bits,
            int(self.key.n),
            "the protected layer's output",
        )
        return z.astype(np.float64) * 2.0 ** -(FH + FW)

    def backward(self, fed: Federation, delta: np.ndarray[Any, Any], *index: int) -> None:
        """Send ``[d]_L`` and ``[g]_P`` for ``delta = dLoss/dz``; step our share by the
        masked weight gradient."""
        share = _held_share(self.share, self.peer)
        n_rows = len(delta)
        _check_rows(n_rows, self.rows, fed.name)
        what = "the gradient with respect to the protected layer's output"
        d_int = slots.fixed(delta, FD, DB, what, _FIX)
        delta_cts = slots.encrypt_rows(self.secret, d_int, self.packing)
        fd, _, g_pack = _g_layout(self.k, self.m, self.peer_key.n_length)
        d_g = slots.fixed(delta, fd, DB, what, _FIX)  # d at the embedding gradient's precision
        workers = self.layer.worker_count()
        grad = slots.combine(
            self.peer_share, g_pack.groups, d_g, self.peer_key.nsquare, workers=workers
        )
        grad = slots.add_plain(grad, d_g.astype(object) @ share.T, g_pack, self.peer_key)
        LAYER.send(
            fed,
            self.peer,
            "encd",
            Backward(
                delta=slots.block(self.key, delta_cts),
                grad=slots.block(
                    self.peer_key, slots.for_owner(self.peer_key, grad, workers=workers)
                ),
            ),
            *index,
        )
        got = vector_from(
            self.key, LAYER.recv(fed, self.peer, "encg", Encrypted, *index).data, self.peer
        )
        slots.expect(got, self.k * self.packing.groups, Encrypted, self.peer, "data")
        layout = self.packing.masked_layout(self.k)
        try:  # G + M, slot by slot: our step (M is the data party's)
            masked = self.secret.decrypt_packed(got, layout, workers=DECRYPT_THREADS)
        except ValueError as exc:
            Encrypted.refuse(self.peer, "data", f"is not the masked weight gradient: {exc}")
        self.share = share - self.eta * slots.from_slots(masked, self.k, self.packing)


class InteractiveTop(nn.Module):
    """The label party's part of the network with a protected layer: its own block of the
    layer (``Linear(own, width)``, or a bias alone without features) and the top after the
    ``relu``; ``forward(remote, own)`` adds the data parties' decrypted layer outputs."""

    def __init__(self, own: int, width: int, top: nn.Module, joined: int) -> None:
        super().__init__()
        self.width, self.joined = width, joined
        self.own = nn.Linear(own, width) if own else None
        bound = 1.0 / math.sqrt(joined)
        self.bias = None if own else nn.Parameter(torch.empty(width).uniform_(-bound, bound))
        self.top = top

    def forward(self, remote: torch.Tensor, own: torch.Tensor | None = None) -> torch.Tensor:
        if self.own is not None:
            if own is None:
                raise ValueError("the label party has features: pass its own embedding `own`")
            z = remote + self.own(own)
        elif self.bias is not None:
            z = remote + self.bias
        else:
            raise RuntimeError("a protected top without features holds a bias")
        out: torch.Tensor = self.top(torch.relu(z))
        return out
