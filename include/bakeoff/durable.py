"""Crash-safe replace: a file written to a temporary name survives a power cut once renamed.

``os.replace`` alone is atomic but not durable: after a crash the new name can point at an empty
or partial file (the data was still in the page cache) or the rename itself can be lost. So the
file's data is flushed before the rename, and its directory after it. Standard library only, so
light modules (the UI's publish index) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | os.PathLike, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """fsync ``tmp``, rename it onto ``path``, fsync the directory that holds the new name."""
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(Path(path).parent or ".", directory=True)
