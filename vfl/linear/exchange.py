"""The gradient exchange of vertical linear models: packed encrypted feature rows.

Setup (once per fit): each data party rounds its features to multiples of ``2**-FEATURE_BITS``,
packs each row into as few plaintexts as fit (signed slots wide enough for a batch sum), encrypts
them -- under its own key (``two_party``) or the coordinator's -- and sends them to every other
data party (:func:`exchange_rows`; the receiver keeps them as a
:class:`~vfl.crypto.slots.PeerRows`). One encryption per row and column group, for any number of
outputs and epochs. The rows are encrypted part by part as they are sent (32 MiB each), and
the receiver packs each part into a :class:`~vfl.crypto.store.CiphertextStore` as it arrives:
a party's memory holds its peers' encrypted rows, ``key_bits / 4`` bytes per row and column
group (5.1 GB for 10,000,000 rows and one group with 2048-bit keys), plus a part or two.

Per batch (:meth:`GradientExchange.remote`): every party ``p`` turns its vectors ``z_p`` (one per
output) into ``[[X_t^T z_p]]`` for every other party ``t`` by one Pippenger multi-exponentiation
over ``t``'s encrypted rows per output and column group (in chunks of rows on the party's
``workers`` for a large batch; :meth:`~vfl.crypto.slots.PeerRows.combine`), re-randomised.
Under ``two_party`` it sends them to ``t``, which decrypts their sum with its own key. Under
``coordinator`` the sum is decrypted by the coordinator, routed so that nobody reads the
decryption of ciphertexts it chose (:mod:`vfl.linear.routing`): the shares go to ``t``'s
*assembler* -- the label party for a passive party, the first passive party for the label
party -- to which ``t`` sends only its masks, in the clear; the assembler multiplies the
shares and a fresh encryption of the masks and sends the request to the coordinator, which
answers ``t``. Either way ``t`` adds ``X_t^T z_t`` of its own. The routing costs what the
request did before: one encryption of the masks (by the assembler instead of ``t``) and one
decryption per party and batch, and as many messages (masks in place of the shares that
went to ``t``).

The packings are public. Every row packing is derived from numbers every party knows
(:class:`PublicSizes`: the rows, the batch size, the contributing parties, the key's bits,
and the party's column count), never from a party's data or its word: the feature bound is
:func:`~vfl.linear.model.public_feature_bits` of the row count, which each party checks its
own design against (:func:`~vfl.linear.model.check_feature_bound`). A receiver refuses rows
whose announced packing is not the one it derives, naming the sender, and the coordinator
(:func:`~vfl.linear.protocol.check_setup`) pins every gradient request to the masked layout
it derives itself. A packing chosen by its owner -- one 1020-bit slot per ciphertext, say --
would have the coordinator open whole plaintexts of the owner's choosing per request.

.. warning::
   What the checks do not stop: the contents of ciphertexts. A party's own encrypted rows
   are ciphertexts of its choosing: crafted rows (one power of two per slot) make the shares
   computed on them reveal a peer's ``z`` of as many rows per batch as its request has
   slots, under either protocol, much as a design of indicator columns does; under
   ``coordinator``, a peer's encrypted rows passed off as its own reveal ``X_peer^T z``.
   Under ``coordinator`` a party no longer chooses the ciphertexts of its own decryption,
   so it cannot have its peers' encrypted rows opened for itself; but its assembler, and
   every party whose share the assembler multiplies in, chooses what it receives: a
   deviating one can have another party's encrypted rows opened for it, while seeing
   nothing itself -- a leak only to two parties pooling what they see
   (:mod:`vfl.linear.routing`). Against parties that follow the protocol nothing beyond the
   exact gradients leaks; malicious parties are out of scope.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.crypto import EncryptedVector, slots
from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import RowPacking, pack_rows
from vfl.crypto.parallel import Workers
from vfl.crypto.policy import KeyPolicy, PublicKeyMessage, vector_from
from vfl.crypto.slots import PeerRows
from vfl.crypto.store import ciphertext_store
from vfl.federation.base import Federation
from vfl.federation.messages import Message
from vfl.linear.common import KAPPA
from vfl.linear.messages import VLR, RowsHeader, RowsPart, SetupCounts
from vfl.linear.model import FEATURE_BITS, check_feature_bound, public_feature_bits
from vfl.linear.routing import assemble, assembler_of, receive_opened, send_masks, slot_masks
from vfl.training.schedule import check_batch_size

__all__ = [
    "ROWS_MESSAGE_BYTES",
    "SCORE_BITS",
    "Z_BITS",
    "GradientExchange",
    "PublicSizes",
    "encrypted_noise",
    "exchange_rows",
    "plan_packing",
    "rows_from_parts",
]

SCORE_BITS = 32
"""Partial scores and residual terms ``z`` are rounded to multiples of ``2**-SCORE_BITS``."""
Z_BITS = SCORE_BITS + 17
"""Bits of ``|z| * 2**SCORE_BITS`` (``|z| < 2**17``: scores and targets within ``2**16``)."""
ROWS_MESSAGE_BYTES = 32 * 2**20
"""Bytes of encrypted feature rows per setup message."""
GRAD = VLR.child("grad")
"""The tags of the routed gradient decryptions (``vlr/grad/masks``, ``req``, ``plain``)."""


def plan_packing(
    columns: int,
    *,
    rows: int,
    batch_size: int,
    contributors: int,
    key_bits: int,
    masked: bool,
) -> RowPacking:
    """The row packing of a party with ``columns`` columns, from public sizes only.

    Each slot holds a gradient share's sum of ``x * z`` over a batch -- at most
    ``min(rows, 2 * batch_size)`` rows, the last batch taking a remainder of less than half
    a batch -- and over ``contributors`` parties, with ``|x * 2**FEATURE_BITS| <
    2**public_feature_bits(rows)`` and ``|z * 2**SCORE_BITS| < 2**Z_BITS``, plus a mask of
    ``KAPPA`` bits when ``masked`` (the coordinator decrypts it).

    Parameters
    ----------
    columns : int
        The party's columns (the label party's with the intercept).
    rows : int
        Rows of the fit (every party has them all).
    batch_size : int
        Rows per mini-batch (at least 1).
    contributors : int
        Parties whose shares are summed into one (all data parties but the share's owner).
    key_bits : int
        Bits of the key the rows are encrypted under.
    masked : bool
        Leave room for a mask (``coordinator``) or not (``two_party``).

    Returns
    -------
    RowPacking

    Raises
    ------
    ValueError
        No row or batch, or a key too small for one slot.
    """
    if batch_size < 1:
        raise ValueError(f"a batch needs at least one row, got batch_size={batch_size}")
    span = min(rows, 2 * batch_size)
    value_bits = (
        public_feature_bits(rows)
        + Z_BITS
        + max(1, span - 1).bit_length()
        + contributors.bit_length()
    )
    return slots.packing(value_bits, columns, key_bits, masked=masked)


@dataclass(frozen=True)
class PublicSizes:
    """What every row packing of a fit is derived from, all known to every party: the rows,
    the batch size, the parties contributing to each gradient share (every data party but
    its owner), and whether the shares are decrypted under masks (``coordinator``) or by
    their owner (``two_party``). A party's column count and a key's bits complete it
    (:meth:`packing`)."""

    rows: int
    batch_size: int
    contributors: int
    masked: bool

    def packing(self, columns: int, key_bits: int) -> RowPacking:
        """The packing of a party with ``columns`` columns under a ``key_bits``-bit key."""
        return plan_packing(
            columns,
            rows=self.rows,
            batch_size=self.batch_size,
            contributors=self.contributors,
            key_bits=key_bits,
            masked=self.masked,
        )

    def check(
        self, message: type[Message], sender: str, announced: Any, key_bits: int
    ) -> RowPacking:
        """``announced`` (a packing's dict from ``sender``'s ``message``) if it is the one
        derived for its column count, else the message's refusal, naming the sender."""
        try:
            packing = RowPacking.from_dict(announced, key_bits=key_bits)
        except ValueError as exc:
            message.refuse(sender, "packing", str(exc))
        derived = self.packing(packing.columns, key_bits)
        if packing != derived:
            message.refuse(
                sender,
                "packing",
                f"is {packing.to_dict()}, but {self.describe(key_bits)} give "
                f"{derived.to_dict()} for {packing.columns} columns: packings are derived "
                "from public sizes, not chosen (give every party the same batch_size and "
                "vflink version)",
            )
        return packing

    def describe(self, key_bits: int) -> str:
        """The sizes in words, for an error."""
        parties = f"part{'y' if self.contributors == 1 else 'ies'}"
        shares = "masked" if self.masked else "unmasked"
        return (
            f"{self.rows} rows, batches of {self.batch_size}, {self.contributors} contributing "
            f"{parties} and {shares} shares under a {key_bits}-bit key"
        )


OwnRows = Callable[[int, int], list[list[Any]]]
"""``encrypt(lo, hi)``: a party's rows ``lo:hi`` packed and encrypted, per column group."""


def exchange_rows(
    fed: Federation,
    own: tuple[PaillierPublicKey, RowPacking, OwnRows],
    keys: dict[str, PaillierPublicKey],
    n_rows: int,
    batch_size: int,
    workers: Workers = None,
    *,
    sizes: PublicSizes | None = None,
) -> dict[str, PeerRows]:
    """Send our encrypted rows to every peer in ``keys`` and receive theirs: a header, then
    parts of at most ``ROWS_MESSAGE_BYTES``, sent and received in step (part k out, then
    every peer's part k in), so that no receive queue ever holds more than about two
    parts. ``own`` is our key, packing, and ``encrypt(lo, hi)``: the ciphertexts of our
    rows ``lo:hi`` per column group, made just before their part is sent (our own
    encrypted rows never all exist at once). The peers' rows are kept where ``workers``
    says (:func:`~vfl.crypto.store.ciphertext_store`: on the party's Dask cluster when it
    is one). With ``sizes``, a peer's header must announce the packing they give for its
    column count and key (:meth:`PublicSizes.check`); without, any packing the key can
    hold (the caller checks it)."""
    key, packing, encrypt = own
    per_part = max(1, ROWS_MESSAGE_BYTES // (packing.groups * key.ciphertext_bytes))
    starts = list(range(0, n_rows, per_part))
    peers = list(keys)
    header = RowsHeader(packing=packing.to_dict(), parts=len(starts))
    VLR.broadcast(fed, "rows", header, to=peers)
    headers = {p: VLR.recv(fed, p, "rows", RowsHeader) for p in peers}
    for p, h in headers.items():
        if not 1 <= h.parts <= n_rows:
            RowsHeader.refuse(p, "parts", f"is {h.parts}, not between 1 and {n_rows}")
    receiving = {
        p: _Receiving(keys[p], headers[p], p, n_rows, batch_size, workers, sizes) for p in peers
    }
    for k in range(max([len(starts), *(h.parts for h in headers.values())])):
        if k < len(starts):
            groups = encrypt(starts[k], min(n_rows, starts[k] + per_part))
            blocks = [EncryptedVector(key, cts, 0, fresh=True).to_wire() for cts in groups]
            del groups
            VLR.broadcast(fed, "rows", RowsPart(blocks=blocks), k, to=peers)
            del blocks
        for p in peers:
            if k < headers[p].parts:
                receiving[p].add(VLR.recv(fed, p, "rows", RowsPart, k))
    return {p: receiving[p].done() for p in peers}


def rows_from_parts(
    key: PaillierPublicKey,
    header: RowsHeader,
    parts: list[RowsPart],
    sender: str,
    n_rows: int,
    batch_size: int,
    sizes: PublicSizes | None = None,
) -> PeerRows:
    """Check and join received parts (the packing against ``sizes``, when given, as
    :func:`exchange_rows` does)."""
    receiving = _Receiving(key, header, sender, n_rows, batch_size, sizes=sizes)
    for part in parts:
        receiving.add(part)
    return receiving.done()


class _Receiving:
    """A peer's encrypted rows as their parts arrive: checked, and packed into stores."""

    def __init__(
        self,
        key: PaillierPublicKey,
        header: RowsHeader,
        sender: str,
        n_rows: int,
        batch_size: int,
        workers: Workers = None,
        sizes: PublicSizes | None = None,
    ) -> None:
        if sizes is not None:
            packing = sizes.check(RowsHeader, sender, header.packing, key.n_length)
        else:
            try:
                packing = RowPacking.from_dict(
                    header.packing, key_bits=key.n_length, min_slot_bits=Z_BITS
                )
            except ValueError as exc:
                RowsHeader.refuse(sender, "packing", str(exc))
        # the shares we compute on these rows reveal X^T z to their owner: as many columns as
        # a batch has rows would let it solve for our z (checked by us, not only by it)
        check_batch_size(sender, n_rows, packing.columns, batch_size)
        self.key, self.packing, self.sender, self.n_rows = key, packing, sender, n_rows
        self.stores = [ciphertext_store(key, n_rows, workers) for _ in range(packing.groups)]

    def add(self, part: RowsPart) -> None:
        sender = self.sender
        if len(part.blocks) != self.packing.groups:
            RowsPart.refuse(sender, "blocks", f"has {len(part.blocks)} groups")
        vectors = [vector_from(self.key, block, sender) for block in part.blocks]
        if any(v.ndim != 1 or v.exponent != 0 or len(v) != len(vectors[0]) for v in vectors):
            RowsPart.refuse(sender, "blocks", "are not integer vectors of one length")
        if self.stores[0].filled + len(vectors[0]) > self.n_rows:
            self._refuse()
        for store, vector, block in zip(self.stores, vectors, part.blocks, strict=True):
            store.extend(vector.ciphertexts, raw=block.data)

    def done(self) -> PeerRows:
        if any(len(s) != self.n_rows for s in self.stores):
            self._refuse()
        return PeerRows(self.key, self.stores, self.packing)

    def _refuse(self) -> None:
        RowsPart.refuse(
            self.sender,
            "blocks",
            f"do not add up to {self.packing.groups} groups of {self.n_rows} rows",
        )


def encrypted_noise(
    key: PaillierPublicKey, packing: RowPacking, outputs: int, sigma: float, *, masked: bool
) -> EncryptedVector:
    """Fresh Gaussian noise of standard deviation ``sigma`` (gradient units) for every column
    and output of a share computed on rows packed as ``packing``, packed into the same slots
    and encrypted under ``key`` (multiply it into the share).

    The noise is rounded to multiples of ``2**-FEATURE_BITS`` -- a grid every label-dependent
    share value lies on -- before it is scaled to the share's fixed point: rounding continuous
    noise onto the values' own grid is post-processing, whereas the raw float's own uneven
    spacing would let the receiver rule out neighbouring labels."""
    from vfl.privacy.mechanisms import gaussian_noise

    noise = gaussian_noise((outputs, packing.columns), sigma=sigma)
    steps = np.round(noise * 2.0**FEATURE_BITS).astype(np.int64).astype(object)
    scaled = steps * (1 << SCORE_BITS)
    limit = 1 << packing.value_bits(KAPPA if masked else None)
    if np.any(np.abs(scaled) >= limit // 4):
        raise OverflowError(
            f"label-DP noise of standard deviation {sigma:g} does not fit the packing; "
            "raise GaussianLabelDP's epsilon or lower its row_clip"
        )
    return EncryptedVector(key, slots.encrypt_rows(key, scaled, packing), 0, fresh=True)


class GradientExchange:
    """One data party's side of the gradient exchange, for both protocols.

    Parameters
    ----------
    fed : Federation
    x : array (rows, columns)
        The party's design matrix (rounded features, the intercept column at the label party).
    data_parties : list of str
        Every data party, this one included.
    label_party : str
        The data party with the labels (under ``coordinator``, it assembles every passive
        party's gradient requests, the first passive party its own:
        :func:`~vfl.linear.routing.assembler_of`).
    outputs : int
        Outputs trained at once (K one-vs-rest models share the encrypted rows).
    batch_size : int
        Rows per mini-batch (with the rows, the parties and the key, what every packing is
        derived from: :class:`PublicSizes`).
    coordinator : str or None
        The key holder (``coordinator`` protocol), or None: each party owns a key.
    policy : KeyPolicy
        How keys are made and accepted.
    workers
        This party's processes, or its own executor (a Dask client).
    keep_view : bool
        Keep what this party decrypts, ``(rows, X[rows]^T sum of the others' z)`` per batch, in
        :attr:`view` (for audits that attack it).
    noise : dict of str to float, optional
        Label DP at the label party: the standard deviation of the Gaussian noise added,
        under encryption, to every share it computes for each peer (see :meth:`remote`).
    """

    def __init__(
        self,
        fed: Federation,
        x: np.ndarray[Any, Any],
        data_parties: list[str],
        *,
        label_party: str,
        outputs: int,
        batch_size: int,
        coordinator: str | None,
        policy: KeyPolicy,
        workers: Any,
        keep_view: bool = False,
        noise: dict[str, float] | None = None,
    ) -> None:
        check_feature_bound(fed.name, x, len(x))  # the packings are sized for it
        self.fed, self.x, self.outputs, self.coordinator = fed, x, outputs, coordinator
        self.data_parties, self.label_party = list(data_parties), label_party
        self.others = [p for p in data_parties if p != fed.name]
        self.view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] | None = (
            [] if keep_view else None
        )
        self.noise = noise or {}
        self.secret: PaillierPrivateKey | None
        if coordinator is not None:
            self.key = policy.accept(
                VLR.recv(fed, coordinator, "key", PublicKeyMessage), coordinator
            )
            self.secret = None
            self.keys = {p: self.key for p in self.others}
        else:
            self.key, self.secret = policy.generate()
            VLR.broadcast(fed, "key", PublicKeyMessage.of(self.key), to=self.others)
            self.keys = {
                p: policy.accept(VLR.recv(fed, p, "key", PublicKeyMessage), p) for p in self.others
            }
        self.sizes = PublicSizes(
            rows=len(x),
            batch_size=batch_size,
            contributors=len(self.others),
            masked=coordinator is not None,
        )
        self.packing = self.own_packing()
        self.workers = workers
        x_int = np.round(x * 2.0**FEATURE_BITS).astype(np.int64)
        encrypt = (self.secret or self.key).raw_encrypt
        n, packing = int(self.key.n), self.packing

        def own_rows(lo: int, hi: int) -> list[list[Any]]:
            return [encrypt(p, workers=workers) for p in pack_rows(x_int[lo:hi], packing, n)]

        self.peers = exchange_rows(
            fed,
            (self.key, self.packing, own_rows),
            self.keys,
            len(x),
            batch_size,
            workers,
            sizes=self.sizes,
        )

    def own_packing(self) -> RowPacking:
        """The packing of this party's rows: the one its peers and the coordinator derive
        from the public sizes and its column count."""
        return self.sizes.packing(self.x.shape[1], self.key.n_length)

    @property
    def share_ciphertexts(self) -> int:
        """Ciphertexts of one decrypted gradient share (outputs times column groups)."""
        return self.outputs * self.packing.groups

    def setup_counts(self) -> SetupCounts:
        """What the coordinator checks at setup: the outputs, this party's packing, the
        packings its peers announced to it, and the rows (it derives every packing from
        the public sizes and refuses any other: :func:`~vfl.linear.protocol.check_setup`)."""
        peers = {p: peer.packing.to_dict() for p, peer in self.peers.items()}
        return SetupCounts(self.outputs, self.packing.to_dict(), peers, len(self.x))

    def remote(self, rows: np.ndarray[Any, Any], z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Send this party's contributions for ``z`` (``(len(rows), K)``) and return the
        decrypted sum of the others': ``X[rows]^T (sum of the other parties' z)``, shape
        ``(columns, K)``. With ``X^T z`` of its own added, that is the party's gradient
        numerator for the batch."""
        z_int = np.round(z * 2.0**SCORE_BITS).astype(np.int64)
        owner = self.coordinator is None  # two_party: the shares go to the key's owner
        shares = {}
        for p, peer in self.peers.items():
            share = peer.combine(rows, z_int, to_key_owner=owner, workers=self.workers)
            if self.noise.get(p):  # label DP: fresh noise per batch, before it leaves
                noise = encrypted_noise(
                    peer.key, peer.packing, self.outputs, self.noise[p], masked=not owner
                )
                share = share + noise
                share.fresh = True  # the noise's fresh encryption re-randomises the product
            shares[p] = share
        values = self._own_key(shares) if owner else self._routed(shares)
        scale = -(FEATURE_BITS + SCORE_BITS)
        out = np.array([[math.ldexp(v, scale) for v in row] for row in values.T.tolist()])
        out = out.reshape(self.x.shape[1], self.outputs)
        if self.view is not None:
            self.view.append((rows.copy(), out.copy()))
        return out

    def _own_key(self, shares: dict[str, EncryptedVector]) -> np.ndarray[Any, Any]:
        """``two_party``: each share goes to the party whose rows it was computed on, which
        decrypts the sum of those it receives with its own key, ``(outputs, columns)``."""
        for p, share in shares.items():
            VLR.send(self.fed, p, "share", Encrypted(data=share.to_wire()))
        me = self.fed.name
        total = self._sum([self._received(p, me, self.packing) for p in self.others])
        if self.secret is None:
            raise RuntimeError("no key to open the gradient share with")
        packing = self.packing
        plain = [int(v) for v in self.secret.raw_decrypt(total.ciphertexts)]
        try:
            return slots.unpack_rows(
                plain, self.outputs, packing, packing.value_bits(None), int(self.key.n), "a share"
            )
        except OverflowError:
            raise self._overflow(self.fed.name) from None

    def _routed(self, shares: dict[str, EncryptedVector]) -> np.ndarray[Any, Any]:
        """``coordinator``: the sum is decrypted for us by the coordinator from a request
        another data party assembles (:mod:`vfl.linear.routing`), ``(outputs, columns)``.

        We send our masks to our assembler and each share to its receiver's assembler (or
        keep it, being that assembler); we assemble the request of every party we are the
        assembler of (its share from us, the others', its masks); then the coordinator's
        answer gives our values, checked as far as we can: as many slots as our layout has,
        each value within the public bound of its slot and every padding slot 0 (else an
        OverflowError naming the coordinator)."""
        coordinator, me = self.coordinator, self.fed.name
        if coordinator is None:
            raise RuntimeError("no coordinator to open the gradient share")
        masks = slot_masks(self.packing.masked_layout(self.outputs))
        send_masks(self.fed, self.assembler(me), GRAD, masks)
        for p, share in shares.items():
            if self.assembler(p) != me:
                VLR.send(self.fed, self.assembler(p), "share", Encrypted(data=share.to_wire()))
        for t in self.others:  # in the data parties' order, as every sender sends
            if self.assembler(t) == me:
                self.assemble_for(t, shares[t])
        try:
            values = receive_opened(self.fed, coordinator, GRAD, masks)
            bound = self.packing.value_bits(KAPPA)
            return slots.from_slots(values, self.outputs, self.packing, value_bits=bound)
        except OverflowError:
            raise self._overflow(coordinator) from None

    def assemble_for(self, receiver: str, share: EncryptedVector) -> None:
        """Assemble ``receiver``'s gradient request: our share for it times the share of
        every other party but it, times its masks, to the coordinator, which answers it."""
        if self.coordinator is None:
            raise RuntimeError("only the coordinator protocol assembles requests")
        packing = self.peers[receiver].packing
        senders = [q for q in self.others if q != receiver]
        total = self._sum([share, *(self._received(q, receiver, packing) for q in senders)])
        layout = packing.masked_layout(self.outputs)
        assemble(self.fed, receiver, self.coordinator, GRAD, total, layout)

    def assembler(self, party: str) -> str:
        """The data party that assembles ``party``'s gradient requests
        (:func:`~vfl.linear.routing.assembler_of`)."""
        return assembler_of(party, self.label_party, self.data_parties)

    def _received(self, sender: str, receiver: str, packing: RowPacking) -> EncryptedVector:
        """A share ``sender`` computed for ``receiver`` (rows packed as ``packing``)."""
        data = VLR.recv(self.fed, sender, "share", Encrypted).data
        part = vector_from(self.key, data, sender)
        expected = self.outputs * packing.groups
        if part.shape != (expected,) or part.exponent != 0:
            Encrypted.refuse(
                sender,
                "data",
                f"is a gradient share for {receiver!r} of shape {part.shape}, not ({expected},)",
            )
        return part

    @staticmethod
    def _sum(parts: list[EncryptedVector]) -> EncryptedVector:
        if not parts:
            raise RuntimeError("a gradient exchange needs at least one other data party")
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    def _overflow(self, holder: str) -> OverflowError:
        return OverflowError(
            f"a gradient decrypted via {holder!r} overflowed its packing; standardise the "
            "features or lower learning_rate"
        )
