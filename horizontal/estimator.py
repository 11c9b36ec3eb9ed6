"""Horizontal federated estimators in scikit-learn style.

:class:`FederatedClassifier` and :class:`FederatedRegressor` train one torch module (an MLP
by default, ``module="linear"`` for logistic or linear regression) on clients that hold the
same columns for different rows::

    from horizontal import FederatedClassifier, FedProx
    model = FederatedClassifier(max_iter=30, strategy=FedProx(mu=0.01), random_state=0)
    model.fit({"hospital_1": (X1, y1), "hospital_2": (X2, y2)})
    model.predict_proba(X_new)

``fit`` takes ``{client: (X, y)}`` or ``{client: DataFrame}`` with ``label="<column>"``.
In simulation every client and the server run as threads of one in-process federation
(100+ clients are fine); :meth:`fit_party` runs one party's role on its own federation.
The fitted model is the global one, which every client receives at the end (``predict``
here runs on whatever rows are given, at whichever party holds them).

The defaults reach the same model trained on the pooled rows (tests/horizontal/
test_defaults.py, ``benchmarks/horizontal.py --fate``): nothing is tuned to a table, what
depends on the data is chosen from it --

* a linear model is scikit-learn's: ``LogisticRegression(C=1)``'s penalty (``alpha`` from the
  pooled row count) or ``LinearRegression``'s none, solved by
  :class:`~horizontal.strategies.FedLBFGS` (scikit-learn's solver, on the pooled gradient)
  until the largest gradient entry is below ``tol``: on correlated columns, where 20 rounds
  of FedAvg stayed 0.02 to 0.09 AUC below pooled scikit-learn, it matches it to 1e-3;
* a network is trained by FedAvg with local Adam at scikit-learn's ``MLPClassifier`` step,
  stopped early on rows each client holds out (``validation_fraction``): the server keeps
  the model of the lowest pooled held-out loss and stops after ``n_iter_no_change`` rounds
  without improvement by ``tol`` (:mod:`horizontal.stopping`);
* a step size for SGD strategies from the columns (:func:`horizontal.training.default_step`).

Under DP or secure aggregation ``"auto"`` keeps FedAvg's SGD for a fixed 20 rounds: their
guarantees cover neither held-out losses nor an unplanned number of rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import clone

from horizontal.client import client_data, feature_matrix
from horizontal.model import build_module, load_vector
from horizontal.strategies import FedAvg, FedLBFGS, Strategy, get_strategy
from horizontal.training import ClientRole, FitResult, FitSpec, RoundRecord, ServerRole
from vfl import persistence
from vfl.estimator import FederatedEstimator, Role, renamed_parameters, run_deployed
from vfl.extras import optional, require
from vfl.federation.base import Federation

if TYPE_CHECKING:
    import torch
else:
    torch = optional("torch", for_=__name__)

__all__ = [
    "PROTOCOLS",
    "FederatedClassifier",
    "FederatedRegressor",
    "client_data",
    "secure_protocol",
]

KIND = "horizontal.FederatedModel"

AUTO_ROUNDS = 500
"""The most rounds of ``max_iter="auto"`` (early stopping or FedLBFGS's convergence end it
sooner: tens of rounds on the FATE tables)."""
FIXED_ROUNDS = 20
"""The rounds of ``max_iter="auto"`` under DP or secure aggregation, which do not stop early."""

PROTOCOLS = ("plain", "secagg")
"""``protocol=``: ``"plain"`` (default) sends each client's update to the server;
``"secagg"`` runs secure aggregation (:mod:`horizontal.secagg`) with a threshold of a majority
of the sampled clients; a :class:`~horizontal.secagg.SecAggConfig` chooses its options."""

RENAMED = {
    "rounds": "max_iter",
    "secure_aggregation": 'protocol="secagg" or protocol=SecAggConfig(threshold=...)',
}


@dataclass(frozen=True)
class _Schedule:
    """The resolved schedule a privacy object checks and calibrates to."""

    rounds: int
    client_fraction: float


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


ENGINES = "vflink.horizontal_engines"
"""The entry-point group of ``fit(engine=...)``'s engines beyond the in-process simulation
(``flower``: :func:`horizontal.flower_local.fit_on_flower`), each
``engine(estimator, clients, *, label) -> estimator``."""


def _engine(name: str) -> Any:
    """The engine ``name`` (an entry point of :data:`ENGINES`), loaded; its extra named when
    the engine's module needs one that is missing."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=ENGINES)}
    if name not in found:
        raise ValueError(f"engine must be 'vflink' or one of {sorted(found)}, got {name!r}")
    if name == "flower":
        require("flwr", for_="engine='flower'")
    return found[name].load()


class _FederatedModel(FederatedEstimator):
    _task = ""
    privacy_ledger_: Any

    @renamed_parameters(RENAMED, lambda old: translate_renamed(old))
    def __init__(
        self,
        *,
        module: Any = None,
        hidden_layer_sizes: tuple[int, ...] = (64,),
        max_iter: int | str = "auto",
        local_epochs: int = 1,
        batch_size: int = 32,
        learning_rate: float | str = "auto",
        alpha: float | None = None,
        early_stopping: bool | str = "auto",
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-4,
        client_fraction: float = 1.0,
        min_clients: int | None = None,
        strategy: str | Strategy = "auto",
        privacy: Any = None,
        standardize: Any = True,
        classes: Any = None,
        random_state: int | None = None,
        protocol: Any = "plain",
        robust_aggregation: Any = None,
        compression: Any = None,
        server: str = "server",
        timeout: float | None = None,
        verbose: int = 0,
    ) -> None:
        self.module = module
        self.hidden_layer_sizes = hidden_layer_sizes
        self.max_iter = max_iter
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.alpha = alpha
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.client_fraction = client_fraction
        self.min_clients = min_clients
        self.strategy = strategy
        self.privacy = privacy
        self.standardize = standardize
        self.classes = classes
        self.random_state = random_state
        self.protocol = protocol
        self.robust_aggregation = robust_aggregation
        self.compression = compression
        self.server = server
        self.timeout = timeout
        self.verbose = verbose

    # -- checks ----------------------------------------------------------------------------

    def fit_spec(self, clients: list[str], *, ledger: Any = None) -> FitSpec:
        """What every party of a fit agrees on (hyperparameters checked, ``"auto"`` resolved:
        see :meth:`resolved`)."""
        rounds, strategy, early_stopping = self.resolved()
        for name, value, low in [
            ("local_epochs", self.local_epochs, 1),
            ("batch_size", self.batch_size, 1),
            ("n_iter_no_change", self.n_iter_no_change, 1),
        ]:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        rate: Any = None if self.learning_rate == "auto" else self.learning_rate
        if rate is not None and not (_is_number(rate) and math.isfinite(rate) and rate > 0):
            raise ValueError(f'learning_rate must be > 0 or "auto", got {self.learning_rate!r}')
        alpha = self.alpha
        if alpha is not None and not (_is_number(alpha) and math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be >= 0 or None (from the data), got {alpha!r}")
        if not (_is_number(self.validation_fraction) and 0 < self.validation_fraction < 1):
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {self.validation_fraction!r}"
            )
        if not (_is_number(self.tol) and self.tol >= 0):
            raise ValueError(f"tol must be a number >= 0, got {self.tol!r}")
        if not 0 < self.client_fraction <= 1:
            raise ValueError(f"client_fraction must be in (0, 1], got {self.client_fraction!r}")
        if self.min_clients is not None and (
            isinstance(self.min_clients, bool)
            or not isinstance(self.min_clients, int)
            or not 1 <= self.min_clients <= len(clients)
        ):
            raise ValueError(
                f"min_clients must be an integer from 1 to the {len(clients)} clients, got "
                f"{self.min_clients!r}"
            )
        if self.server in clients:
            raise ValueError(
                f"{self.server!r} is both a client and the server's name; pass server='...'"
            )
        classes = None
        if self.classes is not None:
            classes = tuple(str(c) for c in self.classes)
            if len(set(classes)) != len(classes) or len(classes) < 2:
                raise ValueError(
                    f"classes must be two or more distinct labels, got {self.classes!r}"
                )
        privacy = self.privacy
        dp_scaling = None
        if privacy is not None:
            privacy.check(_Schedule(rounds, self.client_fraction), len(clients))
            if self._task == "classification" and classes is None:
                raise ValueError(
                    "differential privacy covers the model updates, not the label set a missing "
                    "classes= would send: pass classes=[...]"
                )
            dp_scaling = self._dp_scaling()
        elif not isinstance(self.standardize, bool):
            raise ValueError(
                "standardize must be True or False (a DPScaling is for fits with privacy=...), "
                f"got {self.standardize!r}"
            )
        secure = self._secure_aggregation(len(clients))
        robust = self._robust(secure, math.ceil(self.client_fraction * len(clients)))
        compression = self._compression(secure)
        if early_stopping and (privacy is not None or secure is not None):
            raise ValueError(
                "early stopping needs each client's held-out loss, which "
                + ("DP does not cover" if privacy is not None else "secure aggregation hides")
                + ": pass early_stopping=False and max_iter=<int>"
            )
        if strategy.local.gradient:
            problems = [
                what
                for what, used in [
                    ("differential privacy", privacy is not None),
                    ("secure aggregation", secure is not None),
                    ("robust aggregation", robust is not None),
                    ("compression", compression is not None),
                    ("client_fraction < 1", self.client_fraction < 1),
                ]
                if used
            ]
            if problems:
                raise ValueError(
                    f"FedLBFGS needs every client's exact gradient each round, not with "
                    f"{', '.join(problems)}: choose strategy='fedavg' (or another)"
                )
        return FitSpec(
            secure_aggregation=secure,
            robust=robust,
            compression=compression,
            server=self.server,
            clients=tuple(clients),
            task=self._task,
            module=self.module,
            hidden=tuple(int(h) for h in self.hidden_layer_sizes),
            rounds=rounds,
            local_epochs=self.local_epochs,
            batch_size=self.batch_size,
            learning_rate=None if rate is None else float(rate),
            client_fraction=float(self.client_fraction),
            min_clients=self.min_clients,
            strategy=strategy,
            privacy=privacy,
            standardize=bool(self.standardize),
            classes=classes,
            random_state=self.random_state,
            ledger=ledger,
            alpha=None if alpha is None else float(alpha),
            early_stopping=early_stopping,
            validation_fraction=float(self.validation_fraction),
            n_iter_no_change=self.n_iter_no_change,
            tol=float(self.tol),
            dp_scaling=dp_scaling,
            verbose=int(self.verbose),
        )

    def resolved(self) -> tuple[int, Strategy, bool]:
        """The rounds (at most), the strategy and whether to stop early, ``"auto"`` resolved:

        * ``strategy="auto"``: without DP, secure or robust aggregation and compression, for
          a linear model (``module="linear"``) :class:`~horizontal.strategies.FedLBFGS`
          (when every client takes part, ``client_fraction=1``) -- scikit-learn's solver,
          which reaches the pooled optimum in tens of rounds where SGD needs hundreds on
          correlated columns -- and for a network FedAvg with local Adam (scikit-learn's
          ``MLPClassifier`` recipe, which early stopping ends gently; L-BFGS overfits a
          network within a few rounds, and plain SGD plateaued up to 0.016 AUC below the
          pooled Adam twin); elsewhere FedAvg with SGD, as before;
        * ``early_stopping="auto"``: on when ``max_iter="auto"`` and the fit has neither DP
          nor secure aggregation (whose guarantees do not cover the held-out losses), except
          for FedLBFGS on a linear model, which converges to its penalised optimum as
          scikit-learn's does and needs no held-out rows;
        * ``max_iter="auto"``: at most :data:`AUTO_ROUNDS`, ended by early stopping or the
          solver's convergence; under DP or secure aggregation a fixed :data:`FIXED_ROUNDS`
          (DP's noise is calibrated to a schedule known in advance).
        """
        linear = self.module == "linear" or (
            self.module is None and not tuple(self.hidden_layer_sizes)
        )
        plain = (
            self.privacy is None
            and self.protocol == "plain"
            and self.robust_aggregation is None
            and self.compression is None
        )
        everyone = _is_number(self.client_fraction) and self.client_fraction == 1
        chosen = self.strategy
        if isinstance(chosen, str) and chosen.lower() == "auto":
            if not plain:
                chosen = "fedavg"
            elif linear:
                chosen = FedLBFGS() if everyone else "fedavg"
            else:
                chosen = FedAvg(local_optimizer="adam")
        strategy = get_strategy(chosen)
        rounds = self.max_iter
        if rounds == "auto":
            private = self.privacy is not None or self.protocol != "plain"
            rounds = FIXED_ROUNDS if private else AUTO_ROUNDS
        elif isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(
                f'max_iter (rounds) must be an integer >= 1 or "auto", got {self.max_iter!r}'
            )
        early = self.early_stopping
        if early == "auto":
            early = (
                self.max_iter == "auto"
                and self.privacy is None
                and self.protocol == "plain"
                and not (strategy.local.gradient and linear)
            )
        elif not isinstance(early, bool):
            raise ValueError(f'early_stopping must be True, False or "auto", got {early!r}')
        return rounds, strategy, early

    def _dp_scaling(self) -> Any:
        """The DP standardisation (:class:`~horizontal.scaling.DPScaling`) of a fit with
        privacy: ``standardize=True`` takes the default one."""
        from horizontal.scaling import DPScaling

        given = self.standardize
        if given is False:
            return None
        scaling = DPScaling() if given is True else given
        if not isinstance(scaling, DPScaling):
            raise ValueError(f"standardize must be a bool or a DPScaling, got {given!r}")
        scaling.check(regression=self._task == "regression")
        return scaling

    def _compression(self, secure: Any) -> Any:
        """``bits`` (int, 1 to 32) or a top-k fraction (float in (0, 1)), checked."""
        chosen = self.compression
        if chosen is None:
            return None
        if isinstance(chosen, bool) or not (
            (isinstance(chosen, int) and 1 <= chosen <= 32)
            or (isinstance(chosen, float) and 0 < chosen < 1)
        ):
            raise ValueError(
                "compression must be a bit count (1 to 32) or a top-k fraction in (0, 1), got "
                f"{chosen!r}"
            )
        if secure is not None:
            raise ValueError(
                "compressed updates each carry their own scale, which a masked sum cannot "
                'combine: choose protocol="secagg" or compression'
            )
        if self.privacy is not None and self.privacy.client_level:
            raise ValueError("compression with client-level DP is not supported yet")
        return chosen

    def _robust(self, secure: Any, sampled: int) -> Any:
        """The :class:`~horizontal.robust.RobustAggregation` (a rule name is enough), checked."""
        from horizontal.robust import RobustAggregation

        given = self.robust_aggregation
        if given is None:
            return None
        robust = RobustAggregation(rule=given) if isinstance(given, str) else given
        if not isinstance(robust, RobustAggregation):
            raise ValueError(
                f"robust_aggregation must be a rule name or a RobustAggregation, got {given!r}"
            )
        robust.check(sampled)
        if secure is not None:
            raise ValueError(
                "robust aggregation needs each client's update, which secure aggregation hides: "
                "choose one (norm bounding at the clients is the only defence of the two that "
                "could run together, and it is not built in)"
            )
        if self.privacy is not None and self.privacy.client_level:
            raise ValueError("robust aggregation replaces the mean that client-level DP noises")
        return robust

    def _secure_aggregation(self, n_clients: int) -> Any:
        """The :class:`~horizontal.secagg.SecAggConfig` (an int: its threshold), checked
        against what cannot run inside it."""
        from horizontal.secagg import SecAggConfig

        given = self.protocol
        sampled = max(2, math.ceil(self.client_fraction * n_clients))
        if isinstance(given, str) and given in PROTOCOLS:
            if given == "plain":
                return None
            given = SecAggConfig(threshold=sampled // 2 + 1)  # a majority of the sampled
        if not isinstance(given, SecAggConfig):
            raise ValueError(
                f"protocol must be one of {PROTOCOLS} or a SecAggConfig(threshold=...), got "
                f"{given!r}"
            )
        config = given
        config.check(sampled)
        if self.privacy is not None and getattr(self.privacy, "adaptive", False):
            raise ValueError(
                "adaptive clipping needs the server to count the clipped updates, which secure "
                "aggregation hides: pass adaptive=False with secure aggregation"
            )
        return config

    # -- simulation --------------------------------------------------------------------------

    def fit(
        self,
        clients: Mapping[str, Any],
        *,
        label: str | None = None,
        keep_payloads: bool = False,
        ledger: Any = None,
        callback: Any = None,
        adversaries: Any = None,
        engine: str = "vflink",
    ) -> _FederatedModel:
        """Train with the server and every client simulated in this process, or on a Flower
        deployment on this machine (``engine="flower"``).

        Parameters
        ----------
        clients : dict
            ``{client: (X, y)}`` (X a DataFrame or 2-d array, y its labels), or
            ``{client: DataFrame}`` with the labels in column ``label``.
        label : str, optional
            The label column, for the DataFrame form.
        keep_payloads : bool
            Keep every message's payload in ``transcript_`` for audits.
        ledger : vfl.privacy.PrivacyLedger, optional
            Where differential privacy records its spend (by default a new one, kept as
            ``privacy_ledger_``).
        callback : callable, optional
            ``callback(record, model)`` after every round, with the round's
            :class:`~horizontal.training.RoundRecord` and a fitted copy of this estimator
            holding that round's global model (to trace held-out accuracy, say). It runs in
            the simulated server's thread and sees only the global model.
        adversaries : dict, optional
            For audits (:mod:`horizontal.attacks`): ``{client: tamper(delta, round) -> delta}``
            makes those clients send what ``tamper`` returns instead of their honest update
            (a sign flip, a boosted backdoor).
        engine : {"vflink", "flower"}
            ``"vflink"`` simulates every party as a thread of this process; ``"flower"``
            starts a Flower SuperLink and one SuperNode per client as OS processes, trains
            there (:mod:`horizontal.flower_local`; the ``flower`` extra) and stops them: the
            same model on the same data, names and ``random_state``. ``keep_payloads``,
            ``callback`` and ``adversaries`` are simulation's own.
        """
        require("torch", for_=type(self).__name__)
        if engine != "vflink":
            if keep_payloads or callback is not None or adversaries or ledger is not None:
                raise ValueError(
                    "keep_payloads, callback, adversaries and ledger are the in-process "
                    f"simulation's; leave them out with engine={engine!r}"
                )
            client_data(clients, label)  # bad input named before any process starts
            fitted: _FederatedModel = _engine(engine)(self, clients, label=label)
            return fitted
        data = client_data(clients, label)
        ledger = self._ledger(ledger)
        spec = self.fit_spec(list(data), ledger=ledger)
        if adversaries:
            unknown = sorted(set(adversaries) - set(data))
            if unknown:
                raise ValueError(f"adversaries names clients {unknown} that are not in the fit")
            spec = replace(spec, adversaries=dict(adversaries))
        if callback is not None:
            spec = replace(spec, on_round=self._observer(callback, spec, data))
        roles: dict[str, Role] = {
            name: ClientRole(spec, x, y, columns) for name, (x, y, columns) in data.items()
        }
        roles[spec.server] = ServerRole(spec)
        # the clients train in turn (horizontal.client._trainer); one intra-op thread each is
        # faster for these small steps, and immune to a busy machine's cores. Every party takes
        # turns on this thread (no hand-off between threads: 100 clients of a 103k-parameter
        # MLP, 0.42 -> 0.38 s a round; with secure aggregation 4.3-5.2 -> 3.8 s: what threads
        # gain by computing masks on two cores at once, a hundred threads' hand-offs lose)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            results = self._simulate(roles, keep_payloads=keep_payloads, scheduling="cooperative")
        finally:
            torch.set_num_threads(threads)
        self._collect(results[spec.server], spec)
        if self.privacy is not None:
            from horizontal.privacy import largest_epsilon

            self.epsilon_ = largest_epsilon(ledger, spec.clients)
        self._originals = {str(v): v for _, y, _ in data.values() for v in np.unique(y)}
        if self._task == "classification":
            self.classes_ = np.array([self._originals.get(c, c) for c in self._class_names])
        return self

    def _observer(self, callback: Any, spec: FitSpec, data: dict[str, Any]) -> Any:
        originals = {str(v): v for _, y, _ in data.values() for v in np.unique(y)}

        def observe(record: RoundRecord, weights: Any, scaling: Any) -> None:
            snapshot = clone(self)
            snapshot._collect(FitResult(weights.copy(), [record], scaling, len(scaling.mean)), spec)
            if self._task == "classification":
                names = snapshot._class_names
                snapshot.classes_ = np.array([originals.get(c, c) for c in names])
            callback(record, snapshot)

        return observe

    def fit_party(
        self,
        federation: Federation,
        x: Any = None,
        y: Any = None,
        *,
        clients: list[str],
        ledger: Any = None,
    ) -> _FederatedModel:
        """This party's role (deployment): a client passes its ``x`` and ``y``; the server
        passes neither. ``clients`` names every client, the same list everywhere."""
        require("torch", for_=type(self).__name__)
        spec = self.fit_spec(list(clients), ledger=self._ledger(ledger))
        if federation.name == spec.server:
            result = run_deployed({spec.server: ServerRole(spec)}, federation)[spec.server]
            self._collect(result, spec)
            return self
        values, labels, columns = client_data({federation.name: (x, y)}, None)[federation.name]
        role = ClientRole(spec, values, labels, columns)
        self._collect(run_deployed({federation.name: role}, federation)[federation.name], spec)
        if self._task == "classification":  # this client's own label values where it has them
            originals = {str(v): v for v in np.unique(labels)}
            self.classes_ = np.array([originals.get(c, c) for c in self._class_names], dtype=object)
        return self

    def _ledger(self, ledger: Any) -> Any:
        """The fit's ledger, kept as ``privacy_ledger_`` (a new one unless given; empty
        without DP); what the roles record in (``ledger`` as given without DP)."""
        if self.privacy is None:
            self._fitted_ledger(ledger)
            return ledger
        if ledger is None:
            from vfl.privacy import PrivacyLedger

            ledger = PrivacyLedger(delta=self.privacy.delta)
        self.privacy_ledger_ = ledger
        return ledger

    def _collect(self, result: FitResult, spec: FitSpec) -> None:
        scaling = result.scaling
        if scaling is None:
            raise RuntimeError(
                "the fit returned no scaling: this party's role ended before the setup's "
                "scaling reached it"
            )
        outputs = len(scaling.classes) if self._task == "classification" else 1
        module = build_module(
            spec.module, result.n_features, outputs, spec.hidden, spec.random_state
        )
        load_vector(module, result.weights)
        module.eval()
        self.module_ = module
        self.weights_ = result.weights
        self.rounds_: list[RoundRecord] = result.history
        self.history_ = [{"epoch": r.round} | asdict(r) for r in result.history]
        self.n_iter_ = len(result.history)
        self.best_round_ = result.best_round
        self.mean_, self.scale_ = scaling.mean, scaling.scale
        self.target_mean_, self.target_scale_ = scaling.target_mean, scaling.target_scale
        self.n_features_in_ = result.n_features
        self._class_names = list(scaling.classes)
        if self._task == "classification":
            self.classes_ = np.array(self._class_names, dtype=object)

    # -- prediction ---------------------------------------------------------------------------

    def _outputs(self, x: Any) -> np.ndarray[Any, Any]:
        self._check_fitted("module_")
        values = feature_matrix(x, "X")
        if values.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {values.shape[1]} columns; the model was fitted on {self.n_features_in_}"
            )
        z = torch.as_tensor((values - self.mean_) / self.scale_, dtype=torch.float32)
        with torch.no_grad():
            out: np.ndarray[Any, Any] = self.module_(z).double().numpy()
        return out

    def save(self, path: str | Path) -> Path:
        """The global model in vflink's format (the parameter vector, the scaling, the
        classes, the architecture's hyperparameters; a user-given module must be passed
        again to :meth:`load`), and beside it the privacy ledger when DP was used."""
        self._check_fitted("module_")
        meta = {
            "task": self._task,
            "hidden": list(self.hidden_layer_sizes),
            "module": self.module
            if isinstance(self.module, str) or self.module is None
            else "user",
            "classes": [str(c) for c in getattr(self, "_class_names", [])],
            "class_values": [  # the labels as fitted (ints stay ints), when JSON holds them
                c.item() if isinstance(c, np.generic) else c
                for c in getattr(self, "classes_", [])
                if isinstance(c, (str, int, float, bool, np.generic))
            ],
            "n_features": int(self.n_features_in_),
            "target_mean": float(self.target_mean_),
            "target_scale": float(self.target_scale_),
        }
        arrays = {"weights": self.weights_, "mean": self.mean_, "scale": self.scale_}
        ledger = getattr(self, "privacy_ledger_", None)
        return persistence.save_with_ledger(path, KIND, meta, arrays, ledger)

    def load(self, path: str | Path) -> _FederatedModel:
        """Read a model written by :meth:`save` into this estimator (whose ``module`` must be
        the same architecture when it was a user-given one), with its ledger if saved."""
        require("torch", for_=type(self).__name__)
        meta, arrays = persistence.load_model(path, kind=KIND)
        if meta.get("task") != self._task:
            raise ValueError(f"{path} holds a {meta.get('task')} model, not a {self._task} one")
        hidden = tuple(int(h) for h in meta["hidden"])
        classes = [str(c) for c in meta["classes"]]
        outputs = len(classes) if self._task == "classification" else 1
        module = self.module if meta["module"] == "user" else meta["module"]
        built = build_module(module, int(meta["n_features"]), outputs, hidden, None)
        load_vector(built, arrays["weights"])
        built.eval()
        self.module_, self.weights_ = built, arrays["weights"]
        self.mean_, self.scale_ = arrays["mean"], arrays["scale"]
        self.target_mean_ = float(meta["target_mean"])
        self.target_scale_ = float(meta["target_scale"])
        self.n_features_in_ = int(meta["n_features"])
        self._class_names = classes
        if self._task == "classification":
            values = meta.get("class_values") or classes
            self.classes_ = np.array(values if len(values) == len(classes) else classes)

        self.privacy_ledger_ = persistence.load_ledger(path)
        return self


class FederatedClassifier(_FederatedModel):
    """A classifier trained horizontally (see the module docstring).

    Parameters
    ----------
    module : None, "linear", callable or torch.nn.Module
        An MLP with ``hidden_layer_sizes`` (None), logistic regression (``"linear"``), a
        factory ``module(n_features, n_classes)``, or a module (copied); without buffers.
    hidden_layer_sizes : tuple of int
        The default MLP's hidden layers.
    max_iter : int or "auto"
        Communication rounds: an int runs that many (fewer only with early stopping or
        FedLBFGS's convergence); ``"auto"`` at most 500, ended by early stopping or
        convergence (20 under DP or secure aggregation). See :meth:`resolved`. Replaces the
        deprecated ``rounds``.
    local_epochs, batch_size
        Each client's local training per round (``FedSGD``: one full-batch step instead).
    learning_rate : float or "auto"
        The local step: ``"auto"`` is 1e-3 for local Adam, and for SGD ``1 / L`` from the
        column count (:func:`horizontal.training.default_step`); unused by FedLBFGS.
    alpha : float, optional
        L2 penalty ``alpha / 2 * ||W||^2`` on the weight matrices, added to the mean loss
        (not on intercepts). Default: scikit-learn's ``LogisticRegression(C=1)`` for a linear
        classifier (``2 / n`` for two classes, whose two logits each carry half the binary
        weights; ``1 / n`` for more; ``n`` the pooled training rows), none for a linear
        regression (``LinearRegression``) or a network.
    early_stopping : bool or "auto"
        Keep the model of the lowest pooled loss on rows each client holds out, and stop
        after ``n_iter_no_change`` rounds without improvement by ``tol``. ``"auto"``: with
        ``max_iter="auto"``, except for FedLBFGS on a linear model (converged, it needs no
        held-out rows), DP and secure aggregation (refused there).
    validation_fraction : float
        The share of each client's rows it holds out (stratified for a classifier).
    n_iter_no_change, tol : int, float
        Early stopping's patience and least improvement; ``tol`` also bounds FedLBFGS's
        largest gradient entry at convergence.
    client_fraction : float
        Share of the clients sampled per round (a fixed count, ``ceil(fraction * N)``; with
        client-level DP, Poisson sampling with this rate).
    min_clients : int, optional
        Fewest replies a round needs (default: half the sampled clients, rounded up); the
        rest are dropped from that round and the weights renormalise over those that replied.
    strategy : str or Strategy
        ``"auto"`` (default: FedLBFGS for a linear model, FedAvg with local Adam for a
        network; FedAvg under DP, secure or robust aggregation or compression),
        ``"fedavg"``, ``"fedsgd"``, ``"fedprox"``, ``"fedavgm"``, ``"fedadam"``,
        ``"scaffold"``, ``"lbfgs"``, or an object (:mod:`horizontal.strategies`, e.g.
        ``FedProx(mu=0.1)``).
    privacy : ClientDP, LocalDP or RecordDP, optional
        Differential privacy (:mod:`horizontal.privacy`): client-level DP with central
        (:class:`~horizontal.ClientDP`) or local (:class:`~horizontal.LocalDP`) Gaussian
        noise on the updates, or record-level DP-SGD (:class:`~horizontal.RecordDP`).
    standardize : bool or DPScaling
        Standardise the columns with pooled means and deviations computed at setup from the
        clients' column sums (which the server learns). Under DP from noisy statistics
        instead, each client's spend in the ledger (:class:`~horizontal.scaling.DPScaling`,
        epsilon 1 per client by default; or public bounds).
    classes : sequence, optional
        The classes (else the union of the clients' labels, sent at setup; needed with DP).
    random_state : int, optional
        Seeds the initial model, the clients' batch orders and (without DP) the sampling;
        None (default): fresh randomness.
    protocol : {"plain", "secagg"} or SecAggConfig
        ``"plain"`` (default): each client's update reaches the server. ``"secagg"``: secure
        aggregation (:mod:`horizontal.secagg`) with a Shamir threshold of a majority of the
        sampled clients (a :class:`~horizontal.secagg.SecAggConfig` chooses it and the other
        options): the server learns only each round's sum of ``n_k * update`` (and ``n_k``)
        over the clients that survive it, never one client's update; a round with fewer than
        ``threshold`` survivors stops the fit. With ``ClientDP`` the noise is distributed:
        each client adds its share, ``1/threshold`` of the variance (not with
        ``adaptive=True``); ``LocalDP`` and ``RecordDP`` compose as they are. ``rounds_``
        then has no drift (NaN). Replaces the deprecated ``secure_aggregation``.
    compression : int or float, optional
        Updates sent as ``bits``-bit unbiased stochastic codes (an int) or as their top-k
        entries with error feedback (a fraction, :mod:`horizontal.compression`); not with
        secure aggregation or client-level DP.
    robust_aggregation : str or RobustAggregation, optional
        A robust rule instead of the weighted mean (:mod:`horizontal.robust`: ``"median"``,
        ``"trimmed_mean"``, ``"krum"``, ...); not with secure aggregation or client-level DP.
    server : str
        The server's party name.
    timeout : float, optional
        Seconds a simulated party waits for a message (None, the default:
        :func:`vfl.estimator.wait_limit`, 600 s).
    verbose : int
        1: the server's rounds live (``server: round 12/500 loss 0.41 val loss 0.43 best
        10``, :class:`vfl.progress.EpochProgress`); 0 (default): only at INFO in the log.

    Attributes
    ----------
    module_ : torch.nn.Module
        The global model.
    classes_, n_iter_, privacy_ledger_, transcript_
        The classes; rounds run; the fit's privacy ledger (empty without DP); the messages of
        the last simulated fit.
    rounds_ : list of RoundRecord
        Per round, what the server saw (:class:`~horizontal.training.RoundRecord`: replies,
        drift, clipping norm, epsilon so far, FedLBFGS's objective, the held-out loss); empty
        at a client.
    history_ : list of dict
        ``rounds_`` as the records of every estimator (:mod:`vfl.estimator`): ``epoch`` (the
        round, 1-based, also as ``round``), ``loss`` (FedLBFGS's objective, else None),
        ``seconds``, and the other fields of :class:`~horizontal.training.RoundRecord`.
    epsilon_ : float or None
        With DP, the largest epsilon any holder of ``privacy_ledger_`` spent (a shortcut).
    best_round_ : int or None
        With early stopping, after how many rounds the kept model was reached.
    """

    _task = "classification"

    def predict_proba(self, x: Any) -> np.ndarray[Any, Any]:
        from scipy.special import softmax

        out: np.ndarray[Any, Any] = softmax(self._outputs(x), axis=1)
        return out

    def decision_function(self, x: Any) -> np.ndarray[Any, Any]:
        logits = self._outputs(x)
        out: np.ndarray[Any, Any] = logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits
        return out

    def predict(self, x: Any) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self.classes_[self.predict_proba(x).argmax(axis=1)]
        return out

    def score(self, x: Any, y: Any) -> float:
        return float(np.mean(self.predict(x) == np.asarray(y)))


class FederatedRegressor(_FederatedModel):
    """A regressor trained horizontally (squared loss; the target standardised with the
    pooled mean and deviation, noisy under DP; under DP with ``standardize=False`` not at
    all, as DP would not cover its sums). Parameters as :class:`FederatedClassifier`
    (without ``classes``)."""

    _task = "regression"

    def predict(self, x: Any) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self._outputs(x)[:, 0] * self.target_scale_ + self.target_mean_
        return out

    def score(self, x: Any, y: Any) -> float:
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=float), self.predict(x)))


# -- input checks ----------------------------------------------------------------------------------


def translate_renamed(old: dict[str, Any]) -> dict[str, Any]:
    """The current parameters that the deprecated keywords ``old`` (``rounds``,
    ``secure_aggregation``) spelled."""
    new: dict[str, Any] = {}
    if "rounds" in old:
        new["max_iter"] = old["rounds"]
    if "secure_aggregation" in old:
        new["protocol"] = secure_protocol(old["secure_aggregation"])
    return new


def secure_protocol(secure_aggregation: Any) -> Any:
    """The ``protocol=`` that the deprecated ``secure_aggregation=`` spelled: ``"plain"`` for
    None, a :class:`~horizontal.secagg.SecAggConfig` of that threshold for an int."""
    if secure_aggregation is None:
        return "plain"
    if isinstance(secure_aggregation, int) and not isinstance(secure_aggregation, bool):
        from horizontal.secagg import SecAggConfig

        return SecAggConfig(threshold=secure_aggregation)
    return secure_aggregation
