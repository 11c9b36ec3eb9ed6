"""Vertical logistic regression: encrypted equals plaintext, accuracy against scikit-learn,
the transcript carries no plaintext features or labels, bad input, persistence."""

from __future__ import annotations

import re
import warnings
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from tests.vfl.linear.tables import small_model
from vfl.crypto import SecurityWarning
from vfl.crypto.fixedpoint import DEFAULT_PRECISION
from vfl.federation.wire import CiphertextBlock
from vfl.linear import VerticalLogisticRegression, plaintext_reference
from vfl.linear.model import FEATURE_BITS
from vfl.linear.reference import plaintext_scores

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


def small(**params: object) -> VerticalLogisticRegression:
    return small_model(VerticalLogisticRegression, **params)


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series, dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    cols = list(x.columns)

    def split(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
        return {"imaging": frame[cols[:10]], "lab": frame[cols[10:]]}

    return split(x_tr), y_tr, split(x_te), y_te


@pytest.mark.parametrize("protocol", ["coordinator", "two_party"])
def test_encrypted_training_equals_the_plaintext_protocol(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    est = small(protocol=protocol, max_iter=2, batch_size=100, tol=None)
    est.fit(parts, y, label_party="imaging")
    weights, curve = plaintext_reference(est, parts, y, label_party="imaging")
    np.testing.assert_allclose(est.parts_["lab"].coef, weights["lab"], atol=1e-6)
    np.testing.assert_allclose(est.parts_["imaging"].coef, weights["imaging"][:-1], atol=1e-6)
    assert est.intercept_[0] == pytest.approx(weights["imaging"][-1], abs=1e-6)
    np.testing.assert_allclose(est.loss_curve_, curve, rtol=1e-6)
    assert est.n_iter_ == 2


def sensitive_windows(values: np.ndarray, scales: list[float]) -> set[tuple[float, ...]]:
    out = set()
    for scale in scales:
        scaled = np.round(values * scale, 9) if scale != 1 else np.round(values, 9)
        for column in scaled.T if scaled.ndim == 2 else [scaled]:
            for k in range(len(column) - 4):
                out.add(tuple(column[k : k + 5].tolist()))
    return out


def payload_numbers(payload: object) -> list[np.ndarray]:
    if isinstance(payload, CiphertextBlock):
        return []  # encrypted
    if isinstance(payload, np.ndarray):
        return [payload.astype(float).ravel()]
    if isinstance(payload, dict):
        return [a for v in payload.values() for a in payload_numbers(v)]
    if isinstance(payload, list):
        if payload and all(isinstance(v, (int, float)) for v in payload):
            return [np.array([float(v) for v in payload])]
        return [a for v in payload for a in payload_numbers(v)]
    return []


@pytest.mark.parametrize("protocol", ["coordinator", "two_party", "shared", "shared_coordinator"])
def test_no_plaintext_feature_or_label_crosses_a_party_boundary(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    est = small(protocol=protocol, max_iter=1, batch_size=128, tol=None)
    est.fit(parts, y, label_party="imaging", keep_payloads=True)
    secrets_of: dict[str, set[tuple[float, ...]]] = {}
    for name, frame in parts.items():
        raw = frame.to_numpy(dtype=float)
        std = est.parts_[name].design(frame)
        secrets_of[name] = sensitive_windows(raw, [1.0]) | sensitive_windows(
            std, [1.0, 2.0**FEATURE_BITS, 1 / DEFAULT_PRECISION]
        )
    labels = y.to_numpy(dtype=float)
    secrets_of["imaging"] |= sensitive_windows(labels, [1.0]) | sensitive_windows(
        2 * labels - 1, [1.0]
    )
    records = est.transcript_.records
    assert records, "the transcript is empty"
    decryptor_inputs = 0
    for record in records:
        for array in payload_numbers(record.payload()):
            windows = {tuple(np.round(array[k : k + 5], 9).tolist()) for k in range(len(array) - 4)}
            leaked = windows & secrets_of.get(record.sender, set())
            assert not leaked, f"{record.sender} -> {record.receiver} [{record.tag}] leaks"
        if record.tag.endswith("/req"):
            decryptor_inputs += 1
            assert isinstance(record.payload()["data"], CiphertextBlock)
    if protocol.startswith("shared"):
        check_shared_transcript(records, protocol, decryptor_inputs)
        return
    if protocol == "coordinator":
        assert decryptor_inputs > 0
        to_coordinator = [r for r in records if r.receiver == "coordinator"]
        allowed = {"vlr/epoch", "vlr/setup", "vlr/grad/req", "vlr/loss/req"}
        assert {r.tag for r in to_coordinator} <= allowed
    else:  # each party decrypts only what is computed on its own rows: no requests at all
        assert decryptor_inputs == 0
    # between data parties, what carries data is ciphertexts: encrypted rows once, gradient
    # shares and loss pieces; the only plain numbers are the fresh masks a party sends the
    # assembler of its decryptions under the coordinator (vfl.linear.routing)
    between = [r for r in records if {r.sender, r.receiver} == {"imaging", "lab"}]
    control = {"vlr/seed", "vlr/outputs", "vlr/key", "vlr/rows", "vlr/epoch"}
    masks = {"vlr/grad/masks", "vlr/loss/masks"}
    data = {"vlr/rows/0", "vlr/share", "vlr/loss-piece"}
    assert {r.tag for r in between} <= control | data | masks
    for record in between:
        if record.tag in ("vlr/share", "vlr/loss-piece"):
            assert isinstance(record.payload()["data"], CiphertextBlock)
        if record.tag in masks:
            assert all(isinstance(m, int) for m in record.payload()["masks"])
        if record.tag == "vlr/rows/0":
            assert all(isinstance(b, CiphertextBlock) for b in record.payload()["blocks"])


def step_of(tag: str) -> str:
    """A tag without its batch index and party number: ``vlr/ss/prod-1-b4/req`` and
    ``vlr/ss/prod-0/4`` are steps ``vlr/ss/prod/req`` and ``vlr/ss/prod``."""
    return re.sub(r"-(\d+|b\d+)(?=[-/]|$)", "", re.sub(r"(/\d+)+$", "", tag))


def check_shared_transcript(records: list, protocol: str, decryptor_inputs: int) -> None:  # type: ignore[type-arg]
    """Under the secret-shared protocols, between the data parties: ciphertexts (encrypted
    rows, masked shares, encrypted Gram columns, encrypted loss terms), the public plan, keys
    and base, and plain integers that are shares or uniform offsets; the coordinator gets only
    decryption requests of masked shares, each answered to the party that did not send it."""
    ciphertexts = {"vlr/ss/gram", "vlr/ss/tau", "vlr/ss/prod", "vlr/ss/prod-all", "vlr/ss/loss"}
    ciphertexts |= {"vlr/ss/loss-total", "vlr/rows", "vlr/ss/s"}
    shares = {"vlr/ss/init", "vlr/ss/offset", "vlr/ss/final"}
    control = {"vlr/seed", "vlr/outputs", "vlr/key", "vlr/ss/epoch", "vlr/ss/plan"}
    control |= {"vlr/ss/base", "vlr/ss/loss-key"}
    between = [r for r in records if {r.sender, r.receiver} == {"imaging", "lab"}]
    steps = {step_of(r.tag) for r in between}
    assert steps <= ciphertexts | shares | control, steps - (ciphertexts | shares | control)
    assert ("vlr/ss/base" in steps) == (protocol == "shared")
    for record in between:
        payload, step = record.payload(), step_of(record.tag)
        if step in ciphertexts and step != "vlr/rows":
            assert isinstance(payload["data"], CiphertextBlock), record.tag
            assert set(payload["data"].exponents.tolist()) == {0}  # one public exponent
        if step in shares:
            # uniform shares and offsets, 88 bits wide: every plaintext quantity of the
            # protocol (a weight, at 2**24 and below 2**16) is below 2**40, a uniform share
            # with probability 2**-48
            assert all(abs(v) >= 2**40 for v in payload["values"]), record.tag
    if protocol == "shared":
        assert decryptor_inputs == 0  # each party opens, with its own key, shares masked for it
        return
    to_coordinator = {step_of(r.tag) for r in records if r.receiver == "coordinator"}
    asked = {f"vlr/ss/{s}/req" for s in ("gram", "tau", "prod", "prod-all")}
    assert to_coordinator <= asked | {"vlr/ss/plan", "vlr/outputs", "vlr/ss/epoch"}
    assert asked <= to_coordinator
    # the coordinator answers each request to the other data party, never to its sender
    other = {"imaging": "lab", "lab": "imaging"}
    sent: dict[str, Counter[str]] = {}
    answered: dict[str, Counter[str]] = {}
    for r in records:
        if r.receiver == "coordinator" and r.tag.endswith("/req"):
            sent.setdefault(r.tag[: -len("/req")], Counter())[other[r.sender]] += 1
        if r.sender == "coordinator" and r.tag.endswith("/plain"):
            answered.setdefault(r.tag[: -len("/plain")], Counter())[r.receiver] += 1
    assert sent and sent == answered


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["coordinator", "two_party", "shared"])
def test_auc_close_to_scikit_learn_and_beats_one_party(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    parts, y, test_parts, y_test = breast
    est = small(protocol=protocol)
    if protocol == "shared":  # the twin, which the encrypted fit equals (test_shared.py,
        # test_defaults.py), at a fraction of the time
        scores = plaintext_scores(est, parts, y, test_parts, label_party="imaging")[:, 0]
        auc = roc_auc_score(y_test, scores)
        assert float(np.mean((scores > 0) == y_test.to_numpy())) > 0.9
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(parts, y, label_party="imaging")
        auc = roc_auc_score(y_test, est.predict_proba(test_parts)[:, 1])
        assert est.score(test_parts, y_test) > 0.9
    train = pd.concat(parts.values(), axis=1)
    test = pd.concat(test_parts.values(), axis=1)
    scaler = StandardScaler().fit(train)
    reference = LogisticRegression().fit(scaler.transform(train), y)
    auc_sklearn = roc_auc_score(y_test, reference.predict_proba(scaler.transform(test))[:, 1])
    assert auc >= auc_sklearn - 0.01


def test_saved_parts_predict_the_same(breast, tmp_path) -> None:  # type: ignore[no-untyped-def]
    parts, y, test_parts, _ = breast
    est = small(max_iter=1, tol=None).fit(parts, y, label_party="imaging")
    folder = est.save(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["imaging.npz", "lab.npz", "model.json"]
    with np.load(
        folder / "imaging.npz", allow_pickle=False
    ) as saved:  # numbers only, no key material
        assert "coef" in saved.files and not any("key" in f for f in saved.files)
        assert b"key" not in saved["__meta__"].tobytes().lower()
    loaded = small().load(folder)
    np.testing.assert_allclose(
        loaded.decision_function(test_parts), est.decision_function(test_parts), atol=1e-6
    )


def test_bad_input_gets_clear_errors(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    est = small(max_iter=1)
    with pytest.raises(ValueError, match="label party 'clinic' is not among"):
        est.fit(parts, y, label_party="clinic")
    shifted = {**parts, "lab": parts["lab"].iloc[::-1]}
    with pytest.raises(ValueError, match="party 'lab': rows do not align"):
        est.fit(shifted, y, label_party="imaging")
    huge = parts["lab"].assign(**{"worst area": parts["lab"]["worst area"] * 1e12})
    with pytest.raises(
        ValueError, match=r"party 'lab': column\(s\) \['worst area'\] reach 2\*\*40"
    ):
        small(max_iter=1, standardize=False).fit({**parts, "lab": huge}, y, label_party="imaging")
    nan = parts["lab"].copy()
    nan.iloc[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"party 'lab': column '.*' has NaN or inf"):
        est.fit({**parts, "lab": nan}, y, label_party="imaging")
    text = parts["lab"].assign(**{parts["lab"].columns[0]: "x"})
    with pytest.raises(ValueError, match="is not numeric"):
        est.fit({**parts, "lab": text}, y, label_party="imaging")
    constant = parts["lab"].assign(**{parts["lab"].columns[1]: 1.0})
    with pytest.raises(ValueError, match="are constant"):
        est.fit({**parts, "lab": constant}, y, label_party="imaging")
    with pytest.raises(ValueError, match="labels of party 'imaging' hold one class only"):
        est.fit(parts, y * 0, label_party="imaging")
    with pytest.raises(ValueError, match="labels of party 'imaging' contain missing values"):
        est.fit(parts, y.where(y.index != y.index[4]), label_party="imaging")
    with pytest.raises(ValueError, match="party 'lab' has no columns"):
        est.fit({**parts, "lab": parts["lab"].iloc[:, :0]}, y, label_party="imaging")
    with pytest.raises(ValueError, match="needs exactly two data parties"):
        small(protocol="two_party").fit({**parts, "x": parts["lab"]}, y, label_party="imaging")
    with pytest.raises(ValueError, match="needs the label party 'imaging' and at least one other"):
        small().fit({"imaging": parts["imaging"]}, y, label_party="imaging")
    fitted = small(max_iter=1, tol=None).fit(parts, y, label_party="imaging")
    renamed = {**parts, "lab": parts["lab"].rename(columns=lambda c: c + "!")}
    with pytest.raises(ValueError, match="party 'lab': the columns differ from those fitted"):
        fitted.predict_proba(renamed)
    with pytest.raises(ValueError, match="not fitted"):
        small().predict(parts)


@pytest.mark.parametrize("protocol", ["coordinator", "shared_coordinator"])
def test_deployment_roles_train_the_same_model(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    from vfl.federation import LocalFederation

    parts, y, _, _ = breast
    params = {"max_iter": 1, "tol": None, "batch_size": 100, "protocol": protocol}
    simulated = small(**params).fit(parts, y, label_party="imaging")
    estimators = {name: small(**params) for name in parts}
    coordinator = small(**params)
    roles = {
        name: (
            lambda fed, name=name: estimators[name].fit_party(
                fed,
                parts[name],
                y if name == "imaging" else None,
                label_party="imaging",
                data_parties=list(parts),
            )
        )
        for name in parts
    }
    roles["coordinator"] = lambda fed: coordinator.fit_party(
        fed, None, label_party="imaging", data_parties=list(parts)
    )
    LocalFederation().run(roles)
    assert set(estimators["lab"].parts_) == {"lab"}  # each party holds only its own part
    # the shared protocol truncates random shares: equal to a unit of 2**-24 per step
    tolerance = 1e-6 if protocol == "coordinator" else 1e-5
    for name in parts:
        np.testing.assert_allclose(
            estimators[name].parts_[name].coef, simulated.parts_[name].coef, atol=tolerance
        )
    assert estimators["imaging"].loss_curve_ == pytest.approx(simulated.loss_curve_, rel=tolerance)


@pytest.mark.parametrize(
    ("protocol", "steps"),
    [
        ("coordinator", {"vlr/grad", "vlr/loss"}),
        (
            "shared_coordinator",
            {f"vlr/ss/{s}" for s in ("gram", "tau", "prod", "prod-all")},
        ),
    ],
)
def test_what_the_key_holder_decrypts_is_masked(breast, protocol: str, steps: set[str]) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    est = small(max_iter=1, batch_size=128, tol=None, protocol=protocol)
    est.fit(parts, y, label_party="imaging", keep_payloads=True)
    records = est.transcript_.records
    # paired by step and size: a request comes from one party, its answer goes to another
    requests: dict[tuple[str, int], list] = {}  # type: ignore[type-arg]
    answers: dict[tuple[str, int], list] = {}  # type: ignore[type-arg]
    for r in records:
        if r.tag.endswith("/req"):
            requests.setdefault((r.tag[:-4], r.payload()["layout"]["count"]), []).append(r)
        elif r.tag.endswith("/plain"):
            answers.setdefault((r.tag[:-6], len(r.payload()["slots"])), []).append(r)
    assert requests and set(requests) == set(answers)
    assert {step_of(tag) for tag, _ in requests} == steps
    checked = 0
    for key in requests:
        for request, answer in zip(requests[key], answers[key], strict=True):
            layout = request.payload()["layout"]
            slots, value_bits, kappa = answer.payload()["slots"], layout["value_bits"], 40
            assert layout["kappa"] >= kappa and len(slots) == layout["count"]
            # each slot is value + offset + a uniform mask of value_bits + kappa bits: far
            # above any value it hides (a mask is 30 bits shorter with probability 2**-30 per
            # slot, so this never fails by chance)
            floor = 2 ** (value_bits + kappa - 30)
            assert all(s >= floor for s in slots) and floor > 2**value_bits
            checked += len(slots)
    assert checked > 0


def test_foreign_ciphertexts_and_keys_are_refused_naming_the_sender() -> None:
    from vfl.crypto import generate_paillier_keypair
    from vfl.crypto.policy import KeyPolicy, vector_from

    key_a, _ = generate_paillier_keypair(1024, insecure=True)
    key_b, _ = generate_paillier_keypair(1024, insecure=True)
    block = key_a.encrypt(np.arange(3.0)).to_wire()
    with pytest.raises(ValueError, match="party 'lab' sent an unusable ciphertext message"):
        vector_from(key_b, block, "lab")
    with pytest.raises(ValueError, match="party 'lab' sent an unusable ciphertext message"):
        vector_from(key_b, {"not": "a block"}, "lab")
    small_key = {"n": int(key_a.n).to_bytes(128, "big")}
    with pytest.raises(
        ValueError, match=r"party 'coordinator' sent a malformed public key .* 1024-bit key"
    ):
        KeyPolicy().receive(small_key, "coordinator")
    with pytest.raises(ValueError, match="party 'coordinator' sent a malformed public key"):
        KeyPolicy().receive([1, 2], "coordinator")
    assert KeyPolicy(insecure=True).receive(small_key, "coordinator") == key_a


def test_small_batches_that_would_reveal_rows_are_refused(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    with pytest.raises(ValueError, match=r"party .lab.: mini-batches of \d+ rows would reveal"):
        small(batch_size=16).fit(parts, y, label_party="imaging")


def three_parties(parts: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The lab's 20 columns split into two passive parties of 10."""
    cols = list(parts["lab"].columns)
    return {
        "imaging": parts["imaging"],
        "lab": parts["lab"][cols[:10]],
        "genomics": parts["lab"][cols[10:]],
    }


def test_three_parties_with_a_coordinator_equal_the_plaintext_protocol(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    three = three_parties(parts)
    est = small(max_iter=2, batch_size=100, tol=None, protocol="coordinator")
    est.fit(three, y, label_party="imaging")
    weights, curve = plaintext_reference(est, three, y, label_party="imaging")
    for name in ("lab", "genomics"):
        np.testing.assert_allclose(est.parts_[name].coef, weights[name], atol=1e-6)
    np.testing.assert_allclose(est.loss_curve_, curve, rtol=1e-6)  # cross terms included


def test_a_party_cannot_test_guesses_against_the_shares_computed_on_its_rows() -> None:
    """A party knows its own encrypted rows (and their randomness). If the share
    ``prod_i c_i**z_i`` computed on them came back unchanged, it could check any guess of
    the other party's ``z`` (residuals holding the labels) by recomputing the product.
    Re-randomisation must break that, while the share still decrypts to ``X^T z``."""
    from vfl.crypto import generate_paillier_keypair
    from vfl.crypto.kernels import multiexp
    from vfl.crypto.packing import RowPacking, pack_rows, unpack_signed
    from vfl.crypto.slots import PeerRows
    from vfl.crypto.store import CiphertextStore
    from vfl.linear.exchange import SCORE_BITS

    public, secret = generate_paillier_keypair(1024, insecure=True)
    rng = np.random.default_rng(1)
    x_int = rng.integers(-(2**20), 2**20, size=(40, 3))
    z = rng.normal(size=40)
    z_int = np.round(z * 2.0**SCORE_BITS).astype(np.int64)
    packing = RowPacking.plan(21 + SCORE_BITS + 17 + 6 + 1, 3, 1024, kappa=None)
    (plain,) = pack_rows(x_int, packing, int(public.n))
    cts = public.raw_encrypt(plain)
    rows = PeerRows(public, [CiphertextStore.of(public, cts)], packing)
    everything = np.arange(40)
    share = rows.combine(everything, z_int[:, None], to_key_owner=True)
    value = int(secret.raw_decrypt(share.ciphertexts)[0])
    value = value - int(public.n) if value > public.n // 2 else value
    expected = [int(v) for v in (x_int.astype(object).T @ z_int.astype(object))]
    assert unpack_signed(value, packing, 0, packing.value_bits(None)) == expected
    negative = z_int < 0
    inverses = [pow(int(c), -1, int(public.nsquare)) for c in cts]
    bases = [inv if neg else c for c, inv, neg in zip(cts, inverses, negative, strict=True)]
    guess = multiexp(bases, np.abs(z_int), public.nsquare)  # the true z, as a best guess
    assert int(guess) != int(share.ciphertexts[0])
    again = rows.combine(everything, z_int[:, None], to_key_owner=True)
    assert again.ciphertexts != share.ciphertexts


@pytest.mark.slow
def test_on_the_cohort_the_federated_model_beats_the_label_party_alone() -> None:
    from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, make_lab_imaging_cohort

    lab, imaging, truth = make_lab_imaging_cohort(2500, overlap=0.8, random_state=11)
    lab_rows = lab.loc[truth["lab"], LAB_FEATURES].reset_index(drop=True)
    img_rows = imaging.loc[truth["imaging"], IMAGING_FEATURES].reset_index(drop=True)
    y_all = imaging.loc[truth["imaging"], LABEL].reset_index(drop=True).astype(int)
    train, test = np.arange(len(y_all)) % 3 != 0, np.arange(len(y_all)) % 3 == 0
    parts = {"imaging": img_rows[train], "lab": lab_rows[train]}
    test_parts = {"imaging": img_rows[test], "lab": lab_rows[test]}
    # the default model's twin, which the encrypted fit equals (test_shared.py and, with the
    # defaults on a FATE table, test_defaults.py), at a fraction of the time
    scores = plaintext_scores(small(), parts, y_all[train], test_parts, label_party="imaging")
    federated = roc_auc_score(y_all[test], scores[:, 0])
    scaler = StandardScaler().fit(img_rows[train])
    alone = LogisticRegression().fit(scaler.transform(img_rows[train]), y_all[train])
    auc_alone = roc_auc_score(
        y_all[test], alone.predict_proba(scaler.transform(img_rows[test]))[:, 1]
    )
    both = pd.concat([img_rows, lab_rows], axis=1)
    scaler = StandardScaler().fit(both[train])
    central = LogisticRegression().fit(scaler.transform(both[train]), y_all[train])
    auc_central = roc_auc_score(
        y_all[test], central.predict_proba(scaler.transform(both[test]))[:, 1]
    )
    assert federated > auc_alone + 0.03  # clearly better than the label party alone
    assert federated >= auc_central - 0.01  # and as good as pooling the data


def test_deployment_scoring_gives_only_the_label_party_the_scores(breast) -> None:  # type: ignore[no-untyped-def]
    from vfl.federation import LocalFederation

    parts, y, test_parts, _ = breast
    fitted = small(max_iter=1, tol=None, batch_size=100, protocol="coordinator")
    fitted.fit(parts, y, label_party="imaging")
    expected = fitted.decision_function(test_parts)
    roles = {
        name: (lambda fed, name=name: fitted.predict_party(fed, test_parts[name]))
        for name in test_parts
    }
    roles["coordinator"] = lambda fed: fitted.predict_party(fed, None)
    results = LocalFederation().run(roles)
    np.testing.assert_allclose(results["imaging"], expected, atol=1e-6)
    assert results["lab"] is None and results["coordinator"] is None


@pytest.mark.parametrize(("n", "batch"), [(398, 64), (120, 100), (50, 64), (256, 64)])
def test_batches_cover_every_row_once(n: int, batch: int) -> None:
    from vfl.training import batches as make_batches

    order = np.random.default_rng(0).permutation(n)
    batches = make_batches(order, batch)
    np.testing.assert_array_equal(np.concatenate(batches), order)  # all rows, once, in order
    assert min(len(b) for b in batches) >= min(n, batch // 2)


def test_peers_refuse_bad_packings_and_overflowing_shares() -> None:
    from vfl.crypto import EncryptedVector, generate_paillier_keypair
    from vfl.crypto.packing import RowPacking, unpack_signed
    from vfl.linear.exchange import rows_from_parts
    from vfl.linear.messages import RowsHeader, RowsPart

    public, _ = generate_paillier_keypair(1024, insecure=True)
    block = public.encrypt(np.zeros(40)).to_wire()
    # a party declaring as many columns as a batch has rows could solve our z from its shares
    wide = RowsHeader(packing={"columns": 39, "slot_bits": 100, "per_ct": 10}, parts=1)
    with pytest.raises(ValueError, match=r"party 'lab': mini-batches of \d+ rows would reveal"):
        rows_from_parts(public, wide, [RowsPart(blocks=[block] * 4)], "lab", 40, 32)
    bad = RowsHeader(packing={"columns": 3, "slot_bits": 900, "per_ct": 3}, parts=1)
    with pytest.raises(ValueError, match=r"party 'lab' sent .* 'packing' impossible row packing"):
        rows_from_parts(public, bad, [RowsPart(blocks=[block])], "lab", 40, 32)
    fine = RowsHeader(packing={"columns": 3, "slot_bits": 100, "per_ct": 3}, parts=2)
    half = EncryptedVector(public, public.raw_encrypt([0] * 20), 0, fresh=True).to_wire()
    two = [RowsPart(blocks=[half]), RowsPart(blocks=[half])]
    joined = rows_from_parts(public, fine, two, "lab", 40, 32)
    assert len(joined.groups[0]) == 40
    # kept packed: exactly the ciphertexts' bytes, no Python object per row
    assert joined.nbytes == 40 * public.ciphertext_bytes == joined.groups[0].data.nbytes
    with pytest.raises(ValueError, match=r"party 'lab' sent .* 'blocks' do not add up"):
        rows_from_parts(public, fine, two[:1], "lab", 40, 32)
    packing = RowPacking(3, 64, 3)
    value = (5 << 128) + (-7 << 64) + 3
    assert unpack_signed(value, packing, 0, 60) == [3, -7, 5]
    with pytest.raises(OverflowError, match="overflowed its slots"):
        unpack_signed((5 << 128) + (2**61 << 64) + 3, packing, 0, 60)  # middle slot


def test_the_coordinator_decrypts_only_requests_of_a_shares_size() -> None:
    from vfl.crypto import generate_paillier_keypair
    from vfl.crypto.masked import DecryptionRequest, serve_decryption
    from vfl.federation import LocalFederation, PartyFailedError
    from vfl.linear.messages import VLR

    public, secret = generate_paillier_keypair(1024, insecure=True)
    tags = VLR.child("grad")

    def asker(fed):  # type: ignore[no-untyped-def]
        layout = {"count": 5, "value_bits": 60, "kappa": 40, "slots": 1}
        request = DecryptionRequest(data=public.encrypt(np.zeros(5)).to_wire(), layout=layout)
        tags.send(fed, "coordinator", "req", request)

    def coordinator(fed):  # type: ignore[no-untyped-def]
        serve_decryption(fed, "lab", tags, secret, expected=1)

    with pytest.raises(PartyFailedError, match=r"party 'lab' .* asks for 5 decryptions"):
        LocalFederation(timeout=10).run({"lab": asker, "coordinator": coordinator})


def test_encrypted_rows_sent_in_many_parts_give_the_same_model(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import vfl.linear.exchange as lr

    parts, y, _, _ = breast
    params = {"max_iter": 1, "batch_size": 100, "tol": None, "protocol": "coordinator"}
    whole = small(**params).fit(parts, y, label_party="imaging")
    monkeypatch.setattr(lr, "ROWS_MESSAGE_BYTES", 256 * 37)  # 37 rows of a 1024-bit key
    est = small(**params)
    est.fit(parts, y, label_party="imaging", keep_payloads=True)
    for sender in parts:  # 37 rows at most per part, fewer with several column groups
        sent = {r.tag for r in est.transcript_.records if r.sender == sender}
        assert len({t for t in sent if t.startswith("vlr/rows/")}) >= -(-len(y) // 37)
    for name in parts:
        np.testing.assert_array_equal(est.parts_[name].coef, whole.parts_[name].coef)


@pytest.mark.parametrize(
    ("protocol", "holder"), [("coordinator", "coordinator"), ("two_party", "")]
)
def test_an_overflowing_gradient_names_the_key_holder_and_the_fix(
    breast, monkeypatch, protocol, holder
) -> None:  # type: ignore[no-untyped-def]
    import vfl.linear.exchange as exchange
    from vfl.federation import PartyFailedError

    parts, y, _, _ = breast
    monkeypatch.setattr(exchange, "Z_BITS", 4)  # slots far too narrow for a batch sum
    with pytest.raises(
        PartyFailedError, match=f"decrypted via '{holder}.*overflowed its packing; standardise"
    ):
        small(protocol=protocol, max_iter=1, tol=None, batch_size=100).fit(
            parts, y, label_party="imaging"
        )


def test_the_transcript_is_the_fits_and_scoring_leaves_it(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y, test_parts, _ = breast
    est = small(max_iter=1, tol=None, batch_size=100).fit(parts, y, label_party="imaging")
    transcript = est.transcript_
    est.predict_proba(test_parts)
    assert est.transcript_ is transcript
    assert any(r.tag == "vlr/rows/0" for r in transcript.records)
    # its encrypted rows: at least one 256-byte ciphertext (1024-bit key) per row
    assert transcript.total_bytes(sender="imaging") > 256 * len(y)


def test_cross_party_ciphertexts_carry_one_public_exponent_per_step(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y, _, _ = breast
    three = three_parties(parts)
    est = small(max_iter=2, batch_size=100, tol=None, protocol="coordinator")
    est.fit(three, y, label_party="imaging", keep_payloads=True)
    exponents: dict[str, set[int]] = {}
    for record in est.transcript_.records:
        payload = record.payload()
        blocks = []
        if isinstance(payload, dict):
            for value in payload.values():
                blocks += value if isinstance(value, list) else [value]
        for block in blocks:
            if isinstance(block, CiphertextBlock):
                exponents.setdefault(record.tag, set()).update(block.exponents.tolist())
    for tag in ("vlr/u", "vlr/cross-sum", "vlr/share", "vlr/loss-piece"):
        assert len(exponents[tag]) == 1, (tag, exponents[tag])  # never data-dependent


def test_the_coordinator_refuses_inflated_packings_and_long_loss_requests() -> None:
    from vfl.crypto import generate_paillier_keypair
    from vfl.crypto.masked import DecryptionRequest, serve_decryption
    from vfl.federation import LocalFederation, PartyFailedError
    from vfl.linear.messages import VLR, SetupCounts
    from vfl.linear.protocol import check_setup

    packing = {"columns": 10, "slot_bits": 100, "per_ct": 10}
    counts = {
        "imaging": SetupCounts(1, packing, {"lab": packing}, 500),
        "lab": SetupCounts(1, {**packing, "per_ct": 9}, {"imaging": packing}),
    }
    with pytest.raises(ValueError, match=r"party 'lab' .* 'packing' .* party 'imaging' received"):
        check_setup(counts, "imaging", 1024)
    counts["lab"] = SetupCounts(2, packing, {"imaging": packing})
    with pytest.raises(
        ValueError, match=r"party 'lab' .* 'outputs' is 2; the label party trains 1"
    ):
        check_setup(counts, "imaging", 1024)

    public, secret = generate_paillier_keypair(1024, insecure=True)
    tags = VLR.child("loss")

    def asker(fed):  # type: ignore[no-untyped-def]
        layout = {"count": 5, "value_bits": 60, "kappa": 40, "slots": 5}
        request = DecryptionRequest(data=public.encrypt(np.zeros(1)).to_wire(), layout=layout)
        tags.send(fed, "coordinator", "req", request)

    def coordinator(fed):  # type: ignore[no-untyped-def]
        serve_decryption(fed, "imaging", tags, secret, expected=1, count=1)

    with pytest.raises(PartyFailedError, match=r"party 'imaging' .* asks for 5 values"):
        LocalFederation(timeout=10).run({"imaging": asker, "coordinator": coordinator})


def test_the_default_wait_grows_with_the_rows_and_the_key(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from vfl import estimator
    from vfl.estimator import DEFAULT_TIMEOUT, SECONDS_PER_ROW, wait_limit

    # a million rows with 2048-bit keys: the setup alone outlasts a fixed 600 s on two cores
    assert wait_limit(None, 1_000_000) == pytest.approx(DEFAULT_TIMEOUT + 1e6 * SECONDS_PER_ROW)
    assert wait_limit(None, 1_000_000) > 4 * DEFAULT_TIMEOUT
    assert wait_limit(None, 1000, 3072) == pytest.approx(
        DEFAULT_TIMEOUT + 1000 * SECONDS_PER_ROW * 1.5**3
    )
    assert wait_limit(5.0, 10**9) == 5.0  # an explicit timeout is kept
    # the estimator hands the simulation the limit for its own rows and key, fit and scoring
    seen: list[float] = []
    run = estimator.run_simulation

    def recording(roles, *, timeout, **options):  # type: ignore[no-untyped-def]
        seen.append(timeout)
        return run(roles, timeout=timeout, **options)

    monkeypatch.setattr(estimator, "run_simulation", recording)
    parts, y, test_parts, _ = breast
    model = small(max_iter=1).fit(parts, y, label_party="imaging")
    model.predict_proba(test_parts)
    rows = max(len(f) for f in parts.values())
    test_rows = max(len(f) for f in test_parts.values())
    assert seen == [wait_limit(None, rows, 512), wait_limit(None, test_rows, 512)]
    small(max_iter=1, timeout=7.0).fit(parts, y, label_party="imaging")
    assert seen[-1] == 7.0


@pytest.mark.parametrize("protocol", ["coordinator", "two_party"])
def test_packed_scoring_equals_the_parts_plaintext_sum(breast, protocol: str) -> None:  # type: ignore[no-untyped-def]
    from vfl.linear.scoring import score_layout

    parts, y, test_parts, _ = breast
    # unclipped, so that far-out test rows reach the partial-score bound below
    model = small(protocol=protocol, max_iter=2, clip_outliers=False)
    model.fit(parts, y, label_party="imaging")
    expected = sum(
        np.column_stack(
            [part.design(test_parts[name]), np.ones(len(test_parts[name]))]
            if name == "imaging"
            else [part.design(test_parts[name])]
        )
        @ part.weights(with_intercept=name == "imaging")
        for name, part in model.parts_.items()
    )[:, 0]
    # each partial score rounded to 2**-32: the sum within 2 * 2**-33
    np.testing.assert_allclose(model.decision_function(test_parts), expected, atol=2.0**-31)
    # 171 rows travel as ceil(171 / 22) packed ciphertexts, not one per row
    layout = score_layout(len(expected), 2, 1024)
    assert layout.slots >= 10 and layout.n_ciphertexts == -(-171 // layout.slots)
    far = {k: v * (1e6 if k == "lab" else 1) for k, v in test_parts.items()}
    with pytest.raises(ValueError, match="party 'lab': partial scores beyond 65536"):
        model.decision_function(far)
