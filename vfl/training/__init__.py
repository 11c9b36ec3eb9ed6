"""Training pieces every federated learner shares: schedules, optimisers, convergence, the
standardiser and the torch loop.

* :mod:`~vfl.training.schedule` -- epoch orders and mini-batches derived from a seed the parties
  agree on (no per-epoch order on the wire), and the batch-size leakage check;
* :mod:`~vfl.training.optimizers` -- SGD (with step decay) and Adam behind a name registry;
* :mod:`~vfl.training.convergence` -- stopping on a loss curve;
* :mod:`~vfl.training.control` -- the epoch-control message the label party sends each epoch;
* :mod:`~vfl.training.standardise` -- a party's columns centred and scaled by its own statistics
  (:class:`Standardiser`);
* :mod:`~vfl.training.torch_loop` -- a torch optimiser by name and one training step (imported
  from there, not from here: it imports torch, which the linear models do without).
"""

from vfl.training.control import EpochControl
from vfl.training.convergence import LossCurve
from vfl.training.optimizers import OPTIMIZERS, Adam, Optimizer, Sgd, make_optimizer
from vfl.training.schedule import Schedule, agree_seed, batches, check_batch_size
from vfl.training.standardise import Standardiser

__all__ = [
    "OPTIMIZERS",
    "Adam",
    "EpochControl",
    "LossCurve",
    "Optimizer",
    "Schedule",
    "Sgd",
    "Standardiser",
    "agree_seed",
    "batches",
    "check_batch_size",
    "make_optimizer",
]
