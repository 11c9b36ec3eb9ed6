"""Training pieces every federated learner shares: schedules, optimisers, convergence.

* :mod:`~vfl.training.schedule` -- epoch orders and mini-batches derived from a seed the parties
  agree on (no per-epoch order on the wire), and the batch-size leakage check;
* :mod:`~vfl.training.optimizers` -- SGD (with step decay) and Adam behind a name registry;
* :mod:`~vfl.training.convergence` -- stopping on a loss curve;
* :mod:`~vfl.training.control` -- the epoch-control message the label party sends each epoch.
"""

from vfl.training.control import EpochControl
from vfl.training.convergence import LossCurve
from vfl.training.optimizers import OPTIMIZERS, Adam, Optimizer, Sgd, make_optimizer
from vfl.training.schedule import Schedule, agree_seed, batches, check_batch_size

__all__ = [
    "OPTIMIZERS",
    "Adam",
    "EpochControl",
    "LossCurve",
    "Optimizer",
    "Schedule",
    "Sgd",
    "agree_seed",
    "batches",
    "check_batch_size",
    "make_optimizer",
]
