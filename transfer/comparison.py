"""Federated transfer learning from a general hospital to an imaging centre with few labels.

The population's transfer cut (:meth:`vfl.datasets.ClinicalPopulation.transfer`, made once
per comparison by :func:`transfer_cut`): the hospital (the source) holds the lab columns and
the diagnosis of its patients; the imaging centre (the target) holds the imaging columns and
the first lab tests of its own patients, of whom it knows only :data:`TARGET_LABELS`
outcomes; :data:`N_OVERLAP` patients are in both. The pairs are the cut's own (private set
intersection on the exact ``patient_id`` finds exactly these; :func:`transfer.overlap_pairs`).

* ``"federated transfer (FTL)"`` -- :class:`transfer.FederatedTransferClassifier`, secure
  (Paillier, the settings' key size), scored by the imaging centre's own model on the held-out
  patients with its columns; attacked by :func:`transfer.audit.overlap_label_attack` (what the
  centre infers about the shared patients' outcomes from the gradients it receives);
* ``"federated transfer (FTL) + DP"`` -- the same with randomised response on the hospital's
  labels (``privacy=RandomizedResponse(...)``, in the run's ledger);
* ``"imaging centre alone (few labels)"`` -- logistic regression on the centre's labelled
  rows only (the baseline of ``examples/transfer_rare_disease.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd
from sklearn.metrics import roc_auc_score

from vfl.comparison.base import Attack, Context, SchemeResult, timed
from vfl.comparison.vertical import alone
from vfl.datasets import TransferPair
from vfl.registry import scheme

__all__ = [
    "LABEL_EPSILON",
    "N_OVERLAP",
    "TARGET_LABELS",
    "TRANSFER_PARTIES",
    "target_columns",
    "transfer_cut",
]

N_OVERLAP = 200
"""Patients the hospital and the imaging centre both hold."""

TARGET_LABELS = 20
"""Outcomes the imaging centre knows (the few labels transfer is for)."""

LABEL_EPSILON = 2.0
"""Randomised response on the hospital's labels in the DP row (as the vertical label-DP row)."""

TRANSFER_PARTIES = ("hospital", "imaging")
"""The source (many labels, lab columns) and the target (few labels, imaging columns)."""

LEARNS = (
    "the hospital learns only its own gradient of the label-weighted mean representation "
    "(d numbers per iteration); the imaging centre learns its gradient of every trained row, "
    "which mixes the hospital's labels and representations of the shared patients, and then "
    "the d-number mean it scores with; neither sees the other's features, labels or encoder"
)
"""What each party learns (:mod:`transfer.ftl`'s statement)."""


def transfer_cut(ctx: Context) -> TransferPair:
    """The population's transfer cut (:data:`N_OVERLAP` shared patients,
    :data:`TARGET_LABELS` labels at the imaging centre), made once per comparison."""
    pair: TransferPair = ctx.cached(
        "transfer-pair",
        lambda: ctx.population.transfer(n_overlap=N_OVERLAP, target_labels=TARGET_LABELS),
    )
    return pair


def target_columns(pair: TransferPair) -> list[str]:
    """The imaging centre's feature columns (shared lab tests, then imaging)."""
    return [str(c) for c in pair.target.columns if c != "patient_id"]


def _features(pair: TransferPair) -> tuple[pd.DataFrame, pd.DataFrame]:
    return pair.source.drop(columns="patient_id"), pair.target.drop(columns="patient_id")


def _cut_notes(pair: TransferPair) -> str:
    return (
        f"hospital {len(pair.source)} patients (all labelled), imaging centre "
        f"{len(pair.target)} ({len(pair.target_labels)} labelled), {len(pair.overlap)} in both"
    )


def federated_transfer(ctx: Context, label_epsilon: float | None = None) -> SchemeResult:
    """Secure FTL (Paillier with masks) from the hospital to the imaging centre, scored by the
    centre's model alone on the held-out patients."""
    from transfer import FederatedTransferClassifier
    from transfer.audit import overlap_label_attack
    from vfl.crypto import SecurityWarning
    from vfl.privacy import RandomizedResponse

    s = ctx.settings
    pair = transfer_cut(ctx)
    source, target = _features(pair)
    x_test, y_test = ctx.test_set(target_columns(pair))
    iterations = s.ftl_iterations
    model = FederatedTransferClassifier(
        key_bits=s.key_bits,
        insecure=s.insecure,
        max_iter=iterations,
        privacy=None if label_epsilon is None else RandomizedResponse(label_epsilon),
        random_state=ctx.seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # demo keys in quick mode
        with timed() as t:
            model.fit(
                source,
                target,
                pair.source_labels,
                target_labels=pair.target_labels,
                overlap=pair.overlap,
                names=TRANSFER_PARTIES,
                keep_views=True,
            )
    auc = float(roc_auc_score(y_test, model.decision_function(x_test)))
    audit = overlap_label_attack(model, target, pair.overlap, pair.source_labels)
    attack = Attack(
        "overlap-label",
        "the shared patients' hospital labels, by the imaging centre",
        float(audit["gradient attack AUC"]),
        0.5,
        "attacker AUC",
    )
    transcript = model.transcript_
    parties = sorted({r.sender for r in transcript.records} | set(TRANSFER_PARTIES))
    learns = LEARNS + (
        "; the hospital's labels under randomised response" if label_epsilon is not None else ""
    )
    details: dict[str, Any] = {
        "model": model,
        "audit": audit,
        "iterations": iterations,
    }
    return SchemeResult(
        "",
        "",
        auc=auc,
        learns=learns,
        seconds=t[0],
        bytes_per_party={p: transcript.total_bytes(sender=p) for p in parties},
        attacks=(attack,),
        ledger=getattr(model, "privacy_ledger_", None) if label_epsilon is not None else None,
        notes=(
            f"{_cut_notes(pair)}; {s.key_bits}-bit keys, {iterations} iterations; "
            f"the centre's own model scores the shared patients at AUC "
            f"{audit['model AUC on the overlap']:.3f}"
        ),
        details=details,
    )


scheme("federated transfer (FTL)", "transfer")(federated_transfer)
scheme("federated transfer (FTL) + DP", "transfer", label_epsilon=LABEL_EPSILON)(federated_transfer)


@scheme("imaging centre alone (few labels)", "alone")
def imaging_few_labels_alone(ctx: Context) -> SchemeResult:
    """The imaging centre on its labelled rows only (the transfer cut's few labels), its own
    columns: logistic regression, as the transfer example's baseline."""
    pair = transfer_cut(ctx)
    _, target = _features(pair)
    return alone(
        ctx,
        target.loc[pair.target_labels.index],
        pair.target_labels,
        TRANSFER_PARTIES,
        f"{len(pair.target_labels)} labelled patients of {len(pair.target)}, imaging and "
        "shared lab columns",
    )
