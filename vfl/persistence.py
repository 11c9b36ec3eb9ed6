"""One file format for every party model: versioned, atomic, never pickle.

A saved model is one ``.npz`` file (numpy's zip of ``.npy`` arrays) holding the model's arrays
and, under the reserved name ``__meta__``, its metadata as UTF-8 JSON: the format name, its
version, the model's kind (``"vfl.linear.PartyModel"``, ...), the vflink version that wrote it
and the model's own fields. Reading uses ``allow_pickle=False``: a file from elsewhere can hold
only numbers and text. Files are written atomically (temporary file, fsync, rename), so a crash
leaves the old model or the new one. Torch modules are saved as their ``state_dict`` converted
to arrays (:func:`state_dict_to_arrays`), never ``torch.save``.

A file of a newer format version than this vflink reads is refused with an upgrade hint.

Every estimator saves with ``save(path)`` and reads back with ``load(path)``. A vertical model
(linear, Poisson, split, federated transfer) is a folder holding one file per party
(``<party>.npz``: a party's file never holds anything of another's, and in deployment each
party saves only its own), where DP spent anything ``privacy_ledger.json``, and the manifest
``model.json`` listing the files of this save (:func:`save_parts`; :func:`model_files` reads
it, so files left in the folder by an earlier save -- another fit's parties, its ledger --
are never read as this model's). A horizontal model is one file, with its ledger beside it
(:func:`save_with_ledger`).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from vfl.extras import require
from vfl.files import write_atomically

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SavedPart",
    "arrays_to_state_dict",
    "dump_model",
    "label_party_of_parts",
    "load_ledger",
    "load_model",
    "model_files",
    "parse_model",
    "save_model",
    "save_parts",
    "save_with_ledger",
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


class SavedPart:
    """A party's part written as one model file: a subclass names its ``KIND`` and gives
    ``_fields()`` (``(meta, arrays)``); :meth:`to_bytes` and :meth:`save` write them."""

    KIND: ClassVar[str] = ""

    def _fields(self) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        meta, arrays = self._fields()
        return dump_model(self.KIND, meta, arrays)

    def save(self, path: str | Path) -> Path:
        meta, arrays = self._fields()
        return save_model(path, self.KIND, meta, arrays)


def state_dict_to_arrays(state_dict: Any, prefix: str = "") -> dict[str, np.ndarray[Any, Any]]:
    """A torch ``state_dict`` as numpy arrays (on the CPU), keys prefixed with ``prefix``."""
    return {f"{prefix}{k}": v.detach().cpu().numpy() for k, v in state_dict.items()}


def arrays_to_state_dict(arrays: dict[str, np.ndarray[Any, Any]], prefix: str = "") -> Any:
    """The torch ``state_dict`` of the arrays whose names start with ``prefix``."""
    require("torch", for_="a torch model's weights")
    import torch

    return {
        k[len(prefix) :]: torch.from_numpy(np.array(v))
        for k, v in arrays.items()
        if k.startswith(prefix)
    }


MANIFEST = "model.json"
"""The manifest of a folder model: the files of its latest save."""
LEDGER = "privacy_ledger.json"
"""A folder model's privacy ledger (written only when DP spent anything)."""


def save_parts(folder: str | Path, parts: Mapping[str, Callable[[Path], Any]], ledger: Any) -> Path:
    """Save a folder model: ``parts[party](folder / "<party>.npz")`` writes each party's file,
    then the ledger (when it holds a spend; a ledger of an earlier save is removed) and the
    manifest :data:`MANIFEST` listing exactly these files. Returns the folder."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    files = []
    for party, write in parts.items():
        write(target / f"{party}.npz")
        files.append(f"{party}.npz")
    if ledger is not None and len(ledger):
        ledger.save(target / LEDGER)
        files.append(LEDGER)
    else:
        (target / LEDGER).unlink(missing_ok=True)
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, "files": files}
    write_atomically(target / MANIFEST, json.dumps(manifest, sort_keys=True).encode())
    return target


def model_files(paths: tuple[str | Path, ...]) -> list[Path]:
    """The files of ``paths``: a folder stands for the files its manifest lists (a folder
    saved before manifests: its ``.npz`` parts and its ledger)."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            files.append(path)
            continue
        if (path / MANIFEST).exists():
            listed = _manifest(path / MANIFEST)
            files.extend(path / name for name in listed)
            continue
        found = sorted(path.glob("*.npz")) + sorted(path.glob(LEDGER))
        if not found:
            raise ValueError(f"{path} holds no saved model (no .npz part): save to it first")
        files.extend(found)
    return files


def _manifest(path: Path) -> list[str]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the model's manifest {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a vflink model manifest")
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise ValueError(f"{path} is not a vflink model manifest (no files listed)")
    if any(not isinstance(f, str) or Path(f).name != f for f in files):
        raise ValueError(f"{path} lists a file outside its folder: {files}")
    return list(files)


def save_with_ledger(
    path: str | Path,
    kind: str,
    meta: dict[str, Any],
    arrays: dict[str, np.ndarray[Any, Any]],
    ledger: Any,
) -> Path:
    """:func:`save_model`, with ``ledger`` beside the file (``<path>.ledger.json``) when it
    holds a spend; a ledger of an earlier save to ``path`` is removed."""
    written = save_model(path, kind, meta, arrays)
    beside = _ledger_path(path)
    if ledger is not None and len(ledger):
        ledger.save(beside)
    else:
        beside.unlink(missing_ok=True)
    return written


def load_ledger(path: str | Path) -> Any:
    """The ledger saved beside the model file ``path`` (:func:`save_with_ledger`), or an
    empty one."""
    from vfl.privacy import PrivacyLedger

    beside = _ledger_path(path)
    return PrivacyLedger.load(beside) if beside.exists() else PrivacyLedger()


def _ledger_path(path: str | Path) -> Path:
    return Path(path).with_suffix(".ledger.json")


def label_party_of_parts(parts: dict[str, Any], given: str | None) -> str:
    """The label party of loaded parts: ``given``, else the party whose part is the active
    one (a passive party loading only its own part must name it)."""
    active = [name for name, part in parts.items() if part.role == "active"]
    if given is not None:
        if active and active != [given]:
            raise ValueError(
                f"the part of {active[0]!r} was saved as the label party's, not {given!r}'s: "
                "load it with that label party (or without naming one)"
            )
        return given
    if len(active) != 1:
        raise ValueError(
            "none of the loaded parts is the label party's: pass label_party='...' (a passive "
            "party loading only its own part names it)"
        )
    return active[0]
