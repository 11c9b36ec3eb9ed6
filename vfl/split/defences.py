"""What split learning can do to limit what crosses a party boundary, each an option of the
estimators, each with the privacy it buys stated (and, where one applies, its epsilon in the
ledger):

* :class:`EmbeddingNoise` -- a data party clips each row's embedding to L2 norm ``clip`` and
  adds Gaussian noise before sending it (Gaussian mechanism per row and epoch: the ledger
  records ``epochs`` releases for changing one row's features, L2 sensitivity ``2 clip``).
  Under the protected layer (:mod:`vfl.split.interactive`) it applies as well, before the
  layer: the label party decrypts ``z = (clip(h) + noise) W``, which is what blurs the
  pairwise geometry ``z`` otherwise keeps of ``h`` (the ``"embedding-geometry"`` audit,
  :class:`vfl.audit.split.EmbeddingGeometryAudit`). It covers training only:
  ``predict_proba`` sends exact embeddings (or, protected, the exact ``z``) of the rows it
  scores, outside the ledger's account (scoring the training rows would release them
  again);
* :func:`match_norms` (``gradient_protection="norm"``) -- the label party adds noise to the
  gradients it returns so that every row's gradient has, in expectation, the batch's largest
  norm: the norm-scoring attack of Li et al. 2021 then sees equal norms (a heuristic: no
  epsilon);
* :func:`vfl.privacy.randomized_response` (``privacy=RandomizedResponse(epsilon)``) -- the
  label party trains on labels kept with probability ``e^eps / (e^eps + K - 1)`` and
  otherwise replaced by another class drawn uniformly: epsilon-label-DP for everything
  computed from them, recorded in the ledger (:func:`vfl.privacy.record_randomized_response`);
* :class:`Quantizer` (``compression="float16"`` or a bit count) -- embeddings and gradients
  sent as float16, or stochastically rounded to ``bits``-bit integers with a per-message
  offset and scale (unbiased); fewer bytes, not privacy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vfl.extras import optional
from vfl.privacy.checks import check_positive_finite

if TYPE_CHECKING:
    import torch
else:
    torch = optional("torch", for_=__name__)

__all__ = [
    "EmbeddingNoise",
    "Quantizer",
    "match_norms",
]


@dataclass(frozen=True)
class EmbeddingNoise:
    """Clip each row's embedding to ``clip`` and add ``N(0, (noise_multiplier * 2 clip)^2)``
    per coordinate (noise from the OS), at the data party, on every training batch and the
    validation rows, before the embedding leaves it -- in plain split learning as sent, under
    the protected layer before the layer, so that the label party's ``z = h W`` becomes
    ``(clip(h) + noise) W``.

    Parameters
    ----------
    noise_multiplier : float
        The noise's standard deviation over the L2 sensitivity ``2 clip`` (unitless; the
        ledger's epsilon follows from it and the epochs).
    clip : float
        The largest L2 norm of a row's embedding (in the embedding's units).

    .. warning::
        The ledger's epsilon counts each row's own embedding, released once per epoch, with
        the bottom module held fixed. A row's features also move the bottom's weights, and
        through them the later embeddings of every row: that path is not bounded (the bottom
        trains without per-row gradient clipping and noise), so the epsilon understates what
        a long fit spends.
    """

    noise_multiplier: float = 1.0
    clip: float = 1.0

    def check(self) -> None:
        check_positive_finite("noise_multiplier", self.noise_multiplier)
        check_positive_finite("clip", self.clip)

    def apply(self, h: torch.Tensor) -> torch.Tensor:
        """The released embedding (differentiable in ``h`` through the clipping)."""
        from vfl.privacy.mechanisms import gaussian_noise

        norms = torch.linalg.vector_norm(h, dim=1, keepdim=True)
        clipped = h * torch.clamp(self.clip / (norms + 1e-12), max=1.0)
        sigma = self.noise_multiplier * 2 * self.clip
        noise = torch.as_tensor(gaussian_noise(tuple(h.shape), sigma=sigma), dtype=h.dtype)
        return clipped + noise

    def record(self, ledger: Any, party: str, epochs: int) -> None:
        ledger.record(
            holder=party,
            data="its features, through its embeddings (a row's, once per epoch)",
            mechanism="gaussian",
            noise_multiplier=self.noise_multiplier,
            sensitivity=2 * self.clip,
            steps=epochs,
        )


def match_norms(gradients: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Rows of ``gradients`` plus Gaussian noise giving each the batch's largest norm in
    expectation (``E||g + n||^2 = ||g||^2 + d sigma^2``); noise from the OS."""
    from vfl.privacy.mechanisms import gaussian_noise

    rows, dim = gradients.shape
    norms = np.linalg.norm(gradients, axis=1)
    top = float(norms.max()) if rows else 0.0
    sigma = np.sqrt(np.maximum(top**2 - norms**2, 0.0) / max(dim, 1))
    if not np.any(sigma > 0):
        return gradients
    unit = gaussian_noise((rows, dim), sigma=1.0)
    out: np.ndarray[Any, Any] = gradients + unit * sigma[:, None]
    return out


@dataclass(frozen=True)
class Quantizer:
    """``"float16"``, or ``bits``-bit unbiased stochastic rounding with a per-message offset
    and scale (``bits`` from 2 to 16); None sends float32."""

    kind: Any = None

    def check(self) -> None:
        if self.kind in (None, "float16"):
            return
        if (
            isinstance(self.kind, bool)
            or not isinstance(self.kind, int)
            or not 2 <= self.kind <= 16
        ):
            raise ValueError(
                'compression must be None, "float16" or a bit count from 2 to 16, got '
                f"{self.kind!r}"
            )

    def pack(self, values: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], float, float]:
        """``(payload, offset, scale)``; ``unpack`` inverts it (exactly for float32)."""
        if self.kind is None:  # the wire format copies it: no copy here
            return values.astype(np.float32, copy=False), 0.0, 1.0
        if self.kind == "float16":
            return values.astype(np.float16), 0.0, 1.0
        levels = (1 << int(self.kind)) - 1
        low, high = float(values.min(initial=0.0)), float(values.max(initial=0.0))
        scale = (high - low) / levels or 1.0
        position = (values - low) / scale
        rounded = np.floor(position + np.random.default_rng().random(values.shape))
        dtype = np.uint8 if self.kind <= 8 else np.uint16
        return np.clip(rounded, 0, levels).astype(dtype), low, scale

    @staticmethod
    def unpack(payload: np.ndarray[Any, Any], offset: float, scale: float) -> np.ndarray[Any, Any]:
        """The float32 values ``payload`` carries (a new array: ``payload`` is not changed)."""
        if offset == 0.0 and scale == 1.0:  # float32 or float16: the values themselves
            return payload.astype(np.float32)
        out: np.ndarray[Any, Any] = payload.astype(np.float32) * np.float32(scale) + np.float32(
            offset
        )
        return out
