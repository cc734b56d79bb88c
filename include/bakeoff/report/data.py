"""Everything a report shows, as one value so HTML, Markdown, PDF and CSV cannot disagree: the cost
tables, raw requests, validation, support matrix, accuracy, provenance, caveats and the trend across
earlier runs of the same plan (``report.gather`` fills it from the results store), and the number
format every report uses."""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from bakeoff import claims, cost, store
from bakeoff.core.facts import RunFacts
from bakeoff.cost.headline import CLIENT_FIX
from bakeoff.plan import Plan
from bakeoff.prediction.runs import table
from bakeoff.report.capacity import CapacityRow
from bakeoff.report.perwatt import WattRow
from bakeoff.report.provisioning import ProvisioningRow
from bakeoff.report.rackscale import RackRow

# what a reader of the provenance needs first, in this order; every other key is folded away
PROVENANCE_FIRST = (
    ("image", re.compile(r"image|digest", re.I)),
    ("engine args", re.compile(r"engine_args|(^|\.)args|command", re.I)),
    ("model", re.compile(r"model|checkpoint", re.I)),
    ("driver", re.compile(r"driver|rocm|cuda|firmware", re.I)),
)


@dataclass
class ReportData:
    plan: Plan
    run_dir: store.StorePath
    run: RunFacts
    tables: cost.CostTables
    requests: pd.DataFrame
    validation: dict[str, Any] | None
    support: list[dict[str, Any]] | None
    accuracy: dict[str, dict[str, Any]]
    provenance: dict[str, dict[str, Any]]
    trend: pd.DataFrame
    clients: dict[str, str] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)  # per target: where its weights came from, how long
    failed_steps: list[str] = field(default_factory=list)  # the run's failed steps, as the orchestrator knows them
    caveats: list[str] = field(default_factory=list)
    generated_at: str = ""
    claim_checks: list[claims.ClaimCheck] = field(default_factory=list)  # the plan's claims against this run
    claims_error: str | None = None  # why the claim check could not be made (the report still renders)
    checkpoint_note: str | None = None  # targets serving different checkpoints of one model, in words
    provisioning: list[ProvisioningRow] = field(default_factory=list)  # per cloud target (report.provisioning)
    twin_checks: list[dict[str, Any]] = field(default_factory=list)  # measured vs the twin (prediction.runs.check_run)
    rack_scale: list[RackRow] = field(default_factory=list)  # per cluster target and workload (report.rackscale)
    per_watt: list[WattRow] = field(default_factory=list)  # per target and workload at the SLO (report.perwatt)
    capacity: list[CapacityRow] = field(default_factory=list)  # per workload, SLO tier and target (report.capacity)
    emulator_bands: dict[str, float] = field(default_factory=dict)  # target -> twin band +-% (twin.emulate.band_pcts)

    @property
    def emulated(self) -> bool:
        return bool(self.tables.headline.get("emulated"))

    @property
    def summary(self) -> str:
        """The headline sentence; where EMULATED figures are the twin's, it also carries the twin's band on each
        ranked cost (the repeats' interval alone would hide the twin's own error) and says whether they overlap."""
        h = self.tables.headline
        text = str(h.get("summary", ""))
        first: dict[str, Any] = next(iter((h.get("workloads") or {}).values()), {})
        ranking: list[dict[str, Any]] = first.get("ranking", [])
        banded = [
            (r["target"], float(r["usd_per_m"]), math.log1p(self.emulator_bands[r["target"]] / 100))
            for r in ranking
            if r["target"] in self.emulator_bands and r.get("usd_per_m")
        ]
        if not banded:
            return text
        parts = ", ".join(f"{t} {c:.4g} ({c * math.exp(-b):.4g}–{c * math.exp(b):.4g})" for t, c, b in banded)
        apart = len(banded) > 1 and banded[0][1] * math.exp(banded[0][2]) < banded[1][1] * math.exp(-banded[1][2])
        verdict = (
            (
                "; the two cheapest bands do not overlap"
                if apart
                else "; the bands overlap: the twin cannot separate them"
            )
            if len(banded) > 1
            else ""
        )
        return (
            f"{text}. These EMULATED figures are the twin's predictions, so each cost also carries the twin's band, "
            f"USD/M {self.basis} tokens: {parts}{verdict}"
        )

    @property
    def predicted_vs_measured(self) -> list[dict[str, Any]]:
        """The predicted-vs-measured rows as the CSV writes them."""

        return table(self.twin_checks)

    def band_note(self, target: str) -> str:
        """Beside a twin-timed target's EMULATED figures: the twin's expected error; empty otherwise."""
        band = self.emulator_bands.get(target)
        return "" if band is None else f"twin prediction ±{band:g}%"

    @property
    def basis(self) -> str:
        return str(self.tables.headline["basis"])

    @property
    def run_id(self) -> str:
        return str(self.tables.headline["run_id"])

    @property
    def workloads(self) -> list[str]:
        return [w.name for w in self.plan.workloads]

    def ranked(self, workload: str) -> pd.DataFrame:
        at = self.tables.at_slo
        if at.empty:
            return at
        part = at[(at["workload"] == workload) & at["rank"].notna()]
        return part.sort_values("rank")

    def is_sessions(self, workload: str) -> bool:
        """Whether the workload plays agent sessions (its ranking then gives cost per session)."""
        return any(w.name == workload and w.kind == "sessions" for w in self.plan.workloads)

    @property
    def has_sessions(self) -> bool:
        return any(self.is_sessions(w) for w in self.workloads)

    @property
    def has_spec(self) -> bool:
        """Whether any point has a speculative-decoding acceptance figure to show beside throughput."""
        p = self.tables.points
        return "spec_acceptance_length" in p and bool(
            pd.to_numeric(p["spec_acceptance_length"], errors="coerce").notna().any()
        )

    def session_costs(self, workload: str) -> list[dict[str, Any]]:
        """Per ranked target of a session workload: USD per session and per 1,000 turns at the SLO,
        the level they were found at, and the prefix-cache hit rate there (server and trace)."""
        if not self.is_sessions(workload):
            return []
        p, out = self.tables.points, []
        for _, r in self.ranked(workload).iterrows():
            at = p[(p["target"] == r["target"]) & (p["workload"] == workload) & (p["concurrency"] == r["concurrency"])]
            hit = pd.to_numeric(at.get("prefix_cache_hit_rate"), errors="coerce")
            exp = pd.to_numeric(at.get("prefix_cache_hit_rate_expected"), errors="coerce")
            out.append(
                {
                    "name": r["name"],
                    "emulated": bool(r["emulated"]),
                    "sessions": r["concurrency"],
                    "usd_per_session": r.get("usd_per_session"),
                    "usd_per_1k_turns": r.get("usd_per_1k_turns"),
                    "hit_rate": float(hit.mean()) if hit is not None and hit.notna().any() else None,
                    "hit_rate_expected": float(exp.mean()) if exp is not None and exp.notna().any() else None,
                }
            )
        return out

    def unranked_passed(self, workload: str) -> pd.DataFrame:
        """Targets that passed validation but have no cost at the SLO (no level met it)."""
        at = self.tables.at_slo
        if at.empty:
            return at
        return at[(at["workload"] == workload) & at["ranked"] & ~at["slo_met"].fillna(False).astype(bool)]

    def client_paced(self, workload: str) -> pd.DataFrame:
        """Targets that met the SLO only at levels the client set the pace for: their figure is a
        lower bound for the hardware, shown apart and never ranked."""
        at = self.tables.at_slo
        if at.empty or "paced_by" not in at:
            return at.iloc[0:0]
        return at[(at["workload"] == workload) & at["ranked"] & (at["paced_by"] == "client")]

    @staticmethod
    def lower_bound_note(row: pd.Series) -> str:
        """Beside a ranked figure whose cheapest level meeting the SLO was client-bound."""
        return f"lower bound: client-bound at c{fmt(row['client_bound_concurrency'])}"

    def pacing_lines(self, workload: str) -> list[str]:
        """In words, for the Markdown and the brief: targets that met the SLO only client-bound, and
        every client-bound point with the fix."""
        out = []
        emu = " EMULATED" if self.emulated else ""
        for _, r in self.client_paced(workload).iterrows():
            out.append(
                f"Lower bound, not ranked: {r['name']} met the SLO only where the client set the pace: "
                f"{fmt(r[f'usd_per_m_{self.basis}'])} USD/M {self.basis} tokens at c{fmt(r['concurrency'])}{emu}."
            )
        cb = self.client_bound_points(workload)
        if not cb.empty:
            names = {t.slug: t.name for t in self.plan.targets}
            pts = ", ".join(
                f"{names.get(p['target'], p['target'])} c{p['concurrency']} r{p['repeat']}" for _, p in cb.iterrows()
            )
            out.append(
                f"Client-bound points (the client, not the server, set the pace; never used for cost at the SLO "
                f"or the ranking): {pts}. Measure them with {CLIENT_FIX}."
            )
        return out

    def client_bound_points(self, workload: str) -> pd.DataFrame:
        """The workload's points the client, not the server, set the pace for (the loop monitor's
        verdict, per repeat and fleet member): marked wherever shown, never the hardware's figure."""
        p = self.tables.points
        if p.empty or "client_bound" not in p:
            return p.iloc[0:0]
        part = p[(p["workload"] == workload) & p["client_bound"].fillna(False).astype(bool)]
        return part.sort_values(["target", "concurrency", "repeat"])

    def did_not_pass(self) -> pd.DataFrame:
        t = self.tables.targets
        return t[~t["ranked"]]

    def provenance_parts(self, slug: str) -> tuple[list[tuple[str, str, Any]], list[tuple[str, Any]]]:
        """A target's provenance as (what a reader needs first: (kind, key, value) for image, engine
        args, model, driver, in that order; the rest, e.g. the emulator's own keys, to fold away)."""
        prov = self.provenance.get(slug) or {}
        first, taken = [], set()
        for kind, pattern in PROVENANCE_FIRST:
            for k, v in prov.items():
                if k not in taken and pattern.search(k):
                    first.append((kind, k, v))
                    taken.add(k)
        return first, [(k, v) for k, v in prov.items() if k not in taken]

    def target_points(self, slug: str) -> pd.DataFrame:
        p = self.tables.points
        if p.empty:
            return p
        return p[p["target"] == slug].sort_values(["workload", "concurrency", "repeat"])

    def measured_input(self, workload: str) -> list[dict[str, Any]]:
        """Per target: the prompt length asked for and the one the server measured (usage
        prompt_tokens), means over the workload's points, and how prompts were sized in tokens."""
        p = self.tables.points
        if p.empty or "input_len_measured_mean" not in p:
            return []
        rows = []
        for slug, g in p[p["workload"] == workload].groupby("target", sort=True):
            asked = pd.to_numeric(g["input_len_requested_mean"], errors="coerce").mean()
            got = pd.to_numeric(g["input_len_measured_mean"], errors="coerce").mean()
            err = pd.to_numeric(g.get("input_len_error"), errors="coerce")
            sizing = sorted({str(x) for x in g.get("prompt_sizing", pd.Series(dtype=object)).dropna()})
            rows.append(
                {
                    "target": slug,
                    "requested": asked,
                    "measured": got,
                    "error": err.mean() if err.notna().any() else math.nan,
                    "sizing": "+".join(sizing),
                }
            )
        return rows

    def input_text(self, workload: str) -> str:
        """'t1: 128 asked, 128.4 measured (+0.3%, sized by tokenize); ...' or a dash."""
        parts = []
        for r in self.measured_input(workload):
            err = f"{r['error']:+.1%}, " if math.isfinite(r["error"]) else ""
            measured = fmt(r["measured"]) if math.isfinite(r["measured"]) else "not reported (no usage)"
            parts.append(
                f"{r['target']}: {fmt(r['requested'])} asked, {measured} measured "
                f"({err}sized by {r['sizing'] or 'unknown'})"
            )
        return "; ".join(parts) + (" EMULATED" if parts and self.emulated else "") if parts else "–"


def weights_line(w: dict[str, Any], usd: float | None = None) -> str:
    """One target's weights as the report says them (deploy.json's ``weights``; ``usd``: their share of
    the evaluation's measured cost)."""
    size = f"{w['bytes'] / 1e9:,.1f} GB" if w.get("bytes") is not None else "size not reported"
    failure = w.get("failure")
    failed = f"; FAILED: {failure}" + (f" (missing {', '.join(w['missing'])})" if w.get("missing") else "")
    source = str(w.get("source") or "unknown")
    fetched = (
        "none downloaded (the emulator serves without weights)"
        if source.startswith("none")
        else f"from {source}, {size}, download {fmt(w.get('download_s'))} s"
    )
    return (
        f"Weights: {w.get('checkpoint') or '–'} {fetched}, load {fmt(w.get('load_s'))} s "
        "(excluded from benchmark time, included in evaluation cost"
        + (f": {fmt(usd)} USD" if usd is not None and math.isfinite(usd) else "")
        + ")"
        + (failed if failure else "")
    )


def flatten(doc: object, prefix: str = "") -> dict[str, Any]:
    """A nested provenance document as dotted keys (``driver.version``): the report and the dashboard
    show the same keys."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): doc}


def fmt(x: object, nd: int = 4) -> str:
    """Numbers for people: significant digits, thousands separators, a dash for missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)) or x is pd.NA:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, numbers.Integral) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    if isinstance(x, numbers.Real):
        x = float(x)
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{nd}g}"
    return str(x)
