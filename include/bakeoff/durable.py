"""The one atomic writer: a reader sees a stored file whole or not at all, and a crash loses neither.

On local disk ``os.replace`` alone is atomic but not durable: after a crash the new name can point
at an empty or partial file (the data was still in the page cache) or the rename itself can be
lost. So the data goes to a temporary name, is flushed, renamed, and the directory flushed after
it. In object storage a single PUT is already atomic. Standard library only (the serving node's
client writes through it too, without Airflow); an object-storage path is used through its own
methods, never imported here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

LOCAL_PROTOCOLS = ("", "file", "local")


def fsync_path(path: str | os.PathLike[str], directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """fsync ``tmp``, rename it onto ``path``, fsync the directory that holds the new name."""
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(Path(path).parent or ".", directory=True)


def is_local(path: Any) -> bool:
    """A pathlib path, a plain string, or an object-storage path on the local file system."""
    return (getattr(path, "protocol", "") or "") in LOCAL_PROTOCOLS  # a str or pathlib path has no protocol


def _staged(path: Any, data: bytes) -> tuple[Path, str]:
    """``data`` written to an owner-only temporary file beside the local ``path``: (path, temp name)."""
    local = Path(getattr(path, "path", path))  # an ObjectStoragePath's local path; a plain path is itself
    local.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return local, tmp


def write_atomic(path: Any, data: bytes) -> None:
    """Store ``data`` at ``path`` (a local path, or an object-storage path with ``write_bytes``) atomically.
    A local file is created owner-only (0600, as ``mkstemp`` makes it), so secrets can use it too."""
    if not is_local(path):
        path.write_bytes(data)  # one PUT: the object appears whole, replacing the old one, or not at all
        return
    local, tmp = _staged(path, data)
    try:
        replace(tmp, local)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_new(path: Any, data: bytes) -> None:
    """Like ``write_atomic``, but only if nothing is stored at ``path`` yet (``FileExistsError``
    otherwise): on local disk ``os.link`` makes it exclusive, so of two writers racing one wins; in
    object storage it looks first (a PUT cannot be made conditional through fsspec)."""
    if not is_local(path):
        if path.exists():
            raise FileExistsError(str(path))
        path.write_bytes(data)
        return
    local, tmp = _staged(path, data)
    try:
        fsync_path(tmp)
        os.link(tmp, local)  # atomic and exclusive
        fsync_path(local.parent, directory=True)
    finally:
        Path(tmp).unlink(missing_ok=True)
