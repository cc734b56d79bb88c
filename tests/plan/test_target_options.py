"""Target options of today's deployments (FP4 formats, checkpoints, EP, speculative decoding, KV offload,
weights): what the GPU, engine and model cannot run is refused before any spend, naming the field and the fix."""

from __future__ import annotations

import pytest

from bakeoff import catalog
from bakeoff.plan import PlanError, plan_from_dict
from bakeoff.plan.precision import COMPUTE_DTYPE, QUANT_BYTES


def _plan(**overrides) -> dict:
    target = {
        "name": "t",
        "provider": "local",
        "instance_type": "BM.GPU.MI355X.8",
        "stack": "sglang",
        "model": "glm-5.2",
        "quantization": "mxfp4",
        "tensor_parallel": 8,
    }
    target.update(overrides)
    return {
        "name": "options",
        "budget_usd": 500,
        "targets": [target],
        "workloads": [{"name": "w", "input_len": 1024, "output_len": 128, "concurrency": [4]}],
    }


def _ok(**overrides):
    return plan_from_dict(_plan(**overrides)).targets[0]


def _error(**overrides) -> str:
    with pytest.raises(PlanError) as e:
        plan_from_dict(_plan(**overrides), source="bad.yaml")
    return str(e.value)


def test_fp4_formats_have_their_own_bytes_and_compute_dtype():
    assert QUANT_BYTES["nvfp4"] == 0.5625 and QUANT_BYTES["mxfp4"] == 0.53125
    assert COMPUTE_DTYPE["nvfp4"] == COMPUTE_DTYPE["mxfp4"] == "fp4"
    assert "fp4" not in QUANT_BYTES


def test_old_fp4_is_refused_with_the_two_formats():
    msg = _error(quantization="fp4")
    assert "targets[0].quantization" in msg and "nvfp4 (NVIDIA Blackwell FP4)" in msg and "mxfp4" in msg


def test_nvfp4_on_mi355x_names_what_it_runs_and_the_mxfp4_checkpoint():
    msg = _error(quantization="nvfp4")
    assert "quantization: MI355X runs bf16, fp8, mxfp4" in msg
    assert "amd/GLM-5.2-MXFP4" in msg


def test_checkpoint_format_must_match_quantization():
    msg = _error(checkpoint="nvidia/GLM-5.2-NVFP4")
    assert "checkpoint:" in msg and "nvfp4 checkpoint but quantization is mxfp4" in msg


def test_checkpoint_id_and_served_model_follow_the_catalog():
    t = _ok()
    assert t.checkpoint_id == t.served_model_id == catalog.models()["glm-5.2"].checkpoints["mxfp4"]
    t = _ok(instance_type="BM.GPU.B200.8", quantization="nvfp4")
    assert t.checkpoint_id == "nvidia/GLM-5.2-NVFP4"
    assert _ok(checkpoint="amd/GLM-5.2-MXFP4-Preview").checkpoint_id == "amd/GLM-5.2-MXFP4-Preview"


def test_expert_parallel_must_divide_the_gpus_used():
    assert _ok(expert_parallel=8).expert_parallel == 8
    msg = _error(expert_parallel=3)
    assert "expert_parallel: 3 must divide the 8 GPUs" in msg and "[1, 2, 4, 8]" in msg
    assert "expert_parallel" in _error(tensor_parallel=2, expert_parallel=4)


def test_tp_beyond_the_node_is_refused():
    assert "exceeds the 8 GPUs" in _error(tensor_parallel=16)


def test_speculative_method_the_engine_does_not_run():
    msg = _error(stack="atom", speculative={"method": "eagle3", "draft_model": "someone/GLM-5.2-EAGLE3"})
    assert "speculative.method: the atom stack does not run eagle3" in msg and "mtp" in msg


def test_speculative_draft_the_model_does_not_ship():
    msg = _error(speculative={"method": "eagle3"})
    assert "speculative.method: glm-5.2 ships no eagle3 draft (it ships: mtp)" in msg
    t = _ok(speculative={"method": "eagle3", "draft_model": "someone/GLM-5.2-EAGLE3"})
    assert t.speculative and t.speculative.draft_model == "someone/GLM-5.2-EAGLE3"


def test_pinned_acceptance_uses_the_golden_curve_or_the_given_value():
    t = _ok(speculative={"method": "mtp", "num_speculative_tokens": 3, "acceptance": "pinned"})
    assert t.pinned_acceptance_length == 2.99
    t = _ok(speculative={"method": "mtp", "acceptance": "pinned", "acceptance_length": 2.5})
    assert t.pinned_acceptance_length == 2.5
    assert _ok(speculative={"method": "mtp"}).pinned_acceptance_length is None
    msg = _error(speculative={"method": "mtp", "num_speculative_tokens": 12, "acceptance": "pinned"})
    assert "speculative.acceptance_length" in msg and "give acceptance_length" in msg
    assert "num_speculative_tokens + 1" in _error(
        speculative={"method": "mtp", "num_speculative_tokens": 2, "acceptance": "pinned", "acceptance_length": 3.5}
    )


def test_golden_curves_carry_source_and_date():
    assert catalog.golden_acceptance_length("glm-5.2", 3) == 2.99
    assert catalog.golden_acceptance_length("deepseek-v4-pro", 2, "thinking_off", method="mtp") == 2.61
    assert catalog.golden_acceptance_length("glm-5.2", 3, method="eagle3") is None
    for curves in catalog.golden_al()["models"].values():
        for curve in curves.values():
            assert curve["run"].startswith("https://github.com/SemiAnalysisAI/InferenceX/actions/runs/")
            assert curve["as_of"] and curve["source_file"].startswith("golden_al_distribution/")


def test_kv_offload_backend_the_engine_lacks():
    assert _ok(kv_offload={"backend": "hicache", "host_memory_gb": 1000}).kv_offload
    msg = _error(kv_offload={"backend": "vllm_native", "host_memory_gb": 1000})
    assert "kv_offload.backend: the sglang stack has no vllm_native offload" in msg and "hicache" in msg
    assert "host_memory_gb" in _error(kv_offload={"backend": "hicache", "host_memory_gb": 0})


def test_weights_mirror_must_name_an_aws_connection():
    t = _ok(weights={"s3_mirror": "s3://aws_weights@my-weights/hf"})
    assert t.weights.mirror_parts == ("aws_weights", "my-weights", "hf")
    assert t.weights.cache_dir == "/mnt/nvme/hf-cache" and t.weights.download_timeout_s == 7200
    msg = _error(weights={"s3_mirror": "s3://huggingface_default@bucket/x"})
    assert "weights.s3_mirror" in msg and "aws_" in msg
    assert "s3://<connection id>@<bucket>/<prefix>" in _error(weights={"s3_mirror": "https://bucket/x"})
    assert "weights.cache_dir" in _error(weights={"cache_dir": "/mnt/../etc"})
