"""The lab network and the imaging centre: what is at stake, and a first protocol between them.

A walk through the federation runtime and the toolkit protocols are built from. It

1. simulates the two institutions' tables (:func:`vfl.datasets.make_lab_imaging_cohort`) and
   shows how the same patient's identity differs between them;
2. measures, centrally and in plaintext with the true pairs, the test AUC of the lab's features
   alone, the imaging centre's alone and both together -- the gain vertical federated learning
   is for;
3. runs a small protocol over the in-process federation, written once against
   :class:`vfl.federation.Federation`: a *federated data dictionary*, in which a coordinator
   collects from each data holder only per-column aggregates (count, mean, standard deviation,
   fraction missing; columns with fewer than ``MIN_CELL`` values suppressed), merges them and
   sends the dictionary back -- then audits the transcript to show that no row-level array
   crossed a party boundary;
4. computes one encrypted gradient step of vertical logistic regression with the Paillier
   engine: the lab obtains the gradient of its own weights from residuals it never sees, and
   the imaging centre decrypts only masked, packed values (:mod:`vfl.crypto.masked`, the one
   masked decryption every protocol uses; typed messages under the ``demo`` namespace). This
   step uses the true pairs; ``examples/lab_imaging.py`` is the full pipeline.

Run::

    python examples/cohort_federation.py [--n-patients 3000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vfl.crypto import generate_paillier_keypair
from vfl.crypto.masked import decrypt_masked, serve_decryption
from vfl.crypto.policy import KeyPolicy, PublicKeyMessage
from vfl.datasets import (
    IDENTITY_COLUMNS,
    IMAGING_FEATURES,
    LAB_FEATURES,
    LABEL,
    make_lab_imaging_cohort,
)
from vfl.federation import Federation, LocalFederation
from vfl.federation.messages import Namespace

MIN_CELL = 10
"""Aggregates over fewer values than this are suppressed (a common disclosure-control rule)."""
GRAD = Namespace("demo/grad")


# -- the protocol: each role's code, talking only through its Federation ----------------------


def data_holder(fed: Federation, frame: pd.DataFrame, columns: list[str]) -> dict[str, Any]:
    """A data holder: send per-column aggregates of its own columns, receive the dictionary."""
    summary: dict[str, Any] = {}
    for column in columns:
        values = frame[column].to_numpy(dtype=float)
        present = values[~np.isnan(values)]
        if len(present) < MIN_CELL:
            summary[column] = {"n": 0}
            continue
        summary[column] = {
            "n": len(present),
            "mean": float(present.mean()),
            "sd": float(present.std(ddof=1)),
            "missing": float(1 - len(present) / len(values)),
        }
    fed.send("coordinator", "dictionary/summary", {"rows": len(frame), "columns": summary})
    dictionary: dict[str, Any] = fed.recv("coordinator", "dictionary/merged")
    return dictionary


def coordinator(fed: Federation) -> dict[str, Any]:
    """The coordinator: merge every holder's aggregates into one data dictionary."""
    holders = list(fed.peers)
    replies = fed.gather(holders, "dictionary/summary")
    merged = {
        "rows": {party: reply["rows"] for party, reply in replies.items()},
        "columns": {
            column: {"party": party, **stats}
            for party, reply in replies.items()
            for column, stats in reply["columns"].items()
        },
    }
    fed.broadcast("dictionary/merged", merged)
    return merged


# -- a second protocol: the lab's gradient, computed without seeing the residuals -------------
#
# The imaging centre holds the labels and a Paillier key pair. It sends the lab the encrypted
# residuals [[d]] (here at w = 0: d = sigmoid(0) - y); the lab computes its gradient
# X_lab.T @ [[d]] / n under encryption, masks and packs it, and has the imaging centre decrypt
# only masked values, which the lab then unmasks. Neither sees the other's data in plaintext.


def active_party(fed: Federation, labels: np.ndarray) -> dict[str, Any]:
    public, private = generate_paillier_keypair()
    GRAD.send(fed, "lab", "key", PublicKeyMessage.of(public))
    residuals = 0.5 - labels.astype(float)
    fed.send("lab", GRAD.tag("residuals"), public.encrypt(residuals, workers=2).to_wire())
    serve_decryption(fed, "lab", GRAD, private)  # sees only masked, packed slots
    return {}


def passive_party(fed: Federation, features: np.ndarray) -> np.ndarray:
    public = KeyPolicy().accept(GRAD.recv(fed, "imaging", "key", PublicKeyMessage), "imaging")
    residuals = public.vector_from_wire(fed.recv("imaging", GRAD.tag("residuals")))
    gradient = (features.T @ residuals) / len(features)
    bound = float(np.abs(features).max(axis=0).max())  # |mean of x * d| <= max |x|, as |d| <= 1
    return np.asarray(decrypt_masked(fed, "imaging", GRAD, gradient, bound=bound))


def encrypted_gradient_step(lab_part: pd.DataFrame, imaging_part: pd.DataFrame) -> None:
    x_lab = lab_part.to_numpy()
    y = imaging_part[LABEL].to_numpy()
    local = LocalFederation(record_payloads=True)
    began = time.perf_counter()
    out = local.run(
        {
            "imaging": lambda fed: active_party(fed, y),
            "lab": lambda fed: passive_party(fed, x_lab),
        }
    )
    elapsed = time.perf_counter() - began
    expected = x_lab.T @ (0.5 - y) / len(y)
    error = float(np.abs(out["lab"] - expected).max())
    (request,) = [r for r in local.transcript.records if r.tag == GRAD.tag("req")]
    layout = request.payload()["layout"]
    decryptions = -(-layout["count"] // layout["slots"])
    print(
        f"lab's gradient over {len(y)} patients x {x_lab.shape[1]} features in {elapsed:.1f} s "
        f"(2048-bit key); max error against plaintext {error:.1e}; the imaging centre decrypted "
        f"{decryptions} packed ciphertexts for {x_lab.shape[1]} masked values"
    )
    print(
        local.transcript.to_frame()[["sender", "receiver", "tag", "kind", "nbytes"]].to_string(
            index=False
        )
    )
    seen = [_leaves(r.payload()) for r in local.transcript.records]
    leaked = [
        name
        for name, secret in (("labels", y), ("residuals", 0.5 - y), ("lab gradient", expected))
        if any(
            np.isclose(v, secret, atol=1e-6).any()
            for leaves in seen
            for v in leaves
            if isinstance(v, float)
        )
    ]
    print(
        f"audit: plaintext labels, residuals or gradient values in any message: {leaked or 'none'}"
    )


# -- the walk-through --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-patients", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pd.set_option("display.width", 120)
    started = time.perf_counter()

    lab, imaging, pairs = make_lab_imaging_cohort(
        args.n_patients, overlap=0.7, typo_rate=0.25, random_state=args.seed
    )
    print("== 1. Two institutions, partly the same patients")
    print(f"lab network:    {len(lab):5d} patients x {len(LAB_FEATURES)} lab features")
    print(
        f"imaging centre: {len(imaging):5d} patients x {len(IMAGING_FEATURES)} imaging features"
        f" + '{LABEL}' (prevalence {imaging[LABEL].mean():.0%})"
    )
    print(f"in both:        {len(pairs):5d} patients (unknown to either side until linkage)")
    a = lab.loc[pairs["lab"], IDENTITY_COLUMNS[1:]].reset_index()
    b = imaging.loc[pairs["imaging"], IDENTITY_COLUMNS[1:]].reset_index()
    differs = (
        a.drop(columns="record_id").astype(object).fillna("<NA>")
        != b.drop(columns="record_id").astype(object).fillna("<NA>")
    ).any(axis=1)
    print(f"\nthe same patient, written differently ({differs.mean():.0%} of common patients):")
    shown = np.flatnonzero(differs.to_numpy())[:4]
    print(
        pd.concat([a.iloc[shown], b.iloc[shown]]).sort_index(kind="stable").to_string(index=False)
    )

    print("\n== 2. What is at stake (centralised plaintext upper bound, true pairs)")
    x_lab = lab.loc[pairs["lab"], LAB_FEATURES].to_numpy()
    x_img = imaging.loc[pairs["imaging"], IMAGING_FEATURES].to_numpy()
    y = imaging.loc[pairs["imaging"], LABEL].to_numpy()
    train, test = train_test_split(
        np.arange(len(y)), test_size=0.3, random_state=args.seed, stratify=y
    )
    for name, x in (
        ("lab alone", x_lab),
        ("imaging alone", x_img),
        ("both", np.hstack([x_lab, x_img])),
    ):
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(
            x[train], y[train]
        )
        auc = roc_auc_score(y[test], model.predict_proba(x[test])[:, 1])
        print(f"  test AUC, {name:<14} {auc:.3f}")

    print("\n== 3. A first protocol on the in-process federation: a federated data dictionary")
    local = LocalFederation(record_payloads=True)
    results = local.run(
        {
            "coordinator": coordinator,
            "lab": lambda fed: data_holder(fed, lab, LAB_FEATURES),
            "imaging": lambda fed: data_holder(fed, imaging, IMAGING_FEATURES),
        }
    )
    dictionary = pd.DataFrame(results["coordinator"]["columns"]).T
    print(
        dictionary[["party", "n", "mean", "sd", "missing"]].to_string(
            float_format=lambda v: f"{v:.2f}"
        )
    )
    assert results["lab"] == results["imaging"] == results["coordinator"]

    print("\ntranscript (every message that crossed a party boundary):")
    print(
        local.transcript.to_frame()[["sender", "receiver", "tag", "kind", "nbytes"]].to_string(
            index=False
        )
    )
    identities = {str(v) for frame in (lab, imaging) for v in frame[IDENTITY_COLUMNS].stack()}
    strings, numbers = set(), 0
    for record in local.transcript.records:
        leaves = list(_leaves(record.payload()))
        strings |= {leaf for leaf in leaves if isinstance(leaf, str)}
        numbers = max(numbers, sum(not isinstance(leaf, str) for leaf in leaves))
    print(
        f"audit of every decoded payload: {len(strings & identities)} identity values; at most "
        f"{numbers} numbers in one message (the raw tables hold {lab[LAB_FEATURES].size} and "
        f"{imaging[IMAGING_FEATURES].size})"
    )
    print("\n== 4. One encrypted gradient step (Paillier), on the true pairs")
    encrypted_gradient_step(lab.loc[pairs["lab"], LAB_FEATURES], imaging.loc[pairs["imaging"]])
    print(f"\ndone in {time.perf_counter() - started:.1f} s")


def _leaves(payload: Any) -> Any:
    """Every scalar in a payload (array elements included)."""
    if isinstance(payload, np.ndarray):
        yield from payload.ravel().tolist()
    elif isinstance(payload, dict):
        for key, value in payload.items():
            yield key
            yield from _leaves(value)
    elif isinstance(payload, list):
        for value in payload:
            yield from _leaves(value)
    else:
        yield payload


if __name__ == "__main__":
    main()
