"""What each dashboard page shows, from the published runs: rows, chart series, validated filters.

Runs are read from the reports store's per-plan index.json (the manifests, each with its
``dashboard`` document from ``summary``): one listing and one read per plan, whatever the number of
runs. A plan whose index is missing is read from its manifests. Every filter and run key in a URL
is checked against the values stored: anything else raises ``NotFound`` naming the field and the
value (the plugin answers 404 with that message), so no URL ever names a path.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

from bakeoff.dashboard.runs import Run
from bakeoff.dashboard.stockouts import stockout_trend
from bakeoff.paths import StorePath, at, fresh, reports_root
from bakeoff.publishing.publish import list_published
from bakeoff.report.colours import by_kind
from bakeoff.spend.approval import approval_line

MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
EXPLORE_FILTERS = ("model", "gpu", "engine", "precision", "speculative")
BASES = ("output", "total")
IN_FORCE = "price in force"
PAGE_ROWS = 100  # runs per Runs page: the page stays fast however many runs are stored
TREND_LAST = ("12", "36", "100", "all")  # how many of a plan's latest runs Trend shows
TREND_DEFAULT = "36"
EXPLORE_POINTS = 600  # scatter points per group drawn (the newest); each frontier uses them all


class NotFound(LookupError):
    """A URL names a filter value or run that is not stored: the message names the field and value."""

    def __init__(self, field: str, value: str):
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(f"unknown {field}: {shown!r}")
        self.field, self.value = field, value


# parsed indexes by path, with the stamp they were read at: a page re-reads an index only when it
# changed (one stat, or one HEAD on object storage, instead of reading and parsing it again)
_INDEXES: dict[str, tuple[tuple[Any, ...], list[dict[str, Any]]]] = {}
_STAMP = ("size", "mtime", "ino", "ETag", "LastModified")


def _read_index(plan_dir: StorePath) -> list[dict[str, Any]] | None:
    """A plan's index.json (never modified by the pages: they only read it)."""
    path = plan_dir / "index.json"
    try:
        st = path.stat()  # a dict-like stat from object storage, or os.stat_result for a local path
        stamp = (
            (str(st.st_size), str(st.st_mtime_ns), str(st.st_ino))
            if isinstance(st, os.stat_result)
            else tuple(str(st.get(k)) for k in _STAMP)
        )
        hit = _INDEXES.get(str(path))
        if hit is not None and hit[0] == stamp:
            return hit[1]
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, list):
        return None
    _INDEXES[str(path)] = (stamp, doc)
    return doc


def load_runs(root: str | StorePath | None = None) -> list[Run]:
    """Every published run, newest first."""
    base = fresh(at(root or reports_root()))
    docs: list[dict[str, Any]] = []
    try:
        plan_dirs = [p for p in base.iterdir() if p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        plan_dirs = []
    for plan_dir in plan_dirs:
        index = _read_index(plan_dir)
        docs.extend(index if index is not None else list_published(base, plan_dir.name))
    runs = [Run(f"{d['plan_dir']}/{d['run_dir']}", d) for d in docs if isinstance(d, dict) and "run_dir" in d]
    return sorted(runs, key=lambda r: (r.started_at, r.key), reverse=True)


def _pick(field: str, value: str | None, allowed: list[str] | set[str]) -> str | None:
    if value in (None, ""):
        return None
    if value not in allowed:
        raise NotFound(field, str(value))
    return value


def run_by_key(runs: list[Run], key: str, field: str = "run") -> Run:
    found = next((r for r in runs if r.key == key), None)
    if found is None:
        raise NotFound(field, key)
    return found


def _fmt(x: object, nd: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{nd}g}" if isinstance(x, (int, float)) else str(x)


def human(x: object) -> str:
    """A value as a person reads it: 850000000000.0 -> '850,000,000,000', 18.271003917392964 -> '18.27', a
    number in a string the same way, anything else as text."""
    if isinstance(x, str):
        try:
            number = float(x)
        except ValueError:
            return x
        return human(number) if re.fullmatch(r"-?\d+(\.\d+)?(e[+-]?\d+)?", x.strip(), re.I) else x
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not isinstance(x, (int, float)):
        return _fmt(x)
    if not math.isfinite(x):
        return "–"
    if float(x).is_integer() or abs(x) >= 1e4:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def verdict_text(run: Run) -> str:
    v = run.dash.get("verdict") or {}
    if not v.get("cheaper"):
        return "no cost at the SLO"
    if v.get("clear"):
        return f"{v['cheaper']} cheaper"
    return f"no clear winner ({v['cheaper']} vs {', '.join(v.get('tied_with') or [])})"


# --- Runs ----------------------------------------------------------------------------------------


def runs_page(runs: list[Run], q: dict[str, str | None]) -> dict[str, Any]:
    plans = sorted({str(r.doc.get("plan")) for r in runs})
    months = sorted({r.month for r in runs if r.month}, reverse=True)
    statuses = sorted({r.status for r in runs})
    plan = _pick("plan", q.get("plan"), plans)
    month = q.get("month") or None
    if month is not None and not MONTH.fullmatch(month):
        raise NotFound("month (YYYY-MM)", month)
    month = _pick("month", month, months)
    status = _pick("status", q.get("status"), statuses)
    emulated = _pick("emulated", q.get("emulated"), ["yes", "no"])
    page = q.get("page") or "1"
    if not page.isdigit() or int(page) < 1:
        raise NotFound("page", page)
    rows = []
    for r in runs:
        if (plan and r.doc.get("plan") != plan) or (month and r.month != month) or (status and r.status != status):
            continue
        if emulated and r.emulated != (emulated == "yes"):
            continue
        rows.append(r)
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    if int(page) > pages:
        raise NotFound("page", page)
    shown = []
    for r in rows[(int(page) - 1) * PAGE_ROWS : int(page) * PAGE_ROWS]:
        approval = r.dash.get("approval") or r.doc.get("approval")
        shown.append(
            {
                "run": r,
                "verdict": verdict_text(r),
                "spend": r.dash.get("spend_usd"),
                "failed_steps": list(r.doc.get("failed_steps") or []),
                "approval": _approval_text(approval),
                "files": r.doc.get("files") or {},
            }
        )
    return {
        "filters": {"plan": plan, "month": month, "status": status, "emulated": emulated},
        "options": {"plan": plans, "month": months, "status": statuses, "emulated": ["yes", "no"]},
        "rows": shown,
        "matching": len(rows),
        "page": int(page),
        "pages": pages,
        "total": len(runs),
    }


def _approval_text(approval: object) -> str:
    """The approval record in the report's words (approval.approval_line); blank for a run without one."""
    return approval_line(approval) if isinstance(approval, dict) and approval else ""


# --- Trend ---------------------------------------------------------------------------------------


def _significant(prev: dict[str, Any], cur: dict[str, Any]) -> str:
    """Whether the change is beyond the repeats' noise: disjoint 95% intervals say so (conservatively)."""
    a, b = prev.get("ci") or [None, None], cur.get("ci") or [None, None]
    if None in a or None in b:
        return "no interval (one repeat)"
    return "significant" if a[1] < b[0] or b[1] < a[0] else "within the intervals"


def trend_page(runs: list[Run], q: dict[str, str | None]) -> dict[str, Any]:
    plans = sorted({str(r.doc.get("plan")) for r in runs})
    plan = _pick("plan", q.get("plan"), plans) or (str(runs[0].doc.get("plan")) if runs else None)
    mine = sorted((r for r in runs if r.doc.get("plan") == plan), key=lambda r: (r.started_at, r.key))
    last = _pick("last", q.get("last"), list(TREND_LAST)) or TREND_DEFAULT
    stored = len(mine)
    if last != "all":
        mine = mine[-int(last) :]
    workloads = sorted({w for r in mine for t in r.targets.values() for w in (t.get("workloads") or {})})
    default_wl = next((r.dash.get("workload") for r in reversed(mine) if r.dash.get("workload")), None)
    workload = _pick("workload", q.get("workload"), workloads) or default_wl
    names = sorted({t["name"] for r in mine for t in r.targets.values()})
    target = _pick("target", q.get("target"), names)
    series: dict[str, list[dict[str, Any]]] = {}
    events = []
    for r in mine:
        for t in r.targets.values():
            if target and t["name"] != target:
                continue
            at_slo = (t.get("workloads") or {}).get(workload) or {}
            series.setdefault(t["name"], []).append({"run": r, **at_slo})
            if t.get("provisioned") is False:
                events.append({"run": r, "target": t["name"], "what": "not provisioned (no node: stockout or quota)"})
            if str(t.get("accuracy", "")).startswith("failed"):
                events.append({"run": r, "target": t["name"], "what": f"accuracy {t['accuracy']}"})
    rows = []
    for name, pts in series.items():
        prev = None
        for p in pts:
            change = sig = ""
            if prev and prev.get("usd_per_m") and p.get("usd_per_m"):
                change = f"{(p['usd_per_m'] / prev['usd_per_m'] - 1) * 100:+.1f}%"
                sig = _significant(prev, p)
            rows.append({"target": name, "point": p, "change": change, "significance": sig})
            if p.get("slo_met"):
                prev = p
    labels = [r.when or r.key for r in mine]
    index = {r.key: i for i, r in enumerate(mine)}

    def line(name: str, key: str, sub: int | None = None) -> list[dict[str, Any]]:
        out = []
        for p in series[name]:
            v = p.get(key)
            v = (v or [None, None])[sub] if sub is not None else v
            if v is not None:
                out.append({"x": index[p["run"].key], "y": v})
        return out

    gpu = {t["name"]: (t.get("config") or {}).get("gpu") for r in mine for t in r.targets.values()}
    colour = by_kind((name, gpu.get(name)) for name in series)
    cost_sets, tps_sets, joule_sets = [], [], []
    for name in series:
        c = colour[name]
        cost_sets += [
            {"label": f"{name}", "data": line(name, "usd_per_m"), "line": True, "colour": c},
            {"label": f"{name} 95% low", "data": line(name, "ci", 0), "line": True, "dashed": True, "colour": c},
            {"label": f"{name} 95% high", "data": line(name, "ci", 1), "line": True, "dashed": True, "colour": c},
        ]
        tps_sets.append({"label": name, "data": line(name, "tps_per_gpu"), "line": True, "colour": c})
        joule_sets += [
            {"label": f"{name}", "data": line(name, "tokens_per_joule"), "line": True, "colour": c},
            {
                "label": f"{name} 95% low",
                "data": line(name, "tokens_per_joule_ci", 0),
                "line": True,
                "dashed": True,
                "colour": c,
            },
            {
                "label": f"{name} 95% high",
                "data": line(name, "tokens_per_joule_ci", 1),
                "line": True,
                "dashed": True,
                "colour": c,
            },
        ]
    emulated = any(r.emulated for r in mine)
    events_set = [{"x": index[e["run"].key], "y": 0, "label": f"{e['target']}: {e['what']}"} for e in events]
    basis = next((r.dash.get("basis") for r in mine if r.dash.get("basis")), "total")
    charts = [
        {
            "id": "trend-cost",
            "kind": "category",
            "labels": labels,
            "x": "run (started, UTC)",
            "y": f"USD per M {basis} tokens at the SLO",
            "datasets": cost_sets,
            "events": events_set,
            "emulated": emulated,
        },
        {
            "id": "trend-tps",
            "kind": "category",
            "labels": labels,
            "x": "run (started, UTC)",
            "y": f"{basis} tokens/s per GPU at the SLO",
            "datasets": tps_sets,
            "events": events_set,
            "emulated": emulated,
        },
    ]
    if any(d["data"] for d in joule_sets):
        charts.append(
            {
                "id": "trend-joule",
                "kind": "category",
                "labels": labels,
                "x": "run (started, UTC)",
                "y": "output tokens per joule at the SLO (measured or nameplate: see the table)",
                "datasets": joule_sets,
                "events": events_set,
                "emulated": emulated,
            }
        )
    stockouts = stockout_trend(mine)
    if stockouts["chart"]:
        charts.append(stockouts["chart"])
    return {
        "stockouts": stockouts["rows"],
        "filters": {"plan": plan, "workload": workload, "target": target, "last": last},
        "options": {"plan": plans, "workload": workloads, "target": names, "last": list(TREND_LAST)},
        "stored": stored,
        "rows": rows,
        "events": events,
        "charts": charts,
        "basis": basis,
        "runs": len(mine),
    }


# --- Compare -------------------------------------------------------------------------------------


def compare_page(runs: list[Run], q: dict[str, str | None]) -> dict[str, Any]:
    keys = [r.key for r in runs]
    if not keys:
        return {"keys": keys, "sides": [], "diff": [], "charts": []}
    a_key, b_key = default_pair(runs, q.get("a"), q.get("b"))
    sides: list[dict[str, Any]] = []
    for side, key in (("a", a_key), ("b", b_key)):
        run = run_by_key(runs, key, f"run {side}")
        names = {t["name"]: slug for slug, t in run.targets.items()}
        tname = _pick(f"target {side}", q.get(f"{side}_target"), list(names))
        chosen = {names[tname]: run.targets[names[tname]]} if tname else run.targets
        sides.append({"side": side, "run": run, "target": tname, "targets": chosen, "names": sorted(names)})
    # configuration diff: one row per (target name, field); targets matched by name, or the two chosen
    pairs: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
    a, b = sides
    if a["target"] and b["target"]:
        only = [next(iter(s["targets"].values())) for s in sides]
        pairs.append((f"{a['target']} / {b['target']}", only[0], only[1]))
    else:
        by_a = {t["name"]: t for t in a["targets"].values()}
        by_b = {t["name"]: t for t in b["targets"].values()}
        for name in sorted(set(by_a) | set(by_b)):
            pairs.append((name, by_a.get(name), by_b.get(name)))
    diff = []
    for label, ta, tb in pairs:
        ca, cb = (ta or {}).get("config") or {}, (tb or {}).get("config") or {}
        for field in sorted(set(ca) | set(cb), key=lambda f: (f.startswith("provenance"), f)):
            va, vb = ca.get(field), cb.get(field)
            diff.append({"target": label, "field": field, "a": human(va), "b": human(vb), "differs": va != vb})
    diff.sort(key=lambda r: not r["differs"])  # what differs first; the identical rows fold away on the page
    charts: list[dict[str, Any]] = []
    workloads = sorted(
        {w for s in sides for t in s["targets"].values() for w in (t.get("workloads") or {})},
    )
    basis = a["run"].dash.get("basis") or "total"
    # one colour per target (its GPU's) on both sides; side A's curves dashed
    gpu_of = {t["name"]: (t.get("config") or {}).get("gpu") for s in sides for t in s["targets"].values()}
    colour = by_kind(gpu_of.items())
    emulated = any(s["run"].emulated for s in sides)
    for wl in workloads:
        datasets = []
        for s in sides:
            for t in s["targets"].values():
                front = ((t.get("workloads") or {}).get(wl) or {}).get("frontier") or []
                pts = [
                    # hollow: the client, not the server, set the pace at this level
                    {"x": p["interactivity"], "y": p[f"{basis}_tps_per_gpu"], "hollow": bool(p.get("client_bound"))}
                    for p in front
                    if p.get("interactivity") is not None and p.get(f"{basis}_tps_per_gpu") is not None
                ]
                name = f"{s['side'].upper()}: {t['name']}"
                dashed = s["side"] == "a" and len(sides) > 1
                datasets.append(
                    {"label": name, "data": pts, "line": True, "colour": colour[t["name"]], "dashed": dashed}
                )
        charts.append(
            {
                "id": f"compare-{len(charts)}",
                "kind": "linear",
                "title": wl,
                "x": "interactivity (tokens/s per user)",
                "y": f"{basis} tokens/s per GPU",
                "datasets": datasets,
                "emulated": emulated,
            }
        )
    costs = []
    for s in sides:
        for t in s["targets"].values():
            for wl, w in (t.get("workloads") or {}).items():
                costs.append({"side": s["side"].upper(), "target": t["name"], "workload": wl, "at": w})
    same = sum(1 for r in diff if not r["differs"])
    return {
        "keys": keys,
        "sides": sides,
        "diff": diff,
        "identical": same,
        "charts": charts,
        "costs": costs,
        "basis": basis,
        "alone": a_key == b_key,
    }


def default_pair(runs: list[Run], a: str | None, b: str | None) -> tuple[str, str]:
    """The runs Compare opens with: B the newest (or the one asked for), A the newest earlier run of
    B's plan (or the one asked for); a plan with one run only is compared with itself, and the page says so."""
    b_run = run_by_key(runs, b, "run b") if b else runs[0]
    if a:
        return a, b_run.key
    plan = b_run.doc.get("plan")
    earlier = [r for r in runs if r.doc.get("plan") == plan and r.key != b_run.key and r.started_at <= b_run.started_at]
    return (earlier[0].key if earlier else b_run.key), b_run.key


# --- Explore -------------------------------------------------------------------------------------


def _pareto(points: list[dict[str, float]]) -> list[dict[str, float]]:
    """The upper-right frontier: no other point is both more interactive and more productive."""
    best = -math.inf
    out = []
    for p in sorted(points, key=lambda p: (-p["x"], -p["y"])):
        if p["y"] > best:
            out.append(p)
            best = p["y"]
    return sorted(out, key=lambda p: p["x"])


def explore_page(runs: list[Run], q: dict[str, str | None]) -> dict[str, Any]:
    options: dict[str, set[str]] = {f: set() for f in EXPLORE_FILTERS}
    tiers: set[str] = set()
    for r in runs:
        tiers.update(r.dash.get("tco_tiers") or [])
        for t in r.targets.values():
            for f in EXPLORE_FILTERS:
                options[f].add(str((t.get("config") or {}).get(f, "")))
    chosen = {f: _pick(f, q.get(f), options[f]) for f in EXPLORE_FILTERS}
    tokens = _pick("tokens", q.get("tokens"), list(BASES)) or "output"
    tco = _pick("tco", q.get("tco"), [IN_FORCE, *sorted(tiers)]) or IN_FORCE
    groups: dict[str, dict[str, Any]] = {}
    for r in runs:
        for t in r.targets.values():
            cfg = t.get("config") or {}
            if any(v is not None and str(cfg.get(f, "")) != v for f, v in chosen.items()):
                continue
            label = " · ".join(str(cfg.get(f, "")) for f in ("gpu", "engine", "precision")) + (
                f" · spec {cfg['speculative']}" if cfg.get("speculative") not in (None, "none") else ""
            )
            g = groups.setdefault(
                label,
                {"label": label, "gpu": cfg.get("gpu"), "points": [], "cost": [], "at_slo": [], "emulated": False},
            )
            g["emulated"] = g["emulated"] or bool(t.get("emulated", r.emulated))
            for wl, w in (t.get("workloads") or {}).items():
                ratio = 1.0
                if tco != IN_FORCE:
                    tier_cost = (w.get("tco") or {}).get(tco)
                    ratio = tier_cost / w["usd_per_m"] if tier_cost and w.get("usd_per_m") else math.nan
                for p in w.get("frontier") or []:
                    x, y = p.get("interactivity"), p.get(f"{tokens}_tps_per_gpu")
                    if x is None or y is None:
                        continue
                    g["points"].append({"x": x, "y": y})
                    c = p.get(f"usd_per_m_{tokens}")
                    if c is not None and math.isfinite(c * ratio):
                        g["cost"].append({"x": x, "y": c * ratio})
                if w.get("slo_met"):
                    g["at_slo"].append(
                        {
                            "run": r,
                            "target": t["name"],
                            "workload": wl,
                            "usd_per_m": (w.get("usd_per_m") or math.nan) * ratio,
                            "tps_per_gpu": w.get("tps_per_gpu"),
                        }
                    )
    datasets, cost_sets = [], []
    shown = stored = 0
    ordered = sorted(groups.values(), key=lambda g: g["label"])
    colour = by_kind((g["label"], g["gpu"]) for g in ordered)
    for g in ordered:
        # the frontier over every point; the scatter the newest EXPLORE_POINTS (runs come newest first)
        c = colour[g["label"]]
        datasets.append({"label": g["label"], "data": g["points"][:EXPLORE_POINTS], "line": False, "colour": c})
        datasets.append(
            {"label": f"{g['label']} (Pareto)", "data": _pareto(g["points"]), "line": True, "pareto": True, "colour": c}
        )
        cost_sets.append({"label": g["label"], "data": g["cost"][:EXPLORE_POINTS], "line": False, "colour": c})
        shown += min(len(g["points"]), EXPLORE_POINTS)
        stored += len(g["points"])
    table = []
    for g in sorted(groups.values(), key=lambda g: g["label"]):
        finite = [a for a in g["at_slo"] if a["usd_per_m"] == a["usd_per_m"]]
        best = min(finite, key=lambda a: a["usd_per_m"], default=None)
        table.append({"label": g["label"], "runs": len({a["run"].key for a in g["at_slo"]}), "best": best})
    charts = [
        {
            "id": "explore-pareto",
            "kind": "linear",
            "x": "interactivity (tokens/s per user)",
            "y": f"{tokens} tokens/s per GPU",
            "datasets": datasets,
            "emulated": any(g["emulated"] for g in ordered),
        },
        {
            "id": "explore-cost",
            "kind": "linear",
            "x": "interactivity (tokens/s per user)",
            "y": f"USD per M {tokens} tokens ({tco})",
            "datasets": cost_sets,
            "emulated": any(g["emulated"] for g in ordered),
        },
    ]
    return {
        "filters": {**chosen, "tokens": tokens, "tco": tco},
        "options": {
            **{f: sorted(v) for f, v in options.items()},
            "tokens": list(BASES),
            "tco": [IN_FORCE, *sorted(tiers)],
        },
        "charts": charts,
        "table": table,
        "groups": len(groups),
        "points": {"shown": shown, "stored": stored},
    }
