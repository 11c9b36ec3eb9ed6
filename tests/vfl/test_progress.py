"""Progress people can read: bars appear for large calls only, every bar and line names its
party and stage, two simulated parties never share an unlabelled line, epochs show live with
``verbose``, and VFLINK_PROGRESS=0 hides it all."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from linkage import progress as shown
from vfl.crypto import SecurityWarning, generate_paillier_keypair, keys, vector
from vfl.estimator import run_simulation
from vfl.federation.base import Federation
from vfl.progress import EpochProgress, current_party, party_context, progress, stage


@pytest.fixture(autouse=True)
def _automatic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the default choice (captured output: whole lines)."""
    monkeypatch.delenv("VFLINK_PROGRESS", raising=False)


def _small_key() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        public, _ = generate_paillier_keypair(512, insecure=True)
    return public


def test_progress_bars_for_large_calls_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    public = _small_key()
    x = np.arange(40.0)
    public.encrypt(x)
    np.ones((3, 40)) @ public.encrypt(x)
    assert "encrypting" not in capsys.readouterr().err  # small: no bar
    monkeypatch.setattr(keys, "PROGRESS_MIN_VALUES", 1)
    monkeypatch.setattr(vector, "PROGRESS_MIN_TERMS", 1)
    public.encrypt(x)
    np.ones((3, 40)) @ public.encrypt(x)
    err = capsys.readouterr().err
    assert "encrypting values 0/40" in err and "encrypting values 40/40 in" in err
    assert "matrix @ ciphertexts, rows 3/3 in" in err
    monkeypatch.setenv("VFLINK_PROGRESS", "0")
    public.encrypt(x)
    assert "encrypting" not in capsys.readouterr().err


def test_a_stage_names_its_party_with_thousands_separators(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with party_context("lab"):
        assert current_party() == "lab"
        with stage("encrypting rows", total=30_000, show=True) as rows:
            rows.advance(12_000)
            rows.advance(18_000)
        assert list(progress(range(3), total=3, desc="comparing", show=True)) == [0, 1, 2]
    assert current_party() is None
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "lab: encrypting rows 0/30,000"
    assert re.fullmatch(r"lab: encrypting rows 30,000/30,000 in \d+\.\d s", lines[1])
    assert lines[2] == "lab: comparing 0/3" and lines[3].startswith("lab: comparing 3/3 in ")
    with stage("quiet", total=5, show=False) as quiet:  # too small to show
        quiet.advance(5)
    assert capsys.readouterr().err == ""


def test_two_simulated_parties_never_draw_an_unlabelled_bar(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keys, "PROGRESS_MIN_VALUES", 1)
    keys_by_party = {"lab": _small_key(), "imaging": _small_key()}

    def role(party: str) -> Callable[[Federation], int]:
        def run(fed: Federation) -> int:
            for _ in range(3):
                keys_by_party[party].encrypt(np.arange(300.0))
            return 0

        return run

    run_simulation({p: role(p) for p in keys_by_party}, timeout=60.0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines, "the parties showed nothing"
    assert all(re.match(r"(lab|imaging): encrypting values ", line) for line in lines), lines
    assert {line.split(":")[0] for line in lines} == {"lab", "imaging"}
    assert not any("\r" in line for line in lines)  # whole lines, never a bar redrawn


def test_bars_on_a_terminal_take_a_line_each_and_give_it_back(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VFLINK_PROGRESS", "bars")
    with party_context("lab"):
        first = shown.Stage("encrypting values", total=10)
    with party_context("imaging"):
        second = shown.Stage("encrypting values", total=10)
    assert (first.mode, second.mode) == ("bars", "bars")
    assert first._bar.pos != second._bar.pos  # two lines, never one fought over
    first.advance(10)
    first.close()
    with party_context("imaging"):
        third = shown.Stage("comparing encodings, rows", total=4)
    assert abs(third._bar.pos) == abs(first._bar.pos)  # the freed line, reused
    second.close()
    third.close()
    err = capsys.readouterr().err
    assert "lab: encrypting values" in err and "imaging: encrypting values" in err
    assert "imaging: comparing encodings, rows" in err


def test_the_thread_of_a_local_federation_names_its_party() -> None:
    from vfl.federation.local import LocalFederation

    found = LocalFederation().run({"lab": lambda fed: current_party()})
    assert found == {"lab": "lab"}


def test_epoch_lines_name_the_party_and_show_the_figures(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with EpochProgress("lab", 30, verbose=1) as epochs:
        epochs.update(3, loss=0.41234, step=0.21, best=3)
        epochs.update(4, loss=0.4, val_loss=0.5, best=3, skipped=None)
        epochs.note("stopped early, kept epoch 3")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "lab: epoch 3/30 loss 0.4123 step 0.21 best 3",
        "lab: epoch 4/30 loss 0.4000 val loss 0.5000 best 3",
        "lab: epoch 4/30 loss 0.4000 val loss 0.5000 best 3 (stopped early, kept epoch 3)",
    ]
    with EpochProgress("lab", 30, verbose=0) as quiet:  # verbose=0: only configured logging
        quiet.update(1, loss=0.5)
    assert capsys.readouterr().err == ""
    caplog.set_level(logging.INFO, logger="vflink.progress")
    with EpochProgress("lab", 30, verbose=0) as logged:
        logged.update(2, loss=0.5, best=2)
    assert "lab: epoch 2/30 loss 0.5000 best 2" in caplog.messages
    assert capsys.readouterr().err == ""  # logged, not written twice


def test_an_epoch_bar_on_a_terminal_and_lines_when_deployed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VFLINK_PROGRESS", "bars")
    with party_context("lab"):
        bar = EpochProgress(None, 30, verbose=1)
        assert bar.bars
        bar.update(3, loss=0.41234, best=3)
        bar.close()
    err = capsys.readouterr().err
    assert "lab: epoch" in err and "loss 0.4123 best 3" in err  # the bar and its postfix
    assert err.rstrip().endswith("lab: epoch 3/30 loss 0.4123 best 3")  # the last figures
    with party_context("lab", deployed=True):
        lines = EpochProgress(None, 30, verbose=1)
        assert not lines.bars
        lines.update(1, loss=0.5)
        lines.close()
    assert capsys.readouterr().err == "lab: epoch 1/30 loss 0.5000\n"
    monkeypatch.setenv("VFLINK_PROGRESS", "0")
    with EpochProgress("lab", 30, verbose=1) as silent:
        silent.update(1, loss=0.5)
    assert capsys.readouterr().err == ""


def test_split_learning_shows_its_epochs_with_verbose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from vfl import SplitNNClassifier

    x, y = load_breast_cancer(return_X_y=True, as_frame=True)
    parts: dict[str, pd.DataFrame] = {"lab": x.iloc[:, :12], "imaging": x.iloc[:, 12:]}
    SplitNNClassifier(max_iter=2, tol=None, verbose=1).fit(parts, y, label_party="imaging")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"imaging: epoch 1/2 loss \d\.\d{4} val loss \d\.\d{4} best 1", lines[0])
    SplitNNClassifier(max_iter=2, tol=None).fit(parts, y, label_party="imaging")
    assert capsys.readouterr().err == ""  # verbose=0: silent
    with pytest.raises(ValueError, match="verbose must be an integer >= 0"):
        SplitNNClassifier(max_iter=1, verbose=-1).fit(parts, y, label_party="imaging")


def test_linkage_names_the_party_that_encodes_and_compares(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from linkage import Field, Schema, dice_pairs, encode, encoding, matching

    monkeypatch.setattr(encoding, "PROGRESS_MIN_RECORDS", 1)
    monkeypatch.setattr(matching, "PROGRESS_MIN_PAIRS", 1)
    frame = pd.DataFrame({"id": [f"P{k:04d}" for k in range(30)]})
    schema = Schema([Field("id", "id")])
    with party_context("lab"):
        a = encode(frame, schema, secret="a secret of 16 bytes or more")
    with party_context("linkage unit"):
        dice_pairs(a, a, chunk=8)
    err = capsys.readouterr().err
    assert re.search(r"^lab: encoding 30 records, fields 2/2 in \d", err, flags=re.M)
    assert re.search(r"^linkage unit: comparing encodings, rows 30/30 in \d", err, flags=re.M)
    with party_context("lab"), pytest.raises(ValueError, match="at least 16 bytes"):
        encode(frame, schema, secret="short")
    assert (
        capsys.readouterr().err.splitlines()[-1] == "lab: encoding 30 records, fields 0/2 stopped"
    )
