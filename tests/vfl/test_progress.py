"""Progress bars appear for large calls only, and VFLINK_PROGRESS=0 hides them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vfl.crypto import SecurityWarning, generate_paillier_keypair, keys, vector


def test_progress_bars_for_large_calls_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        public, _ = generate_paillier_keypair(512, insecure=True)
    x = np.arange(40.0)
    public.encrypt(x)
    np.ones((3, 40)) @ public.encrypt(x)
    assert "encrypting" not in capsys.readouterr().err  # small: no bar
    monkeypatch.setattr(keys, "PROGRESS_MIN_VALUES", 1)
    monkeypatch.setattr(vector, "PROGRESS_MIN_TERMS", 1)
    public.encrypt(x)
    np.ones((3, 40)) @ public.encrypt(x)
    err = capsys.readouterr().err
    assert "encrypting" in err
    assert "matrix @ ciphertexts" in err
    monkeypatch.setenv("VFLINK_PROGRESS", "0")
    public.encrypt(x)
    assert "encrypting" not in capsys.readouterr().err
