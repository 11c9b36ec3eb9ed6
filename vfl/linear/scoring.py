"""The roles of secure scoring: only the label party learns the scores of the rows.

Each data party computes its partial scores in the clear on its own rows. With a coordinator,
the coordinator makes a fresh key pair; the passive parties send their scores encrypted under
it to the label party, which adds them to its own and has the sum decrypted under masks
(:mod:`vfl.crypto.masked`). Without (``two_party``), the passive party makes the key and
decrypts the masked sum itself. With a single passive party, the label party learns that
party's partial score of every predicted row (score minus its own part), as any protocol that
gives the label party the score does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.crypto.masked import decrypt_masked, serve_decryption
from vfl.crypto.policy import KeyPolicy, PublicKeyMessage, vector_from
from vfl.federation.base import Federation
from vfl.linear.losses import SCORE_BOUND
from vfl.linear.messages import SCORE, Encrypted
from vfl.linear.model import PartyModel

__all__ = ["ScoreCoordinatorRole", "ScoreRole", "ScoreSpec"]


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

    def __call__(self, fed: Federation) -> np.ndarray[Any, Any] | None:
        spec = self.spec
        shape = self.u.shape
        if spec.coordinator is not None:
            key = spec.policy.accept(
                SCORE.recv(fed, spec.coordinator, "key", PublicKeyMessage), spec.coordinator
            )
            if not self.is_label:
                scores = key.encrypt(self.u.ravel(), workers=spec.workers)
                SCORE.send(fed, spec.label_party, "u", Encrypted(data=scores.to_wire()))
                return None
            holder = spec.coordinator
            senders = [p for p in spec.data_parties if p != spec.label_party]
        elif self.is_label:
            (holder,) = [p for p in spec.data_parties if p != spec.label_party]
            key = spec.policy.accept(SCORE.recv(fed, holder, "key", PublicKeyMessage), holder)
            senders = [holder]
        else:
            public_key, private_key = spec.policy.generate()
            SCORE.send(fed, spec.label_party, "key", PublicKeyMessage.of(public_key))
            scores = public_key.encrypt(self.u.ravel(), workers=spec.workers)
            SCORE.send(fed, spec.label_party, "u", Encrypted(data=scores.to_wire()))
            serve_decryption(fed, spec.label_party, SCORE.child("dec"), private_key)
            return None
        total: Any = self.u.ravel()
        for p in senders:
            part = vector_from(key, SCORE.recv(fed, p, "u", Encrypted).data, p)
            if part.shape != (self.u.size,):
                Encrypted.refuse(p, "data", f"holds {part.shape} scores for {shape[0]} rows")
            total = part + total
        values = decrypt_masked(fed, holder, SCORE.child("dec"), total, bound=SCORE_BOUND * 4)
        out: np.ndarray[Any, Any] = np.asarray(values, dtype=float).reshape(shape)
        return out


class ScoreCoordinatorRole:
    """The coordinator: a fresh key pair for this scoring; decrypts the label party's masked
    sum."""

    def __init__(self, spec: ScoreSpec) -> None:
        self.spec = spec

    def __call__(self, fed: Federation) -> None:
        public_key, private_key = self.spec.policy.generate()
        SCORE.broadcast(fed, "key", PublicKeyMessage.of(public_key))
        serve_decryption(fed, self.spec.label_party, SCORE.child("dec"), private_key)
