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

The rows are the families' own (:mod:`vfl.comparison.vertical`, :mod:`vfl.comparison.split`,
:mod:`transfer.comparison`, :mod:`horizontal.comparison`), found through the registry the
families fill (:mod:`vfl.registry`, loaded by :func:`vfl.app.families.load_families`): this
module imports no family by name.

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
>>> from vfl.app.compare import compare
>>> result = compare(quick=True, seed=0)        # doctest: +SKIP
>>> print(result)                               # doctest: +SKIP
>>> result.table()                              # one row per scheme, as a DataFrame

``vflink compare [--quick] [--seed N] [--out DIR]`` and ``examples/partition_schemes.py`` run
the same and write the figure (AUC against privacy loss, one point per scheme).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from vfl.app.families import load_families
from vfl.comparison.base import FULL, QUICK, Attack, Context, SchemeResult, Settings
from vfl.datasets import ClinicalPopulation, make_population
from vfl.registry import FAMILIES, SCHEME_MODULES, SCHEMES

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
    "format_table",
    "load_schemes",
    "plot_comparison",
]

logger = logging.getLogger(__name__)


def load_schemes() -> dict[str, str]:
    """Import every module of rows the families registered whose optional dependencies (torch:
    the ``torch`` extra) are installed; the others are skipped, with the reason (by the
    module's label: ``"split"``, ``"transfer"``...)."""
    skipped = dict(load_families())
    for entry in SCHEME_MODULES.values():
        missing = [n for n in entry.needs if importlib.util.find_spec(n) is None]
        if missing:
            skipped[entry.label] = f"needs {', '.join(missing)} (pip install 'vflink[torch]')"
            logger.warning(
                "comparison: the %s schemes are skipped: %s", entry.label, skipped[entry.label]
            )
            continue
        importlib.import_module(entry.module)
    return skipped


def _label(module: str) -> str:
    """The label of the registered module of rows ``module`` (itself when not registered)."""
    return next((e.label for e in SCHEME_MODULES.values() if e.module == module), module)


class Comparison:
    """The rows of one :func:`compare` run, with the population and settings they ran on.

    ``str()`` gives the printed table and, below it, what each party learns under each
    scheme; :meth:`table` the same as a DataFrame; :meth:`plot` the figure.
    """

    def __init__(
        self,
        results: list[SchemeResult],
        population: ClinicalPopulation,
        settings: Settings,
        seed: int,
        seconds: float,
        context: Context | None = None,
    ) -> None:
        self.results = results
        self.population = population
        self.settings = settings
        self.seed = seed
        self.seconds = seconds
        self.context = context
        """What the rows shared (the population's cuts and the linkage, made once): an example
        handed it reruns a row on the very same linked rows."""
        self.skipped: dict[str, str] = {}
        """Families of schemes not run, with the reason (a missing optional dependency)."""

    def __getitem__(self, scheme: str) -> SchemeResult:
        for result in self.results:
            if result.scheme == scheme:
                return result
        raise KeyError(f"no row {scheme!r}; rows: {[r.scheme for r in self.results]}")

    def __len__(self) -> int:
        return len(self.results)

    def table(self) -> pd.DataFrame:
        """One row per scheme, indexed by its name: ``family``, ``auc``, ``epsilon`` (None
        without DP), the worst ``attack`` with its ``attack_success`` and ``attack_chance``,
        ``privacy_loss`` (0 chance .. 1 total), ``seconds``, ``bytes`` (every party),
        ``bytes_per_party`` (a dict), ``learns`` and ``notes``."""
        table: pd.DataFrame = pd.DataFrame([r.as_row() for r in self.results])
        indexed: pd.DataFrame = table.set_index("scheme")
        return indexed

    def __str__(self) -> str:
        text = format_table(self.results, self.settings, self.population, self.seconds)
        if self.skipped:
            text += "\n\nNot run: " + "; ".join(f"{k} ({v})" for k, v in self.skipped.items())
        return text

    def plot(self, path: str | Path | None = None) -> Any:
        """The figure (:func:`plot_comparison`); saved to ``path`` if given."""
        return plot_comparison(self.results, path)

    def save(self, folder: str | Path, stem: str = "partition_schemes") -> list[Path]:
        """Write ``<stem>.txt`` (the printed table), ``<stem>.csv`` (:meth:`table`) and
        ``<stem>.png`` (the figure; skipped without matplotlib) into ``folder`` (created if
        missing); returns the paths written."""
        from vfl.files import write_atomically

        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / f"{stem}.txt", out / f"{stem}.csv"]
        write_atomically(written[0], str(self) + "\n")
        write_atomically(written[1], self.table().to_csv())
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            logger.warning("matplotlib is not installed (the plot extra): no figure written")
            return written
        figure = self.plot(out / f"{stem}.png")
        plt.close(figure)
        return [*written, out / f"{stem}.png"]


def compare(
    *,
    quick: bool = False,
    seed: int = 0,
    population: ClinicalPopulation | None = None,
    schemes: Iterable[str] | None = None,
    settings: Settings | None = None,
    progress: Callable[[SchemeResult], None] | None = None,
) -> Comparison:
    """Run every scheme (or those named) on one population and return the rows.

    Parameters
    ----------
    quick : bool
        :data:`~vfl.comparison.QUICK` (about a minute on two cores: 1,600 patients, 1024-bit demo
        keys, short training) instead of :data:`~vfl.comparison.FULL` (under five minutes: 4,000
        patients, 2048-bit keys).
    seed : int
        Seed of the population, of every cut and of every model's initialisation and batches.
        Cryptographic randomness (keys, masks, shares) and DP noise come from the OS and vary
        between runs by design, so rows with DP vary a little; the others repeat to a few
        decimals.
    population : ClinicalPopulation, optional
        Defaults to ``make_population(settings.n_patients, random_state=seed)``.
    schemes : iterable of str, optional
        Scheme names or families (``"vertical"``, ``"split"``...) to run; all by default.
    settings : Settings, optional
        Overrides ``quick``.
    progress : callable, optional
        Called with each row as it finishes.

    Returns
    -------
    Comparison

    Raises
    ------
    ValueError
        An unknown scheme or family (the known ones are listed).
    """
    skipped = load_schemes()
    chosen = settings if settings is not None else (QUICK if quick else FULL)
    if population is None:
        population = make_population(chosen.n_patients, random_state=seed)
    specs = [s for s in SCHEMES.values() if _label(s.module) not in skipped]
    if schemes is not None:
        wanted = list(schemes)
        unknown = [w for w in wanted if w not in SCHEMES and w not in FAMILIES and w not in skipped]
        if unknown:
            raise ValueError(
                f"unknown schemes {unknown}; families: {list(FAMILIES)}; schemes: {list(SCHEMES)}"
            )
        specs = [s for s in specs if s.name in wanted or s.family in wanted]
    specs.sort(key=lambda s: FAMILIES.index(s.family))
    ctx = Context(population, chosen, seed)
    began = time.perf_counter()
    results = []
    for spec in specs:
        logger.info("comparison: running %s", spec.name)
        result = spec.run(ctx)
        results.append(result)
        if progress is not None:
            progress(result)
    comparison = Comparison(results, population, chosen, seed, time.perf_counter() - began, ctx)
    comparison.skipped = skipped
    return comparison


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f}" if n < 1e9 else f"{n / 1e9:.1f}G"


def format_table(
    results: Sequence[SchemeResult], settings: Settings, population: Any, seconds: float
) -> str:
    """The comparison as printed text: the figures, then what each party learns."""
    name_width = max([len(r.scheme) for r in results] + [6]) + 2
    head = (
        f"{'scheme':<{name_width}}{'AUC':>6}{'epsilon':>9}{'privacy loss':>14}  "
        f"{'worst attack (success / chance)':<46}{'seconds':>8}{'MB sent':>9}"
    )
    lines = [
        f"{population!r}; settings {settings.name!r} ({settings.key_bits}-bit keys); "
        f"{seconds:.0f} s in all",
        "",
        head,
        "-" * len(head),
    ]
    family = None
    for r in results:
        if r.family != family and family is not None:
            lines.append("")
        family = r.family
        worst = r.worst_attack
        attack = "-" if worst is None else f"{worst.audit} {worst.success:.2f} / {worst.chance:.2f}"
        loss = r.privacy_loss
        eps = "-" if r.epsilon is None else f"{r.epsilon:.2f}"
        lines.append(
            f"{r.scheme:<{name_width}}{r.auc:>6.3f}{eps:>9}"
            f"{'-' if math.isnan(loss) else f'{loss:.2f}':>14}  {attack:<46}"
            f"{r.seconds:>8.1f}{_mb(r.total_bytes):>9}"
        )
    lines += [
        "",
        "privacy loss: the worst attack's advantage over guessing, (success - chance) / "
        "(1 - chance); centralised = 1 (rows handed over), alone = 0.",
        "MB sent: every party's messages (centralised: the rows it would hand over).",
        "",
        "MB sent by each party:",
    ]
    lines += [
        f"  {r.scheme}: "
        + (", ".join(f"{p} {_mb(b)}" for p, b in r.bytes_per_party.items()) or "-")
        for r in results
    ]
    lines += ["", "What each party learns:"]
    lines += [f"  {r.scheme}: {r.learns}" for r in results]
    notes = [f"  {r.scheme}: {r.notes}" for r in results if r.notes]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines)


_MARKERS = {
    "centralised": "s",
    "alone": "v",
    "vertical": "o",
    "split": "D",
    "transfer": "^",
    "horizontal": "P",
}


def plot_comparison(results: Sequence[SchemeResult], path: str | Path | None = None) -> Any:
    """Test AUC against privacy loss, one point per scheme (marker by family, epsilon written
    beside the DP schemes). Returns the matplotlib figure; saves it to ``path`` if given.

    Raises
    ------
    ImportError
        Without matplotlib (the ``plot`` extra).
    """
    import matplotlib.pyplot as plt

    fig, (ax, key) = plt.subplots(1, 2, figsize=(12, 6.5), gridspec_kw={"width_ratios": [3, 2]})
    numbered = [r for r in results if not math.isnan(r.privacy_loss)]
    for family in FAMILIES:
        rows = [(i, r) for i, r in enumerate(numbered, 1) if r.family == family]
        if not rows:
            continue
        ax.scatter(
            [r.privacy_loss for _, r in rows],
            [r.auc for _, r in rows],
            marker=_MARKERS[family],
            color=f"C{FAMILIES.index(family)}",  # one colour per family, whatever is plotted
            s=60,
            label=family,
            alpha=0.8,
        )
    # schemes that land on one spot share one label ("6,7")
    spots: dict[tuple[float, float], list[int]] = {}
    for i, r in enumerate(numbered, 1):
        spots.setdefault((round(r.privacy_loss, 2), round(r.auc, 3)), []).append(i)
    for (x, y), numbers in spots.items():
        label = ",".join(map(str, numbers))
        ax.annotate(label, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    # the key: points crowd where schemes agree, so they carry numbers and the names sit here
    key.axis("off")
    entries = [
        f"{i:>2}  {r.scheme}" + ("" if r.epsilon is None else f"  (ε {r.epsilon:.1f})")
        for i, r in enumerate(numbered, 1)
    ]
    key.text(0, 1, "\n".join(entries), va="top", ha="left", fontsize=8, family="monospace")
    ax.set_xlabel("privacy loss: worst attack's advantage over guessing (0 chance, 1 total)")
    ax.set_ylabel("test AUC (held-out patients)")
    ax.set_xlim(-0.05, 1.1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=130)
    return fig
