"""What a split network's options mean: ``protocol=`` and ``privacy=`` resolved to the
protected layer and the defences they name, the deprecated keywords translated, and the seed
every party of a fit agrees on before it builds its modules.

Pure of training: :mod:`vfl.split.estimator` reads its options through these functions and
runs each party's fit as a :class:`SeededRole`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.privacy.options import RandomizedResponse
from vfl.split.defences import EmbeddingNoise
from vfl.split.interactive import ProtectedLayer

if TYPE_CHECKING:
    from vfl.federation.base import Federation
    from vfl.split.estimator import _SplitNN
    from vfl.split.protocol import SplitResult, SplitSpec

__all__ = [
    "PROTOCOLS",
    "RENAMED",
    "SEED_TAG",
    "SeededRole",
    "defences_of",
    "epoch_history",
    "module_seed",
    "protected_layer_of",
    "protected_width",
    "translate_renamed",
]

PROTOCOLS = ("plain", "protected")
"""``protocol=``: ``"plain"`` (default) sends embeddings and gradients in the clear;
``"protected"`` runs the top's first layer on encrypted embeddings with secret-shared weights
(:class:`~vfl.split.interactive.ProtectedLayer` with its defaults; pass a ProtectedLayer for
its options)."""

RENAMED = {
    "label_epsilon": "privacy=RandomizedResponse(epsilon)",
    "embedding_noise": "privacy=EmbeddingNoise(...)",
    "protected_layer": 'protocol="protected" or protocol=ProtectedLayer(...)',
}
"""The deprecated keywords of the split estimators and their replacements."""

SEED_TAG = "split/seed"
"""The tag of the seed agreement that starts every fit."""


def translate_renamed(old: dict[str, Any]) -> dict[str, Any]:
    """The current parameters that the deprecated keywords ``old`` spelled."""
    new: dict[str, Any] = {}
    if "protected_layer" in old:
        layer = old["protected_layer"]
        new["protocol"] = "plain" if layer is None else layer
    label = old.get("label_epsilon")
    response = None if label is None else RandomizedResponse(label)
    chosen = tuple(d for d in (response, old.get("embedding_noise")) if d is not None)
    if chosen:
        new["privacy"] = chosen[0] if len(chosen) == 1 else chosen
    return new


def protected_layer_of(protocol: Any) -> ProtectedLayer | None:
    """The :class:`~vfl.split.interactive.ProtectedLayer` that ``protocol`` names (None under
    ``"plain"``), checked against :data:`PROTOCOLS`."""
    if isinstance(protocol, ProtectedLayer):
        return protocol
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"protocol must be one of {PROTOCOLS} or a ProtectedLayer(...), got {protocol!r}"
        )
    return ProtectedLayer() if protocol == "protected" else None


def protected_width(
    layer: ProtectedLayer | None,
    aggregation: str,
    compression: Any,
    top: Any,
    hidden_layer_sizes: tuple[int, ...],
) -> int:
    """The protected ``layer``'s outputs (0 without one), checked against the estimator's
    other options."""
    if layer is None:
        return 0
    layer.check()
    if aggregation != "concat":
        raise ValueError('protocol="protected" needs aggregation="concat" (one block per party)')
    if compression is not None:
        raise ValueError(
            'compression applies to plaintext embeddings; with protocol="protected" they '
            "travel encrypted: drop one of the two"
        )
    if layer.width is not None:
        return layer.width
    if top is not None or not hidden_layer_sizes:
        raise ValueError(
            "ProtectedLayer(width=...) is needed with a top module of your own (it then "
            "takes width inputs) or without hidden layers"
        )
    return int(hidden_layer_sizes[0])


def epoch_history(result: SplitResult) -> list[dict[str, Any]]:
    """``history_``: one record per epoch at the label party (``epoch``, ``loss`` -- the
    validation loss with early stopping on held-out rows, else the training loss --,
    ``seconds``); none elsewhere."""
    return [
        {"epoch": i + 1, "loss": loss, "seconds": seconds}
        for i, (loss, seconds) in enumerate(
            zip(result.loss_curve, result.epoch_seconds, strict=False)
        )
    ]


def defences_of(privacy: Any, task: str) -> tuple[RandomizedResponse | None, EmbeddingNoise | None]:
    """``privacy`` as ``(randomised response on the labels, noise on the embeddings)``, each
    checked (randomised response only for a classification ``task``)."""
    items = [] if privacy is None else list(privacy) if isinstance(privacy, tuple) else [privacy]
    labels = [d for d in items if isinstance(d, RandomizedResponse)]
    noise = [d for d in items if isinstance(d, EmbeddingNoise)]
    if len(labels) + len(noise) != len(items) or len(labels) > 1 or len(noise) > 1:
        raise ValueError(
            "privacy must be None, RandomizedResponse(epsilon) (on the labels), "
            "EmbeddingNoise(noise_multiplier, clip) (on the embeddings), or a tuple of "
            f"one of each; got {privacy!r}"
        )
    for response in labels:
        response.check()
    for noisy in noise:
        noisy.check()
    if labels and task != "classification":
        raise ValueError(
            "privacy=RandomizedResponse(...) randomises class labels: it is for SplitNNClassifier"
        )
    return (labels[0] if labels else None), (noise[0] if noise else None)


def module_seed(random_state: int | None, kind: int, position: int) -> int:
    """A torch seed for one module (``kind`` 1 a bottom, 2 the top; ``position`` the data
    party's), from the agreed ``random_state`` (None: 0, for modules whose weights are
    loaded)."""
    seeds = [0 if random_state is None else random_state, kind, position]
    return int(np.random.SeedSequence(seeds).generate_state(1)[0])


class SeededRole:
    """A party's role in a fit: the parties first agree on a seed
    (:func:`~vfl.training.schedule.agree_seed`) -- every party's ``random_state``, which is
    then compared, so a party with another one (or none) fails at once naming the party; or,
    where every party passes None, one from 16 bytes of each party's OS randomness -- then
    the party builds its modules and draws its batches from it, as every other does. The
    result carries the agreed seed (``random_state``)."""

    def __init__(
        self,
        estimator: _SplitNN,
        spec: SplitSpec,
        party: str,
        x: np.ndarray[Any, Any] | None,
        targets: np.ndarray[Any, Any] | None,
        outputs: int,
    ) -> None:
        self.estimator, self.spec, self.party = estimator, spec, party
        self.x, self.targets, self.outputs = x, targets, outputs

    def __call__(self, fed: Federation) -> SplitResult:
        from vfl.training.schedule import agree_seed

        spec = self.spec
        parties = list(dict.fromkeys([*spec.data_parties, spec.label_party]))
        seed = agree_seed(fed, parties, SEED_TAG, self.estimator.random_state)
        agreed = replace(spec, random_state=seed)
        module = None
        if self.x is not None:
            position = spec.data_parties.index(self.party)
            module = self.estimator.build_bottom(self.party, position, self.x.shape[1], seed)
        role = self.estimator._built_role(
            agreed, self.party, module, self.x, self.targets, self.outputs
        )
        result: SplitResult = role(fed)
        return replace(result, random_state=seed)
