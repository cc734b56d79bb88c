"""OCI's API as the provider's parts call it: the connection's config and signer, one client per
service and region with bakeoff's retry, hand paging with a short retry, and the ids and tags all parts share.

Why a short listing retry: the SDK's paginator wraps every page in its own 8-attempt retry around the
client's, so one region's outage would hold a teardown for minutes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import oci
from oci.exceptions import ServiceError

from bakeoff.providers import listing
from bakeoff.providers import tags as node_tags
from bakeoff.providers.base import ProviderError
from bakeoff.providers.credentials import emulated_nodes

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.options import OciOptions
    from bakeoff.plan.target import Target

CONN_ID = "oci_default"
# where each config field lives in the Airflow connection, for the "incomplete" error
CONN_FIELDS = {
    "user": "login (user OCID)",
    "key_file": "password (API signing key PEM)",
    "key_content": "password (API signing key PEM)",
    "tenancy": "extra.tenancy",
    "fingerprint": "extra.fingerprint",
    "region": "extra.region",
}
GONE = ("TERMINATING", "TERMINATED")
# freeform tag keys cannot hold ':' or '.' (``bakeoff:run_id`` is stored as ``bakeoff_run_id``); values up to 256
TAGS = node_tags.OCI_FREEFORM


def retry_token(run_id: str, target_slug: str, placement: str, launch: int = 0, shape: str = "") -> str:
    """OCI dedupes a create by this (at most 64 characters) for 24 hours. ``launch`` counts the target's
    earlier recorded launches, as EC2's ClientToken does: a re-provision after a terminated node gets a
    new node (not the terminated one handed back, nor a refusal), while a retry of one launch stays
    idempotent (and must send the same body: OCI refuses a used token with a changed request). A
    launch names its ``shape``: with instance-type fallback the next shape in the same availability
    domain is another request, so it must not reuse the token of the shape refused before it."""
    seq = f"/{launch}" if launch else ""
    of = f"#{shape}" if shape else ""
    return hashlib.sha256(f"bakeoff/{run_id}/{target_slug}/{placement}{seq}{of}".encode()).hexdigest()[:64]


def region_of(ocid: str, default: str) -> str:
    """The region an OCID names (``ocid1.instance.oc1.iad.<id>`` -> us-ashburn-1), else ``default``."""
    parts = ocid.split(".")
    code = parts[3] if len(parts) >= 5 else ""
    if code and oci.regions.is_region(code):
        return code
    if code and oci.regions.is_region_short_name(code):
        return str(oci.regions.get_region_from_short_name(code))
    return default


def _config(creds: dict[str, Any]) -> dict[str, Any]:
    """The SDK config from the connection's fields; a clear error (never the key) when it is incomplete."""
    config = {
        k: creds[k]
        for k in ("user", "fingerprint", "tenancy", "region", "key_content", "key_file", "pass_phrase")
        if creds.get(k)
    }
    if "\\n" in config.get("key_content", "") and "\n" not in config["key_content"]:
        config["key_content"] = config["key_content"].replace("\\n", "\n")  # a PEM pasted with escaped newlines
    try:
        oci.config.validate_config(dict(config))
    except oci.exceptions.InvalidConfig as e:
        problems = sorted({f"{CONN_FIELDS.get(k, k)} {why}" for k, why in e.errors.items()})
        raise ProviderError(
            f"oci: the {CONN_ID} Airflow connection is incomplete: {', '.join(problems)}. Set login = "
            "user OCID, password = the API signing key (PEM), extra = {tenancy, fingerprint, region, "
            "compartment_id}"
        ) from None
    return config


def options_of(target: Target) -> OciOptions:
    """An OCI target's options: plan/target.py reads every oci target's provider_options as OciOptions."""
    return cast("OciOptions", target.provider_options)


def oci_error(e: Exception) -> str:
    """An OCI error as a person reads it: status, code and message (never the request's signature)."""
    if isinstance(e, ServiceError):
        return f"{e.status} {e.code}: {e.message}"
    return f"{type(e).__name__}: {e}"


class OciApi:
    """The connection's state every part of the provider reads: config, regions, compartments, clients."""

    name: str

    def __init__(self, credentials: dict[str, Any] | None = None, **options: Any):
        creds = dict(credentials or {})
        self.config = _config(creds)
        self.service_endpoint = creds.get("service_endpoint")
        self.address_map_url = creds.get("address_map_url")
        self.emulated_nodes: bool = emulated_nodes(creds)  # the sandbox's OCI says so
        self.default_region = self.config["region"]
        self.default_compartment = creds.get("compartment_id") or self.config["tenancy"]
        self.poll_s = float(creds["poll_s"]) if creds.get("poll_s") else None
        self.backoff_s = float(creds.get("backoff_s", 2.0))
        self.regions = list(dict.fromkeys([*(creds.get("regions") or []), self.default_region]))
        self._explicit_regions = bool(creds.get("regions"))  # named in the connection: the whole scan
        self._subscribed: list[str] | None = None
        self._compartments = [self.default_compartment]
        try:
            self._signer = oci.signer.Signer(
                tenancy=self.config["tenancy"],
                user=self.config["user"],
                fingerprint=self.config["fingerprint"],
                private_key_file_location=self.config.get("key_file"),
                pass_phrase=self.config.get("pass_phrase"),
                private_key_content=self.config.get("key_content"),
            )
        except Exception:  # noqa: BLE001 - cryptography's errors vary by key type; never echo the key
            raise ProviderError(
                f"oci: the API signing key in the {CONN_ID} connection's password is not a readable "
                "PEM private key (or it needs extra.pass_phrase)"
            ) from None
        self._retry = oci.retry.RetryStrategyBuilder(
            max_attempts=5,
            total_elapsed_time_seconds=120,
            retry_max_wait_between_calls_seconds=10,
            retry_base_sleep_time_seconds=max(0.01, self.backoff_s / 2),
            service_error_retry_on_any_5xx=True,
            service_error_retry_config={429: []},
        ).get_retry_strategy()
        # listings page by hand with this: the SDK's paginator wraps every page in its own 8-attempt retry
        # around the client's, so one region's outage would hold a teardown for minutes
        self._list_retry = oci.retry.RetryStrategyBuilder(
            max_attempts=3,
            total_elapsed_time_seconds=30,
            retry_max_wait_between_calls_seconds=5,
            retry_base_sleep_time_seconds=max(0.01, self.backoff_s / 2),
            service_error_retry_on_any_5xx=True,
            service_error_retry_config={429: []},
        ).get_retry_strategy()
        self._clients: dict[tuple[str, str], Any] = {}

    def launched_emulated(self, instance_id: str) -> bool:
        """The sandbox's own record of the node, asked by instance id (providers.listing): a connection
        that claims emulated nodes still has each node proved by the layer that launched it."""
        return self.emulated_nodes and listing.launched_emulated(self.address_map_url, self.name, instance_id)

    def _client(self, kind: str, region: str) -> Any:
        key = (kind, region)
        if key not in self._clients:
            cls = {
                "compute": oci.core.ComputeClient,
                "network": oci.core.VirtualNetworkClient,
                "identity": oci.identity.IdentityClient,
                "search": oci.resource_search.ResourceSearchClient,
                "limits": oci.limits.LimitsClient,
            }[kind]
            kw: dict[str, Any] = {
                "signer": self._signer,
                "retry_strategy": self._retry,
                # capacity refusals are 500s: they must not trip the SDK's circuit breaker
                "circuit_breaker_strategy": oci.circuit_breaker.NoCircuitBreakerStrategy(),
            }
            if self.service_endpoint:
                kw["service_endpoint"] = self.service_endpoint.replace("{region}", region)
            self._clients[key] = cls({**self.config, "region": region}, **kw)
        return self._clients[key]

    def _get(self, instance_id: str) -> Any:
        """The SDK's Instance, or None once OCI no longer knows it."""
        try:
            return self._client("compute", region_of(instance_id, self.default_region)).get_instance(instance_id).data
        except ServiceError as e:
            if e.status == 404:
                return None
            raise

    def _pages(self, call: Callable[..., Any], *args: Any, **kw: Any) -> list[Any]:
        """Every item of a paginated list call, each page with the short listing retry."""
        out: list[Any] = []
        page = None
        while True:
            resp = call(*args, retry_strategy=self._list_retry, **({"page": page} if page else {}), **kw)
            data = resp.data
            out += data.items if hasattr(data, "items") and not isinstance(data, list) else data
            page = resp.next_page
            if not page:
                return out
