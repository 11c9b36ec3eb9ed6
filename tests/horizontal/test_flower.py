"""The horizontal path on Flower's engine (:mod:`horizontal.flower`, the extra ``flower``).

Fast tests run the Flower strategy and client app in this process (a stand-in grid hands
the messages to the client app); the ``network`` test fits with ``engine="flower"``: a
SuperLink and ten SuperNodes on loopback (:mod:`horizontal.flower_local`), the app run with
``flwr run``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from sklearn.metrics import roc_auc_score

from horizontal import ClientDP, FederatedClassifier, FedProx
from horizontal.aggregate import clip_to_norm, weighted_mean
from horizontal.flower import as_flower_strategy, client_app, run_server
from horizontal.privacy import largest_epsilon
from horizontal.robust import coordinate_median
from vfl.datasets import make_hospital_cohort

LABEL = "diagnosis"


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower stamps messages with the run, node and task of the process running them (set by
    its runtime); in-process tests play one."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _cohort() -> tuple[dict[str, Any], Any]:
    """Two hospitals to train on and a third held out."""
    cohort = make_hospital_cohort(3, 1200, random_state=0)
    train = {
        name: (frame.drop(columns=[LABEL]), frame[LABEL])
        for name, frame in cohort.items()
        if name != "hospital_3"
    }
    return train, cohort["hospital_3"]


def _replies(strategy: Any, messages: Iterable[Message], deltas: dict[str, Any]) -> list[Message]:
    """What the client app would answer: each client's given update."""
    names = {node: name for name, node in strategy.nodes.items()}
    out = []
    for msg in messages:
        name = names[msg.metadata.dst_node_id]
        delta, rows, bit = deltas[name]
        config = ConfigRecord({"client": name, "round": int(msg.content["config"]["round"])})
        if bit is not None:
            config["unclipped"] = bit
        content = RecordDict(
            {
                "arrays": ArrayRecord({"delta": Array(np.asarray(delta, dtype=np.float32))}),
                "metrics": MetricRecord({"num-examples": rows}),
                "config": config,
            }
        )
        out.append(Message(content, reply_to=msg))
    return out


def _one_round(strategy: Any, deltas: dict[str, Any], weights: Any) -> Any:
    strategy.begin(sorted(deltas), nodes={n: k + 1 for k, n in enumerate(sorted(deltas))})
    messages = list(
        strategy.configure_train(1, ArrayRecord({"weights": Array(weights)}), ConfigRecord(), None)
    )
    arrays, _ = strategy.aggregate_train(1, _replies(strategy, messages, deltas))
    return arrays["weights"].numpy()


def _deltas(seed: int = 0, size: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        name: (rng.normal(size=size).astype(np.float32).astype(np.float64), rows, None)
        for name, rows in [("a", 10), ("b", 30), ("c", 60)]
    }


@pytest.mark.parametrize("strategy", ["fedavg", FedProx(mu=0.1)])
def test_aggregate_is_vflinks_weighted_mean(strategy: Any) -> None:
    deltas = _deltas()
    weights = np.linspace(-1, 1, 7)
    flower = as_flower_strategy(strategy, max_iter=1, random_state=0)
    got = _one_round(flower, deltas, weights)
    expected = weights + weighted_mean([d for d, _, _ in deltas.values()], [10, 30, 60])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert flower.history[0].replied == 3


def test_robust_aggregate_is_vflinks_median() -> None:
    deltas = _deltas(1)
    weights = np.zeros(7)
    flower = as_flower_strategy("fedavg", aggregator="median", max_iter=1)
    got = _one_round(flower, deltas, weights)
    np.testing.assert_allclose(got, coordinate_median([d for d, _, _ in deltas.values()]))


def test_client_dp_mean_and_ledger_match_vflinks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("horizontal.privacy.gaussian_noise", lambda size, sigma: np.zeros(size))
    deltas = _deltas(2)
    weights = np.zeros(7)
    privacy = ClientDP(noise_multiplier=1.1, clip=0.5)
    rounds = 3
    params = {"max_iter": rounds, "standardize": False, "classes": [0, 1], "privacy": privacy}
    flower = as_flower_strategy("fedavg", **params)
    flower.begin(["a", "b", "c"], nodes={"a": 1, "b": 2, "c": 3})
    for r in range(1, rounds + 1):
        messages = list(
            flower.configure_train(
                r, ArrayRecord({"weights": Array(weights)}), ConfigRecord(), None
            )
        )
        arrays, _ = flower.aggregate_train(r, _replies(flower, messages, deltas))
        new = arrays["weights"].numpy()
        clipped = sum(clip_to_norm(d, 0.5)[0] for d, _, _ in deltas.values())
        np.testing.assert_allclose(new, weights + clipped / 3, atol=1e-12)  # (sum + 0) / (q N)
        weights = new
    # vflink's own fit with the same settings spends the same epsilon
    train, _ = _cohort()
    own = FederatedClassifier(module="linear", random_state=0, **params)
    own.fit(train)
    assert largest_epsilon(flower.ledger, ["a", "b", "c"]) == pytest.approx(own.epsilon_)
    assert len(flower.ledger) == rounds


# -- the whole protocol in this process ---------------------------------------------------------


class _InProcessGrid:
    """A stand-in for Flower's grid: messages go straight to a ClientApp per node."""

    def __init__(self, app: Any, partitions: int) -> None:
        self.app = app
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={"partition-id": node - 1, "num-partitions": partitions},
                state=RecordDict(),
                run_config={},
            )
            for node in range(1, partitions + 1)
        }

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float) -> list[Message]:
        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            out.append(self.app(msg, self.contexts[node]))  # the reply's source: node
        return out


def _loader(train: dict[str, Any]) -> Any:
    names = sorted(train)

    def load(context: Context) -> tuple[str, Any, Any]:
        name = names[int(context.node_config["partition-id"])]
        return (name, *train[name])

    return load


@pytest.mark.parametrize("strategy", ["fedavg", FedProx(mu=0.05)])
def test_flower_protocol_in_process_trains_vflinks_model(strategy: Any) -> None:
    train, held_out = _cohort()
    params = {
        "module": "linear",
        "max_iter": 3,
        "learning_rate": 0.1,
        "strategy": strategy,
        "random_state": 0,
    }
    grid = _InProcessGrid(client_app(FederatedClassifier(**params), _loader(train)), 2)
    model = run_server(grid, FederatedClassifier(**params), min_nodes=2, timeout=60)
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(model.weights_, own.weights_, atol=1e-5)
    x, y = held_out.drop(columns=[LABEL]), held_out[LABEL]
    auc = roc_auc_score(y, model.predict_proba(x)[:, 1])
    assert auc == pytest.approx(roc_auc_score(y, own.predict_proba(x)[:, 1]), abs=1e-4)
    assert auc > 0.7
    assert len(model.history_) == 3


def test_unsupported_settings_are_refused() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from horizontal import SecAggConfig

    keys = {
        n: Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        for n in ("a", "b")
    }
    with pytest.raises(ValueError, match="identities"):
        as_flower_strategy(
            "fedavg", max_iter=1, protocol=SecAggConfig(threshold=2, identities=keys)
        ).begin(["a", "b"])
    # the estimators' "auto" defaults end a fit at a round Flower does not know in advance
    with pytest.raises(ValueError, match="FedLBFGS"):
        as_flower_strategy("auto", module="linear", max_iter=5).begin(["a", "b"])
    with pytest.raises(ValueError, match="early stopping"):
        as_flower_strategy("fedavg").begin(["a", "b"])
    with pytest.raises(ValueError, match="standardisation under DP"):
        as_flower_strategy(
            "fedavg", max_iter=2, privacy=ClientDP(noise_multiplier=1.0), classes=[0, 1]
        ).begin(["a", "b"])
    with pytest.raises(ValueError, match="engine must be"):
        FederatedClassifier(max_iter=1).fit(_cohort()[0], engine="ray")


def test_compression_on_flower_gives_the_simulations_model() -> None:
    """Top-k with error feedback: the indices travel in an ArrayRecord, each client's
    residual stays in its node's state between rounds, and three rounds give vflink's own
    model (the residual mattered: without it the model differs). 16-bit stochastic codes
    travel as bytes with their grid: the model is the simulation's to the codes' rounding
    (each code is off by less than one grid step, 2**-16 of an update's range)."""
    train, _ = _cohort()
    base = {"module": "linear", "max_iter": 3, "learning_rate": 0.1, "random_state": 0}
    for compression, atol in ((0.2, 1e-5), (16, 1e-3)):
        params = base | {"compression": compression, "local_epochs": 2}
        grid = _InProcessGrid(client_app(FederatedClassifier(**params), _loader(train)), 2)
        model = run_server(grid, FederatedClassifier(**params), min_nodes=2, timeout=60)
        own = FederatedClassifier(**params).fit(train)
        np.testing.assert_allclose(model.weights_, own.weights_, atol=atol)
        assert model.history_[-1]["drift"] == pytest.approx(own.history_[-1]["drift"], abs=atol)
        if isinstance(compression, float):
            for context in grid.contexts.values():
                kept = context.state.array_records["vflink-topk-residual"]["residual"].numpy()
                assert kept.shape == own.weights_.shape and np.abs(kept).max() > 0
            dense = FederatedClassifier(**(params | {"compression": None})).fit(train)
            assert np.abs(dense.weights_ - own.weights_).max() > 1e-3


def test_scaffold_keeps_each_clients_control_variate_in_its_node_state() -> None:
    """Scaffold on Flower: the server's control variate travels down, each client's change up,
    and each client's own ``c_k`` stays in its node's ``context.state`` from round to round
    (Flower starts a process per message): three rounds give vflink's own model."""
    from horizontal import Scaffold

    train, _ = _cohort()
    params = {"module": "linear", "max_iter": 3, "strategy": Scaffold(), "random_state": 0}
    params |= {"learning_rate": 0.1, "local_epochs": 2}
    grid = _InProcessGrid(client_app(FederatedClassifier(**params), _loader(train)), 2)
    model = run_server(grid, FederatedClassifier(**params), min_nodes=2, timeout=60)
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(model.weights_, own.weights_, atol=1e-5)
    fedavg = FederatedClassifier(**(params | {"strategy": "fedavg"})).fit(train)
    assert np.abs(fedavg.weights_ - own.weights_).max() > 1e-3  # the control variates mattered
    for context in grid.contexts.values():
        kept = context.state.array_records["vflink-own-control"]["control"].numpy()
        assert kept.shape == own.weights_.shape and np.abs(kept).max() > 0


def test_local_dp_spends_reach_the_servers_ledger_as_in_vflink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LocalDP on Flower: each client clips and noises its own update and records its spend
    in a ledger of its own; the reply carries the spends (vflink's wire format), which the
    server's ledger records under the client's name. With the noise at zero the model is
    vflink's; the ledger gives the same epsilon."""
    from horizontal import LocalDP

    monkeypatch.setattr("horizontal.privacy.gaussian_noise", lambda size, sigma: np.zeros(size))
    train, _ = _cohort()
    privacy = LocalDP(noise_multiplier=1.5, clip=0.05)
    params = {"module": "linear", "max_iter": 2, "strategy": "fedavg", "random_state": 0}
    params |= {"learning_rate": 0.1, "privacy": privacy, "standardize": False, "classes": [0, 1]}
    grid = _InProcessGrid(client_app(FederatedClassifier(**params), _loader(train)), 2)
    model = run_server(grid, FederatedClassifier(**params), min_nodes=2, timeout=60)
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(model.weights_, own.weights_, atol=1e-5)
    assert len(model.privacy_ledger_) == len(own.privacy_ledger_) == 4  # 2 clients x 2 rounds
    assert sorted(model.privacy_ledger_.holders()) == sorted(own.privacy_ledger_.holders())
    assert model.epsilon_ == pytest.approx(own.epsilon_)


class _DroppingGrid(_InProcessGrid):
    """The in-process grid, recording every reply; ``drop`` (a node) stops answering after
    ``after`` secure-aggregation steps (``after=-1``: from its train message on), as a
    SuperNode that went away."""

    def __init__(self, app: Any, partitions: int, drop: int | None = None, after: int = 0) -> None:
        super().__init__(app, partitions)
        self.drop, self.after, self.steps = drop, after, 0
        self.replies: list[Message] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float) -> list[Message]:
        from flwr.app import Error

        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            relay = "relay-tags" in msg.content.config_records.get("config", {})
            train = msg.metadata.message_type == "train"
            if node == self.drop and (relay or (train and self.after < 0)):
                self.steps += 1
                if self.steps > self.after:
                    out.append(Message(Error(code=0, reason="gone"), reply_to=msg))
                    continue
            out.append(self.app(msg, self.contexts[node]))
        self.replies += out
        return out


@pytest.mark.parametrize("strategy", ["fedavg", "scaffold"])
def test_secure_aggregation_over_flowers_messages_gives_the_simulations_model(
    strategy: str,
) -> None:
    """vflink's secure aggregation relayed by Flower's messages, every client step a fresh
    ClientApp call (its secrets drawn again from the key in its node state): ten clients,
    two rounds, the simulation's model; no reply carries an array (no update leaves a client
    in the clear), and each node's round state is cleared after the round."""
    from horizontal import Scaffold, SecAggConfig

    cohort = make_hospital_cohort(10, 100, random_state=1)
    train = {name: (f.drop(columns=[LABEL]), f[LABEL]) for name, f in cohort.items()}
    params = {"module": "linear", "max_iter": 2, "learning_rate": 0.1, "random_state": 0}
    params |= {"protocol": SecAggConfig(threshold=6), "timeout": 60}
    params["strategy"] = Scaffold() if strategy == "scaffold" else "fedavg"
    grid = _DroppingGrid(client_app(FederatedClassifier(**params), _loader(train)), 10)
    model = run_server(grid, FederatedClassifier(**params), min_nodes=10, timeout=60)
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(model.weights_, own.weights_, atol=1e-6)
    trained = [r for r in grid.replies if "relay-tags" in r.content.config_records["config"]]
    assert trained and all(not r.content.array_records for r in trained)
    for context in grid.contexts.values():
        assert "vflink-secagg" not in context.state.config_records


def test_a_client_gone_mid_round_is_a_dropout_the_secure_sum_survives() -> None:
    """A SuperNode that sends its shares, then stops answering (before its masked input): the
    survivors reveal its mask key's shares, the server removes its pairwise masks, and the
    round is the nine others' FedAvg -- what the plain protocol gives when the same node
    never answers its train message."""
    from horizontal import SecAggConfig

    cohort = make_hospital_cohort(10, 100, random_state=1)
    train = {name: (f.drop(columns=[LABEL]), f[LABEL]) for name, f in cohort.items()}
    params = {"module": "linear", "max_iter": 1, "learning_rate": 0.1, "random_state": 0}
    params |= {"strategy": "fedavg", "timeout": 60, "min_clients": 8}
    secure = params | {"protocol": SecAggConfig(threshold=6)}
    grid = _DroppingGrid(client_app(FederatedClassifier(**secure), _loader(train)), 10, 3, 1)
    model = run_server(grid, FederatedClassifier(**secure), min_nodes=10, timeout=60)
    assert model.rounds_[0].replied == 9
    plain = _DroppingGrid(client_app(FederatedClassifier(**params), _loader(train)), 10, 3, -1)
    nine = run_server(plain, FederatedClassifier(**params), min_nodes=10, timeout=60)
    assert nine.rounds_[0].replied == 9
    np.testing.assert_allclose(model.weights_, nine.weights_, atol=1e-6)
    everyone = FederatedClassifier(**params).fit(train)
    assert not np.allclose(model.weights_, everyone.weights_, atol=1e-4)


# -- SuperLink and SuperNodes on loopback --------------------------------------------------------


def _flower_processes() -> list[int]:
    """Processes of Flower's running on this machine (SuperLink, SuperNodes, their apps)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if any(name in command for name in (b"flower-superlink", b"flower-supernode", b"flwr-")):
            found.append(int(entry.name))
    return found


@pytest.mark.network
def test_ten_supernodes_train_scaffold_as_the_simulation_and_leave_no_process() -> None:
    """``fit(engine="flower")``: a SuperLink and ten SuperNodes as OS processes, Scaffold's
    control variates down and up: the simulation's model, then no Flower process left.

    One round, two nodes sampled: Flower starts a ClientApp process per message (about
    3.5 s of CPU each here, mostly imports; 2.4 s for a profile query, without torch), so
    each round of ten nodes would cost 35 s of CPU;
    the control variates kept in a node's state across rounds are tested in process
    (``test_scaffold_keeps_each_clients_control_variate_in_its_node_state``)."""
    from horizontal import Scaffold

    before = set(_flower_processes())
    cohort = make_hospital_cohort(10, 150, random_state=0)
    train = {name: (f.drop(columns=[LABEL]), f[LABEL]) for name, f in cohort.items()}
    params = {"module": "linear", "max_iter": 1, "learning_rate": 0.1, "random_state": 0}
    # two of the ten nodes sampled for the round (cross-device style): every node is asked
    # for its profile, two train; fewer ClientApp processes keep the test's CPU down
    params |= {"strategy": Scaffold(), "local_epochs": 2, "timeout": 300, "client_fraction": 0.2}
    flower = FederatedClassifier(**params).fit(train, engine="flower")
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(flower.weights_, own.weights_, atol=1e-5)
    assert [(r.sampled, r.replied) for r in flower.rounds_] == [(2, 2)]
    x = train["hospital_1"][0]
    np.testing.assert_allclose(flower.predict_proba(x), own.predict_proba(x), atol=1e-5)
    assert list(flower.classes_) == list(own.classes_)
    assert not set(_flower_processes()) - before


def test_a_node_answering_as_another_client_is_refused() -> None:
    """Replies are attributed by Flower's node id: a node that names another client in its
    reply (to pass its update, control or privacy spends off as that client's) is refused."""
    strategy = as_flower_strategy("fedavg", max_iter=1, random_state=0)
    deltas = _deltas()
    strategy.begin(sorted(deltas), nodes={n: k + 1 for k, n in enumerate(sorted(deltas))})
    weights = np.zeros(7)
    messages = list(
        strategy.configure_train(1, ArrayRecord({"weights": Array(weights)}), ConfigRecord(), None)
    )
    replies = _replies(strategy, messages, deltas)
    replies[0].content.config_records["config"]["client"] = "b"  # node of "a" claims "b"
    with pytest.raises(ValueError, match="answered as 'b'"):
        strategy.aggregate_train(1, replies)


def test_local_dp_under_secure_aggregation_spends_as_in_vflink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LocalDP with secure aggregation on Flower: the clients' spends reach the server's
    ledger with their first step, before the round's sum; the ledger and the model are the
    simulation's (noise at zero); a node's round state is gone after the round."""
    from horizontal import LocalDP, SecAggConfig

    monkeypatch.setattr("horizontal.privacy.gaussian_noise", lambda size, sigma: np.zeros(size))
    train, _ = _cohort()
    params = {"module": "linear", "max_iter": 2, "strategy": "fedavg", "random_state": 0}
    params |= {"learning_rate": 0.1, "standardize": False, "classes": [0, 1], "timeout": 60}
    params |= {"privacy": LocalDP(noise_multiplier=1.5, clip=0.05)}
    params |= {"protocol": SecAggConfig(threshold=2)}
    grid = _DroppingGrid(client_app(FederatedClassifier(**params), _loader(train)), 2)
    model = run_server(grid, FederatedClassifier(**params), min_nodes=2, timeout=60)
    own = FederatedClassifier(**params).fit(train)
    np.testing.assert_allclose(model.weights_, own.weights_, atol=1e-6)
    assert len(model.privacy_ledger_) == len(own.privacy_ledger_) == 4
    assert model.epsilon_ == pytest.approx(own.epsilon_)
    assert all("vflink-secagg" not in c.state.config_records for c in grid.contexts.values())
