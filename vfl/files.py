"""Writing output files atomically: a temporary file in the same folder, renamed into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: str | Path, data: str | bytes, *, private: bool = False) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never
    a part, even after a crash: the data is flushed to disk (fsync) before the rename, and the
    folder after it. Mode 0600 when ``private`` (keys), else 0644."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        if not private:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)
