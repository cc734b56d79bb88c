"""`bakeoff preflight PLAN`: would this plan's launches work on these accounts? Asked with reads only.

A first real run fails in the most expensive way: after other targets have booted and billed. So
before any spend, per target and with the plan's own connections, this asks each cloud what a
create would need: credentials that authenticate; the region or availability domain and the
instance type offered there (EC2 instance-type offerings, DigitalOcean ``/v2/sizes``, Vultr
``/v2/plans-metal`` locations, OCI shapes and a compute capacity report); quota or limit headroom
for one node (EC2 Service Quotas, OCI service limits); the image; EC2's ``RunInstances`` with
``DryRun=True``; and the price in force and its age. Every call is a read, a dry run or a report
(OCI's capacity report creates no resource): nothing here can start a node or bill.

Each cloud's checks sit beside its provider (the registry's ``preflight``, rows and shared checks in
``providers.preflight_checks``); this module runs them per target and offer, hands each the stand-in
launch a dry run sends (``serving.userdata.stand_in_launch``, with its boot script's renderer, which the
providers do not import), adds the price's age and prints the table.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import Plan, Target, apply_overrides, load_plan
from bakeoff.plan.prices import apply_price_sheet
from bakeoff.providers import ProviderError, get_provider
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.providers.preflight_checks import FAIL, NA, OK, WARN, Check, checks_of
from bakeoff.serving.userdata import stand_in_launch

__all__ = ["FAIL", "NA", "OK", "WARN", "Check", "PreflightFailed", "blocking", "gate", "preflight", "table"]

log = logging.getLogger(__name__)

PRICE_STALE_DAYS = 180  # a catalog price older than this is worth re-reading before a procurement run


def preflight(plan: Plan, credentials: Callable[[str], dict[str, Any]] = credentials_from_env) -> list[Check]:
    """Every check for every target of the plan, in plan order."""
    rows: list[Check] = []
    for i, t in enumerate(plan.targets):
        if not PROVIDERS[t.provider].provisions:
            rows.append(Check(t.name, "launch", NA, f"{t.provider}: nothing to launch"))
            continue
        check = checks_of(t.provider)
        try:
            provider = get_provider(t.provider, credentials=credentials(t.provider))
            rows += _offers(t, [list(check(o, i, provider, stand_in_launch(o))) for o in _each_offer(t)])
        except ProviderError as e:  # a connection that cannot even be built
            rows.append(Check(t.name, "credentials", FAIL, str(e), f"fix the {t.provider} connection"))
        rows.append(_price(t))
    return rows


def _each_offer(t: Target) -> list[Any]:
    """The target on each of its offers (``instance_types``), or the target itself."""
    return [t.ran_as(x) for x in t.offers] if len(t.offers) > 1 else [t]


def _offers(t: Target, per_offer: list[list[Check]]) -> list[Check]:
    """Every offer's rows; a target with fallback offers is stopped only when no offer passes, so
    an offer's FAIL reads as a warning while another offer passes every check."""
    if len(per_offer) == 1:
        return per_offer[0]
    passing = [o for o, checks in zip(t.offers, per_offer, strict=True) if all(c.result != FAIL for c in checks)]
    out = []
    for offer, checks in zip(t.offers, per_offer, strict=True):
        for c in checks:
            if c.result == FAIL and passing:
                c = Check(c.target, c.check, WARN, f"{c.detail} (fallback: {passing[0]} passes)", c.fix)
            out.append(Check(f"{c.target} [{offer}]", c.check, c.result, c.detail, c.fix))
    return out


def blocking(rows: list[Check]) -> list[Check]:
    return [r for r in rows if r.result == FAIL]


MODES = ("off", "check first", "pre-flight only")


class PreflightFailed(ProviderError):
    """A check would stop the run: raised before anything is launched."""


def gate(
    plan_ref: str,
    mode: str,
    overrides: dict[str, Any] | None = None,
    price_sheet: dict[str, Any] | None = None,
    credentials: Callable[[str], dict[str, Any]] = credentials_from_env,
) -> bool:
    """The DAG's optional first step: the plan as the run would resolve it, checked unless ``mode`` is
    off. Raises PreflightFailed (with the table) if a check would stop the run; returns whether the run
    goes on (False for "pre-flight only")."""
    if mode not in MODES:
        raise ValueError(f"params.preflight: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "off":
        return True
    plan = apply_overrides(apply_price_sheet(load_plan(plan_ref), price_sheet), overrides)
    rows = preflight(plan, credentials)
    log.info("pre-flight of %s:\n%s", plan.name, table(rows))
    bad = blocking(rows)
    if bad:
        raise PreflightFailed(
            f"pre-flight: {len(bad)} check(s) would stop the run, nothing was launched: "
            + "; ".join(f"{r.target} {r.check}: {r.detail}" + (f" (fix: {r.fix})" if r.fix else "") for r in bad)
        )
    return mode != "pre-flight only"


def table(rows: list[Check]) -> str:
    """The rows as one plain-text table (target, check, result, fix)."""
    head = ("target", "check", "result", "fix")
    body = [(r.target, r.check, f"{r.result}: {r.detail}" if r.detail else r.result, r.fix) for r in rows]
    widths = [min(60, max(len(x[c]) for x in [head, *body])) for c in range(3)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in [head, *body]
    ]
    return "\n".join(line.rstrip() for line in lines)


# --- price ----------------------------------------------------------------------------------------


def _price(t: Target, today: dt.date | None = None) -> Check:
    if t.price:
        return Check(t.name, "price", OK, f"{t.usd_per_hour:.2f} USD/h from the plan ({t.price_source})")
    it = t.instance
    when = _date(it.as_of)
    if when is None:
        return Check(
            t.name,
            "price",
            WARN,
            f"{it.usd_per_hour} USD/h, {it.source}, undated",
            f"targets.{t.name}.price: give the price you pay (contract or list, with its date)",
        )
    age = ((today or dt.date.today()) - when).days
    if age > PRICE_STALE_DAYS:
        return Check(
            t.name,
            "price",
            WARN,
            f"{it.usd_per_hour} USD/h, {it.source}, {age} days old",
            f"targets.{t.name}.price: re-read the price ({it.source} as of {it.as_of})",
        )
    return Check(t.name, "price", OK, f"{it.usd_per_hour} USD/h, {it.source}, {age} days old")


def _date(text: str) -> dt.date | None:
    for fmt in ("%Y-%m-%d", "%Y-%m"):
        try:
            return dt.datetime.strptime(text or "", fmt).date()
        except ValueError:
            continue
    return None
