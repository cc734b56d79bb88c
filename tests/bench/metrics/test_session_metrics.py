"""Session and server-side point figures: the metric definitions on hand-made turns, and a
measured run through run_workload against the roofline emulator (prefix cache and speculative
decoding counters read back from its /metrics)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from bakeoff.bench.metrics.summary import binned_ms, session_figures, tpot_by_position
from bakeoff.plan import Slo, Workload
from tests.bench.emulated_runs import emulated_target, run_points


def _turn(root, sid, turn, n_turns, ttft=0.1, ctx=1000, unc=100, error=None, warm=False):
    return {
        "session_id": sid,
        "session_root": root,
        "session_turns": n_turns,
        "turn": turn,
        "context_tokens": ctx,
        "uncached_tokens_expected": unc,
        "ttft": ttft,
        "e2e": ttft + 0.5,
        "output_tokens": 11,
        "error_kind": error,
        "warmup": warm,
        "start_offset": float(turn),
        "elapsed": 0.6,
    }


def test_session_figures_count_whole_good_and_cut_sessions():
    slo = Slo(ttft_p99_ms=200)
    rows = [
        *(_turn("a", "a", t, 2) for t in range(2)),  # completed, good
        _turn("a", "a.k", 0, 1),  # its subagent: the session counts once, with it
        _turn("b", "b", 0, 2, ttft=0.5),  # completed, one turn too slow: not good
        _turn("b", "b", 1, 2),
        _turn("c", "c", 0, 3),  # cut: 1 of 3 turns sent
        _turn("d", "d", 0, 1, error="http_5xx"),  # answered with an error: neither completed nor cut
    ]
    f = session_figures(rows, slo, duration=10.0)
    assert (f["sessions_completed"], f["sessions_cut"]) == (2, 1)
    assert f["session_goodput_sps"] == pytest.approx(1 / 10.0)
    assert f["sessions_per_hour"] == pytest.approx(2 * 360.0) and f["turns_per_hour"] == pytest.approx(6 * 360.0)
    assert f["turns_per_session_mean"] == pytest.approx(7 / 4)
    assert math.isnan(f["ttft_ms_per_1k_uncached"])  # one uncached length: no slope
    (b,) = json.loads(f["ttft_by_context"])
    assert (b["lo"], b["hi"], b["n"]) == (0, 1024, 6)


def test_request_points_have_no_session_figures_and_slope_is_per_1k_tokens():
    f = session_figures([{"ttft": 0.1}], None, 1.0)
    assert f["ttft_by_context"] is None and math.isnan(f["sessions_completed"])
    rows = [_turn("a", "a", 0, 2, ttft=0.010 + u * 2e-5, unc=u) for u in (0, 1000, 2000)]
    assert session_figures(rows, None, 1.0)["ttft_ms_per_1k_uncached"] == pytest.approx(20.0)


def test_binned_summaries_and_tpot_by_position():
    got = json.loads(binned_ms([(0, 0.001), (1500, 0.002), (1500, 0.004), (2_000_000, 0.1)], (0, 1024, 2048)))
    assert [(b["lo"], b["hi"], b["n"]) for b in got] == [(0, 1024, 1), (1024, 2048, 2), (2048, None, 1)]
    assert got[1]["p50_ms"] == pytest.approx(3.0)
    rows = [{"chunk_offsets": [0.0, 0.01, 0.02] + [0.02 + 0.05 * i for i in range(1, 20)]}]
    pos = json.loads(tpot_by_position(rows))
    assert [b["lo"] for b in pos] == [2, 17] and pos[0]["n"] == 15 and pos[1]["n"] == 6
    assert pos[1]["p50_ms"] == pytest.approx(50.0)
    assert json.loads(tpot_by_position([{"chunk_offsets": [0.0]}])) == []


@pytest.mark.slow
def test_request_points_carry_the_servers_spec_acceptance(emulator, tmp_path):
    draft = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    t = emulated_target(
        speculative={"method": "eagle3", "draft_model": draft, "acceptance": "pinned", "acceptance_length": 2.5}
    )
    w = Workload(name="w", input_len=64, output_len=64, concurrency=[4], requests_per_point=12, warmup_requests=0)
    (p,) = run_points(emulator(t), t, w, tmp_path)
    assert p["server_metrics_source"] == "vllm-counters"
    assert p["spec_acceptance_length"] == pytest.approx(2.5, abs=0.25)
    assert 0 < p["spec_acceptance_rate"] < 1 and p["prefix_cache_hit_rate"] is not None


@pytest.mark.slow
def test_session_points_measure_the_emulators_hit_rate_beside_the_trace(emulator, tmp_path):
    t = emulated_target()
    sessions = {
        "sessions": 6,
        "turns": {"mean": 3, "max": 4},
        "first_prompt_tokens": {"mean": 800, "max": 1500},
        "new_tokens_per_turn": {"mean": 100, "max": 300},
        "output_tokens": {"mean": 8, "max": 16},
        "think_s": {"mean": 0.02, "max": 0.1},
        "concurrent_sessions": [2, 6],
        "warmup_sessions": 1,
    }
    w = Workload(name="agent", kind="sessions", sessions=sessions)
    pts = run_points(emulator(t), t, w, tmp_path)
    assert [p["concurrency"] for p in pts] == [2, 6] and all(p["load_mode"] == "sessions" for p in pts)
    for p in pts:
        assert p["sessions_completed"] == 5 and p["sessions_cut"] == 0 and p["session_goodput_sps"] > 0
        assert p["prefix_cache_hit_rate"] == pytest.approx(p["prefix_cache_hit_rate_expected"], abs=0.01)
        assert p["prefix_cache_hit_rate"] > 0.3
    # each point's prompts are new text: the second point's first turns miss the cache again
    turns = pd.read_parquet(tmp_path / "requests" / "agent-c6-r0.parquet")
    assert turns["warmup"].sum() > 0 and turns["session_id"].notna().all()
    assert (turns["prompt_tokens"] == turns["context_tokens"]).all()
