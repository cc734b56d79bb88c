"""AWS EC2: NVIDIA Blackwell / Hopper nodes (p6-b200, p6-b300, p5en, p5) with boto3.

The provider is four parts, each a module: ``api`` (the session, one client per service and region,
the account's regions, the client token and instance ids), ``network`` (the run+target's security
group and its cleanup), ``instance`` (the AMI, one RunInstances, an EC2 instance as an Instance,
describe, terminate, console log) and ``search`` (a run's nodes in every region). This module joins
them into the lifecycle's hooks.

Why each safeguard:
- ``ClientToken`` derived from run, target and placement, plus a lookup by tag before launching,
  so a retried task (or a lost response) never starts a second instance.
- ``InstanceInitiatedShutdownBehavior=terminate`` and a ``shutdown`` timer in user-data: the
  cloud-side kill switch that fires even if Airflow is dead.
- Capacity errors fail over along the plan's ordered zones/regions; the final error names every
  placement tried and why it was refused.
Instance ids are ``<region>/<i-...>`` so describe/terminate need no region lookup.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from bakeoff.core.instance import Instance
from bakeoff.core.launch import LaunchSpec
from bakeoff.providers import tags as node_tags
from bakeoff.providers.aws.api import options_of
from bakeoff.providers.aws.instance import CAPACITY_CODES, QUOTA_CODES
from bakeoff.providers.aws.network import dry
from bakeoff.providers.aws.search import Search
from bakeoff.providers.base import CloudProvider, PartialListing, Placement, ProviderError, Refused, reachable

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)
PREFLIGHT_RUN_ID = "manual__preflight"  # the dry run's stand-in run id (its tags and token take its place)


class AwsProvider(Search, CloudProvider[None]):
    name = "aws"
    tag_codec: node_tags.Pairs = node_tags.EC2

    # placement ------------------------------------------------------------------
    def placements(self, target: Target, context: None = None) -> list[Placement]:
        """Regions (each with its zones, or none) in the order the plan gives: zones within their region first."""
        opts = options_of(target)
        regions = list(opts.regions) or list(target.instance.regions[:1]) or [self.default_region]
        for z in opts.zones:
            if z[:-1] not in regions:
                regions.append(z[:-1])
        out: list[Placement] = []
        for r in regions:
            zones = [z for z in opts.zones if z[:-1] == r]
            out += [Placement(r, z) for z in zones] or [Placement(r)]
        return out

    # the lifecycle's hooks (base.CloudProvider.create) -------------------------------------------
    def require(self, target: Target) -> None:
        opts = options_of(target)
        if not opts.ingress_cidr and not opts.security_group_ids:
            raise ProviderError(
                f"targets.{target.name}.provider_options.ingress_cidr: set the CIDR the benchmark client "
                "reaches the node from (e.g. 203.0.113.7/32), or give security_group_ids"
            )

    def find_existing(self, target: Target, run_id: str) -> Instance | None:
        try:
            mine = self.list_tagged(run_id)
        except PartialListing as e:  # only a region this target may launch in matters for the reuse check
            if {p.region for p in self.placements(target)} & set(e.errors):
                raise
            mine = e.found
        return next((i for i in mine if i.target == target.slug), None)

    def launch(
        self,
        target: Target,
        run_id: str,
        place: Placement,
        script: str,
        tags: dict[str, str],
        spec: LaunchSpec,
        context: None,
    ) -> Instance:
        try:
            return self._launch(
                target, run_id, self.tag_codec.encode(tags), script, place.region, place.zone, spec.launch
            )
        except ClientError as e:
            code, msg = e.response["Error"]["Code"], e.response["Error"].get("Message", "")
            if code == "IdempotentParameterMismatch":
                return self._token_owner(target, run_id, place.where)
            if code in CAPACITY_CODES:
                raise Refused("quota" if code in QUOTA_CODES else "capacity", code) from None
            raise ProviderError(
                f"aws: RunInstances {target.instance_type} in {place.where} failed: {code}: {msg}"
            ) from None

    def dry_run(
        self,
        target: Target,
        run_id: str,
        *,
        tags: Mapping[str, str],
        spec: LaunchSpec | Mapping[str, Any],
        place: Placement,
    ) -> list[tuple[str, str, str]]:
        """Send, with ``DryRun``, the requests a create at ``place`` would send (the same tags, block
        devices, security groups, market options and user-data, from the same builder): (call, code,
        message) per call, ``DryRunOperation`` meaning it would have succeeded. Nothing is made."""
        launch = LaunchSpec.of(spec)
        script = self.boot_script(target, launch)
        labels = self.tag_codec.encode(node_tags.node_tags(tags, run_id, target.slug, target.stack_spec.port))
        groups, tried = self._dry_run_groups(target, run_id, place.region, labels)
        kw = self._run_request(target, run_id, labels, script, place.region, place.zone, launch.launch, groups)
        return [*tried, ("RunInstances", *dry(self._client("ec2", place.region).run_instances, kw))]

    def preflight_dry_run(self, target: Target, place: Placement, launch: LaunchSpec) -> list[tuple[str, str, str]]:
        """``dry_run`` with a run's stand-ins (``launch``: the pre-flight's ``userdata.stand_in_launch``, a
        key, certificate, bundle URL and expiry as long as a run's own; tags of a run's form): what the
        pre-flight sends."""
        expires = str(int(launch.expires_at or 0))
        tags = {
            node_tags.TAG_PLAN: "preflight",
            node_tags.TAG_EXPIRES: expires,
            node_tags.TAG_INSTALLATION: "bi-" + "0" * 24,  # secrets.installation_id()'s form, no secret read
        }
        return self.dry_run(target, PREFLIGHT_RUN_ID, tags=tags, spec=launch, place=place)

    def capacity_advice(self, target: Target) -> str:
        return (
            f"Add zones/regions to targets.{target.name}.provider_options, raise the vCPU quota, or reserve a "
            "Capacity Block (provider_options.capacity_reservation_id)"
        )

    def _token_owner(self, target: Target, run_id: str, where: str, looks: int = 5, pause_s: float = 2.0) -> Instance:
        """EC2 says this launch's token was used with other parameters (an earlier attempt of the same
        launch, before the AMI parameter or the staged client bundle's address changed): that attempt's
        node exists, so find it by tag; launching again would start a second one."""
        for look in range(looks):
            for inst in self.list_tagged(run_id):
                if inst.target == target.slug:
                    log.info("aws: %s: the launch token's node is %s; reusing it", target.slug, inst.id)
                    return inst
            if look < looks - 1:
                time.sleep(pause_s)
        raise ProviderError(
            f"aws: RunInstances {target.instance_type} in {where}: the launch token of {target.name} was "
            "used by an earlier attempt whose node is not listed yet (IdempotentParameterMismatch); "
            "retry the provision task in a minute (a new launch would start a second node)"
        )

    def check_ready(self, instance: Instance) -> Instance | None:
        return reachable(
            self,
            instance,
            ended=lambda i: i.cloud_state in ("shutting-down", "terminated", "stopping", "stopped"),
            status=lambda i: i.cloud_state,
        )
