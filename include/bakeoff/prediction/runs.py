"""Learning from each run: a measured run's points against the twin's prediction, and as calibration rows.

``check_run`` puts each concurrency point of a run (mean over its repeats) beside the twin's prediction
for that target, workload and concurrency, with the band; a point outside the band means the hardware or
the twin is off, and ``out_of_band_caveat`` says so in the report. ``run_rows`` turns a non-emulated
run's points into calibration rows with their provenance (run, plan, target, workload, concurrency);
``bakeoff twin add-run`` appends them to a CSV and ``bakeoff twin refit`` fits on the published rows plus
those and prints the held-out error. A run row is keyed as the twin keys the target (the plan scenario,
Server; the calibrated model it is read through, so a run teaches the terms its prediction used) and carries its own
roofline figure: the one that makes the fit's efficiency the efficiency the run implies under the twin's
timing model (measured TPOT = roofline step / efficiency + step overhead), so ``predict`` reproduces it.
Only concurrency points of fixed-length workloads are compared (rates, traces and sessions have no single
operating point). An emulated run is never a calibration row: it measures the emulator, not hardware.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from bakeoff import catalog, store
from bakeoff.plan import Plan, plan_from_dict
from bakeoff.plan.target import Target
from bakeoff.plan.workload import Workload
from bakeoff.prediction.predict import _lengths, _point
from bakeoff.twin import calibration, holdout, operating, score
from bakeoff.twin import fit as twin_fit
from bakeoff.twin.calibration import engine_family
from bakeoff.twin.target import (
    PLAN_SCENARIO,
    STEP_OVERHEAD_S,
    Deployed,
    NoCalibration,
    TargetTwin,
    deployed,
    twin_for,
)


@dataclass(frozen=True)
class RunRow:
    """A measured run point as a calibration row (the fit keys it as it keys a published row)."""

    run_id: str
    plan: str
    target: str
    workload: str
    concurrency: int
    gpu: str
    model: str  # the calibrated model the twin read the target through (its own, or the nearest of its kind)
    served_model: str  # the target's model, as run
    engine: str
    quantization: str
    tokens_s_per_gpu: float  # measured output tokens/s per GPU
    step_s: float  # the roofline's step (efficiency 1) at this point: running sequences, their prompts' share
    running: int  # sequences decoding at once (the concurrency, capped by KV capacity)
    tp: int
    acceptance_length: float = 1.0  # tokens a step emits per sequence (speculative decoding)
    scenario: str = PLAN_SCENARIO
    multinode: str = "single"

    @property
    def row(self) -> str:  # the provenance the fit records as trained_on
        return f"{self.run_id}/{self.target}/{self.workload}/c{self.concurrency}"

    @property
    def per_gpu(self) -> float:
        return self.tokens_s_per_gpu

    @property
    def vendor(self) -> str:
        return catalog.gpus()[self.gpu].vendor

    @property
    def precision(self) -> str:
        return "fp4" if self.quantization.endswith("fp4") else self.quantization

    def tokens_at(self, efficiency: float) -> float:
        """Tokens/s per GPU the twin's timing model gives this point at ``efficiency`` (TargetTwin.tpot_s)."""
        return self.running * self.acceptance_length / (self.step_s / efficiency + STEP_OVERHEAD_S) / self.tp

    @property
    def efficiency(self) -> float:
        """The efficiency the measurement implies: tokens_at(efficiency) == tokens_s_per_gpu."""
        tpot = self.running * self.acceptance_length / (self.tokens_s_per_gpu * self.tp)
        return self.step_s / max(tpot - STEP_OVERHEAD_S, 0.01 * tpot)

    @property
    def roofline_tokens_s_per_gpu(self) -> float:
        """What the fit divides by: measured / it is the implied efficiency (fit.ideal_per_gpu)."""
        return self.tokens_s_per_gpu / self.efficiency


def _concurrency_points(
    plan: Plan, points: pd.DataFrame
) -> Iterator[tuple[Target, TargetTwin, Workload, int, float, float | None]]:
    """(target, its twin, workload, concurrency, mean measured tok/s/GPU, mean TPOT s) per point."""
    if points.empty:
        return
    by_slug = {t.slug: t for t in plan.targets}
    fixed = {w.name: w for w in plan.workloads if w.kind != "sessions" and w.load == "concurrency"}
    # a point without a load_mode (older runs) was a concurrency point
    conc = points[points["load_mode"].fillna("concurrency") == "concurrency"] if "load_mode" in points else points
    for (slug, wl, c), grp in conc.groupby(["target", "workload", "concurrency"]):
        t, w = by_slug.get(str(slug)), fixed.get(str(wl))
        if t is None or w is None:
            continue
        tw = twin_for(t)
        tps = pd.to_numeric(grp["output_tps_per_gpu"], errors="coerce").mean()
        tpot = pd.to_numeric(grp.get("tpot_ms_p50", pd.Series(dtype=float)), errors="coerce").mean() / 1000
        if isinstance(tw, NoCalibration) or not (math.isfinite(tps) and tps > 0):
            continue
        yield t, tw, w, int(c), float(tps), float(tpot) if math.isfinite(tpot) else None


def check_run(plan: Plan, points: pd.DataFrame, installed: Deployed | None = None) -> list[dict[str, Any]]:
    """Predicted vs measured output tokens/s per GPU per target and concurrency point, with the band and whether
    it held; ``figures`` says whether the measurement is the hardware's or the emulator's (EMULATED).
    ``installed``: the installation's refitted twin; each row then also carries its prediction and error
    (``refit_*``), the error after the refit beside the shipped twin's."""
    out = []
    emulated = (
        {str(k): bool(v) for k, v in points.groupby("target")["emulated"].agg(lambda s: s.astype(bool).any()).items()}
        if not points.empty and "emulated" in points
        else {}
    )
    for t, tw, w, c, tps, tpot in _concurrency_points(plan, points):
        p = _point(tw, w, c, tw.band_log)
        lo, hi = p["tokens_s_per_gpu_band"]
        out.append(
            {
                "target": t.name,
                "workload": w.name,
                "concurrency": c,
                "measured_tps_per_gpu": round(tps, 1),
                "predicted_tps_per_gpu": p["tokens_s_per_gpu"],
                "band": [lo, hi],
                "band_pct": round(math.expm1(tw.band_log) * 100, 1),
                "error_pct": round((tps / p["tokens_s_per_gpu"] - 1) * 100, 1),
                "measured_tpot_ms": round(tpot * 1000, 2) if tpot else None,
                "predicted_tpot_ms": p["tpot_ms"],
                "in_band": lo <= tps <= hi,
                "band_kind": tw.band_kind,
                "figures": "EMULATED" if emulated.get(t.slug) else "measured",
                **_after_refit(t, w, c, tps, installed),
            }
        )
    return out


def _after_refit(t: Target, w: Workload, c: int, tps: float, installed: Deployed | None) -> dict[str, Any]:
    """The refitted twin's prediction of one point and its error; nothing without a refit."""
    tw = twin_for(t, installed) if installed is not None else None
    if not isinstance(tw, TargetTwin):
        return {}
    p = _point(tw, w, c, tw.band_log)
    return {
        "refit_predicted_tps_per_gpu": p["tokens_s_per_gpu"],
        "refit_error_pct": round((tps / p["tokens_s_per_gpu"] - 1) * 100, 1),
    }


def band_count(checks: list[dict[str, Any]], targets: set[str]) -> tuple[int, int]:
    """(points inside the twin's band, points compared) of the predicted-vs-measured rows of ``targets``."""
    rows = [c for c in checks if c["target"] in targets]
    return sum(bool(c["in_band"]) for c in rows), len(rows)


def table(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The predicted-vs-measured rows as the report's CSV writes them (one column per figure, units named)."""
    return [
        {
            "target": c["target"],
            "workload": c["workload"],
            "concurrency": c["concurrency"],
            "figures": c.get("figures", "measured"),
            "measured_output_tok_s_per_gpu": c["measured_tps_per_gpu"],
            "predicted_output_tok_s_per_gpu": c["predicted_tps_per_gpu"],
            "band_low": c["band"][0],
            "band_high": c["band"][1],
            "band_pct": c["band_pct"],
            "band_kind": c.get("band_kind", ""),
            "error_pct": c["error_pct"],
            "measured_tpot_ms": c["measured_tpot_ms"],
            "predicted_tpot_ms": c["predicted_tpot_ms"],
            "inside_band": c["in_band"],
            **(
                {
                    "refit_predicted_output_tok_s_per_gpu": c["refit_predicted_tps_per_gpu"],
                    "refit_error_pct": c["refit_error_pct"],
                }
                if "refit_error_pct" in c
                else {}
            ),
        }
        for c in checks
    ]


def out_of_band_caveat(d: Any) -> str | None:
    """The report's flag (a caveat rule on ReportData) for measured points outside the twin's band; None
    when every point held or the run is emulated."""
    checks = [c for c in d.twin_checks if c.get("figures") != "EMULATED"]
    off = [c for c in checks if not c["in_band"]]
    if d.emulated or not off:
        return None
    worst = max(off, key=lambda c: abs(c["error_pct"]))
    names = sorted({c["target"] for c in off})
    return (
        f"Outside the calibrated twin's band: {len(off)} of {len(checks)} measured points, on "
        f"{', '.join(names)} (worst: {worst['target']} {worst['workload']} c={worst['concurrency']}, measured "
        f"{worst['measured_tps_per_gpu']:g} tok/s/GPU against a predicted {worst['predicted_tps_per_gpu']:g}, "
        f"{worst['error_pct']:+g}%). Either that hardware or the twin is off; both are worth knowing before a "
        "negotiation (bakeoff twin add-run then refit teaches the twin this run)."
    )


def _step_for(tw: TargetTwin, w: Workload, c: int) -> tuple[float, int]:
    """The roofline's step at this point (as TargetTwin.tpot_s times it) and the sequences running."""
    i, o, fresh = _lengths(w)
    running = max(1, min(c, tw.max_concurrency(i, o)))
    step = operating.point_step_s(tw.roof, running, i, o, fresh, tw.draft_tokens, tw.acceptance_length)
    return step, running


def run_rows(plan: Plan, points: pd.DataFrame, run_id: str) -> list[RunRow]:
    """A measured run's concurrency points as calibration rows; an emulated run is refused."""
    if not points.empty and "emulated" in points and points["emulated"].astype(bool).any():
        raise ValueError("run: its points are EMULATED; only a run on real hardware can join the calibration set")
    out = []
    for t, tw, w, c, tps, _ in _concurrency_points(plan, points):
        step, running = _step_for(tw, w, c)
        out.append(
            RunRow(
                run_id=run_id,
                plan=plan.name,
                target=t.name,
                workload=w.name,
                concurrency=c,
                gpu=tw.gpu,
                model=tw.proxy_model,
                served_model=t.model,
                engine=engine_family(t.stack),
                quantization=t.quantization,
                tokens_s_per_gpu=round(tps, 3),
                step_s=step,
                running=running,
                tp=tw.tp,
                acceptance_length=tw.acceptance_length,
            )
        )
    return out


COLUMNS = [f.name for f in fields(RunRow)]
NUMBERS: dict[str, type] = {
    "concurrency": int,
    "tokens_s_per_gpu": float,
    "step_s": float,
    "running": int,
    "tp": int,
    "acceptance_length": float,
}


def write_rows(path: Path, rows: Sequence[RunRow]) -> int:
    """Append rows to a run-rows CSV (header on a new file); a row already there (same provenance) is skipped."""
    have = {r.row for r in read_rows(path)} if path.exists() else set()
    new = [r for r in rows if r.row not in have]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    if not path.exists():
        w.writeheader()
    for r in new:
        w.writerow(asdict(r))
    with path.open("a", newline="") as f:
        f.write(buf.getvalue())
    return len(new)


def read_rows(path: Path) -> list[RunRow]:
    """Run rows from a CSV written by write_rows; a bad value names its line and column."""
    return parse_rows(path.read_text(), path.name)


def rows_text(rows: Sequence[RunRow]) -> str:
    """Run rows as the CSV write_rows writes (header first)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow(asdict(r))
    return buf.getvalue()


def parse_rows(text: str, source: str) -> list[RunRow]:
    """Run rows from CSV text (write_rows / rows_text); a bad value names ``source``, its line and column."""
    out = []
    known = set(catalog.gpus())
    for n, r in enumerate(csv.DictReader(io.StringIO(text, newline="")), start=2):
        try:
            values: dict[str, Any] = {k: NUMBERS[k](r[k]) if k in NUMBERS else r[k] for k in COLUMNS}
            row = RunRow(**values)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{source} line {n}: not a run row ({e}); write it with bakeoff twin add-run") from e
        for name in ("tokens_s_per_gpu", "step_s", "running", "tp", "acceptance_length"):
            v = getattr(row, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{source} line {n}: {name} must be a positive number, got {v}")
        if row.gpu not in known or row.model not in catalog.models() or row.served_model not in catalog.models():
            raise ValueError(
                f"{source} line {n}: gpu/model not in the catalog ({row.gpu}, {row.model}, {row.served_model})"
            )
        out.append(row)
    return out


def _median_ape(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Median |predicted - measured| / measured, in percent, over (predicted, measured) pairs."""
    apes = sorted(abs(p - m) / m * 100 for p, m in pairs)
    if not apes:
        return None
    mid = len(apes) // 2
    return apes[mid] if len(apes) % 2 else (apes[mid - 1] + apes[mid]) / 2


def _tokens(s: score.Scored) -> tuple[float, float]:
    """(predicted, measured) tokens/s per GPU; a run row's fold prediction (ideal x efficiency) is read
    through the twin's timing model (RunRow.tokens_at)."""
    r: Any = s.row
    if isinstance(r, RunRow):
        return r.tokens_at(s.predicted / r.roofline_tokens_s_per_gpu), r.per_gpu
    return s.predicted, r.per_gpu


def refit(extra: Sequence[RunRow]) -> dict[str, Any]:
    """Fit on the published rows plus ``extra`` run rows and score it on rows it never saw: the shipped
    twin's error on the run rows (it never saw them), the random hold-out and out-of-fold errors of the
    refitted set, and its new band."""
    published = list(calibration.rows())
    union: list[Any] = [*published, *extra]
    shipped = deployed().fit
    train, test = score.holdout_split(len(union))
    _, held = score.held_out(union, train, test)
    oof = score.out_of_fold(union)
    runs_oof = [s for s in oof if isinstance(s.row, RunRow)]
    new = twin_fit.fit(union)
    return {
        "published_rows": len(published),
        "run_rows": len(extra),
        "shipped_on_run_rows_median_ape": _median_ape([(r.tokens_at(shipped.efficiency(r)), r.per_gpu) for r in extra]),
        "holdout_median_ape": _median_ape([_tokens(s) for s in held]),
        "out_of_fold_median_ape": _median_ape([_tokens(s) for s in oof]),
        "out_of_fold_run_rows_median_ape": _median_ape([_tokens(s) for s in runs_oof]),
        "band_pct": round(math.expm1(new.band_log) * 100, 1),
        "shipped_band_pct": round(math.expm1(shipped.band_log) * 100, 1),
    }


# --- the installation's own calibration -------------------------------------------------------------------

INSTALLATION_DIR = "_twin"  # under the results root, beside the runs: every worker reads the same one
INSTALLATION_ROWS = "installation-calibration.csv"
INSTALLATION_SUMMARY = "installation-calibration.json"
REFIT_AFTER_PUBLISH_VARIABLE = "bakeoff_twin_refit_after_publish"
REFIT_AFTER_PUBLISH_ENV = "BAKEOFF_TWIN_REFIT_AFTER_PUBLISH"


def installation_path(name: str, root: str | store.StorePath | None = None) -> store.StorePath:
    """Where the installation's calibration lives: the results store, never the shipped package data."""
    return store.at(root or store.results_root()) / INSTALLATION_DIR / name


def _real_points(plan: Plan, rdir: store.StorePath, points: pd.DataFrame) -> pd.DataFrame:
    """The points of the run's real targets: never a point marked EMULATED, a target the plan serves with
    the emulator or whose deploy says it was, or a target its validation quarantined."""
    if points.empty:
        return points
    run = store.run_facts(rdir)
    validation = store.read_json(rdir / "validation.json") or {}
    by_slug = {t.slug: t for t in plan.targets}
    keep = set()
    for slug in {str(s) for s in points["target"].unique()}:
        t = by_slug.get(slug)
        deploy = run.target(slug).deploy
        verdict = (validation.get("targets") or {}).get(slug) or {}
        if t is None or t.emulated or (deploy and deploy.emulated) or verdict.get("passed") is False:
            continue
        keep.add(slug)
    real = points[points["target"].astype(str).isin(keep)]
    if "emulated" in real:
        real = real[~real["emulated"].fillna(True).astype(bool)]
    return real


def published_run_rows(root: str | store.StorePath | None = None) -> tuple[list[RunRow], list[str]]:
    """Every run in the installation's results store as calibration rows, its real (non-emulated) targets'
    concurrency points only; and a line per run that gave none, saying why."""

    rows: list[RunRow] = []
    skipped: list[str] = []
    for run in store.list_runs(root=root):
        rdir = store.at(run.run_dir)
        rid = run.run_id
        try:
            plan = plan_from_dict(store.read_json(rdir / "plan.json"), source="plan.json")
        except Exception as e:  # noqa: BLE001 - one unreadable run must not stop the refit
            skipped.append(f"{rid}: its plan.json does not load ({type(e).__name__})")
            continue
        real = _real_points(plan, rdir, store.load_points(rdir))
        got = run_rows(plan, real, rid) if not real.empty else []
        if not got:
            skipped.append(f"{rid}: no measured concurrency point of a real, calibrated target (EMULATED or none)")
        rows += got
    return rows, skipped


def save_installation(
    rows: Sequence[RunRow], summary: dict[str, Any], root: str | store.StorePath | None = None
) -> str:
    """Write the installation's calibration (its run rows and the refit's figures) beside the runs."""
    path = installation_path(INSTALLATION_ROWS, root)
    store.write_bytes(path, rows_text(rows).encode())
    store.write_json(installation_path(INSTALLATION_SUMMARY, root), {**summary, "rows": INSTALLATION_ROWS})
    return str(path)


def installation_rows(root: str | store.StorePath | None = None) -> list[RunRow]:
    """The installation's saved run rows; none when it has never refitted."""
    data = store.read_bytes(installation_path(INSTALLATION_ROWS, root))
    return parse_rows(data.decode(), INSTALLATION_ROWS) if data else []


def installation_twin(rows: Sequence[RunRow]) -> Deployed:
    """The twin refitted on the merged published setups plus the installation's run rows (bands as shipped:
    the held-out errors are the published rows')."""
    shipped = deployed()
    return Deployed(fit=twin_fit.fit([*holdout.setups(), *rows]), bands=shipped.bands)


def refit_installation(
    root: str | store.StorePath | None = None, extra: Sequence[RunRow] = (), save: bool = True
) -> dict[str, Any]:
    """``bakeoff twin refit``: the store's real runs (plus ``extra`` rows) as calibration rows, the refit's
    held-out figures, and (``save``) the installation's calibration written beside the runs."""
    found, skipped = published_run_rows(root)
    rows = list({r.row: r for r in [*extra, *found]}.values())  # one row per provenance, the store's last
    summary: dict[str, Any] = {"runs": sorted({r.run_id for r in rows}), "skipped": skipped, "refitted_at": time.time()}
    if rows:
        summary.update(refit(rows))
    if rows and save:
        summary["saved"] = save_installation(rows, summary, root)
    return summary


def refit_after_publish(value: Any = None) -> bool:
    """Whether the installation refits after each publish (the Variable's raw value, else the environment;
    default no)."""
    raw = os.environ.get(REFIT_AFTER_PUBLISH_ENV) if value is None or str(value).strip() == "" else value
    return str(raw).strip().lower() in ("1", "true", "yes") if raw is not None else False
