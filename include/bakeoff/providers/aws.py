"""AWS EC2: NVIDIA Blackwell / Hopper nodes (p6-b200, p6-b300, p5en, p5) with boto3.

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

import base64
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from bakeoff import catalog
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

if TYPE_CHECKING:  # the plan's models, for the annotations only (the plan imports the provider registry)
    from bakeoff.plan.options import AwsOptions
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)

CAPACITY_CODES = {
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "ReservationCapacityExceeded",
    "Unsupported",
    "InsufficientCapacityOnHost",
    "UnfulfillableCapacity",  # a Spot / EC2 Fleet request with no spare capacity for it
}
QUOTA_CODES = {"InstanceLimitExceeded", "VcpuLimitExceeded"}  # the account's limit, not the cloud's stock
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
# Deep Learning Base AMI (Ubuntu 22.04, NVIDIA driver + Docker + NVIDIA container toolkit)
DEFAULT_SSM_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"


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


class AwsProvider(UserDataBoot, CloudProvider[None]):
    name = "aws"
    tag_codec: node_tags.Pairs = node_tags.EC2

    def __init__(self, credentials: dict[str, Any] | None = None, **options: Any):
        creds = dict(credentials or {})
        self.endpoint_url = creds.pop("endpoint_url", None)
        self.address_map_url = creds.pop("address_map_url", None)
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

    def _client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = self.session.client(
                service, region_name=region, endpoint_url=self.endpoint_url, config=self._config
            )
        return self._clients[key]

    # placement ------------------------------------------------------------------
    def placements(self, target: Target, context: None = None) -> list[Placement]:
        """Regions (each with its zones, or none) in the order the plan gives: zones within their region first."""
        opts = _options(target)
        regions = list(opts.regions) or list(target.instance.regions[:1]) or [self.default_region]
        for z in opts.zones:
            if z[:-1] not in regions:
                regions.append(z[:-1])
        out: list[Placement] = []
        for r in regions:
            zones = [z for z in opts.zones if z[:-1] == r]
            out += [Placement(r, z) for z in zones] or [Placement(r)]
        return out

    def _ami(self, target: Target, region: str) -> str:
        opts = _options(target)
        if opts.ami:
            return opts.ami
        name = opts.ssm_parameter or DEFAULT_SSM_PARAMETER
        try:
            return str(self._client("ssm", region).get_parameter(Name=name)["Parameter"]["Value"])
        except ClientError as e:
            raise ProviderError(
                f"aws: cannot read AMI parameter {name} in {region} "
                f"({e.response['Error']['Code']}); set provider_options.ami or ssm_parameter"
            ) from None

    def _security_groups(self, target: Target, run_id: str, region: str, tags: dict[str, str]) -> list[str]:
        """The plan's groups, else a per-run group that opens only the serving and agent ports to ingress_cidr."""
        opts = _options(target)
        if opts.security_group_ids:
            return list(opts.security_group_ids)
        ec2 = self._client("ec2", region)
        name = f"bakeoff-{client_token(run_id, target.slug, 'sg')[:20]}"
        found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])["SecurityGroups"]
        if found:
            return [found[0]["GroupId"]]
        if opts.subnet_id:
            vpc = ec2.describe_subnets(SubnetIds=[opts.subnet_id])["Subnets"][0]["VpcId"]
        else:
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
            if not vpcs:
                raise ProviderError(
                    f"aws: {region} has no default VPC; set provider_options.subnet_id (and security_group_ids)"
                )
            vpc = vpcs[0]["VpcId"]
        sg = ec2.create_security_group(
            GroupName=name,
            Description=f"bakeoff serving port for {target.slug}",
            VpcId=vpc,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": _tag_list(tags)}],
        )["GroupId"]
        cidr = opts.ingress_cidr
        if cidr is None:  # require() refuses a target with neither; a caller that skipped it is told the same
            raise ProviderError(
                f"targets.{target.name}.provider_options.ingress_cidr: set it, or give security_group_ids"
            )
        ranges = {"Ipv6Ranges": [{"CidrIpv6": cidr}]} if ":" in cidr else {"IpRanges": [{"CidrIp": cidr}]}
        from bakeoff.agent import AGENT_PORT  # noqa: PLC0415 - the agent package only where a security group opens its port

        ec2.authorize_security_group_ingress(
            GroupId=sg,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, **ranges}
                for p in (target.stack_spec.port, AGENT_PORT)
            ],
        )
        return [sg]

    # the lifecycle's hooks (base.CloudProvider.create) -------------------------------------------
    def require(self, target: Target) -> None:
        opts = _options(target)
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

    def _launch(
        self,
        target: Target,
        run_id: str,
        tags: dict[str, str],
        script: str,
        region: str,
        zone: str | None,
        launch: int = 0,
    ) -> Instance:
        opts = _options(target)
        ec2 = self._client("ec2", region)
        ami = self._ami(target, region)
        kw: dict[str, Any] = dict(
            ImageId=ami,
            InstanceType=target.instance_type,
            MinCount=1,
            MaxCount=1,
            ClientToken=client_token(run_id, target.slug, zone or region, launch),
            InstanceInitiatedShutdownBehavior="terminate",
            UserData=script,
            MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
            TagSpecifications=[{"ResourceType": rt, "Tags": _tag_list(tags)} for rt in ("instance", "volume")],
            BlockDeviceMappings=[
                {
                    "DeviceName": self._root_device(ec2, ami),
                    "Ebs": {"VolumeSize": opts.root_volume_gb, "VolumeType": "gp3", "DeleteOnTermination": True},
                }
            ],
        )
        if opts.subnet_id:
            kw["SubnetId"] = opts.subnet_id
        if zone:
            kw["Placement"] = {"AvailabilityZone": zone}
        kw["SecurityGroupIds"] = self._security_groups(target, run_id, region, tags)
        if opts.key_name:
            kw["KeyName"] = opts.key_name
        if opts.capacity_reservation_id:
            kw["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
            kw["CapacityReservationSpecification"] = {
                "CapacityReservationTarget": {"CapacityReservationId": opts.capacity_reservation_id}
            }
        return self._to_instance(ec2.run_instances(**kw)["Instances"][0], region)

    @staticmethod
    def _root_device(ec2: Any, ami: str) -> str:
        try:
            images = ec2.describe_images(ImageIds=[ami])["Images"]
        except ClientError:
            images = []
        return str((images[0].get("RootDeviceName") if images else None) or "/dev/sda1")

    def _to_instance(self, raw: dict[str, Any], region: str) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        iid = f"{region}/{raw['InstanceId']}"
        # stopped nodes still bill for storage, and a state this code does not know may bill too: "failed",
        # so the sweep and the reaper still delete them; only what EC2 says is ending counts as gone
        state = {
            "pending": "pending",
            "running": "running",
            "shutting-down": "terminated",
            "terminated": "terminated",
        }.get(raw["State"]["Name"], "failed")
        port = node_tags.port_of(tags)
        host, agent_port = raw.get("PublicIpAddress") or raw.get("PrivateIpAddress"), None
        if state == "running":
            host, port, agent_port = resolve_address(self.address_map_url, self.name, iid, host, port)
        launched = raw.get("LaunchTime")
        return Instance(
            provider=self.name,
            id=iid,
            target=tags.get(TAG_TARGET, ""),
            run_id=tags.get(TAG_RUN, ""),
            state=state,
            host=host,
            port=port,
            instance_type=raw.get("InstanceType", ""),
            region=region,
            launched_at=launched.timestamp() if launched else None,
            expires_at=node_tags.expiry_of(tags),
            tags=tags,
            details={
                "zone": (raw.get("Placement") or {}).get("AvailabilityZone"),
                "ec2_state": raw["State"]["Name"],
                "agent_port": agent_port,
            },
        )

    def check_ready(self, instance: Instance) -> Instance | None:
        return reachable(
            self,
            instance,
            ended=lambda i: i.details.get("ec2_state") in ("shutting-down", "terminated", "stopping", "stopped"),
            status=lambda i: i.details.get("ec2_state"),
        )

    def describe(self, instance_id: str) -> Instance | None:
        region, iid = split_id(instance_id)
        try:
            res = self._client("ec2", region).describe_instances(InstanceIds=[iid])["Reservations"]
        except ClientError as e:
            if e.response["Error"]["Code"].startswith("InvalidInstanceID"):
                return None
            raise
        raws = [i for r in res for i in r["Instances"]]
        return self._to_instance(raws[0], region) if raws else None

    def terminate(self, instance_id: str) -> bool:
        region, iid = split_id(instance_id)
        ec2 = self._client("ec2", region)
        try:
            res = ec2.describe_instances(InstanceIds=[iid])["Reservations"]
            state = res[0]["Instances"][0]["State"]["Name"] if res else "terminated"
            if state in ("shutting-down", "terminated"):
                return False
            ec2.terminate_instances(InstanceIds=[iid])
        except ClientError as e:
            if e.response["Error"]["Code"].startswith("InvalidInstanceID"):
                return False
            raise
        log.info("aws: terminated %s", instance_id)
        return True

    def list_tagged(self, run_id: str | None = None) -> list[Instance]:
        flt = [{"Name": "instance-state-name", "Values": LIVE_STATES}]
        flt.append(
            {"Name": f"tag:{TAG_RUN}", "Values": [run_id]} if run_id else {"Name": "tag-key", "Values": [TAG_RUN]}
        )
        out: list[Instance] = []
        errors: dict[str, str] = {}
        for region in self.regions:  # one region's outage or opt-out must not hide the others' nodes
            try:
                pages = self._client("ec2", region).get_paginator("describe_instances").paginate(Filters=flt)
                out += [
                    self._to_instance(i, region) for page in pages for r in page["Reservations"] for i in r["Instances"]
                ]
            except (ClientError, BotoCoreError) as e:
                errors[region] = _error_text(e)
                log.warning("aws: cannot list instances in %s: %s", region, errors[region])
        if errors:
            raise PartialListing(self.name, out, errors)
        return out

    def console_output(self, instance_id: str) -> str | None:
        """The boot script's console log (serving-container exit and log tail), for failure triage."""
        region, iid = split_id(instance_id)
        try:
            out = self._client("ec2", region).get_console_output(InstanceId=iid, Latest=True).get("Output")
        except ClientError:
            return None
        if not out:
            return None
        try:  # botocore already decodes it (its decode_console_output handler); older ones hand base64
            return base64.b64decode(out, validate=True).decode(errors="replace")
        except ValueError:
            return str(out)

    def cleanup(self, select: Callable[[dict[str, str]], bool]) -> list[str]:
        """Delete the per-run security groups whose tags ``select`` picks (ended or expired runs); a group
        still attached to a shutting-down instance is left for the next pass."""
        deleted = []
        for region in self.regions:
            ec2 = self._client("ec2", region)
            groups = ec2.describe_security_groups(Filters=[{"Name": "tag-key", "Values": [TAG_RUN]}])["SecurityGroups"]
            for g in groups:
                tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
                if select(tags):
                    try:
                        ec2.delete_security_group(GroupId=g["GroupId"])
                        deleted.append(f"{region}/{g['GroupId']}")
                    except ClientError as e:
                        log.info(
                            "aws: security group %s not deleted yet (%s)", g["GroupId"], e.response["Error"]["Code"]
                        )
        return deleted


def _options(target: Target) -> AwsOptions:
    """An EC2 target's options: plan/target.py reads every aws target's provider_options as AwsOptions."""
    return cast("AwsOptions", target.provider_options)


def _tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": str(v)} for k, v in tags.items()]


def _error_text(e: Exception) -> str:
    """An AWS error as a person reads it: the API's code and message (never the request's credentials)."""
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        return f"{err.get('Code', 'Error')}: {err.get('Message', '')}".strip()
    return f"{type(e).__name__}: {e}"
