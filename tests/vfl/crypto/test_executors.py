"""A party's Paillier work on an executor it already runs: a Dask cluster, or any
concurrent.futures executor (vfl.crypto.parallel)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from vfl.crypto import PaillierPrivateKey, PaillierPublicKey, matvec, parallel

Keys = tuple[PaillierPublicKey, PaillierPrivateKey]

distributed = pytest.importorskip("distributed")  # the dask extra; make installs it

SECRET = "a shared secret of 32 bytes!!"


@pytest.fixture(scope="module")
def cluster_client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture
def client(cluster_client: Any) -> Any:
    """The module's cluster with both its workers up: the tests that kill a worker leave its
    nanny restarting it, which on a loaded machine can outlast the next test's start."""
    cluster_client.wait_for_workers(2, timeout=120)
    return cluster_client


@pytest.mark.slow
def test_dask_gives_the_same_plaintexts_and_products_as_two_workers(
    keypair: Keys, client: Any
) -> None:
    public, private = keypair
    x = np.random.default_rng(0).standard_normal(600)
    on_dask = public.encrypt(x, workers=client)
    np.testing.assert_allclose(private.decrypt(on_dask, workers=client), x, atol=1e-9)
    # matrix @ ciphertexts is deterministic: the same ciphertexts, bit for bit
    X = np.random.default_rng(1).standard_normal((600, 12))
    here = matvec(X.T, on_dask, workers=2)
    there = matvec(X.T, on_dask, workers=client)
    assert here.ciphertexts == there.ciphertexts
    assert here.exponent == there.exponent
    np.testing.assert_allclose(private.decrypt(there), X.T @ x, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_dask_chunks_never_share_their_randomness(keypair: Keys, client: Any) -> None:
    # every chunk of random powers has the same arguments: a pure Dask task would compute
    # one and hand it to all, and equal plaintexts would give equal ciphertexts
    public, private = keypair
    zeros = public.raw_encrypt([0] * 400, workers=client)
    assert len(set(zeros)) == 400
    fresh = public.obfuscators(400, workers=client)
    assert len(set(fresh)) == 400
    vec = public.encrypt(np.ones(300), workers=client)
    again = vec.obfuscate(workers=client)
    assert not set(again.ciphertexts) & set(vec.ciphertexts)
    np.testing.assert_allclose(private.decrypt(again), np.ones(300), atol=1e-9)


@pytest.mark.slow
def test_any_concurrent_futures_executor_works(keypair: Keys) -> None:
    public, private = keypair
    x = np.linspace(-3, 3, 300)
    with ThreadPoolExecutor(max_workers=2) as pool:
        assert parallel.check_workers(pool) == 2
        vec = public.encrypt(x, workers=pool)
        np.testing.assert_allclose(private.decrypt(vec, workers=pool), x, atol=1e-9)
        A = np.random.default_rng(2).standard_normal((20, 300))  # 6,000 terms: split
        assert A.size >= 4096
        on_pool = matvec(A, vec, workers=pool)
        assert on_pool.ciphertexts == matvec(A, vec, workers=1).ciphertexts
        np.testing.assert_allclose(private.decrypt(on_pool), A @ x, atol=1e-4)  # 24-bit rows


def _die_the_first_time(marker: str, value: int) -> int:
    if not os.path.exists(marker):
        Path(marker).write_text("died once")
        os._exit(1)  # the worker process dies mid-task
    return value * 2


def _always_die(value: int) -> int:
    os._exit(1)


@pytest.mark.slow
def test_a_worker_killed_mid_task_is_retried_by_dask(client: Any, tmp_path: Path) -> None:
    marker = str(tmp_path / "died")
    out = parallel.map_processes(_die_the_first_time, [(marker, 1), (marker, 2)], client)
    assert out == [2, 4]
    assert Path(marker).exists()  # a worker did die


@pytest.mark.slow
def test_workers_dying_every_time_fail_with_a_clear_error(client: Any) -> None:
    with pytest.raises(RuntimeError, match="_always_die failed on the executor Client"):
        parallel.map_processes(_always_die, [(1,), (2,)], client)


def test_a_bad_workers_argument_is_named() -> None:
    with pytest.raises(ValueError, match="a positive integer or an executor"):
        parallel.check_workers("two")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a positive integer or an executor"):
        parallel.check_workers(0)
    assert not parallel.is_executor(2) and not parallel.is_executor(None)


@pytest.mark.slow
def test_psi_on_dask_finds_the_same_pairs(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    import linkage.workers
    from linkage import psi_intersection, unbalanced_psi

    monkeypatch.setattr(linkage.workers, "PARALLEL_MIN_POINTS", 10)  # chunks even for 300 IDs
    a = pd.Series([f"ID{i}" for i in range(300)])
    b = pd.Series([f"ID{i}" for i in range(150, 400)])
    here = psi_intersection(a, b, method="ecdh", workers=1)
    there = psi_intersection(a, b, method="ecdh", workers=client)
    assert set(zip(here["a"], here["b"], strict=True)) == set(
        zip(there["a"], there["b"], strict=True)
    )
    assert len(there) == 150
    unbalanced = unbalanced_psi(a, b, workers=client)
    assert len(unbalanced) == 150


@pytest.mark.slow
def test_vertical_lr_on_dask_learns_the_same_model_as_on_two_workers(client: Any) -> None:
    import warnings

    from vfl.crypto import SecurityWarning
    from vfl.datasets import IMAGING_FEATURES, LAB_FEATURES, LABEL, make_lab_imaging_cohort
    from vfl.linear import VerticalLogisticRegression

    lab, imaging, truth = make_lab_imaging_cohort(700, overlap=0.9, random_state=4)
    parts = {
        "imaging": imaging.loc[truth["imaging"], IMAGING_FEATURES].reset_index(drop=True),
        "lab": lab.loc[truth["lab"], LAB_FEATURES].reset_index(drop=True),
    }
    y = imaging.loc[truth["imaging"], LABEL].reset_index(drop=True)
    models = {}
    for protocol in ("coordinator", "shared"):
        for label, workers in (("two", 2), ("dask", client)):
            model = VerticalLogisticRegression(
                protocol=protocol,
                key_bits=1024,
                insecure=True,
                max_iter=2,
                tol=None,
                batch_size=256,
                random_state=0,
                workers=workers,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SecurityWarning)
                model.fit(parts, y, label_party="imaging")
            models[protocol, label] = model.predict_proba(parts)[:, 1]
    # exact gradients: the same model to the last bit; secret shares: up to their rounding
    np.testing.assert_array_equal(models["coordinator", "two"], models["coordinator", "dask"])
    np.testing.assert_allclose(models["shared", "two"], models["shared", "dask"], atol=1e-6)


@pytest.mark.slow
def test_bloom_encoding_on_dask_gives_the_same_bits(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import linkage
    import linkage.workers
    from vfl.datasets import identity_schema, make_lab_imaging_cohort

    monkeypatch.setattr(linkage.workers, "PARALLEL_MIN_POINTS", 100)
    lab, _, _ = make_lab_imaging_cohort(1500, random_state=5)
    lab.loc[lab.index[:7], "date_of_birth"] = "1945-13-45"  # 7 dates that do not parse
    schema = identity_schema()
    here = linkage.encode(lab, schema, secret=SECRET)
    for workers in (2, client):
        with pytest.warns(linkage.InvalidValueWarning, match="7 values of column 'date_of_birth'"):
            there = linkage.encode(lab, schema, secret=SECRET, workers=workers)
        assert (there.words == here.words).all() and (there.index == here.index).all()
        assert (there.block_keys == here.block_keys).all()
        assert there.fingerprint == here.fingerprint and there.invalid == here.invalid


@pytest.mark.slow
def test_all_pairs_comparison_on_dask_gives_the_same_pairs_and_links(client: Any) -> None:
    import linkage
    from linkage.matching import dice_pairs
    from vfl.datasets import identity_schema, make_lab_imaging_cohort

    lab, imaging, truth = make_lab_imaging_cohort(5000, overlap=0.8, random_state=6)
    schema = identity_schema()
    a = linkage.encode(lab, schema, secret=SECRET)
    b = linkage.encode(imaging, schema, secret=SECRET)
    here = dice_pairs(a, b, floor=0.6, chunk=512)
    links = linkage.match(a, b, blocking=None)
    assert linkage.evaluate(links, truth)["f1"] > 0.9  # a real linkage, not an empty one
    with ThreadPoolExecutor(2) as pool:
        for workers in (client, pool):  # several tasks: 5,000 records in chunks of 512
            there = dice_pairs(a, b, floor=0.6, chunk=512, workers=workers)
            for mine, theirs in zip(here, there, strict=True):
                np.testing.assert_array_equal(mine, theirs)
            # the pairs only, screened on each worker from floor 0.7: the same as here
            pairs = dice_pairs(a, b, floor=0.8, chunk=512, backend="numpy", best=False)
            there = dice_pairs(
                a, b, floor=0.8, chunk=512, backend="numpy", best=False, workers=workers
            )
            assert pairs[3] is None and there[3] is None and len(pairs[0]) > 0
            for mine, theirs in zip(pairs[:3], there[:3], strict=True):
                np.testing.assert_array_equal(mine, theirs)
            pd.testing.assert_frame_equal(
                links, linkage.match(a, b, blocking=None, workers=workers)
            )
    with pytest.raises(ValueError, match="workers must be a positive integer or an executor"):
        dice_pairs(a, b, workers=0)


@pytest.mark.slow
def test_lsh_blocking_on_dask_gives_the_same_candidate_pairs(client: Any) -> None:
    import linkage
    from vfl.datasets import identity_schema, make_lab_imaging_cohort

    lab, imaging, truth = make_lab_imaging_cohort(5000, overlap=0.8, random_state=8)
    schema = identity_schema()
    a = linkage.encode(lab, schema, secret=SECRET)
    b = linkage.encode(imaging, schema, secret=SECRET)
    for keep_best in (None, 3):  # groups of bands joined, or scored and pruned, on workers
        lsh = linkage.LshBlocking(random_state=2, band_bits=16, bands=20, keep_best=keep_best)
        here = linkage.block(a, b, lsh, workers=1)
        there = linkage.block(a, b, lsh, workers=client)
        assert here.pair_completeness(a, b, truth) > 0.95  # a real blocking, not an empty one
        np.testing.assert_array_equal(there.ia, here.ia)
        np.testing.assert_array_equal(there.ib, here.ib)
    links = linkage.match(a, b, blocking=lsh, workers=client)
    pd.testing.assert_frame_equal(links, linkage.match(a, b, blocking=lsh, workers=1))


@pytest.mark.slow
def test_rows_held_on_the_cluster_give_the_same_products_and_stay_there(
    keypair: Keys, client: Any
) -> None:
    from vfl.crypto.store import (
        CiphertextStore,
        ClusterCiphertextStore,
        ciphertext_store,
        signed_multiexp_chunks,
    )

    public, secret = keypair
    rng = np.random.default_rng(8)
    x = rng.integers(0, 2**30, size=3000)
    cts = public.raw_encrypt([int(v) for v in x])
    held = ciphertext_store(public, 3000, client)
    assert isinstance(held, ClusterCiphertextStore)
    for lo in range(0, 3000, 700):  # parts as they arrive from a peer
        held.extend(cts[lo : lo + 700])
    assert len(held) == 3000 and held.nbytes == 0  # nothing of the rows in this process
    assert isinstance(ciphertext_store(public, 10, 2), CiphertextStore)
    local = CiphertextStore.of(public, cts)
    rows = rng.permutation(3000)[:1800]  # a batch across every partition
    z = rng.integers(-(2**40), 2**40, size=(1800, 2))
    there = signed_multiexp_chunks(held, rows, z, public.nsquare, client)
    assert there == signed_multiexp_chunks(local, rows, z, public.nsquare, 1)
    expected = [
        int(x[rows].astype(object) @ z[:, k].astype(object)) % int(public.n) for k in (0, 1)
    ]
    assert [int(secret.raw_decrypt([c])[0]) for c in there] == expected
    with pytest.raises(ValueError, match="3001 ciphertexts for a store of 3000"):
        held.extend(cts[:1])
