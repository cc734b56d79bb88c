"""The report's data gathered once from the results store (``gather``): each optional section read
on its own, so a broken one is logged and left out rather than losing the report.

Apart from ``data`` so the caveats, a function of the gathered ``ReportData``, are filled in here
without ``data`` and ``caveats`` importing each other."""

from __future__ import annotations

import logging
import math
import re
import time
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from bakeoff import claims, cost, store
from bakeoff.plan import Plan
from bakeoff.plan.checkpoints import checkpoint_note
from bakeoff.prediction import runs
from bakeoff.report.capacity import CapacityRow
from bakeoff.report.capacity import rows as capacity_rows
from bakeoff.report.caveats import caveat_lines
from bakeoff.report.data import ReportData, flatten, weights_line
from bakeoff.report.perwatt import rows as watt_rows
from bakeoff.report.provisioning import ProvisioningRow
from bakeoff.report.provisioning import rows as provisioning_rows
from bakeoff.report.rackscale import RackRow
from bakeoff.report.rackscale import rows as rack_rows
from bakeoff.spend import offers
from bakeoff.twin.emulate import band_pcts

log = logging.getLogger(__name__)
# provenance keys never shown, whatever a provider put there
_SECRETISH = re.compile(r"key|secret|passw|authoriz|credential|(^|[._])token$", re.I)


def _support(plan: Plan, run_dir: store.StorePath) -> list[dict[str, Any]] | None:
    """The software-support matrix, when the quality package provides one; a report never fails on it."""
    try:
        from bakeoff.quality.support import support_matrix  # noqa: PLC0415 - optional section, never fatal
    except ImportError:
        return None
    try:
        return list(support_matrix(plan, run_dir))
    except Exception as e:  # noqa: BLE001 - a broken optional section must not lose the report
        log.warning("support matrix unavailable: %s", e)
        return [{"error": f"support matrix could not be built: {e}"}]


def _claim_checks(plan: Plan, tables: cost.CostTables) -> tuple[list[claims.ClaimCheck], str | None]:
    """The plan's claims checked against the run; a claim that cannot be checked must not lose the report."""
    try:
        return claims.check_claims(plan, tables), None
    except Exception as e:  # noqa: BLE001 - a broken optional section must not lose the report
        log.warning("claim check unavailable: %s", e)
        return [], f"the claim check could not be made: {e}"


def _per_target_json(plan: Plan, run_dir: store.StorePath, name: str) -> dict[str, dict[str, Any]]:
    out = {}
    for t in plan.targets:
        doc = store.read_json(run_dir / f"target={t.slug}" / name)
        if doc:
            out[t.slug] = doc
    return out


def _provenance(plan: Plan, run_dir: store.StorePath) -> dict[str, dict[str, Any]]:
    """What each target actually ran: provenance.json, else the endpoint's provenance, flattened."""
    out = {}
    for t in plan.targets:
        tdir = run_dir / f"target={t.slug}"
        doc = store.read_json(tdir / "provenance.json") or (store.read_json(tdir / "endpoint.json") or {}).get(
            "provenance"
        )
        if doc:
            out[t.slug] = {k: v for k, v in flatten(doc).items() if not _SECRETISH.search(k)}
    return out


def _weights(plan: Plan, run_dir: store.StorePath, evaluation: pd.DataFrame) -> dict[str, str]:
    """Per target deployed here: the weights line (a static endpoint's weights were not fetched by bakeoff)."""
    usd = dict(zip(evaluation["target"], evaluation["weights_usd"], strict=True)) if "weights_usd" in evaluation else {}
    out = {}
    for t in plan.targets:
        w = (store.read_json(run_dir / f"target={t.slug}" / "deploy.json") or {}).get("weights")
        if w:
            out[t.slug] = ("EMULATED: " if t.emulated else "") + weights_line(w, usd.get(t.slug))
    return out


def _clients(plan: Plan, run_dir: store.StorePath, points: pd.DataFrame) -> dict[str, str]:
    """Where each target's client ran and where its power figure came from, in words."""
    out = {}
    for t in plan.targets:
        deploy = store.read_json(run_dir / f"target={t.slug}" / "deploy.json") or {}
        net = deploy.get("network") or {}
        if t.client_mode == "co-located":
            where = "client co-located on the node (no network in TTFT)"
        elif net.get("rtt_ms_p50") is not None:
            where = f"client remote: network RTT p50 {net['rtt_ms_p50']:.2f} ms is inside every TTFT"
        else:
            where = "client remote (loopback)" if t.emulated else "client remote"
        pts = points[points["target"] == t.slug] if "target" in points else points.iloc[0:0]
        measured = "power_w_per_gpu" in pts and pts["power_w_per_gpu"].notna().any()
        if measured:
            power = " · " + _energy_provenance(pts[pts["power_w_per_gpu"].notna()])
        elif math.isfinite(t.gpu.all_in_kw):
            power = " · power estimated from the catalog"
        else:
            power = " · no power figure (GPU not in the catalog)"
        out[t.slug] = where + power
    return out


def _energy_provenance(pts: pd.DataFrame) -> str:
    """How a target's energy was measured, in words: method, library and version, sampling interval, node
    power; points written before these columns existed say only that power was measured on the node."""

    def seen(col: str) -> list[str]:
        return sorted({str(v) for v in pts[col].dropna()}) if col in pts else []

    methods, libs = seen("energy_method"), seen("energy_library")
    if not methods:
        return "power measured on the node"
    spacing = pts["energy_sample_s"].dropna() if "energy_sample_s" in pts else pd.Series(dtype=float)
    every = f", sampled every {spacing.median():.2g} s" if not spacing.empty else ""
    node = "; ".join(seen("node_power")) or "node power not recorded"
    return f"energy {' / '.join(methods)} ({', '.join(libs)}{every}); node power {node}"


def _trend(plan: Plan, run_dir: store.StorePath, headline: dict[str, Any]) -> pd.DataFrame:
    """Cost at the SLO per target across every stored run of this plan (this one included)."""
    rows = []
    root = run_dir.parent.parent
    for run in store.list_runs(plan.name, root=root):
        rdir = store.at(run.run_dir)
        h = headline if str(rdir) == str(run_dir) else store.read_json(rdir / "cost.json")
        if not h:
            continue
        for wl, w in (h.get("workloads") or {}).items():
            for r in w.get("ranking") or []:
                rows.append(
                    {
                        "run_id": run.run_id,
                        "started_at": run.start.started_at,
                        "workload": wl,
                        "target": r["target"],
                        "usd_per_m": r.get("usd_per_m"),
                        "basis": h.get("basis"),
                        "emulated": bool(h.get("emulated")),
                    }
                )
    df = pd.DataFrame(rows)
    if not df.empty:
        df["started"] = pd.to_datetime(df["started_at"], unit="s", utc=True, errors="coerce")
        df = df.sort_values("started")
    return df


def _twin_checks(plan: Plan, tables: cost.CostTables) -> list[dict[str, Any]]:
    """Every run's points against the calibrated twin's prediction (an emulated point marked EMULATED: it
    measures the emulator, so it says whether the emulator and the twin agree)."""
    if tables.points.empty:
        return []
    try:
        rows = runs.installation_rows()  # the installation's refit (bakeoff twin refit), if it has one
        return runs.check_run(plan, tables.points, runs.installation_twin(rows) if rows else None)
    except Exception as e:  # noqa: BLE001 - a broken optional section must not lose the report
        log.warning("predicted-vs-measured section skipped: %s", type(e).__name__)
        return []


def _emulator_bands(plan: Plan) -> dict[str, float]:
    """The twin's band for each twin-timed emulated target; none when no target is (no numpy fit then)."""
    if not any(t.emulated and t.emulator.efficiency == "twin" for t in plan.targets):
        return {}
    try:
        return band_pcts(plan.targets)
    except Exception as e:  # noqa: BLE001 - a broken optional figure must not lose the report
        log.warning("twin band beside EMULATED figures skipped: %s", type(e).__name__)
        return {}


def gather(
    plan: Plan,
    run_dir: str | store.StorePath,
    tables: cost.CostTables | None = None,
    failed_steps: list[str] | tuple[str, ...] = (),
) -> ReportData:
    run_dir = store.at(run_dir)
    plan = offers.as_ran(plan, run_dir)  # a target that fell back is described and priced as the type that ran
    tables = tables or cost.load_tables(run_dir) or cost.compute(plan, run_dir)
    requests = store.load_requests(run_dir)
    d = ReportData(
        plan=plan,
        run_dir=run_dir,
        run=store.run_facts(run_dir),
        tables=tables,
        requests=requests,
        validation=store.read_json(run_dir / "validation.json"),
        support=_support(plan, run_dir),
        accuracy=_per_target_json(plan, run_dir, "accuracy.json"),
        provenance=_provenance(plan, run_dir),
        trend=_trend(plan, run_dir, tables.headline),
        clients=_clients(plan, run_dir, tables.points),
        weights=_weights(plan, run_dir, tables.evaluation),
        failed_steps=list(failed_steps),
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        checkpoint_note=checkpoint_note(plan.targets, plan.quality.accuracy),
    )
    d.claim_checks, d.claims_error = _claim_checks(plan, tables)
    d.provisioning = _provisioning(plan, run_dir)
    d.twin_checks = _twin_checks(plan, tables)
    d.rack_scale = _rack_scale(plan, tables)
    d.per_watt = watt_rows(tables.at_slo, plan.pricing.usd_per_kwh)
    d.capacity = _capacity(plan, run_dir, tables)
    d.emulator_bands = _emulator_bands(plan)
    d.caveats = caveat_lines(d)
    return d


def _provisioning(plan: Plan, run_dir: store.StorePath) -> list[ProvisioningRow]:
    """The provisioning section's rows; a record this version cannot read must not lose the report."""
    try:
        return provisioning_rows(plan, store.run_facts(run_dir), time.time())
    except Exception as e:  # noqa: BLE001 - a broken optional section must not lose the report
        log.warning("provisioning section unavailable: %s", e)
        return []


def _capacity(plan: Plan, run_dir: store.StorePath, tables: cost.CostTables) -> list[CapacityRow]:
    """The capacity section's rows; a search record this version cannot read must not lose the report."""
    try:
        return capacity_rows(plan, run_dir, tables.targets)
    except Exception as e:  # noqa: BLE001 - a broken optional section must not lose the report
        log.warning("capacity section unavailable: %s", e)
        return []


def _rack_scale(plan: Plan, tables: cost.CostTables) -> list[RackRow]:
    """The rack-scale section's rows; a table this version cannot read must not lose the report."""
    try:
        return rack_rows(plan, tables.at_slo, str(tables.headline["basis"]))
    except Exception as e:  # noqa: BLE001 - a broken optional section must not lose the report
        log.warning("rack-scale section unavailable: %s", e)
        return []
