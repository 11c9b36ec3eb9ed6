"""The warning a fit gives when its loss diverged (:class:`~vfl.training.LossCurve`).

Apart from :mod:`vfl.training.convergence` because it subclasses scikit-learn's
``ConvergenceWarning``, and :mod:`vfl.training` stays free of scikit-learn.
"""

from __future__ import annotations

from sklearn.exceptions import ConvergenceWarning

__all__ = ["DivergenceWarning"]


class DivergenceWarning(ConvergenceWarning):  # type: ignore[misc]
    """The training loss rose or became non-finite, and training resumed from the best epoch
    with a smaller step (or gave up after ``LossCurve.max_restarts`` tries). A subclass of
    scikit-learn's ``ConvergenceWarning``, so filters for that one catch it too."""
