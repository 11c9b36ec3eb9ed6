"""A party's own Dask cluster, for its heavy work (``scheduler = "tls://..."`` in its
``[[party]]`` table of the federation config)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vfl.federation.config import FederationConfig

__all__ = ["LOOPBACK", "connect_scheduler"]

logger = logging.getLogger("vflink.party")

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def connect_scheduler(
    config: FederationConfig,
    name: str,
    cert: str | Path | None = None,
    key: str | Path | None = None,
) -> Any:
    """A client of the party's own Dask scheduler when the config names one (None otherwise).

    What the cluster receives is as sensitive as the party's data: encryption's random powers
    (each decrypts its ciphertext without the key), the PSI scalar, the Bloom secret, feature
    rows and the party's secret shares. So a scheduler on another host must be reached over
    ``tls://``, authenticated with the party's own certificate and key and the federation CA
    (the cluster's TLS must accept them); plain ``tcp://`` is refused except on this machine.
    Clear errors when the ``dask`` extra is missing, the scheduler does not answer, or no
    worker joins it within the connect timeout (instead of tasks that would wait forever)."""
    me = config.party(name)
    address = me.scheduler
    if address is None:
        return None
    scheme, _, rest = address.rpartition("://")
    host = rest.rsplit(":", 1)[0]
    if scheme in ("", "tcp") and host not in LOOPBACK:
        raise ValueError(
            f"party {name!r}: its Dask scheduler {address!r} would be reached over plain TCP, "
            "which carries encryption randomness, the PSI scalar and secret shares in the "
            "clear: use tls://host:port (with this party's certificate and the federation CA) "
            "or a scheduler on this machine (tcp://127.0.0.1:port)"
        )
    if scheme not in ("", "tcp", "tls"):
        raise ValueError(
            f"party {name!r}: scheduler {address!r}: use tls://host:port (or tcp:// on this "
            "machine)"
        )
    try:
        import distributed
    except ImportError:
        raise ValueError(
            f"party {name!r}: the config names its Dask scheduler {address!r}, but Dask is not "
            "installed here: pip install 'vflink[dask]'"
        ) from None
    security = None
    if scheme == "tls":
        own_cert, own_key = cert or me.cert, key or me.key
        if own_cert is None or own_key is None:
            raise ValueError(
                f"party {name!r}: a tls:// Dask scheduler needs this party's certificate and key "
                "(--cert/--key or the config)"
            )
        make_security: Any = distributed.security.Security  # (untyped)
        security = make_security(
            tls_ca_file=str(config.ca),
            tls_client_cert=str(own_cert),
            tls_client_key=str(own_key),
            require_encryption=True,
        )
    connect: Any = distributed.Client  # (untyped)
    try:
        client: Any = connect(address, timeout=config.connect_timeout, security=security)
    except (OSError, TimeoutError) as exc:
        raise ValueError(
            f"party {name!r}: cannot reach its Dask scheduler {address!r} within "
            f"{config.connect_timeout:g} s ({exc}); start it (dask scheduler) or fix the "
            "address in the config"
        ) from None
    try:
        client.wait_for_workers(1, timeout=config.connect_timeout)
    except (OSError, TimeoutError):
        client.close()
        raise ValueError(
            f"party {name!r}: its Dask scheduler {address!r} has no worker after "
            f"{config.connect_timeout:g} s: start workers (dask worker {address}) or remove "
            "scheduler from its config entry"
        ) from None
    logger.info(
        "party %r: heavy work on the Dask scheduler %s (%d worker threads)",
        name,
        address,
        sum(client.nthreads().values()),
    )
    return client
