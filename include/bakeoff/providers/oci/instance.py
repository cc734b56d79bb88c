"""OCI instances: where a target launches (its subnet's region, that region's availability
domains), its image, one LaunchInstance with its retry token, and an instance as bakeoff's Instance.

The ``opc-retry-token`` is derived from run, target, availability domain, launch count and shape (api.py), so
a retried launch never starts a second node and a re-provision after a terminated one gets a fresh
node. Capacity and limit refusals ("Out of host capacity", LimitExceeded) move the create to the next
domain. Instance ids are plain OCIDs; the region comes from the OCID.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import oci
from oci.exceptions import ServiceError

from bakeoff.core.instance import Instance
from bakeoff.providers.base import ProviderError
from bakeoff.providers.listing import listed_instance
from bakeoff.providers.oci.api import TAGS, OciApi, options_of, region_of, retry_token

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)

STATES = {
    "PROVISIONING": "pending",
    "STARTING": "pending",
    "MOVING": "pending",
    "CREATING_IMAGE": "running",
    "RUNNING": "running",
    "STOPPING": "failed",
    "STOPPED": "failed",
    "TERMINATING": "terminated",
    "TERMINATED": "terminated",
}


def is_capacity(e: ServiceError) -> bool:
    msg = (e.message or "").lower()
    return (
        (e.status == 500 and "out of host capacity" in msg)
        or e.status == 429
        or e.code == "LimitExceeded"
        or "capacity" in msg
    )


@dataclass(frozen=True)
class Network:
    """What a target's launches are made behind (the lifecycle's ``prepare``): where, the image, the group."""

    region: str
    compartment: str
    image: str
    nsg: str


class Nodes(OciApi):
    """Launch, read and describe the provider's instances."""

    def region_for(self, target: Target) -> str:
        """The subnet's region: OCI subnets are regional, so a target cannot fail over to another region."""
        opts = options_of(target)
        subnet_region = region_of(opts.subnet_ocid or "", "")
        if len(opts.regions) > 1:
            raise ProviderError(
                f"targets.{target.name}.provider_options.regions: an OCI target launches in its "
                "subnet's region only; list one region and fail over with availability_domains"
            )
        if opts.regions and subnet_region and opts.regions[0] != subnet_region:
            raise ProviderError(
                f"targets.{target.name}.provider_options.regions: subnet_ocid is in {subnet_region}, "
                f"not {opts.regions[0]}; use a subnet of that region or change the region"
            )
        return (list(opts.regions) or [subnet_region or self.default_region])[0]

    def availability_domains(self, target: Target, region: str) -> list[str]:
        """The plan's ordered domains, else every domain of the region."""
        opts = options_of(target)
        if opts.availability_domains:
            return list(opts.availability_domains)
        try:
            ads = self._client("identity", region).list_availability_domains(self.config["tenancy"]).data
        except ServiceError as e:
            raise ProviderError(
                f"oci: cannot list availability domains in {region} ({e.status} {e.code}); set "
                f"targets.{target.name}.provider_options.availability_domains"
            ) from None
        return [str(ad.name) for ad in ads]

    def _image(self, target: Target, compartment: str, region: str) -> str:
        """The plan's image, else the newest platform image OCI lists for the shape."""
        opts = options_of(target)
        if opts.image_ocid:
            return opts.image_ocid
        images = (
            self._client("compute", region)
            .list_images(
                compartment,
                shape=target.instance_type,
                sort_by="TIMECREATED",
                sort_order="DESC",
                lifecycle_state="AVAILABLE",
                limit=1,
            )
            .data
        )
        if not images:
            raise ProviderError(
                f"oci: no image lists {target.instance_type} as compatible in {region}; set "
                f"targets.{target.name}.provider_options.image_ocid (an image with Docker and the GPU driver)"
            )
        log.info("oci: using platform image %s (%s) for %s", images[0].display_name, images[0].id, target.slug)
        return str(images[0].id)

    def _launch(
        self,
        target: Target,
        run_id: str,
        ad: str,
        region: str,
        compartment: str,
        image: str,
        nsg: str,
        script: str,
        tags: dict[str, str],
        launch: int = 0,
    ) -> Instance:
        """One LaunchInstance; a lost answer or a 5xx is retried with the same token and body (no second node)."""
        opts = options_of(target)
        token = retry_token(run_id, target.slug, ad, launch, target.instance_type or "")
        details = oci.core.models.LaunchInstanceDetails(
            availability_domain=ad,
            compartment_id=compartment,
            shape=target.instance_type,
            display_name=f"bakeoff-{target.slug}-{token[:8]}",
            freeform_tags=tags,
            metadata={"user_data": base64.b64encode(script.encode()).decode()},
            source_details=oci.core.models.InstanceSourceViaImageDetails(
                image_id=image, boot_volume_size_in_gbs=opts.root_volume_gb
            ),
            create_vnic_details=oci.core.models.CreateVnicDetails(
                subnet_id=opts.subnet_ocid, assign_public_ip=True, nsg_ids=[nsg]
            ),
        )
        compute = self._client("compute", region)
        for attempt in range(4):
            try:
                raw = compute.launch_instance(
                    details, opc_retry_token=token, retry_strategy=oci.retry.NoneRetryStrategy()
                ).data
                break
            except ServiceError as e:
                if is_capacity(e) or e.status < 500 or attempt == 3:
                    raise
            except (oci.exceptions.RequestException, oci.exceptions.ConnectTimeout) as e:
                if attempt == 3:
                    raise ProviderError(
                        f"oci: LaunchInstance in {ad} kept failing ({type(e).__name__}); try again later"
                    ) from None
            time.sleep(self.backoff_s * 2**attempt)
        return self._to_instance(raw)

    def _public_ip(self, raw: Any) -> str | None:
        """The address of the instance's attached VNIC (the SDK's Instance has none)."""
        region = region_of(raw.id, self.default_region)
        attachments = self._client("compute", region).list_vnic_attachments(raw.compartment_id, instance_id=raw.id).data
        for a in attachments:
            if a.lifecycle_state == "ATTACHED":
                ip = self._client("network", region).get_vnic(a.vnic_id).data.public_ip
                if ip:
                    return str(ip)
        return None

    def _to_instance(self, raw: Any) -> Instance:
        tags = TAGS.decode(raw.freeform_tags)
        state = STATES.get(raw.lifecycle_state, "failed")  # a state this code does not know may bill: delete it
        return listed_instance(
            self.name,
            raw.id,
            tags,
            state,
            self._public_ip(raw) if state == "running" else None,
            self.address_map_url,
            instance_type=raw.shape or "",
            region=region_of(raw.id, self.default_region),
            launched_at=raw.time_created.timestamp() if raw.time_created else None,
            cloud_state=raw.lifecycle_state,
            zone=raw.availability_domain,
        )

    def describe(self, instance_id: str) -> Instance | None:
        raw = self._get(instance_id)
        return self._to_instance(raw) if raw is not None else None
