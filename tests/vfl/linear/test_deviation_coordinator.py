"""Issue #31 under the gradient-revealing protocols. Packings are derived from public sizes,
never taken from a party's word: a passive that announces one 1020-bit slot per ciphertext
is refused by its peers and by the coordinator, naming it; the layout the coordinator pins
is the derived one; and what a party announces does not depend on its data's extremes.
Decryptions are routed: under ``coordinator`` no party reads the decryption of a request it
assembled, so a passive that swaps the label party's encrypted rows into one gets nothing
back, and one that sends malformed masks is refused, naming it."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

import vfl.linear.exchange as exchange
import vfl.linear.protocol as protocol
from tests.vfl.linear.tables import small_model
from vfl.crypto import SecurityWarning
from vfl.crypto.masked import DecryptionRequest, mask_slots
from vfl.crypto.packing import PackingLayout, RowPacking
from vfl.federation import PartyFailedError
from vfl.federation.messages import MessageError
from vfl.linear import VerticalLogisticRegression
from vfl.linear.exchange import GradientExchange, PublicSizes, plan_packing
from vfl.linear.messages import SetupCounts
from vfl.linear.model import feature_bits
from vfl.linear.protocol import check_setup
from vfl.linear.routing import SlotMasks, assembler_of
from vfl.training.schedule import Schedule

pytestmark = pytest.mark.filterwarnings(f"ignore::{SecurityWarning.__module__}.SecurityWarning")

LABEL, PASSIVE = "imaging", "lab"
ATTACK = {"slot_bits": 1020, "per_ct": 1}
"""The deviating passive's packing: one slot per ciphertext, as wide as a 1024-bit key allows."""


def small(**params: Any) -> VerticalLogisticRegression:
    # 1024-bit keys: the expected messages below hold their packing layouts
    base: dict[str, Any] = {"max_iter": 1, "tol": None, "batch_size": 64, "key_bits": 1024}
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


def deviating(
    monkeypatch: pytest.MonkeyPatch,
    party: str,
    cls: type[GradientExchange] = OneSlotPerCiphertext,
) -> None:
    """Have ``party`` run ``cls``, every other party the honest exchange."""

    def make(fed: Any, *args: Any, **kwargs: Any) -> GradientExchange:
        return (cls if fed.name == party else GradientExchange)(fed, *args, **kwargs)

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
    that assembled its own request could still swap in 3 of the label party's row
    ciphertexts per batch, their slots being as wide, all 569 rows in 43 epochs: hence the
    routing, tested below.)"""
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
    assert -(-569 * label.groups // (pinned.n_ciphertexts * per_epoch)) == 43


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


def split_breast(*sizes: int) -> tuple[dict[str, pd.DataFrame], pd.Series]:
    """Breast cancer's 30 columns split in order among the label party, the passive party
    and, with three sizes, a third party."""
    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    names, parts, start = [LABEL, PASSIVE, THIRD], {}, 0
    for name, size in zip(names, sizes, strict=False):
        parts[name] = x.iloc[:, start : start + size]
        start += size
    return parts, y


THIRD = "genomics"


def decryptions(est: Any) -> dict[tuple[str, int], tuple[set[str], set[str]]]:
    """Per decryption step (``vlr/grad``, ``vlr/loss``) and size (the layout's slots): the
    parties that sent such requests to the coordinator and those that received its answers
    (each party's requests have a size of their own in the splits used here, so the sizes
    pair them)."""
    sent: dict[tuple[str, int], set[str]] = {}
    answered: dict[tuple[str, int], set[str]] = {}
    for record in est.transcript_.records:
        if record.tag.endswith("/req"):
            step = (record.tag.removesuffix("/req"), record.payload()["layout"]["count"])
            sent.setdefault(step, set()).add(record.sender)
        elif record.tag.endswith("/plain"):
            step = (record.tag.removesuffix("/plain"), len(record.payload()["slots"]))
            answered.setdefault(step, set()).add(record.receiver)
    assert set(sent) == set(answered)
    return {step: (sent[step], answered[step]) for step in sent}


@pytest.mark.parametrize("sizes", [(10, 20), (4, 9, 17)])
def test_no_party_reads_the_decryption_of_a_request_it_sent(sizes: tuple[int, ...]) -> None:
    """The principle of the routing: the party that chose a ciphertext never sees its
    decryption, the party that sees a decryption never chose the ciphertext. The label party
    assembles every passive party's gradient requests, the first passive party the label
    party's and its loss; all a party sends towards its own decryption is its masks, plain
    integers (the label party's 11 columns take 16 slots, the passive's 20 take 24; with
    three parties 5, 9 and 17 columns take 8, 16 and 24)."""
    parts, y = split_breast(*sizes)
    est = small(protocol="coordinator", max_iter=2)
    est.fit(parts, y, label_party=LABEL, keep_payloads=True)
    seen = decryptions(est)
    slots = {LABEL: 16, PASSIVE: 24} if len(sizes) == 2 else {LABEL: 8, PASSIVE: 16, THIRD: 24}
    expected = {("vlr/grad", slots[p]): (set(), {p}) for p in parts}
    expected[("vlr/loss", 1)] = ({PASSIVE}, {LABEL})
    for p in parts:
        expected[("vlr/grad", slots[p])][0].add(PASSIVE if p == LABEL else LABEL)
    assert seen == expected
    assert all(not senders & receivers for senders, receivers in seen.values())
    masks = [r for r in est.transcript_.records if r.tag.endswith("/masks")]
    routes = {(r.tag, r.sender, r.receiver) for r in masks}
    assert routes == {
        *(("vlr/grad/masks", p, PASSIVE if p == LABEL else LABEL) for p in parts),
        ("vlr/loss/masks", LABEL, PASSIVE),
    }
    assert all(isinstance(m, int) for r in masks for m in r.payload()["masks"])


class SwapsInLabelRows(GradientExchange):
    """The deviating passive of issue #31 as an assembler: into the label party's gradient
    request of each batch it puts the label party's encrypted rows (the next one each batch,
    its two column groups), in the layout the coordinator pins for that request -- or, as
    the old attack did, as many row ciphertexts as its own request has (``OWN_SIZE``)."""

    OWN_SIZE = False
    taken = 0

    def assemble_for(self, receiver: str, share: Any) -> None:
        rows = self.peers[LABEL]
        packing = self.packing if self.OWN_SIZE else rows.packing
        layout = packing.masked_layout(self.outputs)
        picked = np.arange(self.taken, self.taken + 2)
        self.taken += 1
        stolen = [c for r in picked for store in rows.groups for c in store.take(r[None])]
        total = exchange.EncryptedVector(self.key, stolen[: layout.n_ciphertexts], 0)
        if not self.OWN_SIZE:
            exchange.assemble(self.fed, receiver, "coordinator", exchange.GRAD, total, layout)
            return
        exchange.GRAD.recv(self.fed, receiver, "masks", SlotMasks)  # too few for this size
        masked, _ = mask_slots(total, layout)  # its own masks
        request = DecryptionRequest(data=masked.to_wire(), layout=layout.to_dict())
        exchange.GRAD.send(self.fed, "coordinator", "req", request)


def test_a_passive_that_swaps_the_label_partys_rows_into_a_request_gets_nothing_back(
    breast: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator opens the label party's rows -- for the label party, which knew them:
    the passive that chose them receives no answer of that request's size, and the label
    party's view of each batch is one of its own rows."""
    parts, y = breast
    deviating(monkeypatch, PASSIVE, SwapsInLabelRows)
    est = small(protocol="coordinator")
    est.fit(parts, y, label_party=LABEL, keep_payloads=True, keep_views=True)
    assert decryptions(est)[("vlr/grad", 16)] == ({PASSIVE}, {LABEL})
    x = est.parts_[LABEL].design(parts[LABEL])
    x = np.column_stack([x, np.ones(len(x))])  # its intercept column, last
    for k, (_, opened) in enumerate(est.views_[LABEL]):
        row = np.round(x[k] * 2.0**exchange.FEATURE_BITS) / 2.0**exchange.FEATURE_BITS
        np.testing.assert_array_equal(opened[:, 0] * 2.0**exchange.SCORE_BITS, row)


def test_a_request_of_the_passives_own_size_is_refused_naming_it(
    breast: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows stuffed into a request of the passive's own size (3 ciphertexts, the old attack's
    count) where the label party's request has 2: the coordinator refuses it, naming the
    passive that assembled it."""
    parts, y = breast

    class OwnSize(SwapsInLabelRows):
        OWN_SIZE = True

    deviating(monkeypatch, PASSIVE, OwnSize)
    with pytest.raises(PartyFailedError) as failed:
        small(protocol="coordinator").fit(parts, y, label_party=LABEL)
    assert failed.value.party == "coordinator"
    assert str(failed.value.error) == (
        f"party {PASSIVE!r} sent a malformed decryption request message: field 'data' asks "
        "for 3 decryptions; this step has 2"
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda m: [*m, m[0]], "holds 25 values; the layout has 24 slots"),
        (lambda m: [1 << 200, *m[1:]], r"item 0 is \d+, not a mask of this layout"),
        (lambda m: [0, *m[1:]], r"item 0 is 0, not a mask of this layout"),
    ],
)
def test_masks_of_another_count_or_range_are_refused_naming_the_sender(
    breast: Any, monkeypatch: pytest.MonkeyPatch, change: Any, problem: str
) -> None:
    """A mask beyond its slot would spill into the next one, or have the coordinator refuse
    the request naming its assembler: the assembler refuses it, naming the sender."""
    parts, y = breast
    sending = exchange.send_masks

    def send(fed: Any, assembler: str, tags: Any, masks: Any) -> None:
        if fed.name != PASSIVE:
            return sending(fed, assembler, tags, masks)
        changed = SlotMasks(masks=change(list(masks.masks)))
        tags.send(fed, assembler, "masks", changed)

    monkeypatch.setattr(exchange, "send_masks", send)
    with pytest.raises(PartyFailedError) as failed:
        small(protocol="coordinator").fit(parts, y, label_party=LABEL)
    assert failed.value.party == LABEL
    assert re.fullmatch(
        f"party 'lab' sent a malformed decryption masks message: field 'masks' {problem}"
        r"( \(2\*\*83 plus 124 random bits\))?",
        str(failed.value.error),
    )


def test_the_assembler_of_each_party() -> None:
    order = ["lab", LABEL, THIRD]
    assert [assembler_of(p, LABEL, order) for p in order] == [LABEL, "lab", LABEL]
    with pytest.raises(ValueError, match="party 'imaging' has no other data party"):
        assembler_of(LABEL, LABEL, [LABEL])
