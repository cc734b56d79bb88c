"""Session load against the scripted server: turn order and think time, sessions in flight,
subagents, warm-up, duration cut, per-turn records and the trace's uncached tokens."""

from collections import defaultdict

import numpy as np
import pytest

from bakeoff.bench.client.runtime import run_async
from bakeoff.bench.client.transport import StreamingClient
from bakeoff.bench.load.loadgen import PointId
from bakeoff.bench.load.point import measure_sessions
from bakeoff.bench.load.session_load import SessionSender, point_seed, point_sessions, uncached_tokens
from bakeoff.bench.metrics.summary import session_figures, summarize
from bakeoff.bench.sessions.workload import PromptBlocks, Session, Turn, expected_hit_rate
from bakeoff.plan import Slo, Workload
from bakeoff.serving.emulator.scripted import ScriptedServerProcess

BLOCK = 16


@pytest.fixture(scope="module")
def server():
    with ScriptedServerProcess({"ttft_ms": 5, "itl_ms": 1, "tokens_per_chunk": 1}) as s:
        yield s


def _turn(blocks, new, think=0.0, out=4):
    return Turn(
        new_tokens=new,
        input_tokens=len(blocks) * BLOCK,
        output_tokens=out,
        think_s=think,
        hash_ids=tuple(blocks),
        send_at_s=None,
    )


def _session(sid, n_turns, think=0.02, base=0, parent=None, fork=None):
    turns, ids = [], []
    for t in range(n_turns):
        ids = ids + [base + t * 10 + 1, base + t * 10 + 2]
        turns.append(_turn(ids, 2 * BLOCK, think if t else 0.0))
    return Session(id=sid, start_s=0.0, turns=tuple(turns), parent=parent, fork_after_turn=fork)


def _play(url, sessions, *, concurrency=None, offsets=None, warmup=0, duration_s=None):
    w = Workload(name="s", kind="sessions", sessions={"concurrent_sessions": [1]})

    async def go():
        client = StreamingClient(url)
        try:
            sender = SessionSender(
                client,
                w,
                "scripted",
                PointId("r", "t", "s", 1, 0),
                sessions,
                PromptBlocks(BLOCK, seed=7),
                block_tokens=BLOCK,
                warmup=warmup,
            )
            recs, figures, sent = await measure_sessions(
                sender, warm=4, concurrency=concurrency, offsets=offsets, duration_s=duration_s
            )
            return sender, recs, figures, sent
        finally:
            await client.close()

    return run_async(go())


def test_closed_loop_plays_turns_in_order_with_think_time(server):
    sessions = [_session(f"s{i}", 3, base=1000 * i) for i in range(6)]
    sender, recs, figures, sent = _play(server.url, sessions, concurrency=2)
    assert len(recs) == 18 and all(r.ok for r in recs)
    by = defaultdict(list)
    for r in recs:
        by[r.session_id].append(r)
    for rows in by.values():
        rows.sort(key=lambda r: r.turn)
        assert [r.turn for r in rows] == [0, 1, 2] and all(r.session_turns == 3 for r in rows)
        for a, b in zip(rows, rows[1:], strict=False):
            # the next turn waits for the answer plus its think time (20 ms)
            assert b.start_offset >= a.start_offset + a.elapsed + 0.02 - 1e-4
    # never more than 2 sessions in flight: overlap of [first send, last end] per session
    spans = sorted((min(r.start_offset for r in v), max(r.start_offset + r.elapsed for r in v)) for v in by.values())
    for i, (s, _) in enumerate(spans):
        assert sum(1 for a, b in spans[:i] if b > s) <= 1
    lags = np.asarray([r.send_lag for r in recs]) * 1e3
    assert (lags >= 0).all() and np.percentile(lags, 50) < 5  # punctual: due vs actual send
    assert figures["send_lag_ms_p50"] == pytest.approx(np.percentile(lags, 50), abs=1e-6)
    # per-turn records: context and the trace's uncached tokens (2 new blocks per turn)
    assert {r.context_tokens for r in recs} == {32, 64, 96}
    assert {r.uncached_tokens_expected for r in recs} == {32}
    assert all(r.prompt_tokens == r.context_tokens for r in recs)  # the scripted server counts words
    # every turn was sent: the point's prediction is the trace's own
    assert (
        sender.expected_hit_rate(sent) == pytest.approx(expected_hit_rate(sessions, BLOCK))
        and 0 < expected_hit_rate(sessions, BLOCK) < 1
    )


def test_subagents_start_after_the_fork_turn_and_run_beside_the_parent(server):
    parent = _session("p", 3, think=0.1)
    kid = _session("k", 2, think=0.0, base=500, parent="p", fork=1)  # after the parent's first turn
    _, recs, _, _ = _play(server.url, [parent, kid], concurrency=1)
    p = sorted((r for r in recs if r.session_id == "p"), key=lambda r: r.turn)
    k = sorted((r for r in recs if r.session_id == "k"), key=lambda r: r.turn)
    assert len(p) == 3 and len(k) == 2 and all(r.subagent for r in k) and not any(r.subagent for r in p)
    assert all(r.session_root == "p" for r in recs)
    assert k[0].start_offset >= p[0].start_offset + p[0].elapsed - 1e-4  # after the fork turn's answer
    assert k[0].start_offset < p[1].start_offset  # beside the parent (its next turn waits 100 ms)


def test_warmup_sessions_are_flagged_and_duration_cuts_sessions(server):
    sessions = [_session(f"s{i}", 4, think=0.05, base=1000 * i) for i in range(4)]
    _, recs, _, _ = _play(server.url, sessions, concurrency=4, warmup=1, duration_s=0.08)
    warm = [r for r in recs if r.warmup]
    assert {r.session_id for r in warm} == {"s0"} and len(warm) == 4  # warm-up runs whole
    measured = [r.to_row() for r in recs if not r.warmup]
    assert 0 < len(measured) < 12
    figs = session_figures(measured, None, 1.0)
    assert figs["sessions_cut"] == 3 and figs["sessions_completed"] == 0


def test_open_loop_starts_sessions_at_their_arrivals(server):
    sessions = [_session(f"s{i}", 2, base=1000 * i) for i in range(3)]
    _, recs, _, _ = _play(server.url, sessions, offsets=[0.0, 0.1, 0.2])
    first = {r.session_id: r for r in recs if r.turn == 0}
    for i, sid in enumerate(["s0", "s1", "s2"]):
        assert first[sid].scheduled_offset == pytest.approx(0.1 * i)
        assert first[sid].start_offset >= 0.1 * i
    s = summarize(recs, gpus=1, emulated=True, slo=Slo(ttft_p99_ms=10_000))
    assert s["sessions_completed"] == 3 and s["session_goodput_sps"] > 0


def test_uncached_tokens_follow_prefix_reuse_only():
    a = Session(id="a", start_s=0, turns=(_turn([1, 2], 32), _turn([1, 2, 3], 16), _turn([9, 2, 3, 4], 16)))
    b = Session(id="b", start_s=0, turns=(_turn([1, 5], 32),))
    got = uncached_tokens([a, b], BLOCK)
    assert got == {(0, 0): 32, (0, 1): 16, (0, 2): 64, (1, 0): 16}  # block 2 after a new block 9 is prefilled


def test_point_seed_changes_every_block_and_keeps_sharing():
    a, b = point_seed(1, 4, 0), point_seed(1, 8, 0)
    assert a != b and a == point_seed(1, 4, 0)
    one, two = PromptBlocks(BLOCK, seed=a), PromptBlocks(BLOCK, seed=b)
    x = one.prompt((1, 2), 32).split()
    assert one.prompt((1, 3), 32).split()[:BLOCK] == x[:BLOCK]  # the same id is the same block
    assert set(two.prompt((1, 2), 32).split()[:1]).isdisjoint(x[:1])  # a new point's blocks differ


def test_point_sessions_keep_warmup_then_measured_with_subagents():
    ss = [_session("a", 1), _session("b", 1), _session("b.k", 1, parent="b", fork=1), _session("c", 1)]
    assert [s.id for s in point_sessions(ss, 1, 1)] == ["a", "b", "b.k"]
    assert [s.id for s in point_sessions(ss, 0, None)] == ["a", "b", "b.k", "c"]


def test_trace_send_times_are_kept_within_a_session(server):
    """A trace turn is sent its offset after its session's start (the previous answer permitting),
    not think time after the answer: a timestamp's gap already includes the answer's time."""
    turns = (
        Turn(new_tokens=32, input_tokens=32, output_tokens=4, think_s=0.0, hash_ids=(1, 2), send_at_s=10.0),
        Turn(new_tokens=32, input_tokens=64, output_tokens=4, think_s=0.25, hash_ids=(1, 2, 3, 4), send_at_s=10.25),
    )
    _, recs, _, _ = _play(server.url, [Session(id="t", start_s=10.0, turns=turns)], concurrency=1)
    a, b = sorted(recs, key=lambda r: r.turn)
    assert b.scheduled_offset == pytest.approx(a.scheduled_offset + 0.25, abs=1e-6)
    assert b.start_offset - a.start_offset == pytest.approx(0.25, abs=0.01)
