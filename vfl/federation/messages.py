"""Typed messages and namespaced tags: what crosses a channel, checked in one place.

A protocol step sends a small frozen dataclass (a :class:`Message`), never an ad-hoc dict. The
dataclass's field annotations are its schema: :meth:`Message.to_payload` turns it into a wire
payload (a dict of the wire format's types) and :meth:`Message.from_payload` checks a received
payload against the annotations -- missing, unknown or mistyped fields raise
:class:`MessageError` naming the sender, the message and the field. Semantic checks that need
context (a share's length against the batch) stay in the protocol, raised through
:meth:`Message.refuse` so that they read the same.

Field types understood: ``int`` (not bool), ``float`` (ints accepted), ``bool``, ``str``,
``bytes``, ``np.ndarray`` (numeric, any shape), :class:`~vfl.federation.wire.CiphertextBlock`,
``list[X]`` and ``dict[str, X]`` of these, and ``X | None``.

Tags are namespaced by protocol (``"vlr/grad"``, ``"align/psi"``, ``"fedavg/update"``), so two
protocols can share one federation without their messages crossing; a :class:`Namespace`
builds them, with an optional round index (``"vlr/rows/3"``)::

    VLR = Namespace("vlr")
    VLR.send(fed, "lab", "key", PublicKey(n=...))
    key = VLR.recv(fed, "coordinator", "key", PublicKey)
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin

import numpy as np

from vfl.federation.wire import CiphertextBlock

if typing.TYPE_CHECKING:
    from vfl.federation.base import Federation

__all__ = ["Message", "MessageError", "Namespace"]

M = TypeVar("M", bound="Message")

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


class MessageError(ValueError):
    """A received message is malformed; the text names the sender, the message and the field."""


class Message:
    """Base of every typed message: subclass it as a frozen dataclass.

    ``KIND`` (a class attribute) names the message in errors; it defaults to the class name.
    """

    KIND: ClassVar[str] = ""

    @classmethod
    def kind(cls) -> str:
        return cls.KIND or cls.__name__

    def to_payload(self) -> dict[str, Any]:
        """The wire payload: ``{field: value}``."""
        return {name: getattr(self, name) for name in _fields(type(self))}

    @classmethod
    def from_payload(cls: type[M], payload: Any, sender: str) -> M:
        """Check ``payload`` against the fields' annotations and build the message.

        Raises
        ------
        MessageError
            Not a dict, a field missing, unknown, or of the wrong type; the text names
            ``sender``, the message and the field.
        """
        if not isinstance(payload, dict):
            raise MessageError(
                f"party {sender!r} sent a malformed {cls.kind()} message: expected a dict of "
                f"fields, got {type(payload).__name__}"
            )
        hints = _hints(cls)
        fields = _fields(cls)
        unknown = sorted(str(k) for k in payload if k not in fields)
        if unknown:
            cls.refuse(sender, unknown[0], "is not a field of this message")
        values = {}
        for name, f in fields.items():
            if name not in payload:
                if f.default is not dataclasses.MISSING:
                    continue
                cls.refuse(sender, name, "is missing")
            problem = _check(payload[name], hints[name])
            if problem:
                cls.refuse(sender, name, problem)
            values[name] = _convert(payload[name], hints[name])
        return cls(**values)

    @classmethod
    def refuse(cls, sender: str, field: str, problem: str) -> typing.NoReturn:
        """Raise the :class:`MessageError` for ``field`` of a message from ``sender``."""
        raise MessageError(
            f"party {sender!r} sent a malformed {cls.kind()} message: field {field!r} {problem}"
        )


_HINTS: dict[type, dict[str, Any]] = {}
_FIELDS: dict[type, dict[str, dataclasses.Field[Any]]] = {}


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    if cls not in _FIELDS:
        _FIELDS[cls] = {f.name: f for f in dataclasses.fields(cls)}
    return _FIELDS[cls]


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:  # each class's annotations resolve in its own module
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(value: Any) -> str:
    return type(value).__name__


def _check(value: Any, hint: Any) -> str | None:
    """None when ``value`` fits ``hint``, else what is wrong."""
    return _checker(hint)(value)


Checker = Callable[[Any], "str | None"]


@functools.cache
def _checker(hint: Any) -> Checker:
    """The check of one field type, built once per type (a message's fields are checked at
    every receipt)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        optional = type(None) in options
        inner = [_checker(o) for o in options if o is not type(None)]

        def union(value: Any) -> str | None:
            if value is None and optional:
                return None
            problems = [check(value) for check in inner]
            return None if any(p is None for p in problems) else problems[0]

        return union
    if hint is Any:
        return lambda value: None
    if hint is bool:
        return lambda value: (
            None if isinstance(value, bool) else f"must be a bool, got {_describe(value)}"
        )
    if hint is int:
        return lambda value: (
            None
            if isinstance(value, int) and not isinstance(value, bool)
            else f"must be an integer, got {_describe(value)}"
        )
    if hint is float:
        return lambda value: (
            None
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else f"must be a number, got {_describe(value)}"
        )
    if hint in (str, bytes, CiphertextBlock):
        return lambda value: (
            None if isinstance(value, hint) else f"must be {hint.__name__}, got {_describe(value)}"
        )
    if hint is np.ndarray or origin is np.ndarray:

        def array(value: Any) -> str | None:
            if not isinstance(value, np.ndarray):
                return f"must be a numeric array, got {_describe(value)}"
            return None if value.dtype.kind in "biuf" else f"has dtype {value.dtype}, not numeric"

        return array
    if origin is list:
        (item_hint,) = get_args(hint) or (Any,)
        item_check = _checker(item_hint)

        exact = {item_hint} if item_hint in (str, bytes, float) else None

        def listed(value: Any) -> str | None:
            if not isinstance(value, list):
                return f"must be a list, got {_describe(value)}"
            if exact is not None and set(map(type, value)) <= exact:
                return None  # every item of the very type named: nothing to check one by one
            for i, item in enumerate(value):
                problem = item_check(item)
                if problem:
                    return f"item {i} {problem}"
            return None

        return listed
    if origin is dict:
        key_hint, item_hint = get_args(hint) or (Any, Any)
        key_check, item_check = _checker(key_hint), _checker(item_hint)

        def mapping(value: Any) -> str | None:
            if not isinstance(value, dict):
                return f"must be a dict, got {_describe(value)}"
            for key, item in value.items():
                problem = key_check(key) or item_check(item)
                if problem:
                    return f"entry {key!r} {problem}"
            return None

        return mapping
    raise TypeError(f"message field type {hint!r} is not supported")


def _convert(value: Any, hint: Any) -> Any:
    if hint is float and isinstance(value, int):
        return float(value)
    return value


class Namespace:
    """The tags of one protocol: ``Namespace("vlr").tag("grad", 3) == "vlr/grad/3"``."""

    def __init__(self, name: str) -> None:
        if not all(_NAME.match(part) for part in name.split("/")):
            raise ValueError(
                f"a protocol namespace is lowercase words separated by '/', got {name!r}"
            )
        self.name = name

    def __repr__(self) -> str:
        return f"Namespace({self.name!r})"

    def tag(self, step: str, *index: int) -> str:
        """The tag of ``step`` (and its round ``index``, if any)."""
        return "/".join([self.name, step, *(str(int(i)) for i in index)])

    def child(self, name: str) -> Namespace:
        """A sub-namespace (``Namespace("vlr").child("score")`` tags ``"vlr/score/..."``)."""
        return Namespace(f"{self.name}/{name}")

    def send(self, fed: Federation, to: str, step: str, message: Message, *index: int) -> None:
        fed.send(to, self.tag(step, *index), message.to_payload())

    def broadcast(
        self,
        fed: Federation,
        step: str,
        message: Message,
        *index: int,
        to: Iterable[str] | None = None,
    ) -> None:
        fed.broadcast(self.tag(step, *index), message.to_payload(), to=to)

    def recv(self, fed: Federation, frm: str, step: str, cls: type[M], *index: int) -> M:
        """Receive ``step`` from ``frm`` and check it as a ``cls``."""
        return cls.from_payload(fed.recv(frm, self.tag(step, *index)), frm)
