"""Vendored InferenceX recipes: each is a dated, sourced target template a plan can name and override."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bakeoff import catalog
from bakeoff.cli import main
from bakeoff.plan import PlanError, Target, plan_from_dict, recipes

ROOT = Path(__file__).resolve().parents[2]
# recipes whose draft or KV tier bakeoff's rendering of that engine does not (yet) run: refused, naming the field
REFUSED_FIELDS = ("speculative.method", "kv_offload.backend")


def _plan(**target) -> dict:
    return {
        "name": "recipe-plan",
        "budget_usd": 500,
        "targets": [{"name": "t", "provider": "local", **target}],
        "workloads": [{"name": "w", "input_len": 1024, "output_len": 128, "concurrency": [4]}],
    }


def test_snapshot_is_sourced_dated_and_licensed():
    src = recipes.source()
    assert src["repo"] == "SemiAnalysisAI/InferenceX" and re.fullmatch(r"[0-9a-f]{40}", src["commit"])
    assert src["date"] == "2026-08-21" and src["licence"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "include/bakeoff/recipes/LICENSE-inferencex.txt").read_text()
    rs = recipes.recipes()
    assert len(rs) >= 40
    assert {r.gpu for r in rs.values()} == {"mi355x", "b200", "b300"}
    assert {r.engine for r in rs.values()} >= {"sglang", "vllm", "atom", "trtllm"}
    for r in rs.values():
        assert r.source_file in ("configs/amd-master.yaml", "configs/nvidia-master.yaml")
        assert r.script and r.script.startswith("benchmarks/single_node/") and r.script.endswith(".sh")
        assert r.model in catalog.models() and r.concurrency == sorted(r.concurrency)
        assert r.scenario == "agentic-coding" or (r.isl and r.osl)


def test_fp4_is_mxfp4_on_amd_and_nvfp4_on_nvidia_unless_the_checkpoint_is_mx():
    rs = recipes.recipes()
    assert rs["glm5.2-fp4-mi355x-sglang-mtp-agentic"].precision == "mxfp4"
    assert rs["glm5.2-fp4-b200-sglang-mtp-agentic"].precision == "nvfp4"
    assert rs["glm5.2-fp4-b200-sglang-mtp-agentic"].checkpoint == "nvidia/GLM-5.2-NVFP4"
    assert all(r.precision != "fp4" for r in rs.values())


@pytest.mark.parametrize("provider", ["local", "oci"])
def test_every_recipe_validates_or_is_refused_before_spend(provider):
    refused = {}
    for name in recipes.recipes():
        try:
            t = Target.model_validate({"name": "t", "provider": provider, "recipe": name})
        except ValueError as e:
            refused[name] = str(e)
            assert any(f in str(e) for f in REFUSED_FIELDS), (name, str(e))
            continue
        assert t.recipe == name and t.instance.gpu == recipes.recipes()[name].gpu
        assert t.instance.provider == "oci"  # the catalog's bare-metal node for the GPU
    assert len(refused) <= 8, refused


def test_plan_with_name_provider_recipe_only_validates_and_keeps_provenance():
    plan = plan_from_dict(_plan(recipe="glm5.2-fp4-mi355x-sglang"))
    t = plan.targets[0]
    assert t.recipe == "glm5.2-fp4-mi355x-sglang-mtp-agentic"  # the short name resolves
    assert (t.stack, t.model, t.quantization, t.checkpoint_id) == ("sglang", "glm-5.2", "mxfp4", "amd/GLM-5.2-MXFP4")
    assert t.instance_type == "BM.GPU.MI355X.8" and t.tensor_parallel == 4 and t.expert_parallel == 4
    assert t.speculative and t.speculative.method == "mtp" and t.kv_offload and t.kv_offload.backend == "hicache"
    assert "--dsa-decode-backend" in t.engine_args and t.image and "sglang" in t.image
    # the recorded plan keeps the recipe and round-trips
    again = plan_from_dict(plan.model_dump(mode="json"))
    assert again.targets[0].recipe == t.recipe and again.targets[0].engine_args == t.engine_args


def test_plan_fields_override_the_recipe():
    t = plan_from_dict(
        _plan(
            recipe="glm5.2-fp4-b200-sglang-mtp-agentic",
            tensor_parallel=4,
            engine_args=["--mem-fraction-static", "0.80"],
            speculative={"method": "mtp", "num_speculative_tokens": 2, "acceptance": "pinned"},
        )
    ).targets[0]
    assert t.tensor_parallel == 4 and t.engine_args == ["--mem-fraction-static", "0.80"]
    assert t.pinned_acceptance_length == 2.50  # golden GLM-5.2 MTP curve at k=2, thinking on
    assert t.quantization == "nvfp4" and t.instance_type == "BM.GPU.B200.8"


def test_cloud_provider_gets_its_own_instance_for_the_recipe_gpu():
    raw = _plan(recipe="glm5.2-fp4-b200-sglang-mtp-agentic")
    raw["targets"][0]["provider"] = "aws"
    t = plan_from_dict(raw).targets[0]
    assert t.instance.provider == "aws" and t.instance.gpu == "b200"


def test_unknown_recipe_lists_close_matches_and_the_count():
    with pytest.raises(PlanError) as e:
        plan_from_dict(_plan(recipe="glm5.2-fp4-mi355x-sglng"), source="bad.yaml")
    msg = str(e.value)
    assert "targets[0]" in msg and "recipe:" in msg and "glm5.2-fp4-mi355x-sglang-mtp-agentic" in msg
    assert f"{len(recipes.recipes())} recipes" in msg


def test_vendor_script_reproduces_the_committed_snapshot(tmp_path):
    ref = tmp_path / "ix"
    (ref / "configs").mkdir(parents=True)
    committed = yaml.safe_load((ROOT / "include/bakeoff/recipes/inferencex.yaml").read_text())
    # a miniature checkout: two keys in InferenceX's own format, one kept and one skipped (multinode)
    (ref / "configs/amd-master.yaml").write_text(
        yaml.safe_dump(
            {
                "glm5.2-fp4-mi355x-sglang-agentic-mtp": {
                    "image": "lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-20260728",
                    "model": "amd/GLM-5.2-MXFP4",
                    "model-prefix": "glm5.2",
                    "runner": "cluster:mi355x-amds",
                    "precision": "fp4",
                    "framework": "sglang",
                    "multinode": False,
                    "scenarios": {
                        "agentic-coding": [
                            {
                                "dram-utilization": 0.8,
                                "search-space": [
                                    {"tp": 4, "ep": 4, "kv-offloading": "dram",
                                     "kv-offload-backend": {"name": "hicache"},
                                     "conc-list": [1, 2, 4, 8, 10, 12, 16], "spec-decoding": "mtp"},
                                    {"tp": 8, "ep": 8, "kv-offloading": "none", "conc-list": [1, 2, 4],
                                     "spec-decoding": "mtp"},
                                ],
                            }
                        ]
                    },
                },
                "dsr1-fp4-mi355x-sglang-disagg": {"model-prefix": "dsr1", "runner": "mi355x", "multinode": True},
            }
        )
    )  # fmt: skip
    (ref / "configs/nvidia-master.yaml").write_text("{}\n")
    out = tmp_path / "out.yaml"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/vendor_recipes.py"), str(ref), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "wrote 1 recipes" in done.stdout
    got = yaml.safe_load(out.read_text())["recipes"]
    name = "glm5.2-fp4-mi355x-sglang-mtp-agentic"
    assert list(got) == [name] and got[name] == committed["recipes"][name]


def test_cli_lists_and_shows_with_the_rendered_command(capsys):
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == [
        "recipe",
        "model",
        "gpu",
        "engine",
        "precision",
        "spec",
        "kv",
        "offload",
        "tp",
        "image",
    ]
    assert "glm5.2-fp4-mi355x-sglang-mtp-agentic" in out and f"{len(recipes.recipes())} recipes" in out
    assert "floating" in out
    assert main(["recipes", "show", "glm5.2-fp4-b200-sglang-mtp-agentic"]) == 0
    out = capsys.readouterr().out
    assert "configs/nvidia-master.yaml" in out and "benchmarks/single_node/agentic/" in out
    command = next(line for line in out.splitlines() if line.startswith("command: "))
    assert "nvidia/GLM-5.2-NVFP4" in command and "--speculative-num-steps 3" in command
    assert "SGLANG_TIMEOUT_KEEP_ALIVE=900" in out


def test_cli_bad_name_exits_2_with_close_matches(capsys):
    assert main(["recipes", "show", "glm5.2-fp4-b200-sglag"]) == 2
    err = capsys.readouterr().err
    assert "glm5.2-fp4-b200-sglang-mtp-agentic" in err and "recipes are vendored" in err
