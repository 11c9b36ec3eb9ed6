"""Federated transfer learning (shared encoders), built on :mod:`vfl`'s runtime.

Nothing is implemented here yet; it arrives with its own issue.
"""

__all__: list[str] = []
