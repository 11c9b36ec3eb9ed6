"""SecureBoost against a label party that deviates: the gradients are its own input and travel
encrypted, so the hosts cannot check them. A label party that sends a one-hot "gradient" (1
for one row, 0 elsewhere) reads, in the root's histograms, that row's bin in every host
column: a named leak (docs/deviation.md), one row per tree. Closing it takes proofs that the
gradients are in range and sum as the labels imply, or noise the hosts add to what they
return."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from vfl.boost import protocol
from vfl.boost.bins import BinMapper
from vfl.boost.estimator import SecureBoostClassifier
from vfl.boost.objectives import Logistic

ROW = 7


class OneHot(Logistic):
    def gradients(self, raw: Any, y: Any) -> tuple[Any, Any]:
        g, h = super().gradients(raw, y)
        chosen = np.zeros_like(g)
        chosen[ROW] = 1.0
        return chosen, np.ones_like(h)


def test_a_label_party_with_chosen_gradients_reads_a_hosts_bins_of_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x, y = x.iloc[:200], y.iloc[:200]
    parts = {"imaging": x.iloc[:, 12:], "lab": x.iloc[:, :12]}
    monkeypatch.setattr(
        SecureBoostClassifier, "_objective", lambda self, v, p: (self._classes(v), OneHot())[::-1]
    )
    seen: list[Any] = []
    honest = protocol.RemoteSource._histograms

    def spy(self: Any, nodes: Any, outputs: int) -> Any:
        out = honest(self, nodes, outputs)
        if out:
            seen.append(out[0][0])  # G of the first node asked for
        return out

    monkeypatch.setattr(protocol.RemoteSource, "_histograms", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SecureBoostClassifier(n_estimators=1, max_depth=1, key_bits=1024, insecure=True).fit(
            parts, y, label_party="imaging"
        )
    root = seen[0][:, :, 0]  # (columns, bins): 1 where the row falls, 0 elsewhere
    read = root.argmax(axis=1)
    truth = BinMapper(32, party="lab").fit_transform(parts["lab"])[ROW]
    np.testing.assert_array_equal(read, truth)  # every column's bin of the row
    assert np.allclose(root.sum(axis=1), 2.0**24)  # one row, its gradient 1 in fixed point
