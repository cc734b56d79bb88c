"""A workload: what the benchmark sends (lengths, endpoint) and how hard (load levels)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from bakeoff.plan.target import Strict


class Workload(Strict):
    name: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    endpoint: Literal["completions", "chat"] = "completions"
    input_len: int = Field(1024, ge=1)
    output_len: int = Field(256, ge=1)
    range_ratio: float = Field(1.0, gt=0, le=1, description="length spread; see length_interval")
    length_interval: Literal["inferencemax", "vllm"] = Field(
        "inferencemax",
        description="inferencemax: lengths uniform in [r*L, L] (SGLang too); vllm: uniform in [(1-r)*L, (1+r)*L]")
    ignore_eos: bool = True
    concurrency: list[int] = Field([1, 2, 4, 8], min_length=1)
    requests_per_point: int | None = Field(None, ge=1, description="default: 10 x concurrency (InferenceMAX)")
    warmup_requests: int | None = Field(None, ge=0, description="default: 2 x concurrency, excluded from metrics")
    repeats: int = Field(1, ge=1, le=20)
    request_timeout_s: float = Field(300.0, gt=0)
    seed: int = 0

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        for c in v:
            if c < 1:
                raise ValueError(f"concurrency levels must be >= 1, got {c}; list positive integers such as [1, 2, 4, 8]")
        return v

    def requests_at(self, concurrency: int) -> int:
        return self.requests_per_point or 10 * concurrency

    def warmup_at(self, concurrency: int) -> int:
        return 2 * concurrency if self.warmup_requests is None else self.warmup_requests

    def length_bounds(self, length: int) -> tuple[int, int]:
        """Inclusive bounds a sampled length is drawn from, per the stated interval convention."""
        r = self.range_ratio
        if self.length_interval == "inferencemax":
            return max(1, int(r * length)), length
        return max(1, int((1 - r) * length)), max(1, int((1 + r) * length))
