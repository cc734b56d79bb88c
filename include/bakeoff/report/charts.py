"""Report charts drawn with matplotlib's object API (no pyplot state, no GUI backend): SVG for the
HTML report (inline, text as paths, so it needs no fonts or network) and PNG for the PDF brief.

Plan-supplied labels are drawn with mathtext off, so a name containing '$' is text, not a formula.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bakeoff.report.colours import by_kind
from bakeoff.report.data import ReportData

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

RC: dict[RcKeyType, object] = {
    "text.parse_math": False,
    "svg.fonttype": "path",
    "svg.hashsalt": "bakeoff",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


@contextmanager
def _style() -> Iterator[None]:
    with rc_context(RC):
        yield


def colours(d: ReportData) -> dict[str, str]:
    """Each target's colour: its GPU's, as on the dashboard (bakeoff.report.colours)."""
    return by_kind((t.slug, t.gpu.name) for t in d.plan.targets)


def _stamp(fig: Figure, emulated: bool) -> None:
    if emulated:
        fig.text(
            0.5,
            0.5,
            "EMULATED",
            fontsize=46,
            color="#c00000",
            alpha=0.14,
            rotation=20,
            ha="center",
            va="center",
            weight="bold",
            zorder=0,
        )


def to_svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    # inline in HTML: drop the XML prolog and doctype, keep the <svg> element
    text = text[text.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def to_png(fig: Figure, dpi: int = 150) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of points no other point beats on both axes (higher is better on each), by x."""
    order = np.argsort(-x, kind="stable")
    keep, best = [], -np.inf
    for i in order:
        if y[i] > best:
            keep.append(i)
            best = y[i]
    return np.array(sorted(keep, key=lambda i: x[i]), dtype=int)


def _levels(d: ReportData, workload: str) -> pd.DataFrame:
    p = d.tables.points
    if p.empty:
        return p
    p = p[(p["workload"] == workload) & p["ranked"].astype(bool)]  # quarantined targets never share a chart
    if "client_bound" not in p:
        p = p.assign(client_bound=False)
    basis = d.basis
    return (
        p.groupby(["target", "concurrency"], sort=True)
        .agg(
            interactivity=("interactivity", "mean"),
            tps=(f"{basis}_tps_per_gpu", "mean"),
            usd=(f"usd_per_m_{basis}", "mean"),
            meets=("meets_slo", lambda s: bool(s.fillna(False).astype(bool).all())),
            client_bound=("client_bound", lambda s: bool(s.fillna(False).astype(bool).any())),
        )
        .reset_index()
    )


def _points(ax: Axes, g: pd.DataFrame, x: str, y: str, colour: str | None, **kw: Any) -> None:
    """Levels as markers: filled where the server set the pace, hollow where the client did (not the
    hardware's figure); ``kw`` sets the marker and size."""
    paced = g[~g["client_bound"]]
    bound = g[g["client_bound"]]
    ax.scatter(paced[x], paced[y], color=colour, zorder=3, **kw)
    ax.scatter(bound[x], bound[y], facecolors="white", edgecolors=colour, linewidths=1.2, zorder=3, **kw)


def _hollow_note(ax: Axes, lv: pd.DataFrame) -> None:
    """Says what a hollow marker means, on a chart that has one."""
    if not lv.empty and lv["client_bound"].any():
        ax.text(0.01, 0.01, "hollow: client-bound (the client set the pace)", transform=ax.transAxes, fontsize=7)


def _names(d: ReportData) -> dict[str, str]:
    return {t.slug: t.name for t in d.plan.targets}


def throughput_vs_interactivity(d: ReportData, workload: str) -> Figure:
    with _style():
        fig = Figure(figsize=(6.4, 3.8))
        ax = fig.add_subplot()
        lv, col, names = _levels(d, workload), colours(d), _names(d)
        for slug, g in lv.groupby("target") if not lv.empty else []:
            g = g.dropna(subset=["interactivity", "tps"])
            if g.empty:
                continue
            x, y = g["interactivity"].to_numpy(float), g["tps"].to_numpy(float)
            front = pareto_front(x, y)
            _points(ax, g, "interactivity", "tps", col.get(slug), s=18)
            ax.plot(x[front], y[front], color=col.get(slug), lw=1.8, label=f"{names.get(slug, slug)} (Pareto front)")
            for xi, yi, c in zip(x, y, g["concurrency"], strict=True):
                ax.annotate(f"c{c}", (xi, yi), textcoords="offset points", xytext=(3, 3), fontsize=7, color="#555")
        ax.set_xlabel(f"interactivity (tokens/s per user, {d.plan.slo.interactivity_stat} TPOT)")
        ax.set_ylabel(f"{d.basis} tokens/s per GPU")
        ax.set_title(f"Throughput per GPU vs interactivity - {workload}")
        _hollow_note(ax, lv)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        _stamp(fig, d.emulated)
        return fig


def slo_interactivity(d: ReportData) -> float | None:
    """Interactivity implied by the plan's TPOT SLO (1000 / TPOT ms), for the SLO marker."""
    tpot = d.plan.slo.tightest("tpot") or d.plan.slo.request_bounds().get("tpot")
    return 1000 / tpot if tpot else None


def cost_vs_interactivity(d: ReportData, workload: str) -> Figure:
    with _style():
        fig = Figure(figsize=(6.4, 3.8))
        ax = fig.add_subplot()
        lv, col, names = _levels(d, workload), colours(d), _names(d)
        for slug, g in lv.groupby("target") if not lv.empty else []:
            g = g.dropna(subset=["interactivity", "usd"]).sort_values("interactivity")
            if g.empty:
                continue
            c = col.get(slug)
            ax.plot(g["interactivity"], g["usd"], color=c, lw=1.2, alpha=0.7, label=names.get(slug, slug))
            _points(ax, g[g["meets"]], "interactivity", "usd", c, s=26, marker="o")
            _points(ax, g[~g["meets"]], "interactivity", "usd", c, s=26, marker="s")
        x_slo = slo_interactivity(d)
        if x_slo:
            ax.axvline(x_slo, color="#444", ls="--", lw=1)
            ax.text(x_slo, 0.98, " SLO (TPOT)", transform=ax.get_xaxis_transform(), fontsize=7, va="top")
        ax.set_xlabel("interactivity (tokens/s per user)")
        ax.set_ylabel(f"USD per M {d.basis} tokens")
        ax.set_title(f"Cost vs interactivity - {workload} (circle: meets the SLO, square: misses)")
        _hollow_note(ax, lv)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        _stamp(fig, d.emulated)
        return fig


def cost_at_slo(d: ReportData, workload: str, small: bool = False) -> Figure:
    with _style():
        ranked = d.ranked(workload)
        fig = Figure(
            figsize=(5.6, 0.6 + 0.5 * max(1, len(ranked))) if small else (6.4, 1.0 + 0.6 * max(1, len(ranked)))
        )
        ax = fig.add_subplot()
        col, basis = colours(d), d.basis
        if ranked.empty:
            ax.text(0.5, 0.5, "no target has a cost at the SLO", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        else:
            y = np.arange(len(ranked))[::-1]
            v = ranked[f"usd_per_m_{basis}"].to_numpy(float)
            lo = np.nan_to_num(v - ranked[f"usd_per_m_{basis}_ci_low"].to_numpy(float), nan=0.0)
            hi = np.nan_to_num(ranked[f"usd_per_m_{basis}_ci_high"].to_numpy(float) - v, nan=0.0)
            ax.barh(y, v, xerr=[lo, hi], color=[col.get(s) for s in ranked["target"]], capsize=4, alpha=0.85)
            ax.set_yticks(y, [str(n) for n in ranked["name"]])
            for yi, vi, h in zip(y, v, hi, strict=True):
                ax.text(vi + h, yi, f"  {vi:.4g}", va="center", fontsize=8)
            ax.set_xlabel(f"USD per M {basis} tokens at the SLO (95% CI when repeated)")
            ax.set_xlim(0, float(np.nanmax(v + hi)) * 1.25)
        ax.set_title(f"Cost at the SLO - {workload}")
        _stamp(fig, d.emulated)
        return fig


def latency_distributions(d: ReportData, workload: str) -> Figure:
    """TTFT and TPOT per request, per target and load level, as box plots (warm-up and errors excluded)."""
    with _style():
        fig = Figure(figsize=(7.2, 3.6))
        axes = fig.subplots(1, 2)
        r = d.requests
        names, col = _names(d), colours(d)
        ranked = [
            t.slug for t in d.plan.targets if t.slug in set(d.tables.targets.loc[d.tables.targets["ranked"], "target"])
        ]
        if not r.empty:
            r = r[(r["workload"] == workload) & ~r["warmup"].astype(bool) & r["error_kind"].isna()].copy()
            out = r["output_tokens"].astype(float)
            r["ttft_ms"] = r["ttft"].astype(float) * 1000
            r["tpot_ms"] = ((r["e2e"] - r["ttft"]).astype(float) * 1000 / (out - 1)).where(out > 1)
        for ax, metric, label in ((axes[0], "ttft_ms", "TTFT (ms)"), (axes[1], "tpot_ms", "TPOT (ms)")):
            data, labels, colors = [], [], []
            for slug in ranked:
                sub = r[r["target"] == slug] if not r.empty else r
                for c, g in sub.groupby("concurrency") if not sub.empty else []:
                    vals = g[metric].dropna().to_numpy(float)
                    if vals.size:
                        data.append(vals)
                        labels.append(f"c{c}")
                        colors.append(col.get(slug))
            if data:
                bp = ax.boxplot(data, patch_artist=True, showfliers=True, flierprops={"markersize": 2})
                for patch, c in zip(bp["boxes"], colors, strict=True):
                    patch.set_facecolor(c)
                    patch.set_alpha(0.5)
                ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
                ax.set_xlabel("concurrency, per target")
            else:
                held = not r.empty and bool(len(r[~r["target"].isin(ranked)]))
                ax.text(
                    0.5,
                    0.5,
                    "no ranked target: requests of targets that did\nnot pass validation are left out"
                    if held
                    else "no request data",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
            ax.set_ylabel(label)
        handles = [Patch(facecolor=col[s], alpha=0.5, label=names[s]) for s in ranked]
        if handles:
            fig.legend(handles=handles, loc="upper right", fontsize=7, ncols=min(3, len(handles)))
        fig.suptitle(f"Latency distributions per request - {workload}", x=0.02, ha="left")
        _stamp(fig, d.emulated)
        return fig


def _session_points(d: ReportData, workload: str) -> pd.DataFrame:
    """The ranked targets' points of a session workload (those with a TTFT-by-context summary)."""
    p = d.tables.points
    if p.empty or "ttft_by_context" not in p:
        return pd.DataFrame()
    p = p[(p["workload"] == workload) & p["ranked"].astype(bool) & p["ttft_by_context"].notna()]
    return p


def _session_chart(
    d: ReportData,
    workload: str,
    draw: Callable[[Axes, pd.DataFrame, dict[str, str], dict[str, str]], None],
    *,
    height: float,
    xlabel: str,
    ylabel: str,
    title: str,
    legend_size: int,
) -> Figure | None:
    """A session workload's chart: ``draw(ax, points, colours, names)`` plots its lines over load or
    context on a log-2 x axis, framed the same way for every session chart; None for request workloads."""
    p = _session_points(d, workload)
    if p.empty:
        return None
    with _style():
        fig = Figure(figsize=(6.4, height))
        ax = fig.add_subplot()
        draw(ax, p, colours(d), _names(d))
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} - {workload}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_size, loc="best")
        _stamp(fig, d.emulated)
        return fig


def ttft_vs_context(d: ReportData, workload: str) -> Figure | None:
    """Median and p99 TTFT per prompt-length bin, one line per target and concurrent-session level
    (bins pooled over repeats by their request-weighted medians); None for request workloads."""

    def draw(ax: Axes, p: pd.DataFrame, col: dict[str, str], names: dict[str, str]) -> None:
        for (slug, c), g in p.groupby(["target", "concurrency"], sort=True):
            bins: dict[float, list[tuple[int, float, float]]] = {}
            for doc in g["ttft_by_context"]:
                for b in json.loads(doc):
                    hi = b["hi"] if b["hi"] is not None else 2 * b["lo"]
                    x = float(np.sqrt(max(b["lo"], hi / 2) * hi))  # geometric middle of the bin
                    bins.setdefault(x, []).append((b["n"], b["p50_ms"], b["p99_ms"]))
            xs = sorted(bins)
            if not xs:
                continue
            p50 = [np.average([v[1] for v in bins[x]], weights=[v[0] for v in bins[x]]) for x in xs]
            p99 = [max(v[2] for v in bins[x]) for x in xs]
            levels = sorted(p[p["target"] == slug]["concurrency"].unique())
            alpha = 0.4 + 0.6 * (levels.index(c) + 1) / len(levels)
            ax.plot(
                xs,
                p50,
                marker="o",
                ms=3,
                color=col.get(slug),
                alpha=alpha,
                label=f"{names.get(slug, slug)} {c} sessions p50",
            )
            ax.plot(xs, p99, ls=":", color=col.get(slug), alpha=alpha)

    return _session_chart(
        d,
        workload,
        draw,
        height=3.8,
        xlabel="context (prompt tokens of the turn)",
        ylabel="TTFT (ms): p50 solid, p99 dotted",
        title="TTFT vs context length",
        legend_size=6,
    )


def hit_rate_vs_sessions(d: ReportData, workload: str) -> Figure | None:
    """The server's prefix-cache hit rate (its own counters) per concurrent-session level, per target,
    beside the rate the trace predicts (dashed); None for request workloads."""

    def draw(ax: Axes, p: pd.DataFrame, col: dict[str, str], names: dict[str, str]) -> None:
        for slug, g in p.groupby("target", sort=True):
            lv = g.groupby("concurrency").agg(
                measured=("prefix_cache_hit_rate", lambda s: pd.to_numeric(s, errors="coerce").mean()),
                expected=("prefix_cache_hit_rate_expected", lambda s: pd.to_numeric(s, errors="coerce").mean()),
            )
            x = lv.index.to_numpy(float)
            if lv["measured"].notna().any():
                ax.plot(
                    x, lv["measured"] * 100, marker="o", color=col.get(slug), label=f"{names.get(slug, slug)} (server)"
                )
            if lv["expected"].notna().any():
                ax.plot(
                    x,
                    lv["expected"] * 100,
                    ls="--",
                    color=col.get(slug),
                    alpha=0.6,
                    label=f"{names.get(slug, slug)} (trace)",
                )
        if not ax.get_legend_handles_labels()[0]:
            ax.text(
                0.5,
                0.5,
                "the servers export no prefix-cache counters",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        ax.set_ylim(0, 100)

    return _session_chart(
        d,
        workload,
        draw,
        height=3.4,
        xlabel="concurrent sessions (open loop: session arrivals, milli-sessions/s)",
        ylabel="prefix-cache hit rate (%)",
        title="Prefix-cache hit rate vs load",
        legend_size=7,
    )


def trend(d: ReportData, workload: str) -> Figure | None:
    t = d.trend
    if t.empty:
        return None
    t = t[t["workload"] == workload]
    if t["run_id"].nunique() < 2:
        return None
    with _style():
        fig = Figure(figsize=(6.4, 3.2))
        ax = fig.add_subplot()
        gpu = {t.name: t.gpu.name for t in d.plan.targets}  # a target no longer in the plan takes a spare colour
        groups = list(t.groupby("target", sort=False))
        col = by_kind((str(name), gpu.get(str(name))) for name, _ in groups)
        for name, g in groups:
            ax.plot(g["started"], g["usd_per_m"], marker="o", color=col[str(name)], label=str(name))
        ax.set_ylabel(f"USD per M {d.basis} tokens at SLO")
        ax.set_title(f"Cost at the SLO across runs of {d.plan.name} - {workload}")
        ax.legend(fontsize=7)
        fig.autofmt_xdate()
        _stamp(fig, bool(t["emulated"].any()))
        return fig
