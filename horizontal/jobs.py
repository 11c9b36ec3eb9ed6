"""The horizontal family's comparison rows: what it offers the application.

:func:`register` (the ``horizontal`` entry point of the ``vflink.families`` group) adds the
module of its comparison rows, :mod:`horizontal.comparison` (FedAvg and FedProx over five
hospitals, with client-level DP and secure aggregation, and each hospital alone), to the
registry of :mod:`vfl.registry`. ``vflink party`` runs no horizontal job yet (a horizontal
deployment runs on Flower, :mod:`horizontal.flower`), so it registers no job.
"""

from __future__ import annotations

from vfl.registry import register_scheme_module

__all__ = ["register"]


def register() -> None:
    """Add the horizontal family's module of comparison rows to :mod:`vfl.registry`."""
    register_scheme_module("horizontal", "horizontal.comparison", needs=("torch",))
