"""EC2's pre-flight: credentials, region, the type offered, the vCPU quota, the AMI and what it provides,
and ``RunInstances`` with ``DryRun=True``. Reads and dry runs only: nothing here starts a node or bills."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from bakeoff.core.launch import LaunchSpec
from bakeoff.providers.base import Placement, ProviderError
from bakeoff.providers.preflight_checks import BOOT_UNTRIED, FAIL, NA, OK, WARN, Check, image_provides, untried

# EC2 vCPU quota codes per instance family (Service Quotas "Running On-Demand <family> instances")
EC2_QUOTAS = {"p": "L-417A185B"}
# What its launch does that the pre-flight cannot try (also in docs/production.md): the target's last row.
UNTRIED = [
    "capacity at the moment of launch (a dry run checks permissions and parameters, not stock)",
    BOOT_UNTRIED,
]
STAND_IN_GROUP = (
    "the run's own security group (its CreateSecurityGroup was dry-run; the VPC's default group stood in "
    "for it in RunInstances)"
)
# what the dry run's RunInstances carries, as the launch's (instance.py: _run_request)
SENT = {
    "RunInstances": "tags, root volume, security groups, market options, user-data",
    "CreateSecurityGroup": "the run's group in its VPC, tagged",
}


def checks(t: Any, i: int, p: Any, launch: LaunchSpec) -> Iterator[Check]:
    """The pre-flight's checks of a target on EC2 (registry ``preflight``)."""

    def err(e: Exception) -> str:
        if isinstance(e, ClientError):
            return f"{e.response['Error']['Code']}: {e.response['Error'].get('Message', '')}"
        return f"{type(e).__name__}: {e}"

    name = t.name
    placements = [(pl.region, pl.zone) for pl in p.placements(t)]
    home = p.default_region  # the connection's own region answers for the account
    try:
        who = p._client("sts", home).get_caller_identity()
        yield Check(name, "credentials", OK, f"account {who['Account']}")
    except (ClientError, BotoCoreError) as e:
        yield Check(name, "credentials", FAIL, err(e), "fix the aws_default connection's keys or role")
        return
    try:
        known = {r["RegionName"] for r in p._client("ec2", home).describe_regions()["Regions"]}
    except (ClientError, BotoCoreError) as e:
        known = set()
        yield Check(name, "region", WARN, f"describe_regions: {err(e)}")
    regions = list(dict.fromkeys(r for r, _ in placements))
    missing = [r for r in regions if known and r not in known]
    if missing:
        yield Check(
            name,
            "region",
            FAIL,
            f"{', '.join(missing)} not enabled for the account",
            f"targets[{i}].provider_options.regions: use one of {', '.join(sorted(known))}",
        )
    offered = []
    for region, zone in placements:
        if region in missing:
            continue
        kw: dict[str, Any] = {
            "LocationType": "availability-zone" if zone else "region",
            "Filters": [{"Name": "instance-type", "Values": [t.instance_type]}],
        }
        try:
            found = p._client("ec2", region).describe_instance_type_offerings(**kw)["InstanceTypeOfferings"]
        except (ClientError, BotoCoreError) as e:
            yield Check(name, "offered", WARN, f"{zone or region}: {err(e)}")
            continue
        if any(o["Location"] == (zone or region) for o in found):
            offered.append((region, zone))
    if not offered:
        yield Check(
            name,
            "offered",
            FAIL,
            f"{t.instance_type} is not offered in {', '.join(z or r for r, z in placements)}",
            f"targets[{i}].provider_options.regions/zones: list a place that offers {t.instance_type}",
        )
        return
    yield Check(name, "offered", OK, f"{t.instance_type} in {', '.join(z or r for r, z in offered)}")
    region, zone = offered[0]
    yield _quota(t, p, region, err)
    try:
        ami = p._ami(t, region)
        images = p._client("ec2", region).describe_images(ImageIds=[ami])["Images"]
    except ProviderError as e:
        yield Check(name, "image", FAIL, str(e), f"targets[{i}].provider_options.ami: give an AMI id of {region}")
        return
    except (ClientError, BotoCoreError) as e:
        yield Check(name, "image", FAIL, err(e), f"targets[{i}].provider_options.ami: give an AMI of {region}")
        return
    if not images:
        yield Check(name, "image", FAIL, f"{ami} not found in {region}", f"targets[{i}].provider_options.ami")
        return
    yield Check(name, "image", OK, f"{ami} ({images[0].get('Name', '')}) in {region}")
    yield image_provides(t, i, str(images[0].get("Name", "")))
    try:
        tried = p.preflight_dry_run(t, Placement(region, zone), launch)
    except ProviderError as e:
        yield Check(name, "dry run", FAIL, str(e), f"targets[{i}].provider_options")
        return
    for call, code, message in tried:
        what = "dry run" if call == "RunInstances" else f"dry run {call}"
        if code == "DryRunOperation":
            yield Check(name, what, OK, f"{call} as the launch sends it ({SENT[call]}) would succeed")
        else:
            yield Check(
                name,
                what,
                FAIL,
                f"{call}: {code}: {message}",
                "grant ec2:RunInstances, ec2:CreateTags and ec2:CreateSecurityGroup (and the subnet, "
                "capacity reservation and key pair the plan names) to the connection",
            )
    stood_in = any(call == "CreateSecurityGroup" for call, _, _ in tried)
    yield untried(t, [*UNTRIED, *([STAND_IN_GROUP] if stood_in else [])])


def _quota(t: Any, p: Any, region: str, err: Callable[[Exception], str]) -> Check:
    """The family's running On-Demand vCPU quota less what its pending and running instances hold."""
    family = t.instance_type[:1]
    code = EC2_QUOTAS.get(family)
    if code is None:
        return Check(t.name, "quota", NA, f"no vCPU quota code known for the {family} family")
    ec2 = p._client("ec2", region)
    try:
        quota = p._client("service-quotas", region).get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )
        held = [i["InstanceType"] for pg in pages for r in pg["Reservations"] for i in r["Instances"]]
        held = [x for x in held if x[:1] == family]
        kinds = sorted({*held, t.instance_type})
        vcpus = {
            x["InstanceType"]: x["VCpuInfo"]["DefaultVCpus"]
            for x in ec2.describe_instance_types(InstanceTypes=kinds)["InstanceTypes"]
        }
    except (ClientError, BotoCoreError) as e:
        return Check(t.name, "quota", WARN, f"{code} in {region}: {err(e)}", "grant servicequotas:GetServiceQuota")
    need, used = vcpus[t.instance_type], sum(vcpus.get(x, 0) for x in held)
    detail = f"{quota['QuotaName']} ({code}) {quota['Value']:g} vCPU, {used} in use, {need} needed in {region}"
    if float(quota["Value"]) - used < need:
        return Check(t.name, "quota", FAIL, detail, f"request a quota increase for {code} in {region}")
    return Check(t.name, "quota", OK, detail)
