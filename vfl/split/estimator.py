"""Split neural networks in scikit-learn style: :class:`SplitNNClassifier`,
:class:`SplitNNRegressor` (the protocol in :mod:`vfl.split.protocol`)::

    from vfl import SplitNNClassifier
    model = SplitNNClassifier(max_iter=30, random_state=0)
    model.fit({"lab": lab, "imaging": imaging}, y, label_party="imaging")
    model.predict_proba({"lab": lab_new, "imaging": imaging_new})

``bottoms={party: nn.Module}`` and ``top=nn.Module`` take modules of your own (each bottom
maps its party's standardised columns to an embedding; the top maps the combined embeddings
to the outputs); by default a bottom is ``Linear(columns, embedding_dim) -> ReLU`` and the top
an MLP with ``hidden_layer_sizes``. The label party may hold features (it is one of ``parts``)
or none (it is not: name it with ``label_party=``).

The secure variant is ``protocol="protected"`` (or ``protocol=ProtectedLayer(...)`` for its
options: :mod:`vfl.split.interactive`); privacy is ``privacy=RandomizedResponse(epsilon)`` on
the labels, ``privacy=EmbeddingNoise(...)`` on the embeddings, or a tuple of both.

Simulated in this process (``fit``, ``predict``), the parties of the plain protocol take turns
on one thread (:class:`~vfl.federation.LocalFederation`'s ``scheduling="cooperative"``): they
never compute at once (each mini-batch is an embedding, then its gradient), and a thread each
would pay for waking the other core at every hand-off (0.27 ms a batch of 0.63 measured on
default_credit at batch 64; ``benchmarks/split.py`` prints the ratio to centralised training).
The same messages pass, in the same order.
With a protected layer the parties keep a thread each: their ciphertext work overlaps.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vfl import persistence
from vfl.estimator import FederatedEstimator, Role, renamed_parameters, run_deployed
from vfl.extras import optional, require
from vfl.federation.base import Federation
from vfl.federation.local import Scheduling
from vfl.persistence import model_files
from vfl.privacy import randomized_response, record_randomized_response
from vfl.privacy.options import RandomizedResponse
from vfl.split.defences import (
    EmbeddingNoise,
    Quantizer,
)
from vfl.split.interactive import InteractiveTop, LayerShare, ProtectedLayer
from vfl.split.options import (
    PROTOCOLS,
    RENAMED,
    SeededRole,
    defences_of,
    module_seed,
    protected_layer_of,
    protected_width,
    translate_renamed,
)
from vfl.split.options import (
    epoch_history as _history,
)
from vfl.split.part import SplitPart
from vfl.split.protocol import DataRole, LabelRole, ScoreRole, SplitResult, SplitSpec
from vfl.training.modules import mlp, output_width, seeded
from vfl.training.standardise import Standardiser
from vfl.validation import (
    check_class_labels,
    check_numeric,
    check_parts,
    check_targets,
    label_party_of,
)

if TYPE_CHECKING:
    from torch import nn
else:
    nn = optional("torch.nn", for_=__name__)

__all__ = ["PROTOCOLS", "SplitNNClassifier", "SplitNNRegressor"]


class _SplitNN(FederatedEstimator):
    _task = ""

    @renamed_parameters(RENAMED, translate_renamed)
    def __init__(
        self,
        *,
        bottoms: dict[str, nn.Module] | None = None,
        top: nn.Module | None = None,
        embedding_dim: int = 16,
        hidden_layer_sizes: tuple[int, ...] = (32,),
        aggregation: str = "concat",
        max_iter: int = 30,
        batch_size: int = 64,
        learning_rate: float = 0.01,
        optimizer: str = "adam",
        tol: float | None = 1e-4,
        n_iter_no_change: int = 5,
        validation_fraction: float = 0.1,
        random_state: int | None = None,
        privacy: Any = None,
        gradient_protection: str | None = None,
        compression: Any = None,
        protocol: str | ProtectedLayer = "plain",
        timeout: float | None = None,
        verbose: int = 0,
    ) -> None:
        self.bottoms = bottoms
        self.top = top
        self.embedding_dim = embedding_dim
        self.hidden_layer_sizes = hidden_layer_sizes
        self.aggregation = aggregation
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.privacy = privacy
        self.gradient_protection = gradient_protection
        self.compression = compression
        self.protocol = protocol
        self.timeout = timeout
        self.verbose = verbose

    # -- the options -----------------------------------------------------------------------

    @property
    def protected_layer(self) -> ProtectedLayer | None:
        """The :class:`~vfl.split.interactive.ProtectedLayer` that ``protocol`` names (None
        under ``"plain"``), checked."""
        return protected_layer_of(self.protocol)

    @property
    def embedding_noise(self) -> EmbeddingNoise | None:
        """The :class:`~vfl.split.defences.EmbeddingNoise` among ``privacy`` (None without),
        checked: what an audit applies to the embeddings it reconstructs."""
        return self._defences()[1]

    def _defences(self) -> tuple[RandomizedResponse | None, EmbeddingNoise | None]:
        """``privacy`` as ``(randomised response on the labels, noise on the embeddings)``,
        each checked (:func:`vfl.split.options.defences_of`)."""
        return defences_of(self.privacy, self._task)

    # -- checks and modules ----------------------------------------------------------------

    def _spec(
        self, label_party: str, data_parties: list[str], outputs: int, ledger: Any
    ) -> SplitSpec:
        if self.aggregation not in ("concat", "sum"):
            raise ValueError(f'aggregation must be "concat" or "sum", got {self.aggregation!r}')
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f'optimizer must be "adam" or "sgd", got {self.optimizer!r}')
        for name, value in [("max_iter", self.max_iter), ("batch_size", self.batch_size)]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.random_state is not None and (
            not isinstance(self.random_state, int) or isinstance(self.random_state, bool)
        ):
            raise ValueError(
                f"random_state must be None or an integer the parties agree on (it draws the "
                f"batches and initialises the modules), got {self.random_state!r}"
            )
        if not 0 <= self.validation_fraction < 0.5:
            raise ValueError(
                f"validation_fraction must be in [0, 0.5), got {self.validation_fraction!r}"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if not isinstance(self.verbose, int) or self.verbose < 0:  # True counts as 1
            raise ValueError(f"verbose must be an integer >= 0, got {self.verbose!r}")
        if self.gradient_protection not in (None, "norm"):
            raise ValueError(
                f'gradient_protection must be None or "norm", got {self.gradient_protection!r}'
            )
        _, embedding_noise = self._defences()
        quantizer = Quantizer(self.compression)
        quantizer.check()
        width = self._layer_width()
        senders = [p for p in data_parties if p != label_party]
        if not senders:
            raise ValueError(
                f"split learning needs at least one data party besides the label party "
                f"{label_party!r}; got {data_parties}"
            )
        return SplitSpec(
            label_party=label_party,
            data_parties=tuple(data_parties),
            task=self._task,
            outputs=outputs,
            aggregation=self.aggregation,
            max_iter=self.max_iter,
            batch_size=self.batch_size,
            learning_rate=float(self.learning_rate),
            optimizer=self.optimizer,
            tol=self.tol,
            patience=self.n_iter_no_change,
            validation_fraction=float(self.validation_fraction),
            # the roles agree on the seed as they start (SeededRole)
            random_state=self.random_state,
            embedding_noise=embedding_noise,
            gradient_protection=self.gradient_protection,
            compression=quantizer,
            ledger=ledger,
            protected=self.protected_layer,
            width=width,
            verbose=int(self.verbose),
        )

    def _layer_width(self) -> int:
        """The protected layer's outputs (0 without one), its option checked."""
        return protected_width(
            self.protected_layer,
            self.aggregation,
            self.compression,
            self.top,
            self.hidden_layer_sizes,
        )

    def build_bottom(
        self, party: str, position: int, columns: int, seed: int | None = None
    ) -> nn.Module:
        """Party ``party``'s bottom (its own module, copied, or the default), initialised
        from ``seed`` (default ``random_state``; the agreed seed of a fit without one) and
        its position among the data parties: each party builds its own alike in simulation
        and in deployment."""
        import copy

        given = (self.bottoms or {}).get(party)
        with seeded(module_seed(self.random_state if seed is None else seed, 1, position)):
            module = (
                copy.deepcopy(given)
                if given is not None
                else nn.Sequential(nn.Linear(columns, self.embedding_dim), nn.ReLU())
            ).float()
        output_width(module, columns, f"party {party!r}: its bottom module")
        return module

    def build_top(
        self, joined: int, outputs: int, own: int = 0, seed: int | None = None
    ) -> nn.Module:
        """The top for combined embeddings of width ``joined`` (checked), initialised from
        ``seed`` (default ``random_state``). With a protected layer, an
        :class:`~vfl.split.interactive.InteractiveTop`: the label party's own block of the
        layer (``own`` its embedding width) and the top on the layer's outputs (the default
        top's first hidden layer *is* the protected layer)."""
        import copy

        width = self._layer_width()
        n_in = width or joined
        hidden = self.hidden_layer_sizes[1:] if width else self.hidden_layer_sizes
        with seeded(module_seed(self.random_state if seed is None else seed, 2, 0)):
            top = (
                copy.deepcopy(self.top).float()
                if self.top is not None
                else mlp(n_in, outputs, hidden)
            )
            if width:
                top = InteractiveTop(own, width, top, joined)
        what = (
            "the top module (on the protected layer's outputs)"
            if width
            else ("the top module (on the combined embeddings)")
        )
        given = output_width(top.top if width else top, n_in, what)
        if given != outputs:
            raise ValueError(f"the top module gives {given} outputs, not {outputs}")
        return top

    def build_modules(
        self, columns: dict[str, int], outputs: int
    ) -> tuple[dict[str, nn.Module], nn.Module]:
        """Every party's bottom (``columns``: party -> column count, in order) and the top,
        as a fit builds them."""
        unknown = sorted(set(self.bottoms or {}) - set(columns))
        if unknown:
            raise ValueError(f"bottoms names parties {unknown} that hold no columns here")
        bottoms = {p: self.build_bottom(p, k, d) for k, (p, d) in enumerate(columns.items())}
        widths = [output_width(bottoms[p], d, p) for p, d in columns.items()]
        if self.aggregation == "sum" and len(set(widths)) > 1:
            found = dict(zip(columns, widths, strict=True))
            raise ValueError(f'aggregation="sum" needs bottoms of one width; they are {found}')
        joined = sum(widths) if self.aggregation == "concat" else widths[0]
        return bottoms, self.build_top(joined, outputs)

    # -- simulation ------------------------------------------------------------------------

    def fit(
        self,
        parts: Any,
        y: Any,
        *,
        label_party: str | None = None,
        keep_payloads: bool = False,
        keep_views: bool = False,
        ledger: Any = None,
    ) -> _SplitNN:
        """Train with every party simulated in this process. ``parts``: ``{party: DataFrame}``
        (or :class:`~vfl.validation.VerticalFrames`) of the aligned rows; ``y`` the labels,
        held by ``label_party`` (one of ``parts``, or a party without features).
        ``keep_views`` keeps, for :mod:`vfl.audit.split`, what each sender received
        (``views_``: ``{party: [(rows, gradients), ...]}``), what the label party received of
        each sender's rows (``label_views_``: ``{party: [(rows, values), ...]}``, the
        embeddings, or with a protected layer its output ``z``) and each sender's own
        embeddings of the same batches before its defences (``embeddings_``, the truth)."""
        require("torch", for_=type(self).__name__)
        self._forget()
        label_party = label_party_of(parts, label_party)
        anchor = label_party if label_party in _frames(parts) else next(iter(_frames(parts)))
        frames = check_parts(parts, anchor)
        index = next(iter(frames.values())).index
        targets, outputs = self._labels(y, index, label_party, ledger)
        spec = replace(
            self._spec(label_party, list(frames), outputs, self._ledger_or(ledger)),
            keep_views=keep_views,
        )
        unknown = sorted(set(self.bottoms or {}) - set(frames))
        if unknown:
            raise ValueError(f"bottoms names parties {unknown} that hold no columns here")
        roles: dict[str, Role] = {
            p: self._role(spec, p, frames[p], None, outputs) for p in spec.senders
        }
        roles[label_party] = self._role(
            spec, label_party, frames.get(label_party), targets, outputs
        )
        results = self._simulate(roles, keep_payloads=keep_payloads, scheduling=self._scheduling)
        self._collect(results, spec, label_party in frames)
        return self

    def _forget(self) -> None:
        """Nothing of an earlier fit survives a new one."""
        for stale in (
            "views_",
            "label_views_",
            "embeddings_",
            "privacy_ledger_",
            "parts_",
            "initial_",
        ):
            if hasattr(self, stale):
                delattr(self, stale)
        self.shares_: dict[str, dict[str, Any]] = {}
        self.standardisers_: dict[str, Standardiser] = {}
        self.columns_: dict[str, list[str]] = {}

    def _ledger_or(self, ledger: Any) -> Any:
        return getattr(self, "privacy_ledger_", ledger)

    def _labels(
        self, y: Any, index: pd.Index, label_party: str, ledger: Any
    ) -> tuple[np.ndarray[Any, Any], int]:
        """The label party's targets (randomised under ``privacy=RandomizedResponse``) and
        the outputs; opens the fit's ledger (``privacy_ledger_``)."""
        response, _ = self._defences()
        targets, outputs = self._targets(y, index, label_party)
        if response is not None:
            targets = randomized_response(targets, classes=outputs, epsilon=response.epsilon)
        self._open_ledger(ledger)
        if response is not None:
            record_randomized_response(
                self.privacy_ledger_, holder=label_party, epsilon=response.epsilon
            )
        return targets, outputs

    def _open_ledger(self, ledger: Any) -> None:
        """The fit's ledger, kept as ``privacy_ledger_`` (empty when no defence spends)."""
        self._fitted_ledger(ledger)

    def _role(
        self,
        spec: SplitSpec,
        party: str,
        frame: pd.DataFrame | None,
        targets: np.ndarray[Any, Any] | None,
        outputs: int,
    ) -> Role:
        """Party ``party``'s role, built from its own frame only (standardised with its own
        statistics) and, at the label party, its targets."""
        module, x = None, None
        if frame is not None:
            values = check_numeric(frame, party, [str(c) for c in frame.columns])
            self.columns_[party] = [str(c) for c in frame.columns]
            self.standardisers_[party] = Standardiser().fit(values)
            module = self.build_bottom(party, spec.data_parties.index(party), frame.shape[1])
            x = self._design(party, frame)
        if party == spec.label_party:
            if targets is None:
                raise ValueError(f"party {party!r} is the label party: pass its labels")
        elif module is None or x is None:
            raise ValueError(f"party {party!r} sends embeddings: pass its features")
        # the modules are built again from the agreed seed (the first build checked them)
        return SeededRole(self, spec, party, x, targets, outputs)

    def _built_role(
        self,
        spec: SplitSpec,
        party: str,
        module: nn.Module | None,
        x: np.ndarray[Any, Any] | None,
        targets: np.ndarray[Any, Any] | None,
        outputs: int,
    ) -> Role:
        """The role of ``party`` with its bottom ``module`` (a label party's top is built when
        it learns the embeddings' widths), from ``spec``'s seed."""
        seed = spec.random_state
        if party == spec.label_party and targets is not None:
            return LabelRole(
                spec,
                lambda joined, own: self.build_top(joined, outputs, own, seed=seed),
                module,
                x,
                targets,
            )
        if module is None or x is None:
            raise ValueError(f"party {party!r} sends embeddings: pass its features")
        return DataRole(spec, module, x)

    def _design(self, party: str, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        values = check_numeric(frame, party, self.columns_[party])
        return self.standardisers_[party].transform(values)

    def _collect(self, results: dict[str, Any], spec: SplitSpec, own: bool) -> None:
        label: SplitResult = results[spec.label_party]
        self.modules_ = {p: results[p].module for p in spec.senders}
        if own and label.module is not None:
            self.modules_[spec.label_party] = label.module
        self.top_ = label.top
        self.label_party_ = spec.label_party
        self.data_parties_ = list(spec.data_parties)
        self.spec_ = replace(spec, random_state=label.random_state)
        self.n_iter_ = label.n_iter
        self.best_epoch_ = label.best_epoch
        self.loss_curve_ = label.loss_curve
        self.epoch_seconds_ = label.epoch_seconds
        self.history_ = _history(label)
        views = {p: results[p].view for p in spec.senders if results[p].view is not None}
        if views:
            self.views_ = views
        if label.seen is not None:
            self.label_views_ = label.seen
            self.embeddings_ = {
                p: results[p].embeddings for p in spec.senders if results[p].embeddings is not None
            }
        self.shares_ = {
            p: results[p].shares for p in spec.data_parties if results[p].shares is not None
        }
        if label.shares is not None:
            self.shares_[spec.label_party] = label.shares
        self.initial_ = {
            p: results[p].initial for p in spec.senders if results[p].initial is not None
        }
        self.parts_ = {p: self._part(p) for p in spec.data_parties}

    # -- deployment: one party, its own federation -------------------------------------------

    def fit_party(
        self,
        federation: Federation,
        frame: pd.DataFrame | None,
        y: Any = None,
        *,
        label_party: str,
        data_parties: list[str],
        ledger: Any = None,
    ) -> _SplitNN:
        """This party's role of training (deployment): ``frame`` its own aligned features
        (None at a label party without features, and at a coordinator, which split learning
        does not use), ``y`` its labels at ``label_party``, ``data_parties`` every party with
        features, in the same order everywhere (it seeds each party's bottom). Every party
        passes the same ``random_state``, or every party None (they then agree on a seed)."""
        require("torch", for_=type(self).__name__)
        name = federation.name
        if name != label_party and name not in data_parties:
            return self  # a coordinator: no role here
        self._forget()
        if frame is not None:
            frame = check_parts({name: frame}, name)[name]
        targets, outputs = None, 1
        if name == label_party:
            if y is None:
                raise ValueError(f"party {name!r} is the label party: pass its labels")
            index = frame.index if frame is not None else pd.RangeIndex(len(y))
            targets, outputs = self._labels(y, index, label_party, ledger)
        else:
            self._open_ledger(ledger)
        spec = self._spec(label_party, list(data_parties), outputs, self._ledger_or(ledger))
        role = self._role(spec, name, frame, targets, outputs)
        result: SplitResult = run_deployed({name: role}, federation)[name]
        self.modules_ = {name: result.module} if result.module is not None else {}
        self.shares_ = {name: result.shares} if result.shares is not None else {}
        self.top_ = result.top
        self.label_party_, self.data_parties_ = label_party, list(data_parties)
        self.spec_ = replace(spec, random_state=result.random_state)
        self.n_iter_, self.best_epoch_ = result.n_iter, result.best_epoch
        self.loss_curve_, self.epoch_seconds_ = result.loss_curve, result.epoch_seconds
        self.history_ = _history(result)
        self.parts_ = {name: self._part(name)}
        return self

    def predict_party(
        self, federation: Federation, frame: pd.DataFrame | None, *, data_parties: Any = None
    ) -> np.ndarray[Any, Any] | None:
        """This party's role of scoring (deployment): the label party gets what
        ``predict_proba`` (classifier) or ``predict`` (regressor) would, the others None."""
        if frame is None and getattr(self, "spec_", None) is None:
            return None  # a coordinator: no role here
        self._check_fitted("spec_")
        name, spec = federation.name, self.spec_
        if name != spec.label_party and name not in spec.data_parties:
            return None
        module = self.modules_.get(name)
        x = self._design(name, frame) if frame is not None else None
        if module is not None:
            module.eval()
        is_label = name == spec.label_party
        if is_label and self.top_ is not None:
            self.top_.eval()
        role = ScoreRole(
            spec,
            module,
            x,
            top=self.top_ if is_label else None,
            rows=None if frame is None else len(frame),
            shares=self.shares_.get(name),
        )
        out = run_deployed({name: role}, federation)[name]
        return None if out is None else self._from_outputs(np.asarray(out))

    def _from_outputs(self, outputs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return outputs

    # -- persistence ---------------------------------------------------------------------------

    def _part(self, party: str) -> SplitPart:
        """Party ``party``'s part (what it may save: nothing of another party)."""
        spec = self.spec_
        is_label = party == spec.label_party
        extra: dict[str, Any] = {
            "task": self._task,
            "label_party": spec.label_party,
            "data_parties": list(spec.data_parties),
            "aggregation": spec.aggregation,
            "embedding_dim": self.embedding_dim,
            "hidden": list(self.hidden_layer_sizes),
            "outputs": spec.outputs,
        }
        top: dict[str, Any] = {}
        if self.protected_layer is not None:
            extra["protected_width"] = spec.width
            extra["shares"] = {
                peer: share.to_dict() for peer, share in self.shares_.get(party, {}).items()
            }
        if is_label and self.top_ is not None:
            top = persistence.state_dict_to_arrays(self.top_.state_dict())
            if isinstance(self.top_, InteractiveTop):
                extra["joined"] = self.top_.joined
                extra["own"] = 0 if self.top_.own is None else self.top_.own.in_features
            else:
                first = next(m for m in self.top_.modules() if isinstance(m, nn.Linear))
                extra["joined"] = int(first.in_features)
            if self._task == "classification":
                extra["classes"] = [
                    c.item() if isinstance(c, np.generic) else c for c in self.classes_
                ]
            else:
                extra["target"] = [self.target_mean_, self.target_scale_]
        module = self.modules_.get(party)
        scaling = (
            self.standardisers_[party].to_arrays()
            if party in self.standardisers_
            else {"mean": np.zeros(0), "scale": np.zeros(0)}  # a label party without columns
        )
        return SplitPart(
            party=party,
            role="active" if is_label else "passive",
            columns=self.columns_.get(party, []),
            mean=scaling["mean"],
            scale=scaling["scale"],
            bottom={} if module is None else persistence.state_dict_to_arrays(module.state_dict()),
            top=top,
            extra=extra,
        )

    def save(self, path: str | Path) -> Path:
        """Write the model to the folder ``path`` (created): each held party's part as
        ``<party>.npz`` (a party saves only its own; nothing of another party) and the
        privacy ledger, when a defence spent anything, as ``privacy_ledger.json``. Returns
        the folder."""
        self._check_fitted("spec_")
        parties = [p for p in self.spec_.data_parties if p in self.modules_]
        if self.top_ is not None and self.spec_.label_party not in parties:
            parties.append(self.spec_.label_party)
        writers = {party: self._part(party).save for party in parties}
        return persistence.save_parts(path, writers, getattr(self, "privacy_ledger_", None))

    def load(self, *paths: str | Path, label_party: str | None = None) -> _SplitNN:
        """Read a model written by :meth:`save` (or ``vflink party``): its folder, or part
        files (a party loads its own), into this estimator, whose hyperparameters must be
        those of the fit (the modules are rebuilt from them). ``label_party`` is read from
        the parts; a coordinator, which loads none, names it."""
        from vfl.privacy import PrivacyLedger

        require("torch", for_=type(self).__name__)
        self._forget()
        self.privacy_ledger_ = PrivacyLedger()
        self.modules_, self.top_ = {}, None
        spec: SplitSpec | None = None
        loaded: dict[str, SplitPart] = {}
        for path in model_files(paths):
            if path.name == "privacy_ledger.json":
                self.privacy_ledger_ = PrivacyLedger.load(path)
                continue
            loaded[str(path)] = SplitPart.load(path)
        if label_party is None:
            named = {str(p.extra.get("label_party")) for p in loaded.values()}
            if len(named) != 1:
                raise ValueError(
                    "load needs label_party='...' here: no part was loaded (a coordinator) or "
                    f"the parts name different label parties ({sorted(named)})"
                )
            label_party = named.pop()
        for source, part in loaded.items():
            extra, party = part.extra, part.party
            for key, value in [
                ("aggregation", self.aggregation),
                ("embedding_dim", self.embedding_dim),
                ("hidden", list(self.hidden_layer_sizes)),
                ("task", self._task),
                ("protected_width", self._layer_width() or None),
            ]:
                if extra.get(key) != value:
                    raise ValueError(
                        f"{source} was fitted with {key}={extra.get(key)!r}, this estimator has "
                        f"{value!r}: load it with the fit's hyperparameters"
                    )
            parties = [str(p) for p in extra["data_parties"]]
            if part.bottom:
                self.columns_[party] = part.columns
                self.standardisers_[party] = Standardiser.from_arrays(
                    {"mean": part.mean, "scale": part.scale}
                )
                module = self.build_bottom(party, parties.index(party), len(part.columns))
                module.load_state_dict(persistence.arrays_to_state_dict(part.bottom))
                self.modules_[party] = module
            shares = extra.get("shares") or {}
            if shares:
                self.shares_[party] = {
                    str(peer): LayerShare.from_dict(data, str(peer))
                    for peer, data in shares.items()
                }
            if part.top:
                self.top_ = self.build_top(
                    int(extra["joined"]), int(extra["outputs"]), int(extra.get("own", 0))
                )
                self.top_.load_state_dict(persistence.arrays_to_state_dict(part.top))
                if self._task == "classification":
                    self.classes_ = np.array(extra["classes"])
                else:
                    self.target_mean_, self.target_scale_ = map(float, extra["target"])
            spec = self._spec(label_party, parties, int(extra["outputs"]), None)
        if spec is None:  # a coordinator, which holds no part
            self.label_party_ = label_party
            return self
        self.label_party_, self.data_parties_, self.spec_ = (
            label_party,
            list(spec.data_parties),
            spec,
        )
        self.parts_ = {p: self._part(p) for p in self.modules_}
        return self

    def _outputs(self, parts: Any) -> np.ndarray[Any, Any]:
        self._check_fitted("modules_")
        spec = self.spec_
        anchor = spec.label_party if spec.label_party in self.modules_ else spec.senders[0]
        frames = check_parts(parts, anchor)
        missing = sorted(set(self.modules_) - set(frames))
        extra = sorted(set(frames) - set(self.modules_))
        if missing or extra:
            raise ValueError(
                f"predict needs the parties the model was fitted with: missing {missing}, "
                f"unknown {extra}"
            )
        rows = len(next(iter(frames.values())))
        roles: dict[str, Role] = {
            p: ScoreRole(
                spec, self.modules_[p], self._design(p, frames[p]), shares=self.shares_.get(p)
            )
            for p in spec.senders
        }
        label = spec.label_party
        roles[label] = ScoreRole(
            spec,
            self.modules_.get(label),
            self._design(label, frames[label]) if label in frames else None,
            top=self.top_,
            rows=rows,
            shares=self.shares_.get(label),
        )
        for module in [*self.modules_.values(), self.top_]:
            module.eval()
        out: np.ndarray[Any, Any] = self._simulate(roles, fit=False, scheduling=self._scheduling)[
            label
        ]
        return out

    @property
    def _scheduling(self) -> Scheduling:
        """How a simulation runs the parties (see the module docstring)."""
        return "threads" if self.protected_layer is not None else "cooperative"

    def _targets(self, y: Any, index: pd.Index, party: str) -> tuple[np.ndarray[Any, Any], int]:
        raise NotImplementedError


def _frames(parts: Any) -> dict[str, Any]:
    from vfl.validation import VerticalFrames

    return parts.parts if isinstance(parts, VerticalFrames) else dict(parts)


class SplitNNClassifier(_SplitNN):
    """A split neural network classifier (see the module docstring).

    Parameters
    ----------
    bottoms, top : torch modules, optional
        Your own modules (copied); defaults sized from the columns.
    embedding_dim, hidden_layer_sizes
        The default bottoms' width and the default top's hidden layers.
    aggregation : {"concat", "sum"}
        How the label party combines the embeddings.
    max_iter, batch_size, learning_rate, optimizer ("adam" or "sgd")
        Training; each party steps its own optimiser on its own modules.
    tol, n_iter_no_change, validation_fraction
        Early stopping on the validation loss (a share of the rows drawn from
        ``random_state``; the training loss when 0), keeping the best epoch's modules.
    random_state : int, optional
        Draws the batches and validation rows and initialises the modules, the same at
        every party. None (default): the parties agree on a fresh seed at the start of the
        fit, each contributing OS randomness (in deployment every party then passes None).
    privacy : RandomizedResponse, EmbeddingNoise or a tuple of both, optional
        :class:`~vfl.privacy.options.RandomizedResponse` on the labels (epsilon-label-DP;
        classifier only) and/or :class:`~vfl.split.defences.EmbeddingNoise` (clipping and
        Gaussian noise on every sent embedding, :mod:`vfl.split.defences`); the spend is in
        ``privacy_ledger_``. Replaces the deprecated ``label_epsilon`` and
        ``embedding_noise``.
    gradient_protection : {None, "norm"}
        Norm matching on the returned gradients (a heuristic, no epsilon).
    compression : None, "float16" or int
        What the embeddings and gradients travel as.
    protocol : {"plain", "protected"} or ProtectedLayer
        ``"plain"`` (default): embeddings and gradients in the clear; ``"protected"``: the
        top's first layer on encrypted embeddings with secret-shared weights
        (:class:`~vfl.split.interactive.ProtectedLayer` with its defaults; pass a
        ProtectedLayer for its width, step and key size). Replaces the deprecated
        ``protected_layer``.
    timeout : float, optional
        Seconds a simulated party waits for a message (None, the default:
        :func:`vfl.estimator.wait_limit`, 600 s).
    verbose : int
        ``0`` (default): nothing shown but bars for long work (the epoch lines still go to
        the ``vflink.progress`` logger at INFO where logging is configured: a deployed
        party's log); ``1``: the label party shows every epoch (training and validation
        loss, best epoch) -- a bar on a terminal, else one line an epoch
        (:class:`vfl.progress.EpochProgress`).

    Attributes
    ----------
    modules_, top_, classes_, n_iter_, best_epoch_, loss_curve_, views_
        Each party's bottom, the top, the classes, epochs run, the epoch kept, the loss per
        epoch, what each sender received (``keep_views``).
    label_views_, embeddings_ : dict
        With ``keep_views``: what the label party received of each sender's rows per
        training batch (the embeddings, or the protected layer's output ``z``), and each
        sender's embeddings of those batches before its defences.
    columns_, standardisers_ : dict
        Each held party's columns and their scaling (its own means and deviations,
        :class:`~vfl.training.Standardiser`).
    history_ : list of dict
        One record per epoch at the label party: ``epoch``, ``loss``, ``seconds``.
    privacy_ledger_ : PrivacyLedger
        The fit's privacy spend (empty without ``privacy``).
    """

    _task = "classification"

    def _targets(self, y: Any, index: pd.Index, party: str) -> tuple[np.ndarray[Any, Any], int]:
        classes, codes = check_class_labels(y, index, party, max_classes=1000)
        self.classes_ = classes
        return codes, len(classes)

    def predict_proba(self, parts: Any) -> np.ndarray[Any, Any]:
        return self._from_outputs(self._outputs(parts))

    def _from_outputs(self, outputs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        from scipy.special import softmax

        out: np.ndarray[Any, Any] = softmax(outputs, axis=1)
        return out

    def predict(self, parts: Any) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self.classes_[self.predict_proba(parts).argmax(axis=1)]
        return out

    def score(self, parts: Any, y: Any) -> float:
        """Accuracy on ``parts`` (simulated scoring)."""
        return float(np.mean(self.predict(parts) == np.asarray(y)))


class SplitNNRegressor(_SplitNN):
    """A split neural network regressor (squared loss on the label party's standardised
    target); parameters as :class:`SplitNNClassifier`, ``privacy`` without
    :class:`~vfl.privacy.options.RandomizedResponse` (the targets are not classes)."""

    _task = "regression"

    def _targets(self, y: Any, index: pd.Index, party: str) -> tuple[np.ndarray[Any, Any], int]:
        t = check_targets(y, index, party)
        self.target_mean_, self.target_scale_ = float(t.mean()), float(t.std() or 1.0)
        return (t - self.target_mean_) / self.target_scale_, 1

    def predict(self, parts: Any) -> np.ndarray[Any, Any]:
        return self._from_outputs(self._outputs(parts))

    def _from_outputs(self, outputs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = outputs[:, 0] * self.target_scale_ + self.target_mean_
        return out

    def score(self, parts: Any, y: Any) -> float:
        """R^2 on ``parts`` (simulated scoring)."""
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=float), self.predict(parts)))
