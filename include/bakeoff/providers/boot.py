"""The cloud node's boot script, for the cloud providers' lifecycle (base.CloudProvider.create).

It lives apart from base.py so the provider interface does not import the script's renderer
(serving.userdata, which reads the registry and core's LaunchSpec): the template in base.py calls
``boot_script`` and each cloud class takes it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff.core.launch import LaunchSpec
from bakeoff.serving import userdata

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target


class UserDataBoot:
    """Renders the target's boot script (user data) for one launch."""

    def boot_script(self, target: Target, launch: LaunchSpec) -> str:
        return userdata.render_for(target, launch)
