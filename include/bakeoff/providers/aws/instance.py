"""EC2 instances: the AMI (the plan's, else the SSM parameter's), one RunInstances with its client
token, an instance as bakeoff's Instance, and describe, terminate and the console log.

The ``ClientToken`` is derived from run, target, placement and launch count (api.py), so a retried
launch never starts a second instance. ``InstanceInitiatedShutdownBehavior=terminate`` with the
user-data's shutdown timer is the cloud-side kill switch that fires even if Airflow is dead. The
capacity and quota codes move the create to the plan's next zone or region.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from bakeoff.core.instance import Instance
from bakeoff.providers.aws.api import client_token, options_of, split_id, tag_list
from bakeoff.providers.aws.network import SecurityGroups
from bakeoff.providers.base import ProviderError
from bakeoff.providers.listing import listed_instance

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
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
# Deep Learning Base AMI (Ubuntu 22.04, NVIDIA driver + Docker + NVIDIA container toolkit)
DEFAULT_SSM_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"


class Nodes(SecurityGroups):
    """Launch (behind the run+target's security group), read and end the provider's instances."""

    def _ami(self, target: Target, region: str) -> str:
        opts = options_of(target)
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
        groups = self._security_groups(target, run_id, region, tags)
        kw = self._run_request(target, run_id, tags, script, region, zone, launch, groups)
        return self._to_instance(self._client("ec2", region).run_instances(**kw)["Instances"][0], region)

    def _run_request(
        self,
        target: Target,
        run_id: str,
        tags: dict[str, str],
        script: str,
        region: str,
        zone: str | None,
        launch: int,
        security_groups: list[str],
    ) -> dict[str, Any]:
        """The one RunInstances request of a launch: the launch sends it, the pre-flight sends it with
        ``DryRun`` (``dry_run_request``), so the dry run tries what the launch will ask for."""
        opts = options_of(target)
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
            TagSpecifications=[{"ResourceType": rt, "Tags": tag_list(tags)} for rt in ("instance", "volume")],
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
        kw["SecurityGroupIds"] = security_groups
        if opts.key_name:
            kw["KeyName"] = opts.key_name
        if opts.capacity_reservation_id:
            kw["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
            kw["CapacityReservationSpecification"] = {
                "CapacityReservationTarget": {"CapacityReservationId": opts.capacity_reservation_id}
            }
        return kw

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
        launched = raw.get("LaunchTime")
        return listed_instance(
            self.name,
            iid,
            tags,
            state,
            raw.get("PublicIpAddress") or raw.get("PrivateIpAddress"),
            self.address_map_url,
            instance_type=raw.get("InstanceType", ""),
            region=region,
            launched_at=launched.timestamp() if launched else None,
            zone=(raw.get("Placement") or {}).get("AvailabilityZone"),
            cloud_state=raw["State"]["Name"],
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
