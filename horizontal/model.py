"""The torch side of the horizontal path: default modules and flat parameter vectors.

Every party holds its own copy of the module; what travels is the flat vector of its
parameters (:func:`flatten`; float32 on the wire, as the modules train in float32, while the
server aggregates in float64) -- never a pickled module. Modules with
buffers (BatchNorm's running statistics) are refused: buffers are not parameters, would not
be averaged, and carry statistics of a client's records; use LayerNorm or GroupNorm.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.extras import optional
from vfl.training import modules

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

__all__ = ["build_module", "flatten", "load_vector", "mlp"]

Vector = np.ndarray[Any, Any]


def mlp(n_features: int, n_outputs: int, hidden: Sequence[int] = (64,)) -> nn.Module:
    """A multilayer perceptron (:func:`vfl.training.modules.mlp`); no hidden layer is a
    linear model (logistic or linear regression with its loss)."""
    return modules.mlp(n_features, n_outputs, hidden)


def build_module(
    module: Any, n_features: int, n_outputs: int, hidden: Sequence[int], seed: int | None
) -> nn.Module:
    """The module to train: ``None`` (an MLP with ``hidden``), ``"linear"``, a factory
    ``module(n_features, n_outputs)``, or an ``nn.Module`` (copied); initialised from ``seed``
    (every party builds the same one; the server's initial weights are sent anyway)."""
    with modules.seeded(seed):
        if module is None:
            built = mlp(n_features, n_outputs, hidden)
        elif isinstance(module, str):
            if module != "linear":
                raise ValueError(
                    f'module must be None, "linear", a factory or an nn.Module, got {module!r}'
                )
            built = mlp(n_features, n_outputs, ())
        elif isinstance(module, nn.Module):
            built = copy.deepcopy(module)
        elif callable(module):
            built = module(n_features, n_outputs)
            if not isinstance(built, nn.Module):
                raise ValueError(
                    f"module factory returned {type(built).__name__}, not a torch nn.Module"
                )
        else:
            raise ValueError(
                f'module must be None, "linear", a factory or an nn.Module, got {module!r}'
            )
    buffers = [name for name, _ in built.named_buffers()]
    if buffers:
        raise ValueError(
            f"the module has buffers {buffers[:3]} (BatchNorm?): they are not averaged and hold "
            "statistics of a client's records; use LayerNorm or GroupNorm"
        )
    return built.float()


def flatten(module: nn.Module) -> Vector:
    """The module's parameters as one float64 vector (its ``parameters()`` order)."""
    with torch.no_grad():
        out: Vector = nn.utils.parameters_to_vector(module.parameters()).detach().cpu().numpy()
    return out.astype(np.float64, copy=True)


def load_vector(module: nn.Module, vector: Vector) -> None:
    """Set the module's parameters from a vector of :func:`flatten`'s layout (checked)."""
    size = sum(p.numel() for p in module.parameters())
    if np.shape(vector) != (size,):
        raise ValueError(f"a parameter vector of shape {np.shape(vector)} for {size} parameters")
    dtype = next(iter(module.parameters()), torch.zeros(0)).dtype  # float32, or float64
    with torch.no_grad():
        values = torch.as_tensor(np.asarray(vector), dtype=dtype)
        nn.utils.vector_to_parameters(values, module.parameters())


LossFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]  # named, not looked up
