"""Progress bars for long computations: tqdm on standard error, only for calls big enough to
take more than a few seconds (each caller sets its threshold), never inside worker processes.

Set the environment variable ``VFLINK_PROGRESS=0`` to silence them everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

__all__ = ["progress"]

T = TypeVar("T")


def progress(iterable: Iterable[T], *, total: int, desc: str, show: bool) -> Iterator[T]:
    """``iterable``, with a progress bar when ``show`` (and ``VFLINK_PROGRESS`` is not ``0``)."""
    enabled = show and os.environ.get("VFLINK_PROGRESS", "1") != "0"
    return iter(tqdm(iterable, total=total, desc=desc, leave=False, disable=not enabled))
