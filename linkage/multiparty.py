"""Linking the encodings of three or more data holders into clusters of one record per party.

A linkage unit that receives the encodings of a lab network, an imaging centre and a genomics
centre wants each patient once: a *cluster* of at most one record from each party. Linking
every party to one anchor (a star) loses every patient the anchor spelled badly, and linking
all pairs independently can chain two records of the same party into one patient.
:func:`match_many` does what anonlink's multi-party greedy solver does, in two steps:

1. every pair of parties is matched one-to-one (:func:`linkage.match`, each pair with its own
   automatic threshold unless one is given), which gives scored edges between records;
2. the edges of all pairs are taken best first, and each joins the clusters of its two records
   unless the joined cluster would hold two records of one party.

A patient whose record at one party is badly typo'd still joins the others' cluster through
any party that scores it well; a cluster never holds two records of one party. What the
linkage unit learns is what two-party linkage shows it (scores and links between encodings,
never identities), for every pair of parties.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from linkage.encoding import Encodings
from linkage.matching import match

__all__ = ["match_many"]


def _pairs(parties: list[str]) -> list[tuple[str, str]]:
    return [(p, q) for i, p in enumerate(parties) for q in parties[i + 1 :]]


def match_many(
    encodings: Mapping[str, Encodings],
    *,
    threshold: float | Mapping[tuple[str, str], float] | None = None,
    floor: float = 0.5,
    blocking: Any = "auto",
    min_size: int = 2,
) -> pd.DataFrame:
    """Cluster the records of several parties, at most one record per party per cluster.

    Parameters
    ----------
    encodings : mapping of party name to Encodings
        Two or more parties' encodings, made with the same schema and secret.
    threshold : float, mapping or None
        One threshold for every pair of parties, a mapping ``{(p, q): t}`` per pair (either
        order; a pair left out gets its automatic threshold), or None for each pair's
        automatic threshold (:func:`linkage.match`).
    floor, blocking
        As in :func:`linkage.match`.
    min_size : int
        Smallest cluster returned (2: records linked to at least one other party; the number
        of parties: patients held by all).

    Returns
    -------
    pandas.DataFrame
        One row per cluster, one column per party holding the row label of its record (None
        where the party has none; object columns, so integer labels stay integers), and
        ``size``. ``attrs["pairs"]`` maps each pair of parties
        to its threshold and its number of links; ``attrs["rejected"]`` counts edges not used
        because they would have put two records of one party in a cluster;
        ``attrs["ambiguous"]`` the clusters holding a link that was a tie
        (``match``'s ``ambiguous_links``).
    """
    parties = list(encodings)
    if len(parties) < 2:
        raise ValueError(f"multi-party linkage needs two or more parties, got {parties}")
    if min_size < 2 or min_size > len(parties):
        raise ValueError(f"min_size must be between 2 and {len(parties)}, got {min_size}")
    if isinstance(threshold, Mapping):
        known = {frozenset(pair) for pair in _pairs(parties)}
        unknown = [pair for pair in threshold if frozenset(pair) not in known]
        if unknown:
            raise ValueError(
                f"thresholds for {unknown}: not pairs of the parties {parties}; key them "
                "('lab', 'imaging')"
            )
        per_pair = {frozenset(pair): t for pair, t in threshold.items()}
    offset = {p: 0 for p in parties}
    total = 0
    for p in parties:
        offset[p] = total
        total += len(encodings[p])
    edges_u, edges_v, edges_s, edges_tied = [], [], [], []
    pairs: dict[tuple[str, str], dict[str, float]] = {}
    for p, q in _pairs(parties):
        chosen = per_pair.get(frozenset((p, q))) if isinstance(threshold, Mapping) else threshold
        try:
            links = match(
                encodings[p], encodings[q], threshold=chosen, floor=floor, blocking=blocking
            )
        except ValueError as exc:
            raise ValueError(f"linking {p!r} with {q!r}: {exc}") from None
        rows_p = encodings[p].index.get_indexer(pd.Index(links["a"]))
        rows_q = encodings[q].index.get_indexer(pd.Index(links["b"]))
        tied = np.zeros(len(links), dtype=bool)
        tied[links.attrs["ambiguous_links"]] = True
        edges_u.append(rows_p + offset[p])
        edges_v.append(rows_q + offset[q])
        edges_s.append(links["score"].to_numpy(dtype=float))
        edges_tied.append(tied)
        pairs[(p, q)] = {"threshold": links.attrs["threshold"], "links": float(len(links))}
    u, v = np.concatenate(edges_u), np.concatenate(edges_v)
    scores, tied_edge = np.concatenate(edges_s), np.concatenate(edges_tied)
    party_of = np.repeat(np.arange(len(parties)), [len(encodings[p]) for p in parties])
    parent = np.arange(total)
    members: dict[int, int] = {}  # root -> bit set of the parties in its cluster
    ambiguous: set[int] = set()

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = int(parent[x])
        return x

    rejected = 0
    for k in np.lexsort((v, u, -scores)).tolist():
        ru, rv = root(int(u[k])), root(int(v[k]))
        if ru == rv:
            continue
        set_u = members.get(ru, 1 << int(party_of[ru]))
        set_v = members.get(rv, 1 << int(party_of[rv]))
        if set_u & set_v:
            rejected += 1
            continue
        parent[rv] = ru
        members[ru] = set_u | set_v
        members.pop(rv, None)
        if tied_edge[k] or rv in ambiguous:
            ambiguous.add(ru)
        ambiguous.discard(rv)
    roots = np.array([root(x) for x in range(total)])
    frame = pd.DataFrame({"root": roots, "party": party_of, "row": np.arange(total)})
    sizes = frame.groupby("root")["row"].transform("size")
    frame = frame[sizes >= min_size]
    labels: dict[str, Any] = {}
    cluster_roots = np.unique(frame["root"].to_numpy())
    for j, p in enumerate(parties):
        mine = frame[frame["party"] == j]
        held = pd.Series(mine["row"].to_numpy() - offset[p], index=mine["root"].to_numpy())
        position = held.reindex(cluster_roots).to_numpy()
        found = ~np.isnan(position)
        column = np.full(len(cluster_roots), None, dtype=object)  # keeps the labels' type
        column[found] = np.asarray(encodings[p].index, dtype=object)[position[found].astype(int)]
        labels[p] = column
    result: pd.DataFrame = pd.DataFrame(labels, columns=parties)
    result["size"] = result[parties].notna().sum(axis=1)
    result.attrs.update(
        pairs=pairs,
        rejected=rejected,
        ambiguous=len(ambiguous.intersection(cluster_roots.tolist())),
        ambiguous_clusters=np.flatnonzero(np.isin(cluster_roots, list(ambiguous))),
    )
    return result
