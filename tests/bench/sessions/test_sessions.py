"""Session workloads: trace and log sources, the synthetic generator and its fit, prompts built from
hash ids, and the prefix-cache hit rate a trace predicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bakeoff import tokens
from bakeoff.bench.cli import main as bench_main
from bakeoff.bench.client.sizing import WORDS, PromptSizer
from bakeoff.bench.client.workloads import WorkloadFileError, workloads_dir
from bakeoff.bench.sessions.session_sources import SyntheticSpec, fit, generate, read_logs, read_trace, write_trace
from bakeoff.bench.sessions.workload import PromptBlocks, Session, Turn, expected_hit_rate, load_sessions
from bakeoff.plan import Workload
from bakeoff.plan.workload import Sessions, Spread


def _trace(tmp_path: Path, lines: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def _workload(**sessions) -> Workload:
    return Workload(name="agents", kind="sessions", sessions={"concurrent_sessions": [4], **sessions})


# --- traces ---------------------------------------------------------------------------------------
def test_trace_groups_sessions_orders_turns_and_times_them(tmp_path):
    p = _trace(
        tmp_path,
        [
            {"session_id": "a", "timestamp": 3000, "input_length": 1200, "output_length": 50, "hash_ids": [0, 1, 3]},
            {"conversation_id": "b", "timestamp": 1000, "input_length": 10, "output_length": 5, "hash_ids": [9]},
            {"session_id": "a", "timestamp": 1500, "input_length": 1000, "output_length": 100, "hash_ids": [0, 1]},
            {"session_id": "b", "delay": 250, "input_length": 600, "output_length": 7, "hash_ids": [10, 11]},
            {"timestamp": 2000, "input_length": 512, "output_length": 1, "hash_ids": [0]},
        ],
    )
    got = {s.id: s for s in read_trace(p, 512)}
    assert set(got) == {"a", "b", "line-5"}
    a = got["a"]
    assert [t.input_tokens for t in a.turns] == [1000, 1200]  # timestamp order, not file order
    assert a.start_s == 0.5 and [t.send_at_s for t in a.turns] == [0.5, 2.0]
    assert [t.think_s for t in a.turns] == [0.0, 1.5]
    assert [t.new_tokens for t in a.turns] == [1000, 100]  # 1200 - (1000 + 100)
    b = got["b"]
    assert b.turns[1].send_at_s is None and b.turns[1].think_s == 0.25  # AIPerf's delay
    assert b.turns[0].send_at_s == 0.0
    assert got["line-5"].turns[0].hash_ids == (0,)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"input_length": 10, "output_length": 1, "hash_ids": "0"}, "line 2: hash_ids must be a list of integers"),
        ({"input_length": 10, "output_length": 1, "hash_ids": [0, True]}, "line 2: hash_ids must be a list"),
        ({"input_length": 600, "output_length": 1, "hash_ids": [0]}, "line 2: hash_ids has 1 blocks but input_length"),
        ({"output_length": 1, "hash_ids": [0]}, "line 2: input_length must be an integer >= 1"),
        ({"input_length": 10, "output_length": 0, "hash_ids": [0]}, "line 2: output_length must be an integer >= 1"),
        ({"input_length": 10, "output_length": 1, "hash_ids": [0], "timestamp": -1}, "line 2: timestamp must be"),
        ({"input_length": 10, "output_length": 1, "hash_ids": [0], "session_id": [1]}, "line 2: session_id must be"),
        ('{"input_length": 10,', "t.jsonl:2: not valid JSON"),
    ],
)
def test_bad_trace_lines_name_file_line_and_field(tmp_path, line, message):
    if isinstance(line, dict):
        line = {"timestamp": 0, **line}
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}
    p = _trace(tmp_path, [good, line])
    with pytest.raises(WorkloadFileError) as e:
        read_trace(p, 512)
    assert message in str(e.value)
    assert "t.jsonl" in str(e.value)


def test_first_turn_needs_a_timestamp_and_a_fork_needs_its_parent(tmp_path):
    p = _trace(tmp_path, [{"session_id": "x", "delay": 5, "input_length": 10, "output_length": 1, "hash_ids": [0]}])
    with pytest.raises(WorkloadFileError, match="line 1: the first turn of session x needs timestamp"):
        read_trace(p, 512)
    orphan = {"session_id": "y", "parent_id": "nobody", "fork_after_turn": 1, "delay": 0}
    p = _trace(tmp_path, [{**orphan, "input_length": 10, "output_length": 1, "hash_ids": [0]}], "o.jsonl")
    with pytest.raises(WorkloadFileError, match="session y forks after turn 1 of nobody"):
        read_trace(p, 512)


def test_trace_context_beyond_the_model_is_refused_with_the_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_WORKLOADS_DIR", str(tmp_path))
    _trace(
        tmp_path,
        [
            {"session_id": "s1", "timestamp": 0, "input_length": 1000, "output_length": 100, "hash_ids": [0, 1]},
            {
                "session_id": "s1",
                "timestamp": 9,
                "input_length": 3000,
                "output_length": 200,
                "hash_ids": [0, 2, 3, 4, 5, 6],
            },
        ],
    )
    w = _workload(source="trace", path="t.jsonl")
    assert len(load_sessions(w, 0, context_tokens=3200, model="m")) == 1
    with pytest.raises(WorkloadFileError) as e:
        load_sessions(w, 0, context_tokens=3199, model="llama-3.1-70b")
    msg = str(e.value)
    for part in ("t.jsonl", "session s1 turn 2", "3200 tokens", "3000 prompt + 200 output", "3199-token", "llama"):
        assert part in msg


def test_shipped_sample_is_the_generators_output_and_fits_the_demo_model():
    sample = read_trace(workloads_dir() / "agentic-sample.jsonl", 512)
    # made by: write_trace(generate(SyntheticSpec(sessions=40), seed=15), "agentic-sample.jsonl")
    assert sample == generate(SyntheticSpec(sessions=40), seed=15)
    assert sum(s.parent is None for s in sample) == 40 and any(s.parent for s in sample)
    assert max(t.input_tokens + t.output_tokens for s in sample for t in s.turns) <= 131072
    w = _workload(source="trace", path="agentic-sample.jsonl")
    assert load_sessions(w, 0, context_tokens=131072) == sample


# --- logs -----------------------------------------------------------------------------------------
def _conversation_share(log_turns: list[list[int]], block: int) -> float:
    """What a conversation re-sends, in full trace blocks of the previous prompt, over all it sends."""
    shared = total = 0
    for turns in log_turns:
        for j, il in enumerate(turns):
            total += il
            if j and il >= turns[j - 1]:
                shared += (turns[j - 1] // block) * block
    return shared / total


def test_logs_convert_to_a_trace_that_shares_what_the_conversation_resends(tmp_path):
    block = 512
    rows = [
        {"conversation_id": "a", "turn": 2, "prompt_tokens": 3050, "output_tokens": 280},
        {"conversation_id": "a", "turn": 1, "prompt_tokens": 2400, "output_tokens": 310},
        {"conversation_id": "b", "new_tokens": 8200, "output_tokens": 640, "timestamp": 100.0},
        {"conversation_id": "b", "new_tokens": 1200, "output_tokens": 420, "timestamp": 130.5},
        {"conversation_id": "a", "turn": 3, "prompt_tokens": 1500, "output_tokens": 90},  # compacted
    ]
    logs = _trace(tmp_path, rows, "log.jsonl")
    sessions = read_logs(logs, block)
    by = {s.id: s for s in sessions}
    assert [t.input_tokens for t in by["a"].turns] == [2400, 3050, 1500]
    assert [t.input_tokens for t in by["b"].turns] == [8200, 8200 + 640 + 1200]
    assert by["b"].turns[1].think_s == 30.5 and by["b"].turns[1].send_at_s == 30.5
    assert by["a"].turns[1].hash_ids[:4] == by["a"].turns[0].hash_ids[:4]
    assert not set(by["a"].turns[2].hash_ids) & set(by["a"].turns[1].hash_ids)
    share = _conversation_share([[2400, 3050, 1500], [8200, 10040]], block)
    assert expected_hit_rate(sessions, block) == pytest.approx(share)
    out = tmp_path / "trace.jsonl"
    assert bench_main(["sessions-from-logs", str(logs), str(out), "--block-tokens", str(block)]) == 0
    back = read_trace(out, block)
    assert expected_hit_rate(back, block) == pytest.approx(share)
    assert [t.input_tokens for t in next(s for s in back if s.id == "b").turns] == [8200, 10040]


def test_a_logs_workload_converts_when_loaded():
    w = _workload(source="logs", path="chat-log-sample.csv")
    got = load_sessions(w, 0, context_tokens=131072)
    assert got == read_logs(workloads_dir() / "chat-log-sample.csv", 512)
    with pytest.raises(WorkloadFileError, match="session c-103 turn 2 needs 18360 tokens"):
        load_sessions(w, 0, context_tokens=18000, model="m")


def test_shipped_chat_log_sample_converts(tmp_path, capsys):
    out = tmp_path / "chat.jsonl"
    assert bench_main(["sessions-from-logs", str(workloads_dir() / "chat-log-sample.csv"), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 sessions, 10 turns" in printed and "expected prefix-cache hit rate" in printed
    assert len(read_trace(out, 512)) == 3


def test_bad_log_rows_name_the_line(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("conversation_id,prompt_tokens,output_tokens\nc,100,5\nc,lots,5\n")
    with pytest.raises(WorkloadFileError, match="log.csv line 3: prompt_tokens must be an integer"):
        read_logs(p, 512)
    p.write_text("conversation_id,output_tokens\nc,5\n")
    with pytest.raises(WorkloadFileError, match="line 2: give prompt_tokens .* or new_tokens"):
        read_logs(p, 512)
    with pytest.raises(SystemExit, match="log.csv line 2"):
        bench_main(["sessions-from-logs", str(p), str(tmp_path / "o.jsonl")])


# --- the synthetic generator and its fit ------------------------------------------------------------
SPEC = SyntheticSpec(
    sessions=3000,
    turns=Spread(mean=6, max=20),
    first_prompt_tokens=Spread(mean=4000, max=12000),
    new_tokens_per_turn=Spread(mean=500, max=1500),
    output_tokens=Spread(mean=250, max=800),
    think_s=Spread(mean=2, max=10),
    subagent_prob=0.15,
    subagent_turns=Spread(mean=3, max=6),
    block_tokens=256,
)


def test_generator_is_deterministic_and_meets_its_stated_means():
    small = SyntheticSpec(sessions=30)
    assert generate(small, 7) == generate(small, 7)
    assert generate(small, 7) != generate(small, 8)
    sessions = generate(SPEC, 1)
    top = [s for s in sessions if s.parent is None]
    subs = [s for s in sessions if s.parent is not None]
    assert len(top) == SPEC.sessions

    def mean(xs):
        return sum(xs) / len(xs)

    assert mean([len(s.turns) for s in top]) == pytest.approx(6, rel=0.04)
    assert mean([s.turns[0].input_tokens for s in top]) == pytest.approx(4000, rel=0.05)
    later = [t for s in sessions for t in s.turns[1:]]
    assert mean([t.new_tokens for t in later]) == pytest.approx(500, rel=0.05)
    assert mean([t.output_tokens for s in sessions for t in s.turns]) == pytest.approx(250, rel=0.05)
    assert mean([t.think_s for t in later]) == pytest.approx(2, rel=0.05)
    assert mean([len(s.turns) for s in subs]) == pytest.approx(3, rel=0.08)
    assert len(subs) / sum(len(s.turns) - 1 for s in top) == pytest.approx(0.15, abs=0.02)
    assert max(len(s.turns) for s in top) <= 20 and max(t.output_tokens for t in later) <= 800
    for s in sessions:  # every turn re-sends the context: prompt = previous prompt + output + new
        for prev, t in zip(s.turns, s.turns[1:], strict=False):
            assert t.input_tokens == prev.input_tokens + prev.output_tokens + t.new_tokens
            assert t.hash_ids[: prev.input_tokens // 256] == prev.hash_ids[: prev.input_tokens // 256]
            assert len(t.hash_ids) == -(-t.input_tokens // 256)
    by = {s.id: s for s in sessions}
    for s in subs:  # a subagent starts from its parent's context after the fork turn
        at = by[s.parent].turns[s.fork_after_turn - 1]
        assert s.turns[0].input_tokens == at.input_tokens + at.output_tokens + s.turns[0].new_tokens
        keep = at.input_tokens // 256
        assert s.turns[0].hash_ids[:keep] == at.hash_ids[:keep]


@pytest.mark.slow
def test_fit_recovers_the_generators_parameters(tmp_path):
    sessions = generate(SPEC, 3)
    write_trace(sessions, tmp_path / "g.jsonl")
    got = fit(read_trace(tmp_path / "g.jsonl", 256), 256)
    assert got.sessions == SPEC.sessions and got.block_tokens == 256
    for name in ("turns", "first_prompt_tokens", "new_tokens_per_turn", "output_tokens", "think_s", "subagent_turns"):
        stated, fitted = getattr(SPEC, name), getattr(got, name)
        assert fitted.mean == pytest.approx(stated.mean, rel=0.08), name
        assert stated.mean < fitted.max <= stated.max, name
        if name.endswith("tokens") or name == "think_s":  # ceilings the long tails reach
            assert fitted.max == pytest.approx(stated.max, rel=0.01), name
    assert got.subagent_prob == pytest.approx(SPEC.subagent_prob, abs=0.02)
    again = fit(generate(got, 4))  # the fitted spec generates sessions alike
    assert again.turns.mean == pytest.approx(got.turns.mean, rel=0.08)


def test_synthetic_workload_and_fit_from(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_WORKLOADS_DIR", str(tmp_path))
    write_trace(generate(SPEC, 5), tmp_path / "g.jsonl")
    w = _workload(sessions=50, fit_from="g.jsonl", block_tokens=256)
    got = load_sessions(w, 9)
    assert sum(s.parent is None for s in got) == 50
    assert load_sessions(w, 9) == got
    plain = load_sessions(_workload(sessions=20), 1)
    assert sum(s.parent is None for s in plain) == 20


# --- prompts from hash ids ------------------------------------------------------------------------
def test_prompt_is_exact_and_shares_exactly_the_stated_prefix():
    pb = PromptBlocks(64)
    a = pb.prompt([1, 2, 3], 150)
    assert tokens.count(a) == 150
    assert pb.prompt([1, 2, 3], 150) == a
    b = pb.prompt([1, 2, 4], 190)
    wa, wb = a.split(), b.split()
    assert len(wb) == 190
    assert wa[:128] == wb[:128] and wa[128] != wb[128]  # the third block differs from its first word
    c = pb.prompt([7, 2, 3], 150).split()
    assert c[0] != wa[0] and c[1:16] != wa[1:16]  # different ids differ in the first 16-token block
    assert PromptBlocks(64, seed=1).prompt([1, 2, 3], 150) != a  # another run, other words
    assert pb.prompt([1, 2, 3], 129).split() == wa[:129]  # the last block is cut, not rebuilt
    with pytest.raises(ValueError, match="needs 3 blocks"):
        pb.prompt([1, 2], 150)


def test_prompt_blocks_follow_a_fitted_tokenizer():
    more = {w: (2 if w in tokens.VOCAB[:20] else 1) for w in WORDS}
    first = {w: c + 1 for w, c in more.items()}  # a BOS token on the first word
    sizer = PromptSizer("tokenize", first, more, bias=2)
    pb = PromptBlocks(32, sizer)
    text = pb.prompt([5, 6], 50)
    words = text.split()
    assert sizer.cost(words) + sizer.bias == 50
    assert all(more[w] == 1 for w in words)
    assert pb.prompt([5, 6, 8], 80).split()[:32] == words[:32]
    assert PromptBlocks(32, PromptSizer.words()).prompt([5, 6], 50).split()[0].startswith("blk")


# --- expected hit rate ----------------------------------------------------------------------------
def _session(sid: str, *turns: tuple[int, tuple[int, ...]], start: float = 0.0) -> Session:
    out, t = [], start
    for il, ids in turns:
        out.append(Turn(il, il, 10, 0.0, ids, t))
        t += 1
    return Session(sid, start, tuple(out))


def test_expected_hit_rate_counts_server_blocks_as_vllm_does():
    s = _session("a", (1000, (0, 1)), (1500, (0, 1, 2)))
    # turn 2: 93 full server blocks may hit; block 0 cached whole (32), block 1 only its 30 full
    # server blocks of turn 1 (999 // 16 = 62), so 62 x 16 tokens hit
    assert expected_hit_rate([s], 512) == pytest.approx(62 * 16 / 2500)
    other = _session("b", (1000, (5, 1)), start=10)  # the same id after another prefix: no hit
    assert expected_hit_rate([s, other], 512) == pytest.approx(62 * 16 / 3500)
    exact = _session("c", (512, (0,)), (512, (0,)))
    assert expected_hit_rate([exact], 512) == pytest.approx(31 * 16 / 1024)  # the last token is computed


def test_a_small_cache_evicts_and_hits_less():
    sessions = generate(SyntheticSpec(sessions=30, subagent_prob=0.0), 2)
    full = expected_hit_rate(sessions, 512)
    assert 0.5 < full < 1
    assert expected_hit_rate(sessions, 512, capacity_blocks=10**9) == full
    assert expected_hit_rate(sessions, 512, capacity_blocks=500) < full
    assert expected_hit_rate(sessions, 512, capacity_blocks=0) == 0.0
    with pytest.raises(ValueError, match="multiple of 16"):
        expected_hit_rate(sessions, 500)


def test_the_plans_context_bound_holds_for_every_generated_session():
    block = Sessions(
        sessions=2000,
        turns={"mean": 3, "max": 4},
        first_prompt_tokens={"mean": 100, "max": 200},
        new_tokens_per_turn={"mean": 50, "max": 60},
        output_tokens={"mean": 20, "max": 25},
        subagent_prob=0.5,
        subagent_turns={"mean": 2, "max": 3},
        block_tokens=16,
        concurrent_sessions=[1],
    )
    peak, _ = block.peak_context()
    assert peak == 200 + (4 + 3 - 2) * 85 + 25
    sessions = generate(SyntheticSpec.of(block), 0)
    most = max(t.input_tokens + t.output_tokens for s in sessions for t in s.turns)
    assert 0.8 * peak < most <= peak


def test_a_trace_beyond_a_targets_context_stops_the_run_before_any_spend(tmp_path, monkeypatch, data_root):
    """start_run reads trace and log sessions against the tightest model context of the plan's targets."""
    import yaml

    from bakeoff.plan import load_plan
    from bakeoff.run import pipeline

    monkeypatch.setenv("BAKEOFF_WORKLOADS_DIR", str(tmp_path))
    long = 140_000  # beyond Llama 3.1's 131,072-token context
    _trace(
        tmp_path,
        [{"session_id": "s1", "timestamp": 0, "input_length": long, "output_length": 10, "hash_ids": list(range(274))}],
    )
    raw = load_plan("local-agentic").model_dump(mode="json")
    raw["workloads"][0]["sessions"] = {"source": "trace", "path": "t.jsonl", "concurrent_sessions": [2]}
    plan_file = tmp_path / "long-trace.yaml"
    plan_file.write_text(yaml.safe_dump(raw))
    with pytest.raises(WorkloadFileError, match="session s1 turn 1 needs 140010 tokens"):
        pipeline.start_run(str(plan_file), "manual__long")
    assert not (data_root / "results").exists() or not any((data_root / "results").rglob("plan.json"))
