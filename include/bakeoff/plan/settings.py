"""Plan-wide settings: latency SLOs, quality thresholds, pricing assumptions."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from bakeoff.plan.target import Strict


class Slo(Strict):
    ttft_p99_ms: float | None = Field(None, gt=0)
    tpot_p50_ms: float | None = Field(None, gt=0)
    tpot_p99_ms: float | None = Field(None, gt=0)
    interactivity_stat: Literal["p50", "mean"] = "p50"


class Quality(Strict):
    max_error_rate: float = Field(0.02, ge=0, le=1)
    output_len_tolerance: float = Field(0.10, ge=0, le=1)
    min_completed_per_point: int = Field(1, ge=1)
    max_cv: float = Field(0.15, gt=0, description="largest coefficient of variation between repeats")


class Pricing(Strict):
    market: str = "on_demand"
    utilisation: float = Field(1.0, gt=0, le=1, description="share of paid hours actually serving")
    usd_per_kwh: float = Field(0.10, ge=0)
