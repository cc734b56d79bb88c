"""The report's Provisioning section: per target, how it got its node or why it got none.

Read from the typed step records (``bakeoff.core.facts``): the provision record's ``provisioning`` (what
the provider says of its create: ``attempts``, ``refusals`` by reason, the ``region`` and
``instance_type`` that took it, ``tried``: every attempt as "<type> in <where>"; ``provisioning.provision``
adds ``create_s``), the ``provision_refused`` record when every place refused, ``node_ready`` (time to
running) and ``deploy.ready_at`` (time to serving-ready), both counted from the create request. The
record (``facts.ProvisioningRecord``) reads another version's files leniently (a key of the wrong
type is dropped, not fatal), so they never lose the report. A stockout is a
procurement fact, so refusals are also condensed for the dashboard's trend (``summary``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bakeoff.core.facts import ProvisioningRecord, RunFacts, TargetFacts
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.paths import StorePath
from bakeoff.plan import Plan
from bakeoff.spend.offers import ran_type


@dataclass(frozen=True)
class ProvisioningRow:
    """One target's provisioning, as the report shows it."""

    slug: str
    name: str
    provider: str
    instance_type: str
    outcome: str  # "running in <region>", "refused everywhere (capacity)", "not provisioned"
    offers: tuple[str, ...] = ()  # offers / places asked, in order
    attempts: int | None = None
    refusals: dict[str, int] = field(default_factory=dict)
    to_running_s: float | None = None
    to_serving_s: float | None = None
    billed_hours: float | None = None
    still_billing: bool = False
    region: str = ""


def _since(at: float | None, start: float | None) -> float | None:
    return at - start if at is not None and start is not None and at >= start else None


def target_row(t: TargetFacts, name: str, provider: str, instance_type: str, now: float) -> ProvisioningRow:
    """A target's row from its records (a target with none: not provisioned)."""
    prov, refused = t.provision, t.provision_refused
    started_ok = prov is not None and prov.instance_id is not None
    # a refusal newer than the last successful create is the target's latest outcome
    refused_last = refused is not None and (
        not started_ok or (prov is not None and (prov.requested_at or prov.launched_at or 0) < refused.at)
    )
    record = prov.provisioning if prov is not None else ProvisioningRecord()
    if refused_last and refused is not None:
        record = refused.provisioning
    refusals, attempts, offers = record.refusal_counts(), record.attempts, record.tried
    billed = t.billed_hours(now) if t.launches() else None
    if refused_last and refused is not None:
        offers = offers or refused.offers
        if not refusals:  # the provider did not count them: every place asked refused
            refusals = {refused.reason: max(1, len(offers))}
        return ProvisioningRow(
            slug=t.slug,
            name=name,
            provider=provider,
            instance_type=instance_type,
            outcome=f"refused everywhere ({refused.reason})",
            offers=offers,
            attempts=attempts if attempts is not None else len(offers) or None,
            refusals=refusals,
            billed_hours=billed,
            still_billing=t.running_since() is not None,
        )
    if prov is None or not started_ok:
        return ProvisioningRow(t.slug, name, provider, instance_type, "not provisioned")
    region = record.region or ""
    start = prov.requested_at
    ready = t.node_ready
    running_at = ready.running_at if ready is not None and ready.instance_id == prov.instance_id else None
    serving_at = t.deploy.ready_at if t.deploy is not None else None
    return ProvisioningRow(
        slug=t.slug,
        name=name,
        provider=provider,
        instance_type=instance_type,
        outcome=f"running in {region}" if region else "running",
        offers=offers,
        attempts=attempts,
        refusals=refusals,
        to_running_s=_since(running_at, start),
        to_serving_s=_since(serving_at, start) if running_at is not None else None,
        billed_hours=billed,
        still_billing=t.running_since() is not None and t.last_ended_at() is None and t.terminate is None,
        region=region,
    )


def rows(plan: Plan, run: RunFacts, now: float) -> list[ProvisioningRow]:
    """Every provisioned target of the plan (static endpoints and the emulator have no provisioning)."""

    out = []
    for t in plan.targets:
        info = PROVIDERS.get(t.provider)
        if info is None or not info.provisions:
            continue
        listed = " or ".join(t.offers) if len(t.offers) > 1 else str(t.instance_type or "")
        ran = ran_type(run, t.slug) if len(t.offers) > 1 else None  # the offer that launched, if the plan lists it
        shown = ran if ran is not None and ran in t.offers else listed
        out.append(target_row(run.target(t.slug), t.name, t.provider, shown, now))
    return out


def refusal_text(refusals: dict[str, int]) -> str:
    """'2 capacity, 1 quota', or 'none'."""
    return ", ".join(f"{n} {k}" for k, n in sorted(refusals.items())) or "none"


def table(rows: list[ProvisioningRow]) -> list[dict[str, Any]]:
    """The section as flat records, one per target (the report's provisioning CSV): what the Markdown,
    HTML and PDF tables show, with the offers tried joined by '; ' and refusals as 'n reason'."""
    return [
        {
            "target": r.name,
            "cloud": r.provider,
            "instance_type": r.instance_type,
            "outcome": r.outcome,
            "offers_tried": "; ".join(r.offers),
            "attempts": r.attempts,
            "refusals": refusal_text(r.refusals),
            "to_running_s": r.to_running_s,
            "to_serving_ready_s": r.to_serving_s,
            "billed_hours": r.billed_hours,
            "still_billing": r.still_billing,
        }
        for r in rows
    ]


def summary(row: ProvisioningRow) -> dict[str, Any]:
    """What the dashboard keeps of a row for its stockout trend (small, JSON)."""
    return {
        "provider": row.provider,
        "instance_type": row.instance_type,
        "region": row.region,
        "outcome": row.outcome,
        "attempts": row.attempts,
        "refusals": dict(row.refusals),
        "refused_everywhere": row.outcome.startswith("refused everywhere"),
        "to_running_s": None if row.to_running_s is None else round(row.to_running_s, 1),
        "to_serving_s": None if row.to_serving_s is None else round(row.to_serving_s, 1),
    }


def summaries(plan: Plan, run_dir: str | StorePath, now: float) -> dict[str, dict[str, Any]]:
    """Per provisioned target slug: ``summary`` of its row (the dashboard document's ``provisioning``);
    empty when the run's records cannot be read (the dashboard must still list the run)."""
    from bakeoff import store  # noqa: PLC0415 - the store only when a run is summarised

    try:
        run = store.run_facts(run_dir)
    except Exception:  # noqa: BLE001 - a record another version wrote must not lose the run's summary
        return {}
    return {r.slug: summary(r) for r in rows(plan, run, now)}
