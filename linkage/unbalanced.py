"""Unbalanced private set intersection: a small party queries a large one's prepared set.

A clinic with 10,000 patients wants to know which of them are in a registry of 10 million,
without showing the registry its patients and without receiving the registry's IDs. Balanced
ECDH PSI (:mod:`linkage.psi`) costs both parties work in proportion to *both* sets on every
run; here the large party does the work for its own set once, offline, and each query then
costs work in proportion to the small set only.

**Protocol** -- an oblivious pseudorandom function, 2HashDH (Jarecki, Kiayias and Krawczyk
2014; Jarecki, Kiayias, Krawczyk and Xu 2016), on NIST P-256 through ``cryptography``'s
OpenSSL binding. The large party (the *server*, :class:`UnbalancedPsiServer`) holds a secret
scalar ``k`` and defines ``F_k(y) = H2(y, [k]H(y))``, where ``H`` hashes an ID to a curve point
and ``H2`` is a domain-separated BLAKE2b; points travel as their 32-byte x-coordinate only
(``[k]P`` and ``[k](-P)`` share theirs, so x-only multiplication is well defined).

1. *offline*, once per key and set: the server computes ``F_k(y)`` for each of its IDs,
   truncates it to :data:`DIGEST_BYTES` bytes and publishes the sorted values with its key's
   fingerprint (:meth:`UnbalancedPsiServer.prepare`, an :class:`OfflineSet`, which the client
   downloads once, saves with :meth:`OfflineSet.save` and reuses for every later query);
2. *online*, per query: the client (:class:`UnbalancedPsiClient`) draws a fresh scalar ``a``
   and sends ``[a]H(x)`` for each of its IDs, in a secret random order
   (:meth:`UnbalancedPsiClient.blind`); the server answers ``[k][a]H(x)``
   (:meth:`UnbalancedPsiServer.evaluate`); the client removes ``a`` with ``a^-1 mod n``,
   computes ``F_k(x)`` (:meth:`UnbalancedPsiClient.unblind`) and looks each one up in the
   offline set (:meth:`UnbalancedPsiClient.intersect`).

**Costs.** Offline, per server ID: one hash to the curve (two BLAKE2b and Legendre symbols on
average), one point decompression, one P-256 scalar multiplication and one BLAKE2b -- about
85 microseconds on one idle core of a 2-core test machine, so 10 million IDs take about 7
minutes on two idle cores (batches of :data:`linkage.workers.PARALLEL_MIN_POINTS` or more are
spread over the same worker processes as ECDH PSI). Online, per client ID: the client one
hash to the curve and two scalar multiplications, the server one; nothing in the online phase
depends on the server's set size except the membership lookup, a binary search in the sorted
offline set (``log2 N`` comparisons per client ID: tens of milliseconds for 10,000 IDs against
10 million). The online phase for 10,000 IDs took about 5 s in all on that machine, loaded by
other jobs.

**Bytes.** Offline: :data:`DIGEST_BYTES` (12) bytes per server ID, 120 MB for 10 million, plus
a header of a few hundred bytes; sent once per key, not per query. Online: 32 bytes per client
ID each way (320 kB each way for 10,000 IDs).

**Truncation.** A client ID outside the server's set matches some server value by chance with
probability ``N / 2^(8 * DIGEST_BYTES)``; with 12 bytes (96 bits), 10,000 queried IDs against
10 million give a false positive with probability at most ``10^11 / 2^96``, about
``1.3e-18`` per query (``1.3e-12`` over a million such queries).

**What each side learns** (honest-but-curious parties):

* the client learns which of its IDs are in the server's set (the intersection) and the size
  of the server's set (the length of the offline set; a server that must hide it can pad the
  set with random values, which match nothing). The offline set alone tells it nothing else:
  without ``k`` its values are pseudorandom (the 2HashDH OPRF, secure under the one-more
  Gap-Diffie-Hellman assumption in the random-oracle model). But it can test *any* ID it
  sends online -- a client that queries a guess learns whether the registry holds it -- and
  the values it obtained stay valid while the key does, so it can also check them against
  later versions of the set made with the same key. The server must therefore bound what each
  client may ask, per client (:meth:`UnbalancedPsiServer.evaluate` takes the client's name):
  ``max_items`` points per query, ``max_queries`` queries and ``max_evaluations`` points in
  all. The counts live in the server object (one job, in a federation) unless it is given a
  ``ledger`` file, which carries them across objects, processes and jobs; rotate the key (a
  fresh key and offline set) when the values a client obtained must stop being valid;
* the server learns the number of points in each query and when queries happen, nothing about
  the IDs: every point it receives is ``[a]H(x)`` for a fresh random ``a`` (uniformly random
  for one point, and unlinkable to candidate IDs across the points of a query under the
  decisional Diffie-Hellman assumption), in a random order. It does not learn the intersection
  (:func:`unbalanced_psi` pairs the rows in a simulation; in a deployment the client tells the
  server only what it decides to: :mod:`vfl.align_unbalanced` tells it the matches, because
  vertical training needs both sides to hold the common rows).

The key is the server's long-term secret: it must persist for the offline set to stay valid
across restarts, as password-encrypted PKCS#8 PEM (:meth:`UnbalancedPsiServer.save_key`,
:meth:`UnbalancedPsiServer.load_key`), never pickled. Each offline set carries the key's
fingerprint (a hash of the public key ``[k]G``, :attr:`UnbalancedPsiServer.public_key`), and a
client refuses a set whose fingerprint is not that of the server that answered its query (a
stale set would otherwise give an empty intersection in silence).

**Checking the server's answers.** A client that knows the server's public key ``Y = [k]G`` can
mix *probe points* into its query (``blind(..., probes=t)``): ``[r]G`` for fresh secret scalars
``r``, uniformly random points exactly like the blinded IDs (under decisional Diffie-Hellman
the server cannot tell them apart), at secret random positions. The honest answer to a probe is
``[k][r]G = [r]Y``, which the client computes itself; :meth:`UnbalancedPsiClient.unblind`
refuses the answers when one probe's is wrong (:class:`OprfCheckError`). A server that answers
a whole query with another key than its public key's -- the way to tag one client's elements --
is caught with certainty; one that answers ``m`` of the ``n + t`` points it receives with
another key escapes with probability at most ``(n / (n + t))^m`` (about ``(1 - f)^t`` for a
fraction ``f`` of the points: ``t = 32`` probes catch a deviation on a tenth of a query 96.6%
of the time). The probes count against the client's caps and cost each side ``t`` scalar
multiplications.

.. warning::
   The OPRF is **not verifiable** in the sense of a VOPRF (RFC 9497): nothing proves that
   *each* answer is ``[k]P`` under the committed key. A batched DLEQ proof (Chaum-Pedersen)
   would, but it needs elliptic-curve point addition, which ``cryptography`` does not expose
   (only scalar multiplication, as ECDH and key derivation); the probes above are a
   statistical check, not a proof, and a server that deviates on a single point escapes them
   with probability ``n / (n + t)``. Nor can anyone check that the offline set was made with
   the committed key (its values hide the IDs); clients that compare the set they downloaded
   (or its SHA-256) detect a server that gives different clients different sets. A deviating
   server can make the client miss matches (it can equally leave IDs out of its set) and, with
   per-point keys, learn at which (secret, random) position of the query a match was; the
   parties are assumed honest-but-curious.

:func:`unbalanced_psi` runs both sides in one process, for simulations and tests.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np
import numpy.typing as npt
import pandas as pd
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from linkage.executors import Workers, check_workers
from linkage.psi import labels_and_values, normalize_ids
from linkage.workers import map_chunks

__all__ = [
    "DIGEST_BYTES",
    "OfflineSet",
    "OprfCheckError",
    "QueryLimitError",
    "UnbalancedPsiClient",
    "UnbalancedPsiServer",
    "hash_to_curve",
    "key_id_of",
    "unbalanced_psi",
]

logger = logging.getLogger(__name__)

DIGEST_BYTES = 12
"""Bytes kept of each OPRF value in the offline set (96 bits; see the module docstring)."""

_MIN_DIGEST_BYTES = 8
_POINT_BYTES = 32  # an x-coordinate on the wire
_CURVE = ec.SECP256R1()
_P = 2**256 - 2**224 + 2**192 + 2**96 - 1
_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
_H2C_PERSON = b"vflink-upsi-h2c"  # BLAKE2b personalisation (at most 16 bytes)
_PRF_PERSON = b"vflink-upsi-prf"
_KEY_ID_DOMAIN = b"vflink/unbalanced-psi/p256/key-id/v1"
_FORMAT = "vflink-unbalanced-psi-offline-set"
_VERSION = 1
_LEDGER_FORMAT = "vflink-unbalanced-psi-ledger"
_PUBLIC_KEY_BYTES = 33  # a compressed point
_MAX_CHUNK = 50_000  # items per worker task: bounded memory and messages for 10 million IDs


class QueryLimitError(PermissionError):
    """The server refused a query beyond one of its caps (``max_items``, ``max_queries``,
    ``max_evaluations``); the message names the client."""


class OprfCheckError(ValueError):
    """The server's answers fail the client's probe check: they were not all computed with the
    key of the server's public key (see the module docstring)."""


def hash_to_curve(identifier: str) -> bytes:
    """The x-coordinate of a P-256 point from the ID, by try-and-increment: the OPRF's
    ``H(id)``, which the client blinds to ``[r]H(id)`` and the server keys to ``[k]H(id)``.

    Domain-separated BLAKE2b of a one-byte counter and the ID, read as a big-endian x and
    retried until ``x^3 - 3x + b`` is a non-zero square mod p (two tries on average). The
    number of tries depends on the ID, so this is **not constant time**: it only ever runs on
    the party's own IDs, in its own process, and its timing is not observable by the other
    party beyond the total time of a batch."""
    data = identifier.encode("utf-8")
    for counter in range(256):
        digest = hashlib.blake2b(
            counter.to_bytes(1, "big") + data, digest_size=_POINT_BYTES, person=_H2C_PERSON
        ).digest()
        x = int.from_bytes(digest, "big")
        if x >= _P:
            continue
        if gmpy2.legendre((x * x * x - 3 * x + _B) % _P, _P) == 1:
            return digest
    raise AssertionError("no curve point after 256 tries")  # probability 2**-256


def _prf_value(identifier: str, point: bytes) -> bytes:
    """``H2(id, [k]H(id))``: 32 bytes, of which the offline set keeps the first few."""
    return hashlib.blake2b(
        identifier.encode("utf-8") + point, digest_size=32, person=_PRF_PERSON
    ).digest()


def _multiply(key: ec.EllipticCurvePrivateKey, x: bytes) -> bytes:
    """The x-coordinate of ``[key]P`` for the point ``P`` with x-coordinate ``x``.

    Raises ValueError when ``x`` is not the x-coordinate of a P-256 point (P-256 has cofactor
    1, so every point but infinity, which has no x, has the full prime order)."""
    point = ec.EllipticCurvePublicKey.from_encoded_point(_CURVE, b"\x02" + x)
    return key.exchange(ec.ECDH(), point)


def _key(scalar: bytes) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(int.from_bytes(scalar, "big"), _CURVE)


def _prepare_chunk(scalar: bytes, ids: list[str], offset: int, width: int) -> bytes:
    """``F_k(y)[:width]`` for each ID, concatenated (one compact message per chunk)."""
    key = _key(scalar)
    out = bytearray()
    for identifier in ids:
        out += _prf_value(identifier, _multiply(key, hash_to_curve(identifier)))[:width]
    return bytes(out)


def _blind_chunk(scalar: bytes, ids: list[str], offset: int) -> list[bytes]:
    key = _key(scalar)
    return [_multiply(key, hash_to_curve(identifier)) for identifier in ids]


def _evaluate_chunk(scalar: bytes, points: list[bytes], offset: int, who: str) -> list[bytes]:
    key = _key(scalar)
    out = []
    for position, x in enumerate(points):
        try:
            out.append(_multiply(key, x))
        except ValueError:
            raise ValueError(
                f"{who}: the point at position {offset + position} is not the x-coordinate of "
                "a P-256 point (a malformed or malicious message); refused"
            ) from None
    return out


def _run(
    step: Callable[..., Any], scalar: int, items: list[Any], workers: Workers, *extra: Any
) -> Any:
    """``step`` over ``items`` in this process, on worker processes or on the party's executor
    (:func:`linkage.workers.map_chunks`); the list of per-chunk results, in order."""
    return map_chunks(
        step, scalar.to_bytes(32, "big"), items, workers, *extra, max_chunk=_MAX_CHUNK
    )


def _workers(workers: Workers) -> Workers:
    check_workers(workers)  # a bad argument fails here, not at the first batch
    return workers


def _check_points(points: Sequence[bytes], who: str) -> list[bytes]:
    for position, point in enumerate(points):
        if not isinstance(point, bytes) or len(point) != _POINT_BYTES:
            raise ValueError(
                f"{who}: the point at position {position} is not {_POINT_BYTES} bytes (an "
                "x-coordinate); refused"
            )
    return list(points)


def _public_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
    )


def _key_id(key: ec.EllipticCurvePrivateKey) -> str:
    return hashlib.sha256(_KEY_ID_DOMAIN + _public_key(key)).hexdigest()[:32]


def key_id_of(public_key: bytes) -> str:
    """The fingerprint (:attr:`UnbalancedPsiServer.key_id`) of a server's public key, given as
    the 33-byte compressed point :attr:`UnbalancedPsiServer.public_key`.

    Raises
    ------
    ValueError
        Not 33 bytes, or not a compressed point of P-256.
    """
    if not isinstance(public_key, bytes) or len(public_key) != _PUBLIC_KEY_BYTES:
        raise ValueError(
            f"a server's public key is a compressed P-256 point of {_PUBLIC_KEY_BYTES} bytes"
        )
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(_CURVE, public_key)
    except ValueError:
        raise ValueError("the server's public key is not a compressed P-256 point") from None
    return hashlib.sha256(_KEY_ID_DOMAIN + public_key).hexdigest()[:32]


def _base_point(scalar: int) -> bytes:
    """The x-coordinate of ``[scalar]G``."""
    return _public_key(_key(scalar.to_bytes(32, "big")))[1:]


def _read_ledger(path: Path) -> dict[str, dict[str, int]]:
    """The per-client counts in a ledger file (none if it does not exist yet)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a query ledger ({error})") from None
    clients = data.get("clients") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("format") != _LEDGER_FORMAT
        or data.get("version") != 1
        or not isinstance(clients, dict)
        or not all(
            isinstance(counts, dict)
            and set(counts) == {"queries", "evaluations"}
            and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()
            )
            for counts in clients.values()
        )
    ):
        raise ValueError(
            f"{path}: not a query ledger written by UnbalancedPsiServer (format "
            f"{_LEDGER_FORMAT!r}, version 1); restore it from a backup (a missing ledger would "
            "reset every client's budget)"
        )
    return {str(name): dict(counts) for name, counts in clients.items()}


def _write_ledger(path: Path, clients: dict[str, dict[str, int]]) -> None:
    """Replace the ledger atomically (a crash leaves the old or the new one, never half)."""
    text = json.dumps(
        {"format": _LEDGER_FORMAT, "version": 1, "clients": clients}, indent=1, sort_keys=True
    )
    staging = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


@contextmanager
def _ledger_lock(path: Path | None) -> Iterator[None]:
    """An exclusive lock on the ledger across processes (a ``.lock`` file beside it, POSIX
    ``flock``), so that two jobs of one server cannot both spend a client's last points."""
    if path is None or sys.platform == "win32":  # Windows: the in-process lock only
        yield
        return
    import fcntl

    fd = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _as_password(password: bytes | str | None) -> bytes | None:
    if password is None:
        return None
    return password.encode("utf-8") if isinstance(password, str) else password


@dataclass(frozen=True, eq=False)
class OfflineSet:
    """The server's prepared set: sorted truncated OPRF values and its key's fingerprint.

    Public to the client: pseudorandom without the server's key. One row is
    ``digest_bytes`` bytes (numpy ``S<digest_bytes>``: fixed-width bytes, no Python object per
    row); the rows are sorted, which also hides the order of the server's table.

    Attributes
    ----------
    digests : numpy.ndarray
        One-dimensional, dtype ``S<digest_bytes>``, sorted ascending.
    key_id : str
        The fingerprint of the server key that made the set (:attr:`UnbalancedPsiServer.key_id`).
    """

    digests: npt.NDArray[np.bytes_]
    key_id: str

    def __post_init__(self) -> None:
        d = self.digests
        if not isinstance(d, np.ndarray) or d.ndim != 1 or d.dtype.kind != "S":
            raise ValueError(
                "an offline set's digests must be a one-dimensional numpy array of fixed-width "
                "bytes (dtype 'S<n>')"
            )
        if not _MIN_DIGEST_BYTES <= d.dtype.itemsize <= 32:
            raise ValueError(
                f"an offline set's values must be {_MIN_DIGEST_BYTES} to 32 bytes, not "
                f"{d.dtype.itemsize}"
            )
        if len(d) > 1 and not bool((d[1:] >= d[:-1]).all()):
            raise ValueError(
                "the offline set is not sorted (corrupted, or not made by "
                "UnbalancedPsiServer.prepare); fetch it again"
            )
        if not isinstance(self.key_id, str) or len(self.key_id) != 32:
            raise ValueError("an offline set's key_id must be the server's 32-hex-digit key_id")

    @property
    def digest_bytes(self) -> int:
        """Bytes per value."""
        return int(self.digests.dtype.itemsize)

    @property
    def nbytes(self) -> int:
        """Bytes of the values (what the client downloads, besides a small header)."""
        return int(self.digests.nbytes)

    def __len__(self) -> int:
        return len(self.digests)

    def __repr__(self) -> str:
        return (
            f"OfflineSet({len(self):,} values of {self.digest_bytes} bytes, key_id={self.key_id!r})"
        )

    def lookup(self, values: npt.NDArray[np.bytes_]) -> npt.NDArray[np.intp]:
        """The position of each value in the set, or -1 where it is absent (binary search).

        ``values`` must have the set's dtype (``S<digest_bytes>``)."""
        if values.dtype != self.digests.dtype:
            raise ValueError(
                f"lookup values have dtype {values.dtype}, the offline set {self.digests.dtype}"
            )
        if len(self.digests) == 0:
            return np.full(len(values), -1, dtype=np.intp)
        positions = np.searchsorted(self.digests, values)
        clipped = np.minimum(positions, len(self.digests) - 1)
        found = self.digests[clipped] == values
        return np.where(found, clipped, -1).astype(np.intp)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the set to ``path`` as an uncompressed ``.npz`` (numpy arrays only, no pickle):
        the values and a JSON header (format, version, curve, key fingerprint, width, size)."""
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "curve": "P-256",
            "key_id": self.key_id,
            "digest_bytes": self.digest_bytes,
            "size": len(self),
        }
        header = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
        with open(path, "wb") as file:  # an open file: numpy adds no ".npz" to the name
            np.savez(file, digests=self.digests, meta=header)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OfflineSet:
        """Read a set written by :meth:`save` (``allow_pickle=False``), checking its header.

        Raises
        ------
        ValueError
            Not an offline set, another format version, or a header that does not match the
            values (a truncated or altered file).
        """
        where = Path(path)
        try:
            data = np.load(where, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("a single array, not an .npz archive")
            with data:
                if sorted(data.files) != ["digests", "meta"]:
                    raise ValueError(f"arrays {sorted(data.files)}")
                meta = json.loads(bytes(data["meta"]).decode("utf-8"))
                digests = data["digests"]
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as error:
            raise ValueError(
                f"{where}: not an offline set written by OfflineSet.save ({error})"
            ) from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise ValueError(f"{where}: not an offline set written by OfflineSet.save")
        if meta.get("version") != _VERSION or meta.get("curve") != "P-256":
            raise ValueError(
                f"{where}: offline set version {meta.get('version')!r} on curve "
                f"{meta.get('curve')!r}; this vflink reads version {_VERSION} on P-256"
            )
        if (
            digests.ndim != 1
            or digests.dtype.kind != "S"
            or meta.get("digest_bytes") != digests.dtype.itemsize
            or meta.get("size") != len(digests)
        ):
            raise ValueError(
                f"{where}: the header ({meta.get('size')} values of {meta.get('digest_bytes')} "
                f"bytes) does not match the values stored; the file is damaged, fetch it again"
            )
        return cls(digests=digests, key_id=str(meta.get("key_id")))


class UnbalancedPsiServer:
    """The large party of unbalanced PSI: a long-term OPRF key, the offline set, the answers.

    The key is a scalar drawn from the OS (``secrets``) when no key is given; it leaves the
    process only as PEM through :meth:`save_key` (and, as the bare scalar, to this process's
    PSI worker processes, through a pipe).

    Parameters
    ----------
    key : cryptography EllipticCurvePrivateKey, optional
        An existing P-256 key (see :meth:`load_key`); a fresh random one if omitted.
    digest_bytes : int
        Bytes kept of each OPRF value in the offline set (default :data:`DIGEST_BYTES`, 12;
        at least 8). With ``N`` server IDs and ``m`` client IDs, a false match has
        probability at most ``m * N / 2^(8 * digest_bytes)``.
    max_queries : int, optional
        Queries one client may have answered (each client named in :meth:`evaluate` has its
        own count) before it is refused (:class:`QueryLimitError`); no limit if omitted.
        Each query lets the client test every ID in it, so a deployment should set this or
        ``max_evaluations``, and rotate the key when a client's values must stop being valid.
    max_items : int, optional
        Points one query may hold (e.g. the clinic's size); no limit if omitted.
    max_evaluations : int, optional
        Points one client may have evaluated in all, over all its queries: the number of IDs
        it can test against the set; no limit if omitted.
    ledger : path, optional
        A JSON file of each client's counts (queries, evaluations), read and rewritten
        (atomically, under a file lock) at every query, so that the caps hold across server
        objects, processes and jobs; created if missing. Without it the counts live in this
        object only. Keep it with the key: deleting it resets every client's budget.
    workers : int or executor, optional
        Processes for large batches (default: all cores); 1 keeps everything in this process;
        or the party's own executor (:mod:`linkage.workers`).
    """

    def __init__(
        self,
        key: ec.EllipticCurvePrivateKey | None = None,
        *,
        digest_bytes: int = DIGEST_BYTES,
        max_queries: int | None = None,
        max_items: int | None = None,
        max_evaluations: int | None = None,
        ledger: str | os.PathLike[str] | None = None,
        workers: Workers = None,
    ) -> None:
        if key is None:
            key = ec.derive_private_key(secrets.randbelow(_N - 1) + 1, _CURVE)
        elif not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(
            key.curve, ec.SECP256R1
        ):
            raise ValueError("the server key must be a P-256 (secp256r1) private key")
        if not isinstance(digest_bytes, int) or not _MIN_DIGEST_BYTES <= digest_bytes <= 32:
            raise ValueError(
                f"digest_bytes must be {_MIN_DIGEST_BYTES} to 32 (default {DIGEST_BYTES}), not "
                f"{digest_bytes!r}"
            )
        for name, limit in (
            ("max_queries", max_queries),
            ("max_items", max_items),
            ("max_evaluations", max_evaluations),
        ):
            if limit is not None and (
                isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
            ):
                raise ValueError(f"{name} must be a positive integer or None, not {limit!r}")
        self._key = key
        self._scalar = key.private_numbers().private_value
        self.key_id = _key_id(key)
        """Public fingerprint of the key (a hash of ``[k]G``), carried by every offline set."""
        self.digest_bytes = digest_bytes
        self.max_queries = max_queries
        self.max_items = max_items
        self.max_evaluations = max_evaluations
        self.ledger = None if ledger is None else Path(ledger)
        self.workers = _workers(workers)
        self.queries_answered = 0
        """Queries this object answered, every client together."""
        self.items_answered = 0
        """Points this object evaluated, every client together."""
        self._clients: dict[str, dict[str, int]] = {}
        if self.ledger is not None:
            _read_ledger(self.ledger)  # a damaged ledger fails here, not at the first query
        self._rows: npt.NDArray[np.intp] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the key
        return f"UnbalancedPsiServer(key_id={self.key_id!r})"

    @property
    def public_key(self) -> bytes:
        """The public key ``[k]G`` as a 33-byte compressed point: what the server commits to
        (:attr:`key_id` is its hash) and what a client's probe points are checked against."""
        return _public_key(self._key)

    # -- the key ------------------------------------------------------------------------------

    def key_pem(self, *, password: bytes | str | None = None) -> bytes:
        """The key as PKCS#8 PEM, encrypted with ``password`` if given (strongly advised)."""
        secret = _as_password(password)
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(secret)
            if secret
            else serialization.NoEncryption()
        )
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )

    def save_key(
        self, path: str | os.PathLike[str], *, password: bytes | str | None = None
    ) -> None:
        """Write the key to ``path`` as PEM (:meth:`key_pem`), readable by the owner only.

        Keep it as long as clients use offline sets made with it: a new key needs a new set."""
        data = self.key_pem(password=password)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)

    @classmethod
    def from_pem(
        cls, data: bytes, *, password: bytes | str | None = None, **options: Any
    ) -> UnbalancedPsiServer:
        """A server with the key in ``data`` (PEM from :meth:`key_pem`); ``options`` as for the
        constructor.

        Raises
        ------
        ValueError
            Not a PEM private key, a wrong or missing password, or a key not on P-256.
        """
        try:
            key = serialization.load_pem_private_key(data, password=_as_password(password))
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"could not read the server key ({error}); check the file and the password"
            ) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(
            key.curve, ec.SECP256R1
        ):
            raise ValueError("the PEM key is not a P-256 (secp256r1) private key")
        return cls(key, **options)

    @classmethod
    def load_key(
        cls, path: str | os.PathLike[str], *, password: bytes | str | None = None, **options: Any
    ) -> UnbalancedPsiServer:
        """A server with the key saved at ``path`` by :meth:`save_key` (see :meth:`from_pem`)."""
        return cls.from_pem(Path(path).read_bytes(), password=password, **options)

    # -- offline ------------------------------------------------------------------------------

    def prepare(self, ids: Iterable[Any], *, normalize: bool = True) -> OfflineSet:
        """The offline set: ``F_k(y)`` truncated to :attr:`digest_bytes`, for every ID, sorted.

        Made once per key and set and sent to clients once; it stays valid across queries and
        restarts as long as the key does (:meth:`save_key`). The client learns the set's size
        from it and nothing else without online queries.

        Parameters
        ----------
        ids : iterable
            The server's exact IDs, one per row.
        normalize : bool
            Apply :func:`linkage.psi.normalize_ids` first (default), which also refuses
            missing and duplicate IDs; ``False`` for IDs already normalised the same way as
            the client's.
        """
        started = time.perf_counter()
        values = normalize_ids(ids, what="server ids") if normalize else [str(i) for i in ids]
        width = self.digest_bytes
        parts = _run(_prepare_chunk, self._scalar, values, self.workers, width)
        digests = np.frombuffer(b"".join(parts), dtype=f"S{width}")
        order = np.argsort(digests, kind="stable")
        self._rows = order
        prepared = OfflineSet(digests=digests[order], key_id=self.key_id)
        logger.info(
            "unbalanced PSI: prepared %d IDs (%d bytes) in %.1f s",
            len(prepared),
            prepared.nbytes,
            time.perf_counter() - started,
        )
        return prepared

    def own_rows(self, positions: Iterable[int]) -> npt.NDArray[np.intp]:
        """The server's rows (positions in the IDs given to :meth:`prepare` in this process) of
        positions in the offline set -- for simulations, or a client that chooses to say which
        of its IDs matched (telling the server the intersection)."""
        if self._rows is None:
            raise ValueError("own_rows needs prepare() to have run in this process")
        return self._rows[np.fromiter(positions, dtype=np.intp)]

    # -- online -------------------------------------------------------------------------------

    def answered(self, client: str = "client") -> tuple[int, int]:
        """``(queries, evaluations)`` answered to ``client`` so far (from the ledger, if any)."""
        with self._lock:
            clients = _read_ledger(self.ledger) if self.ledger is not None else self._clients
        counts = clients.get(client, {})
        return counts.get("queries", 0), counts.get("evaluations", 0)

    def evaluate(self, points: Sequence[bytes], *, client: str = "client") -> list[bytes]:
        """``[k]P`` for each of the client's blinded points, as 32-byte x-coordinates, in the
        order received. The server learns the number of points, nothing about the IDs.

        Parameters
        ----------
        points : sequence of bytes
            The client's blinded points (:meth:`UnbalancedPsiClient.blind`).
        client : str
            Who asks: its caps are counted under this name (in a federation, the peer's name,
            which its certificate proves).

        Raises
        ------
        QueryLimitError
            The query has more than ``max_items`` points, the client has had ``max_queries``
            queries answered, or this query would take it past ``max_evaluations`` points;
            the message names the client. A malformed query counts as answered; a refused one
            does not.
        ValueError
            A point is not 32 bytes or not the x-coordinate of a P-256 point (the client and
            the point's position).
        """
        who = f"client {client!r}"
        count = len(points)
        with self._lock, _ledger_lock(self.ledger):  # reserve before any work
            clients = _read_ledger(self.ledger) if self.ledger is not None else self._clients
            counts = clients.setdefault(client, {"queries": 0, "evaluations": 0})
            if self.max_items is not None and count > self.max_items:
                raise QueryLimitError(
                    f"{who}: the query has {count:,} points, more than this server's max_items="
                    f"{self.max_items:,}; refused (the client must ask for fewer IDs)"
                )
            if self.max_queries is not None and counts["queries"] >= self.max_queries:
                raise QueryLimitError(
                    f"{who}: this server has answered its max_queries={self.max_queries:,} "
                    "queries to this client; refused (the server's operator may grant more, "
                    "or start a new key and offline set)"
                )
            spent = counts["evaluations"]
            if self.max_evaluations is not None and spent + count > self.max_evaluations:
                raise QueryLimitError(
                    f"{who} asked for {count:,} OPRF evaluations, with {spent:,} answered "
                    f"before: more than its cap max_evaluations={self.max_evaluations:,} "
                    f"({max(self.max_evaluations - spent, 0):,} left); refused (each evaluation "
                    "tests one ID against the server's set: the client must ask for fewer IDs, "
                    "or the server's operator raise the cap)"
                )
            counts["queries"] += 1
            counts["evaluations"] += count
            if self.ledger is not None:
                _write_ledger(self.ledger, clients)
            self.queries_answered += 1
            self.items_answered += count
        checked = _check_points(points, f"{who}'s query")
        parts = _run(_evaluate_chunk, self._scalar, checked, self.workers, f"{who}'s query")
        return [point for part in parts for point in part]


class UnbalancedPsiClient:
    """The small party of unbalanced PSI: a fresh blinding scalar per query, the lookups.

    The scalar ``a`` is drawn from the OS for each :meth:`blind` and dropped by
    :meth:`unblind`; it is never serialised or sent.

    Parameters
    ----------
    workers : int or executor, optional
        Processes for large batches (default: all cores); 1 keeps everything in this process;
        or the party's own executor (:mod:`linkage.workers`).
    """

    def __init__(self, *, workers: Workers = None) -> None:
        self.workers = _workers(workers)
        self._scalar: int | None = None
        self._ids: list[str] = []
        self._order: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self._probe_slots: list[int] = []
        self._probe_scalars: list[int] = []
        self._values: npt.NDArray[np.bytes_] | None = None
        self._key_id: str | None = None

    def __repr__(self) -> str:
        return f"UnbalancedPsiClient({len(self._ids):,} IDs in the current query)"

    def blind(self, ids: Iterable[Any], *, normalize: bool = True, probes: int = 0) -> list[bytes]:
        """``[a]H(x)`` for each ID with a fresh secret ``a``, as 32-byte x-coordinates, in a
        secret random order; send them to the server. The server learns their number only.

        Parameters
        ----------
        ids : iterable
            The client's exact IDs, one per row.
        normalize : bool
            Apply :func:`linkage.psi.normalize_ids` first (default); ``False`` for IDs already
            normalised the same way as the server's.
        probes : int
            Probe points ``[r]G`` to mix in at secret random positions (default none), whose
            answers :meth:`unblind` checks against the server's public key (module
            docstring, "Checking the server's answers"); they are sent and counted as points.
        """
        if isinstance(probes, bool) or not isinstance(probes, int) or probes < 0:
            raise ValueError(f"probes must be a non-negative integer, not {probes!r}")
        values = normalize_ids(ids, what="client ids") if normalize else [str(i) for i in ids]
        order = list(range(len(values)))
        draw = secrets.SystemRandom()
        draw.shuffle(order)
        self._order = np.asarray(order, dtype=np.intp)
        self._ids = [values[i] for i in order]
        self._scalar = secrets.randbelow(_N - 1) + 1
        self._values = None
        self._key_id = None
        parts = _run(_blind_chunk, self._scalar, self._ids, self.workers)
        points: list[bytes] = [point for part in parts for point in part]
        self._probe_slots = sorted(draw.sample(range(len(points) + probes), probes))
        self._probe_scalars = [secrets.randbelow(_N - 1) + 1 for _ in range(probes)]
        for slot, scalar in zip(self._probe_slots, self._probe_scalars, strict=True):
            points.insert(slot, _base_point(scalar))  # ascending slots: each lands in place
        return points

    def unblind(
        self,
        responses: Sequence[bytes],
        *,
        key_id: str | None = None,
        public_key: bytes | None = None,
    ) -> None:
        """Check the probes, remove ``a`` from the server's answers and compute ``F_k(x)`` for
        each ID.

        Parameters
        ----------
        responses : sequence of bytes
            :meth:`UnbalancedPsiServer.evaluate`'s answer to the points from :meth:`blind`.
        key_id : str, optional
            The answering server's :attr:`UnbalancedPsiServer.key_id`: :meth:`intersect`
            refuses an offline set made with another key.
        public_key : bytes, optional
            The server's :attr:`UnbalancedPsiServer.public_key` (instead of ``key_id``, which
            is its hash): needed when the query carries probes, whose answers must be
            ``[r]public_key``.

        Raises
        ------
        OprfCheckError
            A probe's answer was not computed with the public key's secret key (the server
            answered with another key).
        ValueError
            No query pending, a different number of answers than points sent, an answer
            that is not a P-256 x-coordinate (its position), no key given, or a ``key_id``
            that is not the public key's.
        """
        if self._scalar is None:
            raise ValueError("no query pending: call blind() and send its points first")
        sent = len(self._ids) + len(self._probe_slots)
        if len(responses) != sent:
            raise ValueError(
                f"the server answered {len(responses):,} points to the {sent:,} sent; refused"
            )
        checked = _check_points(responses, "the server's answer")
        if public_key is not None:
            derived = key_id_of(public_key)
            if key_id is not None and key_id != derived:
                raise ValueError(
                    f"key_id {key_id!r} is not the fingerprint of the public key given "
                    f"({derived!r})"
                )
            key_id = derived
        if key_id is None:
            raise ValueError("unblind needs the server's key_id or public_key")
        if self._probe_slots:
            if public_key is None:
                raise ValueError(
                    "this query carries probe points: pass the server's public_key to check them"
                )
            wrong = sum(
                _multiply(_key(scalar.to_bytes(32, "big")), public_key[1:]) != checked[slot]
                for slot, scalar in zip(self._probe_slots, self._probe_scalars, strict=True)
            )
            if wrong:
                self._scalar = None  # the query is spent either way
                raise OprfCheckError(
                    f"the server answered {wrong} of the {len(self._probe_slots)} probe points "
                    f"with another key than that of its public key (key_id {key_id}): its "
                    "answers are not the OPRF under the key it committed to; refused"
                )
            probe = set(self._probe_slots)
            checked = [point for slot, point in enumerate(checked) if slot not in probe]
        inverse = pow(self._scalar, -1, _N)
        parts = _run(_evaluate_chunk, inverse, checked, self.workers, "the server's answer")
        unblinded = [point for part in parts for point in part]
        self._values = np.frombuffer(
            b"".join(_prf_value(i, p) for i, p in zip(self._ids, unblinded, strict=True)),
            dtype="S32",
        )
        self._key_id = str(key_id)
        self._scalar = None  # one query, one scalar

    def matches(self, offline_set: OfflineSet) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """The client's rows in the intersection and their positions in the offline set, in
        the set's order (sorted by OPRF value: an order both sides can compute).

        Raises
        ------
        ValueError
            No unblinded query, or an offline set made with another key than the one that
            answered (a stale set).
        """
        if self._values is None or self._key_id is None:
            raise ValueError("no answers yet: call blind(), send, then unblind() the answers")
        if offline_set.key_id != self._key_id:
            raise ValueError(
                f"the offline set was made with server key {offline_set.key_id}, but the "
                f"answers came from key {self._key_id}: the set is stale; fetch the server's "
                "current offline set"
            )
        width = offline_set.digest_bytes
        truncated = (
            self._values.view(np.uint8).reshape(-1, 32)[:, :width].copy().view(f"S{width}")
        ).ravel()
        positions = offline_set.lookup(truncated)
        hit = np.flatnonzero(positions >= 0)
        rows, found = self._order[hit], positions[hit]
        order = np.argsort(found, kind="stable")
        return rows[order], found[order]

    def intersect(self, offline_set: OfflineSet) -> npt.NDArray[np.intp]:
        """The client's rows (positions in the IDs given to :meth:`blind`) whose IDs are in the
        server's set, ascending (see :meth:`matches` for the errors)."""
        rows, _ = self.matches(offline_set)
        return np.sort(rows)


def unbalanced_psi(
    ids_small: Any,
    ids_large: Any,
    *,
    digest_bytes: int = DIGEST_BYTES,
    workers: Workers = None,
) -> pd.DataFrame:
    """Run both sides of unbalanced PSI in this process (for simulations and tests).

    Parameters
    ----------
    ids_small, ids_large : pandas.Series, pandas.Index or sequence
        The client's and the server's exact IDs. A Series' index labels identify the rows;
        otherwise positions do.
    digest_bytes : int
        Bytes per offline value (see :class:`UnbalancedPsiServer`).
    workers : int, optional
        Processes per party (default: all cores); the two parties take turns.

    Returns
    -------
    pandas.DataFrame
        Columns ``a`` (the small party's row labels) and ``b`` (the large party's), one row
        per common ID, sorted by OPRF value -- the shape of :func:`linkage.psi_intersection`.
        Column ``b`` comes from the server's private index, which a deployment's server would
        only fill if the client told it the matches.
    """
    labels_small, values_small = labels_and_values(ids_small)
    labels_large, values_large = labels_and_values(ids_large)
    norm_small = normalize_ids(values_small, what="the small party's ids")
    norm_large = normalize_ids(values_large, what="the large party's ids")
    server = UnbalancedPsiServer(digest_bytes=digest_bytes, workers=workers)
    offline = server.prepare(norm_large, normalize=False)
    client = UnbalancedPsiClient(workers=workers)
    client.unblind(server.evaluate(client.blind(norm_small, normalize=False)), key_id=server.key_id)
    rows_small, positions = client.matches(offline)
    rows_large = server.own_rows(positions)
    result: pd.DataFrame = pd.DataFrame(
        {
            "a": [labels_small[i] for i in rows_small],
            "b": [labels_large[j] for j in rows_large],
        },
        columns=["a", "b"],
    )
    return result
