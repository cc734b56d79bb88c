"""Airflow connections and Variables -> provider credentials (masked): the resolver DAG tasks pass
into the pipeline's steps; the AWS lookup goes through the Amazon provider's AwsBaseHook.

Connections (secrets stay in Airflow's connection store or the environment, never in a plan):
- ``aws_default``: the Amazon provider's AWS connection (keys, role, or the worker's instance role);
  extra ``endpoint_url`` points at another EC2 endpoint (the sandbox's moto), extra
  ``bakeoff_regions`` adds regions the reaper scans.
- ``vultr_default`` / ``digitalocean_default``: the API token in the password; the host (or extra
  ``base_url``) is the API base, so the AMD Developer Cloud (https://api.devcloud.amd.com/v2) and
  the sandbox fakes work with the same provider code.
- ``oci_default`` (conn type generic): login = user OCID, password = the API signing key (PEM);
  extra ``tenancy``, ``fingerprint``, ``region``, ``compartment_id`` (where nodes launch unless a
  plan says), optional ``service_endpoint`` (the sandbox's fake) and ``bakeoff_regions``.
- ``static_endpoint_<name>``: an existing endpoint a static target names (host: its URL, password:
  its key). ``huggingface_<name>`` / ``registry_<name>``: serving secrets a target names under
  ``secrets`` (password: the token). A plan can name no other connection.
Extra ``bakeoff_address_map_url`` (sandbox, or an SSH/SSM tunnel layer) says where serving ports
are reached from the worker; ``bakeoff_emulated_nodes: true`` (the sandbox's EC2 and OCI) says every
node boots the emulator, which lets a cluster target run there (the pipeline checks each node says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bakeoff.core.provider_facts import PROVIDERS

log = logging.getLogger(__name__)

CONN_IDS = {name: p.conn_id for name, p in PROVIDERS.items() if p.conn_id}
REST_DEFAULT_BASE = {name: p.api_base for name, p in PROVIDERS.items() if p.api_base}
# S3 (the reports store, the client bundle) through the Amazon provider's own default connection
S3_CONN_DEFAULT = "aws_default"


def _connection(conn_id: str):
    from airflow.sdk import BaseHook  # noqa: PLC0415

    try:
        return BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - Airflow raises different types per backend for "not defined"
        return None


def _base_url(conn, provider: str) -> str:
    extra = conn.extra_dejson or {}
    if extra.get("base_url"):
        return extra["base_url"]
    host = _url(conn)
    if not host:
        return REST_DEFAULT_BASE[provider]
    if "/" not in host.split("://", 1)[1]:  # a bare host: the API's version path, as in the default
        host += "/" + REST_DEFAULT_BASE[provider].split("://", 1)[1].partition("/")[2]
    return host


def aws_credentials(conn_id: str) -> dict[str, Any]:
    """A boto3 session from the Amazon provider's hook (keys, assumed role, profile or instance role)."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook  # noqa: PLC0415

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="ec2")
    extra = hook.conn_config.extra_config or {}
    return {"session": hook.get_session(), "endpoint_url": hook.conn_config.endpoint_url, **_reach_extras(extra)}


def _reach_extras(extra: dict[str, Any]) -> dict[str, Any]:
    """Where nodes are reached from the worker (the sandbox's address map) and which regions to scan."""
    out: dict[str, Any] = {}
    if extra.get("bakeoff_address_map_url"):
        out["address_map_url"] = extra["bakeoff_address_map_url"]
    if extra.get("bakeoff_regions"):
        out["regions"] = list(extra["bakeoff_regions"])
    if extra.get("bakeoff_emulated_nodes") is True:  # the sandbox's EC2 and OCI: every node boots the emulator
        out["emulated_nodes"] = True
    return out


def rest_credentials(provider: str, conn_id: str | None = None) -> dict[str, Any]:
    """Bearer token (connection password) and base URL (host or extra.base_url) for Vultr / DigitalOcean."""
    conn_id = conn_id or CONN_IDS[provider]
    conn = _connection(conn_id)
    if conn is None:
        return {}
    extra = conn.extra_dejson or {}
    creds: dict[str, Any] = {"token": conn.password or "", "base_url": _base_url(conn, provider)}
    for key, name in (("bakeoff_address_map_url", "address_map_url"), ("poll_s", "poll_s"), ("backoff_s", "backoff_s")):
        if key in extra:
            creds[name] = extra[key]
    return creds


def oci_credentials(conn_id: str) -> dict[str, Any]:
    """The OCI SDK's config fields from the connection: user OCID (login), signing key PEM (password),
    the rest in extra."""
    conn = _connection(conn_id)
    if conn is None:
        return {}
    extra = conn.extra_dejson or {}
    creds: dict[str, Any] = {"user": conn.login or "", "key_content": conn.password or ""}
    for key in (
        "tenancy",
        "fingerprint",
        "region",
        "compartment_id",
        "service_endpoint",
        "pass_phrase",
        "poll_s",
        "backoff_s",
    ):
        if extra.get(key):
            creds[key] = extra[key]
    return {**creds, **_reach_extras(extra)}


# How each form of credentials (the registry's ``credentials``) is read from the provider's connection.
READERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "aws-keys": lambda name: aws_credentials(CONN_IDS[name]),
    "api-token": rest_credentials,
    "oci-api-key": lambda name: oci_credentials(CONN_IDS[name]),
}


def resolve(provider: str) -> dict[str, Any]:
    """The credentials resolver the DAG installs: provider name -> credentials dict (never logged)."""
    if provider == "client_bundle":
        return client_bundle_settings()
    info = PROVIDERS.get(provider)
    read = READERS.get(info.credentials) if info else None
    return read(provider) if read else {}


def masked(resolver):
    """Wrap a resolver so every token it hands out is registered with Airflow's log masker."""

    def resolve_and_mask(provider: str) -> dict[str, Any]:
        creds = resolver(provider)
        for key in ("token", "aws_secret_access_key", "aws_session_token", "key_content", "pass_phrase"):
            if creds.get(key):
                mask_secret(creds[key])
        return creds

    return resolve_and_mask


def mask_secret(value: str) -> None:
    from airflow.sdk.log import mask_secret as _mask  # noqa: PLC0415

    _mask(value)


def _url(conn) -> str:
    """A connection's host as a URL: scheme from the host or the schema field (default https), plus the port."""
    host = (conn.host or "").strip()
    if not host:
        return ""
    if "://" not in host:
        host = f"{conn.schema or 'https'}://{host}"
    if conn.port and f":{conn.port}" not in host.split("//", 1)[1]:
        scheme, rest = host.split("://", 1)
        netloc, _, path = rest.partition("/")
        host = f"{scheme}://{netloc}:{conn.port}/{path}"
    return host.rstrip("/")


def plan_connection(conn_id: str) -> dict[str, Any]:
    """host (as a URL) and password of a connection a plan names; bakeoff.secrets has already refused
    any id outside the static_endpoint_ / huggingface_ / registry_ prefixes. The password is masked."""
    conn = _connection(conn_id)
    if conn is None:
        return {}
    if conn.password:
        mask_secret(conn.password)
    return {"host": _url(conn), "password": conn.password or ""}


def install_plan_connections() -> None:
    """Resolve the connections plans name (static endpoints, serving secrets) from Airflow in this task."""
    from bakeoff import secrets  # noqa: PLC0415

    secrets.set_connection_resolver(plan_connection)


def mask_run_keys(run_dir: str) -> None:
    """Register the run's per-target serving API keys and serving secrets with Airflow's masker (keys
    are derived, so any task can recompute them; masking makes an accidental log line show ***)."""
    from bakeoff import secrets, store  # noqa: PLC0415
    from bakeoff.providers import ProviderError  # noqa: PLC0415
    from bakeoff.run.step_context import run_plan, serving_key  # noqa: PLC0415

    install_plan_connections()
    plan = run_plan(run_dir)
    rid = store.run_facts(run_dir).run_id
    for t in plan.targets:
        try:
            key = serving_key(t, rid)
        except ProviderError:  # a static endpoint whose connection is not defined here: nothing to mask
            key = None
        if key:
            mask_secret(key)
        try:
            secrets.serving_secrets(t.name, t.secrets)  # plan_connection masks each value as it resolves
        except secrets.MissingSecret:
            pass


def credentials_resolver(run_dir: str | None = None) -> Callable[[str], dict[str, Any]]:
    """The resolver a task passes into the pipeline's steps (``credentials=``): provider credentials from
    Airflow connections, every token masked in this task's log (and, given the run, its serving API keys)."""
    install_plan_connections()
    if run_dir:
        mask_run_keys(run_dir)
    return masked(resolve)


def configured_providers() -> list[str]:
    """Providers the reaper scans: every one that starts nodes and needs no connection (local), and a
    cloud when its connection is defined."""
    return [
        name
        for name, p in PROVIDERS.items()
        if p.launches and (p.conn_id is None or _connection(p.conn_id) is not None)
    ]


def client_bundle_settings() -> dict[str, Any]:
    """Where the client bundle is staged for cloud nodes to fetch through a presigned URL: Variable
    bakeoff_client_bucket, through the connection named by Variable bakeoff_client_conn_id (default
    aws_default). The nodes must reach it, so it is real S3, not a MinIO only the workers see."""
    from airflow.sdk import Variable  # noqa: PLC0415

    return _s3_settings(Variable.get("bakeoff_client_bucket", default=None), "bakeoff_client_conn_id")


def _s3_settings(bucket: str | None, conn_variable: str) -> dict[str, Any]:
    """A bucket and an S3 client (S3Hook) on the connection a Variable names (default aws_default)."""
    if not bucket:
        return {}
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook  # noqa: PLC0415
    from airflow.sdk import Variable  # noqa: PLC0415

    conn_id = Variable.get(conn_variable, default=S3_CONN_DEFAULT)  # e.g. MinIO for reports under compose
    return {
        "bucket": bucket,
        "prefix": Variable.get("bakeoff_s3_prefix", default="bakeoff"),
        "s3_client": S3Hook(aws_conn_id=conn_id).get_conn(),
    }
