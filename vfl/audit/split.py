"""Attacks on split learning, shipped as audits: what a party can infer from what it sees.

* **Label leakage from returned gradients** (Li et al. 2021, "Label leakage and protection in
  two-party split learning"). A data party receives, per row, the gradient of the loss with
  respect to its embedding. With cross-entropy the gradient is ``(p - onehot(y)) W``: its
  *norm* tends to differ by class (:func:`norm_scores`: the larger-norm rows are the rarer
  class), and its *direction* flips with the label (:func:`direction_scores`: cosine
  similarity with the gradient of one row whose label the attacker knows, the reference
  carried from batch to batch as the model drifts). Each is reported
  as the attacker's AUC against the true labels (0.5 is chance; the AUC of the better of a
  score and its negation, since the attacker can orient it with one known label).
* **Embedding inversion**: the label party receives every other party's embeddings. With
  auxiliary rows whose features it knows (``aux_fraction`` of the rows, an assumption the
  report states), it fits a decoder from embedding to features and applies it to the other
  rows (:func:`inversion_error`): the reconstruction error relative to the features'
  variance (1.0 is no better than predicting the mean; 0 is exact). With a protected layer
  (:mod:`vfl.split.interactive`) the label party sees the layer's output ``z = h W`` instead,
  and the decoder is fitted on that (computed here from both shares of ``W``: the audit's
  god's view).

:func:`split_privacy_audit` trains a :class:`vfl.SplitNNClassifier` with each list of
defences, runs the attacks and returns the privacy-utility table.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch

__all__ = [
    "direction_scores",
    "inversion_error",
    "label_leakage",
    "leakage_auc",
    "norm_scores",
    "seen_embeddings",
    "split_privacy_audit",
]

View = list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]


def _first_epoch(
    view: View, n_rows: int
) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The batches until every row was seen once (the first epoch)."""
    seen = 0
    out = []
    for rows, grads in view:
        out.append((rows, grads))
        seen += len(rows)
        if seen >= n_rows:
            break
    return out


def norm_scores(view: View, n_rows: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(rows, score)``: each row's gradient norm in the first epoch."""
    batches = _first_epoch(view, n_rows)
    rows = np.concatenate([r for r, _ in batches])
    scores = np.concatenate([np.linalg.norm(g, axis=1) for _, g in batches])
    return rows, scores


def direction_scores(
    view: View, n_rows: int, known: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(rows, score)``: each row's cosine similarity with a reference direction, within the
    first epoch. The reference starts as the gradient of row ``known`` (a row whose label the
    attacker knows) and is carried from batch to batch: after each batch it becomes the mean
    direction of that batch's rows scored on the known row's side (rows of one class point
    the same way, and the way drifts as the model trains, so a reference from one batch fades
    in later ones). Within the batch holding the known row, that row's own gradient is the
    reference."""
    batches = _first_epoch(view, n_rows)
    reference = None
    for rows, grads in batches:
        hit = np.flatnonzero(rows == known)
        if len(hit):
            reference = grads[hit[0]]
            break
    if reference is None:
        raise ValueError(f"row {known} is not in the first epoch of the view")
    reference = reference / (np.linalg.norm(reference) + 1e-12)
    out_rows, out_scores = [], []
    for rows, grads in batches:
        units = grads / (np.linalg.norm(grads, axis=1, keepdims=True) + 1e-12)
        hit = np.flatnonzero(rows == known)
        scores = units @ (units[hit[0]] if len(hit) else reference)
        out_rows.append(rows)
        out_scores.append(scores)
        alike = units[scores > 0]
        if len(alike):
            mean = alike.mean(axis=0)
            reference = mean / (np.linalg.norm(mean) + 1e-12)
    return np.concatenate(out_rows), np.concatenate(out_scores)


def leakage_auc(rows: np.ndarray[Any, Any], scores: np.ndarray[Any, Any], labels: Any) -> float:
    """The attacker's AUC of ``scores`` against the true binary ``labels`` of ``rows``
    (``max(auc, 1 - auc)``: it can orient the score with one known label)."""
    from sklearn.metrics import roc_auc_score

    truth = np.asarray(labels)[rows]
    if len(np.unique(truth)) < 2:
        return 0.5
    auc = float(roc_auc_score(truth, scores))
    return max(auc, 1 - auc)


def inversion_error(
    embeddings: np.ndarray[Any, Any],
    features: np.ndarray[Any, Any],
    *,
    aux_fraction: float = 0.2,
    random_state: int = 0,
) -> float:
    """Reconstruction error of ``features`` (standardised) from ``embeddings`` by a decoder
    (an MLP) fitted on ``aux_fraction`` of the rows, measured on the others, over the
    features' variance (1.0: no better than the mean)."""
    from sklearn.neural_network import MLPRegressor

    n = len(features)
    order = np.random.default_rng(random_state).permutation(n)
    cut = max(2, int(aux_fraction * n))
    aux, rest = order[:cut], order[cut:]
    decoder = MLPRegressor(hidden_layer_sizes=(64,), max_iter=2000, random_state=random_state)
    decoder.fit(embeddings[aux], features[aux])
    error = np.mean((decoder.predict(embeddings[rest]) - features[rest]) ** 2, axis=0)
    variance = np.var(features[rest], axis=0) + 1e-12
    return float(np.mean(error / variance))


def _layer_block(model: Any, party: str) -> np.ndarray[Any, Any]:
    """``W`` of ``party``'s block of the protected layer, from both parties' shares."""
    from vfl.split.interactive import FW

    label = model.label_party_
    total = model.shares_[label][party] + model.shares_[party][label]
    return np.array([[float(v) for v in row] for row in total]) * 2.0**-FW


def label_leakage(
    model: Any, party: str, positive: np.ndarray[Any, Any], n_rows: int
) -> tuple[float, float]:
    """``(norm AUC, direction AUC)``: the label-leakage attacks of data party ``party`` on the
    gradients it received in a fit of ``model`` with ``keep_views=True``; ``positive`` is
    each training row's true label (1 for the positive class), ``n_rows`` the training rows.
    The direction attack's known row is the first positive row the party scored."""
    view = model.views_[party]
    norm_rows, norm = norm_scores(view, n_rows)
    known = int(norm_rows[np.flatnonzero(positive[norm_rows] == 1)[0]])
    dir_rows, direction = direction_scores(view, n_rows, known)
    return leakage_auc(norm_rows, norm, positive), leakage_auc(dir_rows, direction, positive)


def seen_embeddings(
    model: Any, party: str, frame: pd.DataFrame
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(seen, design)``: what the label party of the fitted ``model`` sees of data party
    ``party``'s rows ``frame`` (the embeddings after the party's embedding noise, or with a
    protected layer the layer's output ``z = h W``), and the party's standardised features
    of those rows (what an inversion tries to recover)."""
    design = model._design(party, frame)
    with torch.no_grad():
        embeddings = model.modules_[party](torch.as_tensor(design, dtype=torch.float32))
    if model.embedding_noise is not None:
        embeddings = model.embedding_noise.apply(embeddings)
    if model.protected_layer is not None:  # what the label party sees: z = h W
        embeddings = embeddings.double() @ torch.as_tensor(_layer_block(model, party))
    seen: np.ndarray[Any, Any] = embeddings.numpy()
    return seen, design


def split_privacy_audit(
    parts: Mapping[str, pd.DataFrame],
    y: Any,
    *,
    label_party: str,
    defences: Mapping[str, Mapping[str, Any]],
    test_size: float = 0.3,
    aux_fraction: float = 0.2,
    random_state: int = 0,
    **params: Any,
) -> pd.DataFrame:
    """Train a :class:`vfl.SplitNNClassifier` (``params``) once per entry of ``defences``
    (``{name: extra estimator parameters}``, e.g. ``{"none": {}, "norm matching":
    {"gradient_protection": "norm"}}``), attack it, and return one row per entry: test AUC,
    the label-leakage attacks' AUC at the first passive party (norm, direction), the
    embedding-inversion error at the label party, epsilon (the largest the ledger records),
    seconds and bytes on the wire."""
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split

    from vfl.split import SplitNNClassifier

    index = next(iter(parts.values())).index
    labels = pd.Series(np.asarray(y), index=index)
    train, test = train_test_split(
        np.arange(len(index)), test_size=test_size, random_state=random_state, stratify=labels
    )
    fit_parts = {p: f.iloc[train] for p, f in parts.items()}
    test_parts = {p: f.iloc[test] for p, f in parts.items()}
    classes = np.unique(labels)
    positive = (labels.iloc[train].to_numpy() == classes[-1]).astype(int)
    rows = []
    for name, extra in defences.items():
        model = SplitNNClassifier(**{**params, **extra, "random_state": random_state})
        began = time.perf_counter()
        model.fit(fit_parts, labels.iloc[train], label_party=label_party, keep_views=True)
        seconds = time.perf_counter() - began
        proba = model.predict_proba(test_parts)[:, -1]
        attacked = model.spec_.senders[0]
        norm_auc, direction_auc = label_leakage(model, attacked, positive, len(train))
        embeddings, design = seen_embeddings(model, attacked, fit_parts[attacked])
        ledger = getattr(model, "privacy_ledger_", None)
        epsilon = None
        if ledger is not None and len(ledger):
            epsilon = max(ledger.epsilon(holder=h) for h in ledger.holders())
        rows.append(
            {
                "defence": name,
                "test AUC": float(roc_auc_score(labels.iloc[test] == classes[-1], proba)),
                "norm attack AUC": norm_auc,
                "direction attack AUC": direction_auc,
                "inversion error": inversion_error(
                    embeddings, design, aux_fraction=aux_fraction, random_state=random_state
                ),
                "epsilon": epsilon,
                "seconds": seconds,
                "MB": sum(r.nbytes for r in model.transcript_.records) / 1e6,
            }
        )
    table: pd.DataFrame = pd.DataFrame(rows).set_index("defence")
    return table
