"""Privacy-preserving record linkage: who is who, without showing identities.

Pure computation on data, no network, no other vflink package: each function is a step that a
data holder or a linkage unit runs, for protocols to drive.

Available now: private set intersection on exact IDs (:mod:`linkage.psi`: ECDH over X25519,
or a keyed-hash join). Bloom-filter encodings, blocking, matching and quality evaluation are
being built (issue 4).
"""

from linkage.psi import EcdhPsiParty, hmac_tokens, intersect, normalize_ids, psi_intersection

__all__ = ["EcdhPsiParty", "hmac_tokens", "intersect", "normalize_ids", "psi_intersection"]
