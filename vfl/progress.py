"""Progress people can read: every bar and line names its party and stage.

Two kinds of progress, both drawn by :mod:`linkage.progress` (the lowest floor that shows
progress; see there how it picks bars on a terminal and whole lines elsewhere):

* **long work** -- :func:`progress` (an iterable) and :func:`stage` (counted by hand) show
  ``lab: encrypting values 12,000/30,000`` for calls big enough to take a few seconds (each
  caller sets its threshold through ``show``), never inside worker processes;
* **training** -- :class:`EpochProgress`, for a party's training loop: per-epoch loss, step and
  best epoch, live.

Every display is labelled with the party whose thread runs it: the role runner
(:mod:`vfl.estimator`) sets it around each role (:func:`party_context`), in simulation, where
every party is a thread of one process, and in deployment. On a terminal each bar takes a line
of its own, so two parties' bars never overwrite each other.

``VFLINK_PROGRESS=0`` silences every bar and line (configured logging still records the epoch
lines at INFO); ``VFLINK_PROGRESS=lines`` or ``bars`` forces a display.

This module imports :mod:`linkage.progress` only when something is shown, so that
``vfl.crypto`` and the other light modules stay light.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol, TypeVar

__all__ = ["EpochProgress", "StageLike", "current_party", "party_context", "progress", "stage"]

T = TypeVar("T")


class StageLike(Protocol):
    """What :func:`stage` returns: :meth:`advance` after each piece of work, then close."""

    def advance(self, count: int = 1) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> StageLike: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


class _Quiet:
    """A stage that shows nothing (its work is too small, or progress is off)."""

    def advance(self, count: int = 1) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


def progress(iterable: Iterable[T], *, total: int, desc: str, show: bool) -> Iterator[T]:
    """``iterable``, with a labelled progress display (one count per item) when ``show`` and
    ``VFLINK_PROGRESS`` is not ``0``; ``desc`` names the stage and what it counts."""
    if not show:
        return iter(iterable)
    from linkage.progress import progress as shown

    return shown(iterable, total=total, desc=desc, show=True)


def stage(desc: str, *, total: int, show: bool) -> StageLike:
    """A labelled stage counting to ``total`` by :meth:`~StageLike.advance` (use it as a
    context manager), shown when ``show`` and ``VFLINK_PROGRESS`` is not ``0``."""
    if not show:
        return _Quiet()
    from linkage.progress import Stage

    return Stage(desc, total=total, show=True)


def party_context(party: str, *, deployed: bool = False) -> contextlib.AbstractContextManager[None]:
    """Label this thread's progress with ``party`` for the block (``deployed``: the party's
    own process, whose epoch lines go to its log rather than a bar)."""
    from linkage.progress import party_context as context

    return context(party, deployed=deployed)


def current_party() -> str | None:
    """The party whose work this thread does (see :mod:`linkage.progress`), or None."""
    from linkage.progress import current_party as party

    return party()


def _number(value: float, spec: str) -> str:
    return format(float(value), spec)


class EpochProgress:
    """Live per-epoch progress of one party's training loop: loss, step, best epoch.

    Parameters
    ----------
    party : str or None
        The party training (its name labels every line); None: the party of this thread
        (:func:`current_party`), which the role runner sets.
    total_epochs : int
        ``max_iter``: the most epochs the loop runs.
    verbose : int
        As scikit-learn's: ``0`` shows nothing (lines still go to the ``vflink.progress``
        logger at INFO where logging is configured to show it -- a deployed party's log);
        ``1`` or more shows the epochs: in simulation on a terminal a tqdm bar with the
        figures as its postfix, on its own line; otherwise (not a terminal, or deployed) one
        line per epoch, through logging at INFO where it is configured, else on standard
        error::

            lab: epoch 3/30 loss 0.4123 step 0.21 best 3

    desc : str
        What the loop counts (``"epoch"``; ``"round"`` for FedAvg, say).

    Call it from the loop, at the party that knows the loss (others may show their epochs
    without one)::

        shown = EpochProgress(fed.name, spec.max_iter, spec.verbose)
        with shown:
            for epoch in range(spec.max_iter):
                ...                                   # one epoch
                stop = curve.add(loss)
                shown.update(epoch + 1, loss=loss, step=rate, best=curve.best_epoch)
                if stop:
                    shown.note(f"stopped early, kept epoch {curve.best_epoch}")
                    break

    :meth:`update` takes the epochs done (1-based) and any of ``loss``, ``step`` (the step
    size, or the update's norm), ``best`` (the epoch whose model the fit keeps) and further
    named figures (``val_loss=0.41`` shows as ``val loss 0.4100``); a figure that is None is
    left out. Leaving the ``with`` block (or :meth:`close`) removes the bar and writes one
    last line: the last figures (after a bar) with the :meth:`note`, if any -- shown as the
    epoch lines are. ``VFLINK_PROGRESS=0`` silences all of it but configured logging.

    In a loop that keeps its own step and :class:`~vfl.training.LossCurve`, for instance::

        shown = EpochProgress(self.fed.name, spec.max_iter, spec.verbose)
        ...
        shown.update(epoch + 1, loss=loss, step=self.rate, best=curve.best_epoch)
    """

    def __init__(
        self, party: str | None, total_epochs: int, verbose: int = 0, *, desc: str = "epoch"
    ) -> None:
        from linkage import progress as shown  # only now: vfl's light modules stay light

        self._shown = shown
        context = shown.current_context()
        self.party = party if party is not None else (context.party if context else None)
        deployed = context.deployed if context is not None else False
        self.total_epochs = int(total_epochs)
        self.verbose = int(verbose)
        self.label = shown.label(desc, self.party) if self.party else desc
        self.bars = (
            self.verbose >= 1
            and shown.enabled()
            and shown.display_mode() == "bars"
            and not deployed
        )
        self.epoch = 0
        self.figures = ""
        self._note = ""
        self._bar: Any = None
        self._line = -1
        self._closed = False

    @staticmethod
    def describe(
        *,
        loss: float | None = None,
        step: float | None = None,
        best: int | None = None,
        **metrics: float | None,
    ) -> str:
        """The figures as a line shows them: ``loss 0.4123 step 0.21 best 3``."""
        parts = []
        if loss is not None:
            parts.append(f"loss {_number(loss, '.4f')}")
        for name, value in metrics.items():
            if value is None:
                continue
            parts.append(f"{name.replace('_', ' ')} {_number(value, '.4f')}")
        if step is not None:
            parts.append(f"step {_number(step, '.4g')}")
        if best is not None:
            parts.append(f"best {int(best)}")
        return " ".join(parts)

    def line(self) -> str:
        """The last epoch's line: ``lab: epoch 3/30 loss 0.4123 step 0.21 best 3``."""
        text = f"{self.label} {self.epoch}/{self.total_epochs}"
        return f"{text} {self.figures}" if self.figures else text

    def update(
        self,
        epoch: int,
        *,
        loss: float | None = None,
        step: float | None = None,
        best: int | None = None,
        **metrics: float | None,
    ) -> None:
        """``epoch`` epochs done (1-based), with the figures to show (see the class)."""
        self.epoch = int(epoch)
        self.figures = self.describe(loss=loss, step=step, best=best, **metrics)
        if self.bars:
            if self._bar is None:
                self._bar, self._line = self._shown.open_bar(self.label, self.total_epochs)
            self._bar.n = self.epoch
            self._bar.set_postfix_str(self.figures, refresh=False)
            self._bar.refresh()
            return
        self._shown.emit(self.line(), display=self.verbose >= 1)

    def note(self, text: str) -> None:
        """Something to say at the end (``"stopped early, kept epoch 7"``)."""
        self._note = text

    def close(self) -> None:
        """Remove the bar; with ``verbose``, write the last figures and the note."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
            self._shown.give_line(self._line)
        if self._note or self.bars:
            last = self.line() if self.epoch else self.label
            text = f"{last} ({self._note})" if self._note else last
            self._shown.emit(text, display=self.verbose >= 1)

    def __enter__(self) -> EpochProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
