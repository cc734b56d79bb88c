"""The cloud node's boot script, for the cloud providers' lifecycle (base.CloudProvider.create).

It lives apart from base.py because the script's renderer (serving.userdata) imports base's LaunchSpec
and the registry: the template in base.py calls ``boot_script`` and each cloud class takes it from
here, so no module imports back into the one that imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff.providers.base import LaunchSpec
from bakeoff.serving import userdata

if TYPE_CHECKING:  # the plan's model, for the annotations only (the plan imports the provider registry)
    from bakeoff.plan.target import Target


class UserDataBoot:
    """Renders the target's boot script (user data) for one launch."""

    def boot_script(self, target: Target, launch: LaunchSpec) -> str:
        return userdata.render_for(target, launch)
