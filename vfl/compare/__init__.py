"""Every partition scheme side by side, on one population: accuracy, privacy, time, bytes.

vflink lets a lab network and an imaging centre (and hospitals, and a rare-disease centre)
learn together in several ways. :func:`compare` runs them all on one synthetic clinical
population (:func:`vfl.datasets.make_population`), each on the partition it is made for, each
scored on the same held-out patients:

* **centralised** -- every row pooled at one analyst (logistic regression and a small MLP):
  the upper bound, and no privacy at all;
* **alone** -- the label holder on its own rows and columns (the imaging centre; a hospital;
  the rare-disease centre with its few labels): nothing shared;
* **vertical** -- :class:`vfl.linear.VerticalLogisticRegression` by each protocol, on the rows
  Bloom-filter linkage finds in common, with label DP as a defence;
* **split** -- :class:`vfl.SplitNNClassifier` without and with each defence;
* **transfer** -- federated transfer learning (:mod:`transfer`) from a general hospital to an
  imaging centre with few labels;
* **horizontal** -- FedAvg and FedProx over five hospitals, with client-level DP and secure
  aggregation.

Every row reports the test AUC, what each party learns (in the protocol's own words), the DP
epsilon where DP applies (from the run's :class:`vfl.privacy.PrivacyLedger`), the success of
the shipped attacks against that very run (label leakage, embedding inversion, update
inversion, membership), seconds and bytes per party. The *privacy loss* puts the attacks on
one scale: the worst attack's advantage over guessing, ``(success - chance) / (1 - chance)``,
0 for chance and 1 for total success; centralised counts as 1 (the rows are handed over) and
a party alone as 0.

Read the attacks as lower bounds on what leaks: an attack that fails within its budget is not
a proof of privacy (see :mod:`vfl.audit`).

Example
-------
>>> from vfl.compare import compare
>>> result = compare(quick=True, seed=0)        # doctest: +SKIP
>>> print(result)                               # doctest: +SKIP
>>> result.table()                              # one row per scheme, as a DataFrame

``vflink compare [--quick] [--seed N] [--out DIR]`` and ``examples/partition_schemes.py`` run
the same and write the figure (AUC against privacy loss, one point per scheme).
"""

from __future__ import annotations

from vfl.compare.base import (
    FAMILIES,
    FULL,
    QUICK,
    SCHEMES,
    Attack,
    Context,
    SchemeResult,
    Settings,
    scheme,
)
from vfl.compare.run import Comparison, compare, plot_comparison

__all__ = [
    "FAMILIES",
    "FULL",
    "QUICK",
    "SCHEMES",
    "Attack",
    "Comparison",
    "Context",
    "SchemeResult",
    "Settings",
    "compare",
    "plot_comparison",
    "scheme",
]
