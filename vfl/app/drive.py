"""Driving one party's job through its stages, failing fast and saying why.

:func:`drive` is what every party runner shares (the vertical job, :mod:`vfl.app.party`; the
transfer job, :mod:`vfl.app.transfer`; scoring new rows, :mod:`vfl.app.predict`): before any
peer is contacted a party checks its own certificate and key against the federation's CA file
(:func:`check_certificate`, :mod:`vfl.federation.trust`) and its input; a refusal is logged at
once, then told to the peers that are up or come up within
:data:`~vfl.federation.config.NOTICE_SECONDS` (its endpoint open until all are told), and
raised. A failure in a stage is logged at once and told to the peers as the endpoint closes;
so is an unexpected error (by its type and message) and an interruption. The outputs are
written only when every stage succeeded (:func:`publish`: a staging folder, then a rename
each).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vfl.app.plan import PartyRun
from vfl.app.scheduler import connect_scheduler
from vfl.federation.base import Federation, FederationError
from vfl.federation.config import FederationConfig

__all__ = ["check_certificate", "drive", "publish"]

logger = logging.getLogger("vflink.party")


def publish(target: Path, outputs: dict[str, str | bytes]) -> None:
    """Write every output into a staging folder first, then move each into ``target`` (a
    rename each): a failure while writing leaves nothing behind."""
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".vflink-staging-", dir=target))
    try:
        for filename, content in outputs.items():
            data = content.encode() if isinstance(content, str) else content
            with open(staging / filename, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        for filename in outputs:
            os.replace(staging / filename, target / filename)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_certificate(
    config: FederationConfig, name: str, cert: str | Path | None, key: str | Path | None
) -> None:
    """This party's own certificate and key against the federation's CA file, before any peer
    is contacted (:func:`vfl.federation.trust.check_own_certificate`); the paths as
    :meth:`FederationConfig.federation` resolves them (which names a missing one, later)."""
    from vfl.federation.trust import check_own_certificate

    me = config.party(name)
    own_cert, own_key = cert or me.cert, key or me.key
    if own_cert is not None and own_key is not None:
        check_own_certificate(name, ca=config.ca, cert=own_cert, key=own_key)


def drive(
    config: FederationConfig,
    name: str,
    cert: str | Path | None,
    key: str | Path | None,
    out: str | Path,
    prepare: Callable[[], PartyRun],
    stages: Sequence[Callable[[PartyRun, Federation], None]],
    summarize: Callable[[PartyRun], dict[str, Any]],
    outputs: Callable[[PartyRun, dict[str, Any]], dict[str, str | bytes]],
) -> dict[str, Any]:
    """One party's job: its own certificate and ``prepare()`` (every check without a peer),
    the ``stages`` on the federation, then the summary and the outputs, written only when
    every stage succeeded.

    Fails fast and says why: a refusal of its own input or certificate is logged at once,
    before any peer is contacted, then told to the peers
    (:meth:`~vfl.federation.config.FederationConfig.stop_peers`) before it is raised; a
    failure in a stage is logged at once and told to the peers as the endpoint closes, and so
    is an unexpected error (by its type and message) or an interruption."""
    try:
        check_certificate(config, name, cert, key)
        run = prepare()
        run.workers = connect_scheduler(config, name, cert, key)
    except ValueError as exc:  # refused our own input: say so, tell the peers why, then stop
        logger.error("party %r refuses to start: %s", name, exc)
        config.stop_peers(name, str(exc), cert=cert, key=key)
        raise
    if run.workers is not None and "workers" in run.estimator.get_params():
        run.estimator.set_params(workers=run.workers)
    try:
        with config.federation(name, cert=cert, key=key) as fed:
            # say why, so that peers end at once (waiting a few seconds for a peer that is
            # still starting: not the whole connect timeout, which a peer that died without a
            # word would make this party wait out)
            patience = min(config.connect_timeout, 5.0)
            try:
                for stage in stages:
                    stage(run, fed)
            except (ValueError, FederationError) as exc:
                logger.error("party %r stops: %s", name, exc)
                fed.close(reason=str(exc), patience=patience)
                raise
            except Exception as exc:  # a fault of this party's own, reported with its type
                logger.error("party %r stops on an unexpected error: %r", name, exc)
                fed.close(reason=f"party {name!r} failed: {exc!r}", patience=patience)
                raise
            except KeyboardInterrupt:  # SIGTERM or Ctrl-C: tell the peers that are up
                fed.close(reason=f"party {name!r} was interrupted", patience=0.0)
                raise
    finally:
        if run.workers is not None:
            run.workers.close()
    summary: dict[str, Any] = {"party": name, "role": run.role, "rows": run.rows}
    summary.update(summarize(run), seconds=run.seconds)
    files = outputs(run, summary)
    if files:
        publish(Path(out), files)
    summary["outputs"] = list(files)
    return summary
