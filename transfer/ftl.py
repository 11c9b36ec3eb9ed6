"""Secure federated transfer learning with overlapping samples: the two roles.

After Liu, Kang, Xing, Chen and Yang, "A Secure Federated Transfer Learning Framework" (IEEE
Intelligent Systems, 2020). The **source** holds many labelled rows (``y`` in {-1, +1}) and an
encoder ``u_A = f_A(x_A)`` into ``R^d``; the **target** holds other columns, few or no labels,
and an encoder ``u_B = f_B(x_B)``. Some patients are in both (the overlap ``C``, in the common
order of :func:`vfl.align`). With ``Phi = mean_k y_k u_A(k)`` over the source's rows, the target
scores a row by ``phi = Phi . u_B``, and the parties minimise

    L = (1/|L|) sum_{r in L} l(y_r, Phi . u_B(r))            (the transferred prediction loss)
      + gamma (1/|C|) sum_{i in C} |u_A(i) - u_B(i)|^2        (the alignment loss)
      + source_weight * mean_k log(1 + exp(-y_k Phi . u_A(k)))  (the source's own labels)
      + weight decay on both encoders,

where ``L`` is the overlap (labels from the source) and the target's own labelled rows, and
``l(y, phi) = log 2 - y phi / 2 + phi^2 / 8`` is the paper's second-order Taylor expansion of
the logistic loss, which makes every cross-party term a polynomial that Paillier can carry.

Per iteration (the whole objective, full batch; both parties run Adam on their own encoder):

1. the target's gradient. The source sends, under its key, ``[c_r]`` for the overlap rows
   (``c_r = -y_r Phi / 2|L| - 2 gamma u_A(r) / |C|``), ``[Phi / 2|L|]`` and the columns of
   ``[M] = [Phi Phi^T / 4|L|]``, packed ``R`` rows to a ciphertext. The target computes
   ``[g_r] = [c_r] + [M] u_B(r) + 2 gamma u_B(r) / |C|`` (``- y_r [Phi / 2|L|]`` for its own
   labelled rows instead of ``[c_r]``), adds a 40-bit statistical mask, and has the source
   decrypt it (:mod:`vfl.crypto.masked`): it learns its gradient ``g_r = dL/du_B(r)``, and the
   source learns nothing;
2. the source's gradient. At the start the source sent ``[-y_r]`` for the overlap rows;
   with ``[Phi_l]`` (one ciphertext per coordinate, sent with step 1's terms) the target
   computes ``[v] = [-sum_C y_r u_B(r) / 2|L| + s + Q Phi]`` = ``dL/dPhi``, where ``s`` and
   ``Q`` are its own plaintexts (``s = -sum y_r u_B(r) / 2|L|`` over its own labelled rows,
   ``Q = sum_r u_B(r) u_B(r)^T / 4|L|``), re-randomises it and sends it; the source decrypts
   its own gradient. ``v`` reaches the source's encoder through ``Phi``. Only the source holds
   keys: two, one per step. ``[-y_r]`` and ``[Phi_l]`` are under a *gradient key* that the
   source decrypts only for itself, step 1's terms under the key it decrypts on the target's
   request.

**Deviating parties** (docs/deviation.md, ``tests/transfer/test_ftl_deviation.py``). With one key,
a target could put the encrypted labels ``[-y_r]`` into step 1's request (the count and layout
the source checks) and read every overlap label; under the gradient key they decrypt to noise
under step 1's, which the slot check refuses, naming the target. A ``v`` beyond the bits its
terms can give is refused, naming the target. Not closed: a source that sends chosen values
in place of ``[-y_r]`` (say 1 for one overlap row, 0 elsewhere, and 0 for ``Phi``) reads
that row's representation ``u_B(r) / 2`` (plus the target's own labelled sum) as its
gradient; closing it takes a proof that each ciphertext holds +-1.

**The alignment trains the target only** (the source is the teacher): the paper also pulls the
source's representations towards the target's, but the source's gradient of that term,
``2 gamma (u_A(i) - u_B(i))``, would hand it the target's representation of every overlapping
patient. Without it the source learns only ``v`` (``d`` numbers per iteration, its own
gradient). After training the source gives the target ``Phi`` (``d`` numbers: the
label-weighted mean of its representations), so that the target scores its rows alone.

What each party learns. The source: ``v`` per iteration, ``Phi``'s use and, with early
stopping, whether the target's validation loss fell. The target: its
gradient ``g_r`` per trained row, which mixes ``Phi``, the source's labels and representations
of the overlapping patients (``c_r``): a target that reads them can infer the source's labels
of the patients they share, about as well as its transferred model predicts them --
:func:`transfer.audit.overlap_label_attack` measures both; ``privacy=RandomizedResponse(...)``
(randomised response at the source, in the ledger) protects the labels themselves but not what the
source's representations say. Neither
sees the other's features, labels or encoder. ``protocol="plain"`` sends the same terms in the
clear (simulation only; warns). Semi-honest parties.

**Early stopping** (``tol`` set and enough labels, see :func:`held_out`). The target holds
out some of its own labelled rows (outside the overlap: they leave ``L``) and says so in its
setup message. Each iteration it then asks for ``[Phi / 2]`` with its gradients (one more
ciphertext in the same masked decryption, of the same checked layout), scores the held-out
rows ``Phi . u_B`` with the model as the iteration began, and computes their loss ``l`` (the
objective's Taylor form; :class:`vfl.training.LossCurve` decides). Its step-2 message
carries two bits: ``keep`` (this iteration's model is the best so far: each party keeps its
own encoder as the iteration began) and ``stop``. With validation one more iteration
evaluates the last update and updates nothing. At the end both restore the kept encoders
and the source sends the kept model's ``Phi``. What this adds: the target learns ``Phi`` at
every iteration -- which its own rows' gradients already give it (each is ``Phi`` times a
number it can solve for: ``g_r = Phi (Phi . u_B(r) / 4 - y_r / 2) / |L|``) -- and the
source learns, one bit an iteration, whether the target's validation loss fell. A target
that lies about the bits can stop training early or choose which iteration's ``Phi`` it
keeps, all of which it saw: a denial of service, nothing more; a ``keep`` or ``stop`` from
a target that announced no held-out rows is refused.

Every term crosses multiplied by ``|L|`` (the receiver divides after decrypting), so that the
small per-row terms keep their precision. Fixed point: representations and ``Phi`` with 20
fractional bits as exponents, ``M`` and ``Q`` with 30, every encrypted sum with 50; bounded by
``|u|, |Phi| < 2**4`` (the default encoders end in ``tanh``).
"""

from __future__ import annotations

import copy
import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.crypto import slots
from vfl.crypto.keys import PaillierPublicKey
from vfl.crypto.masked import mask_slots, request_decryption, serve_decryption
from vfl.crypto.packing import RowPacking
from vfl.crypto.policy import Base, KeyPolicy, PublicKeyMessage, vector_from
from vfl.crypto.vector import EncryptedVector
from vfl.extras import optional
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
from vfl.federation.wire import CiphertextBlock
from vfl.progress import EpochProgress
from vfl.training.convergence import LossCurve
from vfl.training.torch_loop import torch_optimizer, train_step

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = [
    "FTL",
    "MIN_VALIDATION_ROWS",
    "FTLSpec",
    "SourceRole",
    "TargetRole",
    "held_out",
    "stopping_rule",
]

logger = logging.getLogger("vflink.transfer")

FTL = Namespace("ftl")
"""The tags of federated transfer learning (``ftl/tgt/<iteration>``, ...)."""

FU = 20
"""Fractional bits of representations and ``Phi`` where they are exponents."""

FM = 30
"""Fractional bits of the d x d terms ``M`` and ``Q``."""

S = FU + FM
"""Fractional bits of every encrypted sum (the gradients, ``v``)."""

UB = 4
"""``|u|, |Phi| < 2**UB`` (the default encoders end in ``tanh``: below 1)."""

_FIX = "lower the learning rate, or end the encoder in a bounded activation (tanh)"

DECRYPT_THREADS = 2
"""Threads of the source's decryptions (their ``p`` and ``q`` halves)."""


@dataclass(frozen=True)
class FTLSpec:
    """What both parties agree on (checked by the estimator)."""

    source: str
    target: str
    dim: int
    gamma: float
    source_weight: float
    max_iter: int
    learning_rate: float
    weight_decay: float
    secure: bool
    policy: KeyPolicy
    random_state: int
    n_overlap: int
    tol: float | None = None
    """Early stopping (see the module docstring): the least fall of the validation loss that
    counts as progress; None: a fixed ``max_iter`` iterations, the last model kept."""
    patience: int = 10
    """Iterations without progress after which training stops."""
    validation_fraction: float = 0.0
    """The share of the target's labelled rows (outside the overlap) it holds out."""
    verbose: int = 0
    """What each party shows of its iterations (:class:`vfl.progress.EpochProgress`); local
    to each party, not agreed."""


@dataclass
class FTLResult:
    """What a role returns."""

    encoder: nn.Module
    phi: np.ndarray[Any, Any] | None = None
    loss_curve: list[float] = field(default_factory=list)
    iteration_seconds: list[float] = field(default_factory=list)
    view: list[np.ndarray[Any, Any]] | None = None  # the target's gradients of its rows
    n_iter: int = 0
    """Updates made."""
    best_epoch: int | None = None
    """With early stopping, the updates in the kept model (0: the initial one)."""
    validation_loss: list[float] = field(default_factory=list)
    """The target's: the held-out loss of the model after ``k`` updates, ``k = 0, 1, ...``."""


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceTerms(Message):
    """Step 1, source to target, each times ``|L|``: ``c`` of the overlap rows, ``Phi / 2``
    (packed at each block), ``M`` (its columns, packed at each block) and ``Phi`` (one
    ciphertext per coordinate): plain arrays with ``protocol="plain"``, else under the
    source's key (``Phi``'s coordinates under its gradient key)."""

    KIND = "transfer source terms"
    c: CiphertextBlock | np.ndarray
    phi: CiphertextBlock | np.ndarray
    m: CiphertextBlock | np.ndarray
    coords: CiphertextBlock | np.ndarray


@dataclass(frozen=True)
class Labels(Message):
    """At the start, source to target: ``[-y_r]`` of the overlap rows under the source's
    gradient key
    (nothing with ``protocol="plain"``: the plaintext simulation sends the terms instead)."""

    KIND = "transfer encrypted labels"
    signs: CiphertextBlock


@dataclass(frozen=True)
class TargetTerms(Message):
    """Step 2, target to source: ``[v]`` times ``|L|`` under the source's gradient key (with
    ``protocol="plain"``: the overlap rows' ``u / 2``, ``s`` and ``Q`` in the clear)."""

    KIND = "transfer target terms"
    v: CiphertextBlock | None = None
    u: np.ndarray | None = None
    s: np.ndarray | None = None
    q: np.ndarray | None = None
    keep: bool = False
    """Early stopping: the model of this iteration (as it began) is the best so far."""
    stop: bool = False
    """Early stopping: end training now, before this iteration's update."""


@dataclass(frozen=True)
class Setup(Message):
    """Target to source, first: its overlap rows and its labelled rows outside the overlap
    (the source needs ``|L|``; the target's label count is the only thing this reveals)."""

    KIND = "transfer setup"
    overlap: int
    labelled: int
    validation: bool = False
    """Whether the target holds out rows for early stopping (then it asks for ``Phi`` with
    its gradients, and says when to keep and when to stop)."""


@dataclass(frozen=True)
class Plain(Message):
    """A gradient in the clear (``protocol="plain"`` only) or, at the end, ``Phi``."""

    KIND = "transfer vector"
    values: np.ndarray


# -- layouts -------------------------------------------------------------------------------------


def _log2(value: float) -> int:
    return max(1, int(np.ceil(np.log2(max(value, 2.0)))))


def _sum_bits(terms: float) -> int:
    """Bits of a sum at ``2**-S`` of ``terms`` products, each below ``2**(2 UB)``."""
    return S + 2 * UB + _log2(terms) + 2


def _align(spec: FTLSpec, n_labelled: int) -> float:
    """The alignment gradient's factor, times ``|L|``: ``2 gamma |L| / |C|``."""
    return 2.0 * spec.gamma * n_labelled / max(spec.n_overlap, 1)


def _grad_layout(spec: FTLSpec, key: PaillierPublicKey, n_labelled: int) -> tuple[RowPacking, int]:
    """The packing of the target's gradients: ``R`` rows of ``d`` slots per ciphertext, one
    ciphertext per packed row (``per_ct`` is the ``R d`` slots used, so that the masked
    decryption, ``packing.masked_layout(rows)``, masks and returns those slots only)."""
    bits = _sum_bits(spec.dim + 2 + 2 * _align(spec, n_labelled))
    probe = slots.packing(bits, spec.dim, key, masked=True)
    if probe.per_ct < spec.dim:
        raise ValueError(
            f"dim={spec.dim} does not fit a {key.n_length}-bit key's slots ({probe.per_ct}): "
            "lower dim or use a larger key"
        )
    per = probe.per_ct // spec.dim
    return RowPacking(per * spec.dim, probe.slot_bits, per * spec.dim), per


def _grouped(rows: np.ndarray[Any, Any], per: int) -> np.ndarray[Any, Any]:
    """``(n, d)`` rows as ``(ceil(n / per), per * d)``, zero-padded."""
    n, d = rows.shape
    groups = -(-n // per)
    out = np.zeros((groups * per, d), dtype=rows.dtype)
    out[:n] = rows
    return out.reshape(groups, per * d)


def _blocks(vector: np.ndarray[Any, Any], per: int) -> np.ndarray[Any, Any]:
    """``per`` rows, row ``q`` holding ``vector`` in block ``q`` and zeros elsewhere."""
    d = len(vector)
    out = np.zeros((per, per * d), dtype=vector.dtype)
    for q in range(per):
        out[q, q * d : (q + 1) * d] = vector
    return out


def _source_key(
    fed: Federation, peer: str, policy: KeyPolicy, name: str = "key"
) -> tuple[Any, Any]:
    """A key pair of the source's, encrypting with the target's base (so that the target's
    re-randomisation covers every ciphertext it computes from); ``name`` tags the key's
    message (``"key"``: step 1's, ``"gkey"``: the gradient key)."""
    public, secret = policy.generate()
    FTL.send(fed, peer, name, PublicKeyMessage.of(public))
    try:
        secret = secret.for_base(FTL.recv(fed, peer, f"{name}-base", Base).h_s)
    except ValueError as exc:
        Base.refuse(peer, "h_s", str(exc))
    return public, secret


def _target_key(
    fed: Federation, peer: str, policy: KeyPolicy, name: str = "key"
) -> PaillierPublicKey:
    key = policy.accept(FTL.recv(fed, peer, name, PublicKeyMessage), peer)
    FTL.send(fed, peer, f"{name}-base", Base(h_s=key.base_bytes()))
    return key


def _warn_plain() -> None:
    warnings.warn(
        'protocol="plain" sends the transfer terms in the clear: a plaintext simulation, not for '
        "real parties",
        stacklevel=3,
    )


class _Party:
    def __init__(self, spec: FTLSpec, encoder: nn.Module, x: np.ndarray[Any, Any]) -> None:
        self.spec, self.encoder = spec, encoder
        self.x = torch.as_tensor(x, dtype=torch.float32)
        self.optimizer = torch_optimizer(
            "adam",
            encoder.parameters(),
            learning_rate=spec.learning_rate,
            weight_decay=spec.weight_decay,
        )


class SourceRole(_Party):
    """The source: its encoder, all its rows ``x`` with labels ``y`` (+-1), and the positions
    of the overlap rows among them (in the common order)."""

    def __init__(
        self,
        spec: FTLSpec,
        encoder: nn.Module,
        x: np.ndarray[Any, Any],
        y: np.ndarray[Any, Any],
        overlap: np.ndarray[Any, Any],
    ) -> None:
        super().__init__(spec, encoder, x)
        self.y = torch.as_tensor(y, dtype=torch.float32)
        self.overlap = np.asarray(overlap, dtype=np.int64)

    def __call__(self, fed: Federation) -> FTLResult:
        spec, peer = self.spec, self.spec.target
        setup = FTL.recv(fed, peer, "setup", Setup)
        if setup.overlap != spec.n_overlap:
            Setup.refuse(
                peer, "overlap", f"is {setup.overlap} rows; the source has {spec.n_overlap}"
            )
        if not 0 <= setup.labelled <= 10**9:
            Setup.refuse(peer, "labelled", f"is {setup.labelled}")
        self.n_labelled = spec.n_overlap + setup.labelled
        self.n_own = setup.labelled
        self.validating = setup.validation
        if self.n_labelled == 0:
            raise ValueError("no overlap and no target labels: nothing to transfer through")
        if spec.secure:
            self.public, self.secret = _source_key(fed, peer, spec.policy)
            self.grad_public, self.grad_secret = _source_key(fed, peer, spec.policy, "gkey")
            layout = slots.packing(2, 1, self.grad_public)
            cts = slots.encrypt_rows(self.grad_secret, self._signs(), layout)
            FTL.send(fed, peer, "labels", Labels(signs=slots.block(self.grad_public, cts)))
        else:
            _warn_plain()
        result = FTLResult(encoder=self.encoder)
        kept: dict[str, Any] | None = None
        with EpochProgress(fed.name, spec.max_iter, spec.verbose) as shown:
            # with validation, one more round evaluates the last update (and updates nothing)
            for it in range(spec.max_iter + int(self.validating)):
                began = time.perf_counter()
                self.encoder.train()
                u = self.encoder(self.x)
                phi = (self.y[:, None] * u).mean(dim=0)
                own = nn.functional.softplus(-self.y * (u @ phi)).mean()
                self._send_terms(fed, u.detach().numpy(), phi.detach().numpy(), it)
                self._serve_target(fed, it)
                v, control = self._source_gradient(fed, phi.detach().numpy(), it)
                if control.keep:  # the model as this iteration began
                    kept, result.best_epoch = copy.deepcopy(self.encoder.state_dict()), it
                if control.stop or it == spec.max_iter:
                    if it < spec.max_iter:
                        shown.note(f"{peer!r} stopped early, kept epoch {result.best_epoch}")
                    break
                surrogate = spec.source_weight * own + phi @ torch.as_tensor(v, dtype=torch.float32)
                train_step(self.optimizer, surrogate)
                result.loss_curve.append(float(own.detach()))
                result.iteration_seconds.append(time.perf_counter() - began)
                result.n_iter = it + 1
                shown.update(it + 1, loss=result.loss_curve[-1], best=result.best_epoch)
        if kept is not None:
            self.encoder.load_state_dict(kept)
        self.encoder.eval()
        with torch.no_grad():
            u = self.encoder(self.x)
            phi_final = (self.y[:, None] * u).mean(dim=0).double().numpy()
        FTL.send(fed, peer, "phi", Plain(values=phi_final))
        result.phi = phi_final
        return result

    def _signs(self) -> np.ndarray[Any, Any]:
        """``-y_r`` of the overlap rows, a column of integers."""
        out: np.ndarray[Any, Any] = -self.y.numpy()[self.overlap].astype(np.int64)[:, None]
        return out

    def _coords(self, phi: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """``Phi``, the coordinates step 2 multiplies by the target's ``Q``."""
        return phi

    def _send_terms(
        self, fed: Federation, u: np.ndarray[Any, Any], phi: np.ndarray[Any, Any], it: int
    ) -> None:
        """Step 1's terms, each times ``|L|``: ``c``, ``Phi / 2`` and ``M = Phi Phi^T / 4``."""
        spec = self.spec
        y = self.y.numpy()[self.overlap].astype(np.float64)
        phi = phi.astype(np.float64)
        align = _align(spec, self.n_labelled)
        c = -0.5 * y[:, None] * phi[None, :] - align * u[self.overlap].astype(np.float64)
        half_phi = 0.5 * phi
        m = 0.25 * np.outer(phi, phi)
        if not spec.secure:
            terms = SourceTerms(c=c, phi=half_phi, m=m, coords=phi)
            FTL.send(fed, spec.target, "src", terms, it)
            return
        packing, per = _grad_layout(spec, self.public, self.n_labelled)
        c_int = slots.fixed(c, S, 2 * UB + _log2(align), "the source's overlap terms", _FIX)
        phi_int = slots.fixed(half_phi, S, UB, "Phi", _FIX)
        m_int = slots.fixed(m, FM, 2 * UB, "Phi Phi^T", _FIX)
        cts_c = slots.encrypt_rows(self.secret, _grouped(c_int, per), packing)
        cts_phi = slots.encrypt_rows(self.secret, _blocks(phi_int, per), packing)
        columns = np.concatenate([_blocks(m_int[:, col], per) for col in range(spec.dim)])
        cts_m = slots.encrypt_rows(self.secret, columns, packing)
        single = slots.packing(FU + UB, 1, self.grad_public)
        coords = slots.fixed(self._coords(phi)[:, None], FU, UB, "Phi", _FIX)
        cts_coords = slots.encrypt_rows(self.grad_secret, coords, single)
        FTL.send(
            fed,
            spec.target,
            "src",
            SourceTerms(
                c=slots.block(self.public, cts_c),
                phi=slots.block(self.public, cts_phi),
                m=slots.block(self.public, cts_m),
                coords=slots.block(self.grad_public, cts_coords),
            ),
            it,
        )

    def _serve_target(self, fed: Federation, it: int) -> None:
        """Decrypt the target's masked gradients (step 1), checked against their layout."""
        if not self.spec.secure:
            return
        packing, per = _grad_layout(self.spec, self.public, self.n_labelled)
        rows = -(-self.spec.n_overlap // per) + -(-self.n_own // per) + int(self.validating)
        serve_decryption(
            fed,
            self.spec.target,
            FTL.child(f"dec-t{it}"),
            self.secret,
            expected=rows,
            layout=packing.masked_layout(rows),
            workers=DECRYPT_THREADS,
        )

    def _source_gradient(
        self, fed: Federation, phi: np.ndarray[Any, Any], it: int
    ) -> tuple[Any, TargetTerms]:
        """``v = dL/dPhi`` (step 2; it comes times ``|L|``) and the target's message, whose
        ``keep`` and ``stop`` only a validating target may set."""
        peer = self.spec.target
        terms = FTL.recv(fed, peer, "tgt", TargetTerms, it)
        if (terms.keep or terms.stop) and not self.validating:
            TargetTerms.refuse(peer, "stop", "is set, but the target holds out no rows")
        return self._gradient_of(terms, phi), terms

    def _gradient_of(self, terms: TargetTerms, phi: np.ndarray[Any, Any]) -> Any:
        spec, peer = self.spec, self.spec.target
        if not spec.secure:
            if terms.u is None or terms.s is None or terms.q is None:
                TargetTerms.refuse(peer, "u", "is missing in the plaintext simulation")
            u, s, q = (np.asarray(t, dtype=np.float64) for t in (terms.u, terms.s, terms.q))
            if u.shape != (spec.n_overlap, spec.dim):
                TargetTerms.refuse(peer, "u", f"has shape {u.shape}")
            y = self.y.numpy()[self.overlap]
            total = -(y[:, None] * u).sum(axis=0) + s + q @ phi.astype(np.float64)
            return total / self.n_labelled
        if terms.v is None:
            TargetTerms.refuse(peer, "v", "is missing")
        got = vector_from(self.grad_public, terms.v, peer)
        cts = slots.expect(got, spec.dim, TargetTerms, peer, "v")
        try:
            values = slots.unpack_rows(
                self.grad_secret.raw_decrypt(cts, workers=DECRYPT_THREADS),
                spec.dim,
                slots.packing(_v_bits(spec, self.n_labelled), 1, self.grad_public),
                _v_bits(spec, self.n_labelled),
                int(self.grad_public.n),
                "the source's gradient",
            )
        except OverflowError:
            TargetTerms.refuse(
                peer,
                "v",
                f"decrypts to a gradient beyond the {_v_bits(spec, self.n_labelled)} bits its "
                "terms can give: not computed from the gradient key's terms as step 2 says",
            )
        return values.astype(np.float64).ravel() * 2.0**-S / self.n_labelled


def _v_bits(spec: FTLSpec, n_labelled: int) -> int:
    """Bits of ``v`` times ``|L|`` at ``2**-S``."""
    return _sum_bits(n_labelled * (spec.dim + 1))


MIN_VALIDATION_ROWS = 8
"""Held-out rows below which the target does not stop early (the loss of fewer is noise)."""


def held_out(y: np.ndarray[Any, Any], spec: FTLSpec) -> np.ndarray[Any, Any]:
    """Which of the target's own labelled rows (labels ``y``, +-1) it holds out for early
    stopping: ``validation_fraction`` of each class, drawn from ``random_state``; none when
    ``tol`` is None or that leaves fewer than :data:`MIN_VALIDATION_ROWS` rows, a class
    without a held-out row, or a class without a training row."""
    held = np.zeros(len(y), dtype=bool)
    if spec.tol is None or spec.validation_fraction <= 0:
        return held
    rng = np.random.default_rng([spec.random_state, 11])
    for sign in (-1.0, 1.0):
        rows = np.flatnonzero(y == sign)
        count = round(len(rows) * spec.validation_fraction)
        if count < 1 or count >= len(rows):
            return np.zeros(len(y), dtype=bool)
        held[rng.choice(rows, size=count, replace=False)] = True
    return held if held.sum() >= MIN_VALIDATION_ROWS else np.zeros(len(y), dtype=bool)


def stopping_rule(spec: FTLSpec) -> LossCurve:
    """The target's early-stopping rule: :class:`vfl.training.LossCurve` on the validation
    loss, patience ``n_iter_no_change``, without its restart rules (a rise or a stall that
    shrinks the step and goes on from the best epoch): the target cannot change the source's
    step, and a validation loss that rises is what early stopping stops on."""
    return LossCurve(spec.tol, spec.patience, rise=math.inf, max_restarts=0, max_shrinks=0)


def _stopped(curve: LossCurve, patience: int) -> str:
    if curve.gave_up:
        return f"stopped: the validation loss is not finite; kept epoch {curve.best_epoch - 1}"
    return (
        f"stopped early: no better validation loss for {patience} epochs; kept epoch "
        f"{curve.best_epoch - 1}"
    )


class TargetRole(_Party):
    """The target: its encoder, its rows ``x``, the positions of the overlap rows (in the
    common order) and of its own labelled rows with their labels (+-1)."""

    def __init__(
        self,
        spec: FTLSpec,
        encoder: nn.Module,
        x: np.ndarray[Any, Any],
        overlap: np.ndarray[Any, Any],
        labelled: np.ndarray[Any, Any],
        y: np.ndarray[Any, Any],
        *,
        keep_view: bool = False,
    ) -> None:
        super().__init__(spec, encoder, x)
        self.overlap = np.asarray(overlap, dtype=np.int64)
        inside = set(self.overlap.tolist())
        keep = np.array([int(r) not in inside for r in labelled], dtype=bool)
        own = np.asarray(labelled, dtype=np.int64)[keep]  # labelled rows outside C
        own_y = np.asarray(y, dtype=np.float64)[keep]
        held = held_out(own_y, spec)
        self.val, self.val_y = own[held], own_y[held]
        self.own, self.own_y = own[~held], own_y[~held]
        self.rows = np.concatenate([self.overlap, self.own])
        self.n_labelled = len(self.rows)
        self.keep_view = keep_view

    @property
    def validating(self) -> bool:
        """Whether this fit stops early on held-out rows (see :func:`held_out`)."""
        return len(self.val) > 0

    def __call__(self, fed: Federation) -> FTLResult:
        spec, peer = self.spec, self.spec.source
        FTL.send(
            fed,
            peer,
            "setup",
            Setup(overlap=len(self.overlap), labelled=len(self.own), validation=self.validating),
        )
        if spec.secure:
            self.peer_key = _target_key(fed, peer, spec.policy)
            self.grad_key = _target_key(fed, peer, spec.policy, "gkey")
            got = vector_from(self.grad_key, FTL.recv(fed, peer, "labels", Labels).signs, peer)
            self.signs = slots.expect(got, spec.n_overlap, Labels, peer, "signs")
        else:
            _warn_plain()
        if spec.tol is not None and not self.validating:
            logger.info(
                "party %r: early stopping is off: %s",
                fed.name,
                "validation_fraction is 0"
                if spec.validation_fraction == 0
                else f"too few labelled rows outside the overlap to hold out "
                f"{MIN_VALIDATION_ROWS} with both classes",
            )
        result = FTLResult(encoder=self.encoder, view=[] if self.keep_view else None)
        curve = stopping_rule(spec)
        kept: dict[str, Any] | None = None
        with EpochProgress(fed.name, spec.max_iter, spec.verbose) as shown:
            # with validation, one more round evaluates the last update (and updates nothing)
            for it in range(spec.max_iter + int(self.validating)):
                began = time.perf_counter()
                self.encoder.train()
                u = self.encoder(self.x[self.rows])
                u_np = u.detach().double().numpy()
                g, phi = self._gradient(fed, u_np, it)
                keep = stop = False
                if phi is not None:  # asked for whenever validating
                    loss = self._validation_loss(phi)
                    stop = curve.add(loss) or it == spec.max_iter
                    keep = curve.keep
                    if keep:  # the model as this iteration began: after `it` updates
                        kept, result.best_epoch = copy.deepcopy(self.encoder.state_dict()), it
                    result.validation_loss.append(loss)
                    shown.update(it, val_loss=loss, best=curve.best_epoch - 1)
                    if stop and it < spec.max_iter:
                        shown.note(_stopped(curve, spec.patience))
                self._send_terms(fed, u_np, it, keep=keep, stop=stop)
                if result.view is not None:
                    result.view.append(g[: spec.n_overlap].copy())
                if stop:
                    break
                train_step(self.optimizer, u, torch.as_tensor(g, dtype=torch.float32))
                result.iteration_seconds.append(time.perf_counter() - began)
                result.n_iter = it + 1
                if not self.validating:
                    shown.update(it + 1)
        if kept is not None:
            self.encoder.load_state_dict(kept)
        result.phi = FTL.recv(fed, peer, "phi", Plain).values.astype(np.float64)
        if result.phi.shape != (spec.dim,) or not np.all(np.isfinite(result.phi)):
            Plain.refuse(peer, "values", f"is not a finite vector of {spec.dim}")
        self.encoder.eval()
        return result

    def _gradient(
        self, fed: Federation, u: np.ndarray[Any, Any], it: int
    ) -> tuple[Any, np.ndarray[Any, Any] | None]:
        """``dL/du_B`` of the trained rows (step 1; computed times ``|L|``) and, when
        validating, this iteration's ``Phi`` (decrypted with them)."""
        spec, peer = self.spec, self.spec.source
        terms = FTL.recv(fed, peer, "src", SourceTerms, it)
        n_c, d = spec.n_overlap, spec.dim
        align = _align(spec, self.n_labelled)
        if not spec.secure:
            c, half_phi, m = (
                np.asarray(t, dtype=np.float64) for t in (terms.c, terms.phi, terms.m)
            )
            if c.shape != (n_c, d) or m.shape != (d, d) or half_phi.shape != (d,):
                SourceTerms.refuse(peer, "c", f"has shape {c.shape}")
            g = u @ m.T
            g[:n_c] += c + align * u[:n_c]
            g[n_c:] += -self.own_y[:, None] * half_phi[None, :]
            return g / self.n_labelled, 2.0 * half_phi if self.validating else None
        key = self.peer_key
        packing, per = _grad_layout(spec, key, self.n_labelled)
        c_groups = -(-n_c // per)
        c_cts = slots.expect(vector_from(key, terms.c, peer), c_groups, SourceTerms, peer, "c")
        phi_cts = slots.expect(vector_from(key, terms.phi, peer), per, SourceTerms, peer, "phi")
        m_cts = slots.expect(vector_from(key, terms.m, peer), d * per, SourceTerms, peer, "m")
        self.coords = slots.expect(
            vector_from(self.grad_key, terms.coords, peer), d, SourceTerms, peer, "coords"
        )
        u_int = slots.fixed(u, FU, UB, "the target's representation", _FIX)
        aligned = slots.fixed(align * u[:n_c], S, UB + _log2(align), "the alignment term", _FIX)
        nsq = key.nsquare
        # the bases of [M u] for R rows at once: M's columns at each block, in (block, column)
        bases = [m_cts[col * per + q] for q in range(per) for col in range(d)]
        out, plain_rows = [], []
        for start, count, own in ((0, n_c, False), (n_c, len(self.own), True)):
            for lo in range(start, start + count, per):
                rows = list(range(lo, min(lo + per, start + count)))
                exps = np.zeros(per * d, dtype=np.int64)
                local = np.zeros(per * d, dtype=object)
                terms_b, signs = list(bases), []
                for q, r in enumerate(rows):
                    exps[q * d : (q + 1) * d] = u_int[r]
                    if own:  # - y_r Phi / 2 for its own labelled rows
                        terms_b.append(phi_cts[q])
                        signs.append(-int(self.own_y[r - n_c]))
                    else:  # + 2 gamma |L| u / |C| for the overlap rows
                        local[q * d : (q + 1) * d] = aligned[r]
                row_exps = np.concatenate([exps, np.asarray(signs, dtype=np.int64)])
                ct = slots.combine(terms_b, 1, row_exps[None, :], nsq)[0]
                if not own:
                    ct = ct * c_cts[(lo - start) // per] % nsq
                out.append(ct)
                plain_rows.append(local)
        if self.validating:  # [Phi / 2] in block 0, decrypted with the gradients
            out.append(phi_cts[0])
            plain_rows.append(np.zeros(per * d, dtype=object))
        out = slots.add_plain(out, np.array(plain_rows, dtype=object), packing, key)
        vector, masks = mask_slots(
            EncryptedVector(key, out, 0), packing.masked_layout(len(out)), for_key_owner=True
        )
        ints = request_decryption(fed, peer, FTL.child(f"dec-t{it}"), vector, masks)
        values = np.asarray(ints, dtype=np.float64).reshape(-1, per, d) * 2.0**-S
        own_groups = -(-len(self.own) // per)
        c_part = values[:c_groups].reshape(-1, d)[:n_c]
        own_part = values[c_groups : c_groups + own_groups].reshape(-1, d)[: len(self.own)]
        phi = 2.0 * values[-1, 0] if self.validating else None
        return np.concatenate([c_part, own_part]) / self.n_labelled, phi

    def _validation_loss(self, phi: np.ndarray[Any, Any]) -> float:
        """The transferred prediction loss (the objective's Taylor form) of the held-out rows,
        scored ``Phi . u_B`` by the model as this iteration began."""
        self.encoder.eval()  # no dropout, no statistics updated on held-out rows
        with torch.no_grad():
            u = self.encoder(self.x[self.val]).double().numpy()
        score = u @ phi
        return float(np.mean(np.log(2.0) - self.val_y * score / 2 + score**2 / 8))

    def _send_terms(
        self, fed: Federation, u: np.ndarray[Any, Any], it: int, *, keep: bool, stop: bool
    ) -> None:
        """Step 2: ``[v]`` times ``|L|``, computed under the source's key, with the early
        stopping bits."""
        spec = self.spec
        n_c = spec.n_overlap
        half_u = 0.5 * u[:n_c]
        s = -0.5 * (self.own_y[:, None] * u[n_c:]).sum(axis=0)
        q = 0.25 * u.T @ u
        if not spec.secure:
            terms = TargetTerms(u=half_u, s=s, q=q, keep=keep, stop=stop)
            FTL.send(fed, spec.source, "tgt", terms, it)
            return
        key = self.grad_key
        bound = UB + _log2(self.n_labelled)
        u_int = slots.fixed(half_u, S, UB, "the target's representation", _FIX)
        q_int = slots.fixed(q, FM, 2 * UB + _log2(self.n_labelled), "the target's u u^T", _FIX)
        s_int = slots.fixed(s[:, None], S, bound, "the target's labelled sum", _FIX)
        bases = list(self.signs) + list(self.coords)
        exps = np.concatenate([u_int.T, q_int], axis=1)  # row j: u_B(., j) / 2, then Q[j, .]
        v = slots.combine(bases, 1, exps.astype(np.int64), key.nsquare)
        v = slots.add_plain(v, s_int, slots.packing(_v_bits(spec, self.n_labelled), 1, key), key)
        vector = slots.block(key, slots.for_owner(key, v))
        FTL.send(fed, spec.source, "tgt", TargetTerms(v=vector, keep=keep, stop=stop), it)
