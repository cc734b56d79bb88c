"""What the server says about itself, stored next to every point so others can reproduce it."""
from __future__ import annotations

import time
from typing import Any

import httpx


def _get(client: httpx.Client, path: str) -> dict[str, Any]:
    try:
        r = client.get(path)
    except httpx.HTTPError as e:
        return {"error": f"{type(e).__name__}"}
    if r.status_code != 200:
        return {"status": r.status_code}
    if "json" in r.headers.get("content-type", ""):
        try:
            return {"status": 200, "json": r.json()}
        except ValueError:
            pass
    return {"status": 200, "text": r.text[:200_000]}


def snapshot_provenance(endpoint, api_key: str | None, *, timeout_s: float = 5.0,
                        include_metrics: bool = True) -> dict[str, Any]:
    """/version, /v1/models and a /metrics snapshot (Prometheus text), plus the endpoint's own
    provenance (engine args, image, driver versions as the provider reported them).

    ``endpoint`` is an Endpoint or a base URL. The API key is sent, never returned.
    """
    base = endpoint if isinstance(endpoint, str) else endpoint.base_url
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    snap: dict[str, Any] = {"base_url": base, "taken_at": time.time()}
    with httpx.Client(base_url=base.rstrip("/"), headers=headers, timeout=timeout_s) as c:
        snap["version"] = _get(c, "/version")
        snap["models"] = _get(c, "/v1/models")
        if include_metrics:
            snap["metrics"] = _get(c, "/metrics")
    if not isinstance(endpoint, str):
        snap["endpoint"] = {"stack": endpoint.stack, "model": endpoint.model, "emulated": endpoint.emulated,
                            **(endpoint.provenance or {})}
    return snap
