"""What the server says about itself, stored next to every point so others can reproduce it."""

from __future__ import annotations

import time
from typing import Any

import httpx

from bakeoff import catalog
from bakeoff.core.endpoint import Endpoint
from bakeoff.engines import registry
from bakeoff.serving import egress


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


def snapshot_provenance(
    endpoint: Endpoint | str, api_key: str | None, *, timeout_s: float = 5.0, include_metrics: bool = True
) -> dict[str, Any]:
    """/version, /v1/models and a /metrics snapshot (Prometheus text), plus the endpoint's own
    provenance (engine args, image, driver versions as the provider reported them).

    ``endpoint`` is an Endpoint or a base URL. The API key is sent, never returned.
    """
    base = endpoint if isinstance(endpoint, str) else endpoint.base_url
    verify = True if isinstance(endpoint, str) else endpoint.verify()  # a node's pinned certificate
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    snap: dict[str, Any] = {"base_url": base, "taken_at": time.time()}
    with egress.client(base_url=base.rstrip("/"), headers=headers, timeout=timeout_s, verify=verify) as c:
        snap["version"] = _get(c, "/version")
        snap["models"] = _get(c, "/v1/models")
        if include_metrics:
            snap["metrics"] = _get(c, "/metrics")
    if not isinstance(endpoint, str):
        snap["endpoint"] = {
            "stack": endpoint.stack,
            "model": endpoint.model,
            "emulated": endpoint.emulated,
            **endpoint.provenance.to_json(),
        }
    return snap


def _named(text: str, *, model_cards: bool = False) -> str | None:
    """The engine whose declared name the text says, most specific first (``engines/``)."""
    for engine in registry.by_precedence():
        names = engine.names
        if names is not None and (names.in_model_cards or not model_cards) and names.said.search(text):
            return engine.name
    return None


def identify_engine(snap: dict[str, Any]) -> dict[str, Any]:
    """The serving engine and its version from what the server says about itself, so a hand-run
    benchmark records "vllm 0.x" rather than "unknown": /version first (a name in it), then the
    owner of /v1/models' cards (each engine puts its name there), then /metrics' prefixes."""
    version = (snap.get("version") or {}).get("json")
    engine_version = version.get("version") if isinstance(version, dict) else None
    found = None
    if isinstance(version, dict):
        text = " ".join(f"{k} {v}" for k, v in version.items() if isinstance(v, (str, int, float))).lower()
        if name := _named(text):
            found = (name, "/version")
    models = (snap.get("models") or {}).get("json")
    if found is None and isinstance(models, dict) and isinstance(models.get("data"), list):
        owners = " ".join(str(m.get("owned_by", "")).lower() for m in models["data"] if isinstance(m, dict))
        found = (name, "/v1/models") if (name := _named(owners, model_cards=True)) else None
    metrics = "\n" + ((snap.get("metrics") or {}).get("text") or "")
    if found is None and metrics.strip():
        own = [e.name for e in registry.REGISTERED.values() if e.names is not None and e.names.own_metrics]
        prefixes = {catalog.stacks()[e].metrics_prefix: e for e in own}
        found = next(((e, "/metrics") for p, e in prefixes.items() if p and f"\n{p}" in metrics), None)
    stack, source = found or ("unknown", None)
    return {
        "stack": stack,
        "engine_version": str(engine_version) if engine_version is not None else None,
        "identified_from": source,
    }
