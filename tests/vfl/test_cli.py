"""The vflink console command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import vfl
from vfl.app.cli import main


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"vflink {vfl.__version__}"
    assert main([]) == 0
    assert "cohort" in capsys.readouterr().out


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).with_name("vflink")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True)
    assert "usage: vflink" in out.stdout


def test_cohort_writes_three_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "cohort",
                "--out",
                str(tmp_path),
                "--n-patients",
                "300",
                "--overlap",
                "0.5",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    lab = pd.read_csv(
        tmp_path / "lab.csv", index_col="record_id", dtype={"date_of_birth": str, "postcode": str}
    )
    imaging = pd.read_csv(tmp_path / "imaging.csv", index_col="record_id")
    pairs = pd.read_csv(tmp_path / "true_pairs.csv")
    assert len(pairs) == 150 and len(lab) + len(imaging) - 150 == 300
    assert set(pairs["lab"]) <= set(lab.index) and set(pairs["imaging"]) <= set(imaging.index)
    assert lab["postcode"].dropna().str.len().eq(5).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "identity_schema.json",
        "imaging.csv",
        "lab.csv",
        "true_pairs.csv",
    ]
    assert "150 true pairs" in capsys.readouterr().out


def test_cohort_bad_argument_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cohort", "--out", str(tmp_path), "--overlap", "2"]) == 2
    assert "overlap must be between 0 and 1" in capsys.readouterr().err
