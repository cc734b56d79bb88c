"""Where agentic sessions come from: mooncake/AIPerf trace files, a buyer's chat/agent logs, and a
seeded synthetic generator (with ``fit`` to estimate its distributions from a trace).

A session is turns that re-send a growing context. Prefix sharing is stated the way mooncake/AIPerf
traces state it: a turn's ``hash_ids`` name the blocks of ``block_tokens`` tokens its prompt is made
of (the last block partial), and equal ids mean equal blocks, so two prompts share exactly the
leading blocks whose ids they share. A later turn keeps the previous turn's full blocks and adds new
ids for the previous output and the new tokens (the previous turn's partial last block grows, so it
becomes a new block).

Trace form (one JSON object per line): ``timestamp`` (ms, send time), ``input_length``,
``output_length``, ``hash_ids`` and ``session_id`` (or AIPerf's ``conversation_id``; a line without
either is a session of one turn). A later turn may give AIPerf's ``delay`` (ms to wait after the
previous turn's answer) instead of a timestamp. bakeoff adds two optional fields for subagents, on a
subagent's first line: ``parent_id`` and ``fork_after_turn`` (its first line then gives ``delay``).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.bench.client.workloads import WorkloadFileError, _json_objects, _text
from bakeoff.plan.workload import Sessions, Spread


@dataclass(frozen=True)
class Turn:
    """One request of a session. ``new_tokens``: what this turn adds beyond the previous turn's
    prompt and output (the whole prompt for a first turn); ``think_s``: the wait before it is sent
    (trace timestamps: the gap between this send and the previous one); ``send_at_s``: the trace's
    send time from its first request, None when the replayer schedules it."""

    new_tokens: int
    input_tokens: int
    output_tokens: int
    think_s: float
    hash_ids: tuple[int, ...]
    send_at_s: float | None = None


@dataclass(frozen=True)
class Session:
    """A session's turns in send order; a subagent names its parent and the parent turn it forks after."""

    id: str
    start_s: float
    turns: tuple[Turn, ...]
    parent: str | None = None
    fork_after_turn: int | None = None


def blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


def extend_ids(
    prev: tuple[int, ...], prev_input: int, input_tokens: int, block_tokens: int, next_id: int
) -> tuple[tuple[int, ...], int]:
    """A later prompt's hash ids: the previous prompt's full blocks (when the prompt grew), then new
    ids up to ``input_tokens``. Returns (ids, next unused id)."""
    keep = prev_input // block_tokens if input_tokens >= prev_input else 0
    need = blocks_for(input_tokens, block_tokens)
    fresh = need - keep
    return prev[:keep] + tuple(range(next_id, next_id + fresh)), next_id + fresh


# --- trace files ---------------------------------------------------------------------------------
def _int(obj: dict[str, Any], key: str, where: str, low: int = 1) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise WorkloadFileError(f"{where}: {key} must be an integer >= {low}")
    return v


def _ms(obj: dict[str, Any], key: str, where: str) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < math.inf:  # NaN fails too
        raise WorkloadFileError(f"{where}: {key} must be a finite number of milliseconds >= 0")
    return float(v)


def _line(obj: dict[str, Any], where: str, block_tokens: int) -> dict[str, Any]:
    il, ol = _int(obj, "input_length", where), _int(obj, "output_length", where)
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
        raise WorkloadFileError(f"{where}: hash_ids must be a list of integers")
    if len(ids) != blocks_for(il, block_tokens):
        raise WorkloadFileError(
            f"{where}: hash_ids has {len(ids)} blocks but input_length {il} needs {blocks_for(il, block_tokens)} "
            f"of {block_tokens} tokens; set sessions.block_tokens to the trace's block size"
        )
    sid = obj.get("session_id", obj.get("conversation_id"))
    if sid is not None and not isinstance(sid, (str, int)):
        raise WorkloadFileError(f"{where}: session_id must be a string or an integer")
    parent = obj.get("parent_id")
    if parent is not None and not isinstance(parent, (str, int)):
        raise WorkloadFileError(f"{where}: parent_id must be a string or an integer")
    fork = obj.get("fork_after_turn")
    if parent is not None:
        fork = _int(obj, "fork_after_turn", where)
    return {
        "sid": None if sid is None else str(sid),
        "ts": _ms(obj, "timestamp", where),
        "delay": _ms(obj, "delay", where),
        "il": il,
        "ol": ol,
        "ids": tuple(ids),
        "parent": None if parent is None else str(parent),
        "fork": fork,
    }


def read_trace(p: Path, block_tokens: int) -> list[Session]:
    """Sessions of a trace file; a bad line raises WorkloadFileError naming the file, line and field."""
    with _text(p):
        return list(_read_trace(str(p), p.stat().st_mtime, block_tokens))


@functools.lru_cache(maxsize=4)
def _read_trace(path: str, mtime: float, block_tokens: int) -> tuple[Session, ...]:
    p = Path(path)
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for no, obj in _json_objects(p):
        where = f"{p.name} line {no}"
        row = _line(obj, where, block_tokens)
        groups.setdefault(row["sid"] or f"line-{no}", []).append((no, row))
    if not groups:
        raise WorkloadFileError(f"{p.name}: no requests in the trace; one JSON object per line")
    stamps = [r["ts"] for rows in groups.values() for _, r in rows if r["ts"] is not None]
    t0 = min(stamps) if stamps else 0.0
    sessions = {sid: _session(sid, rows, t0, p.name) for sid, rows in groups.items()}
    return tuple(_forked(s, sessions, p.name) for s in sessions.values())


def _forked(s: Session, sessions: dict[str, Session], name: str) -> Session:
    """A subagent's first turn adds what goes beyond its parent's context at the fork."""
    if s.parent is None:
        return s
    parent = sessions.get(s.parent)
    if parent is None or not 1 <= (s.fork_after_turn or 0) <= len(parent.turns):
        raise WorkloadFileError(
            f"{name}: session {s.id} forks after turn {s.fork_after_turn} of {s.parent}, which the trace does not hold"
        )
    at = parent.turns[(s.fork_after_turn or 1) - 1]
    first = s.turns[0]
    new = max(0, first.input_tokens - at.input_tokens - at.output_tokens)
    return replace(s, turns=(replace(first, new_tokens=new), *s.turns[1:]))


def _session(sid: str, rows: list[tuple[int, dict[str, Any]]], t0: float, name: str) -> Session:
    if all(r["ts"] is not None for _, r in rows):
        rows = sorted(rows, key=lambda nr: nr[1]["ts"])  # turns in timestamp order (stable)
    first_no, first = rows[0]
    if first["ts"] is None and first["parent"] is None:
        raise WorkloadFileError(
            f"{name} line {first_no}: the first turn of session {sid} needs timestamp (ms); "
            "later turns may give delay instead"
        )
    turns: list[Turn] = []
    prev: dict[str, Any] | None = None
    last_ts: float | None = None  # the session's latest timestamp so far: time never runs backwards
    for no, r in rows:
        if r["ts"] is None and r["delay"] is None and prev is not None:
            raise WorkloadFileError(f"{name} line {no}: give timestamp (ms) or delay (ms after the previous answer)")
        if r["ts"] is not None:
            if last_ts is not None and r["ts"] < last_ts:
                raise WorkloadFileError(
                    f"{name} line {no}: timestamp {r['ts']:g} ms is before an earlier turn's ({last_ts:g} ms) "
                    f"of session {sid}; a session's turns are sent in order, so fix the timestamps"
                )
            last_ts = r["ts"]
            send: float | None = (r["ts"] - t0) / 1000
            think = 0.0 if prev is None or prev["ts"] is None else (r["ts"] - prev["ts"]) / 1000
        else:
            send, think = None, (r["delay"] or 0.0) / 1000
        new = r["il"] if prev is None else max(0, r["il"] - prev["il"] - prev["ol"])
        turns.append(Turn(new, r["il"], r["ol"], think, r["ids"], send))
        prev = r
    start = turns[0].send_at_s or 0.0
    return Session(sid, start, tuple(turns), first["parent"], first["fork"])


def trace_lines(sessions: Iterable[Session]) -> Iterator[dict[str, Any]]:
    """The trace form of sessions, one dict per line (first turns by timestamp, later ones by their
    own timestamp when they have one, else by delay)."""
    for s in sessions:
        for j, t in enumerate(s.turns):
            line: dict[str, Any] = {"session_id": s.id}
            if t.send_at_s is not None:
                line["timestamp"] = round(t.send_at_s * 1000, 3)
            elif j == 0 and s.parent is None:
                line["timestamp"] = round(s.start_s * 1000, 3)
            else:
                line["delay"] = round(t.think_s * 1000, 3)
            if j == 0 and s.parent is not None:
                line["parent_id"], line["fork_after_turn"] = s.parent, s.fork_after_turn
            line.update(input_length=t.input_tokens, output_length=t.output_tokens, hash_ids=list(t.hash_ids))
            yield line


def write_trace(sessions: Iterable[Session], out: Path) -> int:
    """Write sessions as a trace file; returns the lines written."""
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for line in trace_lines(sessions):
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
            n += 1
    return n


# --- a buyer's logs ------------------------------------------------------------------------------
LOG_ID = ("conversation_id", "session_id", "conversation")
LOG_PROMPT = ("prompt_tokens", "input_tokens", "input_length")
LOG_NEW = ("new_tokens",)
LOG_OUTPUT = ("output_tokens", "completion_tokens", "output_length")


def _log_rows(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if p.suffix.lower() == ".csv":
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for row in reader:
                yield reader.line_num, {k: _csv_value(v) for k, v in row.items() if k is not None}
    else:
        yield from _json_objects(p)


def _csv_value(v: str | None) -> Any:
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v.strip()


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((row[k] for k in keys if row.get(k) is not None), None)


def _log_time(v: object, where: str) -> float | None:
    """Epoch seconds (a number) or an ISO 8601 time, as seconds."""
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise WorkloadFileError(f"{where}: timestamp must be a finite number of epoch seconds")
        return float(v)
    if isinstance(v, str):
        try:
            t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()
    raise WorkloadFileError(f"{where}: timestamp must be epoch seconds or an ISO 8601 time")


def read_logs(p: Path, block_tokens: int) -> list[Session]:
    """Sessions from a chat/agent log (JSONL or CSV): one row per turn with a conversation id
    (conversation_id | session_id), optional turn number (else file order), prompt_tokens (the whole
    prompt) or new_tokens (what the turn adds), output_tokens (or completion_tokens) and an optional
    timestamp (epoch s or ISO 8601). hash_ids follow the conversation: each turn keeps the previous
    turn's full blocks, so the converted trace shares exactly what the conversation re-sends. A turn
    whose prompt shrank (the agent compacted its context) starts fresh. Conversations share nothing
    with each other (a log does not say whether they share a system prompt)."""
    convs: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    with _text(p):
        for no, row in _log_rows(p):
            where = f"{p.name} line {no}"
            cid = _first(row, LOG_ID)
            if cid is None:
                raise WorkloadFileError(f"{where}: conversation_id is missing; name each row's conversation")
            turn = row.get("turn")
            if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool)):
                raise WorkloadFileError(f"{where}: turn must be an integer")
            parsed = _log_turn(row, where)
            rows = convs.setdefault(str(cid), [])
            rows.append((turn if turn is not None else len(rows), no, parsed))
    if not convs:
        raise WorkloadFileError(f"{p.name}: no turns; one row per turn with conversation_id and token counts")
    stamps = [r["t"] for rows in convs.values() for _, _, r in rows if r["t"] is not None]
    t0 = min(stamps) if stamps else 0.0
    sessions, next_id = [], 0
    for cid, rows in convs.items():
        rows.sort(key=lambda x: (x[0], x[1]))
        turns: list[Turn] = []
        for _, no, r in rows:
            prev = turns[-1] if turns else None
            if r["prompt"] is not None:
                il = r["prompt"]
            elif prev is None:
                il = r["new"]
            else:
                il = prev.input_tokens + prev.output_tokens + r["new"]
            if prev is None:
                ids, next_id = extend_ids((), 0, il, block_tokens, next_id)
                new = il
            else:
                ids, next_id = extend_ids(prev.hash_ids, prev.input_tokens, il, block_tokens, next_id)
                new = max(0, il - prev.input_tokens - prev.output_tokens)
            send = None if r["t"] is None else r["t"] - t0
            think = 0.0
            if prev is not None and send is not None and prev.send_at_s is not None:
                if send < prev.send_at_s:
                    raise WorkloadFileError(
                        f"{p.name} line {no}: this turn of conversation {cid} has a timestamp before the "
                        "previous turn's; a conversation's turns are sent in order, so fix the timestamps or turns"
                    )
                think = send - prev.send_at_s
            if prev is None and send is None:
                send = 0.0
            turns.append(Turn(new, il, r["out"], think, ids, send))
        sessions.append(Session(cid, turns[0].send_at_s or 0.0, tuple(turns)))
    return sessions


def _log_turn(row: dict[str, Any], where: str) -> dict[str, Any]:
    prompt, new, out = _first(row, LOG_PROMPT), _first(row, LOG_NEW), _first(row, LOG_OUTPUT)
    if prompt is None and new is None:
        raise WorkloadFileError(f"{where}: give prompt_tokens (the whole prompt) or new_tokens (what the turn adds)")
    for name, v, low in (("prompt_tokens", prompt, 1), ("new_tokens", new, 0), ("output_tokens", out, 1)):
        if v is None and name != "output_tokens":
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise WorkloadFileError(f"{where}: {name} must be an integer >= {low}")
    return {"prompt": prompt, "new": new, "out": out, "t": _log_time(row.get("timestamp"), where)}


# --- synthetic sessions ----------------------------------------------------------------------------
SIGMA = 1.0  # lognormal shape of token counts (coefficient of variation ~1.3 before the cap)


@dataclass(frozen=True)
class SyntheticSpec:
    """The generator's stated distributions (plan.workload.Sessions holds the same fields).

    turns, subagent_turns: 1 + Poisson(lambda), capped at max. first_prompt_tokens,
    new_tokens_per_turn, output_tokens: lognormal (sigma 1) capped at max, rounded, >= 1. think_s:
    exponential capped at max (the first turn of a session is sent at once). Each parameter is solved
    so that the mean of the capped values is the stated mean. subagent_prob: after each turn of a
    top-level session but its last, a subagent forks with this chance; it starts from its parent's
    context (prompt + output of that turn) plus new tokens, and runs its own turns in parallel."""

    sessions: int = field(default_factory=lambda: _default("sessions"))
    turns: Spread = field(default_factory=lambda: _default("turns"))
    first_prompt_tokens: Spread = field(default_factory=lambda: _default("first_prompt_tokens"))
    new_tokens_per_turn: Spread = field(default_factory=lambda: _default("new_tokens_per_turn"))
    output_tokens: Spread = field(default_factory=lambda: _default("output_tokens"))
    think_s: Spread = field(default_factory=lambda: _default("think_s"))
    subagent_prob: float = field(default_factory=lambda: _default("subagent_prob"))
    subagent_turns: Spread = field(default_factory=lambda: _default("subagent_turns"))
    block_tokens: int = 512

    @classmethod
    def of(cls, block: Sessions) -> SyntheticSpec:
        """The spec a plan's sessions block states."""
        names = [f for f in cls.__dataclass_fields__ if f != "block_tokens"]
        return cls(**{n: getattr(block, n) for n in names}, block_tokens=block.block_tokens)


def _default(name: str) -> Any:
    """The plan's default for a synthetic field (plan.workload.Sessions states them once)."""
    return Sessions.model_fields[name].get_default(call_default_factory=True)


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def _bisect(f: Callable[[float], float], lo: float, hi: float, target: float) -> float:
    for _ in range(100):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _lognormal_mu(s: Spread) -> float:
    lm, s2 = math.log(s.max), SIGMA * SIGMA

    def capped_mean(mu: float) -> float:
        return math.exp(mu + s2 / 2) * _phi((lm - mu - s2) / SIGMA) + s.max * (1 - _phi((lm - mu) / SIGMA))

    return _bisect(capped_mean, math.log(s.mean) - 30, lm + 30, s.mean)


def _poisson_lambda(s: Spread) -> float:
    top = int(s.max)

    def capped_mean(lam: float) -> float:  # E[min(1 + Poisson(lam), top)]
        if lam <= 0:
            return 1.0
        below, total = 0.0, 0.0
        for k in range(top - 1):
            pk = math.exp(-lam + k * math.log(lam) - math.lgamma(k + 1))
            total += (1 + k) * pk
            below += pk
        return total + top * max(0.0, 1 - below)

    return _bisect(capped_mean, 0.0, 4.0 * top + 10, s.mean)


def _exp_scale(s: Spread) -> float:
    return _bisect(lambda th: th * (1 - math.exp(-s.max / th)), s.mean, s.mean * 1e6, s.mean)


class _Draw:
    """Samplers for one spec, parameters solved once."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self._params: dict[tuple[int, Any], float] = {}

    def count(self, s: Spread) -> int:
        if s.mean >= s.max or s.mean <= 1:
            return max(1, int(round(s.mean)))
        lam = self._param(s, _poisson_lambda)
        return int(min(1 + self.rng.poisson(lam), int(s.max)))

    def tokens(self, s: Spread) -> int:
        if s.mean >= s.max:
            return max(1, int(round(s.mean)))
        mu = self._param(s, _lognormal_mu)
        return max(1, int(round(min(self.rng.lognormal(mu, SIGMA), s.max))))

    def seconds(self, s: Spread) -> float:
        """Milliseconds resolution, as a trace's delay states it."""
        if s.mean >= s.max:
            return round(float(s.mean), 3)
        th = self._param(s, _exp_scale)
        return round(float(min(self.rng.exponential(th), s.max)), 3)

    def _param(self, s: Spread, solve: Callable[[Spread], float]) -> float:
        key = (id(s), solve)
        if key not in self._params:
            self._params[key] = solve(s)
        return self._params[key]


def generate(spec: SyntheticSpec, seed: int) -> list[Session]:
    """``spec.sessions`` top-level sessions and their subagents, deterministic in ``seed``. Hash ids
    are unique per session (sessions share nothing but a subagent's parent context)."""
    rng = np.random.default_rng(seed)
    draw = _Draw(rng)
    b = spec.block_tokens
    out: list[Session] = []
    next_id = 0
    for i in range(spec.sessions):
        sid = f"s{i:05d}"
        n_turns = draw.count(spec.turns)
        turns: list[Turn] = []
        subs: list[Session] = []
        for j in range(n_turns):
            prev = turns[-1] if turns else None
            if prev is None:
                new = draw.tokens(spec.first_prompt_tokens)
                il, think = new, 0.0
                ids, next_id = extend_ids((), 0, il, b, next_id)
            else:
                new = draw.tokens(spec.new_tokens_per_turn)
                il, think = prev.input_tokens + prev.output_tokens + new, draw.seconds(spec.think_s)
                ids, next_id = extend_ids(prev.hash_ids, prev.input_tokens, il, b, next_id)
            turn = Turn(new, il, draw.tokens(spec.output_tokens), think, ids, 0.0 if prev is None else None)
            turns.append(turn)
            if j < n_turns - 1 and spec.subagent_prob > 0 and rng.random() < spec.subagent_prob:
                sub, next_id = _subagent(f"{sid}.a{len(subs)}", sid, j + 1, turn, spec, draw, next_id)
                subs.append(sub)
        out.append(Session(sid, 0.0, tuple(turns)))
        out.extend(subs)
    return out


def _subagent(
    sid: str, parent: str, after: int, at: Turn, spec: SyntheticSpec, draw: _Draw, next_id: int
) -> tuple[Session, int]:
    b = spec.block_tokens
    turns: list[Turn] = []
    prev_ids, prev_in, context = at.hash_ids, at.input_tokens, at.input_tokens + at.output_tokens
    for j in range(draw.count(spec.subagent_turns)):
        new = draw.tokens(spec.new_tokens_per_turn)
        il = context + new
        ids, next_id = extend_ids(prev_ids, prev_in, il, b, next_id)
        turn = Turn(new, il, draw.tokens(spec.output_tokens), 0.0 if j == 0 else draw.seconds(spec.think_s), ids)
        turns.append(turn)
        prev_ids, prev_in, context = ids, il, il + turn.output_tokens
    return Session(sid, 0.0, tuple(turns), parent, after), next_id


def fit(sessions: list[Session], block_tokens: int | None = None) -> SyntheticSpec:
    """The synthetic distributions that reproduce a trace's sessions in mean and ceiling. Think time
    is the trace's: with timestamps, the gap between sends (so it includes the previous answer's
    time); with delays, the wait itself. Subagents are counted where the trace marks them."""
    if not sessions:
        raise WorkloadFileError("fit_from: the trace holds no sessions")
    top = [s for s in sessions if s.parent is None] or list(sessions)
    subs = [s for s in sessions if s.parent is not None]
    later = [t for s in sessions for t in s.turns[1:]] + [s.turns[0] for s in subs]
    thinks = [t.think_s for s in sessions for t in s.turns[1:]]
    forks = sum(len(s.turns) - 1 for s in top)

    def spread(values: list[float], floor: float = 1.0) -> Spread:
        if not values:
            return Spread(mean=floor, max=floor)
        mean, top_ = max(floor, float(np.mean(values))), max(floor, float(max(values)))
        return Spread(mean=min(mean, top_), max=top_)

    return SyntheticSpec(
        sessions=len(top),
        turns=spread([len(s.turns) for s in top]),
        first_prompt_tokens=spread([s.turns[0].input_tokens for s in top]),
        new_tokens_per_turn=spread([t.new_tokens for t in later]),
        output_tokens=spread([t.output_tokens for s in sessions for t in s.turns]),
        think_s=spread(thinks, floor=0.001),
        subagent_prob=min(1.0, len(subs) / forks) if forks else 0.0,
        subagent_turns=spread([len(s.turns) for s in subs]),
        block_tokens=block_tokens or 512,
    )
