"""Progress of long computations, each line labelled with its party and stage.

One federated job runs several parties at once (in simulation, as threads of one process), so
every progress display says whose work it is: ``lab: encrypting values 12,000/30,000``. This
module is the one place that draws them, for linkage (encoding, comparing) and for
:mod:`vfl` (encrypting, multi-exponentiations, training epochs through
:class:`vfl.progress.EpochProgress`); it sits at the lowest floor that needs it, as
:mod:`linkage.workers` does for executors, and imports nothing of ours.

**Whose work.** :func:`current_party` is the party that :func:`party_context` set for the
running thread (the role runner, :mod:`vfl.estimator`, sets it around every role, in
simulation and in deployment), else the party of a thread that
:class:`vfl.federation.LocalFederation` started (it names them ``vflink-party-<name>``), else
None (a single-party call: no label).

**How it shows** (:func:`display_mode`):

* on a terminal, tqdm bars, each on a line of its own: a bar takes the lowest line no other
  bar of this process holds and gives it back when it ends, so two parties' bars never
  overwrite each other;
* elsewhere (a pipe, a log file, captured output, a notebook's standard error), whole lines:
  one when a stage starts, at most one every :data:`LINE_SECONDS`, one when it ends -- each
  written at once, so threads cannot interleave them. They go to the ``vflink.progress``
  logger at INFO when logging is configured to show INFO there (a deployed party's log),
  otherwise to standard error, as tqdm writes its bars.

The environment variable ``VFLINK_PROGRESS`` chooses: ``0`` silences every bar and line (logging
at INFO still records epoch lines), ``bars`` or ``lines`` forces a display, anything else (or
unset) picks by whether standard error is a terminal.

Each caller decides what is long enough to show (``show=``): a few seconds of work.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from tqdm import tqdm

__all__ = [
    "LINE_SECONDS",
    "PartyContext",
    "Stage",
    "current_context",
    "current_party",
    "display_mode",
    "emit",
    "enabled",
    "label",
    "party_context",
    "progress",
]

T = TypeVar("T")

logger = logging.getLogger("vflink.progress")

LINE_SECONDS = 10.0
"""Seconds between two lines of one stage where no terminal shows bars."""

THREAD_PREFIX = "vflink-party-"
"""How :class:`vfl.federation.LocalFederation` names a party's thread."""

BAR_FORMAT = "{desc} {n:,}/{total:,} |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]{postfix}"
"""A bar: its label and stage, then the counts with thousands separators."""


@dataclass(frozen=True)
class PartyContext:
    """Who runs the current thread's work: the party, and whether it is deployed (its own
    process, whose progress goes to its log) rather than simulated."""

    party: str
    deployed: bool = False


_CONTEXT: contextvars.ContextVar[PartyContext | None] = contextvars.ContextVar(
    "vflink_party", default=None
)


@contextlib.contextmanager
def party_context(party: str, *, deployed: bool = False) -> Iterator[None]:
    """Label every progress display of this thread (and of what it runs in its own context)
    with ``party`` until the block ends."""
    token = _CONTEXT.set(PartyContext(party, deployed))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current_context() -> PartyContext | None:
    """The running thread's :class:`PartyContext` (see the module docstring), or None."""
    context = _CONTEXT.get()
    if context is not None:
        return context
    name = threading.current_thread().name
    if name.startswith(THREAD_PREFIX) and len(name) > len(THREAD_PREFIX):
        return PartyContext(name[len(THREAD_PREFIX) :])
    return None


def current_party() -> str | None:
    """The party whose work the running thread does, or None (see the module docstring)."""
    context = current_context()
    return None if context is None else context.party


def label(desc: str, party: str | None = None) -> str:
    """``"party: desc"`` (``party`` by default :func:`current_party`), or ``desc`` alone."""
    who = party if party is not None else current_party()
    return f"{who}: {desc}" if who else desc


def enabled(show: bool = True) -> bool:
    """Whether a display asked for (``show``) may appear: ``VFLINK_PROGRESS`` is not ``0``."""
    return show and os.environ.get("VFLINK_PROGRESS", "1").strip() != "0"


def display_mode() -> str:
    """``"bars"`` (a terminal, or ``VFLINK_PROGRESS=bars``) or ``"lines"``."""
    choice = os.environ.get("VFLINK_PROGRESS", "").strip().lower()
    if choice in ("bars", "lines"):
        return choice
    try:
        return "bars" if sys.stderr is not None and sys.stderr.isatty() else "lines"
    except (AttributeError, ValueError):  # a replaced or closed stream
        return "lines"


def emit(line: str, *, display: bool = True) -> None:
    """One whole progress line: to the ``vflink.progress`` logger at INFO where logging is
    configured to show it, else (when ``display`` and :func:`enabled`) to standard error."""
    if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        logger.info("%s", line)
    elif display and enabled():
        tqdm.write(line, file=sys.stderr)


# -- terminal lines: each bar its own ----------------------------------------------------------

_LINES_LOCK = threading.Lock()
_LINES_TAKEN: set[int] = set()


def take_line() -> int:
    """The lowest terminal line (tqdm ``position``) no live bar of this process holds."""
    with _LINES_LOCK:
        line = 0
        while line in _LINES_TAKEN:
            line += 1
        _LINES_TAKEN.add(line)
        return line


def give_line(line: int) -> None:
    """Give back a line that :func:`take_line` gave."""
    with _LINES_LOCK:
        _LINES_TAKEN.discard(line)


def open_bar(desc: str, total: int, *, initial: int = 0) -> tuple[Any, int]:
    """A tqdm bar labelled ``desc`` on a line of its own: ``(bar, line)``; close the bar and
    :func:`give_line` the line when done."""
    line = take_line()
    bar = tqdm(
        total=total,
        initial=initial,
        desc=desc,
        position=line,
        leave=False,
        file=sys.stderr,
        bar_format=BAR_FORMAT,
        dynamic_ncols=True,
    )
    return bar, line


# -- stages ------------------------------------------------------------------------------------


class Stage:
    """A stage of long work that counts to ``total`` (items, rows, values): a bar on a
    terminal, otherwise lines (see the module docstring). :meth:`advance` after each piece;
    :meth:`close` at the end (or use it as a context manager). Nothing shows unless ``show``
    (and :func:`enabled`); ``party`` defaults to :func:`current_party`.

    ``desc`` names the stage and what it counts: ``"encrypting values"`` shows as
    ``lab: encrypting values 12,000/30,000``.
    """

    def __init__(
        self, desc: str, *, total: int, show: bool = True, party: str | None = None
    ) -> None:
        self.label = label(desc, party)
        self.total = int(total)
        self.count = 0
        self.mode = display_mode() if enabled(show) else "off"
        self._bar: Any = None
        self._line = -1
        self._began = self._last = time.monotonic()
        self._closed = False
        if self.mode == "bars":
            self._bar, self._line = open_bar(self.label, self.total)
        elif self.mode == "lines":
            emit(self._text())

    def _text(self, seconds: float | None = None) -> str:
        text = f"{self.label} {self.count:,}/{self.total:,}"
        return text if seconds is None else f"{text} in {seconds:.1f} s"

    def advance(self, count: int = 1) -> None:
        """``count`` more items done."""
        self.count += count
        if self._bar is not None:
            self._bar.update(count)
        elif self.mode == "lines":
            now = time.monotonic()
            if now - self._last >= LINE_SECONDS:
                self._last = now
                emit(self._text())

    def close(self, *, failed: bool = False) -> None:
        """End the stage: the bar goes, or a last line says how long it took (or, when the
        work ``failed``, where it stopped)."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
            give_line(self._line)
        elif self.mode == "lines":
            emit(
                f"{self._text()} stopped" if failed else self._text(time.monotonic() - self._began)
            )

    def __enter__(self) -> Stage:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(failed=kind is not None and not issubclass(kind, GeneratorExit))


def progress(iterable: Iterable[T], *, total: int, desc: str, show: bool) -> Iterator[T]:
    """``iterable``, counted by a :class:`Stage` (one item each) when ``show`` and
    :func:`enabled`; otherwise ``iterable`` untouched."""
    if not enabled(show):
        return iter(iterable)
    return _counted(iterable, Stage(desc, total=total))


def _counted(iterable: Iterable[T], stage: Stage) -> Iterator[T]:
    with stage:
        for item in iterable:
            yield item
            stage.advance()
