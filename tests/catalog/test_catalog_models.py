"""Today's models in the catalog: their KV sizing by attention kind (checked by hand), that they fit the GPUs
the InferenceX recipes put them on, and what the roofline makes of FP4, MoE, sparse attention and drafts.

Catalog figures used: B200 179 GiB usable, B300 268 GiB usable, MI355X 288 GB, 8 TB/s each.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bakeoff.catalog import ModelSpec, gpus, models
from bakeoff.plan import Target
from bakeoff.twin.roofline import Roofline

TODAY = ["glm-5.2", "deepseek-v4-pro", "qwen3.5-397b-a17b", "minimax-m3", "kimi-k3"]
BASELINES = ["gpt-oss-120b", "llama-3.1-70b", "llama-3.1-8b", "llama-3.1-405b", "deepseek-r1"]


def target(instance_type: str, model: str, quantization: str, tp: int, **kw) -> Target:
    return Target(
        name=f"{model}-{quantization}-tp{tp}",
        provider="local",
        instance_type=instance_type,
        model=model,
        quantization=quantization,
        kv_cache_dtype="fp8",
        tensor_parallel=tp,
        **kw,
    )


def test_every_model_has_a_source_date_and_its_recipe_checkpoints():
    catalog = models()
    for name in TODAY + BASELINES:
        m = catalog[name]
        assert m.source and m.as_of, name
    assert catalog["glm-5.2"].checkpoints == {
        "fp8": "zai-org/GLM-5.2-FP8",
        "mxfp4": "amd/GLM-5.2-MXFP4",
        "nvfp4": "nvidia/GLM-5.2-NVFP4",
    }
    assert catalog["minimax-m3"].speculative == {"eagle3": "Inferact/MiniMax-M3-EAGLE3"}
    assert catalog["kimi-k3"].speculative == {"dspark": "Inferact/Kimi-K3-DSpark"}
    assert catalog["glm-5.2"].speculative == {"mtp": "native"}
    assert catalog["deepseek-v4-pro"].speculative["dspark"] == "deepseek-ai/DeepSeek-V4-Pro-0813"


def test_kv_bytes_per_token_by_attention_kind():
    m = models()
    # gqa: 2 x 80 layers x 8 heads x 128 x 2 bytes
    assert m["llama-3.1-70b"].kv_bytes_per_token(2) == 327_680
    # mla: 61 layers x (512 latent + 64 rope) x 2 bytes; one latent, no separate V
    assert m["deepseek-r1"].kv_bytes_per_token(2) == 70_272
    # dsa stores what mla stores: 78 x 576 x 1 byte (fp8)
    assert m["glm-5.2"].kv_bytes_per_token(1) == 44_928
    # hybrid gqa: only the 15 full-attention layers: 2 x 15 x 2 heads x 256 x 2 bytes
    assert m["qwen3.5-397b-a17b"].kv_bytes_per_token(2) == 30_720
    # hybrid mla: only the 24 MLA layers: 24 x 576 x 2 bytes
    assert m["kimi-k3"].kv_bytes_per_token(2) == 27_648
    # compressed (CSA/HCA): 61 x 576 x 2 / 10
    assert m["deepseek-v4-pro"].kv_bytes_per_token(2) == pytest.approx(7_027.2)


def test_sparse_attention_reads_index_topk_tokens():
    m = models()
    assert m["glm-5.2"].kv_read_tokens(1000) == 1000
    assert m["glm-5.2"].kv_read_tokens(200_000) == 2048
    assert m["minimax-m3"].kv_read_tokens(500_000) == 2048
    assert m["deepseek-r1"].kv_read_tokens(200_000) == 200_000  # dense MLA reads it all
    assert m["qwen3.5-397b-a17b"].kv_read_tokens(200_000) == 200_000


def test_dsa_reads_fewer_kv_bytes_than_mla_at_long_context():
    glm = target("BM.GPU.B200.8", "glm-5.2", "nvfp4", 8)
    r = Roofline.for_target(glm)
    contexts = [200_000] * 8
    as_mla = sum(contexts)
    as_dsa = sum(r.kv_read_tokens(c) for c in contexts)
    assert as_dsa == 8 * 2048
    dsa_s = r.step_s(0, 8, as_mla, kv_read_tokens=as_dsa)
    mla_s = r.step_s(0, 8, as_mla)
    # MLA reads 1.6M tokens x 44,928 B = 71.9 GB of KV; DSA reads 16,384 x 44,928 B = 0.74 GB; the weights read
    # (the 8 tokens' experts) are the same, so the steps differ by exactly the KV not read
    assert dsa_s < mla_s
    assert mla_s - dsa_s == pytest.approx((1_600_000 - 16_384) * 44_928 / r.decode_bytes_per_s)
    dense_kind = models()["glm-5.2"].model_copy(update={"attention": "mla", "index_topk": None})
    assert dense_kind.kv_read_tokens(200_000) * dense_kind.kv_bytes_per_token(1) > 90 * (
        models()["glm-5.2"].kv_read_tokens(200_000) * models()["glm-5.2"].kv_bytes_per_token(1)
    )


@pytest.mark.parametrize(
    ("instance_type", "model", "quantization", "tp"),
    [
        ("BM.GPU.B200.8", "glm-5.2", "nvfp4", 8),
        ("BM.GPU.MI355X.8", "glm-5.2", "mxfp4", 4),
        ("BM.GPU.MI355X.8", "glm-5.2", "mxfp4", 8),
        ("BM.GPU.MI355X.8", "deepseek-v4-pro", "mxfp4", 8),
        ("BM.GPU.B200.8", "deepseek-v4-pro", "mxfp4", 8),
        ("BM.GPU.B300.8", "deepseek-v4-pro", "mxfp4", 8),
        ("BM.GPU.B300.8", "kimi-k3", "mxfp4", 8),
        ("BM.GPU.MI355X.8", "kimi-k3", "mxfp4", 8),
        ("BM.GPU.B200.8", "minimax-m3", "nvfp4", 4),
        ("BM.GPU.MI355X.8", "qwen3.5-397b-a17b", "mxfp4", 4),
    ],
)
def test_models_fit_the_gpus_their_recipes_use(instance_type, model, quantization, tp):
    r = Roofline.for_target(target(instance_type, model, quantization, tp))
    assert r.kv_capacity_tokens > 100_000


def test_kimi_k3_does_not_fit_four_mi355x():
    # 2780e9 x 0.53125 = 1477 GB of weights > 4 x 288 GB x 0.9 = 1037 GB ("TP4 cannot load", InferenceX)
    with pytest.raises(ValueError, match="raise tensor_parallel"):
        Roofline.for_target(target("BM.GPU.MI355X.8", "kimi-k3", "mxfp4", 4))


def test_glm_nvfp4_b200_kv_capacity_by_hand():
    r = Roofline.for_target(target("BM.GPU.B200.8", "glm-5.2", "nvfp4", 8))
    # (8 x 179 x 2^30 x 0.9 - 744e9 x 0.5625) / 44,928 B = (1,383.84e9 - 418.5e9) / 44,928 = 21,486,343.99
    assert r.kv_capacity_tokens == 21_486_343


def test_fp4_decode_is_faster_than_fp8_at_the_same_batch():
    fp8 = Roofline.for_target(target("BM.GPU.B200.8", "glm-5.2", "fp8", 8))
    fp4 = Roofline.for_target(target("BM.GPU.B200.8", "glm-5.2", "nvfp4", 8))
    assert fp4.decode_step_s(16, 16 * 2048) < fp8.decode_step_s(16, 16 * 2048)
    # compute-bound prefill runs at the FP4 peak: 9000 vs 4500 dense TFLOPS on B200
    assert fp4.prefill_s(8192) == pytest.approx(fp8.prefill_s(8192) / 2)


def test_moe_reads_fewer_bytes_than_dense():
    dense = Roofline.for_target(target("BM.GPU.MI355X.8", "llama-3.1-405b", "fp8", 8))
    moe = Roofline.for_target(target("BM.GPU.MI355X.8", "glm-5.2", "fp8", 8))
    # GLM-5.2 holds more weights (744B vs 406B) but one token reads only its 40B active
    assert moe.params > dense.params
    assert moe.weights_read(1) < dense.weights_read(1) / 5


def test_routed_experts_scale_with_tokens_the_dense_part_does_not():
    r = Roofline(
        params=100e9,
        active_params=10e9,
        dense_params=4e9,
        bytes_per_param=1.0,
        kv_bytes_per_token=1e5,
        kv_capacity_tokens=10**6,
        prefill_flops_per_s=2e14,
        decode_bytes_per_s=1e12,
        max_num_seqs=256,
        context=10_000,
    )
    assert r.weights_read(1) == 10e9  # 4 dense + 6 routed
    assert r.weights_read(5) == 34e9  # 4 dense + 5 x 6 routed (not 5 x 10)
    assert r.weights_read(100) == 100e9  # every expert read once
    without = Roofline(**{**r.__dict__, "dense_params": None})
    assert without.weights_read(5) == 50e9  # min(total, active x tokens)


def test_verify_step_by_hand():
    r = Roofline(
        params=1e9,
        active_params=1e9,
        bytes_per_param=1.0,
        kv_bytes_per_token=1e5,
        kv_capacity_tokens=10**6,
        prefill_flops_per_s=2e14,
        decode_bytes_per_s=1e12,
        max_num_seqs=256,
        context=10_000,
        layers=4,
    )
    # draft step over 2 sequences: one layer's weights 1e9 / 4 / 1e12 = 0.25 ms > compute 2 x 0.25e9 x 2 / 2e14
    assert r.draft_step_s(2) == pytest.approx(0.25e-3)
    # target pass over 2 x (1 + 3) = 8 tokens: (1e9 + 1000 x 1e5) / 1e12 = 1.1 ms > compute 2e9 x 8 / 2e14 = 0.08 ms
    assert r.verify_step_s(2, 3, 1000) == pytest.approx(3 * 0.25e-3 + 1.1e-3)
    # no drafts: a plain decode step
    assert r.verify_step_s(2, 0, 1000) == pytest.approx(r.decode_step_s(2, 1000))
    with pytest.raises(ValueError, match="draft_tokens"):
        r.verify_step_s(2, -1, 1000)


def test_precisions_per_gpu():
    g = gpus()
    assert g["mi355x"].precisions == ["bf16", "fp8", "mxfp4"]
    for name in ("b200", "b300", "gb200"):
        assert "nvfp4" in g[name].precisions and "mxfp4" in g[name].precisions
    assert "nvfp4" not in g["h200"].precisions and "nvfp4" not in g["mi355x"].precisions


def _spec(**kw) -> dict:
    return {
        "name": "bad-model",
        "hf_id": "x/y",
        "params_b": 10,
        "active_params_b": 10,
        "layers": 4,
        "context": 4096,
        "accuracy_floor": {"score": 1.0, "eval_set": "bakeoff-arith-v1", "n": 200, "source": "test", "as_of": "today"},
    } | kw


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"attention": "gqa"}, "kv_heads/head_dim"),
        ({"attention": "mla", "kv_heads": 8, "head_dim": 128}, "kv_lora_rank"),
        ({"attention": "dsa", "kv_lora_rank": 512, "rope_head_dim": 64}, "index_topk"),
        ({"kv_heads": 8, "head_dim": 128, "attention": "hybrid"}, "full_attention_layers"),
        ({"kv_heads": 8, "head_dim": 128, "active_params_b": 20}, "active_params_b"),
        ({"kv_heads": 8, "head_dim": 128, "experts": 8}, "experts/experts_per_token"),
        ({"kv_heads": 8, "head_dim": 128, "checkpoints": {"fp4": "x/y-fp4"}}, "checkpoints"),
        ({"kv_heads": 8, "head_dim": 128, "kv_lora_rank": 512, "rope_head_dim": 64}, "kv_lora_rank"),
        ({"kv_heads": 8, "head_dim": 128, "dense_params_b": 11}, "dense_params_b"),
    ],
)
def test_inconsistent_entry_is_refused_naming_model_and_field(fields, field):
    with pytest.raises(ValidationError, match=f"bad-model: {field}"):
        ModelSpec(**_spec(**fields))


def test_misspelt_field_is_refused():
    with pytest.raises(ValidationError, match="index_top_k"):
        ModelSpec(**_spec(kv_heads=8, head_dim=128, index_top_k=2048))


def test_every_model_carries_a_dated_accuracy_floor_and_a_missing_one_is_named():
    for name, m in models().items():
        f = m.accuracy_floor
        assert 0 < f.score <= 1 and f.eval_set == "bakeoff-arith-v1" and f.source and f.as_of, name
    raw = models()["llama-3.1-8b"].model_dump(exclude={"accuracy_floor"})
    with pytest.raises(ValidationError, match="accuracy_floor"):
        ModelSpec(**raw)
    with pytest.raises(ValidationError, match="accuracy_floor.score"):
        ModelSpec(**raw, accuracy_floor={"score": 1.5, "eval_set": "x", "n": 1, "source": "s", "as_of": "d"})
