"""Software-support matrix from what a run's steps left on disk."""

from __future__ import annotations

import json

import pytest
from fake_completions import FakeCompletions
from quality_fixtures import make_plan, write_run

from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.quality import accuracy
from bakeoff.quality.support import support_matrix
from bakeoff.quality.validate import validate_run
from bakeoff.store import write_json


@pytest.mark.slow
def test_matrix_shows_a_working_target_and_an_oom_deploy(tmp_path):
    plan = make_plan(accuracy={"eval_size": 20})
    ok_t, oom_t = plan.targets
    write_run(tmp_path, plan, skip={(oom_t.slug, c, r) for c in (1, 2) for r in (0, 1)})
    ok_dir, oom_dir = tmp_path / f"target={ok_t.slug}", tmp_path / f"target={oom_t.slug}"
    for d in (ok_dir, oom_dir):
        write_json(d / "instance.json", {"id": "i-1", "state": "running"})
    write_json(ok_dir / "deploy.json", {"ready": True, "failure": None})
    write_json(oom_dir / "deploy.json", {"ready": False, "failure": "oom", "detail": "HIP out of memory"})
    with FakeCompletions() as srv:
        ep = Endpoint(target=ok_t.slug, base_url=srv.base_url, model="m", stack="vllm", emulated=True)
        write_json(ok_dir / "endpoint.json", ep.to_dict())
        accuracy.run_gate(ep, None, ok_t, plan, ok_dir)

    before = {r["slug"]: r for r in support_matrix(plan, tmp_path)}
    assert before[ok_t.slug]["accuracy"] == "not judged" and before[ok_t.slug]["gx"] == "not validated"

    validate_run(plan, tmp_path)
    rows = support_matrix(plan, tmp_path)
    assert [r["gpu"] for r in rows] == sorted(r["gpu"] for r in rows)
    by = {r["slug"]: r for r in rows}
    good, bad = by[ok_t.slug], by[oom_t.slug]
    assert (good["gpu"], good["stack"], good["model"], good["quantization"]) == (
        ok_t.gpu.name,
        "vllm",
        "llama-3.1-70b",
        "fp8",
    )
    assert good["deployed"] and good["ready"] and good["failure"] is None
    assert good["accuracy"] == "pass" and good["accuracy_score"] == 1.0
    assert good["gx"] == "pass" and good["gx_failures"] == []
    assert bad["deployed"] and not bad["ready"] and bad["failure"] == "oom"
    assert bad["accuracy"] == "not run" and bad["accuracy_score"] is None
    assert bad["gx"] == "fail" and bad["gx_failures"][0].startswith("no results")


def test_matrix_for_a_target_that_never_launched(tmp_path):
    plan = make_plan(accuracy={"enabled": False})
    rows = support_matrix(plan, tmp_path)
    assert len(rows) == 2
    for r in rows:
        assert not r["deployed"] and not r["ready"] and r["failure"] is None
        assert r["accuracy"] == "disabled" and r["gx"] == "not validated"


def test_matrix_names_the_checkpoint_speculative_decoding_and_kv_offload(tmp_path):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    amd, nv = (next(t for t in raw["targets"] if t["provider"] == p) for p in ("vultr", "aws"))
    glm = {"model": "glm-5.2", "tensor_parallel": 8}
    amd |= glm | {
        "stack": "atom",
        "quantization": "mxfp4",
        "kv_offload": {"backend": "lmcache", "host_memory_gb": 1600},
    }
    nv |= glm | {
        "stack": "trtllm",
        "quantization": "nvfp4",
        "speculative": {"method": "mtp", "acceptance": "pinned", "acceptance_length": 2.99},
    }
    raw["targets"] = [amd, nv]
    rows = {r["stack"]: r for r in support_matrix(plan_from_dict(raw), tmp_path)}
    assert json.loads(json.dumps(list(rows.values()))) == list(rows.values())  # JSON-able, as the report stores it
    atom, trt = rows["atom"], rows["trtllm"]
    assert (atom["checkpoint"], atom["quantization"]) == ("amd/GLM-5.2-MXFP4", "mxfp4")
    assert atom["speculative"] is None and atom["kv_offload"] == "lmcache 1600 GB"
    assert (trt["checkpoint"], trt["quantization"]) == ("nvidia/GLM-5.2-NVFP4", "nvfp4")
    assert trt["speculative"] == "mtp k=3 pinned AL 2.99" and trt["kv_offload"] is None
