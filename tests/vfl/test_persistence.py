"""One model format: versioned, atomic, numbers and text only, for every kind of model."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from vfl import persistence


def test_round_trip_and_checks(tmp_path: Path) -> None:
    arrays = {"coef": np.arange(6.0).reshape(3, 2), "counts": np.array([1, 2], dtype=np.int64)}
    path = persistence.save_model(tmp_path / "m.npz", "test.Kind", {"party": "lab"}, arrays)
    meta, loaded = persistence.load_model(path, kind="test.Kind")
    assert meta == {"party": "lab"}
    np.testing.assert_array_equal(loaded["coef"], arrays["coef"])
    assert loaded["counts"].dtype == np.int64
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary left
    with pytest.raises(ValueError, match=r"holds a 'test\.Kind', not a 'other\.Kind'"):
        persistence.load_model(path, kind="other.Kind")
    with pytest.raises(TypeError, match="only numbers are saved"):
        persistence.dump_model("k", {}, {"bad": np.array(["text"])})


def rewrite_header(data: bytes, change: dict[str, object]) -> bytes:
    with np.load(io.BytesIO(data)) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(arrays["__meta__"].tobytes())
    header.update(change)
    arrays["__meta__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def test_newer_versions_foreign_files_and_pickles_are_refused(tmp_path: Path) -> None:
    data = persistence.dump_model("k", {}, {"w": np.ones(2)})
    with pytest.raises(ValueError, match=r"format version 99 .* upgrade vflink"):
        persistence.parse_model(rewrite_header(data, {"version": 99}))
    with pytest.raises(ValueError, match="not a saved vflink model"):
        persistence.parse_model(rewrite_header(data, {"format": "other"}))
    with pytest.raises(ValueError, match=r"not a saved vflink model \(not an \.npz file\)"):
        persistence.parse_model(b"not a zip")
    # an object array can only be read by unpickling: refused, never executed
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, array in [("__meta__", np.frombuffer(b"{}", np.uint8)), ("w", np.array([{}]))]:
            inner = io.BytesIO()
            np.save(inner, array, allow_pickle=True)
            archive.writestr(f"{name}.npy", inner.getvalue())
    with pytest.raises(ValueError, match=r"only unpickling could read \(refused"):
        persistence.parse_model(buffer.getvalue())


def test_a_torch_state_dict_round_trips_as_arrays() -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(3, 2)
    arrays = persistence.state_dict_to_arrays(module.state_dict(), prefix="bottom.")
    data = persistence.dump_model("torch.Module", {"layers": [3, 2]}, arrays)
    _, loaded = persistence.parse_model(data)
    other = torch.nn.Linear(3, 2)
    other.load_state_dict(persistence.arrays_to_state_dict(loaded, prefix="bottom."))
    x = torch.randn(4, 3)
    assert torch.equal(module(x), other(x))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_linear_model_kind_loads_and_predicts_the_same(tmp_path: Path) -> None:
    import pandas as pd

    from vfl.linear import PartyModel, VerticalLinearRegression, VerticalLogisticRegression

    rng = np.random.default_rng(0)
    x = pd.DataFrame(rng.normal(size=(200, 6)), columns=[f"c{i}" for i in range(6)])
    parts = {"a": x.iloc[:, :3], "b": x.iloc[:, 3:]}
    targets = {
        "binary": pd.Series(np.where(x.sum(axis=1) > 0, "yes", "no")),
        "multiclass": pd.Series(np.digitize(x["c0"] + x["c4"], [-1, 0, 1])),
        "regression": x["c1"] * 3 - x["c5"] + rng.normal(size=200) * 0.1,
    }
    for kind, y in targets.items():
        cls = VerticalLinearRegression if kind == "regression" else VerticalLogisticRegression
        est = cls(
            key_bits=1024,
            insecure=True,
            random_state=0,
            max_iter=2,
            tol=None,
            batch_size=64,
            protocol="two_party",
        )
        est.fit(parts, y, label_party="a")
        folder = est.save(tmp_path / kind)
        loaded = cls(key_bits=1024, insecure=True, protocol="two_party").load(folder)
        np.testing.assert_allclose(
            loaded.predict(parts) if kind == "regression" else loaded.decision_function(parts),
            est.predict(parts) if kind == "regression" else est.decision_function(parts),
            atol=1e-6,
        )
        part = PartyModel.load(folder / "a.npz")
        assert part.columns == list(parts[part.party].columns)


def test_parts_saved_as_json_by_vflink_0_1_still_load(tmp_path: Path) -> None:
    from vfl.linear import PartyModel

    old = {
        "format": "vflink.VerticalLogisticRegression.part/1",
        "party": "lab",
        "role": "passive",
        "columns": ["a", "b"],
        "mean": [0.0, 1.0],
        "scale": [1.0, 2.0],
        "coef": [0.5, -0.25],
        "intercept": 0.0,
    }
    path = tmp_path / "lab.json"
    path.write_text(json.dumps(old))
    part = PartyModel.load(path)
    assert part.columns == ["a", "b"] and part.coef.tolist() == [0.5, -0.25]
    path.write_text(json.dumps({**old, "format": "something else"}))
    with pytest.raises(ValueError, match=r"lab\.json is not a saved vflink model"):
        PartyModel.load(path)
