"""The per run+target network security group an OCI node launches behind: only the serving and
agent ports, only to ``ingress_cidr``. Found by name on a retry; it goes with the node (once no VNIC
is in it), with a create that left no node, or in ``cleanup``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import oci
from oci.exceptions import ServiceError

from bakeoff.core.launch import AGENT_PORT
from bakeoff.providers.base import ProviderError
from bakeoff.providers.oci.api import GONE, TAGS, OciApi, options_of, retry_token
from bakeoff.providers.tags import TAG_RUN

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)


def nsg_name(run_id: str, target_slug: str) -> str:
    """The group's display name: found again by it on a retry, and by the run and target on terminate."""
    return f"bakeoff-{retry_token(run_id, target_slug, 'nsg')[:20]}"


class SecurityGroups(OciApi):
    """Make, find and delete the run+target's network security groups."""

    def _ensure_nsg(self, target: Target, run_id: str, compartment: str, region: str, tags: dict[str, str]) -> str:
        """The run+target's security group, found by name on a retry, with only the serving and agent ports open."""

        net, opts = self._client("network", region), options_of(target)
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
        return str(nsg.id)

    def _nsgs(self, region: str, compartment: str, name: str | None = None) -> list[Any]:
        net = self._client("network", region)
        kw = {"display_name": name} if name else {}
        return [
            g
            for g in oci.pagination.list_call_get_all_results(
                net.list_network_security_groups, compartment_id=compartment, **kw
            ).data
            if g.lifecycle_state not in GONE
        ]

    def _delete_if_empty(self, region: str, nsg: Any) -> bool:
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
        deleted: list[str] = []
        for region in self.regions:
            for comp in dict.fromkeys(self._compartments):
                for nsg in self._nsgs(region, comp):
                    tags = TAGS.decode(nsg.freeform_tags)
                    if TAG_RUN in tags and select(tags) and self._delete_if_empty(region, nsg):
                        deleted.append(nsg.id)
        return deleted


def _ingress_rule(cidr: str | None, port: int) -> Any:
    return oci.core.models.AddSecurityRuleDetails(
        direction="INGRESS",
        protocol="6",
        source=cidr,
        source_type="CIDR_BLOCK",
        is_stateless=False,
        description=f"bakeoff: port {port} from the benchmark client",
        tcp_options=oci.core.models.TcpOptions(destination_port_range=oci.core.models.PortRange(min=port, max=port)),
    )
