"""Pretraining a shared encoder where the labels are, by FedAvg over one or several sources:
the first half of encoder transfer (:mod:`transfer.encoder` fine-tunes a head on it at the
target).

:func:`pretrain_encoder` trains ``encoder -> Linear(dim, 2)`` with
:class:`~horizontal.FederatedClassifier` (with ``privacy=RecordDP(...)`` DP-SGD, its epsilon in
the ledger) and returns the encoder alone as a :class:`vfl.training.encoder.EncoderArtifact`,
the file a source ships to a target.

.. warning::
   The artefact carries the encoder's weights and the sources' column means and scales.
   Weights trained on records can leak them (membership inference, reconstruction of rare
   records); DP-SGD bounds that, and the artefact records the epsilon it was trained under.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vfl import persistence
from vfl.estimator import renamed_parameters
from vfl.extras import optional, require
from vfl.training.encoder import EncoderArtifact, build_encoder
from vfl.training.modules import seeded

if TYPE_CHECKING:
    from torch import nn
else:
    nn = optional("torch.nn", for_=__name__)

__all__ = ["pretrain_encoder"]

RENAMED = {"rounds": "max_iter", "hidden": "hidden_layer_sizes"}
"""The deprecated keywords of :func:`pretrain_encoder` and their replacements."""


def _translate(old: dict[str, Any]) -> dict[str, Any]:
    return {RENAMED[name]: value for name, value in old.items()}


@renamed_parameters(RENAMED, _translate, owner="pretrain_encoder")
def pretrain_encoder(
    sources: dict[str, tuple[pd.DataFrame, Any]],
    *,
    columns: list[str] | None = None,
    dim: int = 8,
    hidden_layer_sizes: tuple[int, ...] = (32,),
    max_iter: int = 30,
    local_epochs: int = 1,
    batch_size: int = 32,
    learning_rate: float = 0.05,
    privacy: Any = None,
    random_state: int | None = None,
    ledger: Any = None,
) -> EncoderArtifact:
    """Pretrain an encoder on ``sources`` (``{name: (frame, labels)}``: one source, or several
    federated by FedAvg) over ``columns`` (default: all, the same at every source).

    The network is ``encoder -> Linear(dim, 2)`` (binary labels) trained by
    :class:`~horizontal.FederatedClassifier` (one source: its local training, alone), with
    ``privacy`` (e.g. ``horizontal.RecordDP(noise_multiplier=1.0)``) as there; the artefact
    records the sources, their rows and the largest epsilon spent. With ``privacy`` the
    columns are not standardised (pooled statistics would escape the DP guarantee): pass them
    on a known scale, and the artefact's scaling is the identity.

    The parameters are named as the estimators' (:mod:`vfl.estimator`): ``max_iter`` the
    rounds, ``hidden_layer_sizes`` the encoder's hidden layers, ``random_state`` the
    initial weights' and batch orders' seed (None: drawn afresh). The old ``rounds=`` and
    ``hidden=`` still work, with a ``FutureWarning``; beside their replacements they are a
    ``TypeError``."""
    require("torch", for_="pretrain_encoder")
    from horizontal.estimator import FederatedClassifier

    if not isinstance(sources, dict) or not sources:
        raise ValueError("sources must be {name: (frame, labels)} with at least one source")
    first = next(iter(sources.values()))[0]
    chosen = [str(c) for c in (columns if columns is not None else first.columns)]
    data = {}
    for name, (frame, labels) in sources.items():
        missing = [c for c in chosen if c not in frame.columns]
        if missing:
            raise ValueError(f"source {name!r} lacks the encoder's columns {missing}")
        data[name] = (frame[chosen], labels)
    with seeded(random_state):
        network = nn.Sequential(
            build_encoder(len(chosen), dim, hidden_layer_sizes), nn.Linear(dim, 2)
        )
    private: dict[str, Any] = {}
    if privacy is not None:  # DP covers the updates, not pooled statistics: none are pooled
        labels = sorted({v for _, y in sources.values() for v in np.unique(np.asarray(y))})
        private = {"standardize": False, "classes": labels}
    model = FederatedClassifier(
        module=network,
        max_iter=max_iter,
        strategy="fedavg",  # local SGD at this step, the pretraining this was tuned with
        local_epochs=local_epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        privacy=privacy,
        random_state=random_state,
        **private,
    )
    model.fit(data, ledger=ledger)
    if len(model.classes_) != 2:
        raise ValueError(
            f"pretraining is binary here; the labels hold {len(model.classes_)} classes"
        )
    info: dict[str, Any] = {
        "sources": sorted(sources),
        "rows": int(sum(len(f) for f, _ in sources.values())),
    }
    if privacy is not None:
        info["epsilon"] = float(model.epsilon_ or 0.0)
        info["delta"] = float(getattr(privacy, "delta", 0.0))
    encoder = next(iter(model.module_.children()))
    return EncoderArtifact(
        columns=chosen,
        mean=np.asarray(model.mean_, float),
        scale=np.asarray(model.scale_, float),
        dim=dim,
        hidden=list(hidden_layer_sizes),
        state=persistence.state_dict_to_arrays(encoder.state_dict()),
        info=info,
    )
