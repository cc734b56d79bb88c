"""Readiness: a server is ready when /health answers 200 and /v1/models lists the model.

Polling both (as vLLM's and SGLang's own launch scripts do) catches a server whose HTTP front end is
up while the engine is still loading weights.
"""
from __future__ import annotations

import time
from typing import Any

import httpx


class NotReady(RuntimeError):
    """The server did not become ready before the deadline; the message says what was last seen."""


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def wait_ready(base_url: str, api_key: str | None, timeout_s: float, poll_s: float = 0.25) -> dict[str, Any]:
    """Poll until ready; return what the server says about itself (models, version)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=5.0) as client:
        while time.monotonic() < deadline:
            try:
                if client.get("/health").status_code == 200:
                    models = client.get("/v1/models")
                    if models.status_code == 200 and models.json().get("data"):
                        return {"models": models.json(), "version": _optional_json(client, "/version")}
                    last = f"/v1/models answered {models.status_code}"
                else:
                    last = "/health not 200"
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}"
            time.sleep(poll_s)
    raise NotReady(f"{base_url} not ready after {timeout_s:.0f}s ({last})")


def _optional_json(client: httpx.Client, path: str) -> Any:
    try:
        r = client.get(path)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
