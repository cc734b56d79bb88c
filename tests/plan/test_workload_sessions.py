"""Session workloads in a plan: the sessions block's fields, bad combinations named with their fix, and
a synthetic session that cannot fit the model's context refused at plan load with the numbers."""

from __future__ import annotations

import pytest

from bakeoff.plan import PlanError, apply_overrides, plan_from_dict
from bakeoff.plan.workload import Workload, rate_key


def _plan(sessions: dict | None = None, model: str = "llama-3.1-70b", **workload) -> dict:
    w = {"name": "agents", "kind": "sessions", "sessions": {"concurrent_sessions": [4, 16], **(sessions or {})}}
    w.update(workload)
    return {
        "name": "agentic",
        "budget_usd": 100,
        "targets": [
            {
                "name": "t",
                "provider": "local",
                "instance_type": "BM.GPU.B200.8",
                "stack": "vllm",
                "model": model,
                "quantization": "fp8",
                "tensor_parallel": 8,
            }
        ],
        "workloads": [w],
    }


def _error(raw: dict) -> str:
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="bad.yaml")
    return str(e.value)


def test_a_session_workload_loads_with_stated_defaults_and_keys():
    plan = plan_from_dict(_plan())
    w = plan.workloads[0]
    assert w.kind == "sessions" and w.sessions.source == "synthetic" and w.sessions.block_tokens == 512
    assert w.levels() == [4, 16] and w.planned_keys() == [4, 16]
    rates = plan_from_dict(_plan({"concurrent_sessions": [], "session_rates": [0.5, 2]})).workloads[0]
    assert rates.planned_keys() == [rate_key(0.5), rate_key(2)]
    again = apply_overrides(plan, {"budget_usd": 50})  # a dump and re-validation keeps the workload valid
    assert again.workloads[0] == w
    assert Workload(name="plain").kind == "requests" and Workload(name="plain").sessions is None


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        (_plan(sessions=None, kind="requests"), ["workloads[0]", "sessions: only for kind sessions"]),
        ({**_plan(), "workloads": [{"name": "a", "kind": "sessions"}]}, ["sessions: required when kind"]),
        (_plan(input_len=4096), ["input_len: not used by kind sessions"]),
        (_plan(concurrency=[1, 2]), ["concurrency: not used by kind sessions"]),
        (_plan({"block_tokens": 500}), ["block_tokens", "not a multiple of 16", "512"]),
        (_plan({"session_rates": [1.0]}), ["give exactly one of concurrent_sessions", "session_rates"]),
        (_plan({"concurrent_sessions": []}), ["give exactly one of concurrent_sessions"]),
        (_plan({"concurrent_sessions": [0]}), ["level 0 is outside"]),
        (_plan({"source": "trace"}), ["path: required when source is 'trace'"]),
        (_plan({"path": "x.jsonl"}), ["path: only for source trace or logs"]),
        (_plan({"source": "logs", "path": "l.csv", "fit_from": "t.jsonl"}), ["fit_from: only for source synthetic"]),
        (_plan({"source": "trace", "path": "../etc/passwd"}), ["workloads[0].sessions.path", "relative"]),
        (_plan({"fit_from": "/abs/t.jsonl"}), ["workloads[0].sessions.fit_from", "relative"]),
        (_plan({"turns": {"mean": 9, "max": 4}}), ["turns", "mean (9) must not exceed max (4)"]),
        (_plan({"warmup_sessions": -1}), ["warmup_sessions"]),
        (_plan({"subagent_prob": 1.5}), ["subagent_prob"]),
    ],
)
def test_bad_session_blocks_name_the_field_and_the_fix(raw, fragments):
    msg = _error(raw)
    for f in fragments:
        assert f in msg, msg


def test_a_synthetic_session_beyond_the_context_is_refused_with_the_numbers():
    big = {"turns": {"mean": 30, "max": 60}, "new_tokens_per_turn": {"mean": 1000, "max": 3000}}
    msg = _error(_plan(big))
    # 16000 + 59 x (3000 + 1000) + 1000 with subagents off would be 253000; a subagent adds 8 - 1 turns
    assert "workloads[0].sessions: a synthetic session may reach 281000 tokens" in msg
    assert "131072-token context of llama-3.1-70b (target t)" in msg and "lower turns.max" in msg
    plan = plan_from_dict(_plan({**big, "subagent_prob": 0}, model="glm-5.2"))  # a 1M-token context
    assert plan.workloads[0].sessions.peak_context()[0] == 16000 + 59 * 4000 + 1000
    fitted = _plan({**big, "fit_from": "t.jsonl"})  # fitted sessions are checked when the trace is read
    assert plan_from_dict(fitted).workloads[0].sessions.fit_from == "t.jsonl"
