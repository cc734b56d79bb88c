"""Static: endpoints that already exist (on-prem clusters, reserved nodes). Nothing is provisioned
or terminated; the same benchmark runs against them and the price comes from the plan.

The target names its endpoint with ``provider_options.base_url``; its API key (if any) is read
from the environment variable named by ``provider_options.api_key_env``, never from the plan.
"""
from __future__ import annotations

import os
import time
from typing import Any

import httpx

from bakeoff.providers.base import Instance, Provider, ProviderError


class StaticProvider(Provider):
    name = "static"

    def __init__(self, credentials: dict[str, Any] | None = None, **options: Any):
        self.credentials = credentials or {}

    def create(self, target, run_id: str, *, tags: dict[str, str], spec: dict[str, Any]) -> Instance:
        base = target.provider_options.base_url
        if not base:
            raise ProviderError(f"targets.{target.name}.provider_options.base_url: a static target needs the "
                                "endpoint's URL, e.g. http://10.0.0.5:8000")
        url = httpx.URL(base)
        port = url.port or (443 if url.scheme == "https" else 80)
        return Instance(provider=self.name, id=f"static:{target.slug}", target=target.slug, run_id=run_id,
                        state="running", host=url.host, port=port, instance_type=target.instance_type,
                        region="static", launched_at=time.time(), tags=dict(tags),
                        details={"base_url": str(url).rstrip("/"), "scheme": url.scheme,
                                 "api_key_env": target.provider_options.api_key_env})

    def wait_ready(self, instance: Instance, timeout_s: float) -> Instance:
        return instance

    def describe(self, instance_id: str) -> Instance | None:
        return None

    def terminate(self, instance_id: str) -> bool:
        return False          # not ours to stop

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        return []


def static_api_key(target) -> str | None:
    """The existing endpoint's key, from the environment variable the plan names (None: no auth)."""
    env = target.provider_options.api_key_env
    if not env:
        return None
    key = os.environ.get(env)
    if not key:
        raise ProviderError(f"targets.{target.name}.provider_options.api_key_env: environment variable {env} is not set")
    return key
