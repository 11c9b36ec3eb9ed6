"""One entry of the privacy ledger: a recorded spend, checked, and its dp-accounting event."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from vfl.privacy import accounting
from vfl.privacy.checks import check_positive_finite, check_positive_int, check_probability

__all__ = ["MECHANISMS", "LedgerEntry", "Mechanism"]


@dataclass(frozen=True)
class Mechanism:
    """How the ledger accounts one kind of mechanism.

    Attributes
    ----------
    parameter : str
        The per-step parameter it is recorded by: ``"noise_multiplier"`` or ``"epsilon"``.
    sampled : bool
        Whether it may run on a Poisson sample (``sampling_rate < 1``).
    event : callable
        ``(parameter value, sampling_rate, steps) -> DpEvent``.
    """

    parameter: str
    sampled: bool
    event: Callable[[float, float, int], accounting.DpEvent]


MECHANISMS: dict[str, Mechanism] = {
    "gaussian": Mechanism(
        "noise_multiplier",
        True,
        lambda v, q, t: accounting.gaussian_event(noise_multiplier=v, sampling_rate=q, steps=t),
    ),
    "laplace": Mechanism(
        "epsilon",
        True,
        lambda v, q, t: accounting.laplace_event(epsilon=v, sampling_rate=q, steps=t),
    ),
    "randomized_response": Mechanism(
        "epsilon", False, lambda v, q, t: accounting.randomized_response_event(epsilon=v, steps=t)
    ),
    # Pure epsilon-DP; accounted as the worst case of those, binary randomized response.
    "exponential": Mechanism(
        "epsilon", False, lambda v, q, t: accounting.randomized_response_event(epsilon=v, steps=t)
    ),
}
"""Mechanisms the ledger accounts, by name, with the parameter each is recorded by."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded spend: ``steps`` releases by one mechanism about one holder's data.

    Attributes
    ----------
    holder : str
        The data holder whose people the release is about (a party's name).
    data : str
        Which data: a data set or column name, free text.
    mechanism : str
        One of :data:`MECHANISMS`.
    noise_multiplier : float or None
        Gaussian noise standard deviation over the L2 sensitivity (``"gaussian"`` only).
    epsilon : float or None
        The budget of one step (the pure-DP mechanisms; for BLIP, of one bit).
    sensitivity : float or None
        The sensitivity the noise was scaled to (for the record; accounting does not use it).
    sampling_rate : float
        Poisson sampling rate of each step, in ``(0, 1]``.
    steps : int
        The number of releases (steps, bits) composed.
    timestamp : str
        When it was recorded, ISO 8601 in UTC.
    """

    holder: str
    data: str
    mechanism: str
    noise_multiplier: float | None = None
    epsilon: float | None = None
    sensitivity: float | None = None
    sampling_rate: float = 1.0
    steps: int = 1
    timestamp: str = field(default_factory=_now)

    def __post_init__(self) -> None:
        problems: list[str] = []

        def check(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
            try:
                function(*args, **kwargs)
            except ValueError as error:
                problems.append(str(error))

        # Typed as str, but an entry may come from JSON: check the runtime types too.
        holder: Any = self.holder
        data: Any = self.data
        timestamp: Any = self.timestamp
        if not isinstance(holder, str) or not holder:
            problems.append(f"holder must be a non-empty name, got {holder!r}")
        if not isinstance(data, str):
            problems.append(f"data must be a string naming the data, got {data!r}")
        check(check_probability, "sampling_rate", self.sampling_rate, allow_one=True)
        check(check_positive_int, "steps", self.steps)
        if self.sensitivity is not None:
            check(check_positive_finite, "sensitivity", self.sensitivity)
        try:
            datetime.fromisoformat(timestamp)
        except (TypeError, ValueError):
            problems.append(f"timestamp must be an ISO 8601 time, got {self.timestamp!r}")
        kind = MECHANISMS.get(self.mechanism)
        if kind is None:
            problems.append(
                f"unknown mechanism {self.mechanism!r}; valid mechanisms: {sorted(MECHANISMS)}"
            )
        else:
            for name in ("noise_multiplier", "epsilon"):
                value = getattr(self, name)
                if name == kind.parameter:
                    check(check_positive_finite, name, value)
                elif value is not None:
                    problems.append(
                        f"{self.mechanism} is recorded by {kind.parameter}, not {name}={value!r}"
                    )
            if not kind.sampled and self.sampling_rate != 1:
                problems.append(
                    f"{self.mechanism} cannot be accounted on a Poisson sample, got "
                    f"sampling_rate={self.sampling_rate!r}; record it with sampling_rate=1"
                )
        if problems:
            raise ValueError(f"bad ledger entry for holder {self.holder!r}: " + "; ".join(problems))

    @property
    def params(self) -> dict[str, float]:
        """The mechanism's recorded parameters (those that are set)."""
        names = ("noise_multiplier", "epsilon", "sensitivity")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def event(self) -> accounting.DpEvent:
        """This entry as a dp-accounting event."""
        kind = MECHANISMS[self.mechanism]
        value = getattr(self, kind.parameter)
        return kind.event(value, self.sampling_rate, self.steps)

    def to_dict(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LedgerEntry:
        """Rebuild an entry from :meth:`to_dict`'s output (checked as on recording)."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown ledger entry fields {unknown}; valid fields: {sorted(known)}"
            )
        return cls(**data)
