"""Uncertainty: bootstrap intervals and a per-metric verdict between two targets.

One method everywhere: ``scipy.stats.bootstrap``, percentile interval (the ``level`` central
quantiles of the statistic over ``N_BOOT`` resamples with replacement). Percentile rather than BCa
because BCa's jackknife is quadratic in the sample size and latency samples hold thousands of
requests; percentile intervals stay inside the observed range, which is the honest answer for a
handful of repeats.

Latency percentiles are bootstrapped over requests (pooled over repeats); throughput over repeats
when there are at least two, else over requests with the point's duration held fixed (which
understates the run-to-run spread: the report should say how many repeats there were).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as _scipy_stats

from bakeoff.bench.metrics.summary import _rows, request_tpot

N_BOOT = 2000
_BATCH = 250  # resamples per vectorised call: bounds memory at _BATCH x sample size

Statistic = Callable[..., Any]
"""A vectorised statistic: ``f(values, axis=-1)`` reduces along ``axis`` (``np.mean``, ``percentile(q)``)."""


def percentile(q: float) -> Statistic:
    """The q-th percentile as a vectorised statistic."""

    def stat(values: np.ndarray, axis: int = -1) -> Any:
        return np.percentile(values, q, axis=axis)

    stat.__name__ = f"p{q:g}"
    return stat


STATS: dict[str, Statistic] = {"mean": np.mean, "p50": percentile(50), "p90": percentile(90), "p99": percentile(99)}

NAN3 = (float("nan"),) * 3


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray([v for v in values if v is not None], dtype=float)
    finite: np.ndarray = a[np.isfinite(a)]
    return finite


def _interval(
    samples: tuple[np.ndarray, ...], statistic: Statistic, level: float, seed: int, n_resamples: int
) -> tuple[float, float]:
    res = _scipy_stats.bootstrap(
        samples,
        statistic,
        n_resamples=n_resamples,
        batch=_BATCH,
        vectorized=True,
        paired=False,
        axis=-1,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    statistic: Statistic = np.mean,
    *,
    level: float = 0.95,
    seed: int = 0,
    n_resamples: int = N_BOOT,
) -> tuple[float, float, float]:
    """(estimate, low, high): ``statistic`` of the finite values and its percentile-bootstrap interval.

    No values: a NaN triple. One value: the value with NaN bounds (one sample has no spread to
    resample). All values equal: the degenerate interval (v, v, v), without resampling.
    """
    a = _finite(values)
    if a.size == 0:
        return NAN3
    est = float(statistic(a))
    if a.size == 1:
        return est, float("nan"), float("nan")
    if np.all(a == a[0]):
        return est, est, est
    lo, hi = _interval((a,), statistic, level, seed, n_resamples)
    return est, lo, hi


def difference_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    statistic: Statistic = np.mean,
    *,
    level: float = 0.95,
    seed: int = 0,
    n_resamples: int = N_BOOT,
) -> tuple[float, float, float]:
    """(statistic(b) - statistic(a), low, high): the two samples resampled independently.

    Fewer than two finite values on either side: a NaN triple. Both samples constant: degenerate.
    """
    xa, xb = _finite(a), _finite(b)
    if xa.size < 2 or xb.size < 2:
        return NAN3
    est = float(statistic(xb) - statistic(xa))
    if np.all(xa == xa[0]) and np.all(xb == xb[0]):
        return est, est, est

    def diff(sa: np.ndarray, sb: np.ndarray, axis: int = -1) -> Any:
        return statistic(sb, axis=axis) - statistic(sa, axis=axis)

    lo, hi = _interval((xa, xb), diff, level, seed, n_resamples)
    return est, lo, hi


def _measured_ok(requests: pd.DataFrame) -> pd.DataFrame:
    df = requests[~requests["warmup"].astype(bool)]
    return df[df["error_kind"].isna()]


def latency_values(requests: pd.DataFrame, metric: str) -> np.ndarray:
    """Per-request seconds for ttft, tpot or e2e (ok, measured requests only)."""
    df = _measured_ok(requests)
    if metric == "tpot":
        vals = [request_tpot(r) for r in _rows(df)]
        return np.asarray([v for v in vals if v is not None], dtype=float)
    values: np.ndarray = df[metric].astype(float).dropna().to_numpy(dtype=float)
    return values


def throughput_values(points: pd.DataFrame, requests: pd.DataFrame, column: str = "output_tps_per_gpu") -> np.ndarray:
    """Values whose mean is the point's throughput, to bootstrap with ``np.mean``.

    With two or more repeats, the repeats' throughputs. With one, each measured request's share
    of it at the point's fixed duration (its tokens x n / (duration x gpus)), so resampling the
    requests resamples the token total.
    """
    vals: np.ndarray = points[column].dropna().to_numpy(dtype=float)
    if len(vals) >= 2:
        return vals
    df = _measured_ok(requests)
    if df.empty or points.empty:
        return np.array([], dtype=float)
    tok = df["output_tokens"].to_numpy(dtype=float)
    if column.startswith("total"):
        tok = tok + df["prompt_tokens"].fillna(df["requested_input_len"]).to_numpy(dtype=float)
    scale = float(points.iloc[0][column]) / tok.sum() if tok.sum() else 0.0  # = 1 / (duration x gpus)
    shares: np.ndarray = tok * scale * len(tok)
    return shares


def point_intervals(points: pd.DataFrame, requests: pd.DataFrame, *, seed: int = 0) -> dict[str, Any]:
    """95% intervals for one point (all its repeats): throughput per GPU, TTFT/TPOT p50 and p99 (ms)."""
    out: dict[str, Any] = {"repeats": int(len(points))}
    for col in ("output_tps_per_gpu", "total_tps_per_gpu"):
        _, lo, hi = bootstrap_ci(throughput_values(points, requests, col), np.mean, seed=seed)
        out[col] = (float(points[col].mean()), lo, hi)
    for metric in ("ttft", "tpot"):
        v = latency_values(requests, metric) * 1e3
        for stat in ("p50", "p99"):
            out[f"{metric}_ms_{stat}"] = bootstrap_ci(v, STATS[stat], seed=seed)
    return out


def verdict(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    metric: str,
    higher_is_better: bool,
    statistic: Statistic = np.mean,
    names: tuple[str, str] = ("a", "b"),
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """``statistic(b) - statistic(a)`` with its bootstrap interval (``difference_ci``); a winner
    only when the interval excludes zero."""
    diff, lo, hi = difference_ci(a, b, statistic, level=level, seed=seed)
    excl = bool(lo > 0 or hi < 0)  # False for NaN bounds
    better = None
    if excl:
        better = names[1] if (lo > 0) == higher_is_better else names[0]
    return {
        "metric": metric,
        "a": names[0],
        "b": names[1],
        "diff": diff,
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
    names: tuple[str, str] = ("a", "b"),
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Verdicts per metric between two targets at one (workload, load) point, repeats pooled:
    throughput per GPU (higher is better), TTFT and TPOT p50/p99 (lower is better)."""
    rows = []
    for col in ("output_tps_per_gpu", "total_tps_per_gpu"):
        a, b = throughput_values(points_a, requests_a, col), throughput_values(points_b, requests_b, col)
        rows.append(
            {
                **verdict(a, b, metric=col, higher_is_better=True, names=names, seed=seed),
                "value_a": float(points_a[col].mean()),
                "value_b": float(points_b[col].mean()),
            }
        )
    for metric in ("ttft", "tpot"):
        va, vb = latency_values(requests_a, metric) * 1e3, latency_values(requests_b, metric) * 1e3
        for stat in ("p50", "p99"):
            f = STATS[stat]
            rows.append(
                {
                    **verdict(
                        va,
                        vb,
                        metric=f"{metric}_ms_{stat}",
                        higher_is_better=False,
                        statistic=f,
                        names=names,
                        seed=seed,
                    ),
                    "value_a": float(f(va)) if va.size else float("nan"),
                    "value_b": float(f(vb)) if vb.size else float("nan"),
                }
            )
    return rows
