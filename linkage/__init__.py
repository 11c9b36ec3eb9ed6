"""Privacy-preserving record linkage: who is who, without showing identities.

Pure computation on data, no network, no other vflink package: each function is a step that a
data holder or a linkage unit runs, for protocols to drive.

* :mod:`linkage.schema` -- :class:`Schema` and :class:`Field`: which identity columns, of which
  kind, tokenised how;
* :mod:`linkage.encoding` -- :func:`encode`: record-level Bloom filters keyed by a shared secret;
* :mod:`linkage.blocking` -- candidate pairs without all pairs: Hamming LSH
  (:class:`LshBlocking`) or keyed blocking keys (:class:`KeyBlocking`), :func:`block`;
* :mod:`linkage.matching` -- exact Dice similarity with a length filter, one-to-one
  :func:`match` (greedy or optimal) with an automatic threshold, :func:`link`,
  :func:`evaluate`, :func:`plot_scores`;
* :mod:`linkage.threshold` -- the automatic threshold (:func:`auto_threshold`, estimated
  precision and recall from decoy false links) and the greedy solver;
* :mod:`linkage.multiparty` -- :func:`match_many`: three or more parties' records in clusters
  of at most one record per party;
* :mod:`linkage.psi` -- private set intersection on exact IDs (ECDH over X25519, or a keyed-hash
  join), :func:`psi_intersection`;
* :mod:`linkage.unbalanced` -- unbalanced PSI for a small set against a very large one (an
  OPRF, 2HashDH over P-256): :class:`UnbalancedPsiServer` prepares its set once offline,
  :class:`UnbalancedPsiClient` queries it at a cost that grows with the small set only;
  :func:`unbalanced_psi`;
* :mod:`linkage.audit` -- :func:`frequency_attack`: how many records an attacker holding the
  encodings and public value frequencies, not the secret, re-identifies.

"""

from __future__ import annotations

import pkgutil
from typing import TYPE_CHECKING

from linkage.lazy import lazy_exports

_EXPORTS = {
    "FrequencyAttackResult": "linkage.audit",
    "frequency_attack": "linkage.audit",
    "Candidates": "linkage.blocking",
    "KeyBlocking": "linkage.blocking",
    "LshBlocking": "linkage.blocking",
    "block": "linkage.blocking",
    "CollisionWarning": "linkage.encoding",
    "Encodings": "linkage.encoding",
    "InvalidValueWarning": "linkage.encoding",
    "encode": "linkage.encoding",
    "dice_pairs": "linkage.matching",
    "dice_scores": "linkage.matching",
    "evaluate": "linkage.matching",
    "link": "linkage.matching",
    "match": "linkage.matching",
    "plot_scores": "linkage.matching",
    "match_many": "linkage.multiparty",
    "EcdhPsiParty": "linkage.psi",
    "hmac_tokens": "linkage.psi",
    "intersect": "linkage.psi",
    "normalize_ids": "linkage.psi",
    "psi_intersection": "linkage.psi",
    "Field": "linkage.schema",
    "Schema": "linkage.schema",
    "ThresholdEstimate": "linkage.threshold",
    "auto_threshold": "linkage.threshold",
    "OfflineSet": "linkage.unbalanced",
    "QueryLimitError": "linkage.unbalanced",
    "UnbalancedPsiClient": "linkage.unbalanced",
    "UnbalancedPsiServer": "linkage.unbalanced",
    "unbalanced_psi": "linkage.unbalanced",
}

if TYPE_CHECKING:
    from linkage.audit import FrequencyAttackResult, frequency_attack
    from linkage.blocking import Candidates, KeyBlocking, LshBlocking, block
    from linkage.encoding import CollisionWarning, Encodings, InvalidValueWarning, encode
    from linkage.matching import (
        dice_pairs,
        dice_scores,
        evaluate,
        link,
        match,
        plot_scores,
    )
    from linkage.multiparty import match_many
    from linkage.psi import EcdhPsiParty, hmac_tokens, intersect, normalize_ids, psi_intersection
    from linkage.schema import Field, Schema
    from linkage.threshold import ThresholdEstimate, auto_threshold
    from linkage.unbalanced import (
        OfflineSet,
        QueryLimitError,
        UnbalancedPsiClient,
        UnbalancedPsiServer,
        unbalanced_psi,
    )

__all__ = [
    "Candidates",
    "CollisionWarning",
    "EcdhPsiParty",
    "Encodings",
    "Field",
    "FrequencyAttackResult",
    "InvalidValueWarning",
    "KeyBlocking",
    "LshBlocking",
    "OfflineSet",
    "QueryLimitError",
    "Schema",
    "ThresholdEstimate",
    "UnbalancedPsiClient",
    "UnbalancedPsiServer",
    "auto_threshold",
    "block",
    "dice_pairs",
    "dice_scores",
    "encode",
    "evaluate",
    "frequency_attack",
    "hmac_tokens",
    "intersect",
    "link",
    "match",
    "match_many",
    "normalize_ids",
    "plot_scores",
    "psi_intersection",
    "unbalanced_psi",
]


# an exported name, or a submodule, is imported on first use (PEP 562): ``import linkage`` and
# linkage.executors, which worker processes import, load no pandas
__getattr__, __dir__ = lazy_exports(
    __name__, globals(), _EXPORTS, submodules=(m.name for m in pkgutil.iter_modules(__path__))
)
