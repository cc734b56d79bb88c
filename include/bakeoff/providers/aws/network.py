"""The per run+target security group an EC2 node launches behind: only the serving and agent ports,
only to ``ingress_cidr`` (or the plan's own groups). Found by name on a retry; ``cleanup`` deletes the
groups of ended or expired runs once no instance holds them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from bakeoff.providers.aws.api import AwsApi, client_token, options_of, tag_list
from bakeoff.providers.base import ProviderError
from bakeoff.providers.tags import TAG_RUN

if TYPE_CHECKING:  # the plan's model, for the annotations only (the plan imports the provider registry)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)


class SecurityGroups(AwsApi):
    """Make, find and delete the run+target's security groups."""

    def _security_groups(self, target: Target, run_id: str, region: str, tags: dict[str, str]) -> list[str]:
        """The plan's groups, else a per-run group that opens only the serving and agent ports to ingress_cidr."""
        opts = options_of(target)
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
            TagSpecifications=[{"ResourceType": "security-group", "Tags": tag_list(tags)}],
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
