"""vflink's Paillier engine against python-paillier (phe) used object by object, in one run.

For 2048-bit keys (the same modulus for both libraries), prints ops/s of phe and of vflink and
their ratio for encrypt, decrypt, add, multiply by a scalar, and ``X.T @ vec`` at 64x30,
1024x24 and 10000x24; vflink with 1 and 2 workers, at default security (obfuscation exponent
of n_length/2 = 1024 bits) and with the short-exponent option (448 bits); and the decryptions
a packed gradient vector needs.

phe's rates come from a slice of each workload (phe is about 20 times slower; a full 10000x24
product would take minutes), measured the obvious way: ``[pk.encrypt(float(v)) for v in x]``,
``sum(c * float(x) ...)``.

Run::

    python benchmarks/paillier.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

# benchmarks/linkage.py would shadow the linkage package: keep this folder off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from vfl.crypto import (  # noqa: E402
    PaillierPublicKey,
    SecurityWarning,
    generate_paillier_keypair,
    matvec,
)
from vfl.crypto.masked import pack_masked  # noqa: E402


def rate(count: int, fn: Callable[[], object], repeats: int = 3) -> float:
    """Operations per second: ``count`` operations per call, best of ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return count / best


def row(name: str, phe_rate: float, ours: dict[str, float]) -> None:
    cells = " ".join(f"{v:12.0f} {v / phe_rate:6.1f}x" for v in ours.values())
    print(f"  {name:<26} {phe_rate:10.0f} {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description="vflink Paillier engine vs phe")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    args = parser.parse_args()
    quick = args.quick
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )

    public, private = generate_paillier_keypair(2048)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        short = PaillierPublicKey(int(public.n), obfuscation_bits=448)
    phe_pk, phe_sk = public.to_phe(), private.to_phe()
    rng = np.random.default_rng(0)
    n_enc = 200 if quick else 1000
    x = rng.standard_normal(n_enc)
    started = time.perf_counter()
    for key in (public, private, short):
        key.encrypt(x[:1])
    print(f"fixed-base tables built in {time.perf_counter() - started:.1f} s (once per key)")
    started = time.perf_counter()
    for key in (public, private, short):  # worker processes build their own tables once
        key.encrypt(x, workers=2)
    print(f"2 worker processes started in {time.perf_counter() - started:.1f} s (once)\n")
    configs = [("1w", 1), ("2w", 2)]
    header = " ".join(f"{'vflink ' + n:>12} {'ratio':>7}" for n, _ in configs)

    print(f"  {'operation (ops/s)':<26} {'phe':>10} {header}")
    phe_enc = rate(40, lambda: [phe_pk.encrypt(float(v)) for v in x[:40]])
    row(
        "encrypt, public key",
        phe_enc,
        {n: rate(n_enc, lambda w=w: public.encrypt(x, workers=w)) for n, w in configs},
    )
    row(
        "encrypt, owner (CRT)",
        phe_enc,
        {n: rate(n_enc, lambda w=w: private.encrypt(x, workers=w)) for n, w in configs},
    )
    row(
        "encrypt, 448-bit exponent",
        phe_enc,
        {n: rate(n_enc, lambda w=w: short.encrypt(x, workers=w)) for n, w in configs},
    )

    enc = public.encrypt(x)
    phe_nums = [phe_pk.encrypt(float(v)) for v in x[:40]]
    row(
        "decrypt",
        rate(40, lambda: [phe_sk.decrypt(c) for c in phe_nums]),
        {n: rate(n_enc, lambda w=w: private.decrypt(enc, workers=w)) for n, w in configs},
    )
    row(
        "add (ciphertext + ciphertext)",
        rate(40, lambda: [a + b for a, b in itertools.pairwise(phe_nums)]) * 39 / 40,
        {n: rate(n_enc, lambda: enc + enc, 3) for n, _ in configs[:1]},
    )
    row(
        "multiply by float scalar",
        rate(40, lambda: [c * 0.37 for c in phe_nums]),
        {n: rate(n_enc, lambda: enc * 0.37, 3) for n, _ in configs[:1]},
    )

    print(f"\n  {'X.T @ vec (terms/s)':<26} {'phe':>10} {header}")
    for n_rows, n_cols in ((64, 30), (1024, 24), (10_000, 24)):
        if quick and n_rows > 1024:
            n_rows = 4000
        X = rng.standard_normal((n_rows, n_cols))
        d = rng.standard_normal(n_rows) * 0.5
        vec = public.encrypt(d, workers=2)
        phe_d = [phe_pk.encrypt(float(v)) for v in d[:60]]

        def phe_matvec(X: np.ndarray = X, phe_d: list[object] = phe_d) -> None:
            for j in range(2):
                acc = phe_d[0] * float(X[0, j])
                for i in range(1, len(phe_d)):
                    acc = acc + phe_d[i] * float(X[i, j])

        phe_rate = rate(2 * len(phe_d), phe_matvec, 1)
        ours = {
            n: rate(X.size, lambda w=w, X=X, vec=vec: matvec(X.T, vec, workers=w))
            for n, w in configs
        }
        error = np.abs(private.decrypt(X.T @ vec) - X.T @ d).max()
        row(f"{n_rows}x{n_cols}", phe_rate, ours)
        print(f"  {'':<26} (max abs error against numpy: {error:.1e})")

    print("\npacked gradient vector (bound 1e3, values at precision 2**-32, kappa 40)")
    grad = rng.standard_normal(240) * 100
    enc_grad = public.encrypt(grad)
    started = time.perf_counter()
    packed, masks = pack_masked(enc_grad, bound=1e3)
    t_pack = time.perf_counter() - started
    started = time.perf_counter()
    slots = private.decrypt_packed(packed, masks.layout)
    t_dec = time.perf_counter() - started
    error = np.abs(masks.unmask(slots) - grad).max()
    t_plain = len(grad) / rate(len(grad), lambda: private.decrypt(enc_grad))
    layout = masks.layout
    print(
        f"  {layout.count} values, {layout.slots} per ciphertext ({layout.slot_bits}-bit slots): "
        f"{layout.n_ciphertexts} decryptions instead of {layout.count} "
        f"({layout.count / layout.n_ciphertexts:.1f}x fewer); pack {t_pack:.2f} s + decrypt "
        f"{t_dec:.2f} s against {t_plain:.2f} s unpacked; max error {error:.1e}"
    )


if __name__ == "__main__":
    main()
