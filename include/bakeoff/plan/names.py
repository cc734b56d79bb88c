"""Cloud names a plan relies on that no dated source confirms: `plan check` warns, naming the field.

A slug, shape, image or OS id that only matches the sandbox fakes would fail a real run at its first
create call; the catalog marks each name with the source it was read from (``name_ref``) or as
unverified, and this module turns the unverified ones a plan would send into warnings. The cloud
itself has the last word: ``bakeoff preflight`` asks it.
"""

from __future__ import annotations

from bakeoff import catalog
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import Plan
from bakeoff.plan.target import Target


def unverified_names(plan: Plan) -> list[str]:
    """One warning per name a cloud target would send that the catalog marks unverified."""
    out = []
    for i, t in enumerate(plan.targets):
        row = catalog.instance_types().get(t.instance_type or "")
        if row is not None and row.provider == t.provider and not row.name_ref.verified:
            out.append(
                f"targets[{i}].instance_type: {t.provider} name {t.instance_type!r} is unverified (no dated "
                f"source in the catalog lists it); run `bakeoff preflight` against the account before spending"
            )
        image = catalog.default_images().get(t.provider)
        if image is not None and not image.name_ref.verified and not _plan_sets(t):
            out.append(
                f"targets[{i}].provider_options.{image.field}: unset, so the default {image.value!r} is used, "
                f"and it is unverified; set {image.field} to one your account lists, or check it with "
                "`bakeoff preflight`"
            )
    return out


def _plan_sets(target: Target) -> bool:
    """The plan names the node image itself (any of its cloud's ``image_fields``: an AMI given outright
    needs no parameter), so the catalog's records of the default image do not apply."""
    return any(target.provider_options.get(f) for f in PROVIDERS[target.provider].image_fields)


def image_gaps(plan: Plan) -> list[str]:
    """One warning per cloud target launched on its cloud's default image where that image is recorded
    without, or not known to have, what the boot script needs (catalog ``node_images``): Docker is
    installed at boot; a missing GPU driver or NVIDIA container toolkit stops the boot."""
    out = []
    for i, t in enumerate(plan.targets):
        row = catalog.node_images().get(t.provider)
        image = catalog.default_images().get(t.provider)
        if row is None or t.instance is None or t.instance.provider != t.provider:
            continue
        if _plan_sets(t):
            continue
        vendor = catalog.gpus()[t.instance.gpu].vendor
        lacks = row.lacks(vendor)
        unknown = [
            what
            for what, have in (
                ("Docker", row.docker),
                ("the GPU driver", row.gpu_driver),
                ("NVIDIA's container toolkit", row.container_toolkit if vendor == "nvidia" else True),
            )
            if have is None
        ]
        if not lacks and not unknown and row.docker:
            continue
        field = image.field if image is not None else PROVIDERS[t.provider].image_fields[0]
        parts = [f"its default image {row.image} ({row.ref.label()})"]
        if lacks:
            parts.append(f"has no {' and no '.join(lacks)}: the boot would stop")
        if unknown:
            parts.append(f"may lack {', '.join(unknown)}: the boot script checks on the node")
        if row.docker is False:
            parts.append("Docker is installed at boot from the distribution (minutes added)")
        out.append(
            f"targets[{i}].provider_options.{field}: {'; '.join(parts)}; to launch one that has them: {row.instead}"
        )
    return out
