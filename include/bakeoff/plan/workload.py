"""A workload: what the benchmark sends (lengths, prompts, endpoint) and how hard (load mode, levels)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from bakeoff.plan.target import Strict

# Ceilings on load: beyond these a point is a typo or an attempt to run the bill up, not a benchmark.
MAX_LEN = 1_048_576  # tokens; the model's context bounds input + output further (Plan)
MAX_CONCURRENCY = 4096
MAX_RATE = 10_000.0  # requests/s
MAX_REQUESTS = 100_000  # per point
MAX_LEVELS = 64  # load points per workload


class SlaSearch(Strict):
    """Find the highest load meeting every SLO: bracket by doubling from ``start``, then bisect."""

    over: Literal["concurrency", "rate"] = "concurrency"
    start: float = Field(1, gt=0, le=MAX_RATE, description="first load probed (concurrency or requests/s)")
    max: float = Field(512, gt=0, le=MAX_RATE, description="highest load ever probed")
    tolerance: float = Field(
        0.0,
        ge=0,
        le=10,
        description="stop bisecting when hi - lo <= max(1 step, tolerance x lo); "
        "a step is 1 for concurrency, 0.05 x lo for rate",
    )
    max_probes: int = Field(16, ge=2, le=64)

    @model_validator(mode="after")
    def _order(self) -> SlaSearch:
        if self.start > self.max:
            raise ValueError(f"start ({self.start}) must not exceed max ({self.max})")
        if self.over == "concurrency" and self.max > MAX_CONCURRENCY:
            raise ValueError(
                f"max: {self.max:g} concurrent requests is above the ceiling of {MAX_CONCURRENCY}; "
                f"search up to at most {MAX_CONCURRENCY}"
            )
        return self


def rate_key(rate: float) -> int:
    """The integer a rate point is stored under (the results key is an int): milli-requests/s."""
    return max(1, int(round(rate * 1000)))


class Workload(Strict):
    name: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    endpoint: Literal["completions", "chat"] = "completions"
    input_len: int = Field(1024, ge=1, le=MAX_LEN)
    output_len: int = Field(256, ge=1, le=MAX_LEN)
    range_ratio: float = Field(1.0, gt=0, le=1, description="length spread; see length_interval")
    length_interval: Literal["inferencemax", "vllm"] = Field(
        "inferencemax",
        description="inferencemax: lengths uniform in [r*L, L] (SGLang too); vllm: uniform in [(1-r)*L, (1+r)*L]",
    )
    ignore_eos: bool = True
    concurrency: list[int] = Field([1, 2, 4, 8], min_length=1, max_length=MAX_LEVELS)
    requests_per_point: int | None = Field(
        None,
        ge=1,
        le=MAX_REQUESTS,
        description="default: 10 x concurrency (InferenceMAX); open-loop rate points: 30 s of arrivals, at least 10",
    )
    warmup_requests: int | None = Field(
        None, ge=0, le=MAX_REQUESTS, description="default: 2 x concurrency (open loop: none), excluded from metrics"
    )
    repeats: int = Field(1, ge=1, le=20)
    request_timeout_s: float = Field(300.0, gt=0, le=3600)
    ttft_connection: Literal["warm", "per_request"] = Field(
        "warm",
        description="warm: connections opened before measuring, so TTFT excludes connection set-up; "
        "per_request: a new connection per request, set-up inside TTFT (as InferenceX / vLLM bench)",
    )
    seed: int = 0

    # --- prompts -----------------------------------------------------------------------------
    source: Literal["synthetic", "jsonl", "sharegpt", "length_log"] = Field(
        "synthetic",
        description="synthetic: random words of sampled lengths; jsonl: the user's prompts "
        "(prompt or messages, optional max_tokens); sharegpt: ShareGPT JSON; length_log: CSV of "
        "input_len,output_len whose empirical distribution synthetic prompts follow",
    )
    source_path: str | None = Field(
        None,
        description="file for source jsonl/sharegpt/length_log, relative to the "
        "workloads folder ($BAKEOFF_WORKLOADS_DIR, default include/workloads)",
    )
    prefix_ratio: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="share of each prompt that is a shared prefix "
        "(the prefix-cache hit ratio a caching server sees; public MI355X figures use 0.6)",
    )
    prefix_groups: int = Field(1, ge=1, le=MAX_REQUESTS, description="distinct shared prefixes, assigned round-robin")
    prompt_seeding: Literal["per_run", "fixed"] = Field(
        "per_run",
        description="per_run: written prompts come from seed mixed with the run id, so a later run never "
        "hits a prefix cache an earlier one warmed (every target of one run still gets the same prompts); "
        "fixed: the same prompts in every run. The seed used is recorded per point (prompt_seed)",
    )
    input_len_tolerance: float = Field(
        0.02,
        ge=0,
        le=1,
        description="validation fails a point whose prompts, as "
        "the server's usage counts them, are off the requested length by more than "
        "this share on average (written prompts only: synthetic, length_log; not trace replay)",
    )

    # --- load ----------------------------------------------------------------------------------
    load: Literal["concurrency", "rate", "trace", "sla"] = Field(
        "concurrency",
        description="concurrency: closed-loop sweep; rate: open-loop arrivals at each of "
        "`rates`; trace: replay the timestamps in trace_path; sla: search the highest load meeting the SLOs",
    )
    preset: Literal["inferencemax"] | None = Field(
        None,
        description="inferencemax: concurrency doubles from concurrency[0] to concurrency[-1], "
        "10 x C prompts and 2 x C warm-up requests per point",
    )
    rates: list[float] = Field([], max_length=MAX_LEVELS, description="requests per second for load: rate")
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: float = Field(
        1.0,
        gt=0,
        le=100,
        description="gamma shape k: 1 = Poisson, < 1 burstier, > 1 smoother "
        "(coefficient of variation of gaps = 1/sqrt(k))",
    )
    max_concurrency: int | None = Field(
        None, ge=1, le=MAX_CONCURRENCY, description="cap on requests in flight in open-loop modes"
    )
    trace_path: str | None = Field(
        None,
        description="JSONL of {timestamp (s) | timestamp_ms, input_len?, output_len?}, "
        "relative to the workloads folder",
    )
    sla: SlaSearch | None = None
    max_point_s: float | None = Field(None, gt=0, le=86_400, description="stop sending new requests after this long")
    workers: int = Field(1, ge=1, le=64, description="client processes sharing the load (when one core is not enough)")

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        for c in v:
            if c < 1:
                raise ValueError(
                    f"concurrency levels must be >= 1, got {c}; list positive integers such as [1, 2, 4, 8]"
                )
            if c > MAX_CONCURRENCY:
                raise ValueError(
                    f"concurrency level {c} is above the ceiling of {MAX_CONCURRENCY}; "
                    f"list levels up to {MAX_CONCURRENCY}"
                )
        return v

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        for r in v:
            if r <= 0:
                raise ValueError(f"rates must be > 0 requests/s, got {r}; list positive numbers such as [0.5, 1, 2]")
            if r > MAX_RATE:
                raise ValueError(
                    f"rate {r:g} requests/s is above the ceiling of {MAX_RATE:g}; list rates up to {MAX_RATE:g}"
                )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        if self.source != "synthetic" and not self.source_path:
            raise ValueError(f"source_path: required when source is {self.source!r}; give the file's path")
        if self.load == "rate" and not self.rates:
            raise ValueError("rates: required when load is 'rate'; list requests per second such as [1, 2, 4]")
        if self.load == "trace" and not self.trace_path:
            raise ValueError("trace_path: required when load is 'trace'; give a JSONL file of timestamps")
        if self.load == "sla" and self.sla is None:
            self.sla = SlaSearch(start=self.concurrency[0], max=max(self.concurrency[-1], self.concurrency[0]))
        if self.preset == "inferencemax" and len(self.concurrency) > 2:
            raise ValueError("concurrency: with preset inferencemax give [start, end]; levels double between them")
        return self

    def levels(self) -> list[int]:
        """Concurrency levels of a sweep (the preset expands [start, end] by doubling)."""
        if self.preset == "inferencemax":
            start, end = self.concurrency[0], self.concurrency[-1]
            out, c = [], start
            while c <= end:
                out.append(c)
                c *= 2
            return out
        return list(self.concurrency)

    def planned_keys(self) -> list[int] | None:
        """The point keys results will carry: concurrency levels, or rate_key(rate) for rate points;
        None when the run decides them (trace replay, SLA search)."""
        if self.load == "concurrency":
            return self.levels()
        if self.load == "rate":
            return [rate_key(r) for r in self.rates]
        return None

    def requests_at(self, concurrency: int) -> int:
        if self.preset == "inferencemax":
            return 10 * concurrency
        return self.requests_per_point or 10 * concurrency

    def warmup_at(self, concurrency: int) -> int:
        if self.preset == "inferencemax":
            return 2 * concurrency
        return 2 * concurrency if self.warmup_requests is None else self.warmup_requests

    def length_bounds(self, length: int) -> tuple[int, int]:
        """Inclusive bounds a sampled length is drawn from, per the stated interval convention."""
        r = self.range_ratio
        if self.length_interval == "inferencemax":
            return max(1, int(r * length)), length
        return max(1, int((1 - r) * length)), max(1, int((1 + r) * length))
