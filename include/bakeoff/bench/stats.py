"""Uncertainty: bootstrap 95% intervals and a per-metric verdict between two targets.

Latency percentiles are bootstrapped over requests (pooled over repeats); throughput over repeats
when there are at least two, else over requests with the point's duration held fixed (which
understates the run-to-run spread: the report should say how many repeats there were).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from bakeoff.bench.metrics import _rows, request_tpot

N_BOOT = 2000

STATS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda a: float(np.mean(a)),
    "p50": lambda a: float(np.percentile(a, 50)),
    "p90": lambda a: float(np.percentile(a, 90)),
    "p99": lambda a: float(np.percentile(a, 99)),
}


def _boot(values: np.ndarray, stat: str, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    idx = rng.integers(0, len(values), (n_boot, len(values)))
    samples = values[idx]
    if stat == "mean":
        return samples.mean(axis=1)
    return np.percentile(samples, float(stat[1:]), axis=1)


def bootstrap_ci(
    values: Sequence[float], stat: str = "mean", *, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(estimate, low, high) of ``stat`` (mean, p50, p90, p99) with a percentile-bootstrap interval."""
    a = np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=float)
    if a.size == 0:
        return (float("nan"),) * 3
    est = STATS[stat](a)
    if a.size == 1:
        return est, float("nan"), float("nan")
    b = _boot(a, stat, np.random.default_rng(seed), n_boot)
    q = (1 - level) / 2
    return est, float(np.quantile(b, q)), float(np.quantile(b, 1 - q))


def _measured_ok(requests: pd.DataFrame) -> pd.DataFrame:
    df = requests[~requests["warmup"].astype(bool)]
    return df[df["error_kind"].isna()]


def latency_values(requests: pd.DataFrame, metric: str) -> np.ndarray:
    """Per-request seconds for ttft, tpot or e2e (ok, measured requests only)."""
    df = _measured_ok(requests)
    if metric == "tpot":
        vals = [request_tpot(r) for r in _rows(df)]
        return np.asarray([v for v in vals if v is not None], dtype=float)
    return df[metric].astype(float).dropna().to_numpy(dtype=float)


def throughput_samples(
    points: pd.DataFrame,
    requests: pd.DataFrame,
    column: str = "output_tps_per_gpu",
    *,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> np.ndarray:
    """Bootstrap distribution of a point's throughput: over repeats (>= 2), else over requests."""
    rng = np.random.default_rng(seed)
    vals = points[column].dropna().to_numpy(dtype=float)
    if len(vals) >= 2:
        return vals[rng.integers(0, len(vals), (n_boot, len(vals)))].mean(axis=1)
    df = _measured_ok(requests)
    if df.empty or points.empty:
        return np.full(n_boot, np.nan)
    p = points.iloc[0]
    tok = df["output_tokens"].to_numpy(dtype=float)
    if column.startswith("total"):
        tok = tok + df["prompt_tokens"].fillna(df["requested_input_len"]).to_numpy(dtype=float)
    scale = float(p[column]) / tok.sum() if tok.sum() else 0.0  # = 1 / (duration x gpus)
    return tok[rng.integers(0, len(tok), (n_boot, len(tok)))].sum(axis=1) * scale


def point_intervals(points: pd.DataFrame, requests: pd.DataFrame, *, seed: int = 0) -> dict[str, Any]:
    """95% intervals for one point (all its repeats): throughput per GPU, TTFT/TPOT p50 and p99 (ms)."""
    out: dict[str, Any] = {"repeats": int(len(points))}
    for col in ("output_tps_per_gpu", "total_tps_per_gpu"):
        b = throughput_samples(points, requests, col, seed=seed)
        out[col] = (float(points[col].mean()), float(np.nanquantile(b, 0.025)), float(np.nanquantile(b, 0.975)))
    for metric in ("ttft", "tpot"):
        v = latency_values(requests, metric) * 1e3
        for stat in ("p50", "p99"):
            out[f"{metric}_ms_{stat}"] = bootstrap_ci(v, stat, seed=seed)
    return out


def verdict(
    a: np.ndarray, b: np.ndarray, *, metric: str, higher_is_better: bool, names=("a", "b"), level: float = 0.95
) -> dict[str, Any]:
    """Difference b - a of two bootstrap distributions (same length, independent draws) with its
    interval; a winner only when the interval excludes zero."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return {
            "metric": metric,
            "diff": float("nan"),
            "ci_low": float("nan"),
            "ci_high": float("nan"),
            "excludes_zero": False,
            "better": None,
        }
    q = (1 - level) / 2
    lo, hi = float(np.quantile(d, q)), float(np.quantile(d, 1 - q))
    excl = lo > 0 or hi < 0
    better = None
    if excl:
        b_larger = lo > 0
        better = names[1] if b_larger == higher_is_better else names[0]
    return {
        "metric": metric,
        "a": names[0],
        "b": names[1],
        "diff": float(np.median(d)),
        "ci_low": lo,
        "ci_high": hi,
        "excludes_zero": excl,
        "better": better,
    }


def compare_targets(
    points_a: pd.DataFrame,
    requests_a: pd.DataFrame,
    points_b: pd.DataFrame,
    requests_b: pd.DataFrame,
    *,
    names=("a", "b"),
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Verdicts per metric between two targets at one (workload, load) point, repeats pooled:
    throughput per GPU (higher is better), TTFT and TPOT p50/p99 (lower is better)."""
    rows = []
    for col in ("output_tps_per_gpu", "total_tps_per_gpu"):
        a = throughput_samples(points_a, requests_a, col, seed=seed)
        b = throughput_samples(points_b, requests_b, col, seed=seed + 1)
        rows.append(
            {
                **verdict(a, b, metric=col, higher_is_better=True, names=names),
                "value_a": float(points_a[col].mean()),
                "value_b": float(points_b[col].mean()),
            }
        )
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    for metric in ("ttft", "tpot"):
        va, vb = latency_values(requests_a, metric) * 1e3, latency_values(requests_b, metric) * 1e3
        for stat in ("p50", "p99"):
            name = f"{metric}_ms_{stat}"
            if va.size < 2 or vb.size < 2:
                rows.append(
                    {
                        **verdict(np.array([]), np.array([]), metric=name, higher_is_better=False, names=names),
                        "value_a": float("nan"),
                        "value_b": float("nan"),
                    }
                )
                continue
            ba, bb = _boot(va, stat, rng_a, N_BOOT), _boot(vb, stat, rng_b, N_BOOT)
            rows.append(
                {
                    **verdict(ba, bb, metric=name, higher_is_better=False, names=names),
                    "value_a": STATS[stat](va),
                    "value_b": STATS[stat](vb),
                }
            )
    return rows
