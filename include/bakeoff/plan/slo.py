"""The buyer's SLA as one value: percentile bounds on TTFT, TPOT, ITL and E2E, and a per-request SLO
with the share of requests that must meet it (goodput, as vLLM's ``bench serve --goodput``, GuideLLM
and MLPerf's per-query constraints define it).

A plan's ``slo:`` is one ``Slo``; a tier of named SLOs holds one each. Everything that judges a point
(bench's summary, the SLA search, the twin's prediction) asks the ``Slo`` itself, and the report and
the dashboard print it with ``in_words``, so there is one reading of the SLA. The judging side takes
plain figures (a point's summary row, ``RequestTimes``) so the plan package needs nothing from bench.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

from pydantic import Field, model_validator

from bakeoff.core.numbers import as_float
from bakeoff.plan.fields import Strict

# metric key -> what the buyer calls it; percentiles a bound may name.
METRICS: dict[str, str] = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}
PERCENTILES: tuple[str, ...] = ("p50", "p90", "p95", "p99")
# A first token or a whole answer may take minutes; one token's gap more than a minute is a fault.
_MAX_MS = {"ttft": 600_000.0, "tpot": 60_000.0, "itl": 60_000.0, "e2e": 3_600_000.0}


def _bound(metric: str) -> Any:
    return Field(None, gt=0, le=_MAX_MS[metric])


def _known_keys(model: type[Strict], data: object) -> Any:
    """An unknown key names every valid one, since the fix is usually a spelling."""
    if isinstance(data, Mapping):
        unknown = sorted(str(k) for k in data if k not in model.model_fields)
        if unknown:
            raise ValueError(f"unknown key {', '.join(unknown)}; valid keys: {', '.join(model.model_fields)}")
    return data


class RequestTimes(NamedTuple):
    """One request's figures in milliseconds, None where not measured (a failed request, an output of
    one token has no TPOT)."""

    ok: bool
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None


class PerRequestSlo(Strict):
    """Bounds every request is held to, and the share of requests that must meet all of them."""

    ttft_ms: float | None = _bound("ttft")
    tpot_ms: float | None = _bound("tpot")
    e2e_ms: float | None = _bound("e2e")
    min_share: float = Field(
        ..., gt=0, le=1, description="share of measured requests that must meet every bound, e.g. 0.95"
    )

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: object) -> Any:
        return _known_keys(cls, data)

    @model_validator(mode="after")
    def _some_bound(self) -> PerRequestSlo:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("set at least one of ttft_ms, tpot_ms, e2e_ms (milliseconds)")
        return self


class Slo(Strict):
    """Percentile bounds (``<metric>_<pXX>_ms``, every metric x percentile) and/or a per-request SLO.

    A point meets it when every percentile bound holds and, with ``per_request``, at least
    ``min_share`` of its measured requests meet every per-request bound. Without ``per_request`` a
    request is good when it meets the highest-percentile bound given for TTFT, TPOT and E2E.
    """

    ttft_p50_ms: float | None = _bound("ttft")
    ttft_p90_ms: float | None = _bound("ttft")
    ttft_p95_ms: float | None = _bound("ttft")
    ttft_p99_ms: float | None = _bound("ttft")
    tpot_p50_ms: float | None = _bound("tpot")
    tpot_p90_ms: float | None = _bound("tpot")
    tpot_p95_ms: float | None = _bound("tpot")
    tpot_p99_ms: float | None = _bound("tpot")
    itl_p50_ms: float | None = _bound("itl")
    itl_p90_ms: float | None = _bound("itl")
    itl_p95_ms: float | None = _bound("itl")
    itl_p99_ms: float | None = _bound("itl")
    e2e_p50_ms: float | None = _bound("e2e")
    e2e_p90_ms: float | None = _bound("e2e")
    e2e_p95_ms: float | None = _bound("e2e")
    e2e_p99_ms: float | None = _bound("e2e")
    per_request: PerRequestSlo | None = None
    interactivity_stat: Literal["p50", "mean"] = "p50"

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: object) -> Any:
        return _known_keys(cls, data)

    # --- what it asks ---------------------------------------------------------------------------

    def bounds(self) -> list[tuple[str, str, float]]:
        """(metric, percentile, ms) of every percentile bound set, in METRICS x PERCENTILES order."""
        out = []
        for m in METRICS:
            for p in PERCENTILES:
                v = getattr(self, f"{m}_{p}_ms")
                if v is not None:
                    out.append((m, p, float(v)))
        return out

    def is_set(self) -> bool:
        """Whether there is anything to judge a point against."""
        return bool(self.bounds()) or self.per_request is not None

    def tightest(self, metric: str) -> float | None:
        """The lowest bound on a metric at any percentile: what a model that predicts one figure per
        metric (the twin) must stay under."""
        return min((v for m, _, v in self.bounds() if m == metric), default=None)

    def request_bounds(self) -> dict[str, float]:
        """The per-request bounds in ms by metric (ttft, tpot, e2e): the plan's ``per_request``, else
        each metric's highest-percentile bound."""
        if self.per_request is not None:
            pr = self.per_request
            given = {"ttft": pr.ttft_ms, "tpot": pr.tpot_ms, "e2e": pr.e2e_ms}
            return {k: float(v) for k, v in given.items() if v is not None}
        out: dict[str, float] = {}
        for m, _, v in self.bounds():  # ascending percentile per metric: the last one wins
            if m != "itl":
                out[m] = v
        return out

    # --- judging --------------------------------------------------------------------------------

    def request_is_good(self, t: RequestTimes) -> bool:
        """A request meets every per-request bound: succeeded, TTFT and E2E measured and within
        theirs, TPOT within its bound where the output had one (a one-token answer has none)."""
        if not t.ok:
            return False
        b = self.request_bounds()
        for metric, value in (("ttft", t.ttft_ms), ("e2e", t.e2e_ms)):
            if metric in b and (value is None or value > b[metric]):
                return False
        return not ("tpot" in b and t.tpot_ms is not None and t.tpot_ms > b["tpot"])

    def goodput_share(self, times: Iterable[RequestTimes]) -> float:
        """Share of the requests meeting every per-request bound (0 with none)."""
        seen = good = 0
        for t in times:
            seen += 1
            good += self.request_is_good(t)
        return good / seen if seen else 0.0

    def misses(self, summary: Mapping[str, Any]) -> list[str]:
        """What a point's summary row (bench's columns ``<metric>_ms_<pXX>`` and ``good_fraction``)
        misses, in the buyer's words; empty when it meets the SLO. A figure not measured misses."""
        out = []
        for m, p, v in self.bounds():
            got = _finite(summary.get(f"{m}_ms_{p}"))
            if got is None:
                out.append(f"{p} {METRICS[m]} not measured (bound {_fmt(v)} ms)")
            elif got > v:
                out.append(f"{p} {METRICS[m]} {_fmt(got)} ms > {_fmt(v)} ms")
        if self.per_request is not None:
            share = _finite(summary.get("good_fraction"))
            if share is None or share < self.per_request.min_share:
                out.append(f"goodput {_pct(share)} of requests < {_pct(self.per_request.min_share)}")
        return out

    def meets(self, summary: Mapping[str, Any]) -> bool:
        return not self.misses(summary)

    # --- in the buyer's words -------------------------------------------------------------------

    def in_words(self) -> str:
        """The SLA as a buyer writes it: 'p95 TTFT ≤ 2,000 ms, p95 E2E ≤ 12,000 ms; at least 95% of
        requests with TTFT ≤ 2,000 ms and TPOT ≤ 50 ms (goodput)'."""
        parts = []
        if b := self.bounds():
            parts.append(", ".join(f"{p} {METRICS[m]} ≤ {_fmt(v)} ms" for m, p, v in b))
        if self.per_request is not None:
            each = " and ".join(f"{METRICS[m]} ≤ {_fmt(v)} ms" for m, v in self.request_bounds().items())
            parts.append(f"at least {_pct(self.per_request.min_share)} of requests with {each} (goodput)")
        return "; ".join(parts) or "no SLO set (every load level qualifies)"


def _finite(v: object) -> float | None:
    f = as_float(v)
    return f if math.isfinite(f) else None


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.3g}"


def _pct(v: float | None) -> str:
    return "none" if v is None else f"{v * 100:.3g}%"
