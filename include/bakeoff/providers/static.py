"""Static: endpoints that already exist (on-prem clusters, reserved nodes). Nothing is provisioned
or terminated; the same benchmark runs against them and the price comes from the plan.

A target with a key names a connection (``provider_options.endpoint_connection``, id starting with
``static_endpoint_``) that holds both the endpoint's URL (host) and its key (password): a plan can
neither read a worker's environment nor send a connection's key to a URL of its choosing. A keyless
endpoint may be given as ``provider_options.base_url`` instead.

bakeoff did not start the server: the target names the model id it answers to (``served_model``),
may describe its hardware instead of a catalog instance (``hardware``), and its provenance is what
the server says about itself (serving/deploy.py), never an image or engine arguments.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import httpx

from bakeoff import secrets
from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.base import Provider, ProviderError

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.options import StaticOptions
    from bakeoff.plan.target import Target


class StaticProvider(Provider):
    name = "static"

    def __init__(self, credentials: dict[str, Any] | None = None, **options: Any):
        self.credentials = credentials or {}

    def create(
        self, target: Target, run_id: str, *, tags: Mapping[str, str], spec: LaunchSpec | Mapping[str, Any]
    ) -> Instance:
        url = httpx.URL(static_base_url(target))
        port = url.port or (443 if url.scheme == "https" else 80)
        return Instance(
            provider=self.name,
            id=f"static:{target.slug}",
            target=target.slug,
            run_id=run_id,
            state="running",
            host=url.host,
            port=port,
            instance_type=target.instance_type or "described",
            region="static",
            launched_at=time.time(),
            tags=dict(tags),
            url=str(url).rstrip("/"),
        )

    def check_ready(self, instance: Instance) -> Instance | None:
        return instance  # already up: whether it serves is the serving check's question

    def describe(self, instance_id: str) -> Instance | None:
        return None

    def terminate(self, instance_id: str) -> bool:
        return False  # not ours to stop

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        return []


def _options(target: Target) -> StaticOptions:
    """A static target's options: plan/target.py reads every static target's provider_options as StaticOptions."""
    return cast("StaticOptions", target.provider_options)


def _connection(target: Target) -> dict[str, str]:
    conn_id = _options(target).endpoint_connection or ""
    try:
        return secrets.connection(conn_id, (secrets.STATIC_CONN_PREFIX,))
    except secrets.MissingSecret as e:
        raise ProviderError(f"targets.{target.name}.provider_options.endpoint_connection: {e}") from None


def static_base_url(target: Target) -> str:
    """The endpoint's URL: the named connection's host, else the plan's base_url (keyless endpoints)."""
    opts = _options(target)
    if opts.endpoint_connection:
        conn_id = opts.endpoint_connection
        host = (_connection(target).get("host") or "").strip()
        if not host:
            raise ProviderError(
                f"targets.{target.name}.provider_options.endpoint_connection: connection {conn_id} is "
                f"not defined or has no host; create it with the endpoint's URL as host "
                f"(e.g. https://10.0.0.5:8000) and its key as password (without Airflow: "
                f"{secrets.env_var(conn_id, 'host')} / {secrets.env_var(conn_id, 'password')})"
            )
        url = httpx.URL(host if "://" in host else f"https://{host}")
        if url.scheme not in ("http", "https") or not url.host or url.userinfo:
            raise ProviderError(
                f"targets.{target.name}.provider_options.endpoint_connection: connection {conn_id}'s "
                "host is not an http(s) URL without credentials; write e.g. https://10.0.0.5:8000"
            )
        return str(url.copy_with(query=None, fragment=None)).rstrip("/")
    if not opts.base_url:
        raise ProviderError(
            f"targets.{target.name}.provider_options.endpoint_connection: a static target needs its "
            "endpoint: name a static_endpoint_* connection (or give base_url for one without a key)"
        )
    return opts.base_url.rstrip("/")


def static_api_key(target: Target) -> str | None:
    """The existing endpoint's key: the password of its connection (None: no connection or no password)."""
    if not _options(target).endpoint_connection:
        return None
    return _connection(target).get("password") or None
