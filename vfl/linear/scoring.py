"""The roles of secure scoring: only the label party learns the scores of the rows.

Each data party computes its partial scores in the clear on its own rows. With a coordinator,
the coordinator makes a fresh key pair; the passive parties send their scores encrypted under
it to the label party, which adds them to its own and has the sum decrypted under masks
(:mod:`vfl.crypto.masked`). Without (``two_party``, ``shared``), the first other data party
makes the key and decrypts the masked sum itself (checking that the request has the layout its
own rows imply); any further party encrypts its scores under that key.

With three or more data parties the label party holds every passive's encrypted scores and
chooses what the key holder decrypts. So that it cannot have one party's scores decrypted
alone, the passive parties add pairwise zero-sum masks modulo the key
(:func:`~vfl.crypto.masked.zero_sum_masks`): each one's ciphertexts, or any proper subset's
sum, decrypt to values uniform modulo ``n``, whose slots the key holder's width check refuses
(naming the label party); only the sum over all of them is the packed scores. Tested in
``tests/vfl/linear/test_deviation_scoring.py``.

Scores travel packed (:func:`score_layout`): each party rounds its partial scores to multiples
of ``2**-SCORE_BITS`` and packs them, signed, into slots wide enough for the sum of every
party's and a ``kappa``-bit mask (22 per ciphertext with 2048-bit keys), so that a passive
party encrypts, the label party masks and the key holder decrypts one ciphertext per 22 rows
(a million rows: about 45,000 of each, instead of a million encryptions and a million
ciphertext-side packings). With a single passive party, the label party learns that
party's partial score of every predicted row (score minus its own part), as any protocol that
gives the label party the score does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.crypto import EncryptedVector
from vfl.crypto.masked import mask_slots, request_decryption, serve_decryption, zero_sum_masks
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import MIN_KAPPA, PackingLayout
from vfl.crypto.policy import KeyPolicy, PublicKeyMessage, vector_from
from vfl.federation.base import Federation
from vfl.linear.exchange import SCORE_BITS
from vfl.linear.losses import SCORE_BOUND
from vfl.linear.messages import SCORE
from vfl.linear.model import PartyModel

__all__ = ["ScoreCoordinatorRole", "ScoreRole", "ScoreSpec", "pack_scores", "score_layout"]


def score_layout(count: int, parties: int, key_bits: int) -> PackingLayout:
    """The slots of ``count`` summed scores of ``parties`` data parties: each partial score
    within :data:`~vfl.linear.losses.SCORE_BOUND` at ``2**-SCORE_BITS``, the sum signed, a
    :data:`~vfl.crypto.packing.MIN_KAPPA`-bit mask on top."""
    value_bits = int(SCORE_BOUND).bit_length() + SCORE_BITS + parties.bit_length() + 1
    slot_bits = value_bits + MIN_KAPPA + 1
    return PackingLayout(
        count=count, value_bits=value_bits, kappa=MIN_KAPPA, slots=(key_bits - 2) // slot_bits
    )


def pack_scores(u: np.ndarray[Any, Any], layout: PackingLayout, modulus: int) -> list[int]:
    """Partial scores rounded to ``2**-SCORE_BITS`` and packed, signed, ``layout.slots`` per
    plaintext (slot 0 the first), each plaintext taken modulo ``modulus``."""
    values = np.round(np.ravel(u) * 2.0**SCORE_BITS).astype(np.int64).tolist()
    shifts = [layout.slot_bits * j for j in range(layout.slots)]
    out = []
    for start in range(0, len(values), layout.slots):
        acc = 0
        for value, shift in zip(values[start : start + layout.slots], shifts, strict=False):
            acc += value << shift
        out.append(acc % modulus)
    return out


@dataclass(frozen=True)
class ScoreSpec:
    label_party: str
    data_parties: tuple[str, ...]
    coordinator: str | None
    policy: KeyPolicy
    workers: Any


class ScoreRole:
    """A data party's side of scoring; the label party's call returns the scores
    ``(rows, outputs)``, the others' None."""

    def __init__(self, spec: ScoreSpec, part: PartyModel, x: np.ndarray[Any, Any]) -> None:
        self.spec, self.part = spec, part
        self.is_label = part.party == spec.label_party
        w = part.weights(with_intercept=self.is_label)
        design = np.column_stack([x, np.ones(len(x))]) if self.is_label else x
        self.u = design @ w
        if self.u.size and float(np.max(np.abs(self.u))) > SCORE_BOUND:
            raise ValueError(
                f"party {part.party!r}: partial scores beyond {SCORE_BOUND:g} on the rows to "
                "score; their features are far outside the range the model was trained on "
                "(check their units and scaling)"
            )

    def __call__(self, fed: Federation) -> np.ndarray[Any, Any] | None:
        spec = self.spec
        shape = self.u.shape
        parties = len(spec.data_parties)
        if spec.coordinator is not None:
            key = spec.policy.accept(
                SCORE.recv(fed, spec.coordinator, "key", PublicKeyMessage), spec.coordinator
            )
            layout = score_layout(self.u.size, parties, key.n_length)
            if not self.is_label:
                self._send(fed, key, layout)
                return None
            holder = spec.coordinator
            senders = [p for p in spec.data_parties if p != spec.label_party]
        else:  # the first other data party makes the key and decrypts the masked sum
            holder = next(p for p in spec.data_parties if p != spec.label_party)
            senders = [p for p in spec.data_parties if p != spec.label_party]
            if fed.name == holder:
                public_key, private_key = spec.policy.generate()
                others = [p for p in spec.data_parties if p != holder]
                SCORE.broadcast(fed, "key", PublicKeyMessage.of(public_key), to=others)
                layout = score_layout(self.u.size, parties, public_key.n_length)
                self._send(fed, public_key, layout)
                serve_decryption(
                    fed, spec.label_party, SCORE.child("dec"), private_key, layout=layout
                )
                return None
            key = spec.policy.accept(SCORE.recv(fed, holder, "key", PublicKeyMessage), holder)
            layout = score_layout(self.u.size, parties, key.n_length)
            if not self.is_label:
                self._send(fed, key, layout)
                return None
        parts = {}
        for p in senders:
            part = vector_from(key, SCORE.recv(fed, p, "u", Encrypted).data, p)
            if part.shape != (layout.n_ciphertexts,) or part.exponent != 0:
                Encrypted.refuse(p, "data", f"holds {part.shape} packed scores for {shape[0]} rows")
            parts[p] = part
        total = self._combine(key, layout, parts)
        masked, masks = mask_slots(total, layout, workers=spec.workers)
        values = request_decryption(fed, holder, SCORE.child("dec"), masked, masks)
        out: np.ndarray[Any, Any] = np.ldexp(np.asarray(values, dtype=float), -SCORE_BITS)
        scores: np.ndarray[Any, Any] = out.reshape(shape)
        return scores

    def _combine(
        self, key: Any, layout: PackingLayout, parts: dict[str, EncryptedVector]
    ) -> EncryptedVector:
        """The label party's step: its own packed scores plus every other party's (whose
        zero-sum masks cancel only here, in the sum of all of them)."""
        n, nsq = key.n, key.nsquare
        total = [(1 + n * m) % nsq for m in pack_scores(self.u, layout, int(n))]
        for part in parts.values():
            total = [a * b % nsq for a, b in zip(total, part.ciphertexts, strict=True)]
        return EncryptedVector(key, total, 0)

    def _send(self, fed: Federation, key: Any, layout: PackingLayout) -> None:
        """A passive party's partial scores, packed, masked and encrypted, to the label party.

        The masks (:func:`~vfl.crypto.masked.zero_sum_masks`, agreed among the passive
        parties directly) are uniform modulo the key and sum to zero over all passives: the
        label party can have only the sum of every party's scores decrypted; a request
        holding a part of it decrypts to noise, which the key holder's slot check refuses."""
        n = int(key.n)
        plains = pack_scores(self.u, layout, n)
        senders = [p for p in self.spec.data_parties if p != self.spec.label_party]
        masks = zero_sum_masks(fed, senders, len(plains), n, tags=SCORE.child("zs"))
        plains = [(p + m) % n for p, m in zip(plains, masks, strict=True)]
        scores = EncryptedVector(key, key.raw_encrypt(plains, workers=self.spec.workers), 0)
        scores.fresh = True
        SCORE.send(fed, self.spec.label_party, "u", Encrypted(data=scores.to_wire()))


class ScoreCoordinatorRole:
    """The coordinator: a fresh key pair for this scoring; decrypts the label party's masked
    sum."""

    def __init__(self, spec: ScoreSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> None:
        public_key, private_key = self.spec.policy.generate()
        SCORE.broadcast(fed, "key", PublicKeyMessage.of(public_key))
        serve_decryption(fed, self.spec.label_party, SCORE.child("dec"), private_key)
