"""Budget guard arithmetic, the kill-switch timer derived from it, the re-check before a re-provision,
and the measured evaluation cost."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from bakeoff import store
from bakeoff.bench.sessions.workload import load_sessions
from bakeoff.core.facts import RunFacts
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.run import pipeline, provisioning, teardown_steps
from bakeoff.spend import budget

P = budget.PREFILL_TOKEN_S


def tiny_plan(provider="aws", budget_usd=600.0, max_hours=3.0, instance_type=None, **quality):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [t for t in raw["targets"] if t["provider"] == "aws"]
    if instance_type and provider != "local":
        raw["targets"][0].update(instance_type=instance_type)
    if provider == "local":
        raw["targets"][0].update(provider="local", instance_type=instance_type or "BM.GPU.H200.8", provider_options={})
    raw["workloads"][0].update(concurrency=[4], requests_per_point=36, warmup_requests=4, output_len=100, repeats=1)
    raw["quality"]["accuracy"].update(quality)
    raw.update(budget_usd=budget_usd, max_instance_hours=max_hours)
    return plan_from_dict(raw)


def wave(c, in_len, out_len):
    """c prompts prefilled one after another, then c sequences decoding together."""
    return c * in_len * P + out_len * 0.05 * (1 + (c - 1) / 64)


# the accuracy gate by default: 200 builtin items (64-token prompts), 8 at a time, 16 tokens each
GATE_S = 25 * wave(8, 64, 16)
# the benchmark: 36 measured + 4 warm-up requests of 1024 in / 100 out at concurrency 4
BENCH_S = 9 * wave(4, 1024, 100) + 1 * wave(4, 1024, 100)


def test_estimate_by_hand():
    """An H200 target: no published calibration row, so the pessimistic model prices its serving time."""
    plan = tiny_plan(instance_type="p5en.48xlarge")
    t = plan.targets[0]
    # load: image pull 0.1 h + 70.6 B params x 1 byte (fp8) / 0.5 GB/s + engine start 0.15 h
    load_h = 0.1 + 70.6 / 0.5 / 3600 + 0.15
    hours = (0.25 + load_h + GATE_S / 3600 + BENCH_S / 3600) * 1.25
    est = budget.estimate(plan)
    row = est["targets"][0]
    assert row["bench_h"] == pytest.approx(BENCH_S / 3600, abs=1e-3) and row["gate_h"] == pytest.approx(
        GATE_S / 3600, abs=1e-3
    )
    assert row["hours"] == pytest.approx(hours, abs=1e-3)
    assert row["usd"] == pytest.approx(hours * t.usd_per_hour, abs=0.01)
    assert est["estimate_usd"] == row["usd"] and row["spends"] is True
    assert row["kill_switch_s"] == pytest.approx(hours * 3600, abs=2)
    assert budget.check(plan) == est | {"ceiling_usd": budget.DEFAULT_CEILING_USD}


def test_estimate_by_hand_with_the_twin():
    """A B200 target has calibration rows: its serving time is the twin's, with the twin's own margin."""
    from bakeoff.twin.target import TargetTwin, twin_for

    plan = tiny_plan()
    t = plan.targets[0]
    tw = twin_for(t)
    assert isinstance(tw, TargetTwin) and 0 < tw.margin < 3

    def twave(c, in_len, out_len):
        return c * in_len * tw.prefill_token_s() + out_len * tw.tpot_s(c, in_len, out_len)

    gate_s, bench_s = 25 * twave(8, 64, 16), 10 * twave(4, 1024, 100)
    load_h = 0.1 + 70.6 / 0.5 / 3600 + 0.15
    hours = (0.25 + load_h) * 1.25 + (gate_s + bench_s) / 3600 * (1 + tw.margin)
    row = budget.estimate(plan)["targets"][0]
    assert row["basis"].startswith("twin (b200") and row["serving_margin"] == pytest.approx(tw.margin, abs=1e-3)
    assert row["hours"] == pytest.approx(hours, abs=1e-3)
    assert row["usd_low"] < row["usd"] == pytest.approx(hours * t.usd_per_hour, abs=0.01)
    # the twin's serving time is far below the pessimistic model's for the same requests
    assert bench_s < BENCH_S / 5


def test_accuracy_gate_off_costs_nothing_and_lm_eval_counts_its_tasks():
    assert budget.gate_hours(tiny_plan(enabled=False)) == 0
    # gsm8k without a limit: its 1319 items, 2048-token few-shot prompts, at least 256 generated tokens
    lm = tiny_plan(backend="lm_eval", concurrency=8)
    assert budget.gate_hours(lm) * 3600 == pytest.approx(165 * wave(8, 2048, 256))
    limited = tiny_plan(backend="lm_eval", concurrency=8, lm_eval_limit=16, lm_eval_tasks=["gsm8k", "other"])
    assert budget.gate_hours(limited) * 3600 == pytest.approx(4 * wave(8, 2048, 256))


def test_local_targets_price_the_hardware_but_boot_and_load_nothing():
    row = budget.estimate(tiny_plan("local"))["targets"][0]
    assert row["boot_h"] == 0 and row["load_h"] == 0 and row["spends"] is False
    assert row["hours"] == pytest.approx((GATE_S + BENCH_S) / 3600 * 1.25, abs=1e-3)


def test_over_cap_is_refused_with_the_breakdown():
    with pytest.raises(budget.BudgetExceeded) as e:
        budget.check(tiny_plan(budget_usd=10))
    msg = str(e.value)
    assert msg.startswith("budget_usd:") and "b200-vllm" in msg and "USD/h" in msg and "Raise budget_usd" in msg
    assert "accuracy gate" in msg


def test_kill_switch_never_exceeds_max_instance_hours_and_too_long_is_refused():
    plan = tiny_plan(max_hours=0.5)
    assert budget.kill_switch_s(plan, plan.targets[0]) == 0.5 * 3600
    with pytest.raises(budget.BudgetExceeded, match="max_instance_hours"):
        budget.check(plan)


def test_guard_price_is_never_below_list():
    plan = tiny_plan()
    raw = plan.model_dump(mode="json")
    raw["targets"][0]["price"] = {"usd_per_hour": 0.0001}
    cheap = plan_from_dict(raw)
    assert cheap.targets[0].usd_per_hour == 0.0001  # what the cost report uses
    assert budget.guard_usd_per_hour(cheap.targets[0]) == 113.9328  # what the guard budgets
    raw["targets"][0]["price"] = {"usd_per_hour": 150.0}  # a contract above list counts in full
    assert budget.guard_usd_per_hour(plan_from_dict(raw).targets[0]) == 150.0


def test_unpriced_instance_is_guarded_at_the_dearest_offer_of_its_gpu():
    raw = tiny_plan("local").model_dump(mode="json")
    raw["targets"][0].update(instance_type="gpu-mi355x8-2304gb-spot", price={"usd_per_hour": 0.01})
    t = plan_from_dict(raw).targets[0]
    # mi355x offers: OCI 68.8 / 8 GPUs, Vultr 2.59 per GPU -> 8.6 per GPU x 8
    assert budget.guard_usd_per_hour(t) == pytest.approx(68.8)


def test_open_loop_and_sla_workloads_by_hand():
    plan = tiny_plan()
    t = plan.targets[0]
    raw = plan.model_dump(mode="json")
    base = dict(raw["workloads"][0], output_len=100, warmup_requests=0)
    raw["workloads"] = [
        # open loop: 20 arrivals at 2/s take 10 s, but 20 requests in flight take one wave of 20
        dict(base, name="rate", load="rate", rates=[2.0], requests_per_point=20),
        # the same capped at 2 in flight: 10 waves of 2 outlast the arrivals
        dict(base, name="rate2", load="rate", rates=[2.0], requests_per_point=20, max_concurrency=2),
        # SLA search: 4 probes, each at most one point at the top load: 16 / 8 = 2 waves of 8
        dict(
            base,
            name="sla",
            load="sla",
            concurrency=[1, 8],
            requests_per_point=16,
            sla={"over": "concurrency", "start": 1, "max": 8, "max_probes": 4},
        ),
    ]
    rate = max(10 + 1024 * P + 100 * 0.05 * (1 + 19 / 64), wave(20, 1024, 100))
    rate2 = max(10 + 1024 * P + 100 * 0.05 * (1 + 1 / 64), 10 * wave(2, 1024, 100))
    sla = 4 * 2 * wave(8, 1024, 100)
    assert budget.bench_hours(plan_from_dict(raw), t) * 3600 == pytest.approx(rate + rate2 + sla)


def test_decode_slows_as_concurrency_grows():
    assert budget.decode_token_s(1) == budget.TOKEN_S
    assert budget.decode_token_s(65) == pytest.approx(2 * budget.TOKEN_S)
    # a point at 64 concurrent requests lasts longer than 16 points at 4 with the same request count
    raw = tiny_plan().model_dump(mode="json")
    raw["workloads"][0].update(concurrency=[64], requests_per_point=640, warmup_requests=0)
    wide = budget.bench_hours(plan_from_dict(raw), None)
    raw["workloads"][0].update(concurrency=[4])
    narrow = budget.bench_hours(plan_from_dict(raw), None)
    assert wide * 16 > narrow


def test_record_measured_cost(data_root):
    plan = tiny_plan()
    rdir = store.run_dir(plan.name, "r1")
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    store.record(rdir, store.START, {"run_id": "r1"})
    store.record(rdir, "provision", {"launched_at": 1000.0}, slug="b200-vllm")
    store.record(rdir, "terminate", {"terminated_at": 1000.0 + 1800}, slug="b200-vllm")
    doc = budget.record_measured_cost(rdir, plan)
    assert doc["usd"] == pytest.approx(0.5 * plan.targets[0].usd_per_hour, abs=0.01)
    assert json.loads((rdir / "evaluation_cost.json").read_text())["usd"] == doc["usd"]
    assert store.run_facts(rdir).evaluation_cost.usd == doc["usd"]


def test_weights_download_is_budgeted_from_the_checkpoint_size():
    t = tiny_plan().targets[0]  # Llama 3.1 70B in FP8: 70.6 B params x 1 byte
    assert budget.checkpoint_gb(t) == pytest.approx(70.6)
    assert budget.download_hours(t) == pytest.approx(70.6 / budget.WEIGHTS_GBPS / 3600)
    assert budget.load_hours(t) == pytest.approx(budget.IMAGE_PULL_H + budget.download_hours(t) + budget.ENGINE_START_H)
    row = budget.estimate(tiny_plan())["targets"][0]
    assert row["download_h"] == pytest.approx(70.6 / 0.5 / 3600, abs=1e-3) and row["checkpoint_gb"] == 70.6
    assert "hf_transfer" in budget.WEIGHTS_GBPS_SOURCE  # the assumed rate keeps its source
    with pytest.raises(budget.BudgetExceeded) as e:
        budget.check(tiny_plan(budget_usd=10))
    assert "weights 70.6 GB" in str(e.value) and f"at {budget.WEIGHTS_GBPS} GB/s" in str(e.value)
    assert budget.download_hours(tiny_plan("local").targets[0]) == 0  # an emulator downloads nothing


def test_measured_cost_attributes_the_weights_download_and_load(data_root):
    plan = tiny_plan()
    rdir = store.run_dir(plan.name, "r2")
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    store.record(rdir, store.START, {"run_id": "r2"})
    store.record(rdir, "provision", {"launched_at": 1000.0}, slug="b200-vllm")
    store.record(rdir, "terminate", {"terminated_at": 1000.0 + 3600}, slug="b200-vllm")
    weights = {"source": "hub", "download_s": 600.0, "load_s": 300.0, "ok": True}
    store.write_json(rdir / "target=b200-vllm" / "deploy.json", {"ready": True, "weights": weights})
    doc = budget.record_measured_cost(rdir, plan)
    row = doc["targets"][0]
    price = plan.targets[0].usd_per_hour
    assert row["weights_s"] == 900.0 and row["weights_usd"] == pytest.approx(0.25 * price)
    assert doc["usd"] == pytest.approx(price, abs=0.01)  # inside the held hours, not added on top


def test_recheck_counts_spend_so_far_and_what_remains():
    plan = load_plan("mi355x-vs-b200-sandbox")
    a, b = plan.targets
    now = 100_000.0
    records = {
        a.slug: {
            "provision": {"tries": [{"launched_at": now - 3600, "ended_at": now - 1800}]},
            "terminate": {"terminated_at": now - 1800},
        },
        b.slug: {"provision": {"launched_at": now - 900}},  # still running
    }
    out = budget.recheck(plan, a.slug, RunFacts.from_records({}, records), now=now)
    pa, pb = budget.guard_usd_per_hour(a), budget.guard_usd_per_hour(b)
    spent = 0.5 * pa + 0.25 * pb
    remaining = budget.target_hours(plan, a) * pa + (budget.target_hours(plan, b) - 0.25) * pb
    assert out["spent_usd"] == pytest.approx(spent, abs=0.01)
    assert out["total_usd"] == pytest.approx(spent + remaining, abs=0.01)
    records[b.slug]["provision"]["launched_at"] = now - 20 * 3600  # b has been up 20 h
    with pytest.raises(budget.BudgetExceeded, match=rf"^budget_usd: launching {a.name} again"):
        budget.recheck(plan, a.slug, RunFacts.from_records({}, records), now=now)


def test_the_recheck_and_the_measured_cost_charge_every_launch_alike(data_root):
    """A target cleared and retried billed both launches: 1,000-1,500 s and 2,000-2,600 s is 1,100 s,
    in the re-provision re-check and in the report's measured cost (which once counted the last only)."""
    plan = tiny_plan()
    slug = plan.targets[0].slug
    rdir = store.run_dir(plan.name, "r-two")
    store.write_json(rdir / "plan.json", plan.model_dump(mode="json"))
    store.record(rdir, store.START, {"run_id": "r-two", "targets": {slug: {"name": plan.targets[0].name}}})
    tries = [
        {"instance_id": "i-1", "launched_at": 1000.0, "ended_at": 1500.0},
        {"instance_id": "i-2", "launched_at": 2000.0},
    ]
    store.record(rdir, "provision", {"instance_id": "i-2", "launched_at": 2000.0, "tries": tries}, slug=slug)
    store.record(rdir, "terminate", {"instances": ["i-1", "i-2"], "terminated_at": 2600.0}, slug=slug)
    facts = store.run_facts(rdir).target(slug)
    assert facts.billed_seconds(now=10_000.0) == pytest.approx(1100.0)
    assert facts.running_since() is None and facts.last_ended_at() == 2600.0
    row = budget.evaluation_cost(plan, rdir).iloc[0]
    assert row["instance_hours"] == pytest.approx(1100 / 3600)
    assert row["launched_at"] == 1000.0 and row["terminated_at"] == 2600.0 and not row["still_running"]
    price = budget.guard_usd_per_hour(plan.targets[0])
    assert budget.recheck(plan, slug, store.run_facts(rdir), now=10_000.0)["spent_usd"] == pytest.approx(
        round(1100 / 3600 * price, 2)
    )


def test_reprovision_after_a_clear_is_rechecked_before_any_cloud_call(
    rest_creds, fake_clouds, data_root, tmp_path, monkeypatch
):
    """provision -> terminate -> provision again (a cleared task) passes and records both launches;
    once the earlier launch has billed past the cap, a third try is refused before any cloud call."""
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [t for t in raw["targets"] if t["provider"] == "vultr"]
    raw["targets"][0]["provider_options"]["client_mode"] = "remote"
    raw.update(name="recheck", budget_usd=60)
    (tmp_path / "recheck.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("BAKEOFF_PLANS", str(tmp_path))
    creds = lambda name: rest_creds(name) if name == "vultr" else {}  # noqa: E731
    run = pipeline.start_run("recheck", f"manual__recheck_{time.time_ns()}")
    rdir, slug = run["run_dir"], run["targets"][0]
    first = provisioning.provision(rdir, slug, credentials=creds)
    teardown_steps.terminate(rdir, slug, first, credentials=creds)
    second = provisioning.provision(rdir, slug, credentials=creds)
    prov = store.read_record(rdir, "provision", slug)
    tries = prov["tries"]
    assert [t["instance_id"] for t in tries] == [first["id"], second["id"]] and tries[0]["ended_at"]
    teardown_steps.terminate(rdir, slug, second, credentials=creds)
    # the first node, it turns out, billed four hours before it was terminated
    tries[0]["launched_at"] -= 4 * 3600
    store.record(rdir, "provision", prov, slug=slug)
    before = fake_clouds.vultr.requests
    with pytest.raises(budget.BudgetExceeded, match=r"^budget_usd: launching mi355x-vllm again .* over the cap of 60"):
        provisioning.provision(rdir, slug, credentials=creds)
    assert fake_clouds.vultr.requests == before


def test_session_workloads_by_hand():
    """Closed loop at one session: every turn prefilled twice over (its own and the queue's, the
    pessimistic wave), decoded at decode_token_s(1), plus its think time; duration_s caps the
    measured sessions; open loop lasts at least until the last arrival."""
    plan = tiny_plan()
    t = plan.targets[0]
    raw = plan.model_dump(mode="json")
    block = {"sessions": 5, "subagent_prob": 0.0, "turns": {"mean": 3, "max": 5}, "concurrent_sessions": [1]}
    raw["workloads"] = [{"name": "agents", "kind": "sessions", "sessions": block}]
    one = plan_from_dict(raw)
    turns = [x for s in load_sessions(one.workloads[0], one.workloads[0].seed) for x in s.turns]
    by_hand = sum(2 * x.input_tokens * P + x.output_tokens * budget.TOKEN_S + x.think_s for x in turns)
    assert budget.bench_hours(one, t) * 3600 == pytest.approx(by_hand)
    raw["workloads"][0]["sessions"] = dict(block, duration_s=5.0)
    assert budget.bench_hours(plan_from_dict(raw), t) * 3600 < min(by_hand, 5.0 + 60)
    raw["workloads"][0]["sessions"] = dict(block, concurrent_sessions=[], session_rates=[0.01])
    assert budget.bench_hours(plan_from_dict(raw), t) * 3600 >= 5 / 0.01
