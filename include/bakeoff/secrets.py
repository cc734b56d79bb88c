"""Per-run serving API keys, derived rather than stored, so no key ever travels through XCom.

key = HMAC-SHA256(installation secret, run_id/target). The installation secret comes from
$BAKEOFF_SECRET_KEY, else a 0600 file created once under the data root.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets as _secrets

from bakeoff.paths import state_root


def _installation_secret() -> bytes:
    env = os.environ.get("BAKEOFF_SECRET_KEY")
    if env:
        return env.encode()
    path = state_root() / "secret.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".secret.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_secrets.token_hex(32))
        try:
            os.link(tmp, path)  # atomic and exclusive: when two workers race, the first one wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip().encode()


def api_key(run_id: str, target_slug: str) -> str:
    """The bearer token the target's server is started with and the client sends."""
    mac = hmac.new(_installation_secret(), f"{run_id}/{target_slug}".encode(), hashlib.sha256)
    return "bk-" + mac.hexdigest()[:40]
