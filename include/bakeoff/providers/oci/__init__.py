"""Oracle Cloud (OCI): bare-metal AMD MI355X (BM.GPU.MI355X.8) and NVIDIA B200 (BM.GPU.B200.8) with the oci SDK.

The provider is four parts, each a module: ``api`` (the connection's config, signer and clients,
the retry token), ``instance`` (where a target launches, its image, one LaunchInstance, the SDK's
instance as an Instance), ``network`` (the node's network security group) and ``search`` (finding a
run's nodes anywhere in the tenancy). This module joins them into the lifecycle's hooks.

Why each safeguard:
- ``opc-retry-token`` derived from run, target, availability domain, launch count and shape, plus a lookup by
  freeform tag before launching (tokens expire after a day), so a retried task never starts a second
  node and a re-provision after a terminated one gets a fresh node.
- A shutdown timer in user-data: the node powers itself off even if Airflow is dead (a STOPPED
  node still bills for its boot volume, so it counts as failed and the sweep/reaper terminate it).
- Capacity errors ("Out of host capacity", limits) fail over along the plan's availability domains;
  the final error names every domain tried.
- A per run+target network security group opens only the serving and agent ports, only to
  ``ingress_cidr``; it goes with the node, or in ``cleanup`` once no VNIC is in it.

Subnets are regional, so a target launches in one region (its subnet's) and fails over across that
region's availability domains. Freeform tag keys cannot hold ':' safely, so ``bakeoff:run_id`` is
stored as ``bakeoff_run_id``. ``service_endpoint`` (a private or fake endpoint) may hold ``{region}``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oci.exceptions import ServiceError

from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.base import CloudProvider, Placement, ProviderError, Refused, reachable
from bakeoff.providers.oci.api import GONE, TAGS, options_of, region_of
from bakeoff.providers.oci.instance import Network, is_capacity
from bakeoff.providers.oci.network import SecurityGroups
from bakeoff.providers.oci.search import Search
from bakeoff.providers.tags import TAG_RUN, TAG_TARGET

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)


class OciProvider(SecurityGroups, Search, CloudProvider[Network]):
    name = "oci"
    tag_codec = TAGS

    def require(self, target: Target) -> None:
        opts, where = options_of(target), f"targets.{target.name}.provider_options"
        if not opts.ingress_cidr:
            raise ProviderError(
                f"{where}.ingress_cidr: set the CIDR the benchmark client reaches the node from "
                "(e.g. 203.0.113.7/32); the node's network security group opens only to it"
            )
        if not opts.subnet_ocid:
            raise ProviderError(
                f"{where}.subnet_ocid: set the OCID of a public subnet (one whose VNICs may have a "
                "public IP, with an internet gateway route) in the region to launch in"
            )

    # the lifecycle's hooks (base.CloudProvider.create) -------------------------------------------
    # One region (the subnet's) per target; the placements are its availability domains. prepare finds
    # the image and makes the network security group; abandon drops the group once no VNIC is in it.
    def _where(self, target: Target) -> tuple[str, str]:
        """(region, compartment) the target launches in; the compartment joins what list_tagged scans."""
        compartment = options_of(target).compartment_id or self.default_compartment
        if compartment not in self._compartments:
            self._compartments.append(compartment)
        return self.region_for(target), compartment

    def find_existing(self, target: Target, run_id: str) -> Instance | None:
        region, compartment = self._where(target)
        return next((i for i in self._list(run_id, [region], [compartment]) if i.target == target.slug), None)

    def prepare(self, target: Target, run_id: str, tags: dict[str, str]) -> Network:
        region, compartment = self._where(target)
        image = self._image(target, compartment, region)
        nsg = self._ensure_nsg(target, run_id, compartment, region, self.tag_codec.encode(tags))
        return Network(region=region, compartment=compartment, image=image, nsg=nsg)

    def placements(self, target: Target, context: Network) -> list[Placement]:
        return [Placement(context.region, ad) for ad in self.availability_domains(target, context.region)]

    def launch(
        self,
        target: Target,
        run_id: str,
        place: Placement,
        script: str,
        tags: dict[str, str],
        spec: LaunchSpec,
        context: Network,
    ) -> Instance:
        ad = place.where
        try:
            return self._launch(
                target,
                run_id,
                ad,
                context.region,
                context.compartment,
                context.image,
                context.nsg,
                script,
                self.tag_codec.encode(tags),
                spec.launch,
            )
        except ServiceError as e:
            if not is_capacity(e):
                raise ProviderError(
                    f"oci: LaunchInstance {target.instance_type} in {ad} failed: {e.status} {e.code}: {e.message}"
                ) from None
            quota = e.code == "LimitExceeded" or "limit" in (e.message or "").lower()
            raise Refused("quota" if quota else "capacity", str(e.code), str(e.message or "")) from None

    def abandon(self, target: Target, run_id: str, context: Network) -> None:
        self._drop_nsg(run_id, target.slug, context.compartment, context.region)

    def capacity_scope(self, context: Network) -> str:
        return f" in {context.region}"

    def capacity_advice(self, target: Target) -> str:
        return (
            f"Add availability_domains to targets.{target.name}.provider_options, ask Oracle for a service limit "
            "increase or a capacity reservation, or try later"
        )

    def check_ready(self, instance: Instance) -> Instance | None:
        return reachable(
            self,
            instance,
            ended=lambda i: i.state in ("terminated", "failed"),
            status=lambda i: i.cloud_state,
        )

    def terminate(self, instance_id: str) -> bool:
        """Terminate with the boot volume; then drop the target's security group if no VNIC is left in it."""
        raw = self._get(instance_id)
        if raw is None or raw.lifecycle_state in GONE:
            return False
        region = region_of(instance_id, self.default_region)
        try:
            self._client("compute", region).terminate_instance(instance_id, preserve_boot_volume=False)
        except ServiceError as e:
            if e.status == 404:
                return False
            raise
        log.info("oci: terminated %s", instance_id)
        tags = TAGS.decode(raw.freeform_tags)
        if tags.get(TAG_RUN) and tags.get(TAG_TARGET):
            self._drop_nsg(tags[TAG_RUN], tags[TAG_TARGET], raw.compartment_id, region)
        return True

    def console_output(self, instance_id: str) -> str | None:
        """OCI's console history is an asynchronous capture; the node agent supplies the boot and serving logs."""
        return None
