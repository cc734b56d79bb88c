"""Where bakeoff keeps its files. One root ($BAKEOFF_DATA, default ./var) holds results, reports
and local-provider state, so a whole installation can be inspected or wiped in one place.

Results and reports may live in object storage instead: $BAKEOFF_RESULTS / $BAKEOFF_REPORTS take a
URL (``s3://<conn_id>@bucket/prefix``, ``file:///...``) or a plain path, so workers on several hosts
share a run. Roots are returned as strings; ``store.at`` turns one into a path object."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

StorePath = Union["ObjectStoragePath", Path]  # a pathlib path: what the node's client (no Airflow) hands


def data_root() -> Path:
    return Path(os.environ.get("BAKEOFF_DATA") or Path.cwd() / "var").resolve()


def _root(variable: str, default: str) -> str:
    """A URL as given; a plain path made absolute (the run-dir strings tasks pass must not depend on a cwd)."""
    value = os.environ.get(variable)
    if not value:
        return str(data_root() / default)
    return value.rstrip("/") if "://" in value else str(Path(value).resolve())


def results_root() -> str:
    return _root("BAKEOFF_RESULTS", "results")


def reports_root() -> str:
    return _root("BAKEOFF_REPORTS", "reports")


def state_root() -> Path:
    return data_root() / "state"


def safe_name(s: str) -> str:
    """A run id or name as one path component (run ids carry ':' and '+')."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", s).strip("._") or "_"


def run_folder(run_id: str) -> str:
    """A run's folder name: readable, and unique per raw run id. ``safe_name`` alone maps
    ``manual__2026-12-01T09:00:00+00:00`` and ``manual__2026-12-01T09_00_00_00_00`` to one name, so two
    runs could share (and overwrite) one folder; the hash of the raw id keeps them apart."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:16]
    return f"{safe_name(run_id)[:100]}.{digest}"


def at(ref: str | StorePath) -> StorePath:
    """The one way to turn a stored location (a URL such as ``s3://<conn_id>@bucket/prefix`` or
    ``file:///...``, or a plain absolute path) into a path object; a path object is returned as is.
    Used as ``store.at``."""
    if not isinstance(ref, str):
        return ref
    # Airflow is imported when a string is resolved, never at import: the node's client has no Airflow.
    from airflow.sdk import ObjectStoragePath  # noqa: PLC0415 - no Airflow on the node's client

    return ObjectStoragePath(ref)


def fresh(path: StorePath) -> StorePath:
    """``path`` with its file system's cached listings dropped, before listing what other processes
    (workers on other hosts) may have written since this one last looked (s3fs caches listings)."""
    fs = getattr(path, "fs", None)  # an ObjectStoragePath's fsspec file system; a local Path has none
    if fs is not None:
        fs.invalidate_cache()
    return path
