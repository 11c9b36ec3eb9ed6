"""The clkhash + anonlink side of ``benchmarks/linkage.py``, run in whichever Python has them.

Reads the two identity CSVs and the true pairs that ``linkage.py`` wrote, encodes both with
clkhash (a schema of the same fields, q-grams and weights as vflink's defaults), compares all
pairs with anonlink's C++ Dice at floors 0.5 and 0.8 (the best of three runs each, as
vflink's side is timed), solves greedily at a range of thresholds, and
prints one JSON object: encode rate, comparisons per second, and the best F1 over thresholds.

Run by ``linkage.py``; by hand::

    python benchmarks/compare_anonlink.py DIR SECRET_HEX
"""

from __future__ import annotations

import array
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _schema(clkhash_schema, names):  # type: ignore[no-untyped-def]
    def text(identifier: str, n: int, bits: int) -> dict:  # type: ignore[type-arg]
        return {
            "identifier": identifier,
            "format": {"type": "string", "encoding": "utf-8", "case": "mixed"},
            "hashing": {
                "comparison": {"type": "ngram", "n": n},
                "strategy": {"bitsPerToken": bits},
                "hash": {"type": "blakeHash"},
                "missingValue": {"sentinel": ""},
            },
        }

    features = [
        text("given_name", 2, 20),
        text("surname", 2, 20),
        {
            "identifier": "date_of_birth",
            "format": {"type": "string", "encoding": "utf-8", "case": "mixed"},
            "hashing": {
                "comparison": {"type": "ngram", "n": 1, "positional": True},
                "strategy": {"bitsPerToken": 6},
                "hash": {"type": "blakeHash"},
                "missingValue": {"sentinel": ""},
            },
        },
        text("sex", 1, 10),
        text("postcode", 2, 10),
    ]
    spec = {
        "version": 3,
        "clkConfig": {
            "l": 1024,
            "kdf": {"type": "HKDF", "hash": "SHA256", "keySize": 64},
        },
        "features": [f for f in features if f["identifier"] in names],
    }
    return clkhash_schema.from_json_dict(spec)


def main() -> None:
    import anonlink
    from clkhash import clk
    from clkhash import schema as clkhash_schema

    folder, secret = Path(sys.argv[1]), sys.argv[2]
    tables = {}
    for side in ("a", "b"):
        with open(folder / f"{side}.csv", newline="") as handle:
            rows = list(csv.reader(handle))
        tables[side] = (rows[0], rows[1:])
    header = tables["a"][0]
    schema = _schema(clkhash_schema, header[1:])
    started = time.perf_counter()
    clks = {
        side: clk.generate_clks([r[1:] for r in rows], schema, secret, validate=False)
        for side, (_, rows) in tables.items()
    }
    encode_time = time.perf_counter() - started
    records = sum(len(rows) for _, rows in tables.values())

    def best_of_three(floor: float) -> tuple[float, Any]:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            found = anonlink.candidate_generation.find_candidate_pairs(
                [clks["a"], clks["b"]], anonlink.similarities.dice_coefficient_accelerated, floor
            )
            times.append(time.perf_counter() - started)
        return min(times), found

    compare_time, candidates = best_of_three(0.5)
    compare_time_08, _ = best_of_three(0.8)
    ids_a = [r[0] for r in tables["a"][1]]
    ids_b = [r[0] for r in tables["b"][1]]
    with open(folder / "truth.csv", newline="") as handle:
        truth = {(r[0], r[1]) for r in list(csv.reader(handle))[1:]}
    scores = np.frombuffer(candidates[0], dtype=candidates[0].typecode)
    codes = [x.typecode for x in (*candidates[1], *candidates[2])]
    columns = [np.frombuffer(x, dtype=x.typecode) for x in (*candidates[1], *candidates[2])]
    best = (0.0, 0.0)
    for step in range(70, 98):
        keep = scores >= step / 100
        parts = [array.array(c, x[keep].tolist()) for c, x in zip(codes, columns, strict=True)]
        subset = (
            array.array(candidates[0].typecode, scores[keep].tolist()),
            tuple(parts[:2]),
            tuple(parts[2:]),
        )
        links = set()
        for group in anonlink.solving.greedy_solve(subset):
            ends = dict(group)
            if 0 in ends and 1 in ends:
                links.add((ids_a[ends[0]], ids_b[ends[1]]))
        hits = len(links & truth)
        f1 = 2 * hits / (len(links) + len(truth)) if links else 0.0
        best = max(best, (f1, step / 100))
    print(
        json.dumps(
            {
                "encode_rate": records / encode_time,
                "comparisons_per_s": len(ids_a) * len(ids_b) / compare_time,
                "comparisons_per_s_08": len(ids_a) * len(ids_b) / compare_time_08,
                "best_f1": best[0],
                "best_threshold": best[1],
            }
        )
    )


if __name__ == "__main__":
    main()
