"""Which offer each target ran on, and the plan as it ran.

A target may list several instance types (``instance_types``: the same GPU model and count, in the
order the create tries them when capacity or quota refuses). What a run measured and what it costs
are those of the type that launched, never the first listed: the provision record's
``provisioning.instance_type`` names it (``providers/base.Provisioning``), and the cost step and the
report read the plan through ``as_ran`` so every price, node spec and row speaks of that type. A
target with one offer, or none launched yet, is left as the plan says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakeoff.core.facts import RunFacts
    from bakeoff.paths import StorePath
    from bakeoff.plan import Plan


def ran_type(run: RunFacts, slug: str) -> str | None:
    """The instance type the target's latest launch got, as its provision record says (None: none said)."""
    prov = run.target(slug).provision
    return (prov.provisioning.instance_type or None) if prov is not None else None


def as_ran(plan: Plan, run_dir: str | StorePath) -> Plan:
    """The plan with each multi-offer target on the offer it launched as (``Target.ran_as``); the run's
    records are read only when a target lists several offers. A record naming a type the target does
    not list is ignored (the plan's first offer stays): a record is input, and it must not price a
    target at a type the plan never allowed."""
    if all(len(t.offers) <= 1 for t in plan.targets):
        return plan
    from bakeoff import store  # noqa: PLC0415 - the records only for a plan with fallback offers

    run = store.run_facts(run_dir)
    targets = []
    for t in plan.targets:
        got = ran_type(run, t.slug) if len(t.offers) > 1 else None
        targets.append(t.ran_as(got) if got is not None and got in t.offers else t)
    if all(a is b for a, b in zip(targets, plan.targets, strict=True)):
        return plan
    return plan.model_copy(update={"targets": targets})
