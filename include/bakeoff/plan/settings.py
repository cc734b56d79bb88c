"""Plan-wide settings: quality thresholds, pricing assumptions (the SLO is plan/slo.py).

Every number has a finite upper bound (plans reject inf and nan: see Strict), because each one
feeds either the budget estimate or a loop a trigger could otherwise make endless."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bakeoff.plan.fields import Strict

# The most any plan or trigger may budget (the Plan field and the trigger-form Param say the same).
MAX_BUDGET_USD = 100_000.0


class Accuracy(Strict):
    """The accuracy gate: greedy answers to an evaluation set, scored against a reference."""

    enabled: bool = True
    backend: Literal["builtin", "lm_eval"] = Field(
        "builtin",
        description="builtin: the offline arithmetic set shipped with bakeoff; "
        "lm_eval: lm-evaluation-harness local-completions (install lm_eval yourself)",
    )
    reference: float | Literal["best"] = Field(
        "best", description="reference score: a fixed number in [0, 1], or 'best' = best target in the run"
    )
    reference_output_tokens: float | None = Field(
        None, gt=0, le=1_000_000, description="reference mean output tokens per item; default: the reference target's"
    )
    min_score_ratio: float = Field(0.99, gt=0, le=1, description="pass when score >= ratio x reference")
    output_tokens_tolerance: float = Field(
        0.10, ge=0, le=1, description="mean output tokens within +-this of the reference"
    )
    eval_size: int = Field(200, ge=1, le=10000, description="items in the builtin set")
    seed: int = 0
    max_tokens: int = Field(16, ge=1, le=512)
    concurrency: int = Field(8, ge=1, le=256)
    request_timeout_s: float = Field(60.0, gt=0, le=3600)
    lm_eval_tasks: list[str] = Field(["gsm8k"], min_length=1, max_length=32)
    lm_eval_limit: int | None = Field(None, ge=1, le=100_000, description="items per lm-eval task (None = all)")

    @field_validator("reference", mode="before")
    @classmethod
    def _unit(cls, v: object) -> float | str:
        if v == "best":
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ValueError(f"got {v!r}; use 'best' (best target in the run) or a fixed score in (0, 1] such as 0.95")
        return float(v)


class Quality(Strict):
    max_error_rate: float = Field(0.02, ge=0, le=1)
    output_len_tolerance: float = Field(0.10, ge=0, le=1)
    min_completed_per_point: int = Field(1, ge=1, le=1_000_000)
    max_cv: float = Field(0.15, gt=0, le=10, description="largest coefficient of variation between repeats")
    client_bound: Literal["warn", "fail"] = Field(
        "warn",
        description="a point the client, not the server, set the pace for (the loop monitor's verdict): warn "
        "lists it in validation and keeps the target ranked on its server-paced points; fail fails the target",
    )
    accuracy: Accuracy = Accuracy()


class Pricing(Strict):
    market: str = "on_demand"
    utilisation: float = Field(1.0, gt=0, le=1, description="share of paid hours actually serving")
    usd_per_kwh: float = Field(0.10, ge=0, le=10)
    rank_by: Literal["output", "total"] = Field(
        "output", description="tokens the cost ranking is per: output tokens only, or input + output"
    )
