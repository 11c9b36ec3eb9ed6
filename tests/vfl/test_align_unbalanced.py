"""Unbalanced PSI over a federation (``vfl.align_unbalanced``): the same common rows as the
in-process protocol, ECDH PSI and a plain intersection; what crosses; the server's caps
across a job and across jobs; malformed points, positions and sets refused by name; the
probe check; the ``[job.unbalanced]`` table; and real ``vflink party`` processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from linkage import QueryLimitError, UnbalancedPsiClient, UnbalancedPsiServer, unbalanced_psi
from linkage.unbalanced import OprfCheckError
from tests.parties import kill_left, start, write_config
from vfl import align
from vfl.align_unbalanced import (
    OfflineChunk,
    OprfKey,
    align_unbalanced,
    align_unbalanced_party,
    query_unbalanced_psi,
)
from vfl.alignment import ALIGN, PsiPoints, RowPositions
from vfl.app.plan import job_table
from vfl.federation import Federation, LocalFederation
from vfl.federation.base import PartyFailedError
from vfl.federation.config import FederationConfig

PARTIES = ["registry", "clinic"]


def frames(
    n_large: int = 1_500, n_small: int = 200, n_common: int = 80, seed: int = 0
) -> dict[str, pd.DataFrame]:
    """A registry and a clinic sharing ``n_common`` IDs, each table in its own order."""
    rng = np.random.default_rng(seed)
    pool = [
        f"P{v:08d}" for v in rng.choice(10**8, size=n_large + n_small - n_common, replace=False)
    ]
    large = pool[:n_large]
    small = pool[:n_common] + pool[n_large:]
    rng.shuffle(small)
    return {
        "registry": pd.DataFrame({"pid": large, "age": rng.integers(20, 90, n_large)}),
        "clinic": pd.DataFrame({"pid": small, "crp": rng.normal(size=n_small)}),
    }


def roles(
    data: dict[str, pd.DataFrame], client: Callable[[Federation], Any] | None = None, **server: Any
) -> dict[str, Callable[[Federation], Any]]:
    """The server's role from ``align_unbalanced_party`` (its caps in ``server``), the client's
    the same or the deviating ``client`` given."""
    server.setdefault("max_evaluations", 10_000)
    out: dict[str, Callable[[Federation], Any]] = {
        "registry": lambda fed: align_unbalanced_party(
            fed, data["registry"], server="registry", parties=PARTIES, id_column="pid", **server
        ),
        "clinic": client
        or (
            lambda fed: align_unbalanced_party(
                fed, data["clinic"], server="registry", parties=PARTIES, id_column="pid"
            )
        ),
    }
    return out


def test_the_same_common_rows_as_in_process_ecdh_and_a_plain_intersection() -> None:
    data = frames()
    out = align_unbalanced(data, server="registry", id_column="pid", workers=1)
    registry, clinic = out["registry"], out["clinic"]
    plain = set(data["registry"]["pid"]) & set(data["clinic"]["pid"])
    assert len(plain) == 80 and set(clinic["pid"]) == plain
    assert (registry["pid"].to_numpy() == clinic["pid"].to_numpy()).all()  # one order, paired
    assert clinic.index.equals(pd.RangeIndex(80, name="common_row"))
    in_process = unbalanced_psi(data["clinic"]["pid"], data["registry"]["pid"], workers=1)
    assert set(zip(in_process["a"], in_process["b"], strict=True)) == set(
        zip(clinic.attrs["source_rows"], registry.attrs["source_rows"], strict=True)
    )
    # the same common order as two-party ECDH PSI: the same function of the common IDs
    ecdh = align(data, method="psi", id_column="pid")
    pd.testing.assert_frame_equal(ecdh["clinic"], clinic)
    pd.testing.assert_frame_equal(ecdh["registry"], registry)
    keyed = align_unbalanced(data, server="registry", id_column="pid", order_key="k", workers=1)
    assert set(keyed["clinic"]["pid"]) == plain and not keyed["clinic"]["pid"].equals(clinic["pid"])


def test_what_crosses_is_typed_points_the_offline_set_and_matched_positions() -> None:
    data = frames()
    federation = LocalFederation(record_payloads=True)
    federation.run(roles(data, max_evaluations=232))
    records = federation.transcript.records
    steps = [(r.sender, r.tag) for r in records]
    assert steps[0] == ("registry", "align/upsi-key")  # the clinic waits for the key
    assert sorted(steps) == [
        ("clinic", "align/upsi-query"),
        ("clinic", "align/upsi-rows"),
        ("registry", "align/upsi-answer"),
        ("registry", "align/upsi-key"),
        ("registry", "align/upsi-set/0"),
    ]
    payloads = {r.tag: r.payload() for r in records}
    key = OprfKey.from_payload(payloads["align/upsi-key"], "registry")
    assert (key.size, key.digest_bytes, key.allowance) == (1_500, 12, 232)
    assert len(payloads["align/upsi-set/0"]["digests"]) == 12 * 1_500
    # the clinic's 200 IDs and 32 probes, 32 bytes each way
    assert len(payloads["align/upsi-query"]["points"]) == 32 * 232
    assert len(payloads["align/upsi-answer"]["points"]) == 32 * 232
    rows = payloads["align/upsi-rows"]["rows"]
    assert rows.dtype == np.int64 and len(rows) == 80 and (np.diff(rows) > 0).all()
    # no ID, in any form a party could read, crosses
    ids = [*data["registry"]["pid"], *data["clinic"]["pid"]]
    blob = b"".join(r.data or b"" for r in records)
    assert not any(i.encode() in blob for i in ids[::37])


def test_a_client_past_its_cap_is_refused_by_name_across_the_job_and_jobs(tmp_path: Path) -> None:
    data = frames()
    # an honest client sees its allowance and stops before sending anything
    with pytest.raises(PartyFailedError, match=r"allows this party 100 more OPRF evaluations"):
        LocalFederation().run(roles(data, max_evaluations=100))

    def greedy(fed: Federation) -> None:  # ignores the allowance and asks anyway
        ALIGN.recv(fed, "registry", "upsi-key", OprfKey)
        points = UnbalancedPsiClient(workers=1).blind(data["clinic"]["pid"])
        ALIGN.send(fed, "registry", "upsi-query", PsiPoints(b"".join(points)))
        fed.recv("registry", "align/upsi-answer")

    with pytest.raises(PartyFailedError) as failed:
        LocalFederation().run(roles(data, greedy, max_evaluations=100))
    assert failed.value.party == "registry" and isinstance(failed.value.error, QueryLimitError)
    assert "client 'clinic' asked for 200 OPRF evaluations" in str(failed.value)
    # with a ledger, the cap spans jobs: the first alignment spends it, the second is refused
    ledger = tmp_path / "upsi.json"
    LocalFederation().run(roles(data, max_evaluations=300, ledger=ledger))
    assert UnbalancedPsiServer(ledger=ledger).answered("clinic") == (1, 232)
    with pytest.raises(PartyFailedError, match="allows this party 68 more"):
        LocalFederation().run(roles(data, max_evaluations=300, ledger=ledger))
    with pytest.raises(
        PartyFailedError, match=r"client 'clinic': this server has answered its max"
    ):
        LocalFederation().run(roles(data, greedy, max_queries=1, ledger=ledger))


def deviating_client(data: dict[str, pd.DataFrame], points: bytes | None, rows: Any = None) -> Any:
    """A client that sends ``points`` (when given) instead of its blinded IDs, or ``rows``
    instead of the positions it matched."""

    def client(fed: Federation) -> None:
        if points is not None:
            ALIGN.recv(fed, "registry", "upsi-key", OprfKey)
            ALIGN.send(fed, "registry", "upsi-query", PsiPoints(points))
            fed.recv("registry", "align/upsi-answer")
            return
        ALIGN.recv(fed, "registry", "upsi-key", OprfKey)
        blinded = UnbalancedPsiClient(workers=1).blind(["A", "B", "C"])
        ALIGN.send(fed, "registry", "upsi-query", PsiPoints(b"".join(blinded)))
        ALIGN.send(fed, "registry", "upsi-rows", RowPositions(np.asarray(rows, dtype=np.int64)))

    return client


@pytest.mark.parametrize(
    ("points", "rows", "message"),
    [
        (b"\xff" * 64, None, "client 'clinic''s query: the point at position 0 is not the x-coord"),
        (
            b"\x00" * 31,
            None,
            "'clinic' sent a malformed PSI points message: field 'points' holds 31",
        ),
        (None, [0, 0], "'clinic' sent a malformed row positions message: field 'rows' repeat"),
        (None, [5_000], "'clinic' sent a malformed row positions message: field 'rows' are out"),
        (None, [0, 1, 2, 3], "field 'rows' name 4 matches for 3 points"),
    ],
    ids=["off-curve", "short", "repeated", "out-of-range", "too-many"],
)
def test_malformed_points_and_positions_are_refused_naming_the_client(
    points: bytes | None, rows: Any, message: str
) -> None:
    data = frames(n_large=300, n_small=20, n_common=5)
    with pytest.raises(PartyFailedError, match=message) as failed:
        LocalFederation().run(roles(data, deviating_client(data, points, rows)))
    assert failed.value.party == "registry"


def test_a_server_that_answers_with_another_key_is_caught_by_the_probes() -> None:
    data = frames(n_large=300, n_small=20, n_common=5)

    def two_keys(fed: Federation) -> None:  # commits to one key, answers with another
        committed, used = UnbalancedPsiServer(workers=1), UnbalancedPsiServer(workers=1)
        ids = list(data["registry"]["pid"])
        ALIGN.send(fed, "clinic", "upsi-key", OprfKey(committed.public_key, 12, len(ids), 2**22))
        ALIGN.send(
            fed, "clinic", "upsi-set", OfflineChunk(committed.prepare(ids).digests.tobytes()), 0
        )
        points = ALIGN.recv(fed, "clinic", "upsi-query", PsiPoints).split("clinic")
        ALIGN.send(fed, "clinic", "upsi-answer", PsiPoints(b"".join(used.evaluate(points))))

    client = {
        "clinic": lambda fed: query_unbalanced_psi(
            fed, list(data["clinic"]["pid"]), server="registry"
        )
    }
    with pytest.raises(PartyFailedError) as failed:
        LocalFederation().run({"registry": two_keys, **client})
    assert failed.value.party == "clinic" and isinstance(failed.value.error, OprfCheckError)
    assert "party 'registry' (the unbalanced PSI server): the server answered 32 of the 32" in str(
        failed.value
    )

    def unsorted(fed: Federation) -> None:
        server = UnbalancedPsiServer(workers=1)
        digests = server.prepare(["A", "B", "C"]).digests[::-1].tobytes()
        ALIGN.send(fed, "clinic", "upsi-key", OprfKey(server.public_key, 12, 3, 2**22))
        ALIGN.send(fed, "clinic", "upsi-set", OfflineChunk(digests), 0)
        fed.recv("clinic", "align/upsi-query")

    with pytest.raises(PartyFailedError, match="'registry' sent a malformed offline set chunk"):
        LocalFederation().run({"registry": unsorted, **client})

    def bad_key(fed: Federation) -> None:
        ALIGN.send(fed, "clinic", "upsi-key", OprfKey(b"\x02" + b"\xff" * 32, 12, 3, 2**22))

    with pytest.raises(PartyFailedError, match="field 'public_key' is not a P-256 public key"):
        LocalFederation().run({"registry": bad_key, **client})


def test_argument_errors_are_named_before_any_message() -> None:
    data = frames(n_large=50, n_small=10, n_common=3)
    with pytest.raises(ValueError, match="server='hospital' must name one of the two"):
        align_unbalanced(data, server="hospital", id_column="pid")
    with pytest.raises(ValueError, match="exactly two parties"):
        align_unbalanced({"registry": data["registry"]}, server="registry", id_column="pid")
    with pytest.raises(ValueError, match="'clinic': unbalanced PSI needs its id_column"):
        align_unbalanced(
            {**data, "clinic": data["clinic"].rename(columns={"pid": "id"})},
            server="registry",
            id_column="pid",
        )
    no_cap = roles(data)
    no_cap["registry"] = lambda fed: align_unbalanced_party(
        fed, data["registry"], server="registry", parties=PARTIES, id_column="pid"
    )
    with pytest.raises(PartyFailedError, match="cap what the client may test"):
        LocalFederation().run(no_cap)
    with pytest.raises(ValueError, match="unbalanced PSI, a small set against a large one"):
        align(data, method="unbalanced", id_column="pid")


JOB = '[job]\nid_column = "pid"\nlabel_column = "y"\nalign = "unbalanced"\n'
TABLE = '[job.unbalanced]\nserver = "registry"\nmax_evaluations = 500\n'


def config_of(tmp_path: Path, text: str, *, coordinator: bool = False) -> FederationConfig:
    (tmp_path / "ca.pem").write_text("x")
    parties = "".join(
        f'[[party]]\nname = "{n}"\nrole = "{r}"\naddress = "127.0.0.1:{5000 + k}"\n'
        for k, (n, r) in enumerate(
            [("registry", "passive"), ("clinic", "active")]
            + ([("coordinator", "coordinator")] if coordinator else [])
        )
    )
    path = tmp_path / "federation.toml"
    path.write_text('[federation]\nca = "ca.pem"\n' + parties + text)
    return FederationConfig.load(path)


def test_the_job_table_names_every_mistake_of_the_unbalanced_option(tmp_path: Path) -> None:
    job = job_table(config_of(tmp_path, JOB + TABLE + 'ledger = "upsi.json"\n'))
    assert job["unbalanced"] == {
        "server": "registry",
        "max_evaluations": 500,
        "max_queries": None,
        "ledger": tmp_path / "upsi.json",
        "probes": 32,
    }
    cases = {
        JOB: r'align = "unbalanced" needs a \[job.unbalanced\] table with server',
        JOB + TABLE + "cap = 3\n": r"unknown keys \['cap'\]",
        JOB
        + TABLE.replace(
            '"registry"', '"hospital"'
        ): "server must name the data party .* 'hospital'",
        JOB + TABLE.replace("500", "0"): "max_evaluations must be a positive integer",
        JOB + TABLE.replace("max_evaluations = 500\n", ""): "max_evaluations must be a positive",
        JOB + TABLE + "probes = -1\n": "probes must be a non-negative integer",
        JOB + TABLE + "max_queries = 1.5\n": "max_queries must be a positive integer, got 1.5",
        JOB.replace("unbalanced", "psi") + TABLE: r"\[job\].unbalanced is read only with align",
        JOB.replace("unbalanced", "ecdh"): "align must be one of 'psi', 'bloom', 'unbalanced'",
        JOB + 'model = "transfer"\n' + TABLE: "a transfer job aligns by",
    }
    for text, message in cases.items():
        with pytest.raises(ValueError, match=message):
            job_table(config_of(tmp_path, text))
    third = '[[party]]\nname = "genomics"\nrole = "passive"\naddress = "127.0.0.1:5009"\n'
    with pytest.raises(ValueError, match="exactly two data parties; the config has"):
        job_table(config_of(tmp_path, third + JOB + TABLE))


@pytest.mark.network
def test_vflink_party_processes_align_by_unbalanced_psi(tmp_path: Path) -> None:
    """Three ``vflink party`` processes: the lab serves its set, the imaging centre queries it
    (the coordinator takes part in training only); the lab's ledger counts what it answered."""
    config = write_config(tmp_path, max_iter=2)
    text = config.read_text().replace(
        "test_fraction = 0.3\n", 'test_fraction = 0.3\nalign = "unbalanced"\n', 1
    )
    config.write_text(
        text + '\n[job.unbalanced]\nserver = "lab"\nmax_evaluations = 1000\n'
        'ledger = "upsi_ledger.json"\n'
    )
    procs = {n: start(tmp_path, config, n) for n in ("coordinator", "lab", "imaging")}
    try:
        for name, proc in procs.items():
            assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    finally:
        kill_left(procs)
    lab = pd.read_csv(tmp_path / "data" / "lab.csv")
    imaging = pd.read_csv(tmp_path / "data" / "imaging.csv")
    aligned = {
        n: pd.read_csv(tmp_path / "out" / n / f"aligned_{n}.csv")["patient_id"].tolist()
        for n in ("lab", "imaging")
    }
    assert aligned["lab"] == aligned["imaging"]
    assert set(aligned["lab"]) == set(lab["patient_id"]) & set(imaging["patient_id"])
    assert "unbalanced PSI server" in (tmp_path / "lab.log").read_text()
    assert "test AUC" in (tmp_path / "imaging.log").read_text()
    # the lab's ledger kept the imaging centre's evaluations: its IDs and its 32 probes
    spent = UnbalancedPsiServer(ledger=tmp_path / "upsi_ledger.json").answered("imaging")
    assert spent == (1, len(imaging) + 32)
