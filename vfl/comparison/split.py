"""Split neural networks, without and with each defence of :mod:`vfl.split`.

Every row trains a :class:`vfl.SplitNNClassifier` on the linked vertical rows
(:func:`vfl.comparison.vertical.linked`), the imaging centre holding the diagnosis (the label
party, with a bottom of its own on its columns) and the lab network a bottom on its columns,
with one set of hyperparameters (:data:`SPLIT_OPTIONS`), and scores it on the held-out
patients (:func:`vfl.comparison.vertical.linked_test`). Each row then runs the attacks of
:mod:`vfl.audit.split` against its own run:

* the lab's label leakage from the gradients it received in the first epoch (the norm and the
  direction attack; attacker AUC, 0.5 is chance);
* the imaging centre's inversion of what it received of the lab's rows (the embeddings, after
  the lab's noise; with the protected layer, the layer's output), with a decoder fitted on a
  fifth of the rows whose lab features it is assumed to know: the share of the lab features'
  variance recovered on the others (0 is chance: predicting the mean).

The protected (encrypted) layer costs about a second per batch of 64 rows with 1024-bit keys
and four times that with 2048-bit keys on two cores: it trains on a subset of the linked rows
for fewer epochs (:func:`protected_budget`; the row's notes say how many), and is scored and
inverted in the clear from both shares of the layer (the same function the encrypted scoring
computes, up to fixed-point rounding; the audit's god's view).
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from vfl.comparison.base import Attack, Context, SchemeResult, Settings, timed
from vfl.comparison.vertical import linked, linked_test
from vfl.extras import optional
from vfl.registry import scheme

if TYPE_CHECKING:
    import torch
else:
    torch = optional("torch", for_=__name__)

__all__ = ["LEARNS", "SPLIT_OPTIONS", "protected_budget"]

logger = logging.getLogger("vflink.compare")

SPLIT_OPTIONS: dict[str, Any] = {
    "embedding_dim": 16,
    "hidden_layer_sizes": (32,),
    "batch_size": 64,
    "learning_rate": 0.01,
    "n_iter_no_change": 10,
    "validation_fraction": 0.1,
}
"""Every split row's network: each bottom ``Linear(columns, 16) -> ReLU``, the top an MLP with
one hidden layer of 32 (the protected layer *is* that layer), Adam at 0.01, batches of 64,
early stopping on a tenth of the rows with a patience of 10 (keeping the best epoch)."""

LABEL_EPSILON = 2.0
"""Randomised response on the imaging centre's labels."""

NOISE_MULTIPLIER, NOISE_CLIP = 1.0, 1.0
"""The lab's embedding noise: each embedding clipped to norm 1, ``N(0, 2^2)`` added to each
coordinate (the imaging centre's own columns keep most of the AUC; the epsilon, over every
epoch trained, is large)."""

LAB, IMAGING = "lab", "imaging"

LEARNS = {
    "none": (
        "the lab learns the gradients with respect to its embeddings (labels can leak from "
        "them), the imaging centre every lab embedding of every row (features can be "
        "reconstructed); neither sees the other's raw features, labels or modules"
    ),
    "norm": (
        "as without a defence, but the imaging centre noises the gradients it returns so "
        "that each has, in expectation, the batch's largest norm (a heuristic against the norm "
        "attack: no epsilon)"
    ),
    "label_dp": (
        f"as without a defence, but the imaging centre trains on labels under randomised "
        f"response (epsilon {LABEL_EPSILON:g}-label-DP for everything computed from them, the "
        f"lab's gradients included)"
    ),
    "embedding_noise": (
        "as without a defence, but the lab clips each embedding and adds Gaussian noise before "
        "sending it (DP for its features during training; scoring sends exact embeddings)"
    ),
    "protected": (
        "the imaging centre sees the protected layer's output z = h W (encrypted embeddings, "
        "W additively shared), never the lab's embedding h or W; the lab still learns the "
        "gradients with respect to its embeddings"
    ),
}
"""What each party learns, per defence (from :mod:`vfl.split.protocol`,
:mod:`vfl.split.defences` and :mod:`vfl.split.interactive`)."""


def protected_budget(settings: Settings) -> tuple[int, int]:
    """``(rows, epochs)`` of the protected layer's run: 2 epochs (or ``split_epochs`` if
    fewer) on 640 linked rows with ``settings.protected_layer`` (the full comparison: about
    30 s with 2048-bit keys on two cores), on 256 rows otherwise (quick: a few seconds with
    1024-bit keys)."""
    return (640 if settings.protected_layer else 256), min(2, settings.split_epochs)


def _defence(ctx: Context, defence: str) -> tuple[dict[str, Any], str]:
    """The estimator's extra parameters for ``defence``, and what the notes add."""
    if defence == "none":
        return {}, ""
    if defence == "norm":
        return {"gradient_protection": "norm"}, ""
    if defence == "label_dp":
        from vfl.privacy import RandomizedResponse

        response = RandomizedResponse(LABEL_EPSILON)
        return {"privacy": response}, f"randomised response at epsilon {LABEL_EPSILON:g}"
    if defence == "embedding_noise":
        from vfl.split import EmbeddingNoise

        noise = EmbeddingNoise(noise_multiplier=NOISE_MULTIPLIER, clip=NOISE_CLIP)
        return {"privacy": noise}, (
            f"lab embeddings clipped to {NOISE_CLIP:g}, noise multiplier {NOISE_MULTIPLIER:g}"
        )
    if defence == "protected":
        from vfl.split import ProtectedLayer

        s = ctx.settings
        layer = ProtectedLayer(key_bits=s.key_bits, insecure=s.insecure)
        return {"protocol": layer}, f"{s.key_bits}-bit keys"
    raise ValueError(f"unknown split defence {defence!r}")


def _proba_in_the_clear(model: Any, parts: dict[str, pd.DataFrame]) -> np.ndarray[Any, Any]:
    """The protected model's positive-class probability on ``parts``, computed in the clear
    from both shares of the layer (what encrypted scoring computes, up to fixed point)."""
    from scipy.special import softmax

    from vfl.audit.split import seen_embeddings

    remote, _ = seen_embeddings(model, LAB, parts[LAB])
    own = model._design(IMAGING, parts[IMAGING])
    with torch.no_grad():
        own_h = model.modules_[IMAGING](torch.as_tensor(own, dtype=torch.float32))
        model.top_.eval()
        out = model.top_(torch.as_tensor(remote, dtype=torch.float32), own_h).numpy()
    proba: np.ndarray[Any, Any] = softmax(out, axis=1)[:, 1]
    return proba


def _split_nn(ctx: Context, defence: str) -> SchemeResult:
    from vfl.audit.split import inversion_error, label_leakage, seen_embeddings
    from vfl.crypto import SecurityWarning
    from vfl.split import SplitNNClassifier

    cut = linked(ctx)
    s = ctx.settings
    x_test, y_test = linked_test(ctx)
    extra, note = _defence(ctx, defence)
    parts, labels = cut.parts, cut.labels
    epochs = s.split_epochs
    protected = defence == "protected"
    if protected:
        rows, epochs = protected_budget(s)
        if rows < len(labels):
            pick = np.sort(np.random.default_rng(ctx.seed).choice(len(labels), rows, replace=False))
            parts = {p: f.iloc[pick].reset_index(drop=True) for p, f in parts.items()}
            labels = labels.iloc[pick].reset_index(drop=True)
    model = SplitNNClassifier(**SPLIT_OPTIONS, **extra, max_iter=epochs, random_state=ctx.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # demo keys in quick mode
        with timed() as t:
            model.fit(parts, labels, label_party=IMAGING, keep_views=True)
        if protected:
            proba = _proba_in_the_clear(model, x_test)
        else:
            proba = model.predict_proba(x_test)[:, 1]
    auc = float(roc_auc_score(y_test, proba))
    logger.info("%s split NN: test AUC %.3f in %.1f s", defence, auc, t[0])

    positive = labels.to_numpy()
    norm_auc, direction_auc = label_leakage(model, LAB, positive, len(positive))
    # the inversion runs on every linked row (the protected layer's too, as if it had
    # trained on them all): the same rows and auxiliary share for every defence
    seen, design = seen_embeddings(model, LAB, cut.parts[LAB])
    error = inversion_error(seen, design, random_state=ctx.seed)
    by_lab, by_imaging = "labels, by the lab", "lab features, by the imaging centre"
    attacks = (
        Attack("split-label-norm", by_lab, norm_auc, 0.5, "attacker AUC"),
        Attack("split-label-direction", by_lab, direction_auc, 0.5, "attacker AUC"),
        Attack(
            "split-inversion",
            by_imaging,
            max(0.0, 1.0 - error),  # the attacker can always predict the mean instead
            0.0,
            "share of variance recovered",
        ),
    )
    transcript = model.transcript_
    notes = [f"{len(labels)} linked rows", f"{epochs} epochs (kept epoch {model.best_epoch_})"]
    if protected:
        notes[0] += f" (a random subset of the {len(cut.labels)}, for time)"
        notes.append("scored and inverted in the clear from both shares of the layer")
    if note:
        notes.append(note)
    ledger = getattr(model, "privacy_ledger_", None)
    result = SchemeResult(
        "",
        "",
        auc=auc,
        learns=LEARNS[defence],
        seconds=t[0],
        bytes_per_party={p: transcript.total_bytes(sender=p) for p in (IMAGING, LAB)},
        attacks=attacks,
        ledger=ledger if ledger is not None and ledger.holders() else None,
        notes="; ".join(notes),
        details={"model": model, "inversion_error": error},
    )
    return cut.add_to(result)


for _defence_name, _name in (
    ("none", "split NN, no defence"),
    ("norm", "split NN, norm matching"),
    ("label_dp", "split NN, label DP"),
    ("embedding_noise", "split NN, embedding noise"),
    ("protected", "split NN, protected layer"),
):
    scheme(_name, "split", defence=_defence_name)(_split_nn)
