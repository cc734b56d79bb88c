"""Plan loading: the shipped plans are valid; bad plans fail with the field and the fix named."""

from __future__ import annotations

import copy

import pytest
import yaml

from bakeoff.plan import PlanError, apply_overrides, load_plan, plan_from_dict, plans_dir


@pytest.fixture
def demo_raw() -> dict:
    return yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())


@pytest.mark.parametrize("name", sorted(p.stem for p in plans_dir().glob("*.yaml")))
def test_shipped_plans_are_valid(name):
    plan = load_plan(name)
    assert plan.targets and plan.workloads
    for t in plan.targets:
        assert t.usd_per_hour > 0
        assert t.gpus_used <= t.instance.gpus * t.nodes  # a cluster target uses every GPU of its nodes


def test_demo_compares_mi355x_with_b200_like_for_like():
    plan = load_plan("local-demo")
    assert {t.gpu.name for t in plan.targets} == {"mi355x", "b200"}
    assert len({t.model for t in plan.targets}) == 1
    assert all(t.provider == "local" for t in plan.targets) and plan.emulated


def _error(raw) -> str:
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="bad.yaml")
    return str(e.value)


def test_unknown_gpu_instance_names_field_and_choices(demo_raw):
    demo_raw["targets"][1]["instance_type"] = "BM.GPU.MI999X.8"
    msg = _error(demo_raw)
    assert "targets[1].instance_type" in msg and "unknown instance type 'BM.GPU.MI999X.8'" in msg
    assert "BM.GPU.MI355X.8" in msg  # the fix: a list of known types


def test_missing_price_names_the_override(demo_raw):
    demo_raw["targets"][0]["instance_type"] = "gpu-mi355x8-2304gb-spot"  # catalog has no price for it
    msg = _error(demo_raw)
    assert "targets[0]" in msg and "price.usd_per_hour" in msg
    demo_raw["targets"][0]["price"] = {"usd_per_hour": 30.0}
    assert plan_from_dict(demo_raw).targets[0].usd_per_hour == 30.0


def test_negative_concurrency(demo_raw):
    demo_raw["workloads"][0]["concurrency"] = [1, -4]
    msg = _error(demo_raw)
    assert "workloads[0].concurrency" in msg and "-4" in msg


def test_typo_and_missing_fields(demo_raw):
    raw = copy.deepcopy(demo_raw)
    raw["targets"][0]["tensor_paralel"] = 8
    del raw["budget_usd"]
    msg = _error(raw)
    assert "targets[0].tensor_paralel: unknown field" in msg
    assert "budget_usd: required field is missing" in msg


def test_tensor_parallel_beyond_node(demo_raw):
    demo_raw["targets"][0]["tensor_parallel"] = 16
    assert "exceeds the 8 GPUs" in _error(demo_raw)


def test_duplicate_target_names(demo_raw):
    demo_raw["targets"][1]["name"] = demo_raw["targets"][0]["name"]
    assert "targets must be unique" in _error(demo_raw)


def test_not_yaml(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("targets: [unclosed")
    with pytest.raises(PlanError, match="broken.yaml: not valid YAML"):
        load_plan(f)


def test_overrides_subset_slo_prices_budget():
    plan = load_plan("local-demo")
    out = apply_overrides(
        plan,
        {
            "targets": ["b200-vllm"],
            "slo": {"ttft_p99_ms": 250, "tpot_p50_ms": None},
            "prices": {"b200-vllm": 55.5},
            "budget_usd": 80,
            "utilisation": 0.6,
        },
    )
    assert [t.name for t in out.targets] == ["b200-vllm"]
    assert out.slo.ttft_p99_ms == 250 and out.slo.tpot_p99_ms == plan.slo.tpot_p99_ms
    assert out.targets[0].usd_per_hour == 55.5 and "override" in out.targets[0].price_source
    assert out.budget_usd == 80 and out.pricing.utilisation == 0.6


def test_overrides_reject_unknown_target():
    with pytest.raises(PlanError, match="not in plan local-demo"):
        apply_overrides(load_plan("local-demo"), {"targets": ["h100-trt"]})
    with pytest.raises(PlanError, match="prices.nope"):
        apply_overrides(load_plan("local-demo"), {"prices": {"nope": 3}})


def test_length_interval_conventions():
    plan = load_plan("local-demo")
    w = plan.workloads[0].model_copy(update={"range_ratio": 0.5, "input_len": 1000})
    assert w.length_bounds(1000) == (500, 1000)
    assert w.model_copy(update={"length_interval": "vllm"}).length_bounds(1000) == (500, 1500)


def test_slug_makes_hostile_names_safe(demo_raw):
    demo_raw["targets"][0]["name"] = "<script>alert(1)</script>"
    plan = plan_from_dict(demo_raw)
    assert plan.targets[0].slug == "script-alert-1-script"


@pytest.mark.parametrize(
    "name,refused",
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("VLLM_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DOCKER_PASSWORD", True),
        ("VLLM_MAX_NUM_BATCHED_TOKENS", False),
        ("HF_HUB_ENABLE_HF_TRANSFER", False),
    ],
)
def test_env_names_that_hold_secrets_point_to_secrets(demo_raw, name, refused):
    """A secret in env would be stored in plan.json, deploy.json and reports; tuning variables pass."""
    demo_raw["targets"][0]["env"] = {name: "v"}
    if refused:
        assert f"targets[0].env: env.{name} looks like a secret" in _error(demo_raw) and "secrets:" in _error(demo_raw)
    else:
        assert plan_from_dict(demo_raw).targets[0].env == {name: "v"}
