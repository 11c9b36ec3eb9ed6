"""The roles of horizontal training: a server and clients, written once for every federation.

The protocol (tags under ``fed/``):

1. **setup** -- each client (having held out ``validation_fraction`` of its rows when the fit
   stops early) sends the server its :class:`Profile`: its training and held-out row counts,
   column names, and, unless the estimator is told the scaling and classes, its column sums
   and sums of squares and its distinct labels -- under DP noisy statistics instead
   (:mod:`horizontal.scaling`: a noisy histogram, then noisy moments). The server checks that
   every client has the same columns, pools the statistics and answers with the
   :class:`Scaling` every client standardises with (the classes, and what the estimator
   left to the data: the step size, the L2 penalty from the pooled row count);
2. **rounds** -- the server samples clients (``client_fraction``; a fixed count drawn from
   ``random_state``, or Poisson sampling from the OS under client-level DP), sends each a
   :class:`Task` with the global weights (and Scaffold's control variate, and DP's clipping
   norm), and gathers their :class:`Update` (``local - global``, the row count, Scaffold's
   control change; with early stopping the sent model's loss summed over the held-out rows;
   under :class:`~horizontal.strategies.FedLBFGS` minus the gradient of the objective at
   the sent weights and the objective summed over the rows), waiting for at least
   ``min_clients`` of them: clients that fail or drop out are left out and the weights
   renormalise over those that replied; fewer abort the fit naming the round. With early
   stopping (:mod:`horizontal.stopping`) the server stops when the pooled held-out loss has
   not improved for ``n_iter_no_change`` rounds, FedLBFGS when it has converged;
3. **stop** -- the server sends every client the final weights (with early stopping, the
   model of the lowest held-out loss: after the last round, if no round has evaluated it,
   an ``evaluate`` task asks for its held-out loss first).

What a party learns: a client, the global models it is sent (and, during setup, the pooled
means, deviations and classes); the server, each sampled client's row counts, column sums
(unless told the scaling; noisy under DP) and its model update each round, with early
stopping its held-out loss sum, under FedLBFGS its exact gradient and objective -- not its
records, but an update is a function of them (gradient inversion can reconstruct records
from one small batch's update; see :mod:`horizontal.privacy` for the defences that bound
what it reveals).

The protocol's pieces, one module each: :mod:`horizontal.messages` (what crosses the channel),
:mod:`horizontal.plan` (what the parties agree on, and what a fit returns),
:mod:`horizontal.client` and :mod:`horizontal.server` (the roles); this module gathers their
public names.
"""

from __future__ import annotations

from horizontal.client import ClientRole
from horizontal.messages import FED, Profile, Scaling, Task, Update
from horizontal.plan import (
    FitResult,
    FitSpec,
    RoundRecord,
    default_alpha,
    default_step,
    is_linear,
    settled,
    told,
)
from horizontal.server import (
    DIVERGED,
    ServerRole,
    aggregate_updates,
    check_diverged,
    scaffold_control_step,
)

__all__ = [
    "DIVERGED",
    "FED",
    "ClientRole",
    "FitResult",
    "FitSpec",
    "Profile",
    "RoundRecord",
    "Scaling",
    "ServerRole",
    "Task",
    "Update",
    "aggregate_updates",
    "check_diverged",
    "default_alpha",
    "default_step",
    "is_linear",
    "scaffold_control_step",
    "settled",
    "told",
]

_check_diverged = check_diverged
"""Deprecated alias of :func:`check_diverged`, until :mod:`horizontal.flower` imports the
public name."""
