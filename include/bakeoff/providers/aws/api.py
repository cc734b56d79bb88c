"""EC2's API as the provider's parts call it: the session, one client per service and region with
bakeoff's retry, the account's regions, and the token, ids, options and tags all parts share.

Instance ids are ``<region>/<i-...>`` so describe/terminate need no region lookup.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from bakeoff import catalog
from bakeoff.providers import listing
from bakeoff.providers.base import ProviderError
from bakeoff.providers.credentials import emulated_nodes

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.options import AwsOptions
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)


def client_token(run_id: str, target_slug: str, placement: str, launch: int = 0) -> str:
    """EC2 dedupes RunInstances by this (max 64 ASCII chars), per region, for about a day. ``launch``
    counts the target's earlier recorded launches, so a re-provision after a terminated node (a
    cleared task) gets a new node instead of the terminated one back, while a retry of the same
    launch stays idempotent."""
    seq = f"/{launch}" if launch else ""
    return hashlib.sha256(f"bakeoff/{run_id}/{target_slug}/{placement}{seq}".encode()).hexdigest()[:64]


def split_id(instance_id: str) -> tuple[str, str]:
    region, _, iid = instance_id.rpartition("/")
    if not region or not iid.startswith("i-"):
        raise ProviderError(f"aws: instance id {instance_id!r} is not <region>/<i-...>")
    return region, iid


def options_of(target: Target) -> AwsOptions:
    """An EC2 target's options: plan/target.py reads every aws target's provider_options as AwsOptions."""
    return cast("AwsOptions", target.provider_options)


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": str(v)} for k, v in tags.items()]


def error_text(e: Exception) -> str:
    """An AWS error as a person reads it: the API's code and message (never the request's credentials)."""
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{err.get('Code', 'Error')}: {err.get('Message', '')}".strip()
    return f"{type(e).__name__}: {e}"


class AwsApi:
    """The connection's state every part of the provider reads: session, regions, clients."""

    name: str

    def __init__(self, credentials: dict[str, Any] | None = None, **options: Any):
        creds = dict(credentials or {})
        self.endpoint_url = creds.pop("endpoint_url", None)
        self.address_map_url = creds.pop("address_map_url", None)
        self.emulated_nodes = emulated_nodes(creds)  # the sandbox's EC2 says so
        creds.pop("emulated_nodes", None)
        extra_regions = creds.pop("regions", None) or []
        session = creds.pop("session", None)
        self.session = session or boto3.Session(**{k: v for k, v in creds.items() if v})
        self.default_region = self.session.region_name or "us-east-1"
        known = {r for it in catalog.instance_types().values() if it.provider == "aws" for r in it.regions}
        self._known_regions = known | set(extra_regions) | {self.default_region}
        # regions named in the credentials are the whole scan; otherwise every region the account has
        self._regions: list[str] | None = sorted(self._known_regions) if extra_regions else None
        self._clients: dict[tuple[str, str], Any] = {}
        self._config = Config(retries={"max_attempts": 8, "mode": "standard"}, connect_timeout=10, read_timeout=60)

    @property
    def regions(self) -> list[str]:
        """Every region the account can use, so a sweep or reaper pass misses no plan's region."""
        if self._regions is None:
            try:
                found = {
                    r["RegionName"] for r in self._client("ec2", self.default_region).describe_regions()["Regions"]
                }
            except ClientError as e:
                log.warning(
                    "aws: describe_regions failed (%s); scanning %s only",
                    e.response["Error"]["Code"],
                    ", ".join(sorted(self._known_regions)),
                )
                found = set()
            self._regions = sorted(found | self._known_regions)
        return self._regions

    def launched_emulated(self, instance_id: str) -> bool:
        """The sandbox's own record of the node, asked by instance id (providers.listing): a connection
        that claims emulated nodes still has each node proved by the layer that launched it."""
        return self.emulated_nodes and listing.launched_emulated(self.address_map_url, self.name, instance_id)

    def _client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.session.client(
                service, region_name=region, endpoint_url=self.endpoint_url, config=self._config
            )
        return self._clients[key]
