"""The rows of the partition-scheme comparison that the toolkit's families define.

:mod:`vfl.comparison.base` holds what every row is made of (:class:`Settings`,
:class:`Context`, :class:`SchemeResult`, :class:`Attack`); the vertical family's rows are in
:mod:`vfl.comparison.vertical` (centralised, alone, vertical logistic regression by each
protocol) and :mod:`vfl.comparison.split` (split networks with each defence); the transfer and
horizontal families keep theirs in :mod:`transfer.comparison` and
:mod:`horizontal.comparison`. Each registers its rows with :func:`vfl.registry.scheme`; the
comparison itself -- running them all, the table, the figure, ``vflink compare`` -- is
application code, :mod:`vfl.app.compare`.
"""

from __future__ import annotations

from vfl.comparison.base import FULL, QUICK, Attack, Context, SchemeResult, Settings, timed
from vfl.registry import FAMILIES, SCHEMES, scheme

__all__ = [
    "FAMILIES",
    "FULL",
    "QUICK",
    "SCHEMES",
    "Attack",
    "Context",
    "SchemeResult",
    "Settings",
    "scheme",
    "timed",
]
