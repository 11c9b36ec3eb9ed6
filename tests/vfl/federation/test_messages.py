"""Typed messages: payloads checked in one place, errors naming the sender and the field;
namespaced tags keep two protocols on one federation apart."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from vfl.federation import LocalFederation
from vfl.federation.messages import Message, MessageError, Namespace
from vfl.federation.wire import CiphertextBlock


@dataclass(frozen=True)
class Step(Message):
    KIND = "test step"
    count: int
    scale: float
    name: str
    values: np.ndarray
    blocks: list[CiphertextBlock]
    sizes: dict[str, int]
    note: str | None = None


def block() -> CiphertextBlock:
    return CiphertextBlock.from_integers(b"f" * 32, [1, 2], [0], width=4)


def good() -> dict[str, object]:
    return {
        "count": 3,
        "scale": 2,
        "name": "x",
        "values": np.arange(3.0),
        "blocks": [block()],
        "sizes": {"a": 1},
    }


def test_a_payload_round_trips_and_ints_are_accepted_as_floats() -> None:
    message = Step.from_payload(good(), "lab")
    assert message.scale == 2.0 and isinstance(message.scale, float)
    assert message.note is None
    again = Step.from_payload(message.to_payload(), "lab")
    assert again.count == 3 and again.blocks[0].integers() == [1, 2]


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"count": "3"}, "count", "must be an integer, got str"),
        ({"count": True}, "count", "must be an integer, got bool"),
        ({"scale": None}, "scale", "must be a number"),
        ({"values": np.array(["a"])}, "values", "has dtype <U1, not numeric"),
        ({"values": [1.0]}, "values", "must be a numeric array"),
        ({"blocks": [b"raw"]}, "blocks", "item 0 must be CiphertextBlock"),
        ({"sizes": {"a": "1"}}, "sizes", "entry 'a' must be an integer"),
        ({"note": 5}, "note", "must be str"),
        ({"extra": 1}, "extra", "is not a field of this message"),
    ],
)
def test_malformed_payloads_are_refused_naming_sender_and_field(
    change: dict[str, object], field: str, problem: str
) -> None:
    payload = {**good(), **change}
    with pytest.raises(
        MessageError,
        match=f"party 'lab' sent a malformed test step message: field '{field}' {problem}",
    ):
        Step.from_payload(payload, "lab")


def test_missing_fields_and_non_dicts_are_refused() -> None:
    payload = good()
    del payload["name"]
    with pytest.raises(MessageError, match="field 'name' is missing"):
        Step.from_payload(payload, "lab")
    with pytest.raises(
        MessageError,
        match="party 'x' sent a malformed test step message: expected a dict of fields, got list",
    ):
        Step.from_payload([1, 2], "x")
    assert issubclass(MessageError, ValueError)


def test_namespaces_keep_two_protocols_apart_on_one_federation() -> None:
    one, two = Namespace("vlr"), Namespace("fedavg")
    assert one.tag("grad", 3) == "vlr/grad/3" and one.child("score").tag("key") == "vlr/score/key"
    with pytest.raises(ValueError, match="lowercase words"):
        Namespace("Bad Name")

    def sender(fed):  # type: ignore[no-untyped-def]
        two.send(fed, "b", "step", Step.from_payload({**good(), "count": 2}, "a"))
        one.send(fed, "b", "step", Step.from_payload({**good(), "count": 1}, "a"))

    def receiver(fed):  # type: ignore[no-untyped-def]
        first = one.recv(fed, "a", "step", Step)  # the other protocol's message waits
        second = two.recv(fed, "a", "step", Step)
        return first.count, second.count

    assert LocalFederation(timeout=10).run({"a": sender, "b": receiver})["b"] == (1, 2)
