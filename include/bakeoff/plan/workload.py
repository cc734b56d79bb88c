"""A workload: what the benchmark sends (lengths, prompts, endpoint) and how hard (load mode, levels)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from bakeoff.plan.fields import Strict

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


MAX_SESSIONS = 100_000  # per source (synthetic count, trace sessions read)
MAX_CONCURRENT_SESSIONS = 4096
MAX_SESSION_RATE = 1_000.0  # session arrivals/s
SERVER_BLOCK_TOKENS = 16  # vLLM's default prefix-cache block (the emulator uses the same)


class Spread(Strict):
    """A distribution stated by its mean and a hard ceiling (the generator's shapes are in
    bench.sessions.session_sources: the mean is that of the capped values, so what is stated is what is sent)."""

    mean: float = Field(gt=0, le=MAX_LEN)
    max: float = Field(gt=0, le=MAX_LEN)

    @model_validator(mode="after")
    def _order(self) -> Spread:
        if self.mean > self.max:
            raise ValueError(f"mean ({self.mean:g}) must not exceed max ({self.max:g}); raise max or lower mean")
        return self


class Sessions(Strict):
    """Agentic sessions: each turn re-sends the session's context so far plus new tokens.

    Sources: ``trace`` (mooncake/AIPerf JSONL with hash_ids and a session id), ``logs`` (a buyer's
    chat/agent log, converted as ``python -m bakeoff.bench sessions-from-logs`` does) or ``synthetic``
    (the stated distributions below, or those fitted from a trace with ``fit_from``)."""

    source: Literal["trace", "logs", "synthetic"] = "synthetic"
    path: str | None = Field(
        None, description="trace or log file (source trace/logs), relative to the workloads folder"
    )
    block_tokens: int = Field(
        512,
        ge=SERVER_BLOCK_TOKENS,
        le=65_536,
        description="tokens per hash_ids block of the trace (mooncake/AIPerf: 512); a multiple of 16",
    )
    # --- synthetic distributions (bench.sessions.session_sources documents the shapes) ---
    sessions: int = Field(200, ge=1, le=MAX_SESSIONS, description="top-level sessions generated (synthetic)")
    turns: Spread = Spread(mean=8, max=24)
    first_prompt_tokens: Spread = Field(
        Spread(mean=6000, max=16000), description="first turn's prompt: system prompt + repository context"
    )
    new_tokens_per_turn: Spread = Field(
        Spread(mean=600, max=2000), description="tokens a later turn adds (tool results, the user's message)"
    )
    output_tokens: Spread = Spread(mean=300, max=1000)
    think_s: Spread = Field(Spread(mean=3, max=30), description="tool/think time before a later turn, seconds")
    subagent_prob: float = Field(
        0.1, ge=0, le=1, description="chance that a subagent forks after each turn but the last"
    )
    subagent_turns: Spread = Spread(mean=4, max=8)
    fit_from: str | None = Field(
        None, description="trace whose sessions the synthetic distributions are fitted from (replaces them)"
    )
    # --- load ---
    concurrent_sessions: list[int] = Field(
        [], max_length=MAX_LEVELS, description="closed loop: sessions in flight at each point"
    )
    session_rates: list[float] = Field(
        [], max_length=MAX_LEVELS, description="open loop: session arrivals per second at each point"
    )
    duration_s: float | None = Field(None, gt=0, le=86_400, description="stop starting sessions after this long")
    max_sessions_per_point: int | None = Field(
        None, ge=1, le=MAX_SESSIONS, description="sessions started per point (default: all the source holds)"
    )
    warmup_sessions: int = Field(0, ge=0, le=MAX_SESSIONS, description="whole sessions run first, excluded")

    @field_validator("block_tokens")
    @classmethod
    def _block(cls, v: int) -> int:
        if v % SERVER_BLOCK_TOKENS:
            raise ValueError(
                f"{v} is not a multiple of {SERVER_BLOCK_TOKENS} (a server caches {SERVER_BLOCK_TOKENS}-token "
                f"blocks); use the trace's block size, such as 512"
            )
        return v

    @field_validator("concurrent_sessions")
    @classmethod
    def _concurrent(cls, v: list[int]) -> list[int]:
        for c in v:
            if not 1 <= c <= MAX_CONCURRENT_SESSIONS:
                raise ValueError(
                    f"level {c} is outside 1..{MAX_CONCURRENT_SESSIONS}; list sessions in flight such as [4, 16, 64]"
                )
        return v

    @field_validator("session_rates")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        for r in v:
            if not 0 < r <= MAX_SESSION_RATE:
                raise ValueError(
                    f"rate {r:g} is outside (0, {MAX_SESSION_RATE:g}] sessions/s; list arrivals such as [0.1, 0.5]"
                )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Sessions:
        if self.source in ("trace", "logs") and not self.path:
            raise ValueError(
                f"path: required when source is {self.source!r}; give the file, relative to the workloads folder"
            )
        if self.source == "synthetic" and self.path:
            raise ValueError("path: only for source trace or logs; remove it (or fit_from a trace for synthetic)")
        if self.fit_from and self.source != "synthetic":
            raise ValueError("fit_from: only for source synthetic; remove it or set source: synthetic")
        if bool(self.concurrent_sessions) == bool(self.session_rates):
            raise ValueError(
                "concurrent_sessions: give exactly one of concurrent_sessions (closed loop, e.g. [4, 16, 64]) "
                "or session_rates (open loop, session arrivals/s, e.g. [0.2, 1])"
            )
        return self

    def peak_context(self) -> tuple[int, str]:
        """The most tokens (prompt + output) one synthetic session can hold, and how that bound is
        reached: turn j's prompt is turn j-1's prompt + its output + new tokens; a subagent starts
        from its parent's context after turn k < the parent's last."""
        step = self.new_tokens_per_turn.max + self.output_tokens.max
        top, sub = int(self.turns.max), int(self.subagent_turns.max)
        turns, how = top, f"at turn {top}"
        if self.subagent_prob > 0 and top > 1 and sub > 1:  # a fork needs a parent turn after it
            turns, how = top + sub - 1, f"for a subagent of {sub} turns forked after turn {top - 1}"
        peak = int(self.first_prompt_tokens.max + (turns - 1) * step + self.output_tokens.max)
        how = f"first_prompt_tokens.max + {turns - 1} x (new_tokens_per_turn.max + output_tokens.max) + " + (
            f"output_tokens.max, {how}"
        )
        return peak, how


# Workload fields that shape independent requests only: refused (when changed) beside kind sessions.
REQUEST_ONLY = (
    "input_len",
    "output_len",
    "range_ratio",
    "concurrency",
    "requests_per_point",
    "warmup_requests",
    "source",
    "source_path",
    "prefix_ratio",
    "prefix_groups",
    "load",
    "preset",
    "rates",
    "trace_path",
    "sla",
    "client_fleet",
)


def rate_key(rate: float) -> int:
    """The integer a rate point is stored under (the results key is an int): milli-requests/s."""
    return max(1, int(round(rate * 1000)))


class Workload(Strict):
    name: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: Literal["requests", "sessions"] = Field(
        "requests",
        description="requests: independent prompts (the fields below); sessions: multi-turn agent "
        "sessions whose turns re-send a growing context (the sessions block)",
    )
    sessions: Sessions | None = Field(None, description="the session source and load, for kind sessions")
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
    client_fleet: int = Field(
        1,
        ge=1,
        le=64,
        description="client members sharing the load without a shared clock (bench.fleet.members: one schedule, "
        "clock offsets measured and corrected); 1 = one client",
    )

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
    def _one_spread(self) -> Workload:
        """A fleet's members are single processes: workers inside a fleet are not built."""
        if self.workers > 1 and self.client_fleet > 1:
            raise ValueError(
                f"client_fleet: {self.client_fleet} members with workers: {self.workers} each is not supported; "
                "set one of them to 1 (a fleet of client_fleet single-process members, or workers on one host)"
            )
        return self

    @model_validator(mode="after")
    def _kind(self) -> Workload:
        """A session workload takes its prompts and load from its sessions block: a request-only field
        set beside it would be silently ignored, so it is refused."""
        if self.kind == "requests":
            if self.sessions is not None:
                raise ValueError("sessions: only for kind sessions; set kind: sessions or remove the block")
            return self
        if self.sessions is None:
            raise ValueError("sessions: required when kind is 'sessions'; give source and concurrent_sessions")
        for name in REQUEST_ONLY:
            field = type(self).model_fields[name]
            if getattr(self, name) != field.get_default(call_default_factory=True):
                raise ValueError(
                    f"{name}: not used by kind sessions (prompts and load come from the sessions block); remove it"
                )
        return self

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
        """Concurrency levels of a sweep (the preset expands [start, end] by doubling); for sessions,
        the concurrent sessions of a closed-loop sweep."""
        if self.sessions is not None:
            return list(self.sessions.concurrent_sessions)
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
        None when the run decides them (trace replay, SLA search). Session points are keyed alike:
        concurrent sessions, or rate_key(session arrivals/s)."""
        if self.sessions is not None:
            return self.levels() or [rate_key(r) for r in self.sessions.session_rates]
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
