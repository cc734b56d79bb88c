"""One admission: whether a plan may run on this installation, decided by one function for every path.

``plan check``, ``predict``, the trigger form's spend index, ``start_run`` (the DAG), the approval
request and ``bakeoff run`` all call ``admit``, so a plan ``plan check`` passes is one ``run`` starts,
and a refusal reads the same wherever it is met (the field first, then the fix). What it checks, in
order: the plan's claims, each cloud target's boot script size, the budget (cap, installation ceiling,
``max_instance_hours``), the images trusted with secrets, static endpoints on internal addresses, the
co-located job's workload files, session traces against the model's context, the node limits, and
whether a person must approve the spend. The plan's own fields (recipes, providers' options, bounds)
are refused earlier, when it is loaded.

The installation's settings are the Airflow Variables' raw values in the DAG; each left unset falls
back to its environment variable, which is how the command line (no Airflow) reads the same settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bakeoff import installation
from bakeoff.agent.job import preflight
from bakeoff.bench.client.workloads import check_files
from bakeoff.bench.sessions.workload import check_plan_contexts
from bakeoff.claims import check_plan_claims
from bakeoff.clusters import node_slots
from bakeoff.core.facts import ApprovalNeed, BudgetEstimate
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import Plan, PlanError
from bakeoff.serving import userdata
from bakeoff.spend import approval, budget

NODE_LIMITS_ENV = "BAKEOFF_PROVIDER_NODE_LIMITS"
THRESHOLD_ENV = "BAKEOFF_APPROVAL_THRESHOLD_USD"
# every refusal admit raises: the command line prints its message and exits non-zero
REFUSALS: tuple[type[Exception], ...] = (ValueError, budget.BudgetExceeded)


def _env(raw: object, env: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return os.environ.get(env) or None
    return raw


@dataclass(frozen=True)
class Settings:
    """The installation's settings as raw values (a Variable's text, or None for unset)."""

    budget_ceiling_usd: Any = None
    trusted_images: Any = None
    allow_private_endpoints: Any = None
    node_limits: Any = None
    approval_threshold_usd: Any = None


@dataclass(frozen=True)
class Admitted:
    """What admission decided for a plan it lets run: the budget estimate, the node limits, whether a
    person must approve the spend first, and the static hosts every connection checks again."""

    plan: Plan
    estimate: BudgetEstimate
    node_limits: dict[str, int]
    approval_needed: ApprovalNeed
    guarded_hosts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def boot_script_sizes(plan: Plan) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for cloud targets whose boot script would exceed the user-data limit at
    launch, sized with stand-ins as long as the launch's own key, certificate and secret names: over it
    even with the short bundle URL of long-term keys is refused; over it only with the longer URL of
    temporary credentials is a warning."""

    fix = "shorten env, engine_args, the command template or the image name"
    refusals, warned = [], []
    for t in plan.targets:
        if not PROVIDERS[t.provider].provisions:
            continue
        limit, words = userdata.max_bytes_for(t.provider), userdata.limit_words(t.provider)
        short = userdata.size_at_launch(t, userdata.URL_BYTES_LONG_TERM_KEYS)
        long = userdata.size_at_launch(t, userdata.URL_BYTES_TEMPORARY_CREDENTIALS)
        if short > limit:
            over = f"over {words}"
            refusals.append(f"targets.{t.name}: its boot script would be {short:,} bytes at launch, {over}; {fix}")
        elif long > limit:
            warned.append(
                f"targets.{t.name}: its boot script fits {words} only while the client "
                f"bundle's URL is signed with long-term keys ({short:,} bytes); with temporary credentials it would be "
                f"{long:,} bytes and refused at launch; {fix}"
            )
    return refusals, warned


def admit(plan: Plan, settings: Settings | None = None, scheduled: bool = False) -> Admitted:
    """The plan admitted, or the first refusal (PlanError, BudgetExceeded, NodeLimitError, ApprovalError
    or a workload file's error) naming the field and the fix. Reads nothing but the plan, its workload
    files and the settings; records nothing."""
    s = settings or Settings()
    check_plan_claims(plan)
    check_files(plan.workloads)  # before the estimate reads them: a missing file is one line naming it
    oversize, tight = boot_script_sizes(plan)
    if oversize:
        raise PlanError("; ".join(oversize))
    estimate = BudgetEstimate.model_validate(budget.check(plan, ceiling_usd=s.budget_ceiling_usd))
    installation.check_secret_images(plan, installation.trusted_images(s.trusted_images))
    private = installation.private_endpoints_allowed(s.allow_private_endpoints)
    installation.check_static_endpoints(plan, private)
    preflight(plan)  # a co-located job the node would refuse stops here
    check_plan_contexts(plan)
    limits = node_slots.parse_limits(_env(s.node_limits, NODE_LIMITS_ENV))
    node_slots.check_plan(plan, limits)
    threshold = _env(s.approval_threshold_usd, THRESHOLD_ENV)
    need = approval.requirement(plan, estimate, threshold, scheduled)
    return Admitted(
        plan=plan,
        estimate=estimate,
        node_limits=limits,
        approval_needed=need,
        guarded_hosts=installation.guarded_hosts(plan, private),
        warnings=tight,
    )
