"""Vertical linear models under Paillier encryption: logistic (binary and one-vs-rest
multiclass) and linear regression.

The parties hold different columns of the same aligned rows; the *label* party holds the
labels (and the intercept), *passive* parties features only. Any loss whose gradient in the
score is linear in the score (:mod:`~vfl.linear.losses`) trains on four protocols, chosen with
``protocol=``:

==========================  ======================================  ============================
protocol                    who sees a gradient                     parties
==========================  ======================================  ============================
``"shared"`` (default)      nobody: weights and gradients exist     any number of data parties,
                            only as additive shares                 each with its own key
``"shared_coordinator"``    nobody (the coordinator holds the       any number of data parties
                            key and decrypts masked shares)         and a coordinator
``"coordinator"``           each data party its own exact           any number of data parties
                            gradient of every mini-batch            and a coordinator
``"two_party"``             each data party its own exact gradient  two data parties
==========================  ======================================  ============================

**The secret-shared protocols** (:mod:`~vfl.linear.shared`, in the spirit of FATE's SSHE-LR
and SecretFlow's HESS-LR). The mini-batches are fixed, drawn once from the agreed seed, and
visited in a fresh order every epoch. Each batch's joint Gram matrix ``X^T X`` and
``X^T t(y)`` are split into shares once, at setup. The label party and its partner (the
first other data party) hold the shares of the weights; per batch, each raises the sum of
the other parties' encrypted Gram share columns to its share of the weights, and masks the
packed result for the other holder. The weights move by momentum SGD (or SGD) on shares,
and Adam is refused: its square roots are not linear. Each epoch's model is the mean of its
iterates, averaged on the shares. Its loss over all rows reaches the label party once per
epoch, under a key used for nothing else and checked against public bounds. At the end each
party receives the holders' shares of its own weights. The model equals
:func:`plaintext_reference` to the fixed point (``2**-24`` per step; runs under one seed
agree to about ``1e-6``, not exactly, since shares are truncated at random points).

**What each role learns under them.** The label party learns every other party's number of
columns and curvature bound (one number that sets its default step), the loss once per epoch
and its own final weights. Every other party learns the column counts and curvature bounds,
the number of outputs K, the row count, when the fit restarts or stops (and the epoch it
goes back to or ends with: no keep bit per epoch) and its own final weights. The
coordinator learns the public plan. Nobody sees a gradient, residual, partial
score, label or feature of another party: every value a party decrypts carries a mask of
``KAPPA`` (40) bits more than the value, fresh from the other party's OS randomness. The
audits confirm it. From the passive party's view,
:class:`vfl.audit.LabelSolveAudit` recovers no more labels than the majority guess. From the
label party's view over all epochs, :class:`vfl.audit.ScoreSolveAudit` recovers nothing of a
one-column passive's scores (correlation about 0). Under the gradient-revealing protocols
both audits recover everything.

**The gradient-revealing protocols** (:mod:`~vfl.linear.exchange`,
:mod:`~vfl.linear.protocol`) are faster per batch on small batches; they reveal each party its
exact gradient, and a party that deviates can still have ciphertexts of its choosing opened
within the layout (:mod:`~vfl.linear.exchange`).

* At setup, every data party rounds its features to multiples of ``2**-20``, packs each row
  into as few plaintexts as fit, encrypts them and sends them to every other data party.
  That is one encryption per row, not per row and epoch.
* Per batch, every party ``p`` turns its vector ``z_p`` (``u_A - t(y)`` at the label party,
  its partial scores ``u_k`` at a passive) into ``[[X_t^T z_p]]`` for every other party
  ``t``, with one Pippenger multi-exponentiation over ``t``'s encrypted rows. ``t`` has the
  sum decrypted: by the coordinator under slot masks in ``"coordinator"`` (Hardy et al.
  2017, FATE's hetero-LR), or by itself in ``"two_party"``.

Each data party learns its own weights and **its own exact gradient of each mini-batch**. The
label party learns the loss per epoch; the others learn the keep and restart bits per epoch.
Each party steps by its own curvature-derived step (Adam: 0.05), which it tells nobody. The
coordinator decrypts only masked values. As under the shared protocols, the fitted model is
the best epoch's mean iterate: each party averages its own weights.

.. warning::
   A party's exact gradients give away **labels and scores**. From zero weights, a passive
   party's first gradient is ``-X^T t(y)``, a subset-sum over the batch's labels that
   integer programming or lattice reduction solves (:class:`vfl.audit.LabelSolveAudit`
   recovers every first-batch label on breast cancer). Later batches leak too. The label
   party accumulates ``X_A^T u_B`` over epochs and recovers a one-column passive's column
   exactly (:class:`vfl.audit.ScoreSolveAudit`). A secret random start only adds unknowns
   to these equations, with no guarantee, and is not offered. Label DP
   (``privacy=GaussianLabelDP(epsilon)``) bounds what a party infers about one label, at a
   cost in accuracy (README), and does nothing for the scores. Use the secret-shared
   protocols where either matters.

At prediction, the label party learns the scores of the predicted rows. With one passive
party, that includes the passive's partial score of each row, as in any protocol that
gives the label party the model's output. ``tests/vfl/linear`` checks every message of a run
for plaintext features and labels, under every protocol.
"""

from vfl.linear.logistic import VerticalLogisticRegression
from vfl.linear.model import PartyModel
from vfl.linear.poisson import VerticalPoissonRegression
from vfl.linear.reference import plaintext_reference
from vfl.linear.regression import VerticalLinearRegression

__all__ = [
    "PartyModel",
    "VerticalLinearRegression",
    "VerticalLogisticRegression",
    "VerticalPoissonRegression",
    "plaintext_reference",
]
