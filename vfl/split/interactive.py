"""The protected interactive layer: the top's first layer computed on encrypted embeddings, so
that the label party never sees a data party's raw embedding.

With ``protocol="protected"`` (or ``protocol=ProtectedLayer(...)``) the split network is::

    z = sum_p h_p W_p + (the label party's own h_L W_L) + b ;   outputs = top(relu(z))

where ``h_p`` is data party ``p``'s bottom output (``n x k``) and ``W_p`` (``k x m``) its block
of the first top layer. ``W_p`` is held by nobody: it is **additively shared**, ``W_p = A + B``
as exact fixed-point integers, the label party holding ``A`` and the data party ``B``. Both
parties hold a Paillier key (2048 bits by default); ``[x]_L`` is under the label party's key,
``[x]_P`` under the data party's. Per batch:

1. the label party sends ``[A]_L``, each row of ``A`` packed into slots of one plaintext;
2. the data party computes ``[h A]_L`` (one multi-exponentiation per row, the exponents its
   own ``h``), adds its plaintext ``h B``, and sends ``[z_p]_L = [h W_p]_L``; with it
   ``[B]_P`` (packed). The label party decrypts ``z_p`` -- the layer's output for this party,
   never ``h`` -- and runs the rest of the top;
3. with ``d = dLoss/dz``, the label party sends ``[d]_L`` and ``[g]_P = [d B^T]_P + d A^T``,
   the gradient with respect to the embedding (the data party decrypts it and back-propagates
   through its bottom, as in plain split learning);
4. the data party computes ``[h^T d]_L``, adds a mask ``M`` (``kappa = 40`` bits beyond the
   value, from the OS; :func:`vfl.crypto.masked.mask_slots`) and sends it; the label party
   decrypts ``G + M`` only. The shares step
   by plain SGD: ``A -= lr (G + M)`` at the label party, ``B += lr M`` at the data party, so
   ``A + B`` takes the step ``-lr G`` and neither party learns ``G`` or ``W_p``.

The data party draws ``W_p``'s initial value (uniform, as ``nn.Linear`` does, from OS
randomness) and a uniform share ``B`` of ``kappa`` bits more, and gives the label party
``A = W_p - B``. Whatever crosses to the key's owner is re-randomised in the group of the
sender's base (:mod:`vfl.crypto.rerandomize`).

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
``h`` with 24 fractional bits, ``d`` and ``W`` with 32; a value beyond its bound
(``|h|, |d| < 2**12``, ``|W| < 2**8``) stops the fit with an error naming the party.
Semi-honest parties; a party that deviates can learn more.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.crypto import slots
from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.masked import mask_slots
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import MIN_KAPPA
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

__all__ = ["LAYER", "InteractiveTop", "LabelSide", "ProtectedLayer", "SenderSide"]

LAYER = Namespace("split-layer")
"""The tags of the protected layer (``split-layer/encw/<epoch>/<batch>``, ...)."""

FH, FD, FW = 24, 32, 32
"""Fractional bits of the embeddings, the gradients with respect to the layer's output, and
the shared weights."""

HB, DB, WB = 12, 12, 8
"""Bounds, in bits, of ``|h|``, ``|d|`` and ``|W|``."""

KAPPA = MIN_KAPPA
"""Statistical hiding of the masked weight gradient and of the initial share (bits)."""

ETA_BITS = 30
"""Fractional bits of the learning rate in the integer share update."""

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
    """

    width: int | None = None
    learning_rate: float | None = None
    key_bits: int = 2048
    insecure: bool = False

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


def _step(
    share: np.ndarray[Any, Any], values: np.ndarray[Any, Any], eta: float
) -> np.ndarray[Any, Any]:
    """``floor(eta * values)`` moved from ``2**-(FH+FD)`` to the weights' ``2**-FW``."""
    eta_int = round(eta * (1 << ETA_BITS))
    shift = FH + FD - FW + ETA_BITS
    out: np.ndarray[Any, Any] = np.array(
        [(eta_int * int(v)) >> shift for v in values.ravel().tolist()], dtype=object
    ).reshape(share.shape)
    return out


def _bits(n: int) -> int:
    return max(1, math.ceil(math.log2(max(n, 2))))


def _z_bits(k: int) -> int:
    """Bits of the layer's output ``h W`` (``k`` terms) at ``2**-(FH+FW)``."""
    return FH + FW + HB + WB + _bits(k) + 1


def _wg_bits(rows: int) -> int:
    """Bits of the weight gradient ``h^T d`` (``rows`` terms) at ``2**-(FH+FD)``."""
    return FH + FD + HB + DB + _bits(rows) + 1


def _g_bits(m: int) -> int:
    """Bits of the embedding gradient ``d W^T`` (``m`` terms) at ``2**-(FD+FW)``."""
    return FD + FW + DB + WB + _bits(m) + 1


# -- the two sides -------------------------------------------------------------------------------


class SenderSide:
    """A data party's side of the layer with the label party ``label`` (its share ``B``)."""

    def __init__(
        self,
        layer: ProtectedLayer,
        label: str,
        width: int,
        learning_rate: float,
        share: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.layer, self.label, self.k = layer, label, width
        self.eta = learning_rate
        self.share = share  # B, k x m exact integers
        self.initial: np.ndarray[Any, Any] | None = None  # W's initial value (ours to know)

    # setup --------------------------------------------------------------------------------------

    def connect(self, fed: Federation, *, training: bool) -> None:
        """Receive the label party's key (and the layer's shape); in training, make ours,
        exchange bases and send the initial share."""
        policy = self.layer.policy()
        self.peer_key = policy.accept(
            LAYER.recv(fed, self.label, "key", PublicKeyMessage), self.label
        )
        LAYER.send(fed, self.label, "base", Base(h_s=self.peer_key.base_bytes()))
        setup = LAYER.recv(fed, self.label, "setup", LayerSetup)
        if not 0 < setup.width <= 1 << 12 or setup.joined < self.k:
            LayerSetup.refuse(self.label, "width", f"is {setup.width} (joined {setup.joined})")
        self.m = setup.width
        if not training:
            if self.share is None or self.share.shape != (self.k, self.m):
                raise ValueError("scoring through the protected layer needs this party's share")
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
        w_int = np.rint(self.initial * 2.0**FW).astype(np.int64).astype(object)
        self.share = _uniform_share((self.k, self.m))
        a0 = w_int - self.share
        LAYER.send(fed, self.label, "share", Share(values=[int(v) for v in a0.ravel()]))

    # per batch ---------------------------------------------------------------------------------

    def forward(
        self, fed: Federation, h: np.ndarray[Any, Any], *index: int, training: bool
    ) -> None:
        """Send ``[h W]_L`` for the rows of ``h`` (and ``[B]_P`` in training)."""
        share = _held_share(self.share, self.label)
        key = self.peer_key
        z_pack = slots.packing(_z_bits(self.k), self.m, key, masked=False)
        got = vector_from(
            key, LAYER.recv(fed, self.label, "encw", Encrypted, *index).data, self.label
        )
        weights = slots.expect(got, self.k * z_pack.groups, Encrypted, self.label, "data")
        self.h_int = slots.fixed(h, FH, HB, f"party {fed.name!r}: its embedding", _FIX)
        out = slots.combine(weights, z_pack.groups, self.h_int, key.nsquare)
        out = slots.add_plain(out, self.h_int.astype(object) @ share, z_pack, key)  # + h B
        share_block = None
        if training:
            g_pack = slots.packing(_g_bits(self.m), self.k, self.key, masked=False)
            share_block = slots.block(self.key, slots.encrypt_rows(self.secret, share.T, g_pack))
        LAYER.send(
            fed,
            self.label,
            "encz",
            Outputs(outputs=slots.block(key, slots.for_owner(key, out)), share=share_block),
            *index,
        )

    def backward(self, fed: Federation, *index: int) -> np.ndarray[Any, Any]:
        """The gradient with respect to our embedding (decrypted); sends the masked weight
        gradient and steps our share."""
        share = _held_share(self.share, self.label)
        key, n_rows = self.peer_key, len(self.h_int)
        message = LAYER.recv(fed, self.label, "encd", Backward, *index)
        g_bits = _g_bits(self.m)
        g_pack = slots.packing(g_bits, self.k, self.key, masked=False)
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
        wg_bits = _wg_bits(n_rows)
        wg_pack = slots.packing(wg_bits, self.m, key, masked=True)
        delta = vector_from(key, message.delta, self.label)
        delta_cts = slots.expect(delta, n_rows * wg_pack.groups, Backward, self.label, "delta")
        products = slots.combine(delta_cts, wg_pack.groups, self.h_int.T, key.nsquare)
        # G = h^T d (k rows of m slots) under a mask M: the label party decrypts G + M, its
        # step; ours is M (the one masked decryption, the key's owner its holder)
        masked, masks = mask_slots(
            EncryptedVector(key, products, 0), wg_pack.masked_layout(self.k), for_key_owner=True
        )
        LAYER.send(fed, self.label, "encg", Encrypted(data=masked.to_wire()), *index)
        self.share = share + _step(share, slots.from_slots(masks.masks, self.k, wg_pack), self.eta)
        return grad.astype(np.float64) * 2.0 ** -(FD + FW)


class LabelSide:
    """The label party's side of the layer with data party ``peer`` (its share ``A``)."""

    def __init__(
        self,
        layer: ProtectedLayer,
        peer: str,
        key: PaillierPublicKey,
        secret: PaillierPrivateKey,
        learning_rate: float,
        share: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.layer, self.peer, self.eta = layer, peer, learning_rate
        self.key, self.secret = key, secret
        self.share = share  # A, k x m exact integers

    def connect(self, fed: Federation, width: int, joined: int, k: int, *, training: bool) -> None:
        self.m, self.k = width, k
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
        """``z_p = h_p W_p`` for this batch's ``n_rows`` rows, decrypted."""
        share = _held_share(self.share, self.peer)
        z_bits = _z_bits(self.k)
        z_pack = slots.packing(z_bits, self.m, self.key, masked=False)
        cts = slots.encrypt_rows(self.secret, share, z_pack)
        LAYER.send(fed, self.peer, "encw", Encrypted(data=slots.block(self.key, cts)), *index)
        message = LAYER.recv(fed, self.peer, "encz", Outputs, *index)
        got = vector_from(self.key, message.outputs, self.peer)
        out = slots.expect(got, n_rows * z_pack.groups, Outputs, self.peer, "outputs")
        if training:
            if message.share is None:
                Outputs.refuse(self.peer, "share", "is missing in training")
            g_pack = slots.packing(_g_bits(self.m), self.k, self.peer_key, masked=False)
            theirs = vector_from(self.peer_key, message.share, self.peer)
            self.peer_share = slots.expect(
                theirs, self.m * g_pack.groups, Outputs, self.peer, "share"
            )
        z = slots.unpack_rows(
            self.secret.raw_decrypt(out, workers=DECRYPT_THREADS),
            n_rows,
            z_pack,
            z_bits,
            int(self.key.n),
            "the protected layer's output",
        )
        return z.astype(np.float64) * 2.0 ** -(FH + FW)

    def backward(self, fed: Federation, delta: np.ndarray[Any, Any], *index: int) -> None:
        """Send ``[d]_L`` and ``[g]_P`` for ``delta = dLoss/dz``; step our share with the
        masked weight gradient."""
        share = _held_share(self.share, self.peer)
        n_rows = len(delta)
        d_int = slots.fixed(
            delta, FD, DB, "the gradient with respect to the protected layer's output", _FIX
        )
        wg_bits = _wg_bits(n_rows)
        wg_pack = slots.packing(wg_bits, self.m, self.key, masked=True)
        delta_cts = slots.encrypt_rows(self.secret, d_int, wg_pack)
        g_pack = slots.packing(_g_bits(self.m), self.k, self.peer_key, masked=False)
        grad = slots.combine(self.peer_share, g_pack.groups, d_int, self.peer_key.nsquare)
        grad = slots.add_plain(grad, d_int.astype(object) @ share.T, g_pack, self.peer_key)
        LAYER.send(
            fed,
            self.peer,
            "encd",
            Backward(
                delta=slots.block(self.key, delta_cts),
                grad=slots.block(self.peer_key, slots.for_owner(self.peer_key, grad)),
            ),
            *index,
        )
        got = vector_from(
            self.key, LAYER.recv(fed, self.peer, "encg", Encrypted, *index).data, self.peer
        )
        slots.expect(got, self.k * wg_pack.groups, Encrypted, self.peer, "data")
        layout = wg_pack.masked_layout(self.k)
        try:  # G + M, slot by slot: our step (M is the data party's)
            masked = self.secret.decrypt_packed(got, layout, workers=DECRYPT_THREADS)
        except ValueError as exc:
            Encrypted.refuse(self.peer, "data", f"is not the masked weight gradient: {exc}")
        step = _step(share, slots.from_slots(masked, self.k, wg_pack), self.eta)
        self.share = share - step


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
