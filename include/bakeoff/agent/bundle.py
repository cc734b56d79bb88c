"""The client bundle: this package as one zip, shipped to the serving node through an object store.

Why a zip of the package rather than a wheel: it is built from the code this worker runs (whatever
way it was installed), needs no build tool on the worker, and the node only unzips it onto
PYTHONPATH. It is built reproducibly (sorted entries, fixed timestamps), so its SHA-256 names it:
staging twice uploads once, and the boot script refuses a download whose checksum differs. The
third-party packages it imports are pinned to the versions this worker runs, so the client on the
node is the client CI tested.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import logging
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# What the agent and the benchmark client import (a test walks the real imports to keep this whole).
AGENT_REQUIREMENTS = ("aiohttp", "httptools", "httpx", "numpy", "pandas", "pyarrow", "pydantic", "PyYAML", "uvloop")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Staged:
    """Where a node fetches the bundle (a presigned URL: a secret-free, expiring read of one object)."""

    url: str
    sha256: str
    requirements: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def package_root() -> Path:
    import bakeoff  # noqa: PLC0415
    return Path(bakeoff.__file__).parent


def build() -> tuple[bytes, str]:
    """(zip bytes, sha256): every file of the package but caches, deterministic byte for byte."""
    root = package_root()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root.parent)
            if p.is_dir() or "__pycache__" in rel.parts or p.suffix in (".pyc", ".pyo"):
                continue
            info = zipfile.ZipInfo(rel.as_posix(), _FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, p.read_bytes())
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def requirements() -> tuple[str, ...]:
    """The agent's third-party packages pinned to the versions installed here."""
    return tuple(f"{name}=={md.version(name)}" for name in AGENT_REQUIREMENTS)


def stage_s3(s3_client, bucket: str, prefix: str = "bakeoff", expires_s: float = 6 * 3600) -> Staged:
    """Upload the bundle (once per content) and return a presigned GET URL valid for ``expires_s``."""
    data, sha = build()
    key = f"{prefix.strip('/')}/client/bakeoff-client-{sha[:16]}.zip"
    try:
        s3_client.head_object(Bucket=bucket, Key=key)
    except Exception:  # noqa: BLE001 - absent (404) or unknown: upload; a real error surfaces from put_object
        s3_client.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/zip",
                             Metadata={"sha256": sha})
        log.info("client bundle %s uploaded to s3://%s/%s (%d bytes)", sha[:16], bucket, key, len(data))
    url = s3_client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                           ExpiresIn=int(min(max(expires_s, 900), 7 * 24 * 3600)))
    return Staged(url=url, sha256=sha, requirements=requirements())


def stage(settings: dict[str, Any], expires_s: float) -> Staged | None:
    """Stage where the installation says: the ``client_bundle`` credentials entry gives ``bucket`` and
    either ``s3_client`` (the DAG's S3 hook) or boto3 client arguments; None when no bucket is set."""
    bucket = settings.get("bucket")
    if not bucket:
        return None
    s3 = settings.get("s3_client")
    if s3 is None:
        import boto3  # noqa: PLC0415
        s3 = boto3.client("s3", **{k: v for k, v in settings.items() if k in (
            "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "region_name", "endpoint_url")})
    return stage_s3(s3, bucket, settings.get("prefix") or "bakeoff", expires_s)
