"""The roles of split learning, written once for every federation.

Each data party holds a *bottom* module on its own columns; the label party holds the *top*
module (and a bottom of its own when it has features). Per mini-batch:

1. every data party other than the label party computes its bottom's output on the batch's
   rows and sends it (:class:`Embedding`; after its defences: clipping and noise, float16 or
   b-bit quantisation);
2. the label party combines the embeddings (``"concat"`` or ``"sum"``), runs the top, computes
   the loss on its labels, and returns to each party the gradient of the loss with respect to
   *that party's* embedding only (:class:`EmbeddingGrad`; after its defences: norm matching,
   quantisation);
3. each party back-propagates through its bottom and steps its own optimiser.

The batches come from ``random_state`` (:class:`vfl.training.Schedule`, the same at every
party, never from the data), as do the validation rows held out for early stopping and the
modules' initialisation. After each epoch the label party computes the validation loss (or
the epoch's mean training loss without a validation split) and tells the others, one bit,
whether to keep this epoch's modules (:class:`vfl.training.LossCurve`, sent as the toolkit's
:class:`vfl.training.EpochControl`); at the end every party restores the kept ones.

What each party learns: a data party, the gradients with respect to its own embeddings (from
which labels can leak: :mod:`vfl.audit.split` measures it); the label party, every other
party's embeddings of every row (from which features can be reconstructed; measured there
too). Neither sees another's raw features, labels or modules. With a protected layer
(:mod:`vfl.split.interactive`) steps 1 and 2 run under encryption and the label party sees the
first top layer's outputs instead of the embeddings (which keep the embeddings' pairwise
geometry: :class:`vfl.audit.split.EmbeddingGeometryAudit`). With ``keep_views`` each role
keeps what it saw for the audits (:attr:`SplitResult.view`, :attr:`SplitResult.seen`) and a
sender its own embeddings of the same batches (:attr:`SplitResult.embeddings`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.extras import optional
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
from vfl.progress import EpochProgress
from vfl.split.defences import EmbeddingNoise, Quantizer, match_norms
from vfl.split.interactive import LabelSide, LayerShare, ProtectedLayer, SenderSide
from vfl.training.control import EpochControl
from vfl.training.convergence import LossCurve
from vfl.training.schedule import Schedule, largest_batch
from vfl.training.torch_loop import torch_optimizer, train_step

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["SPLIT", "DataRole", "Embedding", "EmbeddingGrad", "LabelRole", "SplitSpec"]

SPLIT = Namespace("split")
"""The tags of split learning (``split/emb/<epoch>/<batch>``, ``split/grad/...``)."""


@dataclass(frozen=True)
class Embedding(Message):
    """A data party's embeddings of a batch's rows (quantised: ``values * scale + offset``)."""

    KIND = "embeddings"
    values: np.ndarray
    offset: float = 0.0
    scale: float = 1.0


@dataclass(frozen=True)
class EmbeddingGrad(Message):
    """The gradient of the loss with respect to the receiver's embeddings of the batch."""

    KIND = "embedding gradients"
    values: np.ndarray
    offset: float = 0.0
    scale: float = 1.0


@dataclass(frozen=True)
class Width(Message):
    """A data party to the label party, before training: its embeddings' width (the label
    party sizes its top from the widths)."""

    KIND = "embedding width"
    width: int


@dataclass(frozen=True)
class SplitSpec:
    """What every party of a fit agrees on (checked by the estimator)."""

    label_party: str
    data_parties: tuple[str, ...]  # parties with features, in order
    task: str  # "classification" or "regression"
    outputs: int
    aggregation: str
    max_iter: int
    batch_size: int
    learning_rate: float
    optimizer: str
    tol: float | None
    patience: int
    validation_fraction: float
    random_state: int | None  # None until the parties agree (vfl.split.options.SeededRole)
    embedding_noise: EmbeddingNoise | None = None
    gradient_protection: str | None = None
    compression: Quantizer = field(default_factory=Quantizer)
    ledger: Any = None
    keep_views: bool = False
    protected: ProtectedLayer | None = None
    width: int = 0  # the protected layer's outputs
    verbose: int = 0
    """What the label party shows of its epochs (:class:`vfl.progress.EpochProgress`); local
    to each party, not agreed."""

    @property
    def layer_rate(self) -> float:
        """The protected layer's SGD step."""
        rate = self.protected.learning_rate if self.protected is not None else None
        return self.learning_rate if rate is None else rate

    @property
    def seed(self) -> int:
        """The agreed ``random_state`` the roles draw batches and held-out rows from."""
        if self.random_state is None:
            raise RuntimeError("a split role ran before its parties agreed on a seed")
        return self.random_state

    @property
    def senders(self) -> tuple[str, ...]:
        """The data parties that send embeddings (all but the label party)."""
        return tuple(p for p in self.data_parties if p != self.label_party)


@dataclass
class SplitResult:
    """What a role returns."""

    module: nn.Module | None = None
    top: nn.Module | None = None
    n_iter: int = 0
    best_epoch: int = 0
    loss_curve: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] | None = None
    seen: dict[str, list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]] | None = None
    """The label party's view (``keep_views``): what it received of each sender's rows per
    training batch -- the embeddings, or with a protected layer the layer's output ``z``."""
    embeddings: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] | None = None
    """A sender's own embeddings of each training batch before its defences (``keep_views``):
    the truth an audit of the label party's view scores against."""
    shares: dict[str, LayerShare] | None = None  # the protected layer's state, by peer
    initial: np.ndarray[Any, Any] | None = None  # a sender's initial layer block (its own)
    random_state: int | None = None  # the seed the parties agreed on (SeededRole)


def split_rows(n: int, spec: SplitSpec) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Training and validation positions, from ``random_state`` (the same at every party)."""
    order = np.random.default_rng([spec.seed, 7]).permutation(n)
    held = round(n * spec.validation_fraction)
    return np.sort(order[held:]), np.sort(order[:held])


def _optimizer(spec: SplitSpec, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """A party's optimiser on its own parameters: torch's fused kernels (one call for all of
    them: a third of the per-step time of the loop over tensors on small modules)."""
    return torch_optimizer(spec.optimizer, params, learning_rate=spec.learning_rate, fused=True)


def _send(
    fed: Federation, to: str, step: str, cls: Any, values: Any, spec: SplitSpec, *index: int
) -> None:
    payload, offset, scale = spec.compression.pack(np.asarray(values, dtype=np.float32))
    SPLIT.send(fed, to, step, cls(values=payload, offset=offset, scale=scale), *index)


def _recv(
    fed: Federation, frm: str, step: str, cls: Any, shape: tuple[int, int | None], *index: int
) -> np.ndarray[Any, Any]:
    """A received (de-quantised) array of ``shape`` (a width of None: any, learnt here)."""
    message = SPLIT.recv(fed, frm, step, cls, *index)
    values = Quantizer.unpack(message.values, message.offset, message.scale)
    rows, width = shape
    if (
        values.ndim != 2
        or values.shape[0] != rows
        or (width is not None and values.shape[1] != width)
    ):
        cls.refuse(frm, "values", f"have shape {values.shape}, expected ({rows}, {width})")
    if not np.all(np.isfinite(values)):
        cls.refuse(frm, "values", "are not finite")
    return values


def _copy(side: SenderSide | None) -> Any:
    """A sender's share as it is now (shares are replaced at each step, never changed)."""
    return None if side is None else side.state()


class DataRole:
    """A data party that is not the label party: its bottom module on its own rows ``x``."""

    def __init__(self, spec: SplitSpec, module: nn.Module, x: np.ndarray[Any, Any]) -> None:
        self.spec, self.module = spec, module
        self.x = torch.as_tensor(x, dtype=torch.float32)

    def __call__(self, fed: Federation) -> SplitResult:
        spec, label = self.spec, self.spec.label_party
        with torch.no_grad():
            width = int(self.module(self.x[:1]).shape[1])
        SPLIT.send(fed, label, "width", Width(width))
        train, val = split_rows(len(self.x), spec)
        epochs = Schedule(len(train), spec.batch_size, spec.seed).epochs()
        optimizer = _optimizer(spec, list(self.module.parameters()))
        side = None
        if spec.protected is not None:
            side = SenderSide(
                spec.protected, label, width, spec.layer_rate, rows=largest_batch(spec.batch_size)
            )
            side.connect(fed, training=True)
        kept = (copy.deepcopy(self.module.state_dict()), _copy(side))
        view: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        embeddings: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        epoch = 0
        while True:
            control = SPLIT.recv(fed, label, "control", EpochControl)
            if control.keep:
                kept = (copy.deepcopy(self.module.state_dict()), _copy(side))
            if control.stop:
                break
            self.module.train()
            for b, batch in enumerate(next(epochs)):
                rows = train[batch]
                exact = self.module(self.x[rows])
                h = self.release(exact)
                if side is not None:
                    side.forward(fed, h.detach().numpy(), epoch, b, training=True)
                    g = side.backward(fed, epoch, b)
                else:
                    _send(fed, label, "emb", Embedding, h.detach().numpy(), spec, epoch, b)
                    width = int(h.shape[1])
                    g = _recv(fed, label, "grad", EmbeddingGrad, (len(rows), width), epoch, b)
                if spec.keep_views:
                    view.append((rows.copy(), g.copy()))
                    embeddings.append((rows.copy(), exact.detach().numpy().copy()))
                train_step(optimizer, h, torch.as_tensor(g, dtype=torch.float32))
            if len(val):
                self.module.eval()  # dropout off, no statistics updated on validation rows
                with torch.no_grad():
                    h = self.release(self.module(self.x[val]))
                if side is not None:
                    side.forward(fed, h.numpy(), epoch, training=False)
                else:
                    _send(fed, label, "val", Embedding, h.numpy(), spec, epoch)
            epoch += 1
        self.module.load_state_dict(kept[0])
        if spec.embedding_noise is not None and spec.ledger is not None:
            spec.embedding_noise.record(spec.ledger, fed.name, epoch)
        result = SplitResult(module=self.module, n_iter=epoch)
        if spec.keep_views:
            result.view, result.embeddings = view, embeddings
        if side is not None:
            result.shares = {label: kept[1]}
            result.initial = side.initial if spec.keep_views else None
        return result

    def release(self, h: torch.Tensor) -> torch.Tensor:
        noise = self.spec.embedding_noise
        return h if noise is None else noise.apply(h)


class LabelRole:
    """The label party: the top module, its own bottom if it has features, the labels."""

    def __init__(
        self,
        spec: SplitSpec,
        make_top: Any,
        module: nn.Module | None,
        x: np.ndarray[Any, Any] | None,
        targets: np.ndarray[Any, Any],
    ) -> None:
        self.spec, self.make_top, self.module = spec, make_top, module
        self.x = None if x is None else torch.as_tensor(x, dtype=torch.float32)
        self.targets = targets
        self.dims: dict[str, int | None] = dict.fromkeys(spec.senders)
        self.seen: dict[str, list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]] = {}

    def _widths(self, fed: Federation) -> dict[str, int]:
        """Every party's embedding width (the senders say theirs), in the parties' order."""
        widths: dict[str, int] = {}
        for party in self.spec.data_parties:
            if party == self.spec.label_party:
                with torch.no_grad():
                    widths[party] = int(self._own(slice(0, 1)).shape[1])
            else:
                widths[party] = SPLIT.recv(fed, party, "width", Width).width
                if not 0 < widths[party] <= 1 << 16:
                    Width.refuse(party, "width", f"is {widths[party]}")
        if self.spec.aggregation == "sum" and len(set(widths.values())) > 1:
            raise ValueError(f'aggregation="sum" needs embeddings of one width; they are {widths}')
        self.dims = {p: widths[p] for p in self.spec.senders}
        return widths

    def __call__(self, fed: Federation) -> SplitResult:
        spec = self.spec
        widths = self._widths(fed)
        joined = (
            sum(widths.values()) if spec.aggregation == "concat" else next(iter(widths.values()))
        )
        own = widths.get(spec.label_party, 0)
        self.top: nn.Module = self.make_top(joined, own)
        self.sides: dict[str, LabelSide] = {}
        if spec.protected is not None:
            key, secret = spec.protected.policy().generate()
            for p in spec.senders:
                side = LabelSide(
                    spec.protected,
                    p,
                    key,
                    secret,
                    spec.layer_rate,
                    rows=largest_batch(spec.batch_size),
                )
                side.connect(fed, spec.width, joined, widths[p], training=True)
                self.sides[p] = side
        n = len(self.targets)
        train, val = split_rows(n, spec)
        epochs = Schedule(len(train), spec.batch_size, spec.seed).epochs()
        params = list(self.top.parameters()) + (
            list(self.module.parameters()) if self.module is not None else []
        )
        optimizer = _optimizer(spec, params)
        loss_fn: Any = nn.CrossEntropyLoss() if spec.task == "classification" else nn.MSELoss()
        y = (
            torch.as_tensor(self.targets, dtype=torch.long)
            if spec.task == "classification"
            else torch.as_tensor(self.targets, dtype=torch.float32).reshape(-1, 1)
        )
        curve = LossCurve(spec.tol, spec.patience)
        result = SplitResult()
        kept = self._state()
        senders = list(spec.senders)
        with EpochProgress(fed.name, spec.max_iter, spec.verbose) as shown:
            for epoch in range(spec.max_iter):
                control = EpochControl(stop=False, keep=curve.keep)
                SPLIT.broadcast(fed, "control", control, to=senders)
                if curve.keep:
                    kept = self._state()
                began = time.perf_counter()
                self._mode(train=True)
                total, count = 0.0, 0
                for b, batch in enumerate(next(epochs)):
                    rows = train[batch]
                    received = self._receive(fed, rows, epoch, b)
                    loss = loss_fn(self.forward(rows, received), y[rows])
                    train_step(optimizer, loss)
                    if self.sides:
                        delta = received["layer"].grad
                        d = (
                            delta.numpy()
                            if delta is not None
                            else np.zeros(tuple(received["layer"].shape))
                        )
                        if spec.gradient_protection == "norm":
                            d = match_norms(d)
                        for p in senders:
                            self.sides[p].backward(fed, d, epoch, b)
                        received = {}
                    for p, sent in received.items():
                        g = (
                            sent.grad.numpy()
                            if sent.grad is not None
                            else np.zeros(tuple(sent.shape))
                        )
                        if spec.gradient_protection == "norm":
                            g = match_norms(g)
                        _send(fed, p, "grad", EmbeddingGrad, g, spec, epoch, b)
                    total += float(loss.detach()) * len(rows)
                    count += len(rows)
                watched = training = total / max(count, 1)
                figures: dict[str, float] = {}
                if len(val):
                    received = self._receive(fed, val, epoch, train=False)
                    self._mode(train=False)
                    with torch.no_grad():
                        watched = float(loss_fn(self.forward(val, received), y[val]))
                    figures["val_loss"] = watched
                result.epoch_seconds.append(time.perf_counter() - began)
                stop = curve.add(watched)
                shown.update(epoch + 1, loss=training, best=curve.best_epoch, **figures)
                if stop:
                    if spec.tol is not None:
                        shown.note(
                            f"stopped early: no better {'validation' if len(val) else 'training'} "
                            f"loss for {spec.patience} epochs; kept epoch {curve.best_epoch}"
                        )
                    break
        SPLIT.broadcast(fed, "control", EpochControl(stop=True, keep=curve.keep), to=senders)
        if curve.keep:
            kept = self._state()
        self._restore(kept)
        result.top, result.module = self.top, self.module
        if self.sides:
            result.shares = kept[2]
        result.loss_curve, result.n_iter = curve.values, len(curve.values)
        result.seen = self.seen if spec.keep_views else None
        result.best_epoch = curve.best_epoch
        return result

    def _mode(self, *, train: bool) -> None:
        for module in (self.top, self.module):
            if module is not None:
                module.train(train)

    def _receive(
        self, fed: Federation, rows: np.ndarray[Any, Any], *index: int, train: bool = True
    ) -> dict[str, torch.Tensor]:
        """The senders' embeddings of ``rows`` (each a leaf that will hold its gradient), or
        with a protected layer the sum of their layer outputs (``"layer"``)."""
        if self.sides:
            outputs = {
                p: side.forward(fed, len(rows), *index, training=train)
                for p, side in self.sides.items()
            }
            self._keep(rows, outputs, train)
            layer = torch.as_tensor(np.asarray(sum(outputs.values())), dtype=torch.float32)
            return {"layer": layer.requires_grad_(train)}
        step = "emb" if train else "val"
        got = {
            p: _recv(fed, p, step, Embedding, (len(rows), self.dims[p]), *index)
            for p in self.spec.senders
        }
        self._keep(rows, got, train)
        received = {}
        for p, values in got.items():
            self.dims[p] = values.shape[1]
            received[p] = torch.as_tensor(values).requires_grad_(train)
        return received

    def _keep(
        self, rows: np.ndarray[Any, Any], got: dict[str, np.ndarray[Any, Any]], train: bool
    ) -> None:
        """Keep what a training batch brought from each sender (``keep_views``)."""
        if train and self.spec.keep_views:
            for p, values in got.items():
                self.seen.setdefault(p, []).append((rows.copy(), np.array(values, copy=True)))

    def forward(
        self, rows: np.ndarray[Any, Any], received: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The top's output on the combined embeddings of ``rows`` (parties in order)."""
        if self.sides:
            own = None
            if self.module is not None and self.x is not None:
                own = self.module(self.x[rows])
            out: torch.Tensor = self.top(received["layer"], own)
            return out
        parts = []
        for party in self.spec.data_parties:
            if party == self.spec.label_party:
                parts.append(self._own(rows))
            else:
                parts.append(received[party])
        joined = torch.cat(parts, dim=1) if self.spec.aggregation == "concat" else sum(parts)
        out = self.top(joined)
        return out

    def _own(self, rows: Any) -> torch.Tensor:
        """The label party's own bottom on ``rows`` (it is among the data parties)."""
        if self.module is None or self.x is None:
            raise ValueError(
                f"the label party {self.spec.label_party!r} is listed among the data parties "
                "but holds no features or bottom module"
            )
        out: torch.Tensor = self.module(self.x[rows])
        return out

    def _state(self) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
        own = copy.deepcopy(self.module.state_dict()) if self.module is not None else None
        shares = {p: side.state() for p, side in self.sides.items()}
        return copy.deepcopy(self.top.state_dict()), own, shares

    def _restore(self, state: tuple[dict[str, Any], dict[str, Any] | None, Any]) -> None:
        self.top.load_state_dict(state[0])
        if self.module is not None and state[1] is not None:
            self.module.load_state_dict(state[1])


class ScoreRole:
    """Scoring: a sender's embeddings of the given rows, or the label party's outputs (with a
    protected layer, through it: ``shares`` is the party's share by peer)."""

    def __init__(
        self,
        spec: SplitSpec,
        module: nn.Module | None,
        x: Any,
        top: nn.Module | None = None,
        rows: int | None = None,
        shares: dict[str, Any] | None = None,
    ) -> None:
        self.spec, self.module, self.top = spec, module, top
        self.x = None if x is None else torch.as_tensor(x, dtype=torch.float32)
        self.rows = len(self.x) if self.x is not None else rows
        self.shares = shares or {}

    def __call__(self, fed: Federation) -> np.ndarray[Any, Any] | None:
        spec = self.spec
        if fed.name != spec.label_party:
            if self.module is None or self.x is None:
                raise ValueError(f"party {fed.name!r} scores with its bottom module and rows")
            with torch.no_grad():
                h = self.module(self.x)
            if spec.protected is not None:
                share = self.shares.get(spec.label_party)
                side = SenderSide(spec.protected, spec.label_party, int(h.shape[1]), 0.0, share)
                side.connect(fed, training=False)
                side.forward(fed, h.numpy(), training=False)
                return None
            _send(fed, spec.label_party, "score", Embedding, h.numpy(), spec)
            return None
        if self.rows is None:
            raise ValueError("scoring at a label party without features needs the row count")
        if self.top is None:
            raise ValueError(f"the label party {fed.name!r} scores with its top module")
        with torch.no_grad():
            own = self.module(self.x) if self.module is not None and self.x is not None else None
            if spec.protected is not None:
                return self._protected(fed, own, spec.protected, self.top, self.rows)
            received = {
                p: torch.as_tensor(_recv(fed, p, "score", Embedding, (self.rows, None)))
                for p in spec.senders
            }
            parts: list[torch.Tensor] = [
                received[party] if party != spec.label_party else own  # type: ignore[misc]
                for party in spec.data_parties
            ]
            joined = torch.cat(parts, dim=1) if spec.aggregation == "concat" else sum(parts)
            out: np.ndarray[Any, Any] = self.top(joined).double().numpy()
        return out

    def _protected(
        self,
        fed: Federation,
        own: torch.Tensor | None,
        layer: ProtectedLayer,
        top: nn.Module,
        rows: int,
    ) -> np.ndarray[Any, Any]:
        """The label party's scoring through the protected layer, under the key of training
        (the data parties hold our share encrypted under it, as they stepped it)."""
        spec = self.spec
        total = np.zeros((rows, spec.width))
        for p in spec.senders:
            share = self.shares.get(p)
            if share is None or share.key is None:
                raise ValueError(f"the label party holds no protected-layer share for {p!r}")
            key = PaillierPublicKey(share.key[0] * share.key[1], insecure=layer.insecure)
            secret = PaillierPrivateKey(key, *share.key)
            side = LabelSide(layer, p, key, secret, 0.0, share)
            joined = int(top.joined)  # type: ignore[arg-type]
            side.connect(fed, spec.width, joined, share.values.shape[0], training=False)
            total += side.forward(fed, rows, training=False)
        remote = torch.as_tensor(total, dtype=torch.float32)
        out: np.ndarray[Any, Any] = top(remote, own).double().numpy()
        return out
