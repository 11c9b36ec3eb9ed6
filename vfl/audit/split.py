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

The same attacks as registered audits (one :class:`~vfl.audit.AuditResult` each):
:class:`SplitLabelNormAudit` (``"split-label-norm"``) and :class:`SplitLabelDirectionAudit`
(``"split-label-direction"``) report the attacker's AUC (chance 0.5) with its Hanley-McNeil
spread; :class:`EmbeddingInversionAudit` (``"embedding-inversion"``) reports the share of the
features' variance the decoder explains on the rows it was not fitted on (``1 -`` the
inversion error; chance 0, the mean), with its spread over rows.

* **Embedding geometry**: what the label party receives of a batch's rows -- the embeddings
  ``h``, or with a protected layer the layer's output ``z = h W`` -- gives away how the rows
  lie to one another, with no auxiliary rows. ``W W^T`` is close to a multiple of the
  identity (``W`` starts uniform and moves little), so ``z z^T`` follows ``h h^T``
  (:func:`gram_correlation`), pairwise distances keep their order
  (:func:`distance_rank_correlation`) and so do nearest neighbours
  (:func:`neighbour_overlap`). :class:`EmbeddingGeometryAudit` (``"embedding-geometry"``)
  reports the correlation of the off-diagonal entries of the two Gram matrices per training
  batch (chance 0: the rows of ``h`` shuffled give about 0, measured alongside), from a fit
  with ``keep_views=True`` (``label_views_`` against the sender's own ``embeddings_``).
  :class:`vfl.split.EmbeddingNoise` lowers it (noise on ``h`` before the layer).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vfl.audit.base import Audit, AuditResult
from vfl.audit.registry import register_audit
from vfl.extras import optional

if TYPE_CHECKING:
    import torch
else:
    torch = optional("torch", for_=__name__)

__all__ = [
    "EmbeddingGeometryAudit",
    "EmbeddingInversionAudit",
    "SplitLabelDirectionAudit",
    "SplitLabelNormAudit",
    "direction_scores",
    "distance_rank_correlation",
    "gram_correlation",
    "inversion_error",
    "label_leakage",
    "leakage_auc",
    "neighbour_overlap",
    "norm_scores",
    "protected_layer_block",
    "row_inversion_errors",
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
    errors = row_inversion_errors(
        embeddings, features, aux_fraction=aux_fraction, random_state=random_state
    )
    return float(np.mean(errors))


def row_inversion_errors(
    embeddings: np.ndarray[Any, Any],
    features: np.ndarray[Any, Any],
    *,
    aux_fraction: float = 0.2,
    random_state: int = 0,
) -> np.ndarray[Any, Any]:
    """Per held-out row, the mean over the features of the squared reconstruction error over
    the feature's variance (:func:`inversion_error` is their mean)."""
    from sklearn.neural_network import MLPRegressor

    n = len(features)
    order = np.random.default_rng(random_state).permutation(n)
    cut = max(2, int(aux_fraction * n))
    aux, rest = order[:cut], order[cut:]
    if len(rest) == 0:
        raise ValueError(f"no row is left to attack: {n} rows, aux_fraction={aux_fraction}")
    decoder = MLPRegressor(hidden_layer_sizes=(64,), max_iter=2000, random_state=random_state)
    decoder.fit(embeddings[aux], features[aux])
    truth = features[rest].reshape(len(rest), -1)
    difference = decoder.predict(embeddings[rest]).reshape(len(rest), -1) - truth
    variance = np.var(truth, axis=0) + 1e-12
    out: np.ndarray[Any, Any] = np.mean(difference**2 / variance, axis=1)
    return out


def protected_layer_block(model: Any, party: str) -> np.ndarray[Any, Any]:
    """``W`` of ``party``'s block of a fitted model's protected layer
    (:class:`vfl.split.ProtectedLayer`), reassembled from both parties' shares: what the two
    would learn by pooling them (the audits' view of the true weights)."""
    from vfl.split.interactive import FW

    label = model.label_party_
    total = model.shares_[label][party].values + model.shares_[party][label].values
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
        embeddings = embeddings.double() @ torch.as_tensor(protected_layer_block(model, party))
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


def _positive(labels: Any) -> np.ndarray[Any, Any]:
    """Binary labels as 0/1, the larger class positive (the attacker's unit of truth)."""
    values = np.asarray(labels).reshape(-1)
    if len(values) == 0:
        raise ValueError("no labels to score the attack against")
    out: np.ndarray[Any, Any] = (values == np.unique(values)[-1]).astype(np.int64)
    return out


@register_audit
class SplitLabelNormAudit(Audit):
    """The label-leakage attack by gradient norm (:func:`norm_scores`): the data party scores
    each row of the first epoch by the norm of the gradient it received for the row.

    Run it on ``model.views_[party]`` of a :class:`vfl.SplitNNClassifier` fitted with
    ``keep_views=True`` and the training rows' true labels (in training-row order; they
    only score the attack). Reports the attacker's AUC (oriented; chance 0.5).
    """

    name = "split-label-norm"
    family = "split"

    def run(self, view: View, labels: Any, *, n_rows: int | None = None) -> AuditResult:
        positive = _positive(labels)
        if not view:
            raise ValueError("the view is empty: fit with keep_views=True")
        rows, scores = norm_scores(view, len(positive) if n_rows is None else n_rows)
        return AuditResult.from_auc(
            self.name, "labels from the returned gradients' norms", positive[rows], scores
        )


@register_audit
class SplitLabelDirectionAudit(Audit):
    """The label-leakage attack by gradient direction (:func:`direction_scores`): cosine
    similarity of each row's gradient with that of a row whose label the attacker knows
    (``known``; by default the first positive row of the view, as :func:`label_leakage`).

    Inputs as :class:`SplitLabelNormAudit`. Reports the attacker's AUC (oriented; chance 0.5).
    """

    name = "split-label-direction"
    family = "split"

    def run(
        self, view: View, labels: Any, *, n_rows: int | None = None, known: int | None = None
    ) -> AuditResult:
        positive = _positive(labels)
        if not view:
            raise ValueError("the view is empty: fit with keep_views=True")
        epoch = len(positive) if n_rows is None else n_rows
        if known is None:
            seen = np.concatenate([rows for rows, _ in _first_epoch(view, epoch)])
            hits = np.flatnonzero(positive[seen] == 1)
            if not len(hits):
                raise ValueError("no positive row in the view's first epoch: pass known=")
            known = int(seen[hits[0]])
        rows, scores = direction_scores(view, epoch, known)
        return AuditResult.from_auc(
            self.name,
            "labels from the returned gradients' directions",
            positive[rows],
            scores,
            details={"known row": known},
        )


@register_audit
class EmbeddingInversionAudit(Audit):
    """Embedding inversion at the label party (:func:`row_inversion_errors`): a decoder
    fitted on ``aux_fraction`` of the rows (auxiliary rows whose features the attacker
    knows, an assumption) maps what it sees (:func:`seen_embeddings`) back to the features.

    Reports the share of the features' variance explained on the other rows (``1 -``
    :func:`inversion_error`; chance 0, predicting the mean), its spread over rows, and the
    inversion error in ``details``.
    """

    name = "embedding-inversion"
    family = "split"

    def run(
        self,
        embeddings: np.ndarray[Any, Any],
        features: np.ndarray[Any, Any],
        *,
        aux_fraction: float = 0.2,
        random_state: int = 0,
    ) -> AuditResult:
        errors = row_inversion_errors(
            np.asarray(embeddings),
            np.asarray(features),
            aux_fraction=aux_fraction,
            random_state=random_state,
        )
        explained = 1.0 - errors
        return AuditResult(
            self.name,
            "the data party's features from what the label party sees of its rows",
            trials=len(errors),
            successes=0,
            chance=0.0,
            details={"inversion error": float(np.mean(errors)), "aux_fraction": aux_fraction},
            rate=float(np.mean(explained)),
            spread=float(np.std(explained)),
            metric="explained variance",
        )


# -- the geometry of what the label party sees ---------------------------------------------------


def _pairs(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The entries above the diagonal of a square matrix, flat."""
    upper: np.ndarray[Any, Any] = values[np.triu_indices(len(values), 1)]
    return upper


def _pearson(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    """Pearson's correlation; 0 where either side is constant (no geometry to match)."""
    a, b = a - a.mean(), b - b.mean()
    scale = float(np.sqrt((a @ a) * (b @ b)))
    return float(a @ b) / scale if scale > 0 else 0.0


def gram_correlation(seen: np.ndarray[Any, Any], truth: np.ndarray[Any, Any]) -> float:
    """The correlation of the off-diagonal entries of ``seen seen^T`` and ``truth truth^T``
    (rows are the same rows in both; 1: the inner products are one affine map of the
    other's, 0: unrelated). Needs 3 rows or more."""
    seen, truth = np.asarray(seen, np.float64), np.asarray(truth, np.float64)
    if len(seen) != len(truth) or len(seen) < 3:
        raise ValueError(
            f"need the same 3 or more rows on both sides, got {len(seen)}, {len(truth)}"
        )
    return _pearson(_pairs(seen @ seen.T), _pairs(truth @ truth.T))


def _distances(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    squares = np.sum(values**2, axis=1)
    out: np.ndarray[Any, Any] = np.sqrt(
        np.maximum(squares[:, None] + squares[None, :] - 2 * values @ values.T, 0.0)
    )
    return out


def distance_rank_correlation(seen: np.ndarray[Any, Any], truth: np.ndarray[Any, Any]) -> float:
    """Spearman's correlation of the pairwise Euclidean distances of the rows of ``seen``
    and of ``truth`` (1: every pair of rows is as far apart, in rank, on both sides)."""
    from scipy.stats import rankdata

    seen, truth = np.asarray(seen, np.float64), np.asarray(truth, np.float64)
    a, b = _pairs(_distances(seen)), _pairs(_distances(truth))
    return _pearson(rankdata(a), rankdata(b))


def neighbour_overlap(
    seen: np.ndarray[Any, Any], truth: np.ndarray[Any, Any], neighbours: int = 5
) -> float:
    """The mean share of each row's ``neighbours`` nearest rows in ``seen`` that are among
    its ``neighbours`` nearest in ``truth`` (chance ``neighbours / (rows - 1)``; ties broken
    by row order)."""
    seen, truth = np.asarray(seen, np.float64), np.asarray(truth, np.float64)
    k = min(neighbours, len(seen) - 1)
    if k < 1:
        raise ValueError(f"need 2 or more rows to find neighbours, got {len(seen)}")
    found = []
    for values in (seen, truth):
        distances = _distances(values)
        np.fill_diagonal(distances, np.inf)
        found.append(np.argsort(distances, axis=1, kind="stable")[:, :k])
    shared = [len(np.intersect1d(a, b)) for a, b in zip(found[0], found[1], strict=True)]
    return float(np.mean(shared)) / k


def _aligned(view: View, truth: Any) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """``[(seen, truth)]`` per batch: ``truth`` a view of the same batches (checked row by
    row) or an array indexed by row."""
    if not view:
        raise ValueError("the label party's view is empty: fit with keep_views=True")
    if isinstance(truth, np.ndarray):
        return [(np.asarray(seen), truth[rows]) for rows, seen in view]
    if len(truth) != len(view):
        raise ValueError(f"the view holds {len(view)} batches, the truth {len(truth)}")
    out = []
    for b, ((rows, seen), (true_rows, values)) in enumerate(zip(view, truth, strict=True)):
        if not np.array_equal(rows, true_rows):
            raise ValueError(
                f"batch {b} of the view holds other rows than batch {b} of the truth: pass "
                "the sender's embeddings_ of the same fit"
            )
        out.append((np.asarray(seen), np.asarray(values)))
    return out


def _row_means(view: View, rows: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``(rows seen, each one's mean value)`` over every batch of ``view``."""
    width = np.asarray(view[0][1]).shape[1]
    total, count = np.zeros((rows, width)), np.zeros(rows)
    for index, values in view:
        np.add.at(total, index, values)
        np.add.at(count, index, 1)
    seen = np.flatnonzero(count)
    return seen, total[seen] / count[seen, None]


@register_audit
class EmbeddingGeometryAudit(Audit):
    """The geometry of a sender's embeddings from what the label party receives of them:
    the correlation of the off-diagonal entries of ``z z^T`` and ``h h^T`` per training batch
    (:func:`gram_correlation`), where ``z`` is the label party's view (with a protected layer
    the layer's output ``h W``, which :class:`vfl.split.ProtectedLayer` hides ``h`` behind;
    without one the embeddings as sent) and ``h`` the sender's own embeddings of the same
    rows before its defences. No auxiliary rows: the label party learns which rows are alike.

    Run it on ``model.label_views_[party]`` and ``model.embeddings_[party]`` of a split model
    fitted with ``keep_views=True`` (``truth`` may also be an array of the sender's
    embeddings indexed by row). Reports the mean correlation over batches (chance 0; the
    spread over batches) and in ``details``: the same for ``h`` with its rows shuffled within
    each batch (``"shuffled correlation"``, the measured chance), the rank correlation of
    pairwise distances, the share of ``neighbours`` nearest rows kept (and its chance), and
    the correlation after averaging each row's view over the epochs (an attacker that
    averages the noise away; on at most ``max_rows`` rows).

    Parameters
    ----------
    view : list of (rows, values)
        The label party's view per batch (``label_views_[party]``).
    truth : list of (rows, values) or ndarray
        The sender's embeddings of the same batches (``embeddings_[party]``), or of every
        row, indexed by row.
    neighbours : int
        How many nearest rows :func:`neighbour_overlap` compares.
    max_rows : int
        The rows the averaged correlation is computed on (drawn from ``random_state``).
    random_state : int
        Draws the shuffles of the chance baseline and the averaged correlation's rows.

    Returns
    -------
    AuditResult
        ``rate``: the mean Gram correlation over batches of 3 rows or more; ``spread``: its
        deviation over them; ``chance`` 0.

    Raises
    ------
    ValueError
        An empty view, a truth of other batches or rows, or no batch of 3 rows.

    .. warning::
        The audit scores the training batches the label party decrypted. Scoring through
        the protected layer sends the exact ``z`` of every scored row, embedding noise or
        not: its geometry is the undefended one.
    """

    name = "embedding-geometry"
    family = "split"

    def run(
        self,
        view: View,
        truth: Any,
        *,
        neighbours: int = 5,
        max_rows: int = 1000,
        random_state: int = 0,
    ) -> AuditResult:
        batches = [(s, t) for s, t in _aligned(view, truth) if len(s) >= 3]
        if not batches:
            raise ValueError("no batch of 3 rows or more to compare")
        rng = np.random.default_rng(random_state)
        grams = np.array([gram_correlation(s, t) for s, t in batches])
        shuffled = np.array([gram_correlation(s, t[rng.permutation(len(t))]) for s, t in batches])
        ranks = [distance_rank_correlation(s, t) for s, t in batches]
        kept = [neighbour_overlap(s, t, neighbours) for s, t in batches]
        chance = float(np.mean([min(neighbours, len(s) - 1) / (len(s) - 1) for s, _ in batches]))
        details: dict[str, Any] = {
            "shuffled correlation": float(np.mean(shuffled)),
            "distance rank correlation": float(np.mean(ranks)),
            "neighbour overlap": float(np.mean(kept)),
            "neighbour chance": chance,
            "batches": len(batches),
        }
        if not isinstance(truth, np.ndarray):
            rows = 1 + max(int(np.max(r)) for r, _ in view)
            seen_rows, seen = _row_means(view, rows)
            _, values = _row_means(truth, rows)
            pick = rng.permutation(len(seen_rows))[:max_rows]
            details["averaged correlation"] = gram_correlation(seen[pick], values[pick])
        return AuditResult(
            self.name,
            "the pairwise geometry of a sender's embeddings from the label party's view",
            trials=len(batches),
            successes=0,
            chance=0.0,
            details=details,
            rate=float(np.mean(grams)),
            spread=float(np.std(grams)),
            metric="Gram correlation",
        )
