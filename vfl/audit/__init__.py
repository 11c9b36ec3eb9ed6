"""Audits: attacks that measure what a party can actually infer from what it sees.

A privacy statement in vflink is a claim about what an attacker learns; an audit *tries* to
learn it and reports the success rate against chance (:class:`AuditResult`). Every protocol
ships, beside its "what each role learns" statement, the audits that test it, and users can
run them on their own runs.

* :func:`~vfl.audit.transcript.find_plaintext` -- the baseline every protocol passes: no run of
  consecutive values of a party's features or labels (raw, standardised, fixed-point) in any
  message it sent. Necessary, not sufficient: exact gradients of binary labels are a
  subset-sum a lattice solver breaks, which is what the inference audits below are for.
* :class:`Audit` -- the base of inference attacks, with a name registry
  (:func:`register_audit`, :func:`get_audit`);
* :class:`~vfl.audit.labels.LabelSolveAudit` (``"label-solve"``) -- recovers the label party's
  binary labels from a passive party's first-batch gradient in the gradient-revealing vertical
  protocols, by integer solving;
* :class:`~vfl.audit.labels.LabelDirectionAudit` (``"label-direction"``) -- guesses those
  labels in every batch of the training from the sign of each row against the decrypted
  gradient share (a statistical attack, for the batches exact solving cannot reach);
* :class:`~vfl.audit.scores.ScoreSolveAudit` (``"score-solve"``) -- recovers a one-column
  passive party's feature column and scores from the label party's view accumulated over
  the epochs of those protocols, by linear algebra. The attacks of split learning, transfer
  and the horizontal path register here as they arrive.
"""

from vfl.audit.base import AUDITS, Audit, AuditResult, get_audit, register_audit
from vfl.audit.labels import LabelDirectionAudit, LabelSolveAudit
from vfl.audit.scores import ScoreSolveAudit
from vfl.audit.transcript import Leak, find_plaintext

__all__ = [
    "AUDITS",
    "Audit",
    "AuditResult",
    "LabelDirectionAudit",
    "LabelSolveAudit",
    "Leak",
    "ScoreSolveAudit",
    "find_plaintext",
    "get_audit",
    "register_audit",
]
