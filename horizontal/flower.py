"""The horizontal path on Flower's engine (the optional extra ``flower``: ``pip install
'vflink[flower]'``).

A deployment that outgrows vflink's own gRPC federation can run the same training on
Flower's SuperLink and SuperNodes: vflink's strategies (FedAvg, FedProx, FedSGD, FedAvgM,
FedAdam, Scaffold), its DP (:class:`~horizontal.privacy.ClientDP`, ``LocalDP``,
``RecordDP``, spends recorded in a vflink :class:`~vfl.privacy.PrivacyLedger`) and its
robust aggregation run as a Flower ``Strategy``, and its clients as a Flower
``ClientApp``::

    # the Flower app's module, named in its pyproject.toml's [tool.flwr.app.components]
    from horizontal import FederatedClassifier
    from horizontal.flower import client_app, server_app

    model = FederatedClassifier(module="linear", max_iter=20, random_state=0)
    server = server_app(model, min_nodes=2)  # serverapp = "module:server"
    client = client_app(model, load)  # clientapp = "module:client"

``load(context)`` returns this node's ``(name, X, y)`` (from its ``node_config``, say
``partition-id``); the names seed the clients' batch orders as in vflink's own federation,
so on the same data, names and ``random_state`` the Flower path trains the same model.

Nothing is re-implemented: the client's round is :meth:`horizontal.training.ClientRole`'s
(local SGD, FedProx's proximal term, DP's clipping), the setup's pooled scaling is
:class:`~horizontal.training.ServerRole`'s, and the aggregation is vflink's kernels
(:func:`~horizontal.aggregate.weighted_mean`, ``ClientDP.server_mean``, the robust rules)
followed by the strategy's ``server_step``. vflink's messages (the client's profile, the
scaling) travel inside Flower's records in vflink's wire format; the model travels as one
flat parameter vector (``ArrayRecord`` key ``"weights"``; the clients answer with their
update ``"delta"`` and ``"num-examples"``).

The protocol: one ``query`` round (each node's profile: its name, rows, and unless the
scaling is told, its column sums and labels), then ``max_iter`` ``train`` rounds. The server's
fitted estimator (``predict_proba`` works) is :meth:`VflinkStrategy.fitted`;
:func:`server_app` saves it to the run config's ``model-path`` when given.

Scaffold runs with its server control variate sent down beside the weights and each client's
change sent up (``ArrayRecord`` key ``"control"``); a client's own control variate stays in
its node's ``context.state`` between rounds (:class:`ClientState`: Flower starts a ClientApp
process per message). :class:`~horizontal.privacy.LocalDP` and
:class:`~horizontal.privacy.RecordDP` record their spends at the client, in a ledger of its
own; the reply carries them in vflink's wire format and the server's ledger records them
under that client's name (a client naming another holder is refused).
:mod:`horizontal.flower_local` starts a whole deployment on this machine (what
``fit(engine="flower")`` uses).

Secure aggregation runs over Flower's messages (:func:`secagg_step`): the train reply
carries a client's first step, then each of the protocol's steps is a Flower round trip
relaying vflink's own messages (wire bytes in a ``ConfigRecord``); a client's step runs its
round again from the start in a fresh process, its secrets drawn again from a key kept in
its node's state (:meth:`horizontal.secagg.Draws.resumable`), and sends what is new. A node
that stops answering is a dropout the protocol survives.

Compression runs on Flower too: a quantised update travels as its packed codes (``bytes``
in the reply's ``ConfigRecord``, with ``"low"`` and ``"scale"``), a top-k one as its indices
(``ArrayRecord`` key ``"indices"``) and values, and a client's top-k residual (its error
feedback) stays in its node's ``context.state`` like Scaffold's control variate.

Not (yet) on Flower: the estimators' ``"auto"`` defaults -- FedLBFGS and
early stopping, which end a fit by rounds Flower does not know in advance, and
standardisation under DP: refused with a ValueError (pass ``strategy="fedavg"``,
``max_iter=<int>``).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from horizontal.client import client_data
from horizontal.compression import TopK
from horizontal.model import build_module, flatten
from horizontal.server import expand_update
from horizontal.training import (
    FED,
    ClientRole,
    FitResult,
    FitSpec,
    Profile,
    RoundRecord,
    Scaling,
    ServerRole,
    Task,
    Update,
    aggregate_updates,
    check_diverged,
    scaffold_control_step,
    settled,
)
from vfl.extras import optional
from vfl.federation import wire
from vfl.federation.base import Federation, FederationTimeoutError

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = optional("torch", for_=__name__)
    nn = optional("torch.nn", for_=__name__)

# importing Flower sets GRPC_VERBOSITY=error in this process's environment, which every
# process started afterwards inherits: it silenced gRPC's own log of refused TLS handshakes
# in vflink's party processes. Keep the environment as it was.
_grpc_verbosity = os.environ.get("GRPC_VERBOSITY")
try:
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Strategy as _FlowerStrategy
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "horizontal.flower needs Flower (flwr >= 1.42): pip install 'vflink[flower]'"
    ) from exc
finally:
    if _grpc_verbosity is None:
        os.environ.pop("GRPC_VERBOSITY", None)
    else:
        os.environ["GRPC_VERBOSITY"] = _grpc_verbosity

__all__ = [
    "ClientState",
    "VflinkStrategy",
    "as_flower_strategy",
    "client_app",
    "client_train",
    "run_server",
    "secagg_step",
    "server_app",
]

logger = logging.getLogger("vflink.horizontal.flower")

Vector = np.ndarray[Any, Any]
EstimatorLike = Any  # a horizontal FederatedClassifier / FederatedRegressor (configuration)
Loader = Callable[[Context], tuple[str, Any, Any]]

WEIGHTS = "weights"
DELTA = "delta"
CONTROL = "control"  # Scaffold's control variate: the server's down, a client's change up
EXAMPLES = "num-examples"
INDICES = "indices"  # top-k compression: the kept entries' positions (uint32)


# -- vflink's roles, one protocol step at a time -------------------------------------------------


class _Mailbox(Federation):
    """An in-memory endpoint that lets one of vflink's roles run a single protocol step on
    messages Flower carried: what the step receives is put in its inbox first, what it sends
    lands in ``outbox``. Nothing waits: a missing message fails at once."""

    def __init__(self, name: str, peers: Iterable[str]) -> None:
        super().__init__(name, peers)
        self.inbox: dict[tuple[str, str], list[bytes]] = {}
        self.outbox: list[tuple[str, str, bytes]] = []

    def put(self, frm: str, tag: str, data: bytes) -> None:
        self.inbox.setdefault((frm, tag), []).append(data)

    def sent(self, tag: str) -> bytes:
        for _, sent_tag, data in self.outbox:
            if sent_tag == tag:
                return data
        raise LookupError(f"{self.name!r} sent no {tag!r}")

    def _send_bytes(self, to: str, tag: str, data: bytes) -> None:
        self.outbox.append((to, tag, data))

    def _recv_bytes(
        self, frm: str, tag: str, deadline: float, *, explicit_timeout: bool = False
    ) -> bytes:
        queue = self.inbox.get((frm, tag))
        if not queue:
            raise FederationTimeoutError(f"{self.name!r}: no {tag!r} from {frm!r} in this step")
        return queue.pop(0)


def _encode(message: Any) -> bytes:
    return wire.encode(message.to_payload())


def _check_supported(spec: FitSpec) -> None:
    """Refuse what the Flower path does not run (see the module docstring)."""
    problems = []
    if spec.strategy.local.gradient:
        problems.append("FedLBFGS (strategy='auto' without DP): pass strategy='fedavg'")
    if spec.early_stopping:
        problems.append("early stopping (max_iter='auto'): pass max_iter=<int>")
    if spec.dp_scaling is not None:
        problems.append("standardisation under DP (a setup of several steps)")
    if spec.secure_aggregation is not None and spec.secure_aggregation.identities is not None:
        problems.append("secure aggregation with long-term identities (identities=)")
    if problems:
        raise ValueError(f"not supported on Flower's engine yet: {', '.join(problems)}")


def _client_spec(estimator: EstimatorLike, name: str, clients: Sequence[str] | None) -> FitSpec:
    """The client's copy of the agreed plan (every client's name once the server sent them;
    at the query step only its own, and the plain protocol: the profile is the same)."""
    from sklearn.base import clone

    if clients is None:
        estimator = clone(estimator).set_params(min_clients=None, protocol="plain")
        clients = [name]
    spec: FitSpec = estimator.fit_spec(list(clients))
    return spec


def client_profile(estimator: EstimatorLike, name: str, x: Any, y: Any) -> bytes:
    """This client's :class:`~horizontal.training.Profile` in vflink's wire format, as
    :class:`~horizontal.training.ClientRole` builds it at setup."""
    values, labels, columns = client_data({name: (x, y)}, None)[name]
    spec = _client_spec(estimator, name, None)
    mailbox = _Mailbox(name, [spec.server])
    d = values.shape[1]  # the setup step waits for a scaling: a placeholder ends it
    mailbox.put(spec.server, FED.tag("scaling"), _encode(Scaling(np.zeros(d), np.ones(d), [])))
    ClientRole(spec, values, labels, columns)._setup(mailbox)
    return mailbox.sent(FED.tag("profile"))


def client_train(
    estimator: EstimatorLike,
    name: str,
    x: Any,
    y: Any,
    *,
    weights: Vector,
    round_: int,
    clients: Sequence[str],
    scaling: Scaling,
    clip: float | None = None,
    control: Vector | None = None,
    state: ClientState | None = None,
) -> Update | Vector:
    """One round of this client's local training from the global ``weights``: vflink's
    :meth:`ClientRole._round <horizontal.training.ClientRole>` (local SGD, FedProx, Scaffold,
    DP's clipping and local noise, DP-SGD), returning its :class:`~horizontal.training.Update`.

    ``control`` is Scaffold's server control variate; ``state`` (a :class:`ClientState`)
    carries what the client keeps between rounds -- Scaffold's own control variate -- and
    receives the round's privacy spends (local and record-level DP record them at the
    client), which :func:`client_app` sends to the server's ledger. Under secure aggregation
    the result is the vector this client adds to the secure sum (:func:`secagg_step` runs its
    round)."""
    values, labels, columns = client_data({name: (x, y)}, None)[name]
    spec = _client_spec(estimator, name, clients)
    _check_supported(spec)
    spec = settled(spec, scaling)
    state = state if state is not None else ClientState()
    privacy = spec.privacy
    local_spends = privacy is not None and not hasattr(privacy, "noise_share")
    if local_spends:  # LocalDP / RecordDP: this client's own spends, in a ledger of its own
        from vfl.privacy import PrivacyLedger

        spec = replace(spec, ledger=PrivacyLedger(delta=privacy.delta))
    role = ClientRole(spec, values, labels, columns)
    if state.residual is not None and isinstance(spec.compression, float):
        role.topk = TopK(fraction=spec.compression)
        role.topk.restore(state.residual)
    xt, yt = role._tensors(values, labels, scaling)
    outputs = len(scaling.classes) if spec.task == "classification" else 1
    module = build_module(spec.module, xt.shape[1], outputs, spec.hidden, spec.random_state)
    loss_fn: Any = nn.CrossEntropyLoss() if spec.task == "classification" else nn.MSELoss()
    task = Task(
        round=round_,
        weights=np.asarray(weights, dtype=np.float32),
        clip=clip,
        control=None if control is None else np.asarray(control, dtype=np.float32),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as vflink's simulation trains: the same arithmetic
    try:
        state.control, reply = role._round(
            _Mailbox(name, [spec.server]), module, xt, yt, loss_fn, task, state.control
        )
    finally:
        torch.set_num_threads(threads)
    if local_spends:
        state.spends = list(spec.ledger.entries)
    if role.topk is not None:
        state.residual = role.topk.residual
    if isinstance(reply, Update):
        return reply
    return np.asarray(reply, dtype=np.float64)


class ClientState:
    """What a client keeps between Flower messages (Flower starts a ClientApp process per
    message; :func:`client_app` keeps this in the node's ``context.state``): Scaffold's own
    control variate ``c_k``, top-k compression's residual (its error feedback), and the
    privacy spends of the last round, to report."""

    CONTROL = "vflink-own-control"
    RESIDUAL = "vflink-topk-residual"

    def __init__(self, control: Vector | None = None, residual: Vector | None = None) -> None:
        self.control, self.residual = control, residual
        self.spends: list[Any] = []

    @classmethod
    def load(cls, context: Context) -> ClientState:
        found = []
        for key, field in ((cls.CONTROL, "control"), (cls.RESIDUAL, "residual")):
            record = context.state.array_records.get(key)
            found.append(None if record is None else record[field].numpy().astype(np.float64))
        return cls(*found)

    def save(self, context: Context) -> None:
        if self.control is not None:
            context.state[self.CONTROL] = ArrayRecord({"control": Array(self.control)})
        if self.residual is not None:
            context.state[self.RESIDUAL] = ArrayRecord({"residual": Array(self.residual)})


_SPEND_FIELDS = ("holder", "data", "mechanism", "noise_multiplier", "sampling_rate", "steps")


def _spends_to_bytes(entries: Sequence[Any]) -> bytes:
    """A client's privacy spends in vflink's wire format (never pickled)."""
    return wire.encode([{f: getattr(e, f) for f in _SPEND_FIELDS} for e in entries])


def _spends_from_bytes(data: bytes, client: str) -> list[dict[str, Any]]:
    """The spends a client reported, checked: a list of dicts of the ledger's fields, each
    held by the client that sent it."""
    found = wire.decode(data)
    if not isinstance(found, list) or not all(
        isinstance(e, dict) and set(e) == set(_SPEND_FIELDS) for e in found
    ):
        raise ValueError(f"client {client!r} sent privacy spends that are not ledger entries")
    for entry in found:
        if entry["holder"] != client:
            raise ValueError(
                f"client {client!r} reported a privacy spend held by {entry['holder']!r}"
            )
    return found


# -- secure aggregation over Flower's messages --------------------------------------------------

RELAY_TAGS = "relay-tags"
RELAY_PAYLOADS = "relay-payloads"
SECAGG_STATE = "vflink-secagg"
SECAGG_VECTOR = "vflink-secagg-vector"


def secagg_step(
    estimator: EstimatorLike,
    name: str,
    context: Context,
    inbound: Sequence[tuple[str, bytes]],
    *,
    start: tuple[Vector, int, int, Sequence[str]] | None = None,
    relay_round: int | None = None,
) -> list[tuple[str, bytes]]:
    """One step of this client's secure aggregation (:func:`horizontal.secagg.client_round`)
    on Flower, where each message is handled by a new process: the round runs again from its
    start on every message the server relayed so far (``inbound`` added to those kept in the
    node's ``context.state``), with its secrets drawn again identically from a key kept there
    (:meth:`~horizontal.secagg.Draws.resumable`, drawn from the OS at ``start``), until it
    waits for a message not yet relayed; what it sent beyond what earlier steps sent is
    returned, ``(tag, wire bytes)``, for the server. ``start`` -- ``(vector, round, peers,
    clients)`` -- begins a round: the vector to add, the round, the clients sampled in it
    and every client of the fit. The vector, the key and the relayed messages stay in this
    node's state, as Flower's own SecAgg+ mod keeps its keys; a finished round clears them, and
    so does a round that fails (aborted, refused) or a step of another round (``relay_round``)."""
    from horizontal.secagg import Draws, client_round

    if start is not None:
        vector, round_, peers, clients = start
        context.state[SECAGG_VECTOR] = ArrayRecord({"vector": Array(np.asarray(vector))})
        context.state[SECAGG_STATE] = ConfigRecord(
            {
                "key": secrets.token_bytes(32),
                "round": int(round_),
                "peers": int(peers),
                "clients": [str(c) for c in clients],
                "tags": [],
                "payloads": [],
                "sent": 0,
            }
        )
    if SECAGG_STATE not in context.state.config_records:
        raise ValueError(f"client {name!r}: a secure aggregation step outside a round")
    record = context.state.config_records[SECAGG_STATE]
    if relay_round is not None and relay_round != int(_number(record["round"])):
        _forget_round(context)
        raise ValueError(
            f"client {name!r}: a step of round {relay_round} while in round "
            f"{int(_number(record['round']))}"
        )
    tags = [str(t) for t in _list(record["tags"])] + [t for t, _ in inbound]
    payloads = [_bytes(p) for p in _list(record["payloads"])] + [p for _, p in inbound]
    spec = _client_spec(estimator, name, [str(c) for c in _list(record["clients"])])
    mailbox = _Mailbox(name, [spec.server])
    for tag, data in zip(tags, payloads, strict=True):
        mailbox.put(spec.server, tag, data)
    vector = context.state.array_records[SECAGG_VECTOR]["vector"].numpy()
    done = True
    try:
        client_round(
            mailbox,
            spec.server,
            vector,
            spec.secure_aggregation,
            int(_number(record["round"])),
            clients=int(_number(record["peers"])),
            draws=Draws.resumable(_bytes(record["key"])),
        )
    except FederationTimeoutError:  # waits for the server's next step
        done = False
    except BaseException:  # aborted or refused: nothing of the round may stay behind
        _forget_round(context)
        raise
    sent = int(_number(record["sent"]))
    new = [(tag, data) for _, tag, data in mailbox.outbox[sent:]]
    if done:
        _forget_round(context)
    else:
        record["tags"], record["payloads"] = tags, payloads
        record["sent"] = len(mailbox.outbox)
    return new


def _forget_round(context: Context) -> None:
    """Drop a round's key, vector and relayed messages from the node's state."""
    for key in (SECAGG_STATE, SECAGG_VECTOR):
        if key in context.state:
            del context.state[key]


def _relayed(config: Any) -> list[tuple[str, bytes]]:
    """The vflink messages a Flower message relays (its config's tags and payloads)."""
    tags = [str(t) for t in _list(config.get(RELAY_TAGS, []))]
    payloads = [_bytes(p) for p in _list(config.get(RELAY_PAYLOADS, []))]
    if len(tags) != len(payloads):
        raise ValueError("a relay message has not one payload per tag")
    return list(zip(tags, payloads, strict=True))


def _relay_record(messages: Sequence[tuple[str, bytes]], **extra: Any) -> ConfigRecord:
    return ConfigRecord(
        {RELAY_TAGS: [t for t, _ in messages], RELAY_PAYLOADS: [p for _, p in messages], **extra}
    )


class _Relay(Federation):
    """The server's federation for a round of secure aggregation over Flower: what the
    server's role sends is held per client until it waits for an answer; then each client
    with held messages gets one Flower message carrying them, and what its step sends back
    lands in the inbox. A client whose step fails or times out is a dropout (the protocol
    copes); a reply is attributed to the node it came from, never to the name it claims."""

    def __init__(
        self,
        name: str,
        clients: Sequence[str],
        grid: Grid,
        nodes: Mapping[str, int],
        round_: int,
        timeout: float,
    ) -> None:
        super().__init__(name, clients)
        self.grid, self.nodes, self.round, self.seconds = grid, dict(nodes), round_, timeout
        self.by_node = {node: client for client, node in self.nodes.items()}
        self.held: dict[str, list[tuple[str, bytes]]] = {}
        self.inbox: dict[tuple[str, str], list[bytes]] = {}

    def put(self, frm: str, tag: str, data: bytes) -> None:
        self.inbox.setdefault((frm, tag), []).append(data)

    def _send_bytes(self, to: str, tag: str, data: bytes) -> None:
        self.held.setdefault(to, []).append((tag, data))

    def flush(self) -> None:
        """One Flower round trip: every client's held messages, and what it answered."""
        due, self.held = self.held, {}
        if not due:
            return
        asks = [
            Message(
                RecordDict({"config": _relay_record(messages, round=self.round)}),
                self.nodes[client],
                MessageType.TRAIN,
                group_id=f"secagg-{self.round}",
            )
            for client, messages in due.items()
        ]
        for reply in self.grid.send_and_receive(asks, timeout=self.seconds):
            client = self.by_node.get(reply.metadata.src_node_id)
            if client is None:
                continue
            if reply.has_error():
                logger.warning(
                    "client %r dropped out of secure aggregation: %s", client, reply.error.reason
                )
                continue
            try:
                messages = _relayed(reply.content.config_records["config"])
            except (KeyError, ValueError) as exc:  # malformed: that client is a dropout
                logger.warning(
                    "client %r sent a malformed secure-aggregation step: %s", client, exc
                )
                continue
            for tag, data in messages:
                self.put(client, tag, data)

    def _recv_bytes(
        self, frm: str, tag: str, deadline: float, *, explicit_timeout: bool = False
    ) -> bytes:
        if not self.inbox.get((frm, tag)):
            self.flush()
        queue = self.inbox.get((frm, tag))
        if not queue:
            raise FederationTimeoutError(f"no {tag!r} from {frm!r} over Flower")
        return queue.pop(0)

    def _gather_bytes(
        self,
        senders: tuple[str, ...],
        tag: str,
        deadline: float,
        *,
        need: int,
        explicit_timeout: bool = False,
    ) -> dict[str, bytes]:
        if any(not self.inbox.get((s, tag)) for s in senders):
            self.flush()
        return {s: self.inbox[(s, tag)].pop(0) for s in senders if self.inbox.get((s, tag))}


# -- the client app ----------------------------------------------------------------------------


def client_app(
    estimator: EstimatorLike | Callable[[Context], EstimatorLike], load: Loader
) -> ClientApp:
    """A Flower ``ClientApp`` running vflink's client role on this node's rows.

    Parameters
    ----------
    estimator : FederatedClassifier or FederatedRegressor, or callable
        The configuration (the same as the server's), or ``estimator(context)`` building it
        (from the run config, say).
    load : callable
        ``load(context) -> (name, X, y)``: this node's client name (it seeds the batch
        order, as in vflink's own federation) and rows.
    """
    app = ClientApp()

    def configured(context: Context) -> EstimatorLike:
        return estimator(context) if callable(estimator) else estimator

    @app.query()  # type: ignore[untyped-decorator,unused-ignore]
    def query(msg: Message, context: Context) -> Message:
        name, x, y = load(context)
        profile = client_profile(configured(context), name, x, y)
        reply = ConfigRecord({"client": name, "profile": profile})
        return Message(RecordDict({"config": reply}), reply_to=msg)

    @app.train()  # type: ignore[untyped-decorator,unused-ignore]
    def train(msg: Message, context: Context) -> Message:
        name, x, y = load(context)
        config = msg.content.config_records["config"]
        if RELAY_TAGS in config:  # a step of secure aggregation
            relay_round = int(_number(config["round"])) if "round" in config else None
            answer = secagg_step(
                configured(context), name, context, _relayed(config), relay_round=relay_round
            )
            return Message(RecordDict({"config": _relay_record(answer)}), reply_to=msg)
        scaling = Scaling.from_payload(wire.decode(_bytes(config["scaling"])), "the server")
        clip = config.get("clip")
        arrays = msg.content.array_records["arrays"]
        state = ClientState.load(context)
        update = client_train(
            configured(context),
            name,
            x,
            y,
            weights=arrays[WEIGHTS].numpy(),
            round_=int(_number(config["round"])),
            clients=[str(c) for c in _list(config["clients"])],
            scaling=scaling,
            clip=None if clip is None else float(_number(clip)),
            control=arrays[CONTROL].numpy() if CONTROL in arrays else None,
            state=state,
        )
        state.save(context)
        if not isinstance(update, Update):  # secure aggregation: the round's first step
            round_ = int(_number(config["round"]))
            peers = int(_number(config.get("peers", 1)))
            clients = [str(c) for c in _list(config["clients"])]
            first = secagg_step(
                configured(context), name, context, [], start=(update, round_, peers, clients)
            )
            extra = {"client": name, "round": round_}
            if state.spends:
                extra["spends"] = _spends_to_bytes(state.spends)
            return Message(RecordDict({"config": _relay_record(first, **extra)}), reply_to=msg)
        out = ConfigRecord({"client": name, "round": update.round})
        if update.unclipped is not None:
            out["unclipped"] = bool(update.unclipped)
        if state.spends:
            out["spends"] = _spends_to_bytes(state.spends)
        reply = {DELTA: Array(np.asarray(update.delta))}
        if update.control is not None:
            reply[CONTROL] = Array(np.asarray(update.control))
        if update.codes is not None:  # quantised: the packed codes and their grid
            out.update({"codes": update.codes, "low": update.low, "scale": update.scale})
        if update.indices is not None:  # top-k: the values' positions
            reply[INDICES] = Array(np.asarray(update.indices))
        content = RecordDict(
            {
                "arrays": ArrayRecord(reply),
                "metrics": MetricRecord({EXAMPLES: int(update.samples)}),
                "config": out,
            }
        )
        return Message(content, reply_to=msg)

    return app


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError(f"expected bytes, got {type(value).__name__}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list, got {value!r}")
    return value


# -- the server strategy -------------------------------------------------------------------------


class VflinkStrategy(_FlowerStrategy):  # type: ignore[misc,unused-ignore]
    """vflink's server as a Flower ``Strategy``: client sampling, vflink's aggregation
    (weighted mean, ClientDP's noisy mean with its ledger, a robust rule) and the strategy's
    server step. Build it with :func:`as_flower_strategy`; :meth:`begin` (which
    :func:`run_server` calls after the query round) names the clients and their nodes.

    Its replies are those of :func:`client_app` (``ArrayRecord`` ``"delta"``, ``MetricRecord``
    ``"num-examples"``, ``ConfigRecord`` ``"client"``)."""

    def __init__(self, estimator: EstimatorLike, *, ledger: Any = None) -> None:
        self.estimator = estimator
        self.ledger = estimator._ledger(ledger)
        self.spec: FitSpec | None = None
        self.nodes: dict[str, int] = {}
        self.sizes: dict[str, int] | None = None
        self.scaling: Scaling | None = None
        self.n_features = 0
        self.history: list[RoundRecord] = []
        self.state: dict[str, Any] = {}
        self.weights: Vector | None = None
        self._sampled: list[str] = []
        self._spends: dict[str, list[dict[str, Any]]] = {}
        self._grid: Grid | None = None
        self._began = 0.0

    # -- setup -------------------------------------------------------------------------------

    def begin(
        self,
        clients: Sequence[str],
        *,
        nodes: Mapping[str, int] | None = None,
        profiles: Mapping[str, bytes] | None = None,
    ) -> Vector | None:
        """Agree the plan for ``clients`` (sent to ``nodes``, Flower node ids by name); with
        the clients' ``profiles`` (wire bytes of :func:`client_profile`), pool the scaling
        as :class:`~horizontal.training.ServerRole` does and return the initial weights."""
        spec = self.estimator.fit_spec(list(clients), ledger=self.ledger)
        _check_supported(spec)
        self.spec = spec
        self.nodes = dict(nodes or {})
        self.sampler = np.random.default_rng(spec.random_state)
        privacy = spec.privacy
        self.clip = privacy.initial_clip if privacy is not None and privacy.client_level else None
        if profiles is None:
            return None
        mailbox = _Mailbox(spec.server, spec.clients)
        for client in spec.clients:
            mailbox.put(client, FED.tag("profile"), profiles[client])
        role = ServerRole(spec)
        self.scaling, columns, self.sizes = role._setup(mailbox, list(spec.clients))
        self.n_features = len(columns)
        outputs = len(self.scaling.classes) if spec.task == "classification" else 1
        module = build_module(spec.module, len(columns), outputs, spec.hidden, spec.random_state)
        self.weights = flatten(module)
        return self.weights

    def _spec(self) -> FitSpec:
        if self.spec is None:
            raise RuntimeError("the strategy has no clients yet: call begin(clients) first")
        return self.spec

    # -- Flower's Strategy -------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        spec = self._spec()
        self._began = time.perf_counter()
        self.weights = np.asarray(arrays[WEIGHTS].numpy(), dtype=np.float64)
        self._sampled = ServerRole(spec)._sample(self.sampler, list(spec.clients))
        task = ConfigRecord(dict(config))
        task["round"] = server_round - 1
        task["clients"] = list(spec.clients)
        if self.scaling is not None:
            task["scaling"] = _encode(self.scaling)
        if self.clip is not None:
            task["clip"] = float(self.clip)
        if spec.secure_aggregation is not None:
            task["peers"] = len(self._sampled)
        self._grid = grid
        down = {WEIGHTS: Array(self.weights.astype(np.float32))}
        if spec.strategy.local.scaffold:
            control = self.state.get("control")
            control = np.zeros_like(self.weights) if control is None else control
            down[CONTROL] = Array(np.asarray(control, dtype=np.float32))
        content = RecordDict({"arrays": ArrayRecord(down), "config": task})
        missing = [c for c in self._sampled if c not in self.nodes]
        if missing:
            raise RuntimeError(f"no Flower node for the clients {missing}")
        return [
            Message(content, self.nodes[c], MessageType.TRAIN, group_id=str(server_round))
            for c in self._sampled
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        spec = self._spec()
        if self.weights is None:
            raise RuntimeError("aggregate_train before configure_train")
        round_ = server_round - 1
        if spec.secure_aggregation is not None:
            self.weights, record = self.secure_round(replies, round_)
            record.seconds = time.perf_counter() - self._began if self._began else 0.0
            self.history.append(record)
            metrics = MetricRecord({"replied": record.replied})
            return ArrayRecord({WEIGHTS: Array(self.weights)}), metrics
        updates = self.read_updates(replies, round_)
        need = ServerRole(spec)._needed(len(self._sampled))
        if len(updates) < need:
            raise FederationTimeoutError(
                f"round {server_round}: {len(updates)} of the {len(self._sampled)} sampled "
                f"clients replied, fewer than min_clients={need}"
            )
        self.weights, record = self.aggregate(updates, self.weights, round_)
        record.seconds = time.perf_counter() - self._began if self._began else 0.0
        logger.info(
            "round %d: %d of %d sampled clients replied, drift %.4f",
            server_round,
            record.replied,
            record.sampled,
            record.drift,
        )
        metrics = MetricRecord({"replied": record.replied, "drift": record.drift})
        return ArrayRecord({WEIGHTS: Array(self.weights)}), metrics

    def _client_of(self, msg: Message) -> str:
        """The client whose node sent ``msg`` (by Flower's node id, never a name it claims)."""
        for client, node in self.nodes.items():
            if node == msg.metadata.src_node_id:
                return client
        raise ValueError(f"a reply from node {msg.metadata.src_node_id}, no client of this fit")

    def secure_round(self, replies: Iterable[Message], round_: int) -> tuple[Vector, RoundRecord]:
        """A round of secure aggregation over Flower's messages: the train replies carry each
        client's first step (its keys); vflink's server role
        (:meth:`ServerRole._secure_round <horizontal.training.ServerRole>`) then runs over a
        relay that carries its messages to the clients' steps (:func:`secagg_step`), a Flower
        round trip per step. The server sees the survivors' sum only."""
        spec = self._spec()
        if self.weights is None or self._grid is None:
            raise RuntimeError("aggregate_train before configure_train")
        timeout = float(self.estimator.timeout or 600.0)
        relay = _Relay(spec.server, spec.clients, self._grid, self.nodes, round_, timeout)
        by_node = {node: client for client, node in self.nodes.items()}
        for msg in replies:
            client = by_node.get(msg.metadata.src_node_id)
            if client is None or msg.has_error():
                continue
            config = msg.content.config_records["config"]
            for tag, data in _relayed(config):
                relay.put(client, tag, data)
            if "spends" in config:
                self._spends[client] = _spends_from_bytes(_bytes(config["spends"]), client)
        if self.ledger is not None:  # local DP: spent at training, before the sum
            for client in list(self._spends):
                for entry in self._spends.pop(client):
                    self.ledger.record(**entry)
        role = ServerRole(spec)
        role.total_rows = sum((self.sizes or {}).values())
        return role._secure_round(relay, self._sampled, self.weights, self.state, round_)

    def read_updates(self, replies: Iterable[Message], round_: int) -> dict[str, Update]:
        """The replies as vflink updates, by client in the plan's order (replies with an
        error are dropped, as vflink drops clients that fail)."""
        spec = self._spec()
        found: dict[str, Update] = {}
        for msg in replies:
            if msg.has_error():
                logger.warning("a client failed in round %d: %s", round_ + 1, msg.error.reason)
                continue
            config = msg.content.config_records["config"]
            client = self._client_of(msg)
            if str(config.get("client", client)) != client:
                raise ValueError(
                    f"the node of {client!r} answered as {config['client']!r}: a reply names "
                    "the client of the node it comes from"
                )
            unclipped = config.get("unclipped")
            arrays = msg.content.array_records["arrays"]
            update = Update(
                round=int(_number(config.get("round", round_))),
                delta=arrays[DELTA].numpy().astype(np.float32),
                samples=int(_number(msg.content.metric_records["metrics"][EXAMPLES])),
                unclipped=None if unclipped is None else bool(unclipped),
                control=arrays[CONTROL].numpy().astype(np.float32) if CONTROL in arrays else None,
                codes=_bytes(config["codes"]) if "codes" in config else None,
                low=float(_number(config.get("low", 0.0))),
                scale=float(_number(config.get("scale", 0.0))),
                indices=arrays[INDICES].numpy().astype(np.uint32) if INDICES in arrays else None,
            )
            size = self.weights.size if self.weights is not None else 0
            found[client] = expand_update(update, spec.compression, size, client)
            if "spends" in config:
                self._spends[client] = _spends_from_bytes(_bytes(config["spends"]), client)
        return {c: found[c] for c in spec.clients if c in found}

    def aggregate(
        self, updates: Mapping[str, Update], weights: Vector, round_: int
    ) -> tuple[Vector, RoundRecord]:
        """One round of vflink's server: the next global weights from the replies' updates
        (vflink's kernels, then the strategy's server step) and the round's record; DP's
        spend goes to the ledger."""
        spec = self._spec()
        privacy = spec.privacy
        clip = self.clip
        mean_delta, self.clip, norms = aggregate_updates(
            spec, updates, weights, round_, self.sizes, clip, len(spec.clients)
        )
        control_step = None
        if spec.strategy.local.scaffold:
            rows = (
                self.sizes if self.sizes is not None else {c: u.samples for c, u in updates.items()}
            )
            control_step = scaffold_control_step(updates, weights, sum(rows.values()))
        new = spec.strategy.server_step(weights, mean_delta, self.state, control_step=control_step)
        if self.ledger is not None:  # local and record-level DP: the clients' own spends
            for client in updates:
                for entry in self._spends.pop(client, []):
                    self.ledger.record(**entry)
        check_diverged(new, round_)
        record = RoundRecord(
            round=round_ + 1,
            sampled=len(self._sampled) if self._sampled else len(updates),
            replied=len(updates),
            seconds=0.0,
            drift=float(norms.mean()) if len(norms) else 0.0,
            max_drift=float(norms.max()) if len(norms) else 0.0,
            clip=clip,
        )
        if privacy is not None:
            record.epsilon = privacy.record_round(spec, round_, len(spec.clients))
        self.history.append(record)
        return new, record

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # vflink's rounds have no client-side evaluation

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        spec = self.spec
        logger.info(
            "vflink strategy %s, privacy %s, robust %s",
            type(spec.strategy).__name__ if spec else self.estimator.strategy,
            type(spec.privacy).__name__ if spec and spec.privacy else None,
            spec.robust if spec else None,
        )

    # -- the result ------------------------------------------------------------------------------

    def fitted(self, weights: Vector | None = None) -> EstimatorLike:
        """The estimator fitted with the final global weights (``predict_proba`` works),
        its ``history_`` and ``rounds_``, and under DP its ``privacy_ledger_`` and ``epsilon_``."""
        spec = self._spec()
        final = self.weights if weights is None else np.asarray(weights, dtype=np.float64)
        if final is None or self.scaling is None:
            raise RuntimeError("no global model yet: run the rounds first")
        model = self.estimator
        model._collect(FitResult(final, list(self.history), self.scaling, self.n_features), spec)
        if self.ledger is not None and spec.privacy is not None:
            from horizontal.privacy import largest_epsilon

            model.epsilon_ = largest_epsilon(self.ledger, spec.clients)
        if spec.task == "classification" and model.classes is not None:
            originals = {str(c): c for c in model.classes}
            model.classes_ = np.array([originals[c] for c in model._class_names])
        return model


def as_flower_strategy(
    strategy: Any = "fedavg",
    *,
    privacy: Any = None,
    aggregator: Any = None,
    estimator: EstimatorLike = None,
    ledger: Any = None,
    **params: Any,
) -> VflinkStrategy:
    """A vflink strategy (``"fedavg"``, ``FedProx(mu)``, ...) with its optional
    :class:`~horizontal.privacy.ClientDP` and robust ``aggregator`` as a Flower
    ``Strategy`` (:class:`VflinkStrategy`). ``params`` are the other
    :class:`~horizontal.FederatedClassifier` hyperparameters (``max_iter``,
    ``client_fraction``, ``random_state``, ...), or pass the whole configuration as
    ``estimator``. DP's spend is recorded in ``ledger`` (a new
    :class:`~vfl.privacy.PrivacyLedger` by default: ``strategy.ledger``)."""
    if estimator is None:
        from horizontal.estimator import FederatedClassifier

        estimator = FederatedClassifier(
            strategy=strategy, privacy=privacy, robust_aggregation=aggregator, **params
        )
    return VflinkStrategy(estimator, ledger=ledger)


# -- the server app ----------------------------------------------------------------------------


def run_server(
    grid: Grid,
    estimator: EstimatorLike,
    *,
    min_nodes: int,
    timeout: float = 600.0,
    ledger: Any = None,
    order: Sequence[str] | None = None,
) -> EstimatorLike:
    """vflink's server on Flower's ``grid``: wait for ``min_nodes`` nodes, ask each for its
    profile (a ``query`` round), pool the scaling, run the rounds with
    :class:`VflinkStrategy` and return the fitted estimator.

    The clients are in sorted name order, or in ``order`` (every client's name once): the
    order client sampling draws from and sums run in, as the keys of the dict a simulation
    is given (:class:`horizontal.flower_local.LocalDeployment` passes that dict's order)."""
    deadline = time.monotonic() + timeout
    while len(node_ids := sorted(grid.get_node_ids())) < min_nodes:
        if time.monotonic() > deadline:
            raise FederationTimeoutError(
                f"{len(node_ids)} of {min_nodes} Flower nodes connected in {timeout:g} s"
            )
        logger.info("waiting for nodes: %d of %d connected", len(node_ids), min_nodes)
        time.sleep(1.0)
    asks = [
        Message(RecordDict({"config": ConfigRecord({"step": "profile"})}), node, MessageType.QUERY)
        for node in node_ids
    ]
    nodes: dict[str, int] = {}
    profiles: dict[str, bytes] = {}
    for reply in grid.send_and_receive(asks, timeout=max(1.0, deadline - time.monotonic())):
        if reply.has_error():
            raise RuntimeError(f"node {reply.metadata.src_node_id}: {reply.error.reason}")
        config = reply.content.config_records["config"]
        name = str(config["client"])
        if name in nodes:
            raise ValueError(f"two nodes call themselves {name!r}")
        nodes[name] = reply.metadata.src_node_id
        profiles[name] = _bytes(config["profile"])
    clients = sorted(nodes)
    if order is not None:
        if sorted(order) != clients:
            raise ValueError(
                f"order names {sorted(order)}, but the nodes that answered are {clients}"
            )
        clients = list(order)
    if len(clients) < min_nodes:
        raise FederationTimeoutError(f"{len(clients)} of {min_nodes} nodes sent their profile")
    for client in clients:  # each profile checked as vflink's own server checks it
        Profile.from_payload(wire.decode(profiles[client]), client)
    strategy = VflinkStrategy(estimator, ledger=ledger)
    initial = strategy.begin(clients, nodes=nodes, profiles=profiles)
    if initial is None:
        raise RuntimeError(
            f"the setup with clients {clients} gave no initial model: the strategy began "
            "without the clients' profiles"
        )
    logger.info("vflink on Flower: clients %s", clients)
    result = strategy.start(
        grid,
        ArrayRecord({WEIGHTS: Array(initial)}),
        num_rounds=strategy._spec().rounds,
        timeout=max(1.0, deadline - time.monotonic()),
    )
    final = result.arrays[WEIGHTS].numpy() if result.arrays is not None else initial
    return strategy.fitted(final)


def server_app(
    estimator: EstimatorLike | Callable[[Context], EstimatorLike],
    *,
    min_nodes: int,
    timeout: float = 600.0,
    on_fit: Callable[[EstimatorLike, Context], None] | None = None,
) -> ServerApp:
    """A Flower ``ServerApp`` training ``estimator``'s configuration (or
    ``estimator(context)``'s) with :func:`run_server` on ``min_nodes`` nodes. The fitted
    estimator goes to ``on_fit(model, context)``, and is saved (vflink's format, with the
    privacy ledger beside it) to the run config's ``model-path`` when set."""
    app = ServerApp()

    @app.main()  # type: ignore[untyped-decorator,unused-ignore]
    def main(grid: Grid, context: Context) -> None:
        configured = estimator(context) if callable(estimator) else estimator
        model = run_server(grid, configured, min_nodes=min_nodes, timeout=timeout)
        path = context.run_config.get("model-path")
        if path:
            written = model.save(str(path))
            logger.info("the fitted model: %s", written)
        if on_fit is not None:
            on_fit(model, context)

    return app
