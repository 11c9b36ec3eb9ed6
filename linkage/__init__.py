"""Privacy-preserving record linkage: who is who, without showing identities.

Pure computation on data, no network, no other vflink package: each function is a step that a
data holder or a linkage unit runs, for protocols to drive.

* :mod:`linkage.schema` -- :class:`Schema` and :class:`Field`: which identity columns, of which
  kind, tokenised how;
* :mod:`linkage.encoding` -- :func:`encode`: record-level Bloom filters keyed by a shared secret;
* :mod:`linkage.matching` -- exact Dice similarity with a length filter, one-to-one
  :func:`match` with an automatic threshold, :func:`link`, :func:`evaluate`;
* :mod:`linkage.psi` -- private set intersection on exact IDs (ECDH over X25519, or a keyed-hash
  join), :func:`psi_intersection`.

Still to come (issue 4): blocking (LSH, keyed blocking keys), hardening options (salting,
balancing, XOR-folding, BLIP), optimal one-to-one assignment, score plots.
"""

from linkage.encoding import Encodings, encode
from linkage.matching import auto_threshold, dice_pairs, evaluate, link, match
from linkage.psi import EcdhPsiParty, hmac_tokens, intersect, normalize_ids, psi_intersection
from linkage.schema import Field, Schema

__all__ = [
    "EcdhPsiParty",
    "Encodings",
    "Field",
    "Schema",
    "auto_threshold",
    "dice_pairs",
    "encode",
    "evaluate",
    "hmac_tokens",
    "intersect",
    "link",
    "match",
    "normalize_ids",
    "psi_intersection",
]
