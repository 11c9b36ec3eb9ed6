"""Record linkage and PSI: speed and quality on the synthetic cohort, beside clkhash + anonlink.

Prints, in one run:

* encoding rate, vflink and clkhash (same fields, q-grams and filter length);
* unblocked Dice comparisons per second, vflink (float32 BLAS screen + exact recount) and
  anonlink (C++ popcount), at floors 0.5 and 0.8;
* precision / recall / F1 at vflink's automatic threshold against the best threshold in
  hindsight, and clkhash + anonlink's best F1;
* the F1 cost of each hardening option (salt, balance, XOR-fold, BLIP);
* 100k x 100k linked end to end (encode both + LSH blocking + compare + match) with pair
  completeness and reduction ratio, and with keyed blocking keys;
* ECDH-PSI time and bytes for 100k x 100k and 1M x 1M, HMAC join for 1M x 1M;
* PSI among 2, 3 and 4 data parties over the in-process federation (``vfl.align``: direct
  for two, the ring with the coordinator's help for more), time and bytes per party.

clkhash and anonlink are run in a subprocess with ``--compare-python`` (a Python that has
them; they pin old versions of their dependencies, so keep them out of vflink's environment),
or with this Python when it can import them; skipped otherwise.

Run::

    python benchmarks/linkage.py [--quick] [--psi-only] [--compare-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# this script shares its name with the linkage package: keep its own folder off the import path
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from linkage import (  # noqa: E402
    EcdhPsiParty,
    KeyBlocking,
    LshBlocking,
    Schema,
    block,
    dice_pairs,
    encode,
    evaluate,
    intersect,
    match,
    normalize_ids,
    psi_intersection,
)
from linkage.matching import _greedy  # noqa: E402
from vfl.datasets import identity_schema, make_lab_imaging_cohort  # noqa: E402

SCHEMA = identity_schema()
COLUMNS = SCHEMA.columns


def best_threshold_f1(a: Any, b: Any, truth: pd.DataFrame) -> tuple[float, float]:
    """The best F1 over thresholds 0.60..0.98 (greedy one-to-one), and that threshold."""
    ia, ib, scores, _ = dice_pairs(a, b, floor=0.6)
    true = set(
        zip(
            a.index.get_indexer(truth.iloc[:, 0]).tolist(),
            b.index.get_indexer(truth.iloc[:, 1]).tolist(),
            strict=True,
        )
    )
    best = (0.0, 0.0)
    for threshold in np.arange(0.60, 0.985, 0.01):
        keep = scores >= threshold
        chosen = _greedy(ia[keep], ib[keep], scores[keep])
        links = set(zip(ia[keep][chosen].tolist(), ib[keep][chosen].tolist(), strict=True))
        hits = len(links & true)
        f1 = 2 * hits / (len(links) + len(true)) if links else 0.0
        best = max(best, (f1, float(threshold)))
    return best


def compare_anonlink(
    python: str, lab: pd.DataFrame, imaging: pd.DataFrame, truth: pd.DataFrame
) -> dict[str, float] | None:
    check = subprocess.run([python, "-c", "import clkhash, anonlink"], capture_output=True)
    if check.returncode:
        return None
    with tempfile.TemporaryDirectory() as folder:
        lab[COLUMNS].fillna("").to_csv(Path(folder) / "a.csv")
        imaging[COLUMNS].fillna("").to_csv(Path(folder) / "b.csv")
        truth.to_csv(Path(folder) / "truth.csv", index=False)
        done = subprocess.run(
            [python, str(HERE / "compare_anonlink.py"), folder, secrets.token_hex(32)],
            capture_output=True,
            text=True,
        )
    if done.returncode:
        print(f"clkhash + anonlink failed:\n{done.stderr[-2000:]}")
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def speed_and_quality(n_patients: int, compare_python: str) -> None:
    secret = secrets.token_bytes(32)
    lab, imaging, truth = make_lab_imaging_cohort(
        n_patients, overlap=0.6, typo_rate=0.2, random_state=0
    )
    print(f"cohort: {len(lab):,} x {len(imaging):,} records, {len(truth):,} true pairs, typo 0.2")
    started = time.perf_counter()
    a, b = encode(lab, SCHEMA, secret=secret), encode(imaging, SCHEMA, secret=secret)
    ours_encode = (len(lab) + len(imaging)) / (time.perf_counter() - started)
    rates = {}
    for floor in (0.5, 0.8):
        started = time.perf_counter()
        dice_pairs(a, b, floor=floor)
        rates[floor] = len(a) * len(b) / (time.perf_counter() - started)
    started = time.perf_counter()
    links = match(a, b, blocking=None)
    match_time = time.perf_counter() - started
    auto = evaluate(links, truth)
    best_f1, best_t = best_threshold_f1(a, b, truth)
    theirs = compare_anonlink(compare_python, lab, imaging, truth)
    print(f"{'':34}{'vflink':>14}{'clkhash+anonlink':>20}{'ratio':>8}")

    def row(what: str, ours: float, other: float | None, unit: str) -> None:
        other_text = f"{other:>20,.0f}" if other is not None else f"{'not installed':>20}"
        ratio = f"{ours / other:>7.1f}x" if other else ""
        print(f"{what:<34}{ours:>14,.0f}{other_text}{ratio} {unit}")

    row("encode", ours_encode, theirs and theirs["encode_rate"], "records/s")
    row("Dice, all pairs, floor 0.5", rates[0.5], theirs and theirs["comparisons_per_s"], "pairs/s")
    row(
        "Dice, all pairs, floor 0.8",
        rates[0.8],
        theirs and theirs["comparisons_per_s_08"],
        "pairs/s",
    )
    print(
        f"match (all pairs): {match_time:.1f} s; automatic threshold "
        f"{links.attrs['threshold']:.3f}: precision {auto['precision']:.4f} recall "
        f"{auto['recall']:.4f} F1 {auto['f1']:.4f}; best threshold {best_t:.2f}: F1 "
        f"{best_f1:.4f} (gap {best_f1 - auto['f1']:.4f})"
        + (
            f"; clkhash+anonlink best F1 {theirs['best_f1']:.4f} at {theirs['best_threshold']:.2f}"
            if theirs
            else ""
        )
    )


def automatic_threshold_gaps(n_patients: int) -> None:
    secret = secrets.token_bytes(32)
    print("\nautomatic threshold against the best in hindsight (all pairs, greedy):")
    for typo in (0.1, 0.2, 0.3, 0.4):
        lab, imaging, truth = make_lab_imaging_cohort(
            n_patients, overlap=0.6, typo_rate=typo, random_state=1
        )
        a, b = encode(lab, SCHEMA, secret=secret), encode(imaging, SCHEMA, secret=secret)
        links = match(a, b, blocking=None)
        f1 = evaluate(links, truth)["f1"]
        best_f1, best_t = best_threshold_f1(a, b, truth)
        print(
            f"  typo {typo:.1f}: auto {links.attrs['threshold']:.3f} F1 {f1:.4f}; "
            f"best {best_t:.2f} F1 {best_f1:.4f}; gap {best_f1 - f1:.4f}"
        )


def hardening_costs(n_patients: int) -> None:
    secret = secrets.token_bytes(32)
    lab, imaging, truth = make_lab_imaging_cohort(
        n_patients, overlap=0.6, typo_rate=0.2, random_state=2
    )
    print(f"\nhardening on {len(lab):,} x {len(imaging):,} (F1 at the automatic / best threshold):")
    options: dict[str, dict[str, Any]] = {
        "none": {},
        "salt date_of_birth:year": {"salt": "date_of_birth:year"},
        "balance": {"balance": True},
        "xor_fold": {"xor_fold": True},
        "BLIP epsilon 4": {"blip_epsilon": 4.0},
        "BLIP epsilon 2": {"blip_epsilon": 2.0},
    }
    base = None
    for name, option in options.items():
        schema = Schema(SCHEMA.fields, **option)
        a, b = encode(lab, schema, secret=secret), encode(imaging, schema, secret=secret)
        auto = evaluate(match(a, b, blocking=None), truth)["f1"]
        best_f1, _ = best_threshold_f1(a, b, truth)
        base = best_f1 if base is None else base
        print(
            f"  {name:<24} {a.bits:>5} bits  F1 auto {auto:.4f}  best {best_f1:.4f}  "
            f"cost {base - best_f1:+.4f}"
        )


def blocked_end_to_end(n_patients: int) -> None:
    secret = secrets.token_bytes(32)
    keyed = Schema(
        SCHEMA.fields,
        blocking_keys=[
            ["surname:soundex", "date_of_birth:year"],
            ["given_name:soundex", "date_of_birth"],
            ["surname:prefix2", "postcode"],
        ],
    )
    lab, imaging, truth = make_lab_imaging_cohort(
        n_patients, overlap=0.6, typo_rate=0.2, random_state=3
    )
    print(f"\nend to end, {len(lab):,} x {len(imaging):,} records ({len(truth):,} true pairs):")
    for name, schema, blocking in (
        ("LSH (defaults)", SCHEMA, LshBlocking()),
        ("keyed blocking keys", keyed, KeyBlocking()),
    ):
        started = time.perf_counter()
        a, b = encode(lab, schema, secret=secret), encode(imaging, schema, secret=secret)
        encoded = time.perf_counter()
        links = match(a, b, blocking=blocking)
        total = time.perf_counter() - started
        quality = evaluate(links, truth)
        candidates = block(a, b, blocking)
        print(
            f"  {name:<20} {total:5.1f} s (encode {encoded - started:.1f} s, block + compare + "
            f"match {total - (encoded - started):.1f} s); {links.attrs['blocking']}, "
            f"{links.attrs['compared']:,} pairs compared, reduction ratio "
            f"{links.attrs['reduction_ratio']:.5f}, pair completeness "
            f"{candidates.pair_completeness(a, b, truth):.4f}; threshold "
            f"{links.attrs['threshold']:.3f}: P {quality['precision']:.4f} "
            f"R {quality['recall']:.4f} F1 {quality['f1']:.4f}"
        )


def psi(quick: bool) -> None:
    print(
        "\nPSI on exact IDs: each party's own compute (its steps only; in a deployment the two "
        "parties run at once, on their own machines) and the one-process simulation total:"
    )
    sizes = [(10_000, 10_000), (1_000, 100_000)] if quick else [(100_000, 100_000)]
    if not quick:
        sizes += [(1_000, 1_000_000), (1_000_000, 1_000_000)]
    for n_a, n_b in sizes:
        ids_a = normalize_ids(f"P{i:09d}" for i in range(n_a))
        ids_b = normalize_ids(f"P{i:09d}" for i in range(n_a // 2, n_a // 2 + n_b))
        party_a, party_b = EcdhPsiParty(), EcdhPsiParty()
        clock = {"a": 0.0, "b": 0.0}

        def timed(who: str, step: Any, *args: Any, clock: dict[str, float] = clock) -> Any:
            started = time.perf_counter()
            out = step(*args)
            clock[who] += time.perf_counter() - started
            return out

        blinded_a = timed("a", party_a.blind, ids_a)
        blinded_b = timed("b", party_b.blind, ids_b)
        double_a = timed("b", party_b.reblind, blinded_a)
        double_b = timed("a", party_a.reblind, blinded_b)
        pairs_a = timed("a", intersect, double_a, double_b)
        timed("b", intersect, double_b, double_a)
        sent = 32 * (n_a + n_b)  # each party: its own blinded points + the re-blinded other ones
        print(
            f"  ECDH {n_a:>9,} x {n_b:>9,}: party a {clock['a']:6.1f} s, party b "
            f"{clock['b']:6.1f} s, one-process total {clock['a'] + clock['b']:6.1f} s; "
            f"{len(pairs_a):,} common; each party sends {sent / 1e6:.1f} MB"
        )
    n = 10_000 if quick else 1_000_000
    ids_a = [f"P{i:09d}" for i in range(n)]
    ids_b = [f"P{i:09d}" for i in range(n // 2, n // 2 + n)]
    started = time.perf_counter()
    pairs = psi_intersection(ids_a, ids_b, method="hmac")
    print(
        f"  HMAC {n:>9,} x {n:>9,}: {time.perf_counter() - started:6.1f} s for both parties "
        f"(normalise + HMAC + join), {len(pairs):,} common; each party sends "
        f"{32 * n / 1e6:.1f} MB"
    )


def psi_parties(quick: bool) -> None:
    """K-party PSI end to end in one process (every party a thread, the machine's cores
    shared), against two parties on the same sets."""
    from vfl.federation import LocalFederation

    n = 5_000 if quick else 30_000
    print(
        f"\nPSI among K data parties over the in-process federation, {n:,} IDs each "
        "(consecutive parties overlap by 80%; all parties' compute on this machine):"
    )
    for k in (2, 3, 4):
        frames = {
            f"p{j}": pd.DataFrame({"id": [f"P{i:09d}" for i in range(j * n // 5, j * n // 5 + n)]})
            for j in range(k)
        }
        federation = LocalFederation()
        started = time.perf_counter()
        out = federation.run(align_roles(frames))
        seconds = time.perf_counter() - started
        common = len(out["p0"])
        sent = {
            p: sum(r.nbytes for r in federation.transcript.records if r.sender == p)
            for p in [*frames, "coordinator"]
        }
        print(
            f"  K={k}: {seconds:6.1f} s, {common:,} common; MB sent per data party "
            f"{max(sent[p] for p in frames) / 1e6:.1f}, by the helper "
            f"{sent['coordinator'] / 1e6:.2f}"
        )


def align_roles(frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    from vfl.alignment import align_party

    parties = list(frames)
    roles: dict[str, Any] = {
        p: (lambda fed, p=p: align_party(fed, frames[p], id_column="id", parties=parties))
        for p in parties
    }
    if len(parties) > 2:
        roles["coordinator"] = lambda fed: align_party(fed, None, parties=parties)
    return roles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    parser.add_argument(
        "--compare-python", default=sys.executable, help="a Python with clkhash and anonlink"
    )
    parser.add_argument("--psi-only", action="store_true", help="only the PSI figures")
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    if args.psi_only:
        psi_parties(args.quick)
        psi(args.quick)
        return
    speed_and_quality(5_000 if args.quick else 12_000, args.compare_python)
    automatic_threshold_gaps(3_000 if args.quick else 10_000)
    hardening_costs(2_000 if args.quick else 6_000)
    blocked_end_to_end(25_000 if args.quick else 125_000)
    psi(args.quick)
    psi_parties(args.quick)


if __name__ == "__main__":
    main()
