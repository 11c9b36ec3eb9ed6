"""LocalFederation: ordering, rounds, many parties, failures, timeouts, mismatches, transcript.

Every test runs under both schedulings (each party a thread, or every party a greenlet of one
thread), but those whose subject is what only threads do: a party's timeout passing while
another party computes.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from vfl.federation import (
    Federation,
    FederationAbortedError,
    FederationTimeoutError,
    LocalFederation,
    PartyFailedError,
    PeerGoneError,
    ProtocolMismatchError,
    WireFormatError,
    wire,
)
from vfl.federation.local import SCHEDULINGS, LocalChannel

ONE_SCHEDULING = {
    "test_recv_timeout_names_who_waited_for_what_from_whom": "threads",
    # these choose their schedulings themselves
    "test_both_schedulings_send_the_same_bytes_and_return_the_same_results": "threads",
    "test_a_cooperative_party_may_not_use_its_channel_from_another_thread": "cooperative",
    "test_an_unknown_scheduling_is_refused_naming_the_choices": "threads",
    "test_a_party_that_waited_before_torch_was_loaded_resumes_with_gradients_on": "cooperative",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    name = metafunc.function.__name__
    chosen = [ONE_SCHEDULING[name]] if name in ONE_SCHEDULING else SCHEDULINGS
    metafunc.parametrize("scheduling", chosen, indirect=True)


@pytest.fixture(autouse=True)
def scheduling(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """This module's ``LocalFederation`` runs its parties with ``request.param``."""
    made = functools.partial(LocalFederation, scheduling=request.param)
    monkeypatch.setattr(sys.modules[__name__], "LocalFederation", made)
    return str(request.param)


def party_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("vflink-party-")]


@pytest.fixture(autouse=True)
def no_orphan_threads() -> Any:
    yield
    deadline = time.monotonic() + 2.0
    while party_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert party_threads() == []


def test_results_come_back_by_party() -> None:
    def a(fed: Federation) -> Any:
        fed.send("b", "ping", {"n": 1})
        return fed.recv("b", "pong")

    def b(fed: Federation) -> Any:
        msg = fed.recv("a", "ping")
        fed.send("a", "pong", msg["n"] + 1)
        return (fed.name, fed.peers)

    assert LocalFederation().run({"a": a, "b": b}) == {"a": 2, "b": ("b", ("a",))}


def test_order_is_kept_per_sender_receiver_and_tag() -> None:
    n = 500

    def sender(fed: Federation) -> None:
        for i in range(n):
            fed.send("receiver", "x", i)
            fed.send("receiver", "y", -i)

    def receiver(fed: Federation) -> tuple[list[int], list[int]]:
        ys = [fed.recv("sender", "y") for _ in range(n)]  # read all of one tag first
        xs = [fed.recv("sender", "x") for _ in range(n)]
        return xs, ys

    xs, ys = LocalFederation().run({"sender": sender, "receiver": receiver})["receiver"]
    assert xs == list(range(n))
    assert ys == [-i for i in range(n)]


def test_many_rounds_in_both_directions_with_arrays() -> None:
    rounds = 300
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((32, 8)).astype(np.float32) for _ in range(rounds)]

    def bottom(fed: Federation) -> list[np.ndarray]:
        grads = []
        for r, batch in enumerate(batches):
            fed.send("top", f"act/{r}", batch)
            grads.append(fed.recv("top", f"grad/{r}"))
        return grads

    def top(fed: Federation) -> int:
        for r in range(rounds):
            act = fed.recv("bottom", f"act/{r}")
            fed.send("bottom", f"grad/{r}", act * 2)
        return rounds

    out = LocalFederation().run({"bottom": bottom, "top": top})
    assert out["top"] == rounds
    for got, batch in zip(out["bottom"], batches, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, batch * 2)


def test_five_parties_all_to_all() -> None:
    names = [f"p{i}" for i in range(5)]

    def party(fed: Federation) -> dict[str, Any]:
        fed.broadcast("hello", int(fed.name[1:]))
        got = fed.gather(fed.peers, "hello")
        for peer in fed.peers:  # then pairwise, addressed messages
            fed.send(peer, "pair", f"{fed.name}->{peer}")
        pairs = {peer: fed.recv(peer, "pair") for peer in fed.peers}
        return {"sum": sum(got.values()), "pairs": pairs}

    out = LocalFederation().run({n: party for n in names})
    for i, name in enumerate(names):
        assert out[name]["sum"] == sum(range(5)) - i
        assert out[name]["pairs"] == {p: f"{p}->{name}" for p in names if p != name}


def test_a_failing_party_unblocks_every_other_party_quickly(scheduling: str) -> None:
    # in turns, the others wait before the last party starts; threads meet at a barrier
    entered = threading.Barrier(4) if scheduling == "threads" else None

    def waiter(fed: Federation) -> None:
        if entered:
            entered.wait()
        fed.recv("failing", "never", timeout=60)

    def sender_into_full_channel(fed: Federation) -> None:
        if entered:
            entered.wait()
        while True:  # the receiver never reads: this blocks on backpressure
            fed.send("waiter1", "spam", np.zeros(1000))

    def failing(fed: Federation) -> None:
        if entered:
            entered.wait()
        time.sleep(0.2)
        raise ValueError("bad column 'crp' in party data")

    local = LocalFederation(max_pending_bytes=20_000, timeout=60)
    started = time.monotonic()
    with pytest.raises(PartyFailedError) as info:
        local.run(
            {
                "waiter1": waiter,
                "waiter2": waiter,
                "spammer": sender_into_full_channel,
                "failing": failing,
            }
        )
    elapsed = time.monotonic() - started
    assert elapsed < 1.5
    err = info.value
    assert err.party == "failing"
    assert isinstance(err.error, ValueError) and isinstance(err.__cause__, ValueError)
    assert "party 'failing' failed: ValueError: bad column 'crp'" in str(err)
    assert "in failing" in err.party_traceback  # the traceback of the party's own thread
    assert err.others == {}  # the others were aborted, not failing on their own


def test_aborted_parties_see_why() -> None:
    seen: list[str] = []

    def waiter(fed: Federation) -> None:
        try:
            fed.recv("failing", "x")
        except FederationAbortedError as exc:
            seen.append(str(exc))
            raise

    def failing(fed: Federation) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(PartyFailedError, match="party 'failing' failed: RuntimeError: disk full"):
        LocalFederation().run({"waiter": waiter, "failing": failing})
    assert seen and "party 'waiter' stopped" in seen[0] and "disk full" in seen[0]


def test_a_busy_party_can_check_for_abort() -> None:
    def busy(fed: Federation) -> None:
        assert isinstance(fed, LocalChannel)
        while True:
            time.sleep(0.01)
            fed.check_aborted()

    def failing(fed: Federation) -> None:
        raise KeyError("boom")

    started = time.monotonic()
    with pytest.raises(PartyFailedError, match="KeyError"):
        LocalFederation().run({"busy": busy, "failing": failing})
    assert time.monotonic() - started < 1.5


def test_recv_timeout_names_who_waited_for_what_from_whom() -> None:
    def impatient(fed: Federation) -> None:
        fed.recv("slow", "result/1", timeout=0.2)

    def slow(fed: Federation) -> None:
        fed.send("impatient", "progress", 0.5)
        time.sleep(0.6)

    with pytest.raises(PartyFailedError) as info:
        LocalFederation().run({"impatient": impatient, "slow": slow})
    err = info.value
    assert isinstance(err.error, FederationTimeoutError)
    assert isinstance(err.error, TimeoutError)
    assert "party 'impatient' waited 0.2 s for 'result/1' from 'slow'" in str(err)
    assert "pending from 'slow': ['progress']" in str(err)


def test_tag_mismatch_is_detected_not_delivered() -> None:
    def a(fed: Federation) -> None:
        fed.send("b", "grad/4", np.ones(3))  # out of step
        fed.recv("b", "ack/4")

    def b(fed: Federation) -> None:
        fed.recv("a", "grad/3")
        fed.send("a", "ack/3", True)

    started = time.monotonic()
    with pytest.raises(PartyFailedError) as info:
        LocalFederation(timeout=60).run({"a": a, "b": b})
    assert time.monotonic() - started < 1.0  # detected, not waited out
    assert isinstance(info.value.error, ProtocolMismatchError)
    message = str(info.value)
    assert "'b' waits for 'grad/3' from 'a'; pending from 'a': 'grad/4' x1" in message
    assert "'a' waits for 'ack/4' from 'b'; pending from 'b': nothing" in message


def test_recv_from_a_party_that_finished_fails_at_once() -> None:
    def a(fed: Federation) -> None:
        fed.recv("b", "answer", timeout=60)

    def b(fed: Federation) -> str:
        return "done without answering"

    started = time.monotonic()
    with pytest.raises(PartyFailedError, match="'b' has finished without sending it") as info:
        LocalFederation().run({"a": a, "b": b})
    assert isinstance(info.value.error, PeerGoneError)
    assert time.monotonic() - started < 1.0


def test_transcript_counts_the_encoded_bytes() -> None:
    payloads = [
        None,
        7,
        "text",
        np.arange(12.0).reshape(3, 4),
        {"w": np.zeros(5, np.float32), "n": 3},
    ]

    def a(fed: Federation) -> None:
        for i, payload in enumerate(payloads):
            fed.send("b", f"m/{i}", payload)

    def b(fed: Federation) -> None:
        for i in range(len(payloads)):
            fed.recv("a", f"m/{i}")
        fed.broadcast("bye", b"xy")

    local = LocalFederation(record_payloads=True)
    local.run({"a": a, "b": b, "c": lambda fed: fed.recv("b", "bye")})
    records = local.transcript.records
    assert [r.tag for r in records] == [f"m/{i}" for i in range(len(payloads))] + ["bye", "bye"]
    for record, payload in zip(records, payloads, strict=False):
        assert (record.sender, record.receiver) == ("a", "b")
        assert record.nbytes == len(wire.encode(payload))
        assert record.kind == wire.payload_kind(payload)
        assert wire.encode(record.payload()) == wire.encode(payload)
    assert [(r.sender, r.receiver) for r in records[-2:]] == [("b", "a"), ("b", "c")]
    expected = sum(len(wire.encode(p)) for p in payloads)
    assert local.transcript.total_bytes(sender="a") == expected
    assert local.transcript.total_bytes() == expected + 2 * len(wire.encode(b"xy"))
    frame = local.transcript.to_frame()
    assert list(frame.columns) == ["seq", "sender", "receiver", "tag", "kind", "nbytes", "time"]
    assert frame["nbytes"].sum() == local.transcript.total_bytes()


def test_transcript_without_payloads_refuses_to_decode() -> None:
    local = LocalFederation()
    local.run({"a": lambda fed: fed.send("b", "x", 1), "b": lambda fed: fed.recv("a", "x")})
    with pytest.raises(RuntimeError, match="record_payloads=True"):
        local.transcript.records[0].payload()


def test_gather_tolerates_dropouts_without_waiting_for_the_timeout() -> None:
    n_clients, n_drop = 120, 12
    clients = [f"client{i:03d}" for i in range(n_clients)]
    dropped = set(clients[:n_drop])

    def server(fed: Federation) -> dict[str, Any]:
        fed.broadcast("round/0", np.ones(4))
        replies = fed.gather(clients, "update/0", min_count=n_clients - n_drop, timeout=60)
        fed.broadcast("done", True, to=list(replies))
        return replies

    def client(fed: Federation) -> None:
        model = fed.recv("server", "round/0")
        if fed.name in dropped:
            return  # drops out mid-round
        fed.send("server", "update/0", model * int(fed.name[-3:]))
        fed.recv("server", "done")

    parties: dict[str, Any] = {"server": server} | {c: client for c in clients}
    started = time.monotonic()
    out = LocalFederation().run(parties)
    assert time.monotonic() - started < 20
    replies = out["server"]
    assert set(replies) == set(clients) - dropped
    assert list(replies) == [c for c in clients if c not in dropped]  # in the order asked
    for name, update in replies.items():
        np.testing.assert_array_equal(update, np.ones(4) * int(name[-3:]))


def test_gather_without_min_count_needs_everyone() -> None:
    def server(fed: Federation) -> None:
        fed.gather(["c1", "c2", "c3"], "update", timeout=30)

    def c1(fed: Federation) -> None:
        fed.send("server", "update", 1)

    with pytest.raises(
        PartyFailedError, match=r"gathered 'update' from 1 of 3 senders.*\['c2', 'c3'\]"
    ):
        LocalFederation().run(
            {"server": server, "c1": c1, "c2": lambda fed: None, "c3": lambda fed: None}
        )


def test_backpressure_bounds_the_queued_bytes() -> None:
    message = np.zeros(1000)  # about 8 kB encoded
    reading = threading.Event()

    def producer(fed: Federation) -> bool:
        for _ in range(20):
            fed.send("consumer", "chunk", message)
        return reading.is_set()  # the producer could only finish after the consumer started

    def consumer(fed: Federation) -> int:
        time.sleep(0.3)
        reading.set()
        return sum(int(fed.recv("producer", "chunk").size) for _ in range(20))

    out = LocalFederation(max_pending_bytes=3 * len(wire.encode(message))).run(
        {"producer": producer, "consumer": consumer}
    )
    assert out == {"producer": True, "consumer": 20_000}


def test_a_message_larger_than_the_pending_limit_still_passes() -> None:
    big = np.arange(10_000.0)

    def a(fed: Federation) -> None:
        fed.send("b", "big", big)

    out = LocalFederation(max_pending_bytes=1000).run(
        {"a": a, "b": lambda fed: fed.recv("a", "big")}
    )
    np.testing.assert_array_equal(out["b"], big)


def test_malformed_bytes_from_a_peer_are_refused_naming_the_sender() -> None:
    def rogue(fed: Federation) -> None:
        assert isinstance(fed, LocalChannel)
        fed._send_bytes("victim", "weights", b"\x80\x04not a vflink message")

    def victim(fed: Federation) -> None:
        fed.recv("rogue", "weights")

    with pytest.raises(PartyFailedError) as info:
        LocalFederation().run({"rogue": rogue, "victim": victim})
    assert info.value.party == "victim"
    assert isinstance(info.value.error, WireFormatError)
    assert "party 'victim' refused the 'weights' message from 'rogue'" in str(info.value)


def test_oversized_messages_are_refused_at_the_sender() -> None:
    def a(fed: Federation) -> None:
        fed.send("b", "big", np.zeros(1000))

    with pytest.raises(PartyFailedError, match="above the limit of 500 bytes"):
        LocalFederation(max_message_bytes=500).run({"a": a, "b": lambda fed: fed.recv("a", "big")})


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (
            lambda fed: fed.send("nobody", "x", 1),
            r"cannot send to 'nobody': not a peer.*peers are \['b'\]",
        ),
        (lambda fed: fed.send("a", "x", 1), "cannot send to itself"),
        (lambda fed: fed.recv("b", "has space"), "invalid message tag 'has space'"),
        (lambda fed: fed.send("b", "", 1), "invalid message tag ''"),
        (lambda fed: fed.send("b", "x", {1, 2}), "type builtins.set is not in the wire format"),
        (lambda fed: fed.gather(["b"], "x", min_count=2), "min_count=2 must be between 0 and 1"),
        (lambda fed: fed.recv("b", "x", timeout=-1), "timeout must be >= 0"),
    ],
    ids=["unknown-peer", "self", "tag-space", "tag-empty", "payload-type", "min-count", "timeout"],
)
def test_bad_calls_give_clear_errors(action: Any, match: str) -> None:
    with pytest.raises(PartyFailedError, match=match):
        LocalFederation().run({"a": action, "b": lambda fed: None})


def test_run_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="at least one party"):
        LocalFederation().run({})
    with pytest.raises(TypeError, match="party 'a': expected a callable"):
        LocalFederation().run({"a": 3})  # type: ignore[dict-item]


def test_runs_are_independent() -> None:
    local = LocalFederation()
    local.run({"a": lambda fed: fed.send("b", "x", 1), "b": lambda fed: None})
    first = local.transcript
    out = local.run({"a": lambda fed: fed.send("b", "x", 2), "b": lambda fed: fed.recv("a", "x")})
    assert out["b"] == 2
    assert len(first) == 1 and len(local.transcript) == 1 and local.transcript is not first


def test_a_gather_that_has_min_count_waits_for_its_timeout_not_a_mismatch() -> None:
    def server(fed: Federation) -> list[str]:
        got = fed.gather(["c1", "c2", "c3"], "update/0", min_count=2, timeout=0.5)
        fed.broadcast("round/1", True)
        return sorted(got)

    def quick(fed: Federation) -> None:
        fed.send("server", "update/0", 1)
        fed.recv("server", "round/1")

    def silent(fed: Federation) -> None:  # alive, but waits for the next round
        fed.recv("server", "round/1")

    out = LocalFederation().run({"server": server, "c1": quick, "c2": quick, "c3": silent})
    assert out["server"] == ["c1", "c2"]


def test_a_recv_with_its_own_timeout_may_be_caught() -> None:
    def poller(fed: Federation) -> int:
        tries = 0
        while True:
            tries += 1
            try:
                return int(fed.recv("worker", "result", timeout=0.1)) + tries * 0
            except TimeoutError:
                fed.send("worker", "nudge", tries)

    def worker(fed: Federation) -> None:
        fed.recv("poller", "nudge")  # only answers once nudged
        fed.send("poller", "result", 42)

    assert LocalFederation().run({"poller": poller, "worker": worker})["poller"] == 42


def test_tags_with_a_trailing_newline_are_refused() -> None:
    with pytest.raises(PartyFailedError, match="invalid message tag"):
        LocalFederation().run(
            {"a": lambda fed: fed.send("b", "grad/3\n", 1), "b": lambda fed: None}
        )


# -- cooperative scheduling ---------------------------------------------------------------------


def exchange(fed: Federation) -> list[float]:
    """A split-learning-like exchange: arrays one way, their replies the other, then a gather."""
    peer = "b" if fed.name == "a" else "a"
    seen = []
    for step in range(5):
        if fed.name == "a":
            fed.send(peer, f"emb/{step}", np.arange(6.0).reshape(2, 3) * step)
            seen.append(float(np.sum(fed.recv(peer, f"grad/{step}"))))
        else:
            got = fed.recv(peer, f"emb/{step}")
            fed.send(peer, f"grad/{step}", got * 0.5)
            seen.append(float(np.sum(got)))
    return seen


def test_both_schedulings_send_the_same_bytes_and_return_the_same_results() -> None:
    runs = {}
    for scheduling in SCHEDULINGS:
        local = LocalFederation(scheduling=scheduling, record_payloads=True)  # type: ignore[arg-type]
        out = local.run({"a": exchange, "b": exchange})
        records = local.transcript.records
        runs[scheduling] = (out, [(r.sender, r.receiver, r.tag, r.data) for r in records])
    assert runs["threads"] == runs["cooperative"]
    assert len(runs["threads"][1]) == 10 and all(r[3] for r in runs["threads"][1])


LOADED_MID_RUN = """
import sys
from vfl.federation import LocalFederation
import horizontal.local  # names torch throughout: torch is imported on first use
assert "torch" not in sys.modules
seen = {}

def a(fed):
    fed.recv("b", "x")  # b loads torch and waits with gradients off; a resumes here
    seen["a"] = sys.modules["torch"].is_grad_enabled()
    fed.send("b", "y", 2)

def b(fed):
    torch = horizontal.local.torch
    with torch.no_grad():
        fed.send("a", "x", 1)
        fed.recv("a", "y")
    seen["b"] = torch.is_grad_enabled()

LocalFederation(scheduling="cooperative").run({"a": a, "b": b})
print(seen, sys.modules["torch"].is_grad_enabled())
"""


def test_a_party_that_waited_before_torch_was_loaded_resumes_with_gradients_on(
    scheduling: str,
) -> None:
    """torch is imported on first use (``vfl.extras.optional``): a party that last ran before
    then resumes as a new thread would, with gradients on, whatever mode the party that
    loaded torch left; so does the caller."""
    pytest.importorskip("torch")
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", LOADED_MID_RUN], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["{'a':", "True,", "'b':", "True}", "True"]


def test_cooperative_parties_run_in_the_callers_thread_and_keep_their_own_grad_mode(
    scheduling: str,
) -> None:
    torch = pytest.importorskip("torch")
    seen: dict[str, Any] = {}

    def a(fed: Federation) -> None:
        seen["a thread"] = threading.current_thread()
        with torch.no_grad():
            fed.send("b", "x", 1)
            fed.recv("b", "y")  # b runs here
            seen["a after"] = torch.is_grad_enabled()

    def b(fed: Federation) -> None:
        seen["b before"] = torch.is_grad_enabled()
        fed.recv("a", "x")
        with torch.no_grad():
            fed.send("a", "y", 2)
        seen["b after"] = torch.is_grad_enabled()

    caller, threads = threading.current_thread(), threading.active_count()
    with torch.no_grad():  # a new thread starts with gradients on; so does each party in turn
        LocalFederation(scheduling=scheduling).run({"a": a, "b": b})  # type: ignore[arg-type]
        assert not torch.is_grad_enabled()
    assert seen == {
        "a thread": seen["a thread"],
        "b before": True,
        "a after": False,
        "b after": True,
    }
    assert (seen["a thread"] is caller) == (scheduling == "cooperative")
    assert threading.active_count() == threads


@pytest.mark.parametrize("call", ["recv", "send"])
def test_a_cooperative_party_may_not_use_its_channel_from_another_thread(call: str) -> None:
    def a(fed: Federation) -> Any:
        failures: list[BaseException] = []

        def helper() -> None:
            try:
                fed.recv("b", "x") if call == "recv" else fed.send("b", "x", 1)
            except BaseException as exc:  # carried back to the party
                failures.append(exc)

        thread = threading.Thread(target=helper)
        thread.start()
        thread.join()
        fed.send("b", "done", 1)
        raise failures[0]

    with pytest.raises(PartyFailedError, match=r'outside its own turn.*scheduling="threads"'):
        LocalFederation(scheduling="cooperative").run(
            {"a": a, "b": lambda fed: fed.recv("a", "done")}
        )


def test_an_unknown_scheduling_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="scheduling='fibres'; use one of threads, cooperative"):
        LocalFederation(scheduling="fibres")  # type: ignore[arg-type]


# -- values passed in one process ---------------------------------------------------------------


def test_values_passed_in_process_are_counted_as_their_bytes_and_shared_with_no_one() -> None:
    """Without the payloads kept, a message reaches its receiver as a replica of the payload
    (no bytes made); the transcript counts what the encoded message would be, the same as
    when the bytes pass (``record_payloads=True``)."""

    def server(fed: Federation) -> Any:
        weights = np.arange(6, dtype=np.float32)
        layers = [[np.ones(2)], {"bias": np.zeros(1)}]
        fed.broadcast(
            "task", {"weights": weights, "round": 1, "names": ("a", "b"), "layers": layers}
        )
        weights[:] = -1  # after sending: no receiver may see this
        layers[0][0][:] = -1
        got = fed.gather(["a", "b"], "update")
        return {k: v["delta"].tolist() for k, v in got.items()}

    def client(fed: Federation) -> Any:
        task = fed.recv("server", "task")
        task["weights"] += 1  # a receiver's own copy: the other client's stays as sent
        task["names"].append(fed.name)  # nested lists, dicts and arrays: its own too
        task["layers"][0][0] += 1
        task["layers"][1]["bias"] -= 1
        fed.send("server", "update", {"delta": task["weights"] * 2, "rows": np.int64(40)})
        layers = [task["layers"][0][0].tolist(), task["layers"][1]["bias"].tolist()]
        return task["weights"].tolist(), task["names"], layers

    runs = {}
    for kept in (False, True):
        local = LocalFederation(record_payloads=kept)
        out = local.run({"server": server, "a": client, "b": client})
        sizes = sorted((r.sender, r.receiver, r.tag, r.kind, r.nbytes) for r in local.transcript)
        runs[kept] = (out, sizes)
    assert runs[False] == runs[True]
    out = runs[False][0]
    layers = [[2.0, 2.0], [-1.0]]
    assert out["a"] == ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], ["a", "b", "a"], layers)
    assert out["b"] == ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], ["a", "b", "b"], layers)
    assert out["server"] == {"a": [2.0, 4.0, 6.0, 8.0, 10.0, 12.0], "b": out["server"]["a"]}
    assert len(runs[False][1]) == 4 and all(r[4] > 20 for r in runs[False][1])


def test_a_message_beyond_what_decode_takes_is_refused_by_its_receiver(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(wire, "MAX_ITEMS", 10)

    def receiver(fed: Federation) -> None:
        fed.recv("sender", "many")

    with pytest.raises(
        PartyFailedError, match="'receiver' refused the 'many' message from 'sender'"
    ):
        LocalFederation().run(
            {"sender": lambda fed: fed.send("receiver", "many", [0] * 20), "receiver": receiver}
        )
