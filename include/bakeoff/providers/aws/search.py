"""Finding a run's EC2 nodes without knowing where a plan put them.

``list_tagged`` lists the instances carrying the run tag in every region the account can use (or
the regions the credentials name). A region that cannot be listed (an outage, an opt-in region not
enabled) is reported in a ``PartialListing``, never allowed to hide the others' nodes.
"""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError, ClientError

from bakeoff.core.instance import Instance
from bakeoff.providers.aws.api import error_text
from bakeoff.providers.aws.instance import Nodes
from bakeoff.providers.base import PartialListing
from bakeoff.providers.tags import TAG_RUN

log = logging.getLogger(__name__)

LIVE_STATES = ["pending", "running", "stopping", "stopped"]


class Search(Nodes):
    """The account-wide listing of bakeoff's instances."""

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
                errors[region] = error_text(e)
                log.warning("aws: cannot list instances in %s: %s", region, errors[region])
        if errors:
            raise PartialListing(self.name, out, errors)
        return out
