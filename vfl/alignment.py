"""Aligning the parties' rows to their common patients, over a federation.

Two ways, each written once as the code every role runs:

* ``method="psi"`` -- ECDH private set intersection on an exact ID column between two data
  parties (:mod:`linkage.psi`): each learns which of its own rows are common and their common
  order, nothing about the other's other IDs;
* ``method="bloom"`` -- the data parties encode their identity columns into Bloom filters with
  a secret they share (:func:`linkage.encode`) and send the encodings, without row labels, to a
  linkage unit (the coordinator), which never has the secret; it links every other party to the
  first one (:func:`linkage.match`), keeps the patients linked across all parties, and returns
  to each party only the positions of its own rows in the common order -- no scores, nothing of
  the other parties.

Each party ends with its own frame reordered to the common patients, indexed
``0 .. n_common - 1`` (``common_row``), its original row labels in
``frame.attrs["source_rows"]``.

**The common order is reproducible.** With PSI it sorts the common IDs by
``SHA-256(order_key || id)``. The same inputs and key give the same order and index, so a
seeded split picks the same rows, and other keys give unrelated orders. Both data parties
hold every common ID, so even the default empty key tells them nothing. The order also says
nothing of either party's table order. With Bloom linkage, the linkage unit sorts the common
patients by ``HMAC(order_key, the anchor's encoding)`` when it is given an ``order_key``,
which the data parties must not know: a party holding it could tell which of its records
the anchor spelled exactly as it did. Without one, the order is random, fresh each run, as
it must be with BLIP hardening, whose encodings change every run.

:func:`align` runs every role in one process (simulation); :func:`align_party` runs one
party's role on its own federation (deployment).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import linkage
from vfl.federation.base import Federation
from vfl.federation.local import LocalFederation
from vfl.federation.messages import Message, Namespace

__all__ = ["ALIGN", "EncodingsMessage", "PsiPoints", "RowPositions", "align", "align_party"]

ALIGN = Namespace("align")
"""The tags of alignment (``align/psi-blinded``, ``align/encodings``, ...)."""


@dataclass(frozen=True)
class PsiPoints(Message):
    """Blinded (or doubly blinded) PSI points, 32 bytes each, concatenated."""

    KIND = "PSI points"
    points: bytes

    def split(self, sender: str) -> list[bytes]:
        if len(self.points) % 32:
            self.refuse(sender, "points", f"holds {len(self.points)} bytes, not 32 per point")
        return [self.points[i : i + 32] for i in range(0, len(self.points), 32)]


@dataclass(frozen=True)
class EncodingsMessage(Message):
    """A data party's Bloom-filter encodings (packed words, no row labels) and the keyed
    fingerprint of the schema and secret that made them."""

    KIND = "encodings"
    words: np.ndarray
    fingerprint: bytes


@dataclass(frozen=True)
class RowPositions(Message):
    """The linkage unit's answer: positions of the party's own rows, in the common order."""

    KIND = "row positions"
    rows: np.ndarray


def align(
    frames: dict[str, pd.DataFrame],
    *,
    method: str = "psi",
    id_column: str | None = None,
    schema: Any = None,
    secret: bytes | str | None = None,
    threshold: float | None = None,
    linkage_unit: str = "coordinator",
    ledger: Any = None,
    order_key: bytes | str | None = None,
) -> dict[str, pd.DataFrame]:
    """Align ``frames`` (party name -> its table) to their common rows; every role simulated
    in this process. See :func:`align_party` for the parameters."""
    if not isinstance(frames, dict) or len(frames) < 2:
        raise ValueError("align needs a dict of at least two parties' frames")
    if method not in ("psi", "bloom"):
        raise ValueError(f"method must be 'psi' or 'bloom', got {method!r}")
    for name, frame in frames.items():  # checked at the door, before any party starts
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"party {name!r}: expected a DataFrame, got {type(frame).__name__}")
        if method == "psi" and (id_column is None or id_column not in frame.columns):
            raise ValueError(
                f"party {name!r}: PSI alignment needs its frame and its id_column "
                f"({id_column!r} is not one of its columns)"
            )
    parties = list(frames)
    if method == "bloom" and linkage_unit in frames:
        raise ValueError(
            f"{linkage_unit!r} is both a data party and the linkage unit; pass linkage_unit="
            "'...' with another name (the linkage unit must not hold identities)"
        )
    roles: dict[str, Any] = {
        name: (
            lambda fed, name=name: align_party(
                fed,
                frames[name],
                method=method,
                id_column=id_column,
                schema=schema,
                secret=secret,
                parties=parties,
                threshold=threshold,
                linkage_unit=linkage_unit,
                ledger=ledger,
                order_key=order_key if method == "psi" else None,
            )
        )
        for name in parties
    }
    if method == "bloom":
        roles[linkage_unit] = lambda fed: align_party(
            fed,
            None,
            method=method,
            parties=parties,
            threshold=threshold,
            linkage_unit=linkage_unit,
            order_key=order_key,
        )
    results = LocalFederation().run(roles)
    return {name: results[name] for name in parties}


def align_party(
    federation: Federation,
    frame: pd.DataFrame | None,
    *,
    method: str = "psi",
    id_column: str | None = None,
    schema: Any = None,
    secret: bytes | str | None = None,
    parties: list[str],
    threshold: float | None = None,
    linkage_unit: str = "coordinator",
    ledger: Any = None,
    order_key: bytes | str | None = None,
) -> Any:
    """This party's role in aligning (deployment).

    Parameters
    ----------
    federation : Federation
        This party's channel to the others.
    frame : DataFrame or None
        This party's table (None for the linkage unit).
    method : {"psi", "bloom"}
        See the module docstring.
    id_column : str
        The exact ID column (``"psi"``).
    schema, secret
        The :class:`linkage.Schema` and the data parties' shared secret (``"bloom"``).
    parties : list of str
        The data parties, the same list at every party.
    threshold : float, optional
        Match threshold (``"bloom"``); chosen from the scores when None.
    linkage_unit : str
        The party that links encodings (``"bloom"``).
    ledger : vfl.privacy.PrivacyLedger, optional
        Where a data party records the differential privacy its encodings spend when the
        schema hardens them with BLIP (``blip_epsilon`` per bit, composed over the schema's
        encoded bits: the most in which two versions of one person's record can differ).
    order_key : bytes or str, optional
        What the common order is sorted by (see the module docstring): with PSI, both data
        parties' (the same at each; default empty); with Bloom linkage, the linkage unit's
        alone (default: a random order).

    Returns
    -------
    DataFrame or None
        This party's rows of the common patients, in the common order (None for the linkage
        unit).
    """
    me = federation.name
    if method not in ("psi", "bloom"):
        raise ValueError(f"method must be 'psi' or 'bloom', got {method!r}")
    if method == "psi":
        if len(parties) != 2:
            raise ValueError(
                f"PSI alignment runs between two data parties, got {parties}; use "
                "method='bloom' with a linkage unit for more"
            )
        if frame is None or id_column is None or id_column not in frame.columns:
            raise ValueError(f"party {me!r}: PSI alignment needs its frame and its id_column")
        other = next(p for p in parties if p != me)
        ids = linkage.normalize_ids(frame[id_column], what=f"party {me!r}'s {id_column}")
        party = linkage.EcdhPsiParty()
        ALIGN.send(federation, other, "psi-blinded", PsiPoints(b"".join(party.blind(ids))))
        theirs = ALIGN.recv(federation, other, "psi-blinded", PsiPoints).split(other)
        their_double = party.reblind(theirs)
        ALIGN.send(federation, other, "psi-double", PsiPoints(b"".join(their_double)))
        own_double = ALIGN.recv(federation, other, "psi-double", PsiPoints).split(other)
        if len(own_double) != len(ids):
            raise ValueError(f"party {other!r} returned {len(own_double)} points for {len(ids)}")
        # both now hold both sides' doubly blinded points: the common ones are the common IDs,
        # which both sort by a keyed hash of the ID itself (the same order at both, run after run)
        common = set(own_double) & set(their_double)
        position = {point: k for k, point in enumerate(own_double)}
        rows = party.own_rows(position[p] for p in common)
        key = _key_bytes(order_key)
        rows.sort(
            key=lambda r: hashlib.sha256(b"vflink/order\x00" + key + ids[r].encode()).digest()
        )
        return _reorder(frame, rows, me)
    if frame is None:  # the linkage unit
        if me != linkage_unit:
            raise ValueError(f"party {me!r} has no frame but is not the linkage unit")
        _link_encodings(federation, parties, threshold, order_key)
        return None
    if schema is None or secret is None:
        raise ValueError(f"party {me!r}: Bloom-filter alignment needs the schema and the secret")
    encodings = linkage.encode(frame, schema, secret=secret)
    if ledger is not None and schema.blip_epsilon is not None:
        from vfl.privacy import record_blip

        record_blip(
            ledger,
            holder=me,
            epsilon_per_bit=schema.blip_epsilon,
            bits_per_record=schema.encoded_bits,
            data=f"Bloom-filter encodings of {', '.join(schema.columns)}",
        )
    # sent in a secret random order, so that positions say nothing about how the table is sorted
    shuffle = list(range(len(frame)))
    secrets.SystemRandom().shuffle(shuffle)
    message = EncodingsMessage(encodings.words[shuffle], encodings.fingerprint)
    ALIGN.send(federation, linkage_unit, "encodings", message)
    positions = ALIGN.recv(federation, linkage_unit, "rows", RowPositions).rows
    if positions.ndim != 1 or positions.dtype.kind not in "iu":
        RowPositions.refuse(linkage_unit, "rows", "are not integer positions")
    if len(positions) and (positions.min() < 0 or positions.max() >= len(frame)):
        RowPositions.refuse(linkage_unit, "rows", "are out of range")
    return _reorder(frame, [shuffle[r] for r in positions.tolist()], me)


def _reorder(frame: pd.DataFrame, rows: list[int], party: str) -> pd.DataFrame:
    if not rows:
        raise ValueError(f"party {party!r}: no common rows with the other parties")
    out: pd.DataFrame = frame.iloc[rows].copy()
    source = out.index
    out.index = pd.RangeIndex(len(out), name="common_row")
    out.attrs["source_rows"] = list(source)
    return out


def _key_bytes(key: bytes | str | None) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else (key or b"")


def _link_encodings(
    federation: Federation,
    parties: list[str],
    threshold: float | None,
    order_key: bytes | str | None = None,
) -> None:
    encodings = {}
    for party in parties:
        message = ALIGN.recv(federation, party, "encodings", EncodingsMessage)
        words = message.words
        if words.dtype != np.uint64 or words.ndim != 2:
            EncodingsMessage.refuse(party, "words", "are not a 2-d array of 64-bit words")
        encodings[party] = linkage.Encodings(pd.RangeIndex(len(words)), words, message.fingerprint)
    anchor, *others = parties
    # rows of the anchor linked to every other party, and the partner position in each
    partner: dict[str, dict[int, int]] = {}
    for party in others:
        try:
            links = linkage.match(encodings[anchor], encodings[party], threshold=threshold)
        except ValueError as exc:
            raise ValueError(f"linking {anchor!r} with {party!r}: {exc}") from None
        partner[party] = dict(zip(links["a"].tolist(), links["b"].tolist(), strict=True))
    common = sorted(set.intersection(*(set(p) for p in partner.values())))
    if order_key is None:  # a fresh random order: it reveals no party's order
        secrets.SystemRandom().shuffle(common)
    else:  # reproducible, and as uninformative to parties that do not hold the key
        key = _key_bytes(order_key)
        words = encodings[anchor].words
        common.sort(key=lambda r: hmac.new(key, words[r].tobytes(), hashlib.sha256).digest())
    ALIGN.send(federation, anchor, "rows", RowPositions(np.asarray(common, dtype=np.int64)))
    for party in others:
        positions = np.asarray([partner[party][a] for a in common], dtype=np.int64)
        ALIGN.send(federation, party, "rows", RowPositions(positions))
