"""Per-point summary with the project's metric definitions (vLLM/SGLang/MLPerf naming; docs/metrics.md).

- TTFT: send -> first chunk carrying a generated token (reasoning included); TTFA: first answer text.
- TPOT: per request (E2E - TTFT) / (output tokens - 1); requests with <= 1 output token excluded.
- ITL: gaps between consecutive token chunks (every chunk with choices that carries a token, empty
  text included: vLLM streams byte-fallback tokens as ""), pooled over requests. With multi-token
  chunks a gap is not a per-token latency, so ITL and TPOT are never mixed.
- E2E: send -> last byte. Duration: first measured send -> last measured response (warm-up excluded).
- Throughput per GPU: tokens / duration / GPUs serving the model (target.gpus_used); input tokens
  from usage, else the requested prompt length.
- Input length: requested (what bakeoff sized the prompt to, in the served model's tokens) and
  measured (usage prompt_tokens) means; input_len_error = sum(measured) / sum(requested) - 1 over
  the requests with usage.
- Send lag (open loop): actual send - scheduled send per request; p50/p99/max. TTFT from schedule:
  send lag + TTFT, the latency a user arriving on schedule saw (coordinated omission made visible).
- Interactivity: 1000 / TPOT (p50 by default; Slo.interactivity_stat), tokens/s per user.
- Goodput: requests meeting every per-request SLO per second; good_fraction = good / (succeeded +
  failed). A request's TTFT is held to ttft_p99_ms and its TPOT to tpot_p99_ms (tpot_p50_ms when no
  p99 bound is set). meets_slo holds when the point's statistics meet every SLO that is set (and the
  error rate is within max_error_rate when given).
Statistics are mean, p50, p90, p99 (linear interpolation, as numpy and vLLM compute them).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pandas as pd

from bakeoff.bench.records import POINT_COLUMNS, POINT_KEY, SESSION_COLUMNS, RequestRecord

if TYPE_CHECKING:
    from bakeoff.plan.settings import Slo

NAN = float("nan")

# What summarize reads: records, row dicts, or a per-request DataFrame read back from Parquet.
Records: TypeAlias = Iterable[RequestRecord | Mapping[str, Any]] | pd.DataFrame


def _rows(records: Records) -> list[dict[str, Any]]:
    """Records, row dicts or a per-request DataFrame (as read back from Parquet, where missing
    values are pd.NA) as plain dicts with None for missing."""
    if isinstance(records, pd.DataFrame):
        return [{k: (None if v is pd.NA else v) for k, v in row.items()} for row in records.to_dict("records")]
    return [r.to_row() if isinstance(r, RequestRecord) else dict(r) for r in records]


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def stats_ms(values: Iterable[float | None], prefix: str) -> dict[str, float]:
    """mean/p50/p90/p99 in milliseconds of values given in seconds, missing ones skipped (NaN when empty)."""
    a = np.asarray([v for v in values if v is not None], dtype=float) * 1e3
    if a.size == 0:
        return {f"{prefix}_mean": NAN, f"{prefix}_p50": NAN, f"{prefix}_p90": NAN, f"{prefix}_p99": NAN}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        f"{prefix}_mean": float(a.mean()),
        f"{prefix}_p50": float(p50),
        f"{prefix}_p90": float(p90),
        f"{prefix}_p99": float(p99),
    }


def request_tpot(row: dict[str, Any]) -> float | None:
    """Seconds per output token after the first; None for <= 1-token outputs or failures."""
    out, e2e, ttft = _num(row.get("output_tokens")), _num(row.get("e2e")), _num(row.get("ttft"))
    if row.get("error_kind") or out is None or out <= 1 or e2e is None or ttft is None:
        return None
    return (e2e - ttft) / (out - 1)


def chunk_gaps(offsets: Iterable[float] | None) -> list[float]:
    offs = list(offsets) if offsets is not None else []
    return [b - a for a, b in pairwise(offs)]


def count_method(rows: list[dict[str, Any]]) -> str | None:
    """How a point's output tokens were counted, so a figure from the client's own count is never
    read as the server's: "usage", "client-chunks", "client-words", or several joined by "+"."""
    methods = {
        "usage" if r.get("tokens_source") != "client" else f"client-{r.get('client_count_method') or 'chunks'}"
        for r in rows
    }
    return "+".join(sorted(methods)) or None


def input_lengths(ok: list[dict[str, Any]], *, sized: bool) -> dict[str, float]:
    """Mean requested and measured (usage prompt_tokens) input length of the succeeded requests, and
    measured / requested - 1 over the requests that report usage (NaN when none does, or when the
    prompts are the user's, whose requested length is only a word count)."""
    asked = [float(r.get("requested_input_len") or 0) for r in ok]
    both = [(float(r.get("requested_input_len") or 0), _num(r.get("prompt_tokens"))) for r in ok]
    pairs = [(a, m) for a, m in both if m is not None and a > 0]
    measured = [m for _, m in pairs]
    err = sum(measured) / sum(a for a, _ in pairs) - 1.0 if sized and pairs else NAN
    return {
        "input_len_requested_mean": float(np.mean(asked)) if asked else NAN,
        "input_len_measured_mean": float(np.mean(measured)) if measured else NAN,
        "input_len_error": err,
    }


def send_lag(row: dict[str, Any]) -> float | None:
    """Actual send - scheduled send (s) of an open-loop request; None in closed loop."""
    lag = _num(row.get("send_lag"))
    if lag is None:
        sched, start = _num(row.get("scheduled_offset")), _num(row.get("start_offset"))
        lag = start - sched if sched is not None and start is not None else None
    return lag


def open_loop_figures(measured: list[dict[str, Any]], ok: list[dict[str, Any]]) -> dict[str, float]:
    """Send lag p50/p99/max over the measured requests (from the records, so worker processes pool
    correctly) and TTFT / E2E from the scheduled send (= send lag + TTFT / E2E); empty in closed
    loop, NaN."""
    lags = [x for x in (send_lag(r) for r in measured) if x is not None]
    if not lags:
        return {
            k: NAN
            for k in (
                "send_lag_ms_p50",
                "send_lag_ms_p99",
                "send_lag_ms_max",
                "ttft_from_schedule_ms_p50",
                "ttft_from_schedule_ms_p99",
                "e2e_from_schedule_ms_p99",
            )
        }
    a = np.asarray(lags) * 1e3
    out = {
        "send_lag_ms_p50": float(np.percentile(a, 50)),
        "send_lag_ms_p99": float(np.percentile(a, 99)),
        "send_lag_ms_max": float(a.max()),
    }

    def from_schedule(col: str) -> list[float]:
        pairs = ((send_lag(r), _num(r.get(col))) for r in ok)
        return [lag + v for lag, v in pairs if lag is not None and v is not None]

    ttft = stats_ms(from_schedule("ttft"), "ttft")
    out["ttft_from_schedule_ms_p50"], out["ttft_from_schedule_ms_p99"] = ttft["ttft_p50"], ttft["ttft_p99"]
    out["e2e_from_schedule_ms_p99"] = stats_ms(from_schedule("e2e"), "e2e")["e2e_p99"]
    return out


def _input_tokens(row: dict[str, Any]) -> int:
    """A request's input tokens: usage prompt_tokens, else the requested prompt length."""
    measured = _num(row.get("prompt_tokens"))
    return int(measured if measured is not None else row.get("requested_input_len") or 0)


def request_is_good(row: dict[str, Any], slo: Slo | None) -> bool:
    if row.get("error_kind"):
        return False
    ttft = _num(row.get("ttft"))
    if slo is not None and slo.ttft_p99_ms is not None and (ttft is None or ttft * 1e3 > slo.ttft_p99_ms):
        return False
    limit = None if slo is None else (slo.tpot_p99_ms or slo.tpot_p50_ms)
    tpot = request_tpot(row)
    if limit is not None and tpot is not None and tpot * 1e3 > limit:
        return False
    return True


def point_meets_slo(summary: dict[str, Any], slo: Slo | None, max_error_rate: float | None = None) -> bool:
    if not summary.get("completed"):
        return False
    if max_error_rate is not None and summary["error_rate"] > max_error_rate:
        return False
    if slo is None:
        return True
    for bound, col in (
        (slo.ttft_p99_ms, "ttft_ms_p99"),
        (slo.tpot_p50_ms, "tpot_ms_p50"),
        (slo.tpot_p99_ms, "tpot_ms_p99"),
    ):
        if bound is None:
            continue
        v = _num(summary.get(col))
        if v is None or v > bound:
            return False
    return True


# Prompt-length bin edges (tokens) of the TTFT-by-context summaries: doubling from 1k to 1M.
CONTEXT_EDGES = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
# Output-token position bin edges of TPOT by position: position p is the p-th output token.
POSITION_EDGES = (2, 17, 65, 257, 1025, 4097, 16385)


def binned_ms(pairs: Iterable[tuple[float, float]], edges: tuple[int, ...]) -> str:
    """JSON list of {lo, hi, n, p50_ms, p99_ms} of (x, seconds) pairs binned on x in [lo, hi);
    the last bin is open-ended (hi null); empty bins are left out."""
    bounds = [*edges, None]
    bins: dict[int, list[float]] = {}
    for x, v in pairs:
        i = max(0, int(np.searchsorted(edges, x, side="right")) - 1)
        bins.setdefault(i, []).append(v)
    out = []
    for i in sorted(bins):
        a = np.asarray(bins[i], dtype=float) * 1e3
        p50, p99 = np.percentile(a, [50, 99])
        out.append({"lo": edges[i], "hi": bounds[i + 1], "n": int(a.size), "p50_ms": float(p50), "p99_ms": float(p99)})
    return json.dumps(out)


def tpot_by_position(ok: list[dict[str, Any]]) -> str:
    """Token gaps binned by the output-token position they end at (chunk k ends token k + 1 when a
    chunk carries one token), pooled over requests: whether decoding slows as the answer grows."""
    pairs = [(float(k + 2), g) for r in ok for k, g in enumerate(chunk_gaps(r.get("chunk_offsets")))]
    return binned_ms(pairs, POSITION_EDGES)


def _slope_ms_per_1k(pairs: list[tuple[float, float]]) -> float:
    """Least-squares slope of TTFT (ms) on uncached tokens, per 1,000 tokens; NaN with < 2 distinct x."""
    if len(pairs) < 2 or len({x for x, _ in pairs}) < 2:
        return NAN
    x = np.asarray([p[0] for p in pairs], dtype=float)
    y = np.asarray([p[1] for p in pairs], dtype=float) * 1e3
    return float(np.polyfit(x, y, 1)[0] * 1000.0)


def session_figures(measured: list[dict[str, Any]], slo: Slo | None, duration: float) -> dict[str, Any]:
    """Session columns of a point from its measured turn records; NaN / None when the point is not a
    session workload. A session (a top-level one with its subagents) is completed when every turn of
    every one of them was sent and answered; cut when the point's time ended it; good when
    completed and every turn met the per-request SLO (request_is_good)."""
    turns = [r for r in measured if r.get("session_id") is not None]
    if not turns:
        return {k: (None if k.startswith("ttft_by") else NAN) for k in SESSION_COLUMNS}
    by_root: dict[str, list[dict[str, Any]]] = {}
    for r in turns:
        by_root.setdefault(str(r.get("session_root") or r["session_id"]), []).append(r)
    completed = good = cut = 0
    for rows in by_root.values():
        per_session: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            per_session.setdefault(str(r["session_id"]), []).append(r)
        whole = all(len(v) == int(v[0].get("session_turns") or 0) for v in per_session.values())
        if not whole:
            cut += 1
            continue
        if all(not r.get("error_kind") for r in rows):
            completed += 1
            good += all(request_is_good(r, slo) for r in rows)
    ok = [r for r in turns if not r.get("error_kind")]
    hours = duration / 3600.0 if duration and duration > 0 else NAN
    ttft_ctx = [(float(r.get("context_tokens") or 0), float(r["ttft"])) for r in ok if _num(r.get("ttft")) is not None]
    ttft_unc = [
        (float(r["uncached_tokens_expected"]), float(r["ttft"]))
        for r in ok
        if _num(r.get("ttft")) is not None and _num(r.get("uncached_tokens_expected")) is not None
    ]
    return {
        "sessions_completed": completed,
        "sessions_cut": cut,
        "session_goodput_sps": good / duration if duration and duration > 0 else NAN,
        "sessions_per_hour": completed / hours if hours == hours else NAN,
        "turns_per_hour": len(ok) / hours if hours == hours else NAN,
        "turns_per_session_mean": len(turns) / len(by_root),
        "ttft_ms_per_1k_uncached": _slope_ms_per_1k(ttft_unc),
        "ttft_by_context": binned_ms(ttft_ctx, CONTEXT_EDGES),
        "ttft_by_uncached": binned_ms(ttft_unc, CONTEXT_EDGES),
    }


def summarize(
    records: Records,
    *,
    gpus: int,
    slo: Slo | None = None,
    emulated: bool,
    max_error_rate: float | None = None,
    load_mode: str = "concurrency",
    rate: float | None = None,
    client: dict[str, Any] | None = None,
    prompts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row of POINT_COLUMNS from one point's request records (warm-up rows are dropped here).

    ``client`` carries the loop monitor's figures (loop_lag_ms_p99, loop_stall_ms_max,
    client_cpu_pct, client_bound, client_stalled) when the point was measured under it; open-loop
    send lags are taken from the records themselves. ``prompts`` says how the
    prompts were made: prompt_seed, prompt_sizing, input_len_tolerance and ``sized`` (bakeoff wrote
    them, so their measured length is held to the requested one).
    """
    if gpus < 1:
        raise ValueError(f"gpus: must be >= 1 (the target's tensor_parallel x pipeline_parallel), got {gpus}")
    rows = _rows(records)
    if not rows:
        raise ValueError("records: a point needs at least one request record")
    out: dict[str, Any] = {k: rows[0].get(k) for k in POINT_KEY}
    measured = [r for r in rows if not r.get("warmup")]
    ok = [r for r in measured if not r.get("error_kind")]
    n, completed = len(measured), len(ok)
    starts = [s for s in (_num(r.get("start_offset")) for r in measured) if s is not None]
    ends = []
    for r in measured:
        s, el = _num(r.get("start_offset")), _num(r.get("elapsed"))
        if el is None:
            el = _num(r.get("e2e"))
        if s is not None and el is not None:
            ends.append(s + el)
    duration = (max(ends) - min(starts)) if starts and ends else NAN
    in_tok = sum(_input_tokens(r) for r in ok)
    out_tok = sum(int(_num(r.get("output_tokens")) or 0) for r in ok)
    per_s = (lambda x: x / duration) if duration and duration > 0 else (lambda x: NAN)

    out.update(
        gpus=int(gpus),
        emulated=bool(emulated),
        completed=completed,
        failed=n - completed,
        error_rate=(n - completed) / n if n else 1.0,
        duration_s=duration,
        request_throughput=per_s(completed),
        input_tps=per_s(in_tok),
        output_tps=per_s(out_tok),
        total_tps=per_s(in_tok + out_tok),
    )
    out["output_tps_per_gpu"] = out["output_tps"] / gpus
    out["total_tps_per_gpu"] = out["total_tps"] / gpus

    tpots = [t for t in (request_tpot(r) for r in ok) if t is not None]
    gaps = [g for r in ok for g in chunk_gaps(r.get("chunk_offsets"))]
    out.update(stats_ms((r.get("ttft") for r in ok), "ttft_ms"))
    out.update(stats_ms(tpots, "tpot_ms"))
    out.update(stats_ms(gaps, "itl_ms"))
    out.update(stats_ms((r.get("e2e") for r in ok), "e2e_ms"))
    stat = getattr(slo, "interactivity_stat", "p50") if slo is not None else "p50"
    tpot_stat = out[f"tpot_ms_{stat}"]
    out["interactivity"] = 1000.0 / tpot_stat if tpot_stat and not math.isnan(tpot_stat) and tpot_stat > 0 else NAN
    good = sum(1 for r in measured if request_is_good(r, slo))
    out["goodput_rps"] = per_s(good)
    out["good_fraction"] = good / n if n else 0.0
    out["meets_slo"] = point_meets_slo(out, slo, max_error_rate)

    out["load_mode"] = load_mode
    out["rate"] = float(rate) if rate is not None else NAN
    out.update(stats_ms((r.get("ttfa") for r in ok), "ttfa_ms"))
    chunks = sum(int(r.get("chunks") or 0) for r in ok)
    out["tokens_per_chunk"] = out_tok / chunks if chunks else NAN
    out["token_mismatches"] = sum(1 for r in ok if r.get("token_mismatch"))
    out["usage_missing"] = sum(1 for r in ok if r.get("tokens_source") == "client")
    out["token_count_method"] = count_method(ok)
    out["errors_by_kind"] = json.dumps(
        dict(sorted(Counter(r["error_kind"] for r in measured if r.get("error_kind")).items()))
    )
    out.update(input_lengths(ok, sized=bool((prompts or {}).get("sized", True))))
    for k in ("prompt_seed", "prompt_sizing", "input_len_tolerance"):
        out[k] = (prompts or {}).get(k)
    client = client or {}
    for k in (
        "send_lag_ms_p50",
        "send_lag_ms_p99",
        "send_lag_ms_max",
        "loop_lag_ms_p99",
        "loop_stall_ms_max",
        "client_cpu_pct",
    ):
        out[k] = float(client[k]) if client.get(k) is not None else NAN
    out.update(open_loop_figures(measured, ok))
    # with nothing measured there is no pace the client could have set
    out["client_bound"] = bool(client.get("client_bound", False)) and completed > 0
    out["client_stalled"] = bool(client.get("client_stalled", False)) and completed > 0
    out["tpot_by_position"] = tpot_by_position(ok)
    out.update(session_figures(measured, slo, duration))
    return {k: out.get(k) for k in POINT_COLUMNS}
