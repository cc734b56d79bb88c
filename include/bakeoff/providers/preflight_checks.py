"""A pre-flight's rows, and the checks every cloud's pre-flight shares.

Each cloud's own checks (reads and dry runs only) sit beside its provider and are named by the
registry (``ProviderInfo.preflight``); ``bakeoff.preflight`` runs them per target and prints the table.
Each check is a row (target, check, result, fix); a row ``FAIL`` would stop the run, ``warn`` is for a
person to read, ``n/a`` is a check the cloud offers no call for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from bakeoff import catalog
from bakeoff.core.launch import LaunchSpec
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers.registry import resolve

if TYPE_CHECKING:  # annotations only: providers load without the plan (the DAG parses over base)
    from bakeoff.plan.target import Target

OK, FAIL, WARN, NA = "ok", "FAIL", "warn", "n/a"
# What no cloud's pre-flight can try: the last item of each cloud's ``UNTRIED`` (its final row).
BOOT_UNTRIED = "the boot script running on the image"


@dataclass(frozen=True)
class Check:
    target: str
    check: str
    result: str  # ok | FAIL | warn | n/a
    detail: str
    fix: str = ""


# A cloud's checks of one target on one offer: (target, its index in the plan, the provider, the launch a
# dry run sends: serving.userdata.stand_in_launch, with its boot script's renderer) -> rows.
CloudChecks = Callable[[Any, int, Any, LaunchSpec], Iterator[Check]]


def checks_of(provider: str) -> CloudChecks:
    """The cloud's own pre-flight checks, imported from beside its provider when a plan needs them."""
    ref = PROVIDERS[provider].preflight
    assert ref is not None, f"{provider} provisions nothing, so it has no pre-flight"
    return cast(CloudChecks, resolve(ref))


def image_provides(t: Target, i: int, listed: str) -> Check:
    """What the default node image is recorded to provide (catalog ``node_images``), held to the name
    the cloud's listing gives the image: a GPU driver it is recorded without stops the boot (FAIL where
    the record has a source, else a warning); the boot script checks every item on the node anyway."""
    row = catalog.node_images().get(t.provider)
    if row is None or any(t.provider_options.get(f) for f in PROVIDERS[t.provider].image_fields):
        return Check(t.name, "image provides", NA, "the plan's own image: the boot script checks it on the node")
    if not re.search(row.listing, listed):
        return Check(
            t.name,
            "image provides",
            WARN,
            f"the listing names it {listed!r}; what it provides was recorded for {row.image}",
            "the boot script checks Docker and the GPU driver on the node",
        )
    vendor = catalog.gpus()[t.instance.gpu].vendor
    lacks = row.lacks(vendor)
    missing = [w for w, have in (("Docker", row.docker), ("the GPU driver", row.gpu_driver)) if have is None]
    detail = f"{listed} ({row.ref.label()})"
    fix = f"targets[{i}].provider_options.{row.instead}"
    if lacks:
        detail += f": has no {' and no '.join(lacks)}, so the boot would stop"
        return Check(t.name, "image provides", FAIL if row.ref.verified else WARN, detail, fix)
    if missing or not row.docker or not row.ref.verified:
        notes = [f"may lack {', '.join(missing)}"] if missing else []
        notes += ["Docker is installed at boot"] if row.docker is False else []
        return Check(t.name, "image provides", WARN, f"{detail}: {'; '.join(notes) or 'unverified'}", fix)
    return Check(t.name, "image provides", OK, detail)


def untried(t: Target, parts: list[str]) -> Check:
    return Check(t.name, "not tried", NA, "; ".join(parts))
