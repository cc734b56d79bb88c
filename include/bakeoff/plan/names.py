"""Cloud names a plan relies on that no dated source confirms: `plan check` warns, naming the field.

A slug, shape, image or OS id that only matches the sandbox fakes would fail a real run at its first
create call; the catalog marks each name with the source it was read from (``name_ref``) or as
unverified, and this module turns the unverified ones a plan would send into warnings. The cloud
itself has the last word: ``bakeoff preflight`` asks it.
"""

from __future__ import annotations

from typing import Any

from bakeoff import catalog


def unverified_names(plan: Any) -> list[str]:
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
        if image is not None and not image.name_ref.verified and not _plan_sets(t, image.field):
            out.append(
                f"targets[{i}].provider_options.{image.field}: unset, so the default {image.value!r} is used, "
                f"and it is unverified; set {image.field} to one your account lists, or check it with "
                "`bakeoff preflight`"
            )
    return out


def _plan_sets(target: Any, field: str) -> bool:
    opts = target.provider_options
    if field == "ssm_parameter":  # an AMI given outright needs no parameter
        return bool(opts.get("ami") or opts.get("ssm_parameter"))
    return bool(opts.get(field))
