"""Oracle Cloud (OCI): bare-metal AMD MI355X (BM.GPU.MI355X.8) and NVIDIA B200 (BM.GPU.B200.8) with the oci SDK.

Why each safeguard:
- ``opc-retry-token`` derived from run, target, availability domain and launch count, plus a lookup by
  freeform tag before launching (tokens expire after a day), so a retried task never starts a second
  node and a re-provision after a terminated one gets a fresh node.
- A shutdown timer in user-data: the node powers itself off even if Airflow is dead (a STOPPED
  node still bills for its boot volume, so it counts as failed and the sweep/reaper terminate it).
- Capacity errors ("Out of host capacity", limits) fail over along the plan's availability domains;
  the final error names every domain tried.
- A per run+target network security group opens only the serving and agent ports, only to
  ``ingress_cidr``; it goes with the node, or in ``cleanup`` once no VNIC is in it.

Subnets are regional, so a target launches in one region (its subnet's) and fails over across that
region's availability domains. Instance ids are plain OCIDs; the region comes from the OCID.
Freeform tag keys cannot hold ':' safely, so ``bakeoff:run_id`` is stored as ``bakeoff_run_id``.

Finding a run's nodes must not depend on knowing where a plan put them: ``list_tagged`` asks OCI
Resource Search for instances carrying the run tag, in every region the tenancy subscribes to (search
is regional, compartments are not a boundary to it), and also lists the known compartments directly
(the search index trails a launch by seconds). A region that cannot be searched is reported, never
allowed to hide the others. ``service_endpoint`` (a private or fake endpoint) may hold ``{region}``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

import oci
from oci.exceptions import ServiceError

from bakeoff.providers import tags as node_tags
from bakeoff.providers.base import (
    CloudProvider,
    Instance,
    LaunchSpec,
    PartialListing,
    Placement,
    ProviderError,
    Refused,
    reachable,
)
from bakeoff.providers.boot import UserDataBoot
from bakeoff.providers.rest import resolve_address
from bakeoff.providers.tags import TAG_RUN, TAG_TARGET

log = logging.getLogger(__name__)

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
GONE = ("TERMINATING", "TERMINATED")
# freeform tag keys cannot hold ':' or '.' (``bakeoff:run_id`` is stored as ``bakeoff_run_id``); values up to 256
TAGS = node_tags.OCI_FREEFORM


def retry_token(run_id: str, target_slug: str, placement: str, launch: int = 0) -> str:
    """OCI dedupes a create by this (at most 64 characters) for 24 hours. ``launch`` counts the target's
    earlier recorded launches, as EC2's ClientToken does: a re-provision after a terminated node gets a
    new node (not the terminated one handed back, nor a refusal), while a retry of one launch stays
    idempotent (and must send the same body: OCI refuses a used token with a changed request)."""
    seq = f"/{launch}" if launch else ""
    return hashlib.sha256(f"bakeoff/{run_id}/{target_slug}/{placement}{seq}".encode()).hexdigest()[:64]


def nsg_name(run_id: str, target_slug: str) -> str:
    return f"bakeoff-{retry_token(run_id, target_slug, 'nsg')[:20]}"


def region_of(ocid: str, default: str) -> str:
    """The region an OCID names (``ocid1.instance.oc1.iad.<id>`` -> us-ashburn-1), else ``default``."""
    parts = ocid.split(".")
    code = parts[3] if len(parts) >= 5 else ""
    if code and oci.regions.is_region(code):
        return code
    if code and oci.regions.is_region_short_name(code):
        return oci.regions.get_region_from_short_name(code)
    return default


def is_capacity(e: ServiceError) -> bool:
    msg = (e.message or "").lower()
    return (
        (e.status == 500 and "out of host capacity" in msg)
        or e.status == 429
        or e.code == "LimitExceeded"
        or "capacity" in msg
    )


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


class OciProvider(UserDataBoot, CloudProvider):
    name = "oci"
    tag_codec = TAGS

    def __init__(self, credentials: dict[str, Any] | None = None, **options: Any):
        creds = dict(credentials or {})
        self.config = _config(creds)
        self.service_endpoint = creds.get("service_endpoint")
        self.address_map_url = creds.get("address_map_url")
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

    def _client(self, kind: str, region: str):
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

    # placement ------------------------------------------------------------------------------
    def require(self, target) -> None:
        opts, where = target.provider_options, f"targets.{target.name}.provider_options"
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

    def region_for(self, target) -> str:
        """The subnet's region: OCI subnets are regional, so a target cannot fail over to another region."""
        opts = target.provider_options
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

    def availability_domains(self, target, region: str) -> list[str]:
        """The plan's ordered domains, else every domain of the region."""
        if target.provider_options.availability_domains:
            return list(target.provider_options.availability_domains)
        try:
            ads = self._client("identity", region).list_availability_domains(self.config["tenancy"]).data
        except ServiceError as e:
            raise ProviderError(
                f"oci: cannot list availability domains in {region} ({e.status} {e.code}); set "
                f"targets.{target.name}.provider_options.availability_domains"
            ) from None
        return [ad.name for ad in ads]

    def _image(self, target, compartment: str, region: str) -> str:
        """The plan's image, else the newest platform image OCI lists for the shape."""
        opts = target.provider_options
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
        return images[0].id

    def _ensure_nsg(self, target, run_id: str, compartment: str, region: str, tags: dict[str, str]) -> str:
        """The run+target's security group, found by name on a retry, with only the serving and agent ports open."""
        from bakeoff.agent import AGENT_PORT  # noqa: PLC0415 - the agent package only where a security group opens its port

        net, opts = self._client("network", region), target.provider_options
        try:
            vcn = net.get_subnet(opts.subnet_ocid).data.vcn_id
        except ServiceError as e:
            raise ProviderError(
                f"targets.{target.name}.provider_options.subnet_ocid: subnet {opts.subnet_ocid} "
                f"not found ({e.status} {e.code}); check the OCID and the connection's policies"
            ) from None
        name = nsg_name(run_id, target.slug)
        found = [
            g
            for g in oci.pagination.list_call_get_all_results(
                net.list_network_security_groups, compartment_id=compartment, vcn_id=vcn, display_name=name
            ).data
            if g.lifecycle_state not in GONE
        ]
        nsg = (
            found[0]
            if found
            else net.create_network_security_group(
                oci.core.models.CreateNetworkSecurityGroupDetails(
                    compartment_id=compartment, vcn_id=vcn, display_name=name, freeform_tags=tags
                )
            ).data
        )
        have = {
            (r.source, r.tcp_options.destination_port_range.min)
            for r in oci.pagination.list_call_get_all_results(
                net.list_network_security_group_security_rules, nsg.id, direction="INGRESS"
            ).data
            if r.tcp_options and r.tcp_options.destination_port_range
        }
        want = [p for p in (target.stack_spec.port, AGENT_PORT) if (opts.ingress_cidr, p) not in have]
        if want:
            net.add_network_security_group_security_rules(
                nsg.id,
                oci.core.models.AddNetworkSecurityGroupSecurityRulesDetails(
                    security_rules=[_ingress_rule(opts.ingress_cidr, p) for p in want]
                ),
            )
        return nsg.id

    # the lifecycle's hooks (base.CloudProvider.create) -------------------------------------------
    # One region (the subnet's) per target; the placements are its availability domains. prepare finds
    # the image and makes the network security group; abandon drops the group once no VNIC is in it.
    def _where(self, target) -> tuple[str, str]:
        """(region, compartment) the target launches in; the compartment joins what list_tagged scans."""
        compartment = target.provider_options.compartment_id or self.default_compartment
        if compartment not in self._compartments:
            self._compartments.append(compartment)
        return self.region_for(target), compartment

    def find_existing(self, target, run_id: str) -> Instance | None:
        region, compartment = self._where(target)
        return next((i for i in self._list(run_id, [region], [compartment]) if i.target == target.slug), None)

    def prepare(self, target, run_id: str, tags: dict[str, str]) -> dict[str, str]:
        region, compartment = self._where(target)
        image = self._image(target, compartment, region)
        nsg = self._ensure_nsg(target, run_id, compartment, region, self.tag_codec.encode(tags))
        return {"region": region, "compartment": compartment, "image": image, "nsg": nsg}

    def placements(self, target, context: dict[str, str]) -> list[Placement]:
        region = context["region"]
        return [Placement(region, ad) for ad in self.availability_domains(target, region)]

    def launch(
        self,
        target,
        run_id: str,
        place: Placement,
        script: str,
        tags: dict[str, str],
        spec: LaunchSpec,
        context: dict[str, str],
    ) -> Instance:
        ad = place.where
        try:
            return self._launch(
                target,
                run_id,
                ad,
                context["region"],
                context["compartment"],
                context["image"],
                context["nsg"],
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

    def abandon(self, target, run_id: str, context: dict[str, str] | None) -> None:
        if context:
            self._drop_nsg(run_id, target.slug, context["compartment"], context["region"])

    def capacity_scope(self, context: dict[str, str] | None) -> str:
        return f" in {context['region']}" if context else ""

    def capacity_advice(self, target) -> str:
        return (
            f"Add availability_domains to targets.{target.name}.provider_options, ask Oracle for a service limit "
            "increase or a capacity reservation, or try later"
        )

    def _launch(
        self,
        target,
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
        opts = target.provider_options
        token = retry_token(run_id, target.slug, ad, launch)
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

    def _public_ip(self, raw) -> str | None:
        region = region_of(raw.id, self.default_region)
        attachments = self._client("compute", region).list_vnic_attachments(raw.compartment_id, instance_id=raw.id).data
        for a in attachments:
            if a.lifecycle_state == "ATTACHED":
                ip = self._client("network", region).get_vnic(a.vnic_id).data.public_ip
                if ip:
                    return ip
        return None

    def _to_instance(self, raw) -> Instance:
        tags = TAGS.decode(raw.freeform_tags)
        state = STATES.get(raw.lifecycle_state, "failed")  # a state this code does not know may bill: delete it
        port = node_tags.port_of(tags)
        host = agent_port = None
        if state == "running":
            host, port, agent_port = resolve_address(
                self.address_map_url, self.name, raw.id, self._public_ip(raw), port
            )
        return Instance(
            provider=self.name,
            id=raw.id,
            target=tags.get(TAG_TARGET, ""),
            run_id=tags.get(TAG_RUN, ""),
            state=state,
            host=host,
            port=port,
            instance_type=raw.shape or "",
            region=region_of(raw.id, self.default_region),
            launched_at=raw.time_created.timestamp() if raw.time_created else None,
            expires_at=node_tags.expiry_of(tags),
            tags=tags,
            details={
                "oci_state": raw.lifecycle_state,
                "availability_domain": raw.availability_domain,
                "compartment_id": raw.compartment_id,
                "agent_port": agent_port,
            },
        )

    def check_ready(self, instance: Instance) -> Instance | None:
        return reachable(
            self,
            instance,
            ended=lambda i: i.state in ("terminated", "failed"),
            status=lambda i: i.details.get("oci_state"),
        )

    def _get(self, instance_id: str):
        try:
            return self._client("compute", region_of(instance_id, self.default_region)).get_instance(instance_id).data
        except ServiceError as e:
            if e.status == 404:
                return None
            raise

    def describe(self, instance_id: str) -> Instance | None:
        raw = self._get(instance_id)
        return self._to_instance(raw) if raw is not None else None

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

    def _list(self, run_id: str | None, regions: list[str], compartments: list[str]) -> list[Instance]:
        out: dict[str, Instance] = {}
        for region in dict.fromkeys(regions):
            for comp in dict.fromkeys(compartments):
                for raw in self._pages(self._client("compute", region).list_instances, comp):
                    tags = TAGS.decode(raw.freeform_tags)
                    if raw.lifecycle_state in GONE or TAG_RUN not in tags or (run_id and tags[TAG_RUN] != run_id):
                        continue
                    if raw.id not in out:
                        out[raw.id] = self._to_instance(raw)
        return list(out.values())

    def include(self, targets: list) -> None:
        """Also list directly in these OCI targets' compartments and subnet regions (search finds them
        anyway; this covers the seconds before the search index has a fresh node)."""
        for t in targets:
            if t.provider != self.name:
                continue
            if t.provider_options.compartment_id and t.provider_options.compartment_id not in self._compartments:
                self._compartments.append(t.provider_options.compartment_id)
            try:
                region = self.region_for(t)
            except ProviderError:
                continue
            if region not in self.regions:
                self.regions.append(region)

    def scan_regions(self, errors: dict[str, str]) -> list[str]:
        """The known regions plus every region the tenancy subscribes to (unless the connection names them)."""
        if not self._explicit_regions and self._subscribed is None:
            try:
                subs = (
                    self._client("identity", self.default_region).list_region_subscriptions(self.config["tenancy"]).data
                )
                self._subscribed = [r.region_name for r in subs if r.status == "READY"]
            except Exception as e:  # noqa: BLE001 - still scan the known regions
                errors["region subscriptions"] = (
                    f"{_oci_error(e)}; name the regions to scan in the {CONN_ID} connection's extra.bakeoff_regions"
                )
        return list(dict.fromkeys([*self.regions, *(self._subscribed or [])]))

    def _pages(self, call: Callable, *args: Any, **kw: Any) -> list:
        """Every item of a paginated list call, each page with the short listing retry."""
        out, page = [], None
        while True:
            resp = call(*args, retry_strategy=self._list_retry, **({"page": page} if page else {}), **kw)
            data = resp.data
            out += data.items if hasattr(data, "items") and not isinstance(data, list) else data
            page = resp.next_page
            if not page:
                return out

    def _search(self, region: str, run_id: str | None) -> list:
        details = oci.resource_search.models.StructuredSearchDetails(
            type="Structured", query=search_query(run_id), matching_context_type="NONE"
        )
        return self._pages(self._client("search", region).search_resources, details)

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        """Live bakeoff instances anywhere in the tenancy: Resource Search in every region, plus a direct
        listing of the known compartments in the known regions. Raises PartialListing (with what it
        found) when a region could not be searched."""
        found: dict[str, Instance] = {}
        errors: dict[str, str] = {}
        for region in self.scan_regions(errors):
            try:
                for hit in self._search(region, run_id):
                    if hit.identifier in found or hit.lifecycle_state in GONE:
                        continue
                    raw = self._get(hit.identifier)  # the index may be stale: the instance's own state decides
                    tags = TAGS.decode(raw.freeform_tags) if raw is not None else {}
                    if (
                        raw is None
                        or raw.lifecycle_state in GONE
                        or TAG_RUN not in tags
                        or (run_id and tags[TAG_RUN] != run_id)
                    ):
                        continue
                    found[raw.id] = self._to_instance(raw)
            except Exception as e:  # noqa: BLE001 - one region's outage must not hide the others' nodes
                errors[f"{region} search"] = _oci_error(e)
            if region not in self.regions:
                continue
            for comp in dict.fromkeys(self._compartments):
                try:
                    for inst in self._list(run_id, [region], [comp]):
                        found.setdefault(inst.id, inst)
                except Exception as e:  # noqa: BLE001
                    errors[f"{region} {comp}"] = _oci_error(e)
        for where, why in errors.items():
            log.warning("oci: cannot list instances (%s): %s", where, why)
        if errors:
            raise PartialListing(self.name, list(found.values()), errors)
        return list(found.values())

    def console_output(self, instance_id: str) -> str | None:
        """OCI's console history is an asynchronous capture; the node agent supplies the boot and serving logs."""
        return None

    # network security groups ------------------------------------------------------------------
    def _nsgs(self, region: str, compartment: str, name: str | None = None) -> list:
        net = self._client("network", region)
        kw = {"display_name": name} if name else {}
        return [
            g
            for g in oci.pagination.list_call_get_all_results(
                net.list_network_security_groups, compartment_id=compartment, **kw
            ).data
            if g.lifecycle_state not in GONE
        ]

    def _delete_if_empty(self, region: str, nsg) -> bool:
        """Delete the group unless a VNIC is still in it (a terminating node's): the next pass gets it."""
        net = self._client("network", region)
        if oci.pagination.list_call_get_all_results(net.list_network_security_group_vnics, nsg.id).data:
            log.info("oci: security group %s still has VNICs; leaving it for the next pass", nsg.id)
            return False
        try:
            net.delete_network_security_group(nsg.id)
        except ServiceError as e:
            if e.status == 404:
                return False
            log.info("oci: security group %s not deleted yet (%s %s)", nsg.id, e.status, e.code)
            return False
        log.info("oci: deleted security group %s", nsg.id)
        return True

    def _drop_nsg(self, run_id: str, slug: str, compartment: str, region: str) -> None:
        for nsg in self._nsgs(region, compartment, nsg_name(run_id, slug)):
            self._delete_if_empty(region, nsg)

    def cleanup(self, select: Callable[[dict[str, str]], bool]) -> list[str]:
        """Delete the per-run security groups whose tags ``select`` picks (ended or expired runs); a group
        still holding a VNIC is left for the next pass."""
        deleted = []
        for region in self.regions:
            for comp in dict.fromkeys(self._compartments):
                for nsg in self._nsgs(region, comp):
                    tags = TAGS.decode(nsg.freeform_tags)
                    if TAG_RUN in tags and select(tags) and self._delete_if_empty(region, nsg):
                        deleted.append(nsg.id)
        return deleted


def search_query(run_id: str | None) -> str:
    """A structured Resource Search query for instances with the run's freeform tag. A run id that cannot
    sit safely in a quoted literal is matched by key only and filtered here (no query injection)."""
    key = TAGS.encode({TAG_RUN: ""}).popitem()[0]
    if run_id and len(run_id) <= 256 and all(c.isprintable() and c not in "'\\" for c in run_id):
        return f"query instance resources where (freeformTags.key = '{key}' && freeformTags.value = '{run_id}')"
    return f"query instance resources where freeformTags.key = '{key}'"


def _oci_error(e: Exception) -> str:
    """An OCI error as a person reads it: status, code and message (never the request's signature)."""
    if isinstance(e, ServiceError):
        return f"{e.status} {e.code}: {e.message}"
    return f"{type(e).__name__}: {e}"


def _ingress_rule(cidr: str, port: int):
    return oci.core.models.AddSecurityRuleDetails(
        direction="INGRESS",
        protocol="6",
        source=cidr,
        source_type="CIDR_BLOCK",
        is_stateless=False,
        description=f"bakeoff: port {port} from the benchmark client",
        tcp_options=oci.core.models.TcpOptions(destination_port_range=oci.core.models.PortRange(min=port, max=port)),
    )
