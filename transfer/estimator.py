"""Federated transfer learning in scikit-learn style: :class:`FederatedTransferClassifier`
(the protocol in :mod:`transfer.ftl`)::

    from transfer import FederatedTransferClassifier
    model = FederatedTransferClassifier(random_state=0, verbose=1)
    model.fit(hospital, centre, y_hospital, overlap=pairs, target_labels=y_centre_few)
    model.predict_proba(centre_new)           # the target scores its rows alone

``overlap`` pairs the two parties' row labels of the patients in both, in the common order
(:func:`overlap_pairs` finds them by private set intersection on an ID column). Each party's
columns are standardised with its own statistics; encoders default to ``Linear(dim) -> tanh``
from ``random_state`` (``hidden_layer_sizes=`` adds layers; or pass your own modules).

The defaults are chosen for a fit that ends in well under a minute on two cores with
2048-bit keys (200 shared patients, 50 target labels: about 1 s an iteration) without losing
quality: ``max_iter=30`` (on the synthetic task of :func:`vfl.datasets.make_transfer_pair`
the target's test AUC does not improve past 20-30 iterations; figures in the README) and
early stopping on the target's held-out labelled rows (``tol``, ``n_iter_no_change``,
``validation_fraction``; see :mod:`transfer.ftl`), which keeps the iteration of lowest
validation loss. ``verbose=1`` shows each party's iterations as they run
(:class:`vfl.progress.EpochProgress`).
"""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from transfer.encoder import BinaryScores
from transfer.ftl import FTLResult, FTLSpec, SourceRole, TargetRole
from vfl import persistence
from vfl.crypto.policy import KeyPolicy
from vfl.estimator import (
    FederatedEstimator,
    Role,
    deprecated_parameters,
    fresh_seed,
    renamed_parameters,
    run_deployed,
)
from vfl.extras import optional, require
from vfl.federation.base import Federation
from vfl.privacy import randomized_response, record_randomized_response
from vfl.privacy.options import RandomizedResponse
from vfl.training.modules import mlp, output_width, seeded
from vfl.training.standardise import Standardiser
from vfl.validation import check_numeric

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["PROTOCOLS", "STACK_MIN_LABELS", "FederatedTransferClassifier", "overlap_pairs"]

PROTOCOLS = ("masked", "plain")
"""``protocol=``: ``"masked"`` (default) sends the cross-party terms under Paillier with
masks; ``"plain"`` sends them in the clear (simulation only; warns)."""

RENAMED = {
    "hidden": "hidden_layer_sizes",
    "secure": 'protocol="masked" (True) or protocol="plain" (False)',
    "label_epsilon": "privacy=RandomizedResponse(epsilon)",
}
KIND = "transfer.FederatedTransferPart"


def _translate(old: dict[str, Any]) -> dict[str, Any]:
    """The current parameters that the deprecated keywords ``old`` spelled."""
    new: dict[str, Any] = {}
    if "hidden" in old:
        new["hidden_layer_sizes"] = old["hidden"]
    if "secure" in old:
        new["protocol"] = "masked" if old["secure"] else "plain"
    if old.get("label_epsilon") is not None:
        new["privacy"] = RandomizedResponse(old["label_epsilon"])
    return new


STACK_MIN_LABELS = 50
"""Target labels from which ``head="stack"`` fits its logistic regression."""

STACK_WEIGHT = 10.0
"""The transferred score's scale in the stacked head (its penalty is 1/100 of a column's)."""


def _check_early_stopping(tol: Any, patience: Any, fraction: Any) -> None:
    """``tol`` (None or a number >= 0), ``n_iter_no_change`` (``patience``, a positive
    integer) and ``validation_fraction`` (in ``[0, 0.5)``), or a ValueError naming the one."""
    if tol is not None and not (
        isinstance(tol, (int, float))
        and not isinstance(tol, bool)
        and np.isfinite(tol)
        and tol >= 0
    ):
        raise ValueError(f"tol must be None (no early stopping) or a number >= 0, got {tol!r}")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise ValueError(f"n_iter_no_change must be a positive integer, got {patience!r}")
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 0.5:
        raise ValueError(f"validation_fraction must be in [0, 0.5), got {fraction!r}")


def overlap_pairs(
    source: pd.DataFrame, target: pd.DataFrame, *, id_column: str, order_key: str = ""
) -> pd.DataFrame:
    """The patients in both tables by private set intersection on ``id_column``
    (:func:`vfl.align`, simulated here): ``DataFrame(source=..., target=...)`` of row labels in
    the common order."""
    from vfl.alignment import align

    marked = {
        "source": source[[id_column]].assign(_row=np.arange(len(source))),
        "target": target[[id_column]].assign(_row=np.arange(len(target))),
    }
    aligned = align(marked, method="psi", id_column=id_column, order_key=order_key)
    pairs: pd.DataFrame = pd.DataFrame(
        {
            "source": source.index[aligned["source"]["_row"].to_numpy()],
            "target": target.index[aligned["target"]["_row"].to_numpy()],
        }
    )
    return pairs


class FederatedTransferClassifier(BinaryScores, FederatedEstimator):
    """Secure federated transfer learning with overlapping samples (see :mod:`transfer.ftl`).

    Parameters
    ----------
    source_encoder, target_encoder : torch modules, optional
        Your own encoders (copied), each mapping its party's standardised columns to ``dim``
        numbers; by default an MLP with ``hidden_layer_sizes`` layers ending in ``tanh``.
    dim : int
        The common representation's width ``d``.
    hidden_layer_sizes : tuple of int
        The default encoders' hidden layers (none by default: ``Linear -> tanh``; on the
        synthetic task an MLP encoder overfits the target's rows without improving transfer).
    gamma : float
        Weight of the alignment loss on the overlapping patients.
    source_weight : float
        Weight of the source's own prediction loss on its labelled rows.
    max_iter : int
        The most iterations (full-batch Adam steps at both parties).
    learning_rate, weight_decay
        Adam's step and the encoders' L2 regularisation.
    protocol : {"masked", "plain"}
        ``"masked"`` (default): the cross-party terms under Paillier with masks; ``"plain"``
        sends them in the clear (simulation only, warns). Replaces the deprecated
        ``secure=True/False``.
    key_bits, insecure
        Both parties' Paillier keys (2048 bits by default; smaller only with ``insecure``).
    privacy : RandomizedResponse, optional
        :class:`~vfl.privacy.options.RandomizedResponse` on the source's labels before
        training (epsilon-label-DP for everything computed from them, in the ledger).
        Replaces the deprecated ``label_epsilon``.
    head : {"stack", "phi"}
        The target's final scorer. ``"phi"``: the paper's ``sigmoid(Phi . u_B)``. ``"stack"``
        (default): where the target holds at least ``STACK_MIN_LABELS`` labels (10 of each
        class), an L2 logistic regression on the transferred score (scaled up, so that the
        penalty trusts it most) and the target's own standardised columns, its strength by
        3-fold cross-validation on the target's labels -- so that many target labels are not
        wasted on a score built for few; with fewer labels, ``"phi"``. Local to the target.
        It is fitted on every labelled row, the held-out ones included.
    tol, n_iter_no_change, validation_fraction
        Early stopping, as in split learning: the target holds out ``validation_fraction``
        of its labelled rows outside the overlap (of each class, drawn from
        ``random_state``; at least ``transfer.ftl.MIN_VALIDATION_ROWS`` of them, else no
        early stopping: 50 labels hold out 10, 20 labels none) and training stops once the
        transferred loss of those rows has not fallen by ``tol`` for ``n_iter_no_change``
        iterations; both parties keep the iteration of lowest validation loss. ``tol=None``:
        ``max_iter`` iterations, the last kept, every labelled row trained on.
    random_state : int, optional
        Initialises the encoders and draws the held-out rows (each party its own: nothing
        drawn from it must agree across parties). None (default): a fresh seed per fit.
    timeout : float, optional
        Seconds a simulated party waits for a message (None, the default:
        :func:`vfl.estimator.wait_limit`, 600 s).
    verbose : int
        ``0``: nothing shown but bars for long work (iteration lines still go to the
        ``vflink.progress`` logger at INFO where logging is configured); ``1``: each party
        shows its iterations (the source its own loss, the target its validation loss and
        best iteration) -- a bar on a terminal, else a line each.

    Attributes
    ----------
    source_encoder_, target_encoder_, phi_, classes_, loss_curve_, iteration_seconds_,
    n_iter_ (updates made), best_epoch_ (updates in the kept model: 0 is the initial one),
    validation_loss_curve_ (the target's held-out loss after 0, 1, ... updates; empty without
    early stopping), views_ (with ``keep_views``: the target's gradients of the overlap rows
    per iteration)
    columns_, standardisers_ : dict
        Each held party's columns and their scaling (its own means and deviations,
        :class:`~vfl.training.Standardiser`).
    history_ : list of dict
        One record per iteration: ``epoch`` (1-based), ``loss`` (this party's: the source's
        own loss in simulation), ``seconds``, and the target's ``validation_loss`` after it
        where early stopping held rows out.
    privacy_ledger_ : PrivacyLedger
        The fit's privacy spend (empty without ``privacy``).
    """

    @renamed_parameters(RENAMED, _translate)
    def __init__(
        self,
        *,
        source_encoder: nn.Module | None = None,
        target_encoder: nn.Module | None = None,
        dim: int = 8,
        hidden_layer_sizes: tuple[int, ...] = (),
        gamma: float = 1.0,
        source_weight: float = 1.0,
        max_iter: int = 30,
        learning_rate: float = 0.01,
        weight_decay: float = 1e-4,
        protocol: str = "masked",
        key_bits: int = 2048,
        insecure: bool = False,
        privacy: Any = None,
        head: str = "stack",
        tol: float | None = 1e-4,
        n_iter_no_change: int = 5,
        validation_fraction: float = 0.2,
        random_state: int | None = None,
        timeout: float | None = None,
        verbose: int = 0,
    ) -> None:
        self.source_encoder = source_encoder
        self.target_encoder = target_encoder
        self.dim = dim
        self.hidden_layer_sizes = hidden_layer_sizes
        self.gamma = gamma
        self.source_weight = source_weight
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.protocol = protocol
        self.key_bits = key_bits
        self.insecure = insecure
        self.privacy = privacy
        self.head = head
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.timeout = timeout
        self.verbose = verbose

    # -- checks and modules ----------------------------------------------------------------

    def _response(self) -> RandomizedResponse | None:
        """``privacy``, checked: None or randomised response on the source's labels."""
        if self.privacy is None:
            return None
        if not isinstance(self.privacy, RandomizedResponse):
            raise ValueError(
                "privacy must be None or RandomizedResponse(epsilon) (on the source's labels), "
                f"got {self.privacy!r}"
            )
        self.privacy.check()
        return self.privacy

    def _seed(self) -> int:
        """This fit's seed: ``random_state``, or a fresh one (nothing drawn from it must agree
        with the other party: each initialises its own encoder and the target alone draws
        its held-out rows)."""
        if self.random_state is None:
            return fresh_seed()
        if not isinstance(self.random_state, int) or isinstance(self.random_state, bool):
            raise ValueError(f"random_state must be None or an integer, got {self.random_state!r}")
        return int(self.random_state)

    def _spec(self, source: str, target: str, n_overlap: int, seed: int = 0) -> FTLSpec:
        for name, value in [("dim", self.dim), ("max_iter", self.max_iter)]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for label, number in [
            ("gamma", self.gamma),
            ("source_weight", self.source_weight),
            ("weight_decay", self.weight_decay),
        ]:
            if not (isinstance(number, (int, float)) and np.isfinite(number) and number >= 0):
                raise ValueError(f"{label} must be a finite number >= 0, got {number!r}")
        if self.head not in ("stack", "phi"):
            raise ValueError(f'head must be "stack" or "phi", got {self.head!r}')
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        self._response()
        _check_early_stopping(self.tol, self.n_iter_no_change, self.validation_fraction)
        if not isinstance(self.verbose, int) or self.verbose < 0:
            raise ValueError(f"verbose must be an integer >= 0, got {self.verbose!r}")
        if source == target:
            raise ValueError(f"the source and the target must be two parties, got {source!r} twice")
        policy = KeyPolicy(self.key_bits, self.insecure)
        secure = self.protocol == "masked"
        if secure and self.key_bits < 2048 and not self.insecure:
            raise ValueError(
                f"key_bits={self.key_bits} is below 2048: pass insecure=True (tests only)"
            )
        return FTLSpec(
            source=source,
            target=target,
            dim=self.dim,
            gamma=float(self.gamma),
            source_weight=float(self.source_weight),
            max_iter=self.max_iter,
            learning_rate=float(self.learning_rate),
            weight_decay=float(self.weight_decay),
            secure=secure,
            policy=policy,
            random_state=seed,
            n_overlap=n_overlap,
            tol=None if self.tol is None else float(self.tol),
            patience=self.n_iter_no_change,
            validation_fraction=float(self.validation_fraction),
            verbose=int(self.verbose),
        )

    def build_encoder(self, party: str, role: str, columns: int, seed: int = 0) -> nn.Module:
        """The ``role``'s (``"source"`` or ``"target"``) encoder for ``columns`` inputs,
        initialised from ``seed`` (the fit's), its output width checked against ``dim``."""
        given = self.source_encoder if role == "source" else self.target_encoder
        state = np.random.SeedSequence([seed, 5, role == "target"]).generate_state(1)
        with seeded(int(state[0])):
            module = (
                copy.deepcopy(given).float()
                if given is not None
                else nn.Sequential(mlp(columns, self.dim, self.hidden_layer_sizes), nn.Tanh())
            )
        width = output_width(module, columns, f"party {party!r}: its encoder")
        if width != self.dim:
            raise ValueError(
                f"party {party!r}: its encoder gives {width} numbers, dim is {self.dim}: make "
                "them agree"
            )
        return module

    def _standardise(self, party: str, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        values = check_numeric(frame, party, [str(c) for c in frame.columns])
        self.columns_[party] = [str(c) for c in frame.columns]
        self.standardisers_[party] = Standardiser().fit(values)
        return self._design(party, frame)

    def _design(self, party: str, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        values = check_numeric(frame, party, self.columns_[party])
        return self.standardisers_[party].transform(values)

    def _classes(self, source_labels: Any, index: pd.Index, party: str) -> np.ndarray[Any, Any]:
        labels = pd.Series(source_labels)
        if len(labels) != len(index) or not labels.index.equals(index):
            if len(labels) == len(index) and not isinstance(source_labels, pd.Series):
                labels.index = index
            else:
                raise ValueError(
                    f"party {party!r}: the labels must have one value per row, indexed like "
                    "its frame"
                )
        if labels.isna().any():
            raise ValueError(
                f"party {party!r}: a label is missing at row {labels.index[labels.isna()][0]!r}"
            )
        classes = np.unique(labels.to_numpy())
        if len(classes) != 2:
            raise ValueError(
                f"party {party!r}: transfer learning here is binary; the labels hold "
                f"{len(classes)} classes ({list(classes)[:5]})"
            )
        self.classes_ = classes
        signs: np.ndarray[Any, Any] = np.where(labels.to_numpy() == classes[1], 1.0, -1.0)
        response = self._response()
        if response is not None:
            codes = randomized_response(
                (signs > 0).astype(np.int64), classes=2, epsilon=response.epsilon
            )
            signs = np.where(codes == 1, 1.0, -1.0)
        return signs

    def _positions(
        self, frame: pd.DataFrame, labels: Any, party: str, what: str
    ) -> np.ndarray[Any, Any]:
        index = pd.Index(labels)
        missing = index.difference(frame.index)
        if len(missing):
            raise ValueError(
                f"party {party!r}: {what} names rows it does not hold, e.g. {missing[0]!r}: "
                "pass row labels of its frame"
            )
        if index.has_duplicates:
            raise ValueError(
                f"party {party!r}: {what} names row {index[index.duplicated()][0]!r} twice"
            )
        out: np.ndarray[Any, Any] = frame.index.get_indexer(index)
        return out

    # -- simulation ------------------------------------------------------------------------

    def fit(
        self,
        source: pd.DataFrame,
        target: pd.DataFrame,
        y: Any = None,
        *,
        overlap: pd.DataFrame,
        target_labels: pd.Series | None = None,
        names: tuple[str, str] = ("source", "target"),
        keep_views: bool = False,
        keep_payloads: bool = False,
        ledger: Any = None,
        source_labels: Any = None,
    ) -> FederatedTransferClassifier:
        """Train with both parties simulated in this process.

        Parameters
        ----------
        source, target : DataFrame
            Each party's feature frame (the two hold different rows).
        y : array-like or Series
            The source's labels, one per source row (``fit(X, y)`` as everywhere else; the
            source is the label party).
        overlap : DataFrame
            The pairs of row labels (columns ``source`` and ``target``) of the patients in
            both, in the common order (:func:`overlap_pairs`).
        target_labels : Series, optional
            The target's labelled rows only (a Series on a subset of its index).
        names : (str, str)
            The two parties' names.
        keep_views, keep_payloads : bool
            Keep the target's gradients of the overlap rows (``views_``); keep every
            message's payload in ``transcript_``.
        ledger : PrivacyLedger, optional
            Where randomised response records its spend (``privacy_ledger_``).
        source_labels
            Deprecated spelling of ``y``.
        """
        require("torch", for_=type(self).__name__)
        if source_labels is not None:
            deprecated_parameters(
                "fit",
                {"source_labels": source_labels},
                {"source_labels": "y"},
                passed=() if y is None else ("y",),
            )
            y = source_labels
        if y is None:
            raise TypeError("fit needs the source's labels y (one per source row)")
        src, tgt = names
        self._forget()
        if not isinstance(overlap, pd.DataFrame) or list(overlap.columns) != ["source", "target"]:
            raise ValueError(
                "overlap must be a DataFrame with columns ['source', 'target'] of row labels "
                "(overlap_pairs finds them)"
            )
        x_src = self._standardise(src, source)
        x_tgt = self._standardise(tgt, target)
        y_src = self._classes(y, source.index, src)
        self._record_labels(src, ledger)
        pos_src = self._positions(source, overlap["source"], src, "overlap")
        pos_tgt = self._positions(target, overlap["target"], tgt, "overlap")
        labelled, y_tgt = self._target_labels(target, target_labels, tgt)
        seed = self._seed()
        spec = self._spec(src, tgt, len(overlap), seed)
        roles: dict[str, Role] = {
            src: SourceRole(
                spec,
                self.build_encoder(src, "source", x_src.shape[1], seed),
                x_src,
                y_src,
                pos_src,
            ),
            tgt: TargetRole(
                spec,
                self.build_encoder(tgt, "target", x_tgt.shape[1], seed),
                x_tgt,
                pos_tgt,
                labelled,
                y_tgt,
                keep_view=keep_views,
            ),
        }
        results = self._simulate(roles, keep_payloads=keep_payloads)
        self._collect(results, spec)
        self._fit_head(x_tgt, labelled, y_tgt)
        return self

    def _target_labels(
        self, target: pd.DataFrame, labels: pd.Series | None, party: str
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        if labels is None or len(labels) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if not isinstance(labels, pd.Series):
            raise ValueError(
                f"party {party!r}: target_labels must be a Series indexed by its labelled rows"
            )
        positions = self._positions(target, labels.index, party, "target_labels")
        unknown = sorted(set(labels.dropna().tolist()) - set(self.classes_.tolist()))
        if unknown or labels.isna().any():
            raise ValueError(
                f"party {party!r}: target_labels hold {unknown or 'missing values'}, not the "
                f"source's classes {list(self.classes_)}"
            )
        signs: np.ndarray[Any, Any] = np.where(labels.to_numpy() == self.classes_[1], 1.0, -1.0)
        return positions, signs

    def _record_labels(self, party: str, ledger: Any) -> None:
        """The fit's ledger (``privacy_ledger_``), with randomised response's spend when
        ``privacy`` asks for it."""
        kept = self._fitted_ledger(ledger)
        response = self._response()
        if response is not None:
            record_randomized_response(kept, holder=party, epsilon=response.epsilon)

    def _forget(self) -> None:
        for stale in (
            "views_",
            "privacy_ledger_",
            "source_encoder_",
            "target_encoder_",
            "phi_",
            "spec_",
            "n_iter_",
            "head_",
        ):
            if hasattr(self, stale):
                delattr(self, stale)
        self.standardisers_: dict[str, Standardiser] = {}
        self.columns_: dict[str, list[str]] = {}

    def _collect(self, results: dict[str, FTLResult], spec: FTLSpec) -> None:
        source, target = results[spec.source], results[spec.target]
        self.spec_ = spec
        self.source_encoder_ = source.encoder
        self.target_encoder_ = target.encoder
        self.phi_ = target.phi
        self.loss_curve_ = source.loss_curve
        self.iteration_seconds_ = source.iteration_seconds
        self._iterations(target)
        if target.view is not None:
            self.views_ = target.view

    def _iterations(self, result: FTLResult) -> None:
        """``n_iter_``, ``best_epoch_``, ``validation_loss_curve_`` and ``history_`` from a
        role's result (``loss_curve_`` and ``iteration_seconds_`` set)."""
        self.n_iter_ = result.n_iter
        self.best_epoch_ = result.n_iter if result.best_epoch is None else result.best_epoch
        self.validation_loss_curve_ = list(result.validation_loss)
        held = self.validation_loss_curve_[1:]  # after 1, 2, ... updates
        self.history_ = [
            {"epoch": i + 1, "loss": loss, "seconds": seconds}
            | ({"validation_loss": held[i]} if i < len(held) else {})
            for i, (loss, seconds) in enumerate(
                zip(self.loss_curve_, self.iteration_seconds_, strict=False)
            )
        ]

    # -- deployment ------------------------------------------------------------------------

    def fit_party(
        self,
        federation: Federation,
        frame: pd.DataFrame,
        labels: Any = None,
        *,
        role: str,
        peer: str,
        overlap: Any,
        ledger: Any = None,
    ) -> FederatedTransferClassifier:
        """This party's role (deployment): ``role`` ``"source"`` (``labels``: one per row) or
        ``"target"`` (``labels``: a Series on its labelled rows, or None); ``overlap`` this
        party's row labels of the common patients, in the common order."""
        require("torch", for_=type(self).__name__)
        if role not in ("source", "target"):
            raise ValueError(f'role must be "source" or "target", got {role!r}')
        name = federation.name
        self._forget()
        x = self._standardise(name, frame)
        positions = self._positions(frame, overlap, name, "overlap")
        names = (name, peer) if role == "source" else (peer, name)
        seed = self._seed()
        spec = self._spec(names[0], names[1], len(positions), seed)
        encoder = self.build_encoder(name, role, x.shape[1], seed)
        party: Role
        if role == "source":
            y = self._classes(labels, frame.index, name)
            self._record_labels(name, ledger)
            party = SourceRole(spec, encoder, x, y, positions)
        else:  # the classes as the target's own labels name them (sorted: the larger is
            # positive, as at the source); 0 and 1 when it holds none
            known: Any = [] if labels is None else np.unique(pd.Series(labels).dropna())
            self.classes_ = np.asarray(known) if len(known) == 2 else np.array([0, 1])
            self._fitted_ledger(ledger)  # the target spends nothing
            labelled, y_t = self._target_labels(frame, labels, name)
            party = TargetRole(spec, encoder, x, positions, labelled, y_t)
        result: FTLResult = run_deployed({name: party}, federation)[name]
        self.spec_ = spec
        self.phi_ = result.phi
        self.loss_curve_, self.iteration_seconds_ = result.loss_curve, result.iteration_seconds
        self._iterations(result)
        if role == "source":
            self.source_encoder_ = result.encoder
        else:
            self.target_encoder_ = result.encoder
            self._fit_head(x, labelled, y_t)
        return self

    # -- persistence ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the model to the folder ``path`` (created): each held party's part as
        ``<party>.npz`` in vflink's model format (its encoder's weights, its columns and
        their scaling; at the target also ``Phi``, the stacked head and the classes; nothing
        of the other party) and the privacy ledger, when it holds a spend, as
        ``privacy_ledger.json``. Returns the folder; :meth:`load` reads it back."""
        self._check_fitted("spec_")
        spec = self.spec_
        writers: dict[str, Any] = {}
        held = {
            "source": getattr(self, "source_encoder_", None),
            "target": getattr(self, "target_encoder_", None),
        }
        for role, encoder in held.items():
            if encoder is None:
                continue
            party = spec.source if role == "source" else spec.target
            meta: dict[str, Any] = {
                "role": role,
                "party": party,
                "source": spec.source,
                "target": spec.target,
                "n_overlap": spec.n_overlap,
                "dim": self.dim,
                "hidden_layer_sizes": list(self.hidden_layer_sizes),
                "columns": self.columns_[party],
                "classes": [c.item() if isinstance(c, np.generic) else c for c in self.classes_],
            }
            arrays = {
                **self.standardisers_[party].to_arrays(),
                **persistence.state_dict_to_arrays(encoder.state_dict(), "encoder."),
            }
            if role == "target":
                arrays["phi"] = np.asarray(self.phi_, dtype=float)
                head = getattr(self, "head_", None)
                if head is not None:
                    arrays["head_coef"] = np.asarray(head.coef_, dtype=float)
                    arrays["head_intercept"] = np.asarray(head.intercept_, dtype=float)
                    meta["stack_scale"] = float(self.stack_scale_)
            writers[party] = partial(persistence.save_model, kind=KIND, meta=meta, arrays=arrays)
        return persistence.save_parts(path, writers, getattr(self, "privacy_ledger_", None))

    def load(self, *paths: str | Path) -> FederatedTransferClassifier:
        """Read a model written by :meth:`save`: its folder, or a party's own file, into this
        estimator, whose ``dim``, ``hidden_layer_sizes`` and own encoders (if any) must be
        those of the fit (the encoders are rebuilt from them, then their weights loaded)."""
        from sklearn.linear_model import LogisticRegression

        from vfl.privacy import PrivacyLedger

        require("torch", for_=type(self).__name__)
        self._forget()
        self.privacy_ledger_ = PrivacyLedger()
        spec: FTLSpec | None = None
        for path in persistence.model_files(paths):
            if path.name == "privacy_ledger.json":
                self.privacy_ledger_ = PrivacyLedger.load(path)
                continue
            meta, arrays = persistence.load_model(path, kind=KIND)
            for key, value in [
                ("dim", self.dim),
                ("hidden_layer_sizes", list(self.hidden_layer_sizes)),
            ]:
                if meta.get(key) != value:
                    raise ValueError(
                        f"{path} was fitted with {key}={meta.get(key)!r}, this estimator has "
                        f"{value!r}: load it with the fit's hyperparameters"
                    )
            role, party = str(meta["role"]), str(meta["party"])
            columns = [str(c) for c in meta["columns"]]
            self.columns_[party] = columns
            self.standardisers_[party] = Standardiser.from_arrays(arrays)
            encoder = self.build_encoder(party, role, len(columns))
            encoder.load_state_dict(persistence.arrays_to_state_dict(arrays, "encoder."))
            encoder.eval()
            self.classes_ = np.array(meta["classes"])
            if role == "source":
                self.source_encoder_ = encoder
            else:
                self.target_encoder_ = encoder
                self.phi_ = arrays["phi"]
                self.head_ = None
                if "head_coef" in arrays:
                    head = LogisticRegression()
                    head.coef_, head.intercept_ = arrays["head_coef"], arrays["head_intercept"]
                    head.classes_ = np.array([False, True])
                    head.n_features_in_ = arrays["head_coef"].shape[1]
                    self.head_ = head
                    self.stack_scale_ = float(meta["stack_scale"])
            spec = self._spec(str(meta["source"]), str(meta["target"]), int(meta["n_overlap"]))
        if spec is None:
            raise ValueError(f"{paths} hold no saved transfer model")
        self.spec_ = spec
        return self

    # -- scoring (the target, alone) ---------------------------------------------------------

    def _transferred(self, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``Phi . u_B`` of standardised target rows."""
        self.target_encoder_.eval()
        with torch.no_grad():
            u = self.target_encoder_(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
        out: np.ndarray[Any, Any] = u @ self.phi_
        return out

    def _stacked(self, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = np.column_stack([self._transferred(x) * self.stack_scale_, x])
        return out

    def _fit_head(
        self, x: np.ndarray[Any, Any], labelled: np.ndarray[Any, Any], signs: np.ndarray[Any, Any]
    ) -> None:
        """The target's final scorer on its own labelled rows (see ``head``)."""
        from sklearn.linear_model import LogisticRegressionCV

        self.head_ = None
        counts = [int((signs > 0).sum()), int((signs < 0).sum())]
        if self.head != "stack" or len(signs) < STACK_MIN_LABELS or min(counts) < 10:
            return
        score = self._transferred(x[labelled])
        self.stack_scale_ = STACK_WEIGHT / max(float(score.std()), 1e-12)
        head = LogisticRegressionCV(Cs=[0.003, 0.01, 0.03, 0.1, 0.3, 1.0], cv=3, max_iter=2000)
        self.head_ = head.fit(self._stacked(x[labelled]), signs > 0)

    def decision_function(self, target: pd.DataFrame) -> np.ndarray[Any, Any]:
        """The target's score of each row (its own computation): ``Phi . u_B``, or the
        stacked head's log-odds (``head="stack"`` with enough labels)."""
        self._check_fitted("spec_")
        x = self._design(self.spec_.target, target)
        head = getattr(self, "head_", None)
        if head is None:
            return self._transferred(x)
        out: np.ndarray[Any, Any] = head.decision_function(self._stacked(x))
        return out

    def score(self, target: pd.DataFrame, y: Any) -> float:
        """ROC AUC on the target's rows."""
        from sklearn.metrics import roc_auc_score

        return float(
            roc_auc_score(np.asarray(y) == self.classes_[1], self.decision_function(target))
        )
