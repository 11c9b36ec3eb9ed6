"""One file format for every party model: versioned, atomic, never pickle.

A saved model is one ``.npz`` file (numpy's zip of ``.npy`` arrays) holding the model's arrays
and, under the reserved name ``__meta__``, its metadata as UTF-8 JSON: the format name, its
version, the model's kind (``"vfl.linear.PartyModel"``, ...), the vflink version that wrote it
and the model's own fields. Reading uses ``allow_pickle=False``: a file from elsewhere can hold
only numbers and text. Files are written atomically (temporary file, fsync, rename), so a crash
leaves the old model or the new one. Torch modules are saved as their ``state_dict`` converted
to arrays (:func:`state_dict_to_arrays`), never ``torch.save``.

A file of a newer format version than this vflink reads is refused with an upgrade hint.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from vfl.files import write_atomically

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "arrays_to_state_dict",
    "dump_model",
    "load_model",
    "parse_model",
    "save_model",
    "state_dict_to_arrays",
]

FORMAT = "vflink-model"
FORMAT_VERSION = 1
_META = "__meta__"


def dump_model(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]) -> bytes:
    """The file's bytes: ``arrays`` (numeric, any shape) and ``meta`` (JSON-serialisable)."""
    import vfl

    if _META in arrays:
        raise ValueError(f"{_META!r} is reserved for the metadata")
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "kind": kind,
        "vflink": vfl.__version__,
        "meta": meta,
    }
    text = json.dumps(header, sort_keys=True)
    payload = {name: np.asarray(value) for name, value in arrays.items()}
    for name, value in payload.items():
        if value.dtype.kind not in "biuf":
            raise TypeError(f"array {name!r} has dtype {value.dtype}: only numbers are saved")
    buffer = io.BytesIO()
    payload[_META] = np.frombuffer(text.encode(), dtype=np.uint8)
    np.savez(buffer, **payload)  # type: ignore[arg-type]
    return buffer.getvalue()


def parse_model(
    data: bytes, *, kind: str | None = None, source: str = "the model"
) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
    """``(meta, arrays)`` of a file's bytes, checked: the format, a version this vflink reads,
    and ``kind`` when given."""
    if not data.startswith(b"PK"):
        raise ValueError(f"{source} is not a saved vflink model (not an .npz file)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        header = json.loads(arrays.pop(_META).tobytes().decode())
    except ValueError as exc:
        if "pickle" in str(exc):
            raise ValueError(
                f"{source} is not a saved vflink model: it holds an array only unpickling could "
                "read (refused; vflink never unpickles)"
            ) from None
        raise ValueError(f"{source} is not a saved vflink model: {exc}") from None
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ValueError(f"{source} is not a saved vflink model: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{source} is not a saved vflink model")
    version = header.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{source} was written in model format version {version!r} by vflink "
            f"{header.get('vflink')}; this vflink reads up to {FORMAT_VERSION}: upgrade vflink"
        )
    if kind is not None and header.get("kind") != kind:
        raise ValueError(f"{source} holds a {header.get('kind')!r}, not a {kind!r}")
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise ValueError(f"{source} has no model metadata")
    return meta, arrays


def save_model(
    path: str | Path, kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]
) -> Path:
    """Write a model file atomically (see the module docstring); returns its path."""
    target = Path(path)
    write_atomically(target, dump_model(kind, meta, arrays))
    return target


def load_model(
    path: str | Path, *, kind: str | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
    """Read a file written by :func:`save_model`: ``(meta, arrays)``."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the model file {path}: {exc}") from None
    return parse_model(data, kind=kind, source=str(path))


def state_dict_to_arrays(state_dict: Any, prefix: str = "") -> dict[str, np.ndarray[Any, Any]]:
    """A torch ``state_dict`` as numpy arrays (on the CPU), keys prefixed with ``prefix``."""
    return {f"{prefix}{k}": v.detach().cpu().numpy() for k, v in state_dict.items()}


def arrays_to_state_dict(arrays: dict[str, np.ndarray[Any, Any]], prefix: str = "") -> Any:
    """The torch ``state_dict`` of the arrays whose names start with ``prefix``."""
    import torch

    return {
        k[len(prefix) :]: torch.from_numpy(np.array(v))
        for k, v in arrays.items()
        if k.startswith(prefix)
    }
