"""The budget guard holds against whoever writes a plan or fills in the trigger form.

Each test is an attempt that passed the guard before: a contract price of 0.0001 (trigger form or
price sheet) on nodes the cloud bills at list, a cap of inf or 1e9, unbounded hours, concurrency,
lengths, rates and request counts, workloads whose cost hides in prefill, in concurrency or in the
accuracy gate, and a cleared task re-provisioning a run that has already spent its budget.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import time

import pytest

from bakeoff import store
from bakeoff.plan import PlanError, apply_overrides, load_plan, plan_from_dict
from bakeoff.plan.prices import apply_price_sheet
from bakeoff.run import pipeline, provisioning
from bakeoff.spend import budget
from bakeoff.spend.budget import BudgetExceeded
from tests.conftest import ROOT

PLAN = "mi355x-vs-b200"  # two list-priced nodes: about 330 USD at list
PENNY = 0.0001


@pytest.fixture(autouse=True)
def images_trusted(monkeypatch):
    """These tests are about money: the plan's gated-model targets ask for the hub token with the stack's
    floating tags, which start_run refuses after the budget check (tests/security/test_secrets_trust.py)."""
    from bakeoff import installation

    monkeypatch.setattr(installation, "check_secret_images", lambda plan, trusted: None)


@pytest.fixture
def no_cloud():
    """A credentials resolver that fails the test if any step it is passed to reaches for a cloud."""

    def touched(name):
        raise AssertionError(f"a cloud ({name}) was reached although the guard should have refused")

    return touched


def _runs(data_root):
    return sorted(data_root.rglob("steps/start.json")) if data_root.exists() else []


def aws_raw(**workload) -> dict:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [t for t in raw["targets"] if t["provider"] == "aws"]
    raw["workloads"][0].update(workload)
    return raw


# --- prices -----------------------------------------------------------------------------------------


def test_trigger_form_penny_price_does_not_pass_a_list_priced_plan(data_root, no_cloud):
    prices = {t.name: PENNY for t in load_plan(PLAN).targets}
    with pytest.raises(BudgetExceeded, match=r"^budget_usd: estimated spend") as e:
        pipeline.start_run(PLAN, "manual__penny", {"prices": prices, "budget_usd": 1})
    assert "113.9328 USD/h" in str(e.value) and "at least at its catalog list price" in str(e.value)
    assert _runs(data_root) == []  # refused: nothing recorded, nothing started


def test_price_sheet_penny_price_does_not_pass_either(data_root, no_cloud):
    sheet = {"source": "forged", "prices": {t.instance_type: {"usd_per_hour": PENNY} for t in load_plan(PLAN).targets}}
    with pytest.raises(BudgetExceeded, match=r"^budget_usd: estimated spend"):
        pipeline.start_run(PLAN, "manual__sheet", {"budget_usd": 1}, price_sheet=sheet)
    assert _runs(data_root) == []


def test_penny_price_still_lands_in_the_cost_report():
    plan = apply_overrides(load_plan(PLAN), {"prices": {"b200-vllm": PENNY}})
    t = plan.target("b200-vllm")
    assert t.usd_per_hour == PENNY and budget.guard_usd_per_hour(t) == t.instance.usd_per_hour


@pytest.mark.parametrize("price", [float("inf"), 1e9])
def test_absurd_price_in_a_price_sheet_is_refused(price):
    sheet = {"prices": {"p6-b200.48xlarge": {"usd_per_hour": price}}}
    with pytest.raises(PlanError, match=r"targets\[1\]\.price\.usd_per_hour"):
        apply_price_sheet(load_plan(PLAN), sheet)


# --- the cap ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", ["inf", float("inf"), "1e999", "lots", 1e9, 5000])
def test_trigger_cap_is_finite_bounded_and_under_the_ceiling(cap, data_root, no_cloud):
    with pytest.raises((PlanError, BudgetExceeded), match="budget_usd") as e:
        pipeline.start_run(PLAN, "manual__cap", {"budget_usd": cap})
    if cap == 5000:
        assert "ceiling of 1000 USD" in str(e.value) and budget.CEILING_VARIABLE in str(e.value)
    assert _runs(data_root) == []


def test_the_installation_ceiling_is_what_allows_a_larger_cap(data_root, no_cloud):
    run = pipeline.start_run(PLAN, "manual__ceiling", {"budget_usd": 5000}, budget_ceiling_usd="10000")
    assert store.run_facts(run["run_dir"]).start.budget.ceiling_usd == 10000
    with pytest.raises(BudgetExceeded, match="ceiling of 500 USD"):
        pipeline.start_run(PLAN, "manual__ceiling2", None, budget_ceiling_usd="500")  # the plan's 600 is too much


def test_without_airflow_the_ceiling_comes_from_the_environment(data_root, no_cloud, monkeypatch):
    monkeypatch.setenv(budget.CEILING_ENV, "10000")
    pipeline.start_run(PLAN, "manual__env_ceiling", {"budget_usd": 5000})
    with pytest.raises(BudgetExceeded, match="ceiling of 2000 USD"):  # the Variable, when set, wins
        pipeline.start_run(PLAN, "manual__env_ceiling2", {"budget_usd": 5000}, budget_ceiling_usd="2000")


@pytest.mark.parametrize("ceiling", ["inf", "nan", "-5", "0", "1e9", "a lot", True])
def test_a_broken_ceiling_variable_refuses_rather_than_opens(ceiling, data_root, no_cloud):
    with pytest.raises(BudgetExceeded, match=rf"^{budget.CEILING_VARIABLE}: .* set the Airflow Variable"):
        pipeline.start_run(PLAN, "manual__bad_ceiling", None, budget_ceiling_usd=ceiling)
    assert _runs(data_root) == []


# --- plan fields --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, where",
    [
        ("budget_usd", float("inf"), "budget_usd"),
        ("budget_usd", 1e9, "budget_usd"),
        ("max_instance_hours", float("inf"), "max_instance_hours"),
        ("max_instance_hours", 1e9, "max_instance_hours"),
        ("workloads.0.concurrency", [4, 1_000_000], "workloads[0].concurrency"),
        ("workloads.0.requests_per_point", 10**9, "workloads[0].requests_per_point"),
        ("workloads.0.warmup_requests", 10**9, "workloads[0].warmup_requests"),
        ("workloads.0.input_len", 10**9, "workloads[0].input_len"),
        ("workloads.0.input_len", 130_500, "workloads[0].input_len"),  # + 1024 output > the 131072 context
        ("workloads.0.max_point_s", float("inf"), "workloads[0].max_point_s"),
        ("workloads.0.rates", [1e12], "workloads[0].rates"),
        ("workloads.0.sla", {"over": "concurrency", "start": 1, "max": 1e6}, "workloads[0].sla.max"),
        ("targets.0.price", {"usd_per_hour": float("inf")}, "targets[0].price.usd_per_hour"),
        ("quality.accuracy.lm_eval_limit", 10**9, "quality.accuracy.lm_eval_limit"),
        ("slo.ttft_p99_ms", float("inf"), "slo.ttft_p99_ms"),
    ],
)
def test_unbounded_plan_numbers_are_refused_naming_the_field(field, value, where):
    raw = copy.deepcopy(load_plan(PLAN).model_dump(mode="json"))
    *path, last = field.split(".")
    node = raw
    for p in path:
        node = node[int(p)] if p.isdigit() else node[p]
    node[last] = value
    if last == "rates":
        raw["workloads"][0]["load"] = "rate"
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="bad.yaml")
    assert where in str(e.value)


# --- what the estimate covers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "attempt",
    [
        # prefill: 6400 prompts of 120k tokens, one token out (decode alone: about a minute)
        dict(input_len=120_000, output_len=16, concurrency=[64], requests_per_point=6400, warmup_requests=0),
        # decode: 2 x 100k requests of 4k output tokens at 2048 and 4096 in flight, more than the KV cache
        # holds: hours of decode even at the calibrated twin's rate (over 100k tokens/s per B200 node)
        dict(input_len=128, output_len=4096, concurrency=[2048, 4096], requests_per_point=100_000, warmup_requests=0),
    ],
)
def test_long_prompts_and_high_concurrency_are_priced(attempt, no_cloud):
    plan = plan_from_dict(aws_raw(**attempt))
    with pytest.raises(BudgetExceeded, match="^(budget_usd|max_instance_hours):"):
        budget.check(plan)


def test_a_trace_of_simultaneous_requests_is_priced_as_the_work_it_is(tmp_path, monkeypatch):
    """Every request at t = 0: the replay's last offset is 0, but the server still has all of them to serve."""
    monkeypatch.setenv("BAKEOFF_WORKLOADS_DIR", str(tmp_path))
    (tmp_path / "burst.jsonl").write_text(
        "".join(json.dumps({"timestamp": 0, "input_len": 100, "output_len": 60_000}) + "\n" for _ in range(1024))
    )
    plan = plan_from_dict(aws_raw(load="trace", trace_path="burst.jsonl"))
    with pytest.raises(BudgetExceeded, match="^(budget_usd|max_instance_hours):"):
        budget.check(plan)


def test_the_accuracy_gate_is_priced():
    raw = aws_raw(concurrency=[4], requests_per_point=8, warmup_requests=0)
    raw["quality"]["accuracy"].update(eval_size=10000, max_tokens=512, concurrency=1)
    with pytest.raises(BudgetExceeded, match="accuracy gate"):
        budget.check(plan_from_dict(raw))


# --- re-provisioning ----------------------------------------------------------------------------


def test_a_cleared_provision_rechecks_the_spend_so_far(data_root, no_cloud):
    """A node of this run was launched 30 h ago and never recorded as terminated: launching the
    target again is refused before any cloud call."""
    run = pipeline.start_run("mi355x-vs-b200-sandbox", "manual__cleared")
    slug = run["targets"][0]
    store.record(run["run_dir"], "provision", {"instance_id": "i-1", "launched_at": time.time() - 30 * 3600}, slug=slug)
    with pytest.raises(BudgetExceeded, match=r"^budget_usd: launching .* again would bring this run to"):
        provisioning.provision(run["run_dir"], slug, credentials=no_cloud)


# --- the trigger form -----------------------------------------------------------------------------


def _params():
    spec = importlib.util.spec_from_file_location("bakeoff_dag_params", ROOT / "dags" / "bakeoff_dag.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.PARAMS


def test_trigger_form_bounds_match_the_plan_fields():
    from bakeoff.plan import Plan
    from bakeoff.plan.options import PriceOverride
    from bakeoff.plan.slo import Slo

    def le(model, field):
        return next(m.le for m in model.model_fields[field].metadata if getattr(m, "le", None) is not None)

    params = _params()
    assert params["budget_usd"].schema["maximum"] == le(Plan, "budget_usd") == budget.MAX_BUDGET_USD
    top = le(PriceOverride, "usd_per_hour")  # the form's lines carry no bound: the plan's refuses it, naming it
    with pytest.raises(PlanError, match="b200-vllm"):
        apply_overrides(load_plan(PLAN), {"prices": [f"b200-vllm = {top * 10:g}"]})
    for name in ("ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"):
        assert params[name].schema["maximum"] == le(Slo, name)


@pytest.mark.parametrize(
    "name, value",
    [
        ("budget_usd", 1e9),
        ("prices", ["b200-vllm = -1"]),
        ("prices", ["b200-vllm = cheap"]),
        ("prices", ["b200-vllm: 40 USD"]),
        ("ttft_p99_ms", 1e12),
    ],
)
def test_trigger_form_refuses_out_of_range_values(name, value):
    from airflow.sdk.definitions.param import ParamValidationError

    param = copy.deepcopy(_params()[name])
    with pytest.raises(ParamValidationError):
        param.resolve(value)


def test_the_twin_bounds_what_a_plan_at_its_limits_can_make_it_compute():
    """Every plan number at its ceiling: predict and the estimate still finish quickly with finite
    figures (bisection over the batch, Little's law capped at MAX_LITTLE_ITER), and the guard refuses."""
    import math
    import time

    from bakeoff.plan.workload import MAX_CONCURRENCY, MAX_LEVELS, MAX_RATE, MAX_REQUESTS
    from bakeoff.prediction.predict import predict_plan

    levels = sorted({max(1, MAX_CONCURRENCY * (i + 1) // MAX_LEVELS) for i in range(MAX_LEVELS)})
    raw = aws_raw(concurrency=levels, requests_per_point=MAX_REQUESTS, warmup_requests=0)
    raw["workloads"].append(
        {**raw["workloads"][0], "name": "flood", "load": "rate", "rates": [MAX_RATE], "concurrency": [1]}
    )
    plan = plan_from_dict(raw)
    start = time.perf_counter()
    doc = predict_plan(plan)
    assert time.perf_counter() - start < 10
    points = [p for t in doc["targets"] for w in t["workloads"] for p in w["points"]]
    assert points and all(math.isfinite(p["tpot_ms"]) and p["tokens_s_per_gpu"] > 0 for p in points)
    assert any(p["kv_bound"] for p in points)  # beyond what the KV cache holds, requests wait
    with pytest.raises(BudgetExceeded, match="^(budget_usd|max_instance_hours):"):
        budget.check(plan)
