"""``[job.params]`` as the jobs read it (:mod:`vfl.jobs`, :mod:`transfer.jobs`): the
``privacy`` and ``protocol`` tables, and the short spellings of older configs translated
without a deprecation warning."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from vfl.jobs import LINEAR, LOGISTIC, SPLIT
from vfl.privacy import GaussianLabelDP, RandomizedResponse


def quietly(job: Any, **params: Any) -> Any:
    """The job's estimator, any FutureWarning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        return job.make(**params)


def test_the_short_spellings_of_older_configs_build_the_objects_without_a_warning() -> None:
    pytest.importorskip("torch")
    from vfl.split import EmbeddingNoise, ProtectedLayer

    model = quietly(LOGISTIC, label_epsilon=4.0, row_clip=2.0, protocol="coordinator")
    assert model.privacy == GaussianLabelDP(4.0, delta=1e-5, row_clip=2.0)
    assert quietly(LINEAR, label_delta=1e-3).privacy is None  # only with label_epsilon
    model = quietly(
        SPLIT,
        protected_layer={"key_bits": 512, "insecure": True},
        label_epsilon=2.0,
        embedding_noise={"clip": 2.0},
    )
    assert model.protocol == ProtectedLayer(key_bits=512, insecure=True)
    assert model.privacy == (RandomizedResponse(2.0), EmbeddingNoise(clip=2.0))
    assert quietly(SPLIT, protected_layer=True).protocol == "protected"
    assert quietly(SPLIT, protected_layer=False).protocol == "plain"


def test_privacy_and_protocol_tables() -> None:
    pytest.importorskip("torch")
    from vfl.split import EmbeddingNoise, ProtectedLayer

    table = {"mechanism": "gaussian_label_dp", "epsilon": 3.0, "delta": 1e-6}
    assert quietly(LOGISTIC, privacy=table).privacy == GaussianLabelDP(3.0, delta=1e-6)
    model = quietly(
        SPLIT,
        protocol={"key_bits": 1024},
        privacy=[
            {"mechanism": "randomized_response", "epsilon": 1.0},
            {"mechanism": "EmbeddingNoise", "clip": 1.5},  # the class name works too
        ],
    )
    assert model.protocol == ProtectedLayer(key_bits=1024)
    assert model.privacy == (RandomizedResponse(1.0), EmbeddingNoise(clip=1.5))
    assert quietly(SPLIT, protocol="protected").protected_layer == ProtectedLayer()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"privacy": {"mechanism": "laplace", "epsilon": 1.0}}, "mechanism must be one of"),
        ({"privacy": {"epsilon": 1.0}}, "a table with a mechanism"),
        ({"privacy": {"mechanism": "randomized_response", "eps": 1.0}}, "eps"),
        (
            {"label_epsilon": 1.0, "privacy": {"mechanism": "randomized_response", "epsilon": 1}},
            "not both",
        ),
        ({"protected_layer": True, "protocol": "plain"}, "not both"),
        ({"protected_layer": "yes"}, "true, false or a table"),
    ],
)
def test_conflicting_or_unknown_entries_are_refused(params: dict[str, Any], message: str) -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=message):
        SPLIT.make(**params)


def test_the_transfer_job_reads_the_same_tables_and_its_short_spellings() -> None:
    pytest.importorskip("torch")
    from transfer.jobs import TRANSFER

    model = quietly(TRANSFER, label_epsilon=2.0, secure=False, hidden=[8, 4])
    assert (model.protocol, model.privacy) == ("plain", RandomizedResponse(2.0))
    assert model.hidden_layer_sizes == (8, 4)
    table = {"mechanism": "randomized_response", "epsilon": 1.0}
    model = quietly(TRANSFER, privacy=table, hidden_layer_sizes=[4])
    assert (model.privacy, model.hidden_layer_sizes) == (RandomizedResponse(1.0), (4,))
    with pytest.raises(ValueError, match="not both"):
        TRANSFER.make(secure=True, protocol="masked")
