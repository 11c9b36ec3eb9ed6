"""``pip install vflink`` without extras, as people install it: the wheel, built from this
tree, unpacked into a fresh virtual environment that holds the core's dependencies and
nothing else (no network: the main environment's copies of the core's distributions are
linked in). There every package and every public name imports; each estimator that needs an
extra says which one when used; the core (PSI, Paillier, a vertical logistic regression) runs.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from vfl.extras import (
    EXTRAS,
    MissingExtraAttributeError,
    MissingExtraError,
    available,
    optional,
    require,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("linkage", "vfl", "transfer", "horizontal")


# -- the helper, in this environment --------------------------------------------------------


def test_require_returns_an_installed_module() -> None:
    torch = pytest.importorskip("torch")

    assert require("torch", for_="a test") is torch
    assert optional("torch", for_="a test") is torch
    assert available("torch")


def test_require_refuses_a_module_that_is_no_extra() -> None:
    with pytest.raises(ValueError, match=r"'numpy' is not an optional dependency; known: \["):
        require("numpy", for_="a test")


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch as if not installed: importing it raises ModuleNotFoundError."""

    class Refuse:
        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> None:
            if name.split(".")[0] == "torch":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for name in [m for m in sys.modules if m.split(".")[0] == "torch"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Refuse, *sys.meta_path])


@pytest.mark.usefixtures("no_torch")
def test_a_missing_module_names_its_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"^X needs torch, which is not installed: "):
        require("torch", for_="X")
    with pytest.raises(ImportError, match=r"pip install 'vflink\[torch\]'$") as caught:
        require("torch.nn", for_="X")
    assert caught.value.name == "torch"
    assert isinstance(caught.value, MissingExtraError) and caught.value.extra == "torch"
    assert not available("torch")
    assert not available("torch.nn")


@pytest.mark.usefixtures("no_torch")
def test_the_stand_in_imports_and_fails_on_use() -> None:
    torch = optional("torch", for_="mod")
    nn = optional("torch.nn", for_="mod")

    class Top(nn.Module):  # type: ignore[name-defined,misc]
        def forward(self) -> int:
            return 1

    default = torch.float64  # named at import time: fine
    assert isinstance(default, type) and not isinstance(1.0, torch.Tensor)
    with pytest.raises(MissingExtraError, match=r"^mod needs torch, .*'vflink\[torch\]'"):
        torch.tensor([1.0])
    with pytest.raises(MissingExtraError, match=r"^Top needs torch"):
        Top()
    with pytest.raises(MissingExtraAttributeError, match=r"^mod needs torch") as looked:
        _ = torch.nn.functional
    assert looked.value.extra == "torch" and looked.value.name == "functional"
    assert isinstance(looked.value.__cause__, MissingExtraError)
    # looking into a stand-in is a missing attribute: hasattr and getattr's default answer
    assert not hasattr(torch.nn, "functional")
    assert getattr(torch.nn, "functional", None) is None
    assert Top.forward(None) == 1  # type: ignore[arg-type]  # its own names still resolve
    with pytest.raises(AttributeError):
        _ = torch.__wrapped__


# -- the wheel and the environment without extras -------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of this tree (a build writes build/ and egg-info beside its
    sources; the copy keeps them out of the working tree)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--no-index", "--quiet", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("vflink-*.whl")
    return built


def test_the_wheel_holds_the_four_packages_typed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names, package
        assert f"{package}/py.typed" in names, package
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "examples/"))]


def core_distributions() -> dict[str, importlib.metadata.Distribution]:
    """The distributions ``pip install vflink`` brings: the closure of pyproject's
    ``dependencies`` without extras, as installed in this environment."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    found: dict[str, importlib.metadata.Distribution] = {}
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found[name] = importlib.metadata.distribution(requirement.name)
        for line in found[name].requires or []:
            dependency = Requirement(line)
            if dependency.marker is None or dependency.marker.evaluate({"extra": ""}):
                todo.append(dependency)
    return found


def top_level(distribution: importlib.metadata.Distribution) -> set[str]:
    """The entries a distribution put in site-packages (its packages, modules, libraries
    and metadata folder)."""
    files = distribution.files
    assert files, f"{distribution.metadata['Name']} lists no files"
    return {f.parts[0] for f in files if f.parts[0] not in ("..", "__pycache__")}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A virtual environment's interpreter with the wheel unpacked into its site-packages
    and the core's distributions on its path (one ``.pth`` file), nothing else."""
    env = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    linked = env / "core"
    linked.mkdir()
    source = Path(str(importlib.metadata.distribution("numpy").locate_file("")))
    entries = set().union(*(top_level(d) for d in core_distributions().values()))
    extras = {e for e in entries if e.split("-")[0].split(".")[0] in EXTRAS}
    assert not extras, f"the core's dependencies bring an extra's module: {sorted(extras)}"
    for entry in entries:
        if (source / entry).exists():
            (linked / entry).symlink_to(source / entry)
    (site / "core.pth").write_text(f"{linked}\n")
    zipfile.ZipFile(wheel).extractall(site)
    return python


@pytest.mark.slow
def test_without_extras_everything_imports_and_names_its_extra(
    bare_python: Path, tmp_path: Path
) -> None:
    run = subprocess.run(
        [str(bare_python), "-I", str(ROOT / "tests" / "bare_install.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])

    # the interpreter runs the wheel's code, without any extra
    site = bare_python.parent.parent
    for package, where in report["path"].items():
        assert Path(where).is_relative_to(site), (package, where)
    assert report["present"] == []

    # every package and each of its public names
    assert set(report["packages"]) >= set(PACKAGES)
    assert {p: m for p, m in report["packages"].items() if m} == {}
    # a module that cannot import at all (an integration with an extra's framework) names it
    assert set(report["modules"]) <= {"horizontal.flower", "horizontal.flower_local"}, report[
        "modules"
    ]
    for module, message in report["modules"].items():
        assert "pip install 'vflink[" in message, (module, message)

    # each estimator names its extra when used; none fails with a bare ImportError
    uses = report["uses"]
    assert not {n: m for n, m in uses.items() if m.startswith(("bare", "no error"))}
    needs = {n: m.split(":")[0] for n, m in uses.items() if not m.startswith("core: ")}
    torch_estimators = {
        "vfl.SplitNNClassifier.fit",
        "vfl.SplitNNRegressor.fit",
        "horizontal.FederatedClassifier.fit",
        "horizontal.FederatedRegressor.fit",
        "transfer.FederatedTransferClassifier.fit",
        "transfer.EncoderTransferClassifier.fit",
    }
    assert {n: needs.get(n) for n in torch_estimators} == dict.fromkeys(torch_estimators, "torch")
    assert needs["horizontal.RecordDP.check"] == "dp"
    assert needs["vfl.federation.network.GrpcFederation.start"] == "net"
    assert uses["vfl.SplitNNClassifier.fit"] == (
        "torch: SplitNNClassifier needs torch, which is not installed: pip install 'vflink[torch]'"
    )
    for name, message in uses.items():
        if name in needs:
            assert message.endswith(f"pip install 'vflink[{needs[name]}]'"), (name, message)
    # the core's estimators need none
    assert uses["vfl.VerticalLogisticRegression.fit"].startswith("core: ")

    # the core runs
    assert report["psi"] == 2
    assert report["paillier"] == [82.0, -5.0]
    assert report["accuracy"] > 0.5
