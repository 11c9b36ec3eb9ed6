"""Tests for vfl.privacy.ledger: per-holder epsilon equals dp-accounting's, JSON, threads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from vfl.privacy import LedgerEntry, PrivacyLedger, record_blip, record_randomized_response

DELTA = 1e-5
DIRECT = {"rdp": RdpAccountant, "pld": PLDAccountant}


def _sampled_gaussian(noise_multiplier: float, rate: float, steps: int) -> object:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(noise_multiplier)),
        steps,
    )


def _ledger() -> PrivacyLedger:
    ledger = PrivacyLedger(delta=DELTA)
    ledger.record(
        holder="lab",
        data="lab results: gradients",
        mechanism="gaussian",
        noise_multiplier=1.1,
        sensitivity=1.0,
        sampling_rate=0.01,
        steps=400,
    )
    ledger.record(holder="lab", data="lab results: counts", mechanism="laplace", epsilon=0.5)
    ledger.record(
        holder="imaging",
        data="scans: gradients",
        mechanism="gaussian",
        noise_multiplier=0.8,
        sampling_rate=0.05,
        steps=200,
    )
    return ledger


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_holder_epsilon_is_dp_accountings(accountant: str) -> None:
    ledger = _ledger()
    lab = DIRECT[accountant]()
    lab.compose(_sampled_gaussian(1.1, 0.01, 400))
    lab.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(1 / 0.5), 1))
    imaging = DIRECT[accountant]().compose(_sampled_gaussian(0.8, 0.05, 200))
    assert ledger.epsilon(holder="lab", accountant=accountant) == pytest.approx(
        lab.get_epsilon(DELTA), rel=1e-12
    )
    # Holders are kept apart: imaging's entry does not touch lab's figure, nor lab's imaging's.
    assert ledger.epsilon(holder="imaging", accountant=accountant) == pytest.approx(
        imaging.get_epsilon(DELTA), rel=1e-12
    )
    # No holder: a person in both holders' data (a vertical federation) spends all of it.
    everything = DIRECT[accountant]()
    for event in (
        _sampled_gaussian(1.1, 0.01, 400),
        dp_accounting.LaplaceDpEvent(2.0),
        _sampled_gaussian(0.8, 0.05, 200),
    ):
        everything.compose(event)
    assert ledger.epsilon(accountant=accountant) == pytest.approx(
        everything.get_epsilon(DELTA), rel=1e-12
    )


def test_single_gaussian_schedule_and_other_delta() -> None:
    ledger = PrivacyLedger(delta=1e-6, accountant="pld")
    ledger.record(
        holder="h",
        data="x",
        mechanism="gaussian",
        noise_multiplier=1.3,
        sampling_rate=0.02,
        steps=250,
    )
    event = _sampled_gaussian(1.3, 0.02, 250)
    assert ledger.epsilon() == pytest.approx(PLDAccountant().compose(event).get_epsilon(1e-6))
    assert ledger.epsilon(1e-3, accountant="rdp") == pytest.approx(
        RdpAccountant().compose(event).get_epsilon(1e-3), rel=1e-12
    )


def test_blip_is_composed_per_bit() -> None:
    ledger = PrivacyLedger(delta=DELTA, accountant="pld")
    entry = record_blip(ledger, holder="lab", epsilon_per_bit=1.5, bits_per_record=4)
    assert entry.mechanism == "randomized_response"
    assert (entry.epsilon, entry.steps, entry.sampling_rate) == (1.5, 4, 1.0)
    assert ledger.epsilon(1e-12) == pytest.approx(6.0, rel=1e-3)  # four pure 1.5-DP bits
    assert ledger.epsilon(accountant="rdp") == pytest.approx(6.0, abs=0.01)


def test_randomized_response_of_labels_is_one_pure_epsilon_release() -> None:
    ledger = PrivacyLedger(delta=DELTA, accountant="pld")
    entry = record_randomized_response(ledger, holder="lab", epsilon=1.5)
    assert (entry.holder, entry.mechanism, entry.data) == (
        "lab",
        "randomized_response",
        "its labels (randomised response)",
    )
    assert (entry.epsilon, entry.steps) == (1.5, 1)
    assert ledger.epsilon(1e-12) == pytest.approx(1.5, rel=1e-3)
    with pytest.raises(ValueError, match="epsilon"):
        record_randomized_response(ledger, holder="lab", epsilon=-1.0)


def test_blip_without_bit_count_warns(caplog: pytest.LogCaptureFixture) -> None:
    ledger = PrivacyLedger()
    entry = record_blip(ledger, holder="lab", epsilon_per_bit=2.0)
    assert entry.steps == 1
    assert "bits_per_record" in caplog.text


def test_empty_ledger_and_holders() -> None:
    ledger = PrivacyLedger()
    assert ledger.epsilon() == 0.0
    assert ledger.holders() == []
    assert _ledger().holders() == ["lab", "imaging"]


def test_table_lists_entries_and_totals() -> None:
    ledger = _ledger()
    table = ledger.table()
    assert str(ledger) == table
    lines = table.splitlines()
    assert lines[0] == "privacy ledger: epsilon at delta=1e-05 (rdp accountant)"
    assert lines[1].split() == ["holder", "data", "mechanism", "params", "q", "steps", "epsilon"]
    assert len(lines) == 2 + 3 + 2  # entries, lab's total, the overall total
    assert "noise_multiplier=1.1, sensitivity=1" in table
    assert f"{ledger.epsilon(holder='lab'):.4g}" in lines[4]
    assert lines[-1].startswith("(all holders)")
    assert lines[-1].endswith(f"{ledger.epsilon():.4g}")


def test_to_frame() -> None:
    frame = _ledger().to_frame()
    assert list(frame["holder"]) == ["lab", "lab", "imaging"]
    assert "epsilon_spent" in frame.columns
    assert frame["epsilon_spent"].iloc[1] == pytest.approx(
        RdpAccountant().compose(dp_accounting.LaplaceDpEvent(2.0)).get_epsilon(DELTA)
    )


def test_json_round_trip_and_save_load(tmp_path: Path) -> None:
    ledger = _ledger()
    again = PrivacyLedger.from_json(ledger.to_json())
    assert again.entries == ledger.entries
    assert (again.delta, again.accountant) == (ledger.delta, ledger.accountant)
    path = tmp_path / "ledger.json"
    ledger.save(path)
    assert json.loads(path.read_text())["format"] == "vflink.privacy_ledger"
    loaded = PrivacyLedger.load(path)
    assert loaded.entries == ledger.entries
    assert loaded.epsilon(holder="lab") == ledger.epsilon(holder="lab")
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]  # no temporary file left


def test_bad_json_is_refused_with_the_entry_named(tmp_path: Path) -> None:
    document = json.loads(_ledger().to_json())
    document["entries"][1]["steps"] = 0
    with pytest.raises(ValueError, match=r"privacy ledger entry 1: .*steps must be a positive"):
        PrivacyLedger.from_json(json.dumps(document))
    document["entries"][1]["steps"] = 1
    document["entries"][0]["colour"] = "red"
    with pytest.raises(ValueError, match=r"entry 0: unknown ledger entry fields \['colour'\]"):
        PrivacyLedger.from_json(json.dumps(document))
    with pytest.raises(ValueError, match="not a privacy ledger"):
        PrivacyLedger.from_json('{"entries": []}')
    with pytest.raises(ValueError, match="version 9 is not supported"):
        PrivacyLedger.from_json('{"format": "vflink.privacy_ledger", "version": 9}')
    with pytest.raises(ValueError, match="must be JSON"):
        PrivacyLedger.from_json("{")
    path = tmp_path / "broken.json"
    path.write_text("[]")
    with pytest.raises(ValueError, match=r"broken\.json: not a privacy ledger"):
        PrivacyLedger.load(path)


def test_bad_entries_list_every_problem() -> None:
    ledger = PrivacyLedger()
    with pytest.raises(
        ValueError, match=r"unknown mechanism 'moments'.*\['exponential', 'gaussian'"
    ):
        ledger.record(holder="lab", data="x", mechanism="moments")
    with pytest.raises(ValueError, match=r"holder must be.*noise_multiplier must be a positive"):
        ledger.record(holder="", data="x", mechanism="gaussian")
    with pytest.raises(
        ValueError, match=r"gaussian is recorded by noise_multiplier, not epsilon=1"
    ):
        ledger.record(holder="lab", data="x", mechanism="gaussian", noise_multiplier=1, epsilon=1)
    with pytest.raises(ValueError, match=r"randomized_response cannot be accounted on a Poisson"):
        ledger.record(
            holder="lab", data="x", mechanism="randomized_response", epsilon=1, sampling_rate=0.5
        )
    with pytest.raises(ValueError, match=r"sampling_rate must be a number in \(0, 1\], got 0"):
        ledger.record(holder="lab", data="x", mechanism="laplace", epsilon=1, sampling_rate=0)
    with pytest.raises(ValueError, match=r"timestamp must be an ISO 8601 time, got 'yesterday'"):
        LedgerEntry(holder="lab", data="x", mechanism="laplace", epsilon=1, timestamp="yesterday")
    assert len(ledger) == 0
    with pytest.raises(ValueError, match=r"holder 'clinic' has no ledger entries; holders: \["):
        _ledger().epsilon(holder="clinic")
    with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\), got 0"):
        PrivacyLedger(delta=0)
    with pytest.raises(ValueError, match=r"unknown accountant 'moments'; valid accountants"):
        PrivacyLedger(accountant="moments")


def test_record_is_thread_safe() -> None:
    ledger = PrivacyLedger()

    def spend(holder: str) -> None:
        for step in range(200):
            ledger.record(holder=holder, data=f"batch {step}", mechanism="laplace", epsilon=0.1)

    threads = [threading.Thread(target=spend, args=(f"party {i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ledger) == 1600
    assert sorted(ledger.holders()) == sorted(f"party {i}" for i in range(8))


def test_import_is_light() -> None:
    # linkage's package and its lazy-export helper are the floor every package stands on;
    # none of linkage's pandas-bound modules may load
    code = (
        "import sys, vfl.privacy; "
        "print(sorted(m for m in sys.modules if m in ('pandas', 'sklearn', 'torch', "
        "'dp_accounting') or (m.startswith('linkage.') and m != 'linkage.lazy')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"


def test_a_spend_repeated_every_round_is_one_line_of_the_table() -> None:
    ledger = PrivacyLedger()
    for _ in range(10):
        ledger.record(holder="clients", data="d", mechanism="gaussian", noise_multiplier=2.0)
    ledger.record(holder="clients", data="d", mechanism="gaussian", noise_multiplier=3.0)
    lines = ledger.table().splitlines()
    assert len(lines) == 2 + 2 + 1  # two kinds of spend, then the holder's total
    ten = PrivacyLedger()  # the ten rounds' line spends what one entry of ten steps does
    ten.record(holder="c", data="d", mechanism="gaussian", noise_multiplier=2.0, steps=10)
    assert lines[2].split()[-2:] == ["10", f"{ten.epsilon():.4g}"]
