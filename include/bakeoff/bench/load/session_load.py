"""Session load: agent sessions whose turns re-send a growing context, closed or open loop.

A session sends its turns in order; each waits for the previous turn's answer plus the turn's
think (tool) time, so a turn's due time is known only when the answer before it ends. Closed loop:
``concurrency`` top-level sessions in flight, a finished one replaced by the next. Open loop:
sessions start at their arrival offsets (a trace's own timestamps, or an arrival process) whatever
the server does. A subagent starts when its parent's turn ``fork_after_turn`` is answered and runs
beside the parent; a top-level session's slot is held until its subagents end too.

Every turn goes through the bench's one client (``StreamingClient.stream``) and becomes a
RequestRecord (``loadgen.to_record``) with its session fields; its lateness (actual send - due
time) is its ``send_lag``. Prompts are built from the trace's block hashes (``PromptBlocks``)
before the clock starts, so the hot path only writes bytes; the blocks' seed is new at every point
(``point_seed``), so a point never hits blocks an earlier point (or run) left in the server's
prefix cache, while the sharing the trace states within the point is kept.

A trace turn with a send time (``send_at_s``) is sent that long after its session's start, or as
soon as the previous answer ends if that is later; a turn without one ``think_s`` after the
previous answer. Subagents fork after their parent's turn ``fork_after_turn`` (1-based; 0 or None:
with the parent's first turn).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from bakeoff.bench.client.prompts import RequestSpec
from bakeoff.bench.client.runtime import gc_paused
from bakeoff.bench.client.transport import Outcome, StreamingClient
from bakeoff.bench.load.loadgen import PointId, request_body, to_record, wait_until
from bakeoff.bench.metrics.records import RequestRecord
from bakeoff.bench.sessions.session_sources import Session
from bakeoff.bench.sessions.workload import SERVER_BLOCK_TOKENS, PromptBlocks, expected_hit_rate
from bakeoff.plan.workload import Workload

if TYPE_CHECKING:
    from bakeoff.bench.client.clock import Offsets

_now = time.perf_counter


def point_seed(prompt_seed: int | None, key: int, repeat: int) -> int:
    """The PromptBlocks seed of one point: the same trace blocks become new text at every point and run."""
    digest = hashlib.blake2b(f"{prompt_seed}/{key}/{repeat}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


def uncached_tokens(sessions: Sequence[Any], block_tokens: int) -> dict[tuple[int, int], int]:
    """Per (session index, turn index): the turn's prompt tokens a prefix cache with room for
    everything could not hold -- those from the first block no earlier turn (in session order,
    then turn order) sent. A block is reused only as part of a prefix: after the first new block
    the rest of the prompt is prefilled even if later blocks were seen before; the last token is
    always computed (at most the whole 16-token server blocks before it hit, as vLLM counts)."""
    seen: set[int] = set()
    out: dict[tuple[int, int], int] = {}
    for s, sess in enumerate(sessions):
        for t, turn in enumerate(sess.turns):
            cached = 0
            for i, h in enumerate(turn.hash_ids):
                if h not in seen:
                    break
                cached = (i + 1) * block_tokens
            cached = min(cached, (int(turn.input_tokens) - 1) // SERVER_BLOCK_TOKENS * SERVER_BLOCK_TOKENS)
            out[(s, t)] = max(0, int(turn.input_tokens) - cached)
            seen.update(turn.hash_ids)
    return out


def point_sessions(sessions: Sequence[Any], warmup: int, per_point: int | None) -> list[Any]:
    """The sessions one point plays: ``warmup`` top-level sessions, then up to ``per_point`` measured
    ones (all by default), each with its subagents (and theirs), in the source's order."""
    roots = [s for s in sessions if s.parent is None]
    keep = {s.id for s in roots[: warmup + (per_point if per_point is not None else len(roots))]}
    grew = True
    while grew:
        grew = False
        for s in sessions:
            if s.parent in keep and s.id not in keep:
                keep.add(s.id)
                grew = True
    return [s for s in sessions if s.id in keep]


@dataclass(frozen=True)
class TurnSent:
    """One turn's outcome: session and turn index, the client's outcome, its due time (s from t0)."""

    session: int
    turn: int
    out: Outcome
    due: float


class SessionSender:
    """Pre-builds every turn of ``sessions``, then plays them closed or open loop.

    ``warmup``: how many top-level sessions (in order) warm the server first; their turns are
    recorded with warmup=True and excluded from figures. ``time_scale`` multiplies think times
    and arrival offsets (0.1 replays a trace ten times faster).
    """

    def __init__(
        self,
        client: StreamingClient,
        workload: Workload,
        model: str,
        pid: PointId,
        sessions: Sequence[Session],
        blocks: PromptBlocks,
        *,
        block_tokens: int,
        warmup: int = 0,
        time_scale: float = 1.0,
        timeout_s: float = 300.0,
    ):
        self.client, self.pid, self.sessions = client, pid, list(sessions)
        self.time_scale, self.timeout_s = float(time_scale), timeout_s
        self.ignore_eos = workload.ignore_eos
        ids = {s.id: i for i, s in enumerate(self.sessions)}
        self.children: dict[int, list[tuple[int, int]]] = {}
        self.roots: list[int] = []
        for i, s in enumerate(self.sessions):
            parent = s.parent
            if parent is None:
                self.roots.append(i)
                continue
            if parent not in ids:
                raise ValueError(f"session {s.id!r}: parent {parent!r} is not a session of this workload")
            after = min(s.fork_after_turn or 0, len(self.sessions[ids[parent]].turns))  # a fork past the end: at it
            self.children.setdefault(ids[parent], []).append((i, after))
        self.root_of = {i: i for i in self.roots}
        for r in self.roots:
            for c in self._tree(r):
                self.root_of[c] = r
        warm_roots = set(self.roots[:warmup])
        self.warm = {i for i in range(len(self.sessions)) if self.root_of.get(i) in warm_roots}
        self.block_tokens = block_tokens
        self.uncached = uncached_tokens(self.sessions, block_tokens)
        self.specs: dict[tuple[int, int], RequestSpec] = {}
        self.raw: dict[tuple[int, int], bytes] = {}
        self.index: dict[tuple[int, int], int] = {}
        for n, sess in enumerate(self.sessions):
            for t, turn in enumerate(sess.turns):
                spec = RequestSpec(input_len=int(turn.input_tokens), output_len=max(1, int(turn.output_tokens)))
                text = blocks.prompt(turn.hash_ids, spec.input_len)
                self.raw[(n, t)] = client.build(*request_body(replace(spec, prompt=text), workload, model))
                self.specs[(n, t)] = spec  # the record's lengths; the text lives only in the request bytes
                self.index[(n, t)] = len(self.index)
        self.t0 = _now()

    def _tree(self, s: int) -> list[int]:
        out = []
        for c, _ in self.children.get(s, []):
            out.append(c)
            out.extend(self._tree(c))
        return out

    def start_clock(self) -> None:
        self.t0 = _now()

    async def _play(self, s: int, start: float, sent: list[TurnSent], stop_at: float | None) -> None:
        """Session s from perf_counter ``start`` (the module docstring gives each turn's due time);
        its subagents start as their fork turn is answered, and are awaited."""
        sess = self.sessions[s]
        kids: list[asyncio.Task[None]] = []
        forks = self.children.get(s, [])
        for child, after in forks:
            if after == 0:
                kids.append(asyncio.ensure_future(self._play(child, start, sent, stop_at)))
        ready = start
        for t, turn in enumerate(sess.turns):
            if turn.send_at_s is not None:
                due = max(ready, start + (float(turn.send_at_s) - float(sess.start_s)) * self.time_scale)
            else:
                due = ready + float(turn.think_s or 0.0) * self.time_scale
            if stop_at is not None and s not in self.warm and due > stop_at:
                break  # the point's time is up: the session is cut here
            await wait_until(due)
            out = await self.client.stream(self.raw[(s, t)], self.timeout_s)
            sent.append(TurnSent(s, t, out, due - self.t0))
            ready = out.t_end
            for child, after in forks:
                if after == t + 1:
                    kids.append(asyncio.ensure_future(self._play(child, ready, sent, stop_at)))
        if kids:
            await asyncio.gather(*kids)

    async def run_closed(self, concurrency: int, *, stop_at: float | None = None) -> list[TurnSent]:
        """``concurrency`` top-level sessions in flight; each slot starts its next session as soon
        as the previous one (subagents included) ends. Warm-up sessions go first; no measured
        session starts, and no measured turn is sent, after ``stop_at`` (perf_counter)."""
        sent: list[TurnSent] = []
        queue = iter(self.roots)

        async def slot() -> None:
            for s in queue:
                now = _now()
                if stop_at is not None and s not in self.warm and now > stop_at:
                    return
                await self._play(s, now, sent, stop_at)

        with gc_paused():
            await asyncio.gather(*(slot() for _ in range(max(1, concurrency))))
        return sent

    async def run_open(self, offsets: Offsets, *, stop_at: float | None = None) -> list[TurnSent]:
        """Top-level session i starts at t0 + offsets[i] x time_scale regardless of the server; no
        measured session starts, and no measured turn is sent, after ``stop_at``."""
        if len(offsets) != len(self.roots):
            raise ValueError(f"offsets: {len(offsets)} arrival times for {len(self.roots)} sessions")
        sent: list[TurnSent] = []
        tasks: list[asyncio.Task[None]] = []
        with gc_paused():
            try:
                for s, off in sorted(zip(self.roots, offsets, strict=True), key=lambda x: float(x[1])):
                    due = self.t0 + float(off) * self.time_scale
                    if stop_at is not None and s not in self.warm and due > stop_at:
                        break
                    await wait_until(due)
                    tasks.append(asyncio.ensure_future(self._play(s, due, sent, stop_at)))
                if tasks:
                    await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
        return sent

    def records(self, sent: Sequence[TurnSent]) -> list[RequestRecord]:
        """One record per sent turn, with its session fields, in (session, turn) order."""
        out = []
        for x in sent:
            key = (x.session, x.turn)
            sess = self.sessions[x.session]
            rec = to_record(
                x.out,
                self.pid,
                self.specs[key],
                self.index[key],
                x.session in self.warm,
                self.t0,
                self.ignore_eos,
                x.due,
            )
            root = self.sessions[self.root_of.get(x.session, x.session)]
            rec.session_id, rec.session_root = str(sess.id), str(root.id)
            rec.session_turns, rec.turn = len(sess.turns), x.turn
            rec.context_tokens = int(sess.turns[x.turn].input_tokens)
            rec.uncached_tokens_expected = self.uncached[key]
            rec.subagent = sess.parent is not None
            out.append(rec)
        return sorted(out, key=lambda r: r.index)

    def expected_hit_rate(self, sent: Sequence[TurnSent]) -> float | None:
        """The hit rate the trace predicts (sessions.expected_hit_rate, unbounded cache) for the turns
        this point sent, warm-up included as the server's counters include it."""
        n_sent: dict[int, int] = {}
        for x in sent:
            n_sent[x.session] = max(n_sent.get(x.session, 0), x.turn + 1)
        played = [replace(self.sessions[s], turns=self.sessions[s].turns[:n]) for s, n in sorted(n_sent.items())]
        return expected_hit_rate(played, self.block_tokens) if played else None
