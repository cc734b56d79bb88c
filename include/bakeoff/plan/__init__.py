"""Evaluation plans: load a YAML file, validate it, apply trigger-form overrides.

Errors name the field (``targets[1].instance_type``) and say how to fix it, because plans are
written by people who are not reading this code.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from bakeoff.fielderrors import explain

from bakeoff.plan.settings import Pricing, Quality, Slo
from bakeoff.plan.target import EmulatorSettings, PriceOverride, Strict, Target
from bakeoff.plan.workload import Workload

__all__ = ["Plan", "PlanError", "Target", "Workload", "Slo", "Quality", "Pricing", "PriceOverride",
           "EmulatorSettings", "load_plan", "plan_from_dict", "plans_dir", "apply_overrides"]


class PlanError(ValueError):
    """A plan that cannot be run; the message lists every offending field."""


class Plan(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    targets: list[Target] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    slo: Slo = Slo()
    quality: Quality = Quality()
    pricing: Pricing = Pricing()
    budget_usd: float = Field(gt=0, description="spend cap for the whole run, USD")
    max_instance_hours: float = Field(3.0, gt=0, description="an instance older than this is reaped")

    @model_validator(mode="after")
    def _unique(self) -> "Plan":
        for kind, names in (("targets", [t.name for t in self.targets]), ("target slugs", [t.slug for t in self.targets]),
                            ("workloads", [w.name for w in self.workloads])):
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"{kind} must be unique; rename: {', '.join(sorted(dup))}")
        return self

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name or t.slug == name:
                return t
        raise PlanError(f"targets: no target named {name!r}; plan {self.name} has {[t.name for t in self.targets]}")

    @property
    def emulated(self) -> bool:
        return any(t.provider == "local" for t in self.targets)


def plans_dir() -> Path:
    """Where named plans live: $BAKEOFF_PLANS, else include/plans beside the package."""
    env = os.environ.get("BAKEOFF_PLANS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "plans"


def plan_from_dict(raw: dict[str, Any], source: str = "plan") -> Plan:
    if not isinstance(raw, dict):
        raise PlanError(f"{source}: expected a mapping at the top level")
    try:
        return Plan.model_validate(raw)
    except ValidationError as e:
        raise PlanError(f"{source} is not a valid plan:\n{explain(e, root='(plan)')}") from None


def resolve_plan_path(ref: str | os.PathLike) -> Path:
    """A path, or the name of a plan under plans_dir() with or without .yaml."""
    p = Path(ref)
    if p.is_file():
        return p
    for cand in (plans_dir() / f"{ref}", plans_dir() / f"{ref}.yaml"):
        if cand.is_file():
            return cand
    avail = sorted(x.stem for x in plans_dir().glob("*.yaml"))
    raise PlanError(f"plan: no plan file {str(ref)!r}; give a path or one of: {', '.join(avail)}")


def load_plan(ref: str | os.PathLike) -> Plan:
    path = resolve_plan_path(ref)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise PlanError(f"{path.name}: not valid YAML: {e}") from None
    return plan_from_dict(raw, source=path.name)


def apply_overrides(plan: Plan, overrides: dict[str, Any] | None) -> Plan:
    """Merge trigger-form values: targets subset, SLO, per-target prices, budget.

    overrides keys: targets (list of names; empty = all), slo (dict), prices ({target: usd_per_hour}),
    budget_usd (number), utilisation (number).
    """
    if not overrides:
        return plan
    raw = plan.model_dump(mode="json")
    wanted = overrides.get("targets") or []
    if wanted:
        names = {t["name"] for t in raw["targets"]}
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise PlanError(f"targets: {unknown} not in plan {plan.name}; choose from {sorted(names)}")
        raw["targets"] = [t for t in raw["targets"] if t["name"] in wanted]
    slo = {k: v for k, v in (overrides.get("slo") or {}).items() if v not in (None, "")}
    raw["slo"].update(slo)
    for name, price in (overrides.get("prices") or {}).items():
        matches = [t for t in raw["targets"] if t["name"] == name]
        if not matches:
            raise PlanError(f"prices.{name}: no such target in this run; use one of {[t['name'] for t in raw['targets']]}")
        matches[0]["price"] = {"usd_per_hour": float(price), "market": "contract", "source": "trigger-form override"}
    if overrides.get("budget_usd") not in (None, ""):
        raw["budget_usd"] = float(overrides["budget_usd"])
    if overrides.get("utilisation") not in (None, ""):
        raw["pricing"]["utilisation"] = float(overrides["utilisation"])
    return plan_from_dict(raw, source=f"{plan.name} with overrides")
