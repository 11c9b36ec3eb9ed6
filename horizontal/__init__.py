"""The horizontal setting for comparison: FedAvg, FedProx, differential privacy, secure
aggregation, robust aggregation and compression, built on :mod:`vfl`'s runtime.

Nothing is implemented here yet; it arrives with its own issue.
"""

__all__: list[str] = []
