"""Audits: attacks that measure what a party can actually infer from what it sees.

A privacy statement in vflink is a claim about what an attacker learns; an audit *tries* to
learn it and reports the success rate against chance. Every family's attacks are
:class:`Audit` subclasses in **one registry** (:func:`get_audit`, :func:`audits`,
:func:`register_audit`; an unknown name raises a ``ValueError`` listing the valid ones) and
return **one result type**, :class:`AuditResult`: name, what was attacked, success rate,
chance, per-trial spread and standard error, and the verdict :attr:`AuditResult.leaks`.

>>> from vfl.audit import get_audit
>>> result = get_audit("label-solve")().run(view, design, labels)  # doctest: +SKIP
>>> result.success_rate, result.chance, result.leaks  # doctest: +SKIP

The audits, by family (the bare functions they call stay public, as kernels):

* any protocol -- ``"plaintext"`` (:class:`~vfl.audit.transcript.PlaintextAudit`, over
  :func:`find_plaintext`): no run of a party's features or labels (raw, standardised,
  fixed-point) in any message it sent. Necessary, not sufficient: exact gradients of binary
  labels are a subset-sum a lattice solver breaks, which is what the inference audits are for;
* vertical -- ``"label-solve"`` (:class:`~vfl.audit.labels.LabelSolveAudit`): the label
  party's binary labels from a passive party's first-batch gradient, by integer solving;
  ``"label-direction"`` (:class:`~vfl.audit.labels.LabelDirectionAudit`): the same labels in
  every batch, by the sign of each row against the gradient; ``"instance-space"``
  (:class:`~vfl.audit.boost.InstanceSpaceAudit`): the labels from the node row sets a
  SecureBoost host saw; ``"score-solve"``
  (:class:`~vfl.audit.scores.ScoreSolveAudit`): a one-column passive party's column (and so
  its scores) from the label party's view accumulated over the epochs;
* split learning -- ``"split-label-norm"``, ``"split-label-direction"`` (labels from the
  returned gradients' norms and directions, Li et al. 2021), ``"embedding-inversion"``
  (features from embeddings) and ``"embedding-geometry"`` (the embeddings' pairwise geometry
  from what the label party sees under the protected layer), in :mod:`vfl.audit.split`;
* linkage -- ``"bloom-frequency"`` (:class:`~vfl.audit.linkage.BloomFrequencyAudit`, over
  :func:`linkage.frequency_attack`): names re-identified from Bloom-filter encodings;
* transfer -- ``"overlap-label"`` (:mod:`transfer.audit`): the source's labels of the shared
  patients from the gradients the target receives;
* horizontal -- ``"gradient-inversion"``, ``"gradient-matching"`` (records from updates, closed
  form and DLG), ``"membership"`` (membership from the model) and ``"backdoor"`` (a planted
  trigger's success), in :mod:`horizontal.attacks`.

The transfer and horizontal audits are found through the ``vflink.audits`` entry points
(:mod:`vfl.audit.registry`): ``vfl`` does not import the packages above it. Names are exported
lazily, so ``from vfl.audit import AuditResult`` (what those packages do) loads no attack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

_EXPORTS = {
    "Audit": "vfl.audit.base",
    "AuditResult": "vfl.audit.base",
    "AUDITS": "vfl.audit.registry",
    "ENTRY_POINT_GROUP": "vfl.audit.registry",
    "audits": "vfl.audit.registry",
    "get_audit": "vfl.audit.registry",
    "register_audit": "vfl.audit.registry",
    "LabelDirectionAudit": "vfl.audit.labels",
    "LabelSolveAudit": "vfl.audit.labels",
    "ScoreSolveAudit": "vfl.audit.scores",
    "SplitLabelNormAudit": "vfl.audit.split",
    "SplitLabelDirectionAudit": "vfl.audit.split",
    "EmbeddingInversionAudit": "vfl.audit.split",
    "EmbeddingGeometryAudit": "vfl.audit.split",
    "BloomFrequencyAudit": "vfl.audit.linkage",
    "InstanceSpaceAudit": "vfl.audit.boost",
    "Leak": "vfl.audit.transcript",
    "PlaintextAudit": "vfl.audit.transcript",
    "find_plaintext": "vfl.audit.transcript",
}

__all__ = [
    "AUDITS",
    "ENTRY_POINT_GROUP",
    "Audit",
    "AuditResult",
    "BloomFrequencyAudit",
    "EmbeddingGeometryAudit",
    "EmbeddingInversionAudit",
    "InstanceSpaceAudit",
    "LabelDirectionAudit",
    "LabelSolveAudit",
    "Leak",
    "PlaintextAudit",
    "ScoreSolveAudit",
    "SplitLabelDirectionAudit",
    "SplitLabelNormAudit",
    "audits",
    "find_plaintext",
    "get_audit",
    "register_audit",
]

if TYPE_CHECKING:
    from vfl.audit.base import Audit, AuditResult
    from vfl.audit.boost import InstanceSpaceAudit
    from vfl.audit.labels import LabelDirectionAudit, LabelSolveAudit
    from vfl.audit.linkage import BloomFrequencyAudit
    from vfl.audit.registry import (
        AUDITS,
        ENTRY_POINT_GROUP,
        audits,
        get_audit,
        register_audit,
    )
    from vfl.audit.scores import ScoreSolveAudit
    from vfl.audit.split import (
        EmbeddingGeometryAudit,
        EmbeddingInversionAudit,
        SplitLabelDirectionAudit,
        SplitLabelNormAudit,
    )
    from vfl.audit.transcript import Leak, PlaintextAudit, find_plaintext


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
