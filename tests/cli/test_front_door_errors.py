"""What a new user meets when a plan is wrong: one line naming the file, the field path with its index and
the valid choices for that place, never a traceback."""

from __future__ import annotations

import copy

import pytest
import yaml

from bakeoff.cli import main
from bakeoff.plan import PlanError, load_plan, plan_from_dict, plans_dir
from bakeoff.plan.prices import market_mismatches


@pytest.fixture
def demo_raw() -> dict:
    return yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())


@pytest.fixture
def oci_raw() -> dict:
    return yaml.safe_load((plans_dir() / "mi355x-vs-b200-oci.yaml").read_text())


def _error(raw: dict) -> str:
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="mine.yaml")
    return str(e.value)


def _check(tmp_path, raw: dict | str, capsys) -> tuple[int, str]:
    path = tmp_path / "mine.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    rc = main(["plan", "check", str(path)])
    return rc, capsys.readouterr().err


def test_an_unknown_field_lists_the_keys_its_place_accepts(demo_raw):
    demo_raw["slo"]["ttft_p97_ms"] = 300
    demo_raw["targets"][1]["emulator"]["time_scal"] = 1
    msg = _error(demo_raw)
    slo = next(line for line in msg.splitlines() if "ttft_p97_ms" in line)
    assert "unknown" in slo and "ttft_p95_ms" in slo and "tpot_p99_ms" in slo
    emu = next(line for line in msg.splitlines() if "targets[1].emulator.time_scal" in line)
    assert "valid keys here:" in emu and "time_scale" in emu and "ttft_p99_ms" not in emu


def test_an_unknown_instance_type_lists_only_the_targets_cloud(oci_raw):
    oci_raw["targets"][1]["instance_type"] = "BM.GPU.B999.8"
    line = next(x for x in _error(oci_raw).splitlines() if "targets[1].instance_type" in x)
    assert "unknown instance type 'BM.GPU.B999.8' on oci" in line and "BM.GPU.B200.8" in line
    assert "p6-b200.48xlarge" not in line and "vbm-" not in line  # other clouds' types are no choice here


def test_another_clouds_type_names_the_field_and_this_clouds_types(oci_raw):
    oci_raw["targets"][0]["instance_type"] = "p5.48xlarge"
    line = next(x for x in _error(oci_raw).splitlines() if "targets[0]" in x)
    assert "targets[0].instance_type: p5.48xlarge is sold by aws, not oci" in line
    assert "BM.GPU.MI355X.8" in line and "p6-b200.48xlarge" not in line


def test_malformed_yaml_names_the_file_and_line_not_a_unicode_string(tmp_path, capsys):
    rc, err = _check(tmp_path, "name: x\ntargets: [\n  - a: b\n", capsys)
    assert rc == 2 and err.startswith("error: mine.yaml: not valid YAML: line 3, column 3:")
    assert "<unicode string>" not in err and "Traceback" not in err


@pytest.mark.parametrize("field", ["trace_path", "source_path"])
def test_a_missing_workload_file_is_one_line_naming_the_workload(demo_raw, tmp_path, capsys, field):
    w = demo_raw["workloads"][0]
    w.update({"load": "trace", "trace_path": "nope.jsonl"} if field == "trace_path" else {})
    w.update({"source": "jsonl", "source_path": "nope.jsonl"} if field == "source_path" else {})
    rc, err = _check(tmp_path, demo_raw, capsys)
    assert rc == 2 and "Traceback" not in err
    assert err.startswith(f"error: mine.yaml: workloads[0].{field}: no file 'nope.jsonl'")
    for command in (["predict"], ["run", "--plan"]):  # the same line wherever the plan is read first
        assert main([*command, str(tmp_path / "mine.yaml")]) == 2
        assert f"workloads[0].{field}: no file 'nope.jsonl'" in capsys.readouterr().err


def test_a_spot_priced_target_in_an_on_demand_plan_warns():
    plan = load_plan("mi355x-vs-b200")  # its Vultr MI355X row is a spot offer
    (warning,) = market_mismatches(plan)
    assert warning.startswith("targets[0] (mi355x-vllm): priced from a spot offer")
    assert "pricing.market is on_demand" in warning and "market: on_demand" in warning
    raw = plan.model_dump(mode="json", exclude_none=True)
    on_spot = copy.deepcopy(raw)
    on_spot["pricing"]["market"] = "spot"
    assert [w for w in market_mismatches(plan_from_dict(on_spot)) if "targets[0]" in w] == []
    priced = copy.deepcopy(raw)
    priced["targets"][0]["price"] = {"usd_per_hour": 30.0, "market": "on_demand"}
    assert market_mismatches(plan_from_dict(priced)) == []


def test_plan_check_prints_the_market_warning(demo_raw, tmp_path, capsys):
    demo_raw["targets"][0]["instance_type"] = "vbm-256c-3072gb-8-mi355x-gpu"  # the emulator on a spot-priced MI355X
    path = tmp_path / "spot.yaml"
    path.write_text(yaml.safe_dump(demo_raw))
    assert main(["plan", "check", str(path)]) == 0
    assert "warning: targets[0] (mi355x-vllm): priced from a spot offer" in capsys.readouterr().out
