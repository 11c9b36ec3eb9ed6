"""Vertical Poisson regression: encrypted equals its plaintext twin, close to scikit-learn's
PoissonRegressor on a dvisits-like count table (with and without exposure), what each role
sees (the transcript carries no plaintext; each party's decrypted view is its own exact
gradient), deviating parties refused by name, bad input, deployment and persistence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import d2_tweedie_score
from sklearn.preprocessing import StandardScaler

from tests.vfl.linear.tables import hetero, small_model
from vfl.audit import find_plaintext
from vfl.crypto import EncryptedVector, SecurityWarning, generate_paillier_keypair
from vfl.crypto.kernels import multiexp_rows
from vfl.crypto.masked import decrypt_masked, pack_masked
from vfl.federation import LocalFederation, PartyFailedError
from vfl.federation.wire import CiphertextBlock
from vfl.linear import VerticalPoissonRegression
from vfl.linear.model import FEATURE_BITS
from vfl.linear.poisson_data import make_count_table
from vfl.linear.poisson_math import (
    EXP_BITS,
    GRADIENT_EXPONENT,
    LABEL_BITS,
    PIECE_EXPONENT,
    RESIDUAL_EXPONENT,
    SCORE_BITS,
    SCORE_LIMIT,
    check_partial_scores,
    gradient_bound,
    masked_layout,
)
from vfl.linear.poisson_protocol import VPR, PoissonCoordinatorRole, PoissonDataRole
from vfl.linear.poisson_reference import poisson_reference
from vfl.training.divergence import DivergenceWarning

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")

LABEL, PASSIVE = "insurer", "clinic"


def small(**params: Any) -> VerticalPoissonRegression:
    base: dict[str, Any] = {"batch_size": 128, "max_iter": 2, "tol": None}
    base.update(params)
    return small_model(VerticalPoissonRegression, **base)


@pytest.fixture(scope="module")
def table() -> Any:
    """600 rows of the dvisits-like table, with the exposure as the insurer's column."""
    t = make_count_table(600, exposure=True, random_state=3)
    insurer = t.parts[LABEL].assign(periods=t.exposure)
    return {LABEL: insurer, PASSIVE: t.parts[PASSIVE]}, t.y


def sklearn_fit(
    parts: dict[str, pd.DataFrame], y: pd.Series, alpha: float, exposure: Any = None
) -> tuple[np.ndarray[Any, Any], float, float]:
    """scikit-learn's PoissonRegressor on the standardised joined columns: coefficients,
    intercept and training D^2 (of the rates, weighted by the exposure, when there is one)."""
    x = StandardScaler().fit_transform(pd.concat(parts.values(), axis=1))
    e = np.ones(len(y)) if exposure is None else np.asarray(exposure, dtype=float)
    rates = y.to_numpy() / e
    sk = PoissonRegressor(alpha=alpha * len(y) / e.sum(), max_iter=1000, tol=1e-10)
    sk.fit(x, rates, sample_weight=e)
    return sk.coef_, float(sk.intercept_), float(sk.score(x, rates, sample_weight=e))


@pytest.mark.parametrize("exposure", [None, "periods"])
def test_encrypted_training_equals_the_plaintext_twin(table, exposure: str | None) -> None:  # type: ignore[no-untyped-def]
    parts, y = table
    if exposure is None:
        parts = {LABEL: parts[LABEL].drop(columns=["periods"]), PASSIVE: parts[PASSIVE]}
    est = small(max_iter=3).fit(parts, y, label_party=LABEL, exposure=exposure)
    weights, curve = poisson_reference(est, parts, y, label_party=LABEL, exposure=exposure)
    np.testing.assert_allclose(est.parts_[PASSIVE].coef, weights[PASSIVE], atol=1e-9)
    np.testing.assert_allclose(est.parts_[LABEL].coef, weights[LABEL][:-1], atol=1e-9)
    assert est.intercept_ == pytest.approx(weights[LABEL][-1], abs=1e-9)
    np.testing.assert_allclose(est.loss_curve_, curve, rtol=1e-9)
    assert list(est.feature_names_in_[:2]) == ["insurer:sex", "insurer:age"]
    assert "insurer:periods" not in set(est.feature_names_in_)  # the exposure is no feature
    assert est.coef_.shape == (len(est.feature_names_in_),)
    assert len(est.epoch_seconds_) == 3 and est.n_iter_ == 3


def test_a_diverging_run_restarts_from_the_best_epoch_as_its_twin(table) -> None:  # type: ignore[no-untyped-def]
    parts, y = table
    est = small(learning_rate=1.0, max_iter=3)
    with pytest.warns(DivergenceWarning, match=r"rose after epoch\(s\) \[\d"):
        est.fit(parts, y, label_party=LABEL, exposure="periods")
    weights, curve = poisson_reference(est, parts, y, label_party=LABEL, exposure="periods")
    np.testing.assert_allclose(est.loss_curve_, curve, rtol=1e-9)
    np.testing.assert_allclose(est.parts_[PASSIVE].coef, weights[PASSIVE], atol=1e-9)
    assert est.intercept_ == pytest.approx(weights[LABEL][-1], abs=1e-9)
    assert est.restarts_ and all(est.history_[e - 1]["restart"] for e in est.restarts_)
    assert est.best_epoch_ not in est.restarts_  # a diverged epoch is never kept


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_twin_matches_scikit_learn_on_a_dvisits_like_table(seed: int) -> None:
    """The protocol's arithmetic (its plaintext twin, equal to it above) against
    PoissonRegressor at the same penalty, on the full 5,190-row table, with and without
    exposure: coefficients, intercept and D^2 within 0.01."""
    for exposure in (False, True):
        t = make_count_table(exposure=exposure, random_state=seed)
        est = small(random_state=seed, max_iter=100, tol=1e-5, batch_size=256)
        weights, curve = poisson_reference(
            est, t.parts, t.y, label_party=LABEL, exposure=t.exposure
        )
        coef, intercept, d2 = sklearn_fit(t.parts, t.y, 1.0, t.exposure)
        ours = np.concatenate([weights[LABEL][:-1], weights[PASSIVE]])
        assert np.max(np.abs(ours - coef)) < 0.01
        assert abs(weights[LABEL][-1] - intercept) < 0.01
        x = StandardScaler().fit_transform(pd.concat(t.parts.values(), axis=1))
        e = np.ones(len(t.y)) if t.exposure is None else t.exposure.to_numpy()
        rates = np.exp(x @ ours + weights[LABEL][-1])
        ours_d2 = d2_tweedie_score(t.y / e, rates, sample_weight=e, power=1)
        assert abs(ours_d2 - d2) < 0.01
        assert len(curve) < 100  # early stopping ended it


@pytest.mark.slow
def test_encrypted_fit_matches_scikit_learn_on_a_dvisits_like_table() -> None:
    t = make_count_table(1200, random_state=0)  # dvisits has 5,190 rows; 1,200 suffice
    # 512-bit keys keep it short; the key's size changes no plaintext
    est = small_model(VerticalPoissonRegression, key_bits=512)
    est.fit(t.parts, t.y, label_party=LABEL)
    coef, intercept, d2 = sklearn_fit(t.parts, t.y, 1.0)
    assert np.max(np.abs(est.coef_ - coef)) < 0.01
    assert abs(est.intercept_ - intercept) < 0.01
    assert abs(est.score(t.parts, t.y) - d2) < 0.01
    assert est.best_epoch_ <= est.n_iter_ < 100


@pytest.mark.slow
def test_d2_matches_scikit_learn_on_fates_dvisits() -> None:
    """FATE's dvisits example (guest: the counts, an exposure column if it has one, and its
    columns; host: the rest), when the shared data folder holds it: D^2 within 0.01."""
    guest, host, y = hetero("dvisits")
    exposure = "exposure" if "exposure" in guest.columns else None
    parts = {"guest": guest, "host": host}
    est = small_model(VerticalPoissonRegression).fit(
        parts, y, label_party="guest", exposure=exposure
    )
    features = {"guest": guest.drop(columns=[exposure]) if exposure else guest, "host": host}
    e = guest[exposure] if exposure else None
    _, _, d2 = sklearn_fit(features, y, 1.0, e)
    assert abs(est.score(parts, y) - d2) < 0.01


def test_no_plaintext_crosses_a_party_boundary(table) -> None:  # type: ignore[no-untyped-def]
    """Every message of a run, searched for each party's features (raw, standardised, fixed
    point), the counts, the exposure, exp(partial scores) and every gradient a party
    decrypted: none appears, not even in what the coordinator returns (masked values)."""
    parts, y = table
    est = small(max_iter=2)
    est.fit(parts, y, label_party=LABEL, exposure="periods", keep_payloads=True, keep_views=True)
    label_frame = parts[LABEL].drop(columns=["periods"])
    design = {LABEL: est.parts_[LABEL].design(label_frame)}
    design[PASSIVE] = est.parts_[PASSIVE].design(parts[PASSIVE])
    u_b = design[PASSIVE] @ est.parts_[PASSIVE].coef
    u_a = design[LABEL] @ est.parts_[LABEL].coef + est.intercept_
    gradients = {p: np.concatenate([g for _, g in est.views_[p]]) for p in (LABEL, PASSIVE)}
    secrets = {
        LABEL: [
            parts[LABEL].to_numpy(float),
            design[LABEL],
            y.to_numpy(float),
            parts[LABEL]["periods"].to_numpy(),
            np.exp(u_a),
            gradients[LABEL],
        ],
        PASSIVE: [parts[PASSIVE].to_numpy(float), design[PASSIVE], np.exp(u_b), gradients[PASSIVE]],
    }
    secrets["coordinator"] = [gradients[LABEL], gradients[PASSIVE]]
    scales = [1.0, 2.0**FEATURE_BITS, 2.0**EXP_BITS, 2.0**LABEL_BITS, 2.0**-GRADIENT_EXPONENT]
    assert find_plaintext(est.transcript_, secrets, scales=scales) == []
    exponents = {
        "vpr/exp": -EXP_BITS,
        "vpr/exp-all": -EXP_BITS,
        "vpr/residual": RESIDUAL_EXPONENT,
        "vpr/scores-all": -SCORE_BITS,
        "vpr/loss-piece": PIECE_EXPONENT,
    }
    seen = set()
    for record in est.transcript_.records:
        step = record.tag.rsplit("/", 1)[0] if record.tag[-1].isdigit() else record.tag
        if step in exponents:  # ciphertexts only, each at its public exponent
            block = record.payload()["data"]
            assert isinstance(block, CiphertextBlock)
            assert list(block.exponents) == [exponents[step]]
            seen.add(step)
    assert seen == set(exponents)
    # the counts never leave the label party, not even encrypted: a passive holding them under
    # the coordinator's key could slip them into its masked gradient request and read them
    from_label = {r.tag.rsplit("/", 1)[0] for r in est.transcript_.records if r.sender == LABEL}
    assert not any("labels" in tag for tag in from_label)
    to_coordinator = {r.tag for r in est.transcript_.records if r.receiver == "coordinator"}
    assert to_coordinator == {"vpr/epoch", "vpr/plan", "vpr/grad/req", "vpr/loss/req"}
    # what is left to each party is its own model part: nothing of the other's
    assert set(est.parts_[PASSIVE].extra) == {"data_parties"}
    assert est.parts_[LABEL].extra["exposure_column"] == "periods"


def test_each_party_decrypts_its_own_exact_gradient(table) -> None:  # type: ignore[no-untyped-def]
    """The statement's other half, attacked from the passive party's side: its first decrypted
    view is exactly X_B^T (mu_0 - y) of the first batch at the public starting model, a system
    in the batch's counts (what the class docstring warns of)."""
    parts, y = table
    est = small(max_iter=1).fit(parts, y, label_party=LABEL, exposure="periods", keep_views=True)
    rows, seen = est.views_[PASSIVE][0]
    x_b = est.parts_[PASSIVE].design(parts[PASSIVE])[rows]
    counts = y.to_numpy(float)[rows]
    e = parts[LABEL]["periods"].to_numpy()
    start = np.log(y.sum() / e.sum())  # the public starting model's intercept
    np.testing.assert_allclose(seen, x_b.T @ (e[rows] * np.exp(start) - counts), atol=1e-6)
    # the label party's view: its 7 columns and the intercept (the exposure is no column)
    assert len(est.views_[LABEL][0][1]) == 8


def test_the_coordinators_layouts_are_those_the_parties_pack() -> None:
    public_key, _ = generate_paillier_keypair(1024, insecure=True)
    vector = public_key.encrypt(np.arange(7.0), precision=2.0**-100)
    _, masks = pack_masked(vector, bound=gradient_bound(5190))
    assert masks.layout == masked_layout(7, gradient_bound(5190), vector.exponent, 1024)


def _run_with(role_class: type[PoissonDataRole], party: str, table: Any) -> None:
    """Fit with ``party`` running ``role_class`` instead of the honest role."""
    parts, y = table
    est = small(max_iter=1, key_bits=1024)  # the deviations below are sized for 1024 bits
    spec = est.fit_spec(LABEL, [LABEL, PASSIVE])
    roles: dict[str, Any] = {"coordinator": PoissonCoordinatorRole(spec)}
    for name, (part, x, targets, exposure) in est.fit_parts(spec, parts, y, "periods").items():
        role = role_class if name == party else PoissonDataRole
        roles[name] = role(spec, part, x, targets, exposure)
    LocalFederation(timeout=60).run(roles)


def test_deviating_parties_are_refused_by_name(table) -> None:  # type: ignore[no-untyped-def]
    class Greedy(PoissonDataRole):
        """Asks the coordinator to decrypt one value more than its columns."""

        def open_gradient(self, fed, rows, r):  # type: ignore[no-untyped-def]
            self.x_int = np.column_stack([self.x_int, self.x_int[:, :1]])
            return super().open_gradient(fed, rows, r)

    with pytest.raises(PartyFailedError, match=r"party 'clinic' sent a malformed decryption"):
        _run_with(Greedy, PASSIVE, table)

    class OneSlot(PoissonDataRole):
        """Packs its gradient one value per ciphertext (a bound of its own choosing, 2**800):
        whole plaintexts per request, as issue #31's passive asked for."""

        def open_gradient(self, fed, rows, r):  # type: ignore[no-untyped-def]
            nsq = r.public_key.nsquare
            products = multiexp_rows(r.ciphertexts, list(self.x_int[rows].T), nsq)
            encrypted = EncryptedVector(r.public_key, products, r.exponent - FEATURE_BITS)
            tags = VPR.child("grad")
            return decrypt_masked(fed, self.spec.coordinator, tags, encrypted, bound=2.0**800)

    # the coordinator pins the layout it derives from the public sizes: 2 ciphertexts of 3
    with pytest.raises(PartyFailedError, match=r"party 'clinic' .* asks for 5 decryptions"):
        _run_with(OneSlot, PASSIVE, table)

    class Loose(PoissonDataRole):
        """Encrypts exp(u_B) at a finer, data-dependent exponent."""

        def encrypt_exp(self, key, u):  # type: ignore[no-untyped-def]
            return key.encrypt(np.exp(u), precision=2.0**-41)

    with pytest.raises(PartyFailedError, match=r"party 'clinic' sent a malformed encrypted"):
        _run_with(Loose, PASSIVE, table)

    class Wide(PoissonDataRole):
        """Tells the coordinator another column count than the one its peer received."""

        def agree_plan(self, fed):  # type: ignore[no-untyped-def]
            peer = super().agree_plan(fed)
            self.x = np.column_stack([self.x, self.x[:, :1]])
            return peer

        def lead(self, fed, key, schedule, weights):  # type: ignore[no-untyped-def]
            # waits (its widened rows fit no weights) until the coordinator's refusal ends it
            from vfl.training.control import EpochControl

            VPR.recv(fed, self.spec.coordinator, "never", EpochControl)

    with pytest.raises(PartyFailedError, match=r"party 'insurer' .* received"):
        _run_with(Wide, LABEL, table)


def _views_with(role_class: type[PoissonDataRole], party: str, table: Any) -> list[Any]:
    """``party``'s decrypted views of a one-epoch fit in which it runs ``role_class``."""
    parts, y = table
    est = small(max_iter=1)
    spec = replace(est.fit_spec(LABEL, [LABEL, PASSIVE]), keep_views=True)
    roles: dict[str, Any] = {"coordinator": PoissonCoordinatorRole(spec)}
    for name, (part, x, targets, exposure) in est.fit_parts(spec, parts, y, "periods").items():
        role = role_class if name == party else PoissonDataRole
        roles[name] = role(spec, part, x, targets, exposure)
    LocalFederation(timeout=60).run(roles)
    view: list[Any] = roles[party].view
    return view


def test_a_request_of_other_ciphertexts_opens_what_a_chosen_design_does(table) -> None:  # type: ignore[no-untyped-def]
    """Why the Poisson requests are not routed as the linear coordinator's are (issue #31):
    each is computed from its receiver's own columns, which no other party holds, so another
    party could forward it but not check it; and the ciphertexts a party holds under the
    coordinator's key are the other's residuals or scores, never its features. A passive
    that has its batch's ``[[r]]`` opened instead of ``X_B^T [[r]]`` reads, batch for batch,
    what a passive whose columns are indicators of those rows decrypts through the honest
    code (the residuals of the first batch, ``mu_0 - y`` at the public start)."""
    parts, y = table
    columns = parts[PASSIVE].shape[1]

    class Opening(PoissonDataRole):
        """Puts its batch's first residuals, one per column, into its gradient request."""

        def open_gradient(self, fed, rows, r):  # type: ignore[no-untyped-def]
            first = EncryptedVector(r.public_key, r.ciphertexts[:columns], r.exponent)
            picked = first.rescale(r.exponent - FEATURE_BITS)  # at the gradient's exponent
            bound = gradient_bound(len(self.x))
            values = decrypt_masked(
                fed, self.spec.coordinator, VPR.child("grad"), picked, bound=bound
            )
            out = np.asarray(values, dtype=float)
            self.view.append((rows.copy(), out.copy()))
            return out

    class Indicators(PoissonDataRole):
        """Honest, on a design whose column j is 1 in the j-th row of each batch of the
        epoch (the batches partition the rows, so one design serves them all)."""

        def open_gradient(self, fed, rows, r):  # type: ignore[no-untyped-def]
            self.x_int = np.zeros_like(self.x_int)
            self.x_int[rows[:columns], np.arange(columns)] = 1 << FEATURE_BITS
            return super().open_gradient(fed, rows, r)

    opened = _views_with(Opening, PASSIVE, table)
    crafted = _views_with(Indicators, PASSIVE, table)
    assert len(opened) == len(crafted) > 1
    for (rows, got), (same_rows, designed) in zip(opened, crafted, strict=True):
        np.testing.assert_array_equal(rows, same_rows)
        np.testing.assert_array_equal(got, designed)
    rows, first = opened[0]
    e = parts[LABEL]["periods"].to_numpy()
    start = np.log(y.sum() / e.sum())
    picked = rows[:columns]
    residuals = e[picked] * np.exp(start) - y.to_numpy(float)[picked]
    np.testing.assert_allclose(first, residuals, atol=1e-6)


def test_scores_beyond_the_public_bound_fail_naming_the_party(table) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FloatingPointError, match=r"party 'p': .* beyond the public bound 30"):
        check_partial_scores(np.array([0.0, SCORE_LIMIT + 1]), "p")
    parts, y = table
    huge = parts[PASSIVE].assign(actdays=parts[PASSIVE]["actdays"] * 1e4)
    est = small(standardize=False, learning_rate=1.0, max_iter=1)
    with pytest.raises(PartyFailedError, match=r"party 'clinic': partial scores reach"):
        est.fit({LABEL: parts[LABEL], PASSIVE: huge}, y, label_party=LABEL, exposure="periods")


def test_bad_input_gets_clear_errors(table) -> None:  # type: ignore[no-untyped-def]
    parts, y = table
    with pytest.raises(ValueError, match=r"targets of party 'insurer' must be non-negative counts"):
        small().fit(parts, y - 1, label_party=LABEL)
    with pytest.raises(ValueError, match=r"targets of party 'insurer' are all 0"):
        small().fit(parts, y * 0, label_party=LABEL)
    bad = parts[LABEL].assign(periods=parts[LABEL]["periods"].where(y.index != 5, 0.0))
    with pytest.raises(ValueError, match=r"exposure \(column 'periods' of party 'insurer'\)"):
        small().fit({**parts, LABEL: bad}, y, label_party=LABEL, exposure="periods")
    with pytest.raises(ValueError, match=r"exposure \(party 'insurer'\) must be positive"):
        small().fit(parts, y, label_party=LABEL, exposure=-np.ones(len(y)))
    with pytest.raises(ValueError, match=r"'weeks' is not a column of the label party"):
        small().fit(parts, y, label_party=LABEL, exposure="weeks")
    third = {**parts, "lab": parts[PASSIVE].add_prefix("lab_")}
    with pytest.raises(ValueError, match=r"one passive party.*VerticalLinearRegression"):
        small().fit(third, y, label_party=LABEL)
    with pytest.raises(ValueError, match=r"protocol='coordinator' only"):
        small(protocol="shared").fit(parts, y, label_party=LABEL)
    with pytest.raises(ValueError, match=r"optimizer='sgd' needs learning_rate="):
        small(optimizer="sgd").fit(parts, y, label_party=LABEL)
    with pytest.raises(ValueError, match=r"both a data party and the coordinator"):
        small(coordinator=LABEL).fit(parts, y, label_party=LABEL)
    with pytest.raises(NotFittedError):
        small().predict(parts)
    assert clone(small(alpha=0.5)).get_params()["alpha"] == 0.5


def test_prediction_exposure_deployment_and_persistence(table, tmp_path) -> None:  # type: ignore[no-untyped-def]
    parts, y = table
    simulated = small(max_iter=2).fit(parts, y, label_party=LABEL, exposure="periods")
    periods = parts[LABEL]["periods"].to_numpy()
    counts = simulated.predict(parts)  # the frame has the exposure column: it is used
    rates = simulated.predict(
        {LABEL: parts[LABEL].drop(columns=["periods"]), PASSIVE: parts[PASSIVE]}
    )
    np.testing.assert_allclose(counts, periods * rates, rtol=1e-9)
    np.testing.assert_allclose(simulated.predict(parts, exposure=2.0), 2 * rates, rtol=1e-9)
    expected = d2_tweedie_score(y / periods, rates, sample_weight=periods, power=1)
    assert simulated.score(parts, y) == pytest.approx(expected)

    estimators = {name: small(max_iter=2) for name in [*parts, "coordinator"]}

    def role(name: str):  # type: ignore[no-untyped-def]
        def run(fed):  # type: ignore[no-untyped-def]
            est = estimators[name]
            labelled = name == LABEL
            est.fit_party(
                fed,
                parts.get(name),
                y if labelled else None,
                label_party=LABEL,
                data_parties=list(parts),
                exposure="periods" if labelled else None,
            )
            return est.predict_party(fed, parts.get(name))

        return run

    results = LocalFederation().run({name: role(name) for name in estimators})
    for name in parts:
        np.testing.assert_allclose(
            estimators[name].parts_[name].coef, simulated.parts_[name].coef, atol=1e-12
        )
    np.testing.assert_allclose(results[LABEL], counts, rtol=1e-9)
    assert results[PASSIVE] is None and results["coordinator"] is None
    loaded = small().load(simulated.save(tmp_path), label_party=LABEL)
    np.testing.assert_allclose(loaded.predict(parts), counts, rtol=1e-9)
    assert loaded.intercept_ == simulated.intercept_
