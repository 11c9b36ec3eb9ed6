"""SecureBoost's roles: the label party grows the trees, each other party builds encrypted
histograms of its own columns and keeps its splits.

After Cheng, Fan, Jin, Liu, Chen, Papadopoulos and Yang, "SecureBoost: A Lossless Federated
Learning Framework" (IEEE Intelligent Systems, 2021). Per tree:

1. the label party (L) computes each row's gradients and hessians (fixed point, ``FG``
   fractional bits; one pair per output), packs a row's pairs into the signed slots of one
   plaintext and sends them encrypted under its key to every other party (a host, H), each
   host's copy with that host's base (:meth:`~vfl.crypto.PaillierPrivateKey.for_base`);
2. level by level, L sends each host the rows of the nodes to build (the smaller of two
   siblings: L derives the other from the parent's histogram, in the clear); the host
   multiplies the ciphertexts of each bin's rows, column by column, packs the bins' sums
   several to a ciphertext (Horner's rule on ciphertexts), re-randomises them in its base's
   group and sends them; L decrypts the sums only and picks each node's best split across
   every party's columns (:func:`vfl.boost.tree.grow`);
3. where a host's column wins, L sends it the node's rows and the split (column index, bin
   index, missing side); the host keeps the split in its table and answers with the split's
   id and which of the node's rows go left. The threshold (the bin's cut) never leaves it.

Scoring: L holds the trees (owners, split ids, leaf weights); each host sends, for every split
id in its table, which of the scored rows its split sends left; L routes the rows.

What each party learns. L: every host's bin sums of ``G`` and ``H`` per node, hence the
column and bin of each split (not the value), and each host's left/right decision for every
row at its splits. A host: the rows of every node it builds a histogram for or splits (the
*instance space*): SecureBoost's known leak, through which it learns something of the labels
(an audit measures it). Nothing else: the gradients arrive encrypted, the sums leave
encrypted. Semi-honest parties.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import gmpy2
import numpy as np
import pandas as pd

from vfl.boost.bins import BinMapper
from vfl.boost.objectives import CLIP, Objective
from vfl.boost.splits import Candidate, SplitRule
from vfl.boost.tree import FG, LocalSource, SplitTable, Tree, grow, histogram, to_fixed
from vfl.crypto import parallel, slots
from vfl.crypto.kernels import bin_products, horner_pack
from vfl.crypto.keys import PaillierPrivateKey, PaillierPublicKey
from vfl.crypto.messages import Encrypted
from vfl.crypto.packing import RowPacking, unpack_signed
from vfl.crypto.policy import Base, KeyPolicy, PublicKeyMessage, vector_from
from vfl.federation.base import Federation
from vfl.federation.messages import Message, Namespace
from vfl.privacy.mechanisms import gaussian_noise
from vfl.progress import EpochProgress

__all__ = [
    "BOOST",
    "BoostSpec",
    "HostResult",
    "HostRole",
    "LabelResult",
    "LabelRole",
    "gh_packing",
]

BOOST = Namespace("boost")
"""The tags of SecureBoost (``boost/cmd``, ``boost/gh/<tree>``, ...)."""

GB = 7
"""Bits of a gradient's magnitude (logistic and softmax: below 1; squared error: clipped at
64)."""

DECRYPT_THREADS = 2


@dataclass(frozen=True)
class BoostSpec:
    """What every role of a fit agrees on."""

    label_party: str
    parties: tuple[str, ...]
    n_estimators: int
    max_depth: int
    learning_rate: float
    rule: SplitRule
    max_bin: int
    policy: KeyPolicy | None  # None: the plaintext simulation (no encryption)
    rows: int
    workers: Any = 1
    """Each party's worker processes (or executor) for its share of the ciphertext work: the
    label party's encryptions, a host's bin products."""
    validation: np.ndarray | None = None
    """Early stopping: the positions of the rows the label party holds out (None: off). Only
    the label party is given them; a host learns them only as rows of the nodes it splits."""
    n_iter_no_change: int = 10
    tol: float = 1e-7
    verbose: int = 0
    local_first_tree: bool = False
    """The first tree from the label party's columns alone (FATE's "complete secure"): the
    hosts see nothing of it, the tree that follows the labels most closely."""
    keep_views: bool = False
    """Hosts keep what they saw (the rows of every node they were asked about), for the
    audits."""
    subsample: float = 1.0
    """The share of the training rows each tree grows on (drawn by the label party; the
    others are routed with the tree, as the held-out rows are)."""
    colsample_bytree: float = 1.0
    """The share of its columns each party offers each tree (drawn by that party)."""
    seed: int | None = None
    """Simulation randomness (row and column sampling); None: each party's OS randomness."""
    hide_nodes: bool = False
    """Hosts learn no node's rows: per level, the label party encrypts each row's gradients at
    the slots of the node it is in (zeros elsewhere, every row), the hosts sum over all rows,
    and a host's split answers for all rows (:class:`RemoteSource`)."""
    gradient_noise: float = 0.0
    """The standard deviation of the Gaussian noise on each row's gradients, per tree
    (:class:`~vfl.privacy.GaussianGradientDP`; 0: none)."""


# -- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSetup(Message):
    """A host's column count (the layouts of its histograms follow from it)."""

    KIND = "boosting setup"
    columns: int


@dataclass(frozen=True)
class Command(Message):
    """The label party's next request (``op``): ``"tree"`` (encrypted gradients of ``outputs`` pairs
    per row follow), ``"hist"``
    (histograms of the nodes whose rows are ``rows``, ``sizes`` rows each), ``"split"`` (the
    node's ``rows``, split at ``feature``/``bin``/``missing_left``), ``"end"``."""

    KIND = "boosting command"
    op: str
    outputs: int = 0
    rows: np.ndarray | None = None
    sizes: np.ndarray | None = None
    feature: int = -1
    bin: int = -1
    missing_left: bool = False


@dataclass(frozen=True)
class PlainGH(Message):
    """The plaintext simulation's gradients (``protocol="plain"`` only)."""

    KIND = "plaintext gradients"
    g: np.ndarray
    h: np.ndarray


@dataclass(frozen=True)
class Histograms(Message):
    """A host's histograms: encrypted, packed bins (``data``), or in the plaintext simulation
    the sums themselves (``g``, ``h``: ``(nodes, columns, bins + 1, outputs)``)."""

    KIND = "boosting histograms"
    data: Any = None
    g: np.ndarray | None = None
    h: np.ndarray | None = None
    columns: np.ndarray | None = None
    """The host's columns this tree offers (column subsampling), in the histograms' order."""


@dataclass(frozen=True)
class Partition(Message):
    """A host's answer to a split: the id in its table, and which of the node's rows go left."""

    KIND = "boosting partition"
    split: int
    left: np.ndarray


# -- layouts -------------------------------------------------------------------------------------


def gh_packing(outputs: int, rows: int, key_bits: int) -> RowPacking:
    """The slots of a row's ``(g_k, h_k)`` pairs: wide enough for the sum of ``rows`` of them
    (signed, ``FG + GB`` bits each), all in one plaintext."""
    value_bits = FG + GB + max(1, math.ceil(math.log2(max(rows, 2)))) + 1
    packing = slots.packing(value_bits, 2 * outputs, key_bits)
    if packing.groups != 1:
        raise ValueError(
            f"{outputs} outputs do not fit one {key_bits}-bit plaintext per row "
            f"({packing.per_ct // 2} at most): use fewer classes or a larger key"
        )
    return packing


def _bins_per_ct(packing: RowPacking, outputs: int) -> int:
    return packing.per_ct // (2 * outputs)


def _interleave(g: np.ndarray[Any, Any], h: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``(rows, 2K)``: ``g_0, h_0, g_1, h_1, ...``"""
    out = np.empty((g.shape[0], 2 * g.shape[1]), dtype=object)
    out[:, 0::2] = g.astype(object)
    out[:, 1::2] = h.astype(object)
    return out


def _integers(values: Any) -> np.ndarray[Any, Any] | None:
    """``values`` as int64 when they are an integer array, else None."""
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu":
        return None
    return values.astype(np.int64)


def _rng(seed: int | None, party: str) -> np.random.Generator:
    """A party's sampling randomness: from ``seed`` and its name, or from the OS."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([seed, *party.encode()])


def _sample_size(count: int, share: float) -> int:
    return count if share >= 1 else max(1, round(share * count))


def _sampled(rng: np.random.Generator, count: int, share: float) -> np.ndarray[Any, Any]:
    """``share`` of ``count`` columns (or rows), sorted; all of them at 1."""
    if share >= 1:
        return np.arange(count)
    return np.sort(rng.choice(count, size=_sample_size(count, share), replace=False))


# -- the host -------------------------------------------------------------------------------------


@dataclass
class HostResult:
    """A host's part of the model: its bins and its split table; with ``keep_views``, the row
    sets of every node it built a histogram for or split (its instance space)."""

    mapper: BinMapper
    table: SplitTable
    view: list[np.ndarray[Any, Any]] | None = None


class HostRole:
    """A party with columns and no labels: builds histograms, keeps its splits."""

    def __init__(self, spec: BoostSpec, frame: pd.DataFrame) -> None:
        self.spec = spec
        self.mapper = BinMapper(spec.max_bin, party="")
        self.frame = frame
        self.outputs = 1

    def __call__(self, fed: Federation) -> HostResult:
        spec, label = self.spec, self.spec.label_party
        self.mapper.party = fed.name
        codes = self.mapper.fit_transform(self.frame)
        table = SplitTable()
        BOOST.send(fed, label, "setup", HostSetup(columns=codes.shape[1]))
        key = None
        if spec.policy is not None:
            key = spec.policy.accept(BOOST.recv(fed, label, "key", PublicKeyMessage), label)
            BOOST.send(fed, label, "base", Base(h_s=key.base_bytes()))
        gh: Any = None
        received = 0  # gradient messages so far (one per tree, or per level with hide_nodes)
        view: list[np.ndarray[Any, Any]] | None = [] if spec.keep_views else None
        rng = _rng(spec.seed, fed.name)
        used = np.arange(codes.shape[1])
        while True:
            cmd = BOOST.recv(fed, label, "cmd", Command)
            if cmd.op == "end":  # the splits the kept trees use (early stopping drops some)
                if isinstance(cmd.bin, int) and 0 <= cmd.bin <= len(table.feature):
                    del table.feature[cmd.bin :], table.bin[cmd.bin :]
                    del table.missing_left[cmd.bin :]
                return HostResult(self.mapper, table, view)
            if cmd.op in ("tree", "level"):
                if cmd.op == "tree":  # a new tree: its columns (gradients may come per level)
                    used = _sampled(rng, codes.shape[1], spec.colsample_bytree)
                    gh = None
                    if cmd.outputs == 0:
                        continue
                if not isinstance(cmd.outputs, int) or not 0 < cmd.outputs <= 1 << 10:
                    Command.refuse(label, "outputs", f"is {cmd.outputs}")
                self.outputs = cmd.outputs
                sample = self._rows(cmd.rows, label) if cmd.rows is not None else None
                if key is None:
                    plain = BOOST.recv(fed, label, "gh", PlainGH, received)
                    gh = (
                        np.asarray(plain.g, dtype=np.float64),
                        np.asarray(plain.h, dtype=np.float64),
                    )
                    if gh[0].shape != (spec.rows, self.outputs) or gh[1].shape != gh[0].shape:
                        PlainGH.refuse(label, "g", f"has shape {gh[0].shape}")
                else:
                    got = vector_from(
                        key, BOOST.recv(fed, label, "gh", Encrypted, received).data, label
                    )
                    expected = spec.rows if sample is None else len(sample)
                    if got.size != expected:
                        Encrypted.refuse(
                            label, "data", f"holds {got.size} rows, {expected} expected"
                        )
                    gh = got.ciphertexts
                    if sample is not None:  # the tree's rows only: others never summed
                        full: list[Any] = [None] * spec.rows
                        for r, c in zip(sample.tolist(), gh, strict=True):
                            full[r] = c
                        gh = full
                received += 1
            elif cmd.op == "hist":
                nodes = self._nodes(cmd, label)
                if gh is None or (
                    key is not None and any(gh[r] is None for n in nodes for r in n.tolist())
                ):
                    Command.refuse(label, "rows", "include rows this tree holds no gradients of")
                if view is not None:
                    view.extend(r.copy() for r in nodes)
                offered = codes[:, used]
                if key is None:
                    hists = [
                        histogram(offered[r], gh[0][r], gh[1][r], spec.max_bin + 1) for r in nodes
                    ]
                    message = Histograms(
                        g=np.stack([hg for hg, _ in hists]),
                        h=np.stack([hh for _, hh in hists]),
                        columns=used,
                    )
                else:
                    message = Histograms(
                        data=self._encrypted(key, offered, gh, nodes), columns=used
                    )
                BOOST.send(fed, label, "hist", message)
            elif cmd.op == "split":
                hidden = cmd.rows is None  # hide_nodes: answer for every row
                rows = np.arange(spec.rows) if hidden else self._rows(cmd.rows, label)
                if view is not None and not hidden:
                    view.append(rows.copy())
                if not (0 <= cmd.feature < codes.shape[1] and 0 <= cmd.bin < spec.max_bin):
                    Command.refuse(label, "feature", f"names column {cmd.feature}, bin {cmd.bin}")
                split = table.add(
                    Candidate(
                        0.0, cmd.feature, cmd.bin, bool(cmd.missing_left), np.zeros(0), np.zeros(0)
                    )
                )
                left = table.goes_left(split, codes[rows], self.mapper.missing_bin)
                BOOST.send(fed, label, "part", Partition(split=split, left=left.astype(np.uint8)))
            else:
                Command.refuse(label, "op", f"is {cmd.op!r}")

    def _rows(self, rows: Any, label: str) -> np.ndarray[Any, Any]:
        out = _integers(rows)
        if (
            out is None
            or out.ndim != 1
            or (out.size and (out.min() < 0 or out.max() >= self.spec.rows))
        ):
            Command.refuse(label, "rows", "are not positions of this fit's rows")
        return out

    def _nodes(self, cmd: Command, label: str) -> list[np.ndarray[Any, Any]]:
        rows = self._rows(cmd.rows, label)
        sizes = _integers(cmd.sizes)
        if sizes is None or sizes.ndim != 1 or sizes.sum() != len(rows) or (sizes < 0).any():
            Command.refuse(label, "sizes", "do not add up to the rows sent")
        return np.split(rows, np.cumsum(sizes)[:-1])

    def _encrypted(
        self,
        key: PaillierPublicKey,
        codes: np.ndarray[Any, Any],
        gh: list[Any],
        nodes: list[np.ndarray[Any, Any]],
    ) -> Any:
        """Per node, per column: the bins' products of the rows' ciphertexts, packed
        ``bins_per_ct`` to a ciphertext (bin 0 in the low slots), re-randomised."""
        width = self.spec.max_bin + 1
        nsq = key.nsquare
        packing = gh_packing(self.outputs, self.spec.rows, key.n_length)
        per = _bins_per_ct(packing, self.outputs)
        shift = gmpy2.mpz(1) << (packing.slot_bits * 2 * self.outputs)
        out = []
        for rows in nodes:
            for sums in self._products(gh, codes, rows, width, nsq):
                out += [horner_pack(sums[s : s + per], shift, nsq) for s in range(0, width, per)]
        return slots.block(key, slots.for_owner(key, out))

    def _products(
        self,
        gh: list[Any],
        codes: np.ndarray[Any, Any],
        rows: np.ndarray[Any, Any],
        width: int,
        nsq: Any,
    ) -> list[list[Any]]:
        """Per column, the products of each bin's ciphertexts (the rows split among the
        workers, their partial products multiplied here)."""
        cts = [gh[r] for r in rows.tolist()]
        count = parallel.check_workers(self.spec.workers)
        if count < 2 or len(rows) < 2048:
            return bin_products(cts, codes[rows], width, nsq)
        chunks = zip(parallel.split(cts, count), parallel.split(codes[rows], count), strict=True)
        parts = parallel.map_processes(
            parallel.bin_products_worker,
            [(c, b, width, int(nsq)) for c, b in chunks],
            self.spec.workers,
        )
        out = parts[0]
        for part in parts[1:]:
            out = [
                [a * b % nsq for a, b in zip(x, y, strict=True)]
                for x, y in zip(out, part, strict=True)
            ]
        return out


# -- the label party ------------------------------------------------------------------------------


class RemoteSource:
    """A host's columns as the label party's grower sees them: requests over ``fed``."""

    def __init__(
        self,
        fed: Federation,
        host: str,
        columns: int,
        spec: BoostSpec,
        outputs: int,
        key: tuple[PaillierPublicKey, PaillierPrivateKey] | None,
    ) -> None:
        self.fed, self.host, self.columns, self.spec, self.outputs = (
            fed,
            host,
            columns,
            spec,
            outputs,
        )
        self.key = key
        self.sent = 0  # gradient messages so far (the host counts them alike)
        self.pinned: np.ndarray[Any, Any] | None = None

    def start(
        self, g: np.ndarray[Any, Any], h: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]
    ) -> None:
        """Send a tree's gradients of ``rows`` (encrypted with the host's base)."""
        self.pinned = None  # the columns the host offers this tree, from its first answer
        if self.spec.hide_nodes:  # the gradients come per level, at their node's slots
            BOOST.send(self.fed, self.host, "cmd", Command(op="tree", outputs=0))
            return
        sample = None if len(rows) == self.spec.rows else rows
        BOOST.send(
            self.fed, self.host, "cmd", Command(op="tree", outputs=self.outputs, rows=sample)
        )
        self._send_gh(g, h, rows)

    def _send_gh(
        self, g: np.ndarray[Any, Any], h: np.ndarray[Any, Any], rows: np.ndarray[Any, Any]
    ) -> None:
        """The gradients of ``rows`` (``g.shape[1]`` outputs), encrypted (or in the clear in the
        plaintext simulation)."""
        if self.key is None:
            BOOST.send(self.fed, self.host, "gh", PlainGH(g=g, h=h), self.sent)
        else:
            public, secret = self.key
            packing = gh_packing(g.shape[1], self.spec.rows, public.n_length)
            pairs = _interleave(g[rows], h[rows])
            plains = slots.plaintexts(pairs, packing, int(public.n))
            cts = secret.raw_encrypt(plains, workers=self.spec.workers)
            BOOST.send(
                self.fed, self.host, "gh", Encrypted(data=slots.block(public, cts)), self.sent
            )
        self.sent += 1

    def histograms(
        self, nodes: list[np.ndarray[Any, Any]], g: np.ndarray[Any, Any], h: np.ndarray[Any, Any]
    ) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        if not self.spec.hide_nodes:
            return self._histograms(nodes, self.outputs)
        # hide_nodes: as many nodes per round as one plaintext holds; each row's pairs at the
        # slots of its node, zeros elsewhere, every row sent; one histogram over all rows
        k = self.outputs
        key_bits = self.key[0].n_length if self.key is not None else 2048
        cap = max(1, gh_packing(1, self.spec.rows, key_bits).per_ct // (2 * k))
        everyone = np.arange(self.spec.rows)
        out = []
        for start in range(0, len(nodes), cap):
            batch = nodes[start : start + cap]
            wide_g = np.zeros((self.spec.rows, len(batch) * k), dtype=np.int64)
            wide_h = np.zeros_like(wide_g)
            for j, rows in enumerate(batch):
                wide_g[rows, j * k : (j + 1) * k] = g[rows]
                wide_h[rows, j * k : (j + 1) * k] = h[rows]
            BOOST.send(self.fed, self.host, "cmd", Command(op="level", outputs=len(batch) * k))
            self._send_gh(wide_g, wide_h, everyone)
            ((hg, hh),) = self._histograms([everyone], len(batch) * k)
            out += [
                (hg[..., j * k : (j + 1) * k], hh[..., j * k : (j + 1) * k])
                for j in range(len(batch))
            ]
        return out

    def _histograms(
        self, nodes: list[np.ndarray[Any, Any]], outputs: int
    ) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        """The host's histograms of ``nodes``, whose rows carry ``outputs`` pairs each."""
        if not nodes:
            return []
        sizes = np.array([len(r) for r in nodes], dtype=np.int64)
        BOOST.send(
            self.fed,
            self.host,
            "cmd",
            Command(op="hist", rows=np.concatenate(nodes), sizes=sizes),
        )
        got = BOOST.recv(self.fed, self.host, "hist", Histograms)
        used = self._offered(got.columns)
        if self.pinned is not None and not np.array_equal(used, self.pinned):
            Histograms.refuse(self.host, "columns", "changed within a tree")
        self.used = self.pinned = used
        columns = len(self.used)
        width = self.spec.max_bin + 1
        shape = (len(nodes), columns, width, outputs)
        if self.key is None:
            hg, hh = np.asarray(got.g, dtype=np.float64), np.asarray(got.h, dtype=np.float64)
            if hg.shape != shape or hh.shape != shape:
                Histograms.refuse(self.host, "g", f"has shape {hg.shape}, {shape} expected")
            return [(hg[i], hh[i]) for i in range(len(nodes))]
        public, secret = self.key
        packing = gh_packing(outputs, self.spec.rows, public.n_length)
        per = _bins_per_ct(packing, outputs)
        chunks = -(-width // per)
        vector = vector_from(public, got.data, self.host)
        cts = slots.expect(vector, len(nodes) * columns * chunks, Histograms, self.host, "data")
        plains = secret.raw_decrypt(cts, workers=DECRYPT_THREADS)
        n = int(public.n)
        values = np.empty((len(nodes), columns, width, 2 * outputs))
        i = 0
        for node in range(len(nodes)):
            for col in range(columns):
                for start in range(0, width, per):
                    count = min(per, width - start)
                    layout = RowPacking(count * 2 * outputs, packing.slot_bits, packing.per_ct)
                    value = int(plains[i])
                    signed = value - n if value > n // 2 else value
                    try:
                        got_slots = unpack_signed(signed, layout, 0, packing.value_bits(None))
                    except OverflowError:
                        Histograms.refuse(self.host, "data", "holds a sum beyond its slots")
                    values[node, col, start : start + count] = np.reshape(
                        got_slots, (count, 2 * outputs)
                    )
                    i += 1
        return [(values[k, :, :, 0::2], values[k, :, :, 1::2]) for k in range(len(nodes))]

    def _offered(self, columns: Any) -> np.ndarray[Any, Any]:
        """The host's columns of this tree's histograms, checked: distinct, its own, as many
        as ``colsample_bytree`` gives."""
        if columns is None:
            Histograms.refuse(self.host, "columns", "are missing")
        used = _integers(columns)
        if used is None:
            Histograms.refuse(self.host, "columns", "are not column indices")
        count = _sample_size(self.columns, self.spec.colsample_bytree)
        if (
            used.shape != (count,)
            or len(np.unique(used)) != count
            or (count and (used.min() < 0 or used.max() >= self.columns))
        ):
            Histograms.refuse(
                self.host, "columns", f"are not {count} distinct of its {self.columns} columns"
            )
        return used

    def split(
        self, rows: np.ndarray[Any, Any], candidate: Candidate
    ) -> tuple[int, np.ndarray[Any, Any]]:
        BOOST.send(
            self.fed,
            self.host,
            "cmd",
            Command(
                op="split",
                rows=None if self.spec.hide_nodes else rows,
                feature=int(self.used[candidate.feature]),
                bin=candidate.bin,
                missing_left=candidate.missing_left,
            ),
        )
        part = BOOST.recv(self.fed, self.host, "part", Partition)
        left = np.asarray(part.left)
        asked = self.spec.rows if self.spec.hide_nodes else len(rows)
        if left.shape != (asked,):
            Partition.refuse(self.host, "left", f"has shape {left.shape}, {asked} rows asked")
        if self.spec.hide_nodes:  # the node's rows, which the host was not told
            left = left[rows]
        return int(part.split), left.astype(bool)


@dataclass
class LabelResult:
    """The label party's part: its bins and table, the trees, the starting score, and one
    record per tree grown (``tree``, training ``loss``, ``val_loss`` with early stopping,
    ``seconds``); with early stopping the trees are those up to the best validation loss."""

    mapper: BinMapper
    table: SplitTable
    trees: list[Tree]
    start: np.ndarray[Any, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    best: int = 0


class LabelRole:
    """The label party: its columns, its targets (``y``: 0/1, class codes or standardised
    values for ``objective``)."""

    def __init__(
        self, spec: BoostSpec, frame: pd.DataFrame, y: np.ndarray[Any, Any], objective: Objective
    ) -> None:
        self.spec, self.frame, self.y, self.objective = spec, frame, y, objective

    def __call__(self, fed: Federation) -> LabelResult:
        spec = self.spec
        mapper = BinMapper(spec.max_bin, party=fed.name)
        codes = mapper.fit_transform(self.frame)
        own = LocalSource(codes, mapper.missing_bin, spec.rule)
        hosts = [p for p in spec.parties if p != fed.name]
        columns = {p: BOOST.recv(fed, p, "setup", HostSetup).columns for p in hosts}
        for p, count in columns.items():
            if not 0 < count <= 1 << 20:
                HostSetup.refuse(p, "columns", f"is {count}")
        keys: dict[str, Any] = {p: None for p in hosts}
        if spec.policy is not None:
            public, secret = spec.policy.generate()
            for p in hosts:
                BOOST.send(fed, p, "key", PublicKeyMessage.of(public))
            for p in hosts:
                try:
                    keys[p] = (public, secret.for_base(BOOST.recv(fed, p, "base", Base).h_s))
                except ValueError as exc:
                    Base.refuse(p, "h_s", str(exc))
        outputs = self.objective.outputs
        remotes = {p: RemoteSource(fed, p, columns[p], spec, outputs, keys[p]) for p in hosts}
        sources: dict[str, Any] = {fed.name: own, **remotes}
        # label DP: the starting score is a function of every label, so it starts from 0
        start = self.objective.start(self.y)
        result = LabelResult(mapper, own.table, [], 0.0 * start if spec.gradient_noise else start)
        with EpochProgress(fed.name, spec.n_estimators, spec.verbose, desc="tree") as shown:
            self._boost(fed.name, sources, remotes, result, shown)
        for p in hosts:  # each host keeps the splits the kept trees use (ids grow with trees)
            index = spec.parties.index(p)
            used = [
                s for t in result.trees for o, s in zip(t.owner, t.split, strict=True) if o == index
            ]
            BOOST.send(fed, p, "cmd", Command(op="end", bin=max(used, default=-1) + 1))
        return result

    def _boost(
        self,
        fed_name: str,
        sources: dict[str, Any],
        remotes: dict[str, RemoteSource],
        result: LabelResult,
        shown: EpochProgress,
    ) -> None:
        """The trees, one after another; with validation rows, until their loss has not
        fallen by ``tol`` for ``n_iter_no_change`` trees (the trees after the best are
        dropped)."""
        spec, y = self.spec, self.y
        val = spec.validation
        train = np.arange(len(y)) if val is None else np.setdiff1d(np.arange(len(y)), val)
        raw = np.tile(result.start, (len(y), 1))
        best_loss, since = np.inf, 0
        rng = _rng(spec.seed, fed_name)
        own = sources[fed_name]
        for t in range(spec.n_estimators):
            began = time.perf_counter()
            g, h = self.objective.gradients(raw, y)
            if spec.gradient_noise > 0:  # label DP: OS randomness, then clipped (post-processing)
                g = g + gaussian_noise(g.shape, sigma=spec.gradient_noise)
                g = np.clip(g, -CLIP, CLIP)
            gi, hi = to_fixed(g), to_fixed(h)
            alone = spec.local_first_tree and t == 0
            rows = train[_sampled(rng, len(train), spec.subsample)]
            routed = np.setdiff1d(np.arange(len(y)), rows)  # held out or not sampled
            own.columns = _sampled(rng, own.codes.shape[1], spec.colsample_bytree)
            for remote in [] if alone else remotes.values():
                remote.start(gi, hi, rows)
            tree = grow(
                {fed_name: sources[fed_name]} if alone else sources,
                gi,
                hi,
                spec.rule,
                parties=list(sources),
                max_depth=spec.max_depth,
                learning_rate=spec.learning_rate,
                rows=rows,
                extra=routed,
            )
            raw = raw + np.stack(tree.value)[tree.train_leaf]
            result.trees.append(tree)
            record: dict[str, Any] = {
                "epoch": t + 1,
                "loss": self.objective.loss(raw[train], y[train]),
            }
            if val is not None:
                record["val_loss"] = self.objective.loss(raw[val], y[val])
                if record["val_loss"] < best_loss - spec.tol:
                    best_loss, since, result.best = record["val_loss"], 0, t + 1
                else:
                    since += 1
            else:
                result.best = t + 1
            record["seconds"] = time.perf_counter() - began
            result.history.append(record)
            shown.update(t + 1, loss=record["loss"], best=result.best)
            if val is not None and since >= spec.n_iter_no_change:
                shown.note(f"no better validation loss for {since} trees: kept {result.best}")
                break
        del result.trees[result.best :]


# -- scoring ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decisions(Message):
    """A host's answer to scoring: per split id in its table (rows of ``left``), which of the
    scored rows that split sends left."""

    KIND = "boosting decisions"
    left: np.ndarray


class HostScoreRole:
    """A host's side of scoring: its part (bins and split table; a :class:`HostResult` or a
    loaded :class:`~vfl.boost.part.BoostPart`), its rows."""

    def __init__(self, label_party: str, part: Any, frame: pd.DataFrame) -> None:
        self.label_party, self.part, self.frame = label_party, part, frame

    def __call__(self, fed: Federation) -> None:
        codes = self.part.mapper.transform(self.frame)
        table, missing = self.part.table, self.part.mapper.missing_bin
        left = np.zeros((len(table.feature), len(codes)), dtype=np.uint8)
        for split in range(len(table.feature)):
            left[split] = table.goes_left(split, codes, missing)
        BOOST.send(fed, self.label_party, "decisions", Decisions(left=left))


class LabelScoreRole:
    """The label party's side of scoring: routes its rows through the trees, asking each host
    which way its splits send them; returns the raw scores ``(rows, outputs)``."""

    def __init__(self, parties: tuple[str, ...], part: Any, frame: pd.DataFrame) -> None:
        self.parties, self.part, self.frame = parties, part, frame

    def __call__(self, fed: Federation) -> np.ndarray[Any, Any]:
        part = self.part
        codes = part.mapper.transform(self.frame)
        rows = len(codes)
        decisions: dict[str, Any] = {}
        for host in (p for p in self.parties if p != fed.name):
            left = np.asarray(BOOST.recv(fed, host, "decisions", Decisions).left)
            if left.ndim != 2 or left.shape[1] != rows:
                Decisions.refuse(host, "left", f"has shape {left.shape}, {rows} rows scored")
            decisions[host] = left
        calls: dict[str, Any] = {
            fed.name: lambda split: part.table.goes_left(split, codes, part.mapper.missing_bin)
        }
        for host, left in decisions.items():
            calls[host] = lambda split, left=left, host=host: _decision(left, split, host)
        out = np.tile(part.start, (rows, 1))
        for tree in part.trees:
            out = out + tree.predict(calls, rows)
        return out


def _decision(left: np.ndarray[Any, Any], split: int, host: str) -> np.ndarray[Any, Any]:
    if not 0 <= split < len(left):
        Decisions.refuse(host, "left", f"has no row for split {split}")
    out: np.ndarray[Any, Any] = left[split].astype(bool)
    return out
