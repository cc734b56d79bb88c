"""A buyer's price sheet (e.g. an Airflow Variable) folded into a plan's target prices.

The sheet is applied when a run starts, before the trigger form's overrides, so the cost step only
ever sees one price per target: the one in force for that run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from bakeoff.plan import Plan, PlanError, plan_from_dict


def sheet_sha256(sheet: object) -> str | None:
    """The SHA-256 of a price sheet as canonical JSON (sorted keys, no spaces), recorded when a run
    starts: one sheet serves the installation, so a run's evidence names the whole sheet by its hash."""
    if sheet is None:
        return None
    return hashlib.sha256(json.dumps(sheet, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def apply_price_sheet(plan: Plan, sheet: dict[str, Any] | None) -> Plan:
    """The plan with the sheet's prices for targets whose plan sets none; returns a new, validated plan.

    sheet = {"source": "ACME contract 2026-Q4", "as_of": "2026-10-01",
             "prices": {<target name or instance type>: {"usd_per_hour" | "usd_per_gpu_hour": x, "market": "reserved"}}}
    A target-name key beats an instance-type key; targets whose plan already sets a price keep it, and
    trigger-form prices (apply_overrides) are applied after and win.
    """
    if not sheet:
        return plan
    if not isinstance(sheet, dict) or not isinstance(sheet.get("prices"), dict):
        raise PlanError(
            "price_sheet: expected {'prices': {<target or instance type>: {'usd_per_hour': ...}}, "
            "'source': ..., 'as_of': ...}"
        )
    names = {t.name for t in plan.targets}
    types = {t.instance_type for t in plan.targets}
    source = str(sheet.get("source") or "price sheet")
    if sheet.get("as_of"):
        source += f" (as of {sheet['as_of']})"
    entries: dict[str, dict[str, Any]] = {}
    for key, entry in sheet["prices"].items():
        where = f"price_sheet.prices.{key}"
        if not isinstance(entry, dict):
            entry = {"usd_per_hour": entry}
        if not any(
            isinstance(entry.get(k), (int, float)) and entry[k] > 0 for k in ("usd_per_hour", "usd_per_gpu_hour")
        ):
            raise PlanError(f"{where}: give a positive usd_per_hour (node) or usd_per_gpu_hour")
        entries[key] = {"market": "contract", **entry, "source": source}
    # One sheet serves the whole installation: keys for other plans' targets are simply not used here.
    if not set(entries) & (names | types):
        return plan
    raw = plan.model_dump(mode="json")
    for t in raw["targets"]:
        entry = entries.get(t["name"]) or entries.get(t["instance_type"])
        if entry and not t.get("price"):
            t["price"] = entry
    return plan_from_dict(raw, source=f"{plan.name} with price sheet")


def market_mismatches(plan: Plan) -> list[str]:
    """One warning per target priced from a catalog offer of another market than the plan's
    (``pricing.market``): a spot price in an on-demand plan makes that target look cheaper than it would
    be to rent. A price the plan or a sheet sets is the buyer's own and is not second-guessed."""
    out = []
    for i, t in enumerate(plan.targets):
        if t.price is not None or t.instance_type is None:
            continue
        it = t.instance
        if it.usd_per_hour is not None and it.market != plan.pricing.market:
            out.append(
                f"targets[{i}] ({t.name}): priced from a {it.market} offer ({it.type}: {it.source}, as of {it.as_of}) "
                "while "
                f"pricing.market is {plan.pricing.market}; set price: {{usd_per_hour: <{plan.pricing.market} "
                f"price>, market: {plan.pricing.market}}} on the target, or pricing.market: {it.market}"
            )
    return out
