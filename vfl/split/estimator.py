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
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from vfl.estimator import FederatedEstimator, Role
from vfl.split.defences import EmbeddingNoise, Quantizer, randomized_response
from vfl.split.protocol import DataRole, LabelRole, ScoreRole, SplitResult, SplitSpec
from vfl.training.modules import mlp, output_width
from vfl.validation import (
    check_class_labels,
    check_numeric,
    check_parts,
    check_targets,
    label_party_of,
)

__all__ = ["SplitNNClassifier", "SplitNNRegressor"]


class _SplitNN(FederatedEstimator):
    _task = ""

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
        random_state: int = 0,
        embedding_noise: EmbeddingNoise | None = None,
        gradient_protection: str | None = None,
        label_epsilon: float | None = None,
        compression: Any = None,
        timeout: float = 600.0,
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
        self.embedding_noise = embedding_noise
        self.gradient_protection = gradient_protection
        self.label_epsilon = label_epsilon
        self.compression = compression
        self.timeout = timeout

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
        if not isinstance(self.random_state, int) or isinstance(self.random_state, bool):
            raise ValueError(
                f"random_state must be an integer the parties agree on (it draws the batches "
                f"and initialises the modules), got {self.random_state!r}"
            )
        if not 0 <= self.validation_fraction < 0.5:
            raise ValueError(
                f"validation_fraction must be in [0, 0.5), got {self.validation_fraction!r}"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.gradient_protection not in (None, "norm"):
            raise ValueError(
                f'gradient_protection must be None or "norm", got {self.gradient_protection!r}'
            )
        if self.embedding_noise is not None:
            if not isinstance(self.embedding_noise, EmbeddingNoise):
                raise ValueError(
                    "embedding_noise must be an EmbeddingNoise(noise_multiplier, clip)"
                )
            self.embedding_noise.check()
        quantizer = Quantizer(self.compression)
        quantizer.check()
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
            random_state=self.random_state,
            embedding_noise=self.embedding_noise,
            gradient_protection=self.gradient_protection,
            compression=quantizer,
            ledger=ledger,
        )

    def build_modules(
        self, columns: dict[str, int], outputs: int
    ) -> tuple[dict[str, nn.Module], nn.Module]:
        """Every party's bottom (``columns``: party -> column count, in order) and the top,
        initialised from ``random_state`` (user modules are copied as given)."""
        import copy

        given = self.bottoms or {}
        unknown = sorted(set(given) - set(columns))
        if unknown:
            raise ValueError(f"bottoms names parties {unknown} that hold no columns here")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.random_state)
            bottoms: dict[str, nn.Module] = {}
            widths = []
            for party, d in columns.items():
                if party in given:
                    module = copy.deepcopy(given[party])
                else:
                    module = nn.Sequential(nn.Linear(d, self.embedding_dim), nn.ReLU())
                bottoms[party] = module.float()
                widths.append(output_width(module, d, f"party {party!r}: its bottom module"))
            if self.aggregation == "sum" and len(set(widths)) > 1:
                found = dict(zip(columns, widths, strict=True))
                raise ValueError(f'aggregation="sum" needs bottoms of one width; they are {found}')
            joined = sum(widths) if self.aggregation == "concat" else widths[0]
            if self.top is not None:
                top = copy.deepcopy(self.top).float()
            else:
                top = mlp(joined, outputs, self.hidden_layer_sizes)
        given_outputs = output_width(top, joined, "the top module (on the combined embeddings)")
        if given_outputs != outputs:
            raise ValueError(f"the top module gives {given_outputs} outputs, not {outputs}")
        return bottoms, top

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
        ``keep_views`` keeps what each sender received (``views_``: ``{party: [(rows,
        gradients), ...]}``) for :mod:`vfl.audit.split`."""
        for stale in ("views_", "privacy_ledger_"):  # nothing of an earlier fit survives
            if hasattr(self, stale):
                delattr(self, stale)
        label_party = label_party_of(parts, label_party)
        anchor = label_party if label_party in _frames(parts) else next(iter(_frames(parts)))
        frames = check_parts(parts, anchor)
        index = next(iter(frames.values())).index
        targets, outputs = self._targets(y, index, label_party)
        if self.label_epsilon is not None:
            if self._task != "classification":
                raise ValueError("label_epsilon (randomised response) is for SplitNNClassifier")
            targets = randomized_response(targets, outputs, self.label_epsilon)
        if self.label_epsilon is not None or self.embedding_noise is not None:
            if ledger is None:
                from vfl.privacy import PrivacyLedger

                ledger = PrivacyLedger()
            self.privacy_ledger_ = ledger
            if self.label_epsilon is not None:
                ledger.record(
                    holder=label_party,
                    data="its labels (randomised response)",
                    mechanism="randomized_response",
                    epsilon=float(self.label_epsilon),
                )
        self.means_ = {p: f.mean().to_numpy(dtype=float) for p, f in frames.items()}
        self.scales_ = {
            p: np.where((s := f.std(ddof=0).to_numpy(dtype=float)) > 0, s, 1.0)
            for p, f in frames.items()
        }
        self.columns_ = {p: [str(c) for c in f.columns] for p, f in frames.items()}
        spec = replace(
            self._spec(label_party, list(frames), outputs, ledger), keep_views=keep_views
        )
        bottoms, top = self.build_modules({p: f.shape[1] for p, f in frames.items()}, outputs)
        x = {p: self._design(p, f) for p, f in frames.items()}
        roles: dict[str, Role] = {p: DataRole(spec, bottoms[p], x[p]) for p in spec.senders}
        own = label_party in frames
        roles[label_party] = LabelRole(
            spec, top, bottoms.get(label_party), x.get(label_party), targets
        )
        results = self._simulate(roles, keep_payloads=keep_payloads)
        self._collect(results, spec, own)
        return self

    def _design(self, party: str, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        values = check_numeric(frame, party, self.columns_[party])
        out: np.ndarray[Any, Any] = (values - self.means_[party]) / self.scales_[party]
        return out

    def _collect(self, results: dict[str, Any], spec: SplitSpec, own: bool) -> None:
        label: SplitResult = results[spec.label_party]
        self.modules_ = {p: results[p].module for p in spec.senders}
        if own and label.module is not None:
            self.modules_[spec.label_party] = label.module
        self.top_ = label.top
        self.label_party_ = spec.label_party
        self.data_parties_ = list(spec.data_parties)
        self.spec_ = spec
        self.n_iter_ = label.n_iter
        self.best_epoch_ = label.best_epoch
        self.loss_curve_ = label.loss_curve
        self.epoch_seconds_ = label.epoch_seconds
        views = {p: results[p].view for p in spec.senders if results[p].view is not None}
        if views:
            self.views_ = views

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
            p: ScoreRole(spec, self.modules_[p], self._design(p, frames[p])) for p in spec.senders
        }
        label = spec.label_party
        roles[label] = ScoreRole(
            spec,
            self.modules_.get(label),
            self._design(label, frames[label]) if label in frames else None,
            top=self.top_,
            rows=rows,
        )
        for module in [*self.modules_.values(), self.top_]:
            module.eval()
        out: np.ndarray[Any, Any] = self._simulate(roles, fit=False)[label]
        return out

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
    random_state : int
        Draws the batches and validation rows and initialises the modules, the same at
        every party.
    embedding_noise : EmbeddingNoise, optional
        Clipping and Gaussian noise on every sent embedding (:mod:`vfl.split.defences`).
    gradient_protection : {None, "norm"}
        Norm matching on the returned gradients.
    label_epsilon : float, optional
        Randomised response on the labels (epsilon-label-DP).
    compression : None, "float16" or int
        What the embeddings and gradients travel as.

    Attributes
    ----------
    modules_, top_, classes_, n_iter_, best_epoch_, loss_curve_, privacy_ledger_, views_
    """

    _task = "classification"

    def _targets(self, y: Any, index: pd.Index, party: str) -> tuple[np.ndarray[Any, Any], int]:
        classes, codes = check_class_labels(y, index, party, max_classes=1000)
        self.classes_ = classes
        return codes, len(classes)

    def predict_proba(self, parts: Any) -> np.ndarray[Any, Any]:
        from scipy.special import softmax

        out: np.ndarray[Any, Any] = softmax(self._outputs(parts), axis=1)
        return out

    def predict(self, parts: Any) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = self.classes_[self.predict_proba(parts).argmax(axis=1)]
        return out

    def score(self, parts: Any, y: Any) -> float:
        """Accuracy on ``parts`` (simulated scoring)."""
        return float(np.mean(self.predict(parts) == np.asarray(y)))


class SplitNNRegressor(_SplitNN):
    """A split neural network regressor (squared loss on the label party's standardised
    target); parameters as :class:`SplitNNClassifier` without ``label_epsilon``."""

    _task = "regression"

    def _targets(self, y: Any, index: pd.Index, party: str) -> tuple[np.ndarray[Any, Any], int]:
        t = check_targets(y, index, party)
        self.target_mean_, self.target_scale_ = float(t.mean()), float(t.std() or 1.0)
        return (t - self.target_mean_) / self.target_scale_, 1

    def predict(self, parts: Any) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = (
            self._outputs(parts)[:, 0] * self.target_scale_ + self.target_mean_
        )
        return out

    def score(self, parts: Any, y: Any) -> float:
        """R^2 on ``parts`` (simulated scoring)."""
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=float), self.predict(parts)))
