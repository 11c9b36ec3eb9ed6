"""The ``privacy=`` objects of the vertical estimators, each class named after its mechanism.

Every vflink estimator asks for differential privacy one way: ``privacy=<object>``, whose
class says which mechanism runs and on what. The spend is recorded in the fitted estimator's
``privacy_ledger_`` (a :class:`~vfl.privacy.PrivacyLedger`).

============================================  ==============================================
estimator                                     ``privacy=``
============================================  ==============================================
:class:`~vfl.linear.VerticalLogisticRegression`  :class:`GaussianLabelDP`: Gaussian noise on the
                                              gradients the label party computes
:class:`~vfl.split.SplitNNClassifier`         :class:`RandomizedResponse` on the labels,
                                              :class:`~vfl.split.EmbeddingNoise` on the
                                              embeddings, or a tuple of both
:class:`~transfer.FederatedTransferClassifier`  :class:`RandomizedResponse` on the source's
                                              labels
:class:`~vfl.boost.SecureBoostClassifier`     :class:`GaussianGradientDP`: Gaussian noise on
                                              each row's gradients, or
                                              :class:`RandomizedResponse` on the labels
:class:`~horizontal.FederatedClassifier`,     :class:`~horizontal.ClientDP`,
:class:`~horizontal.FederatedRegressor`       :class:`~horizontal.LocalDP`,
                                              :class:`~horizontal.RecordDP` (DP-SGD)
:class:`~horizontal.FederatedLasso`           :class:`~horizontal.LassoDP`
============================================  ==============================================

(``label_epsilon=`` once meant Gaussian noise in the linear models and randomised response in
split learning and transfer: two mechanisms behind one name; it is deprecated.)
"""

from __future__ import annotations

from dataclasses import dataclass

from vfl.privacy.checks import check_positive_finite, check_probability

__all__ = ["GaussianGradientDP", "GaussianLabelDP", "RandomizedResponse"]


@dataclass(frozen=True)
class GaussianLabelDP:
    """Label DP by the Gaussian mechanism on gradients (vertical linear models under the
    gradient-revealing protocols, ``protocol="coordinator"`` or ``"two_party"``).

    The label party adds Gaussian noise, under encryption and fresh per batch, to every
    gradient share it computes for another party and to its own gradient, so that the whole
    training is ``(epsilon, delta)``-DP for each label; the noise multiplier is calibrated by
    dp-accounting over ``max_iter`` epochs times one release per data party.

    Parameters
    ----------
    epsilon : float
        The guarantee's epsilon over the whole fit, for changing one label.
    delta : float
        The guarantee's delta (default ``1e-5``).
    row_clip : float, optional
        Every party scales each of its standardised rows to at most this L2 norm (default:
        the square root of its column count), which bounds one label's effect.
    """

    epsilon: float
    delta: float = 1e-5
    row_clip: float | None = None

    def check(self) -> None:
        """A ValueError naming the field that is out of range."""
        check_positive_finite("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        if self.row_clip is not None:
            check_positive_finite("row_clip", self.row_clip, unit="an L2 norm")


@dataclass(frozen=True)
class RandomizedResponse:
    """Label DP by randomised response: the label party trains on labels kept with
    probability ``e^epsilon / (e^epsilon + K - 1)`` and otherwise replaced by another of the
    ``K`` classes drawn uniformly (OS randomness), before training: ``epsilon``-label-DP for
    everything computed from them (split learning, federated transfer learning).

    Parameters
    ----------
    epsilon : float
        The guarantee's epsilon, for changing one label.
    """

    epsilon: float

    def check(self) -> None:
        """A ValueError when ``epsilon`` is not a positive finite number."""
        check_positive_finite("epsilon", self.epsilon)


@dataclass(frozen=True)
class GaussianGradientDP:
    """Label DP by the Gaussian mechanism on each row's gradients, once per tree
    (:class:`~vfl.boost.SecureBoostClassifier`).

    The label party adds Gaussian noise (OS randomness) to every row's gradient before a tree
    is grown; everything after (the histograms, the splits, the node sets the hosts see, the
    leaf weights) is computed from the noisy gradients and the hessians, which do not depend
    on the row's own label given the trees before. Changing one label moves its row's
    gradient by at most 1 (binary; ``sqrt(2)`` with several classes), so the whole fit is
    ``(epsilon, delta)``-DP for each label; the noise multiplier is calibrated by
    dp-accounting over the trees. The fit starts from a score of 0 (not the labels' mean,
    which every label moves), and early stopping, which reads the held-out rows' labels, is
    refused beside it.

    Parameters
    ----------
    epsilon : float
        The guarantee's epsilon over the whole fit, for changing one label.
    delta : float
        The guarantee's delta (default ``1e-5``).
    """

    epsilon: float
    delta: float = 1e-5

    def check(self) -> None:
        """A ValueError naming the field that is out of range."""
        check_positive_finite("epsilon", self.epsilon)
        check_probability("delta", self.delta)
