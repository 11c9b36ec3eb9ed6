"""The centralised upper bound, each party alone, and vertical logistic regression.

The vertical schemes (and the split networks of :mod:`vfl.comparison.split`) train on the rows
the lab network and the imaging centre have in common, found by Bloom-filter linkage of their
identities (:func:`linked`, done once per comparison) and scored on the population's held-out
patients with both parties' columns.
"""

from __future__ import annotations

import secrets
import warnings
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vfl.comparison.base import Attack, Context, SchemeResult, timed
from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, identity_schema
from vfl.registry import scheme

__all__ = [
    "LINKED_PARTIES",
    "Linked",
    "alone",
    "linked",
    "linked_test",
    "plain_model",
    "rows_bytes",
]

LINKED_PARTIES = ("imaging", "lab")
"""The vertical parties: the imaging centre holds the diagnosis, the lab network does not."""


class Linked:
    """The vertical cut, linked: each party's rows of the common patients in the linkage's
    order, the imaging centre's labels, and what linkage cost and achieved."""

    def __init__(
        self,
        parts: dict[str, pd.DataFrame],
        labels: pd.Series,
        imaging: pd.DataFrame,
        quality: dict[str, float],
        seconds: float,
        bytes_per_party: dict[str, int],
    ) -> None:
        self.parts = parts
        self.labels = labels
        self.imaging = imaging
        """The imaging centre's whole table (every patient it holds), for it alone."""
        self.quality = quality
        self.seconds = seconds
        self.bytes_per_party = bytes_per_party
        self.lab_rows = 0
        """Rows of the lab network's whole table."""

    def add_to(self, result: SchemeResult) -> SchemeResult:
        """``result`` with the linkage's seconds and the encodings each party sent to the
        linkage unit added (a horizontal scheme needs no linkage: comparing without it would
        favour the vertical ones)."""
        result.seconds += self.seconds
        for party, sent in self.bytes_per_party.items():
            result.bytes_per_party = {
                **result.bytes_per_party,
                party: result.bytes_per_party.get(party, 0) + sent,
            }
        result.notes += (
            f"; linkage included ({self.seconds:.1f} s, "
            f"{sum(self.bytes_per_party.values()) / 1e6:.2f} MB of encodings)"
        )
        return result


def linked(ctx: Context) -> Linked:
    """The population's vertical cut (overlap 0.6, typo rate 0.2) linked by Bloom filters of
    the identities with a fresh shared secret, the linkage unit matching at its automatic
    threshold; computed once per comparison."""

    def make() -> Linked:
        import linkage

        lab, imaging, truth = ctx.population.vertical(overlap=0.6, typo_rate=0.2)
        with timed() as t:
            secret = secrets.token_bytes(32)
            schema = identity_schema()
            enc_lab = linkage.encode(lab, schema, secret=secret)
            enc_imaging = linkage.encode(imaging, schema, secret=secret)
            links = linkage.match(enc_lab, enc_imaging)
        parts = {
            "imaging": imaging.loc[links["b"], IMAGING_FEATURES].reset_index(drop=True),
            "lab": lab.loc[links["a"], LAB_FEATURES].reset_index(drop=True),
        }
        labels = imaging.loc[links["b"], LABEL].reset_index(drop=True).astype(int)
        sent = {"imaging": enc_imaging.words.nbytes, "lab": enc_lab.words.nbytes}
        cut = Linked(parts, labels, imaging, linkage.evaluate(links, truth), t[0], sent)
        cut.lab_rows = len(lab)
        return cut

    result: Linked = ctx.cached("vertical-linked", make)
    return result


def plain_model(kind: str, seed: int) -> Any:
    """The plaintext models of the centralised and alone rows: scikit-learn's logistic
    regression, or a small MLP (one hidden layer of 32), after standardising."""
    if kind == "lr":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    return make_pipeline(
        StandardScaler(),
        MLPClassifier(
            hidden_layer_sizes=(32,),
            alpha=1e-2,
            early_stopping=True,
            max_iter=500,
            random_state=seed,
        ),
    )


def rows_bytes(frame: pd.DataFrame) -> int:
    """What handing ``frame`` over costs, as float64 values."""
    return int(frame.shape[0] * frame.shape[1] * 8)


@scheme("centralised MLP", "centralised", kind="mlp")
@scheme("centralised LR", "centralised", kind="lr")
def centralised(ctx: Context, kind: str) -> SchemeResult:
    """Every training patient's columns and label pooled at one analyst: the upper bound."""
    x, y = ctx.population.pooled()
    x_test, y_test = ctx.test_set()
    with timed() as t:
        model = plain_model(kind, ctx.seed).fit(x, y)
        auc = float(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    held = linked(ctx)  # what handing the rows over would cost: the parties' own tables
    lab_rows, imaging_rows = held.lab_rows, len(held.imaging)
    return SchemeResult(
        "",
        "",
        auc=auc,
        learns="the analyst sees every party's rows, identities and labels",
        seconds=t[0],
        bytes_per_party={
            "lab": 8 * lab_rows * len(LAB_FEATURES),
            "imaging": 8 * imaging_rows * (len(IMAGING_FEATURES) + 1),
        },
        exposure=1.0,
        notes=(
            f"the upper bound: every one of the {len(x)} training patients with every column, "
            f"more than the parties hold (lab {lab_rows}, imaging {imaging_rows} patients); "
            "bytes: their own tables handed over"
        ),
    )


@scheme("imaging centre alone", "alone")
def imaging_alone(ctx: Context) -> SchemeResult:
    """The label holder on its own rows and columns; the lab network, without labels, cannot
    train alone."""
    cut = linked(ctx)
    return alone(
        ctx,
        cut.imaging[IMAGING_FEATURES],
        cut.imaging[LABEL],
        LINKED_PARTIES,
        f"{len(cut.imaging)} patients, imaging columns; the lab has no labels",
    )


def alone(
    ctx: Context, x: pd.DataFrame, y: pd.Series, parties: tuple[str, ...], notes: str
) -> SchemeResult:
    """A label holder's row on its own: :func:`plain_model`'s logistic regression on its
    rows ``x`` (whose columns it is scored with on the held-out patients) and labels ``y``;
    nothing is sent by any of ``parties``."""
    x_test, y_test = ctx.test_set([str(c) for c in x.columns])
    with timed() as t:
        model = plain_model("lr", ctx.seed).fit(x, y)
        auc = float(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    return SchemeResult(
        "",
        "",
        auc=auc,
        learns="nothing is shared",
        seconds=t[0],
        bytes_per_party=dict.fromkeys(parties, 0),
        exposure=0.0,
        notes=notes,
    )


LEARNS = {
    "shared": (
        "weights and gradients exist only as additive shares: each party learns its own "
        "share, the imaging centre the loss; Paillier for the cross products"
    ),
    "shared_coordinator": (
        "as secret-shared, with a key-holding coordinator: no party sees a gradient or weight"
    ),
    "coordinator": (
        "the coordinator (key holder) decrypts every party's exact gradient; the lab learns "
        "its own gradient, from which labels can be solved"
    ),
    "two_party": (
        "the lab decrypts its exact gradient (label-solvable); the imaging centre holds the key"
    ),
}


def _vertical_lr(ctx: Context, protocol: str, label_epsilon: float | None = None) -> SchemeResult:
    from vfl.audit import LabelDirectionAudit, LabelSolveAudit
    from vfl.crypto import SecurityWarning
    from vfl.linear import VerticalLogisticRegression
    from vfl.privacy import GaussianLabelDP

    cut = linked(ctx)
    s = ctx.settings
    x_test, y_test = linked_test(ctx)
    model = VerticalLogisticRegression(
        protocol=protocol,
        key_bits=s.key_bits,
        insecure=s.insecure,
        max_iter=s.vertical_epochs,
        batch_size=s.vertical_batch,
        tol=None,
        random_state=ctx.seed,
        privacy=None if label_epsilon is None else GaussianLabelDP(label_epsilon),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # demo keys in quick mode
        with timed() as t:
            model.fit(cut.parts, cut.labels, label_party="imaging", keep_views=True)
        proba = model.predict_proba(x_test)[:, 1]
    auc = float(roc_auc_score(y_test, proba))
    design = model.parts_["lab"].design(cut.parts["lab"])
    labels = cut.labels.to_numpy()
    solve = LabelSolveAudit().run(
        model.views_["lab"], design, labels, time_limit=s.audit_time_limit
    )
    direction = LabelDirectionAudit().run(model.views_["lab"], design, labels)
    attacks = tuple(
        Attack(r.audit, f"{r.target}, by the lab", r.success_rate, r.chance, "share of labels")
        for r in (solve, direction)
    )
    transcript = model.transcript_
    parties = sorted({r.sender for r in transcript.records})
    result = SchemeResult(
        "",
        "",
        auc=auc,
        learns=LEARNS[protocol] + ("; gradients under Gaussian label DP" if label_epsilon else ""),
        seconds=t[0],
        bytes_per_party={p: transcript.total_bytes(sender=p) for p in parties},
        attacks=attacks,
        ledger=getattr(model, "privacy_ledger_", None) if label_epsilon else None,
        notes=(
            f"{len(cut.labels)} linked rows (linkage precision {cut.quality['precision']:.3f}, "
            f"recall {cut.quality['recall']:.3f}), {s.key_bits}-bit keys, {s.vertical_epochs} "
            f"epochs"
        ),
        details={"model": model},
    )
    return cut.add_to(result)


for _protocol, _name in (
    ("shared", "vertical LR, secret-shared"),
    ("shared_coordinator", "vertical LR, secret-shared + coordinator"),
    ("coordinator", "vertical LR, coordinator"),
    ("two_party", "vertical LR, two-party"),
):
    scheme(_name, "vertical", protocol=_protocol)(_vertical_lr)
scheme(
    "vertical LR, coordinator + label DP", "vertical", protocol="coordinator", label_epsilon=2.0
)(_vertical_lr)


def linked_test(ctx: Context) -> tuple[dict[str, pd.DataFrame], np.ndarray[Any, Any]]:
    """The held-out patients as the two vertical parties hold them, and their labels."""
    x_test = {
        p: ctx.test_set(cols)[0].reset_index(drop=True)
        for p, cols in (("imaging", IMAGING_FEATURES), ("lab", LAB_FEATURES))
    }
    return x_test, ctx.test_set()[1].to_numpy()
