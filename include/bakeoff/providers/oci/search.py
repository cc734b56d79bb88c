"""Finding a run's OCI nodes without knowing where a plan put them.

``list_tagged`` asks OCI Resource Search for instances carrying the run tag, in every region the
tenancy subscribes to (search is regional, compartments are not a boundary to it), and also lists the
known compartments directly (the search index trails a launch by seconds). A region that cannot be
searched is reported, never allowed to hide the others.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import oci

from bakeoff.core.instance import Instance
from bakeoff.providers.base import PartialListing, ProviderError
from bakeoff.providers.oci.api import CONN_ID, GONE, TAGS, oci_error, options_of
from bakeoff.providers.oci.instance import Nodes
from bakeoff.providers.tags import TAG_RUN

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)


class Search(Nodes):
    """The tenancy-wide listing of bakeoff's instances."""

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

    def include(self, targets: list[Target]) -> None:
        """Also list directly in these OCI targets' compartments and subnet regions (search finds them
        anyway; this covers the seconds before the search index has a fresh node)."""
        for t in targets:
            if t.provider != self.name:
                continue
            compartment = options_of(t).compartment_id
            if compartment and compartment not in self._compartments:
                self._compartments.append(compartment)
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
                self._subscribed = [str(r.region_name) for r in subs if r.status == "READY"]
            except Exception as e:  # noqa: BLE001 - still scan the known regions
                errors["region subscriptions"] = (
                    f"{oci_error(e)}; name the regions to scan in the {CONN_ID} connection's extra.bakeoff_regions"
                )
        return list(dict.fromkeys([*self.regions, *(self._subscribed or [])]))

    def _search(self, region: str, run_id: str | None) -> list[Any]:
        """Resource Search's hits (ids and indexed states, which may trail the instances') in one region."""
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
                errors[f"{region} search"] = oci_error(e)
            if region not in self.regions:
                continue
            for comp in dict.fromkeys(self._compartments):
                try:
                    for inst in self._list(run_id, [region], [comp]):
                        found.setdefault(inst.id, inst)
                except Exception as e:  # noqa: BLE001
                    errors[f"{region} {comp}"] = oci_error(e)
        for where, why in errors.items():
            log.warning("oci: cannot list instances (%s): %s", where, why)
        if errors:
            raise PartialListing(self.name, list(found.values()), errors)
        return list(found.values())


def search_query(run_id: str | None) -> str:
    """A structured Resource Search query for instances with the run's freeform tag. A run id that cannot
    sit safely in a quoted literal is matched by key only and filtered here (no query injection)."""
    key = TAGS.encode({TAG_RUN: ""}).popitem()[0]
    if run_id and len(run_id) <= 256 and all(c.isprintable() and c not in "'\\" for c in run_id):
        return f"query instance resources where (freeformTags.key = '{key}' && freeformTags.value = '{run_id}')"
    return f"query instance resources where freeformTags.key = '{key}'"
