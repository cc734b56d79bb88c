"""The two tables every later step reads: one row per request, one row per measured point.

The request table's columns are RequestRecord's fields; the point table's columns are declared by
the units that compute them (``bench.metrics.summary.POINT_COLUMNS``, from ``POINT_METRICS``). Together they
are the contract between the benchmark, the results store, validation, cost and reports. Add
columns freely; rename or drop none without updating every reader.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Identity of a point: one (target, workload, concurrency or rate, repeat) measurement.
POINT_KEY = ["run_id", "target", "workload", "concurrency", "repeat"]


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are seconds; offsets are from this request's send."""

    run_id: str
    target: str
    workload: str
    concurrency: int
    repeat: int
    index: int
    warmup: bool
    send_time: float  # UTC wall clock (epoch seconds) at send
    start_offset: float  # seconds since the point's first send (monotonic)
    ttft: float | None = None  # to first chunk carrying a generated token (reasoning included)
    ttfa: float | None = None  # to first answer (non-reasoning) text
    e2e: float | None = None  # to last byte
    chunk_offsets: list[float] = field(default_factory=list)  # arrival of every token chunk (empty text too)
    prompt_tokens: int | None = None  # from usage
    output_tokens: int | None = None  # from usage, else the client count (see tokens_source)
    output_tokens_client: int | None = None
    tokens_source: str = "usage"  # usage | client
    requested_input_len: int = 0
    requested_output_len: int = 0
    ignore_eos: bool = True
    finish_reason: str | None = None
    status_code: int | None = None
    error_kind: str | None = None  # None when the request succeeded
    error: str | None = None
    # added by the benchmark harness (issue 3); readers that do not know them can ignore them
    elapsed: float | None = None  # send to end of the request, failed ones included
    scheduled_offset: float | None = None  # open-loop modes: when the arrival process wanted the send
    send_lag: float | None = None  # open-loop modes: start_offset - scheduled_offset (lateness, s)
    token_mismatch: bool = False  # usage and client count disagree by more than 10%
    chunks: int = 0  # token chunks received (an empty-text chunk is still a token)
    client_count_method: str | None = None  # how output_tokens_client was counted: chunks | words | tokenize
    # session workloads (bench.load.session_load); None / False for single requests
    session_id: str | None = None
    session_root: str | None = None  # the top-level session a subagent belongs to (its own id when top-level)
    session_turns: int | None = None  # turns the session has, to tell a finished session from a cut one
    turn: int | None = None  # 0-based turn index within the session
    context_tokens: int | None = None  # the turn's prompt length (tokens) as the trace gives it
    uncached_tokens_expected: int | None = None  # prompt tokens in no earlier turn's blocks (trace prediction)
    subagent: bool = False
    # not a column: the streamed text of a request the server gave no usage for, kept in memory for
    # tokenize.recount_outputs
    output_pieces: list[str] | None = field(
        default=None, init=False, repr=False, compare=False, metadata={"column": False}
    )

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        return {f.name: row[f.name] for f in REQUEST_FIELDS}


# The per-request table's columns: every field of RequestRecord but the in-memory ones.
REQUEST_FIELDS = tuple(f for f in fields(RequestRecord) if f.metadata.get("column", True))
