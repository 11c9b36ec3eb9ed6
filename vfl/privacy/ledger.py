"""The privacy ledger: every differentially private release in vflink, and what it spent.

Each DP mechanism in the library records one :class:`~vfl.privacy.entry.LedgerEntry` per
spend: whose data it protects (the data holder), which data (a free-text data set or column
name), the mechanism and its parameters, the Poisson sampling rate and the number of steps.
The ledger answers the epsilon each holder has spent by composing that holder's entries with
dp-accounting (:mod:`vfl.privacy.accounting`), prints a table, and saves itself as JSON.

Composition treats a holder's entries as releases about the same people. With no holder named,
:meth:`PrivacyLedger.epsilon` composes every entry: in a vertical federation every holder holds
a slice of the same people, so that is one person's total.

.. warning::
   The ledger accounts only what is recorded. A mechanism that forgets to call
   :meth:`PrivacyLedger.record`, and any non-private output (a linkage result revealing who
   matched, a model trained without noise), spends privacy the ledger does not show.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfl.files import write_atomically
from vfl.privacy import accounting
from vfl.privacy.checks import check_probability
from vfl.privacy.entry import LedgerEntry

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["PrivacyLedger", "record_blip", "record_randomized_response"]

logger = logging.getLogger(__name__)

_FORMAT = "vflink.privacy_ledger"
_VERSION = 1


class PrivacyLedger:
    """Every DP release the library made, composed per data holder with dp-accounting.

    Parameters
    ----------
    delta : float
        The delta, in ``(0, 1)``, that :meth:`epsilon` and :meth:`table` report epsilon at.
    accountant : {"rdp", "pld"}
        The default accountant (see :mod:`vfl.privacy.accounting`); ``"pld"`` is tighter for
        many pure-epsilon entries such as BLIP's bits.

    Raises
    ------
    ValueError
        If ``delta`` is out of range or the accountant is unknown.

    Notes
    -----
    :meth:`record` may be called from several party threads at once.
    """

    def __init__(self, *, delta: float = 1e-5, accountant: str = "rdp") -> None:
        self.delta = check_probability("delta", delta)
        accounting.get_accountant(accountant)
        self.accountant = accountant
        self._entries: list[LedgerEntry] = []
        self._lock = threading.Lock()

    def record(
        self,
        *,
        holder: str,
        data: str,
        mechanism: str,
        noise_multiplier: float | None = None,
        epsilon: float | None = None,
        sensitivity: float | None = None,
        sampling_rate: float = 1.0,
        steps: int = 1,
    ) -> LedgerEntry:
        """Record one spend (see :class:`LedgerEntry` for the parameters) and return it.

        Raises
        ------
        ValueError
            Listing every problem with the entry at once.
        """
        entry = LedgerEntry(
            holder=holder,
            data=data,
            mechanism=mechanism,
            noise_multiplier=noise_multiplier,
            epsilon=epsilon,
            sensitivity=sensitivity,
            sampling_rate=sampling_rate,
            steps=steps,
        )
        with self._lock:
            self._entries.append(entry)
        logger.info(
            "privacy ledger: %s on %r of %r, %s, q=%g, steps=%d",
            mechanism,
            data,
            holder,
            entry.params,
            sampling_rate,
            steps,
        )
        return entry

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """A snapshot of the entries, in recording order."""
        with self._lock:
            return tuple(self._entries)

    def __len__(self) -> int:
        return len(self.entries)

    def holders(self) -> list[str]:
        """The holders with entries, in order of their first entry."""
        return list(dict.fromkeys(e.holder for e in self.entries))

    def epsilon(
        self,
        delta: float | None = None,
        *,
        holder: str | None = None,
        accountant: str | None = None,
    ) -> float:
        """The epsilon spent, at ``delta``, by ``holder``'s entries composed (all if None).

        Parameters
        ----------
        delta : float, optional
            Defaults to the ledger's delta.
        holder : str, optional
            Whose spend; None composes every entry (see the module docstring).
        accountant : {"rdp", "pld"}, optional
            Defaults to the ledger's accountant.

        Returns
        -------
        float
            The epsilon; 0.0 when nothing was recorded.

        Raises
        ------
        ValueError
            If ``holder`` has no entries (the holders that have are listed), or as
            :func:`vfl.privacy.accounting.epsilon`.
        """
        entries = self.entries
        if holder is not None:
            entries = tuple(e for e in entries if e.holder == holder)
            if not entries:
                raise ValueError(
                    f"holder {holder!r} has no ledger entries; holders: {self.holders()}"
                )
        return _epsilon(
            entries, self.delta if delta is None else delta, accountant or self.accountant
        )

    def _rows(self) -> list[dict[str, Any]]:
        entries, delta, accountant = self.entries, self.delta, self.accountant
        rows = []
        for holder in self.holders():
            mine = [e for e in entries if e.holder == holder]
            # a spend repeated (one per round, say) is one line, its steps summed
            groups: dict[str, list[LedgerEntry]] = {}
            for entry in mine:
                same = {**entry.to_dict(), "steps": 0, "timestamp": ""}
                key = json.dumps(same, sort_keys=True, default=str)
                groups.setdefault(key, []).append(entry)
            for group in groups.values():
                steps = sum(e.steps for e in group)
                rows.append(
                    {
                        **group[0].to_dict(),
                        "steps": steps,
                        "epsilon_spent": _epsilon(group, delta, accountant),
                    }
                )
            if len(mine) > 1:
                rows.append(_total_row(holder, _epsilon(mine, delta, accountant)))
        if len(self.holders()) > 1:
            rows.append(_total_row("(all holders)", _epsilon(entries, delta, accountant)))
        return rows

    def table(self) -> str:
        """A plain-text table: one line per entry (entries that differ only in their steps
        and times, as one spend per round does, as one line with the steps summed), then
        each holder's and the overall total."""
        header = ("holder", "data", "mechanism", "params", "q", "steps", "epsilon")
        lines = [header]
        for row in self._rows():
            params = ", ".join(f"{k}={v:g}" for k, v in _params(row).items())
            total = row["mechanism"] == ""
            lines.append(
                (
                    row["holder"],
                    row["data"],
                    row["mechanism"],
                    params,
                    "" if total else f"{row['sampling_rate']:g}",
                    "" if total else str(row["steps"]),
                    f"{row['epsilon_spent']:.4g}",
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        body = [
            "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        ]
        title = f"privacy ledger: epsilon at delta={self.delta:g} ({self.accountant} accountant)"
        return "\n".join([title, *body])

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (
            f"PrivacyLedger(delta={self.delta!r}, accountant={self.accountant!r}, "
            f"entries={len(self)})"
        )

    def to_frame(self) -> pd.DataFrame:
        """The entries as a DataFrame with each one's ``epsilon_spent`` (pandas imported here)."""
        import pandas as pd

        columns = [*LedgerEntry.__dataclass_fields__, "epsilon_spent"]
        rows = [
            {**e.to_dict(), "epsilon_spent": _epsilon([e], self.delta, self.accountant)}
            for e in self.entries
        ]
        frame: pd.DataFrame = pd.DataFrame(rows, columns=columns)
        return frame

    def to_json(self) -> str:
        """The ledger as JSON text (:meth:`from_json` reads it back)."""
        document = {
            "format": _FORMAT,
            "version": _VERSION,
            "delta": self.delta,
            "accountant": self.accountant,
            "entries": [e.to_dict() for e in self.entries],
        }
        return json.dumps(document, indent=2)

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        """Read a ledger written by :meth:`to_json`.

        Raises
        ------
        ValueError
            If the text is not a vflink privacy ledger, or an entry is bad (its index named).
        """
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"a privacy ledger must be JSON: {error}") from None
        if not isinstance(document, dict) or document.get("format") != _FORMAT:
            raise ValueError(f"not a privacy ledger: expected 'format': {_FORMAT!r}")
        if document.get("version") != _VERSION:
            raise ValueError(
                f"privacy ledger version {document.get('version')!r} is not supported; "
                f"this vflink reads version {_VERSION}"
            )
        ledger = cls(delta=document.get("delta", 0.0), accountant=str(document.get("accountant")))
        entries = document.get("entries")
        if not isinstance(entries, list):
            raise ValueError(f"a privacy ledger's 'entries' must be a list, got {entries!r}")
        for index, item in enumerate(entries):
            try:
                if not isinstance(item, dict):
                    raise ValueError(f"an entry must be an object, got {item!r}")
                ledger._entries.append(LedgerEntry.from_dict(item))
            except (TypeError, ValueError) as error:
                raise ValueError(f"privacy ledger entry {index}: {error}") from None
        return ledger

    def save(self, path: str | Path) -> None:
        """Write the ledger as JSON to ``path``, atomically."""
        write_atomically(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> PrivacyLedger:
        """Read a ledger saved by :meth:`save`.

        Raises
        ------
        ValueError
            If the file is not a valid ledger (the path is named).
        """
        try:
            return cls.from_json(Path(path).read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def _epsilon(entries: Iterable[LedgerEntry], delta: float, accountant: str) -> float:
    events = [e.event() for e in entries]
    return accounting.epsilon(events, delta=delta, accountant=accountant) if events else 0.0


def _params(row: dict[str, Any]) -> dict[str, float]:
    names = ("noise_multiplier", "epsilon", "sensitivity")
    return {n: row[n] for n in names if row.get(n) is not None}


def _total_row(holder: str, epsilon: float) -> dict[str, Any]:
    return {"holder": holder, "data": "(total)", "mechanism": "", "epsilon_spent": epsilon}


def record_blip(
    ledger: PrivacyLedger,
    *,
    holder: str,
    epsilon_per_bit: float,
    bits_per_record: int | None = None,
    data: str = "Bloom-filter encodings (BLIP)",
) -> LedgerEntry:
    """Record the BLIP hardening of a holder's Bloom-filter encodings for linkage.

    BLIP flips each filter bit independently with probability ``1 / (1 + exp(eps))`` (Alaggan
    et al. 2012; Schnell and Borgs 2016), which makes each bit ``eps``-DP: pass the schema's
    ``blip_epsilon``. Two versions of one person's record whose filters differ in ``k`` bits
    are told apart with ``k`` composed bits' privacy, so the entry composes
    ``bits_per_record`` randomized-response bits.

    Parameters
    ----------
    ledger : PrivacyLedger
        Where to record.
    holder : str
        The data holder whose records were encoded.
    epsilon_per_bit : float
        ``linkage.Schema.blip_epsilon``.
    bits_per_record : int, optional
        The most filter bits in which two versions of one person's record can differ (at most
        the filter length; about twice the record's tokens times the hash count). When omitted
        the entry counts one bit, a per-bit guarantee only, and a warning is logged.
    data : str
        What was encoded.

    Returns
    -------
    LedgerEntry

    .. warning::
        BLIP protects the content of a record, not its presence: which records match, and how
        many there are, is revealed by the linkage and is not accounted here.
    """
    if bits_per_record is None:
        logger.warning(
            "BLIP for %r recorded per bit (epsilon %s): pass bits_per_record for the per-record"
            " guarantee, which composes every bit a record sets",
            holder,
            epsilon_per_bit,
        )
    return ledger.record(
        holder=holder,
        data=data,
        mechanism="randomized_response",
        epsilon=epsilon_per_bit,
        steps=1 if bits_per_record is None else bits_per_record,
    )


def record_randomized_response(
    ledger: PrivacyLedger,
    *,
    holder: str,
    epsilon: float,
    data: str = "its labels (randomised response)",
) -> LedgerEntry:
    """Record one release of a holder's codes through
    :func:`vfl.privacy.mechanisms.randomized_response` (pure ``epsilon``-DP per code: the
    label-DP of split learning's and transfer learning's :class:`~vfl.privacy.RandomizedResponse`).

    Parameters
    ----------
    ledger : PrivacyLedger
        Where to record.
    holder : str
        The data holder whose codes were randomised.
    epsilon : float
        The ``epsilon`` they were randomised with.
    data : str
        What was randomised.

    Returns
    -------
    LedgerEntry

    Raises
    ------
    ValueError
        If ``epsilon`` is not a positive finite number.
    """
    return ledger.record(
        holder=holder, data=data, mechanism="randomized_response", epsilon=float(epsilon)
    )
