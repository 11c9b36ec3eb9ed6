"""Vertical linear regression under Paillier encryption.

Squared loss (:data:`~vfl.linear.losses.SQUARED`), whose gradient is exactly linear in the
score: no Taylor approximation, the encrypted run equals plaintext gradient descent on the
ridge objective ``|y - Xw|^2 / (2n) + alpha |w|^2 / 2`` to fixed-point rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin

from vfl.estimator import renamed_parameters
from vfl.linear.base import RENAMED, VerticalLinearModel, label_dp_of
from vfl.linear.losses import SCORE_BOUND, SQUARED
from vfl.linear.model import PartyModel
from vfl.validation import check_targets

__all__ = ["VerticalLinearRegression"]


class VerticalLinearRegression(RegressorMixin, VerticalLinearModel):  # type: ignore[misc]
    """Linear (ridge) regression on columns split across parties, trained under Paillier
    encryption with the same protocols, privacy statement and parameters as
    :class:`~vfl.linear.VerticalLogisticRegression` (see there), plus:

    Parameters
    ----------
    standardize_target : bool
        The label party centres and scales its targets with its own mean and deviation, and
        trains on them; predictions are mapped back at the label party (the passives' weights
        stay in standardised-target units, so they learn neither statistic). Default True.
    privacy : None
        Accepted for one surface with the other estimators; label DP
        (:class:`~vfl.privacy.options.GaussianLabelDP`) is refused here, as the targets are
        unbounded.

    The training loss (``loss_curve_``) is half the mean squared error, in standardised-target
    units when ``standardize_target``. ``alpha`` applies to the standardised problem; by
    default it is ``1 / (C * rows)`` with ``C=1``, the penalty of scikit-learn's
    ``Ridge(alpha=1)`` on the same rows (negligible beside ``LinearRegression`` on tables of
    more than a few hundred rows).
    """

    _loss = SQUARED

    @property
    def coef_(self) -> np.ndarray[Any, Any]:
        """As :attr:`VerticalLinearModel.coef_`, shaped ``(columns,)`` as scikit-learn's
        ``LinearRegression`` (in the units of the standardised features and target)."""
        out: np.ndarray[Any, Any] = super().coef_.ravel()
        return out

    @renamed_parameters(RENAMED, label_dp_of)
    def __init__(
        self,
        *,
        max_iter: int = 300,
        batch_size: int | None = None,
        tol: float | None = 1e-5,
        n_iter_no_change: int = 5,
        learning_rate: float | None = None,
        optimizer: str | None = None,
        alpha: float | None = None,
        C: float = 1.0,  # noqa: N803 (scikit-learn's name)
        clip_outliers: bool = True,
        protocol: str = "shared",
        key_bits: int = 2048,
        random_state: int | None = None,
        standardize: bool = True,
        standardize_target: bool = True,
        preprocess: Any = None,
        warm_start: bool = False,
        coordinator: str = "coordinator",
        workers: Any = None,
        timeout: float | None = None,
        insecure: bool = False,
        privacy: Any = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(
            max_iter=max_iter,
            batch_size=batch_size,
            tol=tol,
            n_iter_no_change=n_iter_no_change,
            learning_rate=learning_rate,
            optimizer=optimizer,
            alpha=alpha,
            C=C,
            clip_outliers=clip_outliers,
            protocol=protocol,
            key_bits=key_bits,
            random_state=random_state,
            standardize=standardize,
            preprocess=preprocess,
            warm_start=warm_start,
            coordinator=coordinator,
            workers=workers,
            timeout=timeout,
            insecure=insecure,
            privacy=privacy,
            verbose=verbose,
        )
        self.standardize_target = standardize_target

    def label_targets(
        self, y: Any, index: pd.Index, party: str, *, previous: PartyModel | None = None
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        values = check_targets(y, index, party)
        mean, scale = 0.0, 1.0
        if previous is not None:  # a warm start continues in the first fit's units
            mean, scale = previous.target_mean, previous.target_scale
        elif self.standardize_target:
            mean, scale = float(values.mean()), float(values.std())
            if scale == 0:
                raise ValueError(
                    f"targets of party {party!r} are constant ({mean:g}): there is nothing to "
                    "learn; check the label column"
                )
        targets = (values - mean) / scale
        peak = float(np.max(np.abs(targets)))
        if peak >= SCORE_BOUND:
            raise ValueError(
                f"targets of party {party!r} reach {peak:g} in training units, beyond "
                f"{SCORE_BOUND:g}: use standardize_target=True or rescale them"
            )
        return targets[:, None], {"target_mean": mean, "target_scale": scale}

    def predict(self, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
        """Predicted targets of the rows of ``parts`` (secure scoring; only the label party
        learns them)."""
        return self._from_scores(self._scores(parts))

    def _from_scores(self, scores: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Targets from scores ``(rows, 1)`` (the label party's part holds the scaling)."""
        part = self.parts_[self.label_party_]
        out: np.ndarray[Any, Any] = part.target_mean + part.target_scale * scores[:, 0]
        return out
