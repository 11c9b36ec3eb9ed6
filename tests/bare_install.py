"""Run by tests/test_extras.py in a virtual environment holding the wheel and the core's
dependencies only: imports every package and public name, uses each estimator, runs the core;
prints one JSON report for the test to judge.

Usage: ``python -I bare_install.py`` (``-I``: nothing of the caller's path or environment).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import pkgutil
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

PACKAGES = ("linkage", "vfl", "transfer", "horizontal")


def nones(function: Callable[..., Any], skip: int = 0) -> tuple[list[Any], dict[str, Any]]:
    """None for each required parameter of ``function`` (after the first ``skip``)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in list(inspect.signature(function).parameters.values())[skip:]:
        if p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind == p.KEYWORD_ONLY:
            kwargs[p.name] = None
        else:
            args.append(None)
    return args, kwargs


def fit_with_nones(cls: type) -> Any:
    """``cls(...)`` and ``.fit(...)``, each required argument None: an estimator that needs an
    extra says so before it looks at its arguments; a core one refuses the Nones."""
    args, kwargs = nones(cls)
    estimator = cls(*args, **kwargs)
    args, kwargs = nones(estimator.fit)
    return estimator.fit(*args, **kwargs)


def imports(report: dict[str, Any]) -> dict[str, Any]:
    """Import every module; each package's ``__all__`` names; ``{qualified name: object}``."""
    public: dict[str, Any] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        report["path"][package] = root.__file__
        for info in [None, *pkgutil.walk_packages(root.__path__, f"{package}.")]:
            name = package if info is None else info.name
            try:
                module = importlib.import_module(name)
            except ImportError as exc:  # the test wants it to name its extra
                report["modules"][name] = str(exc)
                continue
            if info is not None and not info.ispkg:
                continue
            missing = []
            for attribute in getattr(module, "__all__", []):
                try:
                    public[f"{name}.{attribute}"] = getattr(module, attribute)
                except Exception as exc:
                    missing.append(f"{attribute}: {exc!r}")
            report["packages"][name] = missing
    return public


def uses(public: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Every public estimator's fit, and the other uses of an extra, by name."""
    from sklearn.base import BaseEstimator

    import horizontal
    from vfl.federation.network import GrpcFederation

    found: dict[str, Callable[[], Any]] = {}
    for name, value in sorted(public.items()):
        if isinstance(value, type) and issubclass(value, BaseEstimator):
            found[f"{name}.fit"] = functools.partial(fit_with_nones, value)
        if name.endswith(".pretrain_encoder"):
            args, kwargs = nones(value)
            found[name] = functools.partial(value, *args, **kwargs)
    found["horizontal.RecordDP.check"] = lambda: horizontal.RecordDP(noise_multiplier=1.0).check(
        None, 2
    )
    found["vfl.federation.network.GrpcFederation.start"] = lambda: GrpcFederation(
        "a", "127.0.0.1:0", {"b": "127.0.0.1:1"}, ca_cert=b"", cert=b"", key=b""
    ).start()
    return found


def core(report: dict[str, Any]) -> None:
    """PSI, Paillier and a vertical logistic regression, with no extra."""
    from linkage import psi_intersection
    from vfl import VerticalLogisticRegression
    from vfl.crypto.keys import generate_paillier_keypair

    links = psi_intersection(pd.Series(["a", "b", "c"]), pd.Series(["c", "a", "x"]))
    report["psi"] = len(links)
    public_key, secret_key = generate_paillier_keypair(1024, insecure=True)
    encrypted = public_key.encrypt(np.array([41.0, -2.5]))
    report["paillier"] = secret_key.decrypt(encrypted + encrypted).tolist()
    rng = np.random.default_rng(0)
    x = pd.DataFrame(rng.normal(size=(40, 4)), columns=list("abcd"))
    y = pd.Series((x["a"] + x["c"] > 0).astype(int))
    parts = {"lab": x[["a", "b"]], "imaging": x[["c", "d"]]}
    model = VerticalLogisticRegression(
        key_bits=1024, insecure=True, random_state=0, max_iter=3, tol=None
    ).fit(parts, y, label_party="imaging")
    report["accuracy"] = float((model.predict(parts) == y).mean())


def main() -> None:
    warnings.simplefilter("ignore")  # the insecure key size warns, as it should
    from vfl.extras import EXTRAS, MissingExtraAttributeError, MissingExtraError

    report: dict[str, Any] = {"path": {}, "packages": {}, "modules": {}, "uses": {}}
    report["present"] = [m for m in sorted(EXTRAS) if importlib.util.find_spec(m) is not None]
    public = imports(report)
    for name, use in uses(public).items():
        try:
            use()
            report["uses"][name] = "no error"
        except (MissingExtraError, MissingExtraAttributeError) as exc:
            report["uses"][name] = f"{exc.extra}: {exc}"
        except ImportError as exc:
            report["uses"][name] = f"bare {exc!r}"
        except Exception as exc:  # a core estimator refusing the Nones: no extra needed
            report["uses"][name] = f"core: {exc!r}"[:300]
    core(report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
