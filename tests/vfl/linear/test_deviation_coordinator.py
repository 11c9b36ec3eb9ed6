"""Packings under the gradient-revealing protocols are derived from public sizes, never taken
from a party's word (issue #31): a passive that announces one 1020-bit slot per ciphertext
is refused by its peers and by the coordinator, naming it; the layout the coordinator pins
is the derived one; and what a party announces does not depend on its data's extremes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

import vfl.linear.exchange as exchange
import vfl.linear.protocol as protocol
from tests.vfl.linear.tables import small_model
from vfl.crypto import SecurityWarning
from vfl.crypto.packing import PackingLayout, RowPacking
from vfl.federation import PartyFailedError
from vfl.federation.messages import MessageError
from vfl.linear import VerticalLogisticRegression
from vfl.linear.exchange import GradientExchange, PublicSizes, plan_packing
from vfl.linear.messages import SetupCounts
from vfl.linear.model import feature_bits
from vfl.linear.protocol import check_setup
from vfl.training.schedule import Schedule

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")

LABEL, PASSIVE = "imaging", "lab"
ATTACK = {"slot_bits": 1020, "per_ct": 1}
"""The deviating passive's packing: one slot per ciphertext, as wide as a 1024-bit key allows."""


def small(**params: Any) -> VerticalLogisticRegression:
    base: dict[str, Any] = {"max_iter": 1, "tol": None, "batch_size": 64}
    base.update(params)
    return small_model(VerticalLogisticRegression, **base)


@pytest.fixture(scope="module")
def breast() -> tuple[dict[str, pd.DataFrame], pd.Series]:
    """The issue's table: all 569 rows, 10 columns at the label party, 20 at the passive."""
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    cols = list(x.columns)
    return {LABEL: x[cols[:10]], PASSIVE: x[cols[10:]]}, y


def synthetic(outlier: float | None) -> tuple[dict[str, pd.DataFrame], pd.Series]:
    """200 rows of Gaussian columns, three per party; with ``outlier``, the passive's first
    column holds it in row 0 (a standardised value near the public bound)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6))
    y = pd.Series((x @ rng.normal(size=6) + rng.normal(size=200) > 0).astype(int))
    if outlier is not None:
        x[0, 3] = outlier
    frame = pd.DataFrame(x, columns=[f"f{j}" for j in range(6)])
    return {LABEL: frame.iloc[:, :3], PASSIVE: frame.iloc[:, 3:]}, y


class OneSlotPerCiphertext(GradientExchange):
    """The deviating passive of issue #31: its rows packed one 1020-bit slot per ciphertext,
    announced alike to its peers and to the coordinator."""

    def own_packing(self) -> RowPacking:
        return RowPacking(self.x.shape[1], **ATTACK)


def deviating(monkeypatch: pytest.MonkeyPatch, party: str) -> None:
    """Have ``party`` run :class:`OneSlotPerCiphertext`, every other party the honest
    exchange."""

    def make(fed: Any, *args: Any, **kwargs: Any) -> GradientExchange:
        cls = OneSlotPerCiphertext if fed.name == party else GradientExchange
        return cls(fed, *args, **kwargs)

    monkeypatch.setattr(protocol, "GradientExchange", make)


def derived(columns: int, rows: int = 569, *, masked: bool = True) -> RowPacking:
    return plan_packing(
        columns, rows=rows, batch_size=64, contributors=1, key_bits=1024, masked=masked
    )


def test_what_a_chosen_packing_would_open_per_batch() -> None:
    """The attack's arithmetic on the issue's table: the old coordinator pinned the passive's
    requests to the layout it announced, 20 whole plaintexts per batch -- 10 whole rows of
    the label party (2 ciphertexts each), all 569 in 7 epochs. The derived layout has 3
    ciphertexts of 8 slots, each as narrow as the public sizes allow. (Within it, a passive
    that deviates can still swap 3 of the label party's row ciphertexts, half a row each,
    into its request per batch, their slots being as wide: the coordinator cannot see past
    the masks; see the warning of :mod:`vfl.linear.protocol`.)"""
    chosen = RowPacking(20, **ATTACK).masked_layout(1)
    assert (chosen.n_ciphertexts, chosen.slots) == (20, 1)
    label = derived(11)  # its 10 columns and the intercept
    # a label row's plaintext (its slots, below 2**1000) fits one chosen slot whole
    assert label.per_ct * label.slot_bits <= chosen.slot_bits
    rows_per_batch = chosen.n_ciphertexts // label.groups
    per_epoch = Schedule(569, 64, 0).batches_per_epoch()
    assert rows_per_batch == 10 and -(-569 // (rows_per_batch * per_epoch)) == 7
    pinned = derived(20).masked_layout(1)
    assert pinned == PackingLayout(count=24, value_bits=84, kappa=40, slots=8)
    assert pinned.n_ciphertexts == 3


@pytest.mark.parametrize("protocol_name", ["coordinator", "two_party"])
def test_a_passive_announcing_one_slot_per_ciphertext_is_refused_by_its_peer(
    breast: Any, monkeypatch: pytest.MonkeyPatch, protocol_name: str
) -> None:
    parts, y = breast
    deviating(monkeypatch, PASSIVE)
    with pytest.raises(PartyFailedError) as failed:
        small(protocol=protocol_name).fit(parts, y, label_party=LABEL)
    assert failed.value.party == LABEL
    message = str(failed.value.error)
    assert message.startswith(
        f"party {PASSIVE!r} sent a malformed encrypted rows header message: field 'packing' "
        "is {'columns': 20, 'slot_bits': 1020, 'per_ct': 1}, but 569 rows, batches of 64"
    )
    masked = protocol_name == "coordinator"
    assert str(derived(20, masked=masked).to_dict()) in message


def test_the_coordinator_refuses_a_packing_every_peer_accepted(
    breast: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With peers that take a packing on the sender's word (as before the fix), the
    coordinator still refuses it: it derives every party's packing itself."""
    parts, y = breast
    deviating(monkeypatch, PASSIVE)
    taking = exchange.exchange_rows

    def trusting(*args: Any, sizes: PublicSizes | None = None, **kwargs: Any) -> Any:
        return taking(*args, **kwargs)

    monkeypatch.setattr(exchange, "exchange_rows", trusting)
    with pytest.raises(PartyFailedError) as failed:
        small(protocol="coordinator").fit(parts, y, label_party=LABEL)
    assert failed.value.party == "coordinator"
    assert str(failed.value.error).startswith(
        f"party {PASSIVE!r} sent a malformed setup counts message: field 'packing' is "
        "{'columns': 20, 'slot_bits': 1020, 'per_ct': 1}, but 569 rows, batches of 64, "
        "1 contributing party and masked shares under a 1024-bit key give"
    )


def test_check_setup_derives_every_layout_and_names_the_deviating_party() -> None:
    honest = {LABEL: derived(11).to_dict(), PASSIVE: derived(20).to_dict()}

    def counts(packings: dict[str, dict[str, int]], rows: int = 569) -> dict[str, SetupCounts]:
        return {
            LABEL: SetupCounts(1, packings[LABEL], {PASSIVE: packings[PASSIVE]}, 569),
            PASSIVE: SetupCounts(1, packings[PASSIVE], {LABEL: packings[LABEL]}, rows),
        }

    layouts = check_setup(counts(honest), LABEL, 1024, batch_size=64)
    assert layouts == {
        LABEL: derived(11).masked_layout(1),
        PASSIVE: derived(20).masked_layout(1),
    }
    chosen = {**honest, PASSIVE: RowPacking(20, **ATTACK).to_dict()}
    with pytest.raises(MessageError, match=r"party 'lab' .* 'packing' .* not chosen"):
        check_setup(counts(chosen), LABEL, 1024, batch_size=64)
    # narrower than derived is refused too: slots that overflow silently are no better
    narrow = {**honest, LABEL: RowPacking(11, 100, 10).to_dict()}
    with pytest.raises(MessageError, match=r"party 'imaging' .* 'packing' .* not chosen"):
        check_setup(counts(narrow), LABEL, 1024, batch_size=64)
    with pytest.raises(MessageError, match=r"party 'lab' .* 'rows' is 570; the label party"):
        check_setup(counts(honest, rows=570), LABEL, 1024, batch_size=64)
    # the job's batch size is part of the derivation (0: the default for the rows)
    with pytest.raises(MessageError, match="batches of 128"):
        check_setup(counts(honest), LABEL, 1024, batch_size=128)


def test_the_announced_packing_is_the_same_whatever_the_datas_extremes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two tables whose passive's largest standardised value differs (about 3 and 13): the
    data-dependent bound would have told the other parties so; every setup message is the
    same, and the coordinator pins the layouts derived from the public sizes."""
    pinned: list[dict[str, PackingLayout]] = []
    checking = protocol.check_setup

    def recording(*args: Any, **kwargs: Any) -> dict[str, PackingLayout]:
        pinned.append(checking(*args, **kwargs))
        return pinned[-1]

    monkeypatch.setattr(protocol, "check_setup", recording)
    announced = []
    peaks = []
    for outlier in (None, 50.0):
        parts, y = synthetic(outlier)
        est = small(protocol="coordinator", clip_outliers=False)
        est.fit(parts, y, label_party=LABEL, keep_payloads=True)
        peaks.append(feature_bits(est.parts_[PASSIVE].design(parts[PASSIVE])))
        announced.append(
            sorted(
                (r.sender, r.receiver, r.tag, repr(r.payload()))
                for r in est.transcript_.records
                if r.tag in ("vlr/rows", "vlr/setup")
            )
        )
    assert peaks[0] != peaks[1]  # what the old packing was sized by
    assert announced[0] == announced[1]
    assert {tag for _, _, tag, _ in announced[0]} == {"vlr/rows", "vlr/setup"}
    sizes = PublicSizes(rows=200, batch_size=64, contributors=1, masked=True)
    expected = {LABEL: sizes.packing(4, 1024), PASSIVE: sizes.packing(3, 1024)}
    for layouts in pinned:
        assert layouts == {p: packing.masked_layout(1) for p, packing in expected.items()}


def test_a_design_beyond_the_public_bound_is_refused_naming_the_party_and_the_fix() -> None:
    """Unstandardised columns may exceed the bound the packings are sized for (the smallest
    power of two above sqrt(rows)): the party refuses to encrypt them."""
    parts, y = synthetic(None)
    wide = {**parts, PASSIVE: parts[PASSIVE].assign(f4=parts[PASSIVE]["f4"] * 100)}
    peak = float(wide[PASSIVE]["f4"].abs().max())
    with pytest.raises(
        PartyFailedError,
        match=rf"party 'lab': design column 1 holds {peak:.4g}, at or beyond the public "
        r"feature bound 16 for 200 rows .* keep standardize=True",
    ):
        small(protocol="two_party", standardize=False).fit(wide, y, label_party=LABEL)
