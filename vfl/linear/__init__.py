"""Vertical linear models under Paillier encryption: logistic (binary and one-vs-rest
multiclass) and linear regression, on one protocol.

The parties hold different columns of the same aligned rows; the *label* party holds the
labels (and the intercept), *passive* parties features only. Any loss whose gradient in the
score is linear in the score (:mod:`~vfl.linear.losses`) trains on the same exchange:

* **setup, once per fit** (:mod:`~vfl.linear.exchange`): every data party rounds its features
  to multiples of ``2**-20``, packs each row into as few plaintexts as fit (one for up to about
  15-22 columns at 2048 bits), encrypts them and sends them to every other data party -- one
  encryption per row, not per row and epoch, and not per output;
* **per batch** (:mod:`~vfl.linear.protocol`): every party ``p`` turns its vector ``z_p``
  (``u_A - t(y)`` at the label party, its partial scores ``u_k`` at a passive) into
  ``[[X_t^T z_p]]`` for every other party ``t`` as one Pippenger multi-exponentiation over
  ``t``'s encrypted rows, re-randomised; ``t`` adds what it receives, has the sum decrypted and
  adds ``X_t^T z_t`` of its own.

``protocol="coordinator"`` (in the spirit of Hardy et al. 2017 and FATE's hetero-LR, whose
coordinator holds the only key): the rows are encrypted under the coordinator's key; the
coordinator decrypts the summed shares under slot masks of 40 bits of statistical hiding
(:mod:`vfl.crypto.masked`). ``protocol="two_party"`` (exactly two data parties, each with its
own key pair): the rows are encrypted under their owner's key, so the share computed on them
goes back to the owner, who decrypts it itself.

Compared with encrypting the partial scores every batch (Hardy et al., FATE), every per-row
encryption moves to the setup (``benchmarks/vfl_lr.py`` measures the gain). What each role
learns is the same; encrypted features, not encrypted scores, sit at the other parties: under
the honest-but-curious, no-collusion model that is equally safe (Paillier is semantically
secure), but a coordinator colluding with a data party could decrypt the other parties'
features. ``two_party`` has no such third party.

**What each role learns** (honest-but-curious parties, no collusion): every data party learns
its own weights and its own gradient of each mini-batch -- an aggregate ``X_j^T (u - t(y))``
over the batch, the known leakage of gradient-based vertical linear models. Every batch has
more rows than the party has columns (checked), so linear algebra alone cannot recover per-row
values from one batch.

.. warning::
   That check does not protect **binary labels**: training starts from zero weights (a public
   point), so a passive party's first decrypted gradient is ``-X^T t(y)``, a subset-sum over the
   batch's labels that integer programming or lattice reduction solves
   (:class:`vfl.audit.LabelSolveAudit` recovers every first-batch label on breast cancer);
   later batches leak too, and the label party accumulates equations on the passives' scores.
   A secret random start would only add unknowns to those equations, with no guarantee.
   ``label_epsilon`` (label DP: noise under encryption on every gradient share the label party
   computes for another party, and on its own gradient) bounds what any party can infer about
   one label, at a cost in accuracy (README); without it, these protocols do **not** hide the
   labels of a batch from a passive party that solves for them. A secret-shared protocol in
   which no party sees a gradient is on the tracker.

The label party learns the training loss per epoch (``loss_curve_``) and, at prediction, the
scores of the predicted rows (with one passive party, that party's partial score of each row);
with K classes the passives learn K. The coordinator learns the number of rows, batches and
epochs, and each data party's share size (K times its column groups); it decrypts only masked
values; in
``two_party`` each party decrypts only the shares computed on its own rows. No party sees
another's features, labels, partial scores or residuals; ``tests/vfl/linear`` checks every
message of a run for them.

Numerics: features are rounded to multiples of ``2**-20`` and every ``z`` to ``2**-32``, so the
shares are exact integers; the encrypted run matches :func:`plaintext_reference` to about
``1e-9`` in the weights. The packing's slot width is public (it follows from the batch size
and the magnitude of the party's largest feature, in bits).
"""

from vfl.linear.logistic import VerticalLogisticRegression
from vfl.linear.model import PartyModel
from vfl.linear.reference import plaintext_reference
from vfl.linear.regression import VerticalLinearRegression

__all__ = [
    "PartyModel",
    "VerticalLinearRegression",
    "VerticalLogisticRegression",
    "plaintext_reference",
]
