"""The per run+target security group an EC2 node launches behind: only the serving and agent ports,
only to ``ingress_cidr`` (or the plan's own groups). Found by name on a retry; ``cleanup`` deletes the
groups of ended or expired runs once no instance holds them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from bakeoff.core.launch import AGENT_PORT
from bakeoff.providers.aws.api import AwsApi, client_token, options_of, tag_list
from bakeoff.providers.base import ProviderError
from bakeoff.providers.tags import TAG_RUN

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)


def group_name(run_id: str, slug: str) -> str:
    """The run+target's group name: a hash, so any run id fits EC2's 255 characters."""
    return f"bakeoff-{client_token(run_id, slug, 'sg')[:20]}"


def dry(call: Callable[..., Any], request: dict[str, Any]) -> tuple[str, str]:
    """``call(**request, DryRun=True)`` as (code, message): ``DryRunOperation`` is EC2's word for
    "would have succeeded"; an answer without the refusal is reported as such, never as success."""
    try:
        call(**request, DryRun=True)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["Error"].get("Message", "")
    return "NoDryRunRefusal", "answered as if DryRun were not set"


class SecurityGroups(AwsApi):
    """Make, find and delete the run+target's security groups."""

    def _security_groups(self, target: Target, run_id: str, region: str, tags: dict[str, str]) -> list[str]:
        """The plan's groups, else a per-run group that opens only the serving and agent ports to ingress_cidr."""
        opts = options_of(target)
        if opts.security_group_ids:
            return list(opts.security_group_ids)
        ec2 = self._client("ec2", region)
        found = self._run_group(target, run_id, region)
        if found:
            return [found]
        sg = ec2.create_security_group(**self._group_request(target, run_id, region, tags))["GroupId"]
        ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=self._ingress(target))
        return [sg]

    def _run_group(self, target: Target, run_id: str, region: str) -> str | None:
        """The run+target's group if a previous try made it (found by its name)."""
        name = group_name(run_id, target.slug)
        ec2 = self._client("ec2", region)
        found = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])["SecurityGroups"]
        return str(found[0]["GroupId"]) if found else None

    def _group_request(self, target: Target, run_id: str, region: str, tags: dict[str, str]) -> dict[str, Any]:
        """The CreateSecurityGroup request of the run+target's group, in the subnet's VPC or the default one."""
        opts = options_of(target)
        ec2 = self._client("ec2", region)
        if opts.subnet_id:
            vpc = ec2.describe_subnets(SubnetIds=[opts.subnet_id])["Subnets"][0]["VpcId"]
        else:
            vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
            if not vpcs:
                raise ProviderError(
                    f"aws: {region} has no default VPC; set provider_options.subnet_id (and security_group_ids)"
                )
            vpc = vpcs[0]["VpcId"]
        return {
            "GroupName": group_name(run_id, target.slug),
            "Description": f"bakeoff serving port for {target.slug}",
            "VpcId": vpc,
            "TagSpecifications": [{"ResourceType": "security-group", "Tags": tag_list(tags)}],
        }

    @staticmethod
    def _ingress(target: Target) -> list[dict[str, Any]]:
        """TCP to the serving and agent ports from ingress_cidr only."""
        cidr = options_of(target).ingress_cidr
        if cidr is None:  # require() refuses a target with neither; a caller that skipped it is told the same
            raise ProviderError(
                f"targets.{target.name}.provider_options.ingress_cidr: set it, or give security_group_ids"
            )
        ranges = {"Ipv6Ranges": [{"CidrIpv6": cidr}]} if ":" in cidr else {"IpRanges": [{"CidrIp": cidr}]}

        return [
            {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, **ranges} for p in (target.stack_spec.port, AGENT_PORT)
        ]

    def _dry_run_groups(
        self, target: Target, run_id: str, region: str, tags: dict[str, str]
    ) -> tuple[list[str], list[tuple[str, str, str]]]:
        """The groups a dry-run RunInstances names, and the calls tried for them (call, code, message):
        the plan's groups, or the run's group if it exists, are the launch's own; otherwise the group's
        CreateSecurityGroup is dry-run and the VPC's default group stands in for it."""
        opts = options_of(target)
        if opts.security_group_ids:
            return list(opts.security_group_ids), []
        found = self._run_group(target, run_id, region)
        if found:
            return [found], []
        ec2 = self._client("ec2", region)
        request = self._group_request(target, run_id, region, tags)
        tried = [("CreateSecurityGroup", *dry(ec2.create_security_group, request))]
        default = ec2.describe_security_groups(
            Filters=[{"Name": "vpc-id", "Values": [request["VpcId"]]}, {"Name": "group-name", "Values": ["default"]}]
        )["SecurityGroups"]
        return [g["GroupId"] for g in default[:1]], tried

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
