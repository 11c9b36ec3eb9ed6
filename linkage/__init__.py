"""Privacy-preserving record linkage: who is who, without showing identities.

Pure computation on data, no network, no other vflink package. Bloom-filter encodings,
blocking, matching and private set intersection arrive with issue 4; this package holds nothing
yet.
"""

__all__: list[str] = []
