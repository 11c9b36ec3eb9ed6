"""The federation config: one TOML file shared by every party.

Example (``examples/deploy/federation.toml``)::

    [federation]
    ca = "certs/ca.pem"          # the federation CA's certificate (every party has it)
    timeout = 600                # seconds a party waits for a message
    connect_timeout = 60         # seconds to keep trying a peer not reached yet
    peer_timeout = 20            # seconds a reached peer may be silent before it is lost
    heartbeat = 2

    [[party]]
    name = "coordinator"
    role = "coordinator"
    address = "127.0.0.1:50151"
    cert = "certs/coordinator.pem"   # this party's own files: each party needs only its own
    key = "certs/coordinator.key"

    [[party]]
    name = "lab"
    role = "passive"
    address = "127.0.0.1:50152"
    ...

    [job]                            # what ``vflink party`` runs (see vfl.app.party)
    ...

Roles: ``"active"`` (holds the labels; exactly one), ``"passive"``, ``"coordinator"`` (at most
one). A party may name ``scheduler = "tcp://host:8786"``, the address of its own Dask
scheduler (the ``dask`` extra): ``vflink party`` then runs that party's PSI blinding,
encryption and ``matrix @ ciphertexts`` on its cluster. Each institution names its own;
nothing crosses institutions but the federation's messages. Relative paths are taken from the
config file's folder. A party's own ``cert``/``key`` may be left out of the shared file and
given on the command line instead.

Two steps of a party that fails fast live here, beside the roles they read and light to
import (no pandas): :meth:`FederationConfig.check_arguments` (``--predict``/``--model``
against the party's role, before anything is loaded) and :meth:`FederationConfig.stop_peers`
(a party that stops before its job began tells its peers why, for
:data:`NOTICE_SECONDS` at most).
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli (a dependency there)
    import tomli as tomllib

__all__ = ["NOTICE_SECONDS", "FederationConfig", "PartyConfig"]

logger = logging.getLogger("vflink.party")

NOTICE_SECONDS = 15.0
"""The longest a party that stops before its job began (its own input refused, its own
certificate not the CA's) keeps its endpoint open to tell peers why (the config's
``connect_timeout`` if shorter). Parties started together are up well within it; a peer that
starts later waits its own ``connect_timeout`` for a party that is gone."""

ROLES = ("active", "passive", "coordinator")
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A party name: 1-64 letters, digits, ``_``, ``.`` or ``-`` (it is also a file name)."""
_ADDRESS_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


@dataclass(frozen=True)
class PartyConfig:
    """One party of the config."""

    name: str
    role: str
    address: str
    cert: Path | None
    key: Path | None
    columns: list[str] | None = None
    scheduler: str | None = None
    """The address of this party's own Dask scheduler (``tcp://host:8786``; the ``dask``
    extra), where ``vflink party`` runs this party's heavy work; None: its own processes."""


@dataclass
class FederationConfig:
    """The parsed, validated config (see the module docstring)."""

    path: Path
    ca: Path
    parties: dict[str, PartyConfig]
    timeout: float = 600.0
    connect_timeout: float = 60.0
    peer_timeout: float = 20.0
    heartbeat: float = 2.0
    max_message_bytes: int = 256 * 2**20
    job: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path, *, check_files: bool = True) -> FederationConfig:
        """Read and check a config file; errors name the file, the party and the fix.
        ``check_files=False`` skips checking that the CA certificate exists (to make it)."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read the federation config {path}: {exc}") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
        return cls.from_dict(data, path, check_files=check_files)

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], path: Path, *, check_files: bool = True
    ) -> FederationConfig:
        where = str(path)
        unknown = sorted(set(data) - {"federation", "party", "job"})
        if unknown:
            raise ValueError(f"{where}: unknown sections {unknown} (federation, party, job)")
        fed = data.get("federation")
        if not isinstance(fed, dict):
            raise ValueError(f"{where}: a [federation] table with the CA certificate is needed")
        base = path.parent
        ca = _existing(base, fed.get("ca"), f"{where}: [federation] ca", check_files)
        parties: dict[str, PartyConfig] = {}
        entries = data.get("party")
        if not isinstance(entries, list) or len(entries) < 2:
            raise ValueError(f"{where}: at least two [[party]] tables are needed")
        addresses: dict[str, str] = {}
        for k, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: [[party]] number {k + 1} is not a table")
            name = entry.get("name")
            if not isinstance(name, str) or not NAME_RE.fullmatch(name):
                raise ValueError(
                    f"{where}: [[party]] number {k + 1} needs a name of 1-64 letters, digits, "
                    f"'_', '.' or '-', got {name!r}"
                )
            if name in parties:
                raise ValueError(f"{where}: party {name!r} is listed twice")
            extra = sorted(
                set(entry) - {"name", "role", "address", "cert", "key", "columns", "scheduler"}
            )
            if extra:
                raise ValueError(f"{where}: party {name!r} has unknown keys {extra}")
            role = entry.get("role")
            if role not in ROLES:
                raise ValueError(f"{where}: party {name!r} has role {role!r}; use one of {ROLES}")
            address = entry.get("address")
            match = _ADDRESS_RE.fullmatch(address) if isinstance(address, str) else None
            if match is None or not 1 <= int(match.group(2)) <= 65535 or address is None:
                raise ValueError(
                    f"{where}: party {name!r} has address {address!r}; use host:port with a "
                    "port from 1 to 65535, e.g. '10.0.0.5:50151'"
                )
            if address in addresses:
                raise ValueError(
                    f"{where}: parties {addresses[address]!r} and {name!r} share the address "
                    f"{address}"
                )
            addresses[address] = name
            columns = entry.get("columns")
            if columns is not None and (
                not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
            ):
                raise ValueError(f"{where}: party {name!r}: columns must be a list of names")
            scheduler = entry.get("scheduler")
            if scheduler is not None and (not isinstance(scheduler, str) or not scheduler):
                raise ValueError(
                    f"{where}: party {name!r}: scheduler must be the address of its own Dask "
                    f"scheduler, e.g. 'tcp://10.0.0.7:8786', got {scheduler!r}"
                )
            parties[name] = PartyConfig(
                name,
                role,
                address,
                _path(base, entry.get("cert"), f"{where}: party {name!r} cert"),
                _path(base, entry.get("key"), f"{where}: party {name!r} key"),
                columns,
                scheduler,
            )
        roles = [p.role for p in parties.values()]
        if roles.count("active") != 1:
            raise ValueError(f"{where}: exactly one party must have role 'active' (the labels)")
        if roles.count("coordinator") > 1:
            raise ValueError(f"{where}: at most one party may be the coordinator")
        numbers = {}
        known = ("ca", "timeout", "connect_timeout", "peer_timeout", "heartbeat")
        extra = sorted(set(fed) - set(known))
        if extra:
            raise ValueError(f"{where}: [federation] has unknown keys {extra}; known: {known}")
        for key in known[1:]:
            if key in fed:
                value = fed[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                    raise ValueError(f"{where}: [federation] {key} must be a positive number")
                numbers[key] = float(value)
        if numbers.get("heartbeat", 2.0) >= numbers.get("peer_timeout", 20.0):
            raise ValueError(
                f"{where}: [federation] heartbeat must be shorter than peer_timeout, or live "
                "peers would count as lost"
            )
        job = data.get("job", {})
        if not isinstance(job, dict):
            raise ValueError(f"{where}: [job] must be a table")
        return cls(path, ca, parties, job=job, **numbers)  # type: ignore[arg-type]

    @property
    def active(self) -> str:
        return next(p.name for p in self.parties.values() if p.role == "active")

    @property
    def coordinator(self) -> str | None:
        return next((p.name for p in self.parties.values() if p.role == "coordinator"), None)

    @property
    def data_parties(self) -> list[str]:
        """The parties with data, the active one first."""
        return [self.active] + [p.name for p in self.parties.values() if p.role == "passive"]

    def party(self, name: str) -> PartyConfig:
        if name not in self.parties:
            raise ValueError(
                f"{self.path}: no party {name!r}; the parties are {list(self.parties)}"
            )
        return self.parties[name]

    def federation(
        self, name: str, *, cert: str | Path | None = None, key: str | Path | None = None
    ) -> Any:
        """This party's :class:`~vfl.federation.network.GrpcFederation` (not started)."""
        from vfl.federation.network import GrpcFederation

        me = self.party(name)
        cert_path = Path(cert) if cert is not None else me.cert
        key_path = Path(key) if key is not None else me.key
        if cert_path is None or key_path is None:
            raise ValueError(
                f"party {name!r} needs its certificate and key: set cert and key in its "
                f"[[party]] table of {self.path} or pass --cert and --key"
            )
        return GrpcFederation.from_files(
            name,
            me.address,
            {p: c.address for p, c in self.parties.items() if p != name},
            ca=self.ca,
            cert=cert_path,
            key=key_path,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
            peer_timeout=self.peer_timeout,
            heartbeat=self.heartbeat,
            max_message_bytes=self.max_message_bytes,
        )

    def check_arguments(
        self, name: str, *, model: str | Path | None = None, predict: bool = False
    ) -> None:
        """Party ``name``'s ``--predict``/``--model`` against its role, before anything is
        loaded or any peer contacted (``vflink party`` checks them first, in a second): every
        data party scoring new rows names its saved part, an existing file; the coordinator
        holds no part; a model is only for scoring.

        Raises
        ------
        ValueError
            Naming the party, the flag and the fix.
        """
        if model is not None and not predict:
            raise ValueError("--model is for scoring new rows: add --predict")
        if not predict:
            return
        if self.party(name).role == "coordinator":
            if model is not None:
                raise ValueError(
                    f"party {name!r} is the coordinator: it holds no part of the model (each "
                    "data party loads its own); do not pass --model to it"
                )
            return
        if model is None:
            raise ValueError(
                f"party {name!r}: --predict scores with its saved part of the model: pass "
                f"--model model_{name}.npz (written by its training run)"
            )
        if not Path(model).is_file():
            raise ValueError(
                f"party {name!r}: --model {model}: no such file; pass the model_{name}.npz that "
                "its training run wrote"
            )

    def stop_peers(
        self,
        name: str,
        reason: str,
        *,
        cert: str | Path | None = None,
        key: str | Path | None = None,
    ) -> None:
        """Open party ``name``'s endpoint just long enough to tell each peer why it stops
        (until every peer is told, :data:`NOTICE_SECONDS` at most), so that they end within
        seconds naming it and its reason, instead of waiting for a party that will never come.

        Best effort: nothing is raised. A party whose own certificate is not the CA's cannot
        tell anyone, but its open endpoint lets each peer's handshake fail on that certificate,
        which the peer then names (:class:`~vfl.federation.network.UntrustedPeerError`)."""
        patience = min(self.connect_timeout, NOTICE_SECONDS)
        logger.info("party %r: telling its peers why it stops (for up to %g s)", name, patience)
        try:
            with self.federation(name, cert=cert, key=key) as fed:
                fed.close(reason=reason, patience=patience)
        except Exception:  # no endpoint to open (no key, port taken): nothing to tell
            logger.debug("party %r could not tell its peers why it stops", name, exc_info=True)


def _path(base: Path, value: Any, what: str) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a file path")
    path = Path(value)
    return path if path.is_absolute() else base / path


def _existing(base: Path, value: Any, what: str, check: bool) -> Path:
    path = _path(base, value, what)
    if path is None:
        raise ValueError(f"{what} is missing: the path of the federation CA's certificate")
    if check and not path.is_file():
        raise ValueError(f"{what}: no such file {path}")
    return path
