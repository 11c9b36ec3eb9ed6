"""The transcript audit: does any message carry a party's plaintext?

It looks, in every recorded payload a party sent, for a run of ``window`` consecutive values
equal (to 9 decimals) to consecutive values of one of that party's secret columns -- as they
are, and under each of the given scales (standardised, fixed-point integers). Ciphertexts are
skipped: they are what protocols send instead. A run that appears is reported as a
:class:`Leak`. Needs a transcript recorded with payloads (``keep_payloads=True``).

:class:`PlaintextAudit` (``"plaintext"``) is the same search as a registered audit: its trials
are the messages the parties with secrets sent, its successes the messages that carry a run,
against a chance of 0 (a real-valued run of ``window`` values does not match by accident), so
one leaking message makes it :attr:`~vfl.audit.AuditResult.leaks`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.audit.base import Audit, AuditResult
from vfl.audit.registry import register_audit
from vfl.federation.base import Transcript
from vfl.federation.wire import CiphertextBlock

__all__ = ["Leak", "PlaintextAudit", "find_plaintext", "numbers_in"]


@dataclass(frozen=True)
class Leak:
    """A message that carries a run of a party's secret values (``seq``: the message's
    position in the transcript)."""

    sender: str
    receiver: str
    tag: str
    values: tuple[float, ...]
    seq: int = -1


def numbers_in(payload: Any) -> list[np.ndarray[Any, Any]]:
    """The plaintext numeric sequences of a payload (arrays, lists of numbers, bytes as
    unsigned bytes are not numbers here), ciphertexts excluded."""
    if isinstance(payload, CiphertextBlock):
        return []
    if isinstance(payload, np.ndarray):
        return [payload.astype(float).ravel()] if payload.dtype.kind in "biuf" else []
    if isinstance(payload, dict):
        return [a for v in payload.values() for a in numbers_in(v)]
    if isinstance(payload, list):
        if payload and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in payload
        ):
            return [np.array([float(v) for v in payload])]
        return [a for v in payload for a in numbers_in(v)]
    return []


def _windows(values: np.ndarray[Any, Any], window: int) -> set[tuple[float, ...]]:
    column = np.round(values, 9)
    return {tuple(column[k : k + window].tolist()) for k in range(len(column) - window + 1)}


def find_plaintext(
    transcript: Transcript,
    secrets: Mapping[str, Iterable[np.ndarray[Any, Any]]],
    *,
    scales: Iterable[float] = (1.0,),
    window: int = 5,
) -> list[Leak]:
    """Every message whose sender's secret values appear in it (see the module docstring).

    Parameters
    ----------
    transcript : Transcript
        Recorded with payloads.
    secrets : mapping of party to arrays
        Each party's secret values: 1-d arrays or 2-d arrays (searched column by column).
    scales : floats
        Multipliers under which each secret is also searched (e.g. ``2**20`` for fixed point).
    window : int
        Consecutive values that make a match (5: a chance match of real-valued data is
        negligible; binary labels need a longer window).
    """
    if not transcript.records or transcript.records[0].data is None:
        raise ValueError("the transcript holds no payloads: record it with keep_payloads=True")
    patterns: dict[str, set[tuple[float, ...]]] = {}
    factors = list(scales)
    for party, arrays in secrets.items():
        found: set[tuple[float, ...]] = set()
        for array in arrays:
            values = np.asarray(array, dtype=float)
            for column in values.T if values.ndim == 2 else [values]:
                for scale in factors:
                    found |= _windows(column * scale, window)
        patterns[party] = found
    leaks = []
    for record in transcript.records:
        mine = patterns.get(record.sender)
        if not mine:
            continue
        for sequence in numbers_in(record.payload()):
            for run in _windows(sequence, window) & mine:
                leaks.append(Leak(record.sender, record.receiver, record.tag, run, record.seq))
    return leaks


@register_audit
class PlaintextAudit(Audit):
    """Search every message a party sent for runs of its own secret values
    (:func:`find_plaintext`), as an audit: one trial per message sent by a party of
    ``secrets``, a success per message that carries a run, chance 0. The leaks found are in
    ``details["leaks"]``."""

    name = "plaintext"
    family = "any"

    def run(
        self,
        transcript: Transcript,
        secrets: Mapping[str, Iterable[np.ndarray[Any, Any]]],
        *,
        scales: Iterable[float] = (1.0,),
        window: int = 5,
    ) -> AuditResult:
        leaks = find_plaintext(transcript, secrets, scales=scales, window=window)
        sent = [r for r in transcript.records if r.sender in secrets]
        leaking = {leak.seq for leak in leaks}
        return AuditResult(
            self.name,
            f"plaintext of {sorted(secrets)} in the messages they sent",
            trials=len(sent),
            successes=len(leaking),
            chance=0.0,
            details={"leaks": leaks, "tags": sorted({leak.tag for leak in leaks})},
        )
