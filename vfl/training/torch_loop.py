"""The torch training loop's shared pieces: a party's optimiser by name, and its step.

Every neural protocol (the split network, both transfer estimators, the horizontal clients
and the pooled baseline) builds its optimiser with :func:`torch_optimizer` and updates with
:func:`train_step`, so a change to how a party steps (fused kernels, clipping) is made once.

Not exported from :mod:`vfl.training`: importing this module imports torch (when installed),
which the vertical linear models, that use the rest of the toolkit, do without.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from vfl.extras import optional

if TYPE_CHECKING:
    import torch
else:
    torch = optional("torch", for_=__name__)

__all__ = ["TORCH_OPTIMIZERS", "torch_optimizer", "train_step"]

TORCH_OPTIMIZERS: dict[str, str] = {"adam": "Adam", "sgd": "SGD"}
"""The registry: name -> class of :mod:`torch.optim`."""


def torch_optimizer(
    name: str,
    params: Iterable[Any],
    *,
    learning_rate: float,
    weight_decay: float = 0.0,
    fused: bool = False,
) -> torch.optim.Optimizer:
    """A fresh torch optimiser by name on a party's own ``params``.

    Parameters
    ----------
    name : {"adam", "sgd"}
        :class:`torch.optim.Adam` or :class:`torch.optim.SGD` (no momentum).
    params : iterable of torch.nn.Parameter
        The parameters it steps.
    learning_rate : float
        Its step (``lr``).
    weight_decay : float
        The L2 penalty torch adds to each gradient (``weight_decay``); 0 adds none.
    fused : bool
        torch's fused kernel: one call for all of the parameters, a third of the per-step time
        of the loop over tensors on small modules. Off by default, as in torch (whose
        default then picks the loop).

    Returns
    -------
    torch.optim.Optimizer

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`TORCH_OPTIMIZERS` (the message lists them).
    """
    if name not in TORCH_OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(TORCH_OPTIMIZERS)}, got {name!r}")
    cls = getattr(torch.optim, TORCH_OPTIMIZERS[name])
    options: dict[str, Any] = {"lr": learning_rate, "weight_decay": weight_decay}
    if fused:  # left out otherwise: torch's own default, not an explicit False
        options["fused"] = True
    optimizer: torch.optim.Optimizer = cls(params, **options)
    return optimizer


def train_step(
    optimizer: torch.optim.Optimizer, output: torch.Tensor, gradient: torch.Tensor | None = None
) -> None:
    """One update: clear the gradients, back-propagate, step.

    ``output`` is a scalar loss, or (with ``gradient``, the loss's gradient with respect to
    it) a party's own output whose loss another party computes: a split network's embedding,
    a transfer encoder's representation.
    """
    optimizer.zero_grad()
    torch.autograd.backward(output, gradient)  # output.backward(gradient), typed
    optimizer.step()
