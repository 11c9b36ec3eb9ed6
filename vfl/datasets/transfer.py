"""The transfer setting (:func:`make_transfer_pair`): a general hospital with many
labelled patients and a rare-disease centre with few, holding different columns and a few
patients in common, both seeing one shared disease process."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from vfl.datasets.clinical import (
    LAB_FEATURES,
    LABEL,
    draw_imaging_features,
    draw_lab_features,
    draw_signals,
)
from vfl.datasets.identities import draw_people

__all__ = ["TransferPair", "make_transfer_pair"]


class TransferPair(NamedTuple):
    """A source (general hospital) and a target (rare-disease centre); see
    :func:`make_transfer_pair`."""

    source: pd.DataFrame
    """``patient_id`` and the source's columns (the lab features), one row per source patient."""
    source_labels: pd.Series
    """The outcome (0/1) of every source row."""
    target: pd.DataFrame
    """``patient_id`` and the target's columns (the imaging features and the shared columns)."""
    target_labels: pd.Series
    """The outcome of the target's labelled rows only (a subset of its index)."""
    target_truth: pd.Series
    """Every target row's outcome: for evaluation, never for training."""
    overlap: pd.DataFrame
    """The patients in both: columns ``source`` and ``target`` (row labels), one row each."""
    shared_columns: list[str]
    """The columns both hold (lab tests the target measures too)."""


def make_transfer_pair(
    n_source: int = 3000,
    n_target: int = 1500,
    *,
    n_overlap: int = 200,
    target_labels: int = 50,
    feature_overlap: float = 0.3,
    random_state: int | np.random.Generator | None = None,
) -> TransferPair:
    """Simulate a source with many labelled patients and a target with few, for transfer.

    Both see one disease process: each patient has a latent disease severity ``z``, and the
    lab signal and the imaging signal of :func:`make_lab_imaging_cohort`'s model are each
    ``0.8 z`` plus independent noise (correlation 0.64 between them), so that a representation
    learnt from the source's lab tests carries over to the target's imaging. The outcome's
    log-odds are ``-0.8 + 2.2 z + 0.3 age``.

    Parameters
    ----------
    n_source, n_target : int
        Rows of each table (the patients in both counted in each).
    n_overlap : int
        Patients in both tables (their ``patient_id`` and features agree), at most the smaller
        table.
    target_labels : int
        Target rows whose outcome the target knows (label scarcity), at most ``n_target``;
        drawn at random with at least one of each class when 2 or more.
    feature_overlap : float
        Share of the 10 lab columns the target measures too (``shared_columns``, the first
        ``round(10 * feature_overlap)`` of :data:`LAB_FEATURES`): 0 gives disjoint columns.
    random_state : int, numpy.random.Generator or None
        Seed of the simulation.

    Returns
    -------
    TransferPair
        Source rows are labelled ``S000001``..., target rows ``T000001``..., in a shuffled
        order; ``patient_id`` is the exact ID of :func:`vfl.align`.
    """
    for name, value in (("n_source", n_source), ("n_target", n_target)):
        if not isinstance(value, (int, np.integer)) or value < 2:
            raise ValueError(f"{name} must be an integer >= 2, got {value!r}")
    if not isinstance(n_overlap, (int, np.integer)) or not 0 <= n_overlap <= min(
        n_source, n_target
    ):
        raise ValueError(
            f"n_overlap must be an integer between 0 and {min(n_source, n_target)}, got "
            f"{n_overlap!r}"
        )
    if not isinstance(target_labels, (int, np.integer)) or not 0 <= target_labels <= n_target:
        raise ValueError(
            f"target_labels must be an integer between 0 and n_target ({n_target}), got "
            f"{target_labels!r}"
        )
    if not 0.0 <= float(feature_overlap) <= 1.0:
        raise ValueError(f"feature_overlap must be between 0 and 1, got {feature_overlap!r}")
    rng = np.random.default_rng(random_state)
    n = int(n_source + n_target - n_overlap)
    people = draw_people(n, rng)
    severity = rng.standard_normal(n)
    signals = draw_signals(people, rng)
    signals["lab"] = 0.8 * severity + 0.6 * rng.standard_normal(n)
    signals["imaging"] = 0.8 * severity + 0.6 * rng.standard_normal(n)
    lab = draw_lab_features(people, signals, rng)
    imaging, _ = draw_imaging_features(people, signals, rng)
    logit = -0.8 + 2.2 * severity + 0.3 * signals["age"]
    outcome = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    shared = LAB_FEATURES[: round(len(LAB_FEATURES) * float(feature_overlap))]
    source_rows = np.arange(n_source)
    target_rows = np.arange(n_source - n_overlap, n)  # the last n_overlap source patients too
    ids = people["patient_id"].to_numpy()

    def table(rows: np.ndarray[Any, Any], parts: list[pd.DataFrame], prefix: str) -> Any:
        order = rng.permutation(len(rows))
        picked = rows[order]
        frame = pd.concat(
            [pd.DataFrame({"patient_id": ids[picked]})]
            + [p.iloc[picked].reset_index(drop=True) for p in parts],
            axis=1,
        )
        index = pd.Index([f"{prefix}{i + 1:06d}" for i in range(len(rows))], name="record_id")
        return frame.set_axis(index), picked

    source, source_people = table(source_rows, [lab], "S")
    target, target_people = table(target_rows, [lab[shared], imaging], "T")
    return transfer_tables(
        source, source_people, target, target_people, outcome, shared, int(target_labels), rng
    )


def transfer_tables(
    source: pd.DataFrame,
    source_people: np.ndarray[Any, Any],
    target: pd.DataFrame,
    target_people: np.ndarray[Any, Any],
    outcome: np.ndarray[Any, Any],
    shared: list[str],
    target_labels: int,
    rng: np.random.Generator,
) -> TransferPair:
    """The pair of tables, with the outcomes (``outcome[person]``), ``target_labels`` of the
    target's labelled at random and the rows of the people in both."""
    truth = pd.Series(outcome[target_people], index=target.index, name=LABEL)
    labelled = _labelled_rows(truth.to_numpy(), target_labels, rng)
    where = {person: label for label, person in zip(source.index, source_people, strict=True)}
    pairs = [
        (where[person], label)
        for label, person in zip(target.index, target_people, strict=True)
        if person in where
    ]
    overlap = pd.DataFrame(pairs, columns=["source", "target"]).sort_values(
        "source", ignore_index=True
    )
    return TransferPair(
        source=source,
        source_labels=pd.Series(outcome[source_people], index=source.index, name=LABEL),
        target=target,
        target_labels=truth.iloc[labelled],
        target_truth=truth,
        overlap=overlap,
        shared_columns=list(shared),
    )


def _labelled_rows(truth: np.ndarray[Any, Any], count: int, rng: np.random.Generator) -> Any:
    """``count`` positions drawn at random, with both classes among them when ``count >= 2``."""
    order = rng.permutation(len(truth))
    picked = list(order[:count])
    if count >= 2 and len(set(truth[picked])) < 2:
        other = next(i for i in order[count:] if truth[i] != truth[picked[0]])
        picked[-1] = other
    return np.sort(np.asarray(picked, dtype=np.int64))
