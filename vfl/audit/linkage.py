"""The frequency attack on Bloom-filter encodings as a registered audit.

:mod:`linkage` imports nothing of vflink's, so its attack stays a pure function there
(:func:`linkage.audit.frequency_attack`); this module wraps it as
:class:`BloomFrequencyAudit` (``"bloom-frequency"``), whose :class:`~vfl.audit.AuditResult`
counts the records re-identified against the best guess without the encodings: every record
guessed as the public table's most frequent value.

.. warning::
   Bloom-filter encodings can be attacked by frequency analysis; a low figure here is a lower
   bound on what an attacker learns, not a proof of privacy (see :mod:`linkage.audit`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from linkage.audit import frequency_attack
from vfl.audit.base import Audit, AuditResult
from vfl.audit.registry import register_audit

__all__ = ["BloomFrequencyAudit"]


@register_audit
class BloomFrequencyAudit(Audit):
    """Re-identify encoded values from their frequencies, without the secret
    (:func:`linkage.frequency_attack`).

    Run it on the encodings (or their ``uint64`` words), the attacker's public table of
    value counts, and the true value of each record (which only scores the attack); further
    keywords (``method``, ``field``, ``schema``, ``max_qgrams``...) go to
    :func:`~linkage.frequency_attack`. The frequency attack's own result is in
    ``details["attack"]``.
    """

    name = "bloom-frequency"
    family = "linkage"

    def run(
        self,
        encodings: Any,
        public_frequencies: Mapping[str, float] | pd.Series,
        truth: Sequence[Any] | pd.Series | np.ndarray[Any, Any],
        **options: Any,
    ) -> AuditResult:
        found = frequency_attack(encodings, public_frequencies, truth=truth, **options)
        if found.n_reidentified is None or found.chance is None:  # pragma: no cover
            raise RuntimeError("frequency_attack returned no score despite the truth given")
        return AuditResult(
            self.name,
            f"values re-identified from Bloom-filter encodings ({found.method})",
            trials=found.n_records,
            successes=found.n_reidentified,
            chance=found.chance,
            details={**found.as_dict(), "attack": found},
        )
