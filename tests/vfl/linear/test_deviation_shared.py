"""A data party that deviates from the secret-shared protocol gains at most a denial of
service: each deviation below is played by a party (a subclass of its role), and the job
stops naming it, or the deviation reaches nothing it could read.

The attacks are those of issue #31: the keep-bit decryption oracle (a passive that folds a
ciphertext it holds into the loss total the label party decrypts, then reads the keep bit),
the coordinator decrypting ciphertexts of the requester's choosing for the requester, and a
setup header that carried the magnitude of a party's values."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

import vfl.linear.base as base
from tests.vfl.linear.tables import small_model
from vfl.crypto import EncryptedVector, SecurityWarning
from vfl.crypto.messages import Encrypted
from vfl.crypto.policy import Base, PublicKeyMessage, vector_from
from vfl.federation import LocalFederation
from vfl.federation.base import PartyFailedError
from vfl.linear import VerticalLogisticRegression
from vfl.linear.budget import W_BITS
from vfl.linear.messages import VLR
from vfl.linear.shared import SS, SharedDataRole, _Keys
from vfl.training.control import EpochControl

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    x, y = x.iloc[:256], y.iloc[:256]  # small and quick: the deviations do not need more
    cols = list(x.columns)
    return {"imaging": x[cols[:10]], "lab": x[cols[10:]]}, y


def deviate(monkeypatch: pytest.MonkeyPatch, party: str, role: type[SharedDataRole]) -> None:
    """Have ``party`` run ``role`` instead of the honest one in the next fit."""

    def build(spec, part, x, targets):  # type: ignore[no-untyped-def]
        cls = role if part.party == party else SharedDataRole
        return cls(spec, part, x, targets)

    monkeypatch.setattr(base, "SharedDataRole", build)


def fit(parts, y, protocol: str = "shared", **params: Any) -> VerticalLogisticRegression:  # type: ignore[no-untyped-def]
    est = small_model(
        VerticalLogisticRegression, protocol=protocol, batch_size=128, max_iter=2, tol=None
    )
    est.set_params(**params)
    return est.fit(parts, y, label_party="imaging", keep_payloads=True)


class KeepBitOracle(SharedDataRole):
    """The attack of #31 on the loss: multiply the honest encrypted total by ``P**k *
    Enc(-k theta)`` for a plaintext ``P`` we hold encrypted under the label party's key (an
    entry of its Gram share, from setup), so that the loss it decrypts moves by ``k (P -
    theta)`` and its keep bit says whether ``P`` is above ``theta``. Before, the loss was under
    the same key as the setup's ciphertexts, and a binary search read the entry to six
    decimals in 40 epochs."""

    k = 1

    def _setup(self, x_int: Any, seed: int) -> dict[str, Any]:
        shares = super()._setup(x_int, seed)
        columns = shares["peer_s"][0]  # the label party's S columns, batch 0
        self.stolen = next(c for c in columns if c != 1)
        return shares

    def _loss_reply(self, got, m_share, v, own):  # type: ignore[no-untyped-def]
        honest = super()._loss_reply(got, m_share, v, own)
        key = honest.public_key
        steered = honest.ciphertexts[0] * pow(int(self.stolen), self.k, int(key.nsquare))
        return EncryptedVector(key, [steered % key.nsquare], 0)


def test_the_keep_bit_oracle_is_refused_naming_the_party(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    deviate(monkeypatch, "lab", KeepBitOracle)
    with pytest.raises(PartyFailedError, match=r"party 'lab' .*outside its public bounds"):
        fit(parts, y)


class LossShift(SharedDataRole):
    """A cruder steer: add a large constant to the loss total (the #31 report saw the label
    party accept -6.4e198)."""

    def _loss_reply(self, got, m_share, v, own):  # type: ignore[no-untyped-def]
        honest = super()._loss_reply(got, m_share, v, own)
        key = honest.public_key
        shift = EncryptedVector(key, key.raw_encrypt([(-(2**400)) % int(key.n)]), 0)
        return honest + shift


@pytest.mark.parametrize("protocol", ["shared", "shared_coordinator"])
def test_a_loss_beyond_its_bounds_is_refused(breast, monkeypatch, protocol) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    deviate(monkeypatch, "lab", LossShift)
    with pytest.raises(PartyFailedError, match=r"party 'lab' .*outside its public bounds"):
        fit(parts, y, protocol)


class GramRequest(SharedDataRole):
    """Under the coordinator: ask for the label party's encrypted Gram columns (which we hold
    from setup) to be decrypted in place of the product we should send. Before, the
    coordinator answered the requester, which read the label party's Gram 11 entries of 11."""

    def send_masked(self, tag, index, owner, vector, layout, **how):  # type: ignore[no-untyped-def]
        if tag == "prod" and hasattr(self, "columns"):
            stolen = [c for c in self.columns if c != 1][: layout.n_ciphertexts]
            vector = EncryptedVector(vector.public_key, stolen, 0)
        return super().send_masked(tag, index, owner, vector, layout, **how)

    def _setup(self, x_int: Any, seed: int) -> dict[str, Any]:
        shares = super()._setup(x_int, seed)
        self.columns = shares["peer_s"][0]
        return shares


def test_the_coordinator_answers_the_other_party(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    deviate(monkeypatch, "lab", GramRequest)
    with pytest.raises(PartyFailedError, match=r"party 'lab' sent"):
        fit(parts, y, "shared_coordinator")
    # the slots went to the label party (the transcript tests check that every answer goes
    # to the party that did not send the request), whose share of the gradient they spoilt:
    # its loss check names lab


def test_a_product_of_other_ciphertexts_is_refused(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    # without a coordinator: the label party decrypts what lab chose (its own Gram columns:
    # nothing lab can read); the slots fit their width here (the entries are positive), so
    # the spoilt share shows in the epoch's loss, which names lab
    deviate(monkeypatch, "lab", GramRequest)
    refused = r"party 'lab' .*(does not decrypt as this step|outside its public bounds)"
    with pytest.raises(PartyFailedError, match=refused):
        fit(parts, y)


class BadKept(SharedDataRole):
    """A label party that names an epoch its partner never had."""

    def _control(self, stop: bool, restart: bool, kept: int) -> EpochControl:
        return EpochControl(stop=stop, restart=restart, kept=99 if stop else kept)


def test_a_kept_epoch_out_of_range_is_refused_naming_the_label_party(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    deviate(monkeypatch, "imaging", BadKept)
    with pytest.raises(PartyFailedError, match=r"party 'imaging' .*field 'kept' is 99"):
        fit(parts, y, max_iter=1)


def test_the_partner_learns_no_keep_bit_only_where_to_go_back_to(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    est = fit(parts, y, max_iter=4)
    controls = [
        EpochControl.from_payload(r.payload(), "imaging")
        for r in est.transcript_.records
        if r.sender == "imaging" and r.receiver == "lab" and r.tag == "vlr/ss/epoch"
    ]
    assert len(controls) == 5  # before each of 4 epochs, then the stop
    assert not any(c.keep for c in controls)
    assert [c.kept for c in controls[:-1]] == [-1] * 4  # nothing said while training goes on
    assert controls[-1].stop and controls[-1].kept == est.best_epoch_


def test_the_setup_header_is_the_same_whatever_the_datas_extremes(breast) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    wild = {name: frame.copy() for name, frame in parts.items()}
    wild["lab"].iloc[0, 0] = float(wild["lab"].iloc[:, 0].max() * 50)  # z-score near 16
    headers = []
    for frames, clip in ((parts, True), (wild, False)):
        est = fit(frames, y, clip_outliers=clip, max_iter=1)
        peak = float(np.abs(est.parts_["lab"].design(frames["lab"])).max())
        sent = [
            (r.tag, r.payload())
            for r in est.transcript_.records
            if r.sender == "lab" and r.tag in ("vlr/rows", "vlr/ss/plan")
        ]
        headers.append((peak, [(t, p.get("packing"), p.get("columns")) for t, p in sent]))
    assert headers[0][0] < 8 and headers[1][0] > 12  # the extremes differ by far
    assert len(headers[0][1]) == 2  # the rows' header and the plan
    assert headers[0][1] == headers[1][1]  # what lab announces does not


class OwnPacking(SharedDataRole):
    """Announce a packing of our own rows other than the one the public sizes give (one
    column per ciphertext, as if our slots had to be wider)."""

    def _exchange_rows(self, x_int: Any) -> Any:
        real, me = self.sizes, self.me

        class Chosen(type(real)):  # type: ignore[misc]
            def row_packing(self, index: int) -> Any:
                packing = real.row_packing(index)
                if index != me:
                    return packing
                return type(packing)(packing.columns, packing.slot_bits * 2, 1)

        self.sizes = Chosen(**{f: getattr(real, f) for f in real.__dataclass_fields__})
        try:
            return super()._exchange_rows(x_int)
        finally:
            self.sizes = real


def test_a_row_packing_other_than_the_public_ones_is_refused(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    deviate(monkeypatch, "lab", OwnPacking)
    with pytest.raises(PartyFailedError, match=r"party 'lab' .*packing of its encrypted rows"):
        fit(parts, y, max_iter=1)


def test_a_base_that_is_no_residue_of_the_key_is_refused() -> None:
    """A peer hands us a base that is not an n-th residue of our key (our encryptions for it
    would fall outside the group its re-randomisation covers): refused, naming it."""
    spec = small_model(VerticalLogisticRegression).fit_spec("a", ["a", "b"])

    def deviant(fed):  # type: ignore[no-untyped-def]
        key, _ = spec.policy.generate()
        VLR.send(fed, "a", "key", PublicKeyMessage.of(key))
        VLR.recv(fed, "a", "key", PublicKeyMessage)
        SS.send(fed, "a", "base", Base(h_s=(2).to_bytes(key.ciphertext_bytes, "big")))
        SS.recv(fed, "a", "base", Base)

    roles = {"a": lambda fed: _Keys(fed, spec, ["b"]), "b": deviant}
    with pytest.raises(PartyFailedError, match=r"party 'b' .*field 'h_s'"):
        LocalFederation(timeout=30).run(roles)


class ForwardShift(SharedDataRole):
    """A third party that shifts the slots it forwards to the partner at setup (its share of
    ``X_C^T t``: an additive attack on the
    holder's share): the model is spoilt, which the loss's bounds or the final weights' bound
    catch -- a denial of service, nothing read."""

    def forward(self, tag, index, computer, to, layout):  # type: ignore[no-untyped-def]
        if self.keys.coordinator is not None:
            return None
        slots = [s + 2**110 for s in self.decrypt(tag, index, computer, layout)]
        from vfl.linear.shared import Integers

        SS.send(self.fed, to, f"{tag}-fwd", Integers(values=slots), index)
        return slots


def test_a_third_party_that_shifts_what_it_forwards_stops_the_fit(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    three = {**parts, "genomics": parts["lab"].iloc[:, :4]}
    deviate(monkeypatch, "genomics", ForwardShift)
    with pytest.raises(PartyFailedError, match=r"outside its public bounds|weights beyond"):
        fit(three, y)


class LossProbe(SharedDataRole):
    """The leak the protocol names: a label party that sends chosen values instead of its
    loss terms reads the partner's share of a weight from the loss, and so the weight."""

    probed: ClassVar[list[float]] = []

    def _epoch_loss(self, shares, v):  # type: ignore[no-untyped-def]
        span = len(shares["fixed"])
        self._gradient(shares, span, span, v, span)  # take part as usual
        j, big = self.sizes.block(1).start, 1 << 600  # lab's first weight
        terms = [0] * (2 * v.size)
        terms[v.size + j] = big  # against lab's share of w_j, in place of a share of m
        key = self.loss_key
        sent = EncryptedVector(key, key.raw_encrypt(terms), 0, fresh=True)
        SS.send(self.fed, self.order[1], "loss", Encrypted(data=sent.to_wire()))
        got = SS.recv(self.fed, self.order[1], "loss-total", Encrypted).data
        total = vector_from(key, got, self.order[1])
        n = int(key.n)
        raw = int(self.loss_secret.raw_decrypt(total.ciphertexts)[0])
        value = raw - n if raw > n // 2 else raw  # -(big * v_B[j] + <v_B, m_B>)
        share = (-value + big // 2) // big
        LossProbe.probed.append((int(v[j, 0]) + share) / 2.0**W_BITS)
        return 1.0 / len(LossProbe.probed)  # a falling loss: the last epoch is kept


def test_a_label_party_that_sends_chosen_loss_terms_reads_the_weights(breast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parts, y = breast
    LossProbe.probed = []
    deviate(monkeypatch, "imaging", LossProbe)
    est = fit(parts, y, max_iter=2, key_bits=1024)
    assert len(LossProbe.probed) == 2 and est.best_epoch_ == 2
    # the named leak: lab's first weight at the kept epoch, read exactly
    assert LossProbe.probed[-1] == pytest.approx(est.parts_["lab"].coef[0], abs=1e-6)


def test_a_peers_key_below_the_policy_is_refused_naming_it() -> None:
    """A peer (or the label party, for its loss key) that hands over a 1024-bit key, where
    the policy wants 2048 bits: refused, naming it, before anything is encrypted under it."""
    from vfl.crypto.policy import KeyPolicy
    from vfl.federation.messages import MessageError

    weak, _ = KeyPolicy(1024, insecure=True).generate()
    with pytest.raises(MessageError, match=r"party 'lab' .*1024-bit key; at least 2048"):
        KeyPolicy(2048, insecure=False).accept(PublicKeyMessage.of(weak), "lab")
