"""The torch loop's shared pieces: optimisers by name with torch's own arguments, one step."""

from __future__ import annotations

import pytest

from vfl.training.torch_loop import torch_optimizer, train_step

torch = pytest.importorskip("torch")


def test_optimizers_by_name_pass_torch_its_arguments() -> None:
    params = [torch.nn.Parameter(torch.ones(3))]
    adam = torch_optimizer("adam", params, learning_rate=0.1, weight_decay=0.01)
    assert isinstance(adam, torch.optim.Adam)
    group = adam.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["fused"]) == (0.1, 0.01, None)
    sgd = torch_optimizer("sgd", params, learning_rate=0.5, fused=True)
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["fused"] is True
    with pytest.raises(ValueError, match=r"must be one of \['adam', 'sgd'\], got 'lbfgs'"):
        torch_optimizer("lbfgs", params, learning_rate=0.1)


def test_a_step_clears_back_propagates_and_steps() -> None:
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    sgd = torch_optimizer("sgd", [w], learning_rate=0.5)
    w.grad = torch.tensor([100.0, 100.0])  # stale: cleared first
    train_step(sgd, (w**2).sum())  # gradient 2 w
    torch.testing.assert_close(w.detach(), torch.tensor([0.0, 0.0]))
    out = w * 3.0  # a party's output, its loss's gradient given by another party
    train_step(sgd, out, torch.tensor([1.0, -1.0]))  # gradient 3 * (1, -1)
    torch.testing.assert_close(w.detach(), torch.tensor([-1.5, 1.5]))
