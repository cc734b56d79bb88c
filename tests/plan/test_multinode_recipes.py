"""Multi-node, disaggregated recipes: the vendored snapshot, the footprint of each arm, and the
emulator's paper model of the shape (as targets: tests/plan/test_multinode_targets.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from bakeoff import catalog
from bakeoff.cli import main
from bakeoff.plan import multinode
from bakeoff.plan.options import EmulatorSettings
from bakeoff.serving.emulator import disagg
from bakeoff.twin.roofline import Roofline
from bakeoff.twin.target import STEP_OVERHEAD_S

ROOT = Path(__file__).resolve().parents[2]


def test_the_snapshot_holds_the_rack_scale_dynamo_and_the_mi355x_disaggregated_recipes():
    known = multinode.multinode_recipes()
    shapes = {(r.gpu, r.orchestrator, r.engine) for r in known.values()}
    assert {("gb200", "dynamo", "trtllm"), ("gb300", "dynamo", "trtllm"), ("mi355x", "sglang-pd", "sglang")} <= shapes
    assert ("mi355x", "atomesh", "atom") in shapes
    for r in known.values():
        assert r.model in catalog.models() and r.gpu in {"mi355x", "b200", "b300", "gb200", "gb300"}
        assert all(a.prefill.workers >= 1 and a.decode.workers >= 1 for a in r.arms), r.name
    assert multinode.source()["commit"].startswith("843c6254")


def test_a_gb200_arm_fits_one_nvl72_rack_and_a_b200_arm_spans_8_gpu_nodes():
    gb = multinode.multinode_recipe("dsr1-fp4-gb200-dynamo-trt")
    arm = gb.arms[0]  # prefill 1x tp4 ep4, decode 4x tp8 ep8
    assert (arm.prefill.gpus, arm.decode.gpus) == (4, 32)
    fp = gb.footprint(arm)
    assert (fp.gpus, fp.nodes, fp.racks, fp.nvlink_domain, fp.kv_in_domain) == (36, 9, 1, 72, True)
    b2 = multinode.multinode_recipe("dsr1-fp4-b200-dynamo-trt")
    fp = b2.footprint(b2.arms[0])  # 4 + 8 GPUs
    assert (fp.gpus, fp.nodes, fp.racks, fp.kv_in_domain) == (12, 2, None, False)


def test_the_converter_keeps_both_roles_and_skips_aggregated_arms():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import vendor_recipes
    finally:
        sys.path.pop(0)
    role = {"num-worker": 2, "tp": 4, "ep": 4, "dp-attn": True}
    row = {
        "image": "lmsysorg/sglang:v0.5.16-rocm720-mi35x",
        "model": "amd/DeepSeek-R1-0528-MXFP4",
        "model-prefix": "dsr1",
        "runner": "mi355x-disagg",
        "precision": "fp4",
        "framework": "sglang-disagg",
        "router": {"name": "sglang-router", "version": "0.3.2"},
        "kv-p2p-transfer": "mori",
        "multinode": True,
        "disagg": True,
        "scenarios": {
            "fixed-seq-len": [
                {
                    "isl": 8192,
                    "osl": 1024,
                    "search-space": [
                        {"conc-list": [8, 16], "prefill": role, "decode": {**role, "num-worker": 1}},
                        {"conc-list": [4], "prefill": role, "decode": {**role, "num-worker": 0}},
                    ],
                }
            ]
        },
    }
    rec = vendor_recipes.convert_multinode("dsr1-fp4-mi355x-sglang-disagg", "configs/amd-master.yaml", row)
    assert rec["precision"] == "mxfp4" and rec["orchestrator"] == "sglang-pd" and rec["router"] == "sglang-router 0.3.2"
    assert len(rec["arms"]) == 1 and rec["arms"][0]["decode"]["workers"] == 1
    assert vendor_recipes.convert_multinode("x", "y", {**row, "disagg": False}) is None


def test_the_vendored_file_is_what_the_converter_writes(tmp_path):
    """A refresh from the same snapshot reproduces the committed file (nothing edited by hand)."""
    committed = (ROOT / "include/bakeoff/recipes/inferencex-multinode.yaml").read_text()
    src = yaml.safe_load(committed)["source"]
    ref = tmp_path / "ix"
    (ref / "configs").mkdir(parents=True)
    for name in src["files"]:
        (ref / name).write_text("{}\n")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import vendor_recipes
    finally:
        sys.path.pop(0)
    assert vendor_recipes.write_multinode(ref, src["commit"], src["date"], tmp_path / "out.yaml") == 0
    assert yaml.safe_load((tmp_path / "out.yaml").read_text())["source"] == src


def test_the_disaggregated_model_is_the_roofline_redone_by_hand():
    r = multinode.multinode_recipe("dsr1-fp4-b200-dynamo-trt")
    arm = r.arms[0]  # 1 decode worker, dep8 with batch8 per rank (its config file's name), conc 90
    emu = EmulatorSettings()
    (point,) = disagg.disaggregated_curve(r, arm, emu)
    gpu, model = catalog.gpus()["b200"], catalog.models()[r.model]
    parts = {"prefill_efficiency": emu.prefill_efficiency, "decode_efficiency": emu.decode_efficiency}
    prefill = Roofline.for_parts(gpu, model, r.precision, tp=4, gpus_used=4, max_num_seqs=emu.max_num_seqs, **parts)
    decode = Roofline.for_parts(gpu, model, r.precision, tp=8, gpus_used=8, max_num_seqs=emu.max_num_seqs, **parts)
    kv_s = arm.isl * prefill.kv_bytes_per_token / (multinode.SCALE_OUT_GBPS["b200"] * 1e9 * 4)  # over the NICs
    assert point.kv_transfer_s == pytest.approx(kv_s)
    seqs, context = 8 * 8, arm.isl + arm.osl // 2  # 64 slots < 90 users: 26 wait
    assert disagg.decode_batch(arm) == seqs and arm.concurrency == [90]
    tokens = seqs * 4  # MTP: 1 + 3 draft tokens per sequence
    hit = 256 * (1 - (1 - 8 / 256) ** tokens)  # distinct routed experts under uniform top-8 of 256
    weights = (16.6e9 + (671e9 - 16.6e9) * hit / 256) * decode.bytes_per_param
    memory_s = (weights + seqs * context * decode.kv_bytes_per_token) / decode.decode_bytes_per_s
    drafts_s = 3 * (decode.draft_step_s(seqs) + disagg.DRAFT_PASS_OVERHEAD_S)
    step = max(memory_s, 2 * 37e9 * tokens / decode.prefill_flops_per_s) + STEP_OVERHEAD_S + drafts_s
    al = catalog.golden_acceptance_length("deepseek-v4-pro", 3)  # the DeepSeek family's MTP curve stands in
    assert al and catalog.golden_acceptance_length(r.model, 3) is None
    speed = al / step
    assert point.tps_per_user == pytest.approx(speed)
    rate = min(seqs * speed / arm.osl, 1 / prefill.prefill_s(arm.isl))  # every slot busy
    assert point.output_tps_per_gpu == pytest.approx(rate * arm.osl / 12)
    assert point.bound == "decode slots" and point.ttft_s == pytest.approx(90 / rate - arm.osl / speed)


def test_users_are_dealt_over_decode_workers_and_the_batch_cap_queues_the_rest():
    r = multinode.multinode_recipe("dsr1-fp4-gb200-dynamo-trt")
    arm = r.arms[0].model_copy(update={"isl": 1024, "osl": 1024, "concurrency": [4, 6, 32, 48]})
    one, six, full, over = disagg.disaggregated_curve(r, arm)
    # 6 users on 4 workers: two hold 2 sequences, two hold 1, so the mean speed lies between
    two = disagg.disaggregated_curve(r, arm.model_copy(update={"concurrency": [8]}))[0]
    assert two.tps_per_user < six.tps_per_user < one.tps_per_user
    # batch 8 per worker: 48 users run 32 at a time, at the speed of 32 and no more output
    assert over.tps_per_user == pytest.approx(full.tps_per_user)
    assert over.output_tps == pytest.approx(full.output_tps, rel=0.02) and over.bound == "decode slots"
    assert over.ttft_s > full.ttft_s + 1


def test_batch_and_draft_tokens_come_from_the_recipe_config_name_and_nothing_is_capped_without_one():
    trt = multinode.multinode_recipe("dsv4-fp4-gb300-dynamo-trt-mtp")
    (mtp1,) = [a for a in trt.arms if "dep8_batch256_eplb384_mtp1" in " ".join(a.prefill.settings)]
    assert disagg.mtp_draft_tokens(mtp1) == 1 and disagg.decode_batch(mtp1) == 256 * 8  # dep8: per rank
    sg = multinode.multinode_recipe("dsr1-fp4-b200-dynamo-sglang")
    big = max(sg.arms, key=lambda a: max(a.concurrency))
    assert disagg.decode_batch(big) is None
    assert all(p.bound != "decode slots" for p in disagg.disaggregated_curve(sg, big))


def test_kv_inside_an_nvl72_rack_moves_faster_than_over_the_nics_and_a_busy_prefill_pool_shows_in_ttft():
    gb = multinode.multinode_recipe("dsr1-fp4-gb200-dynamo-trt")
    b2 = multinode.multinode_recipe("dsr1-fp4-b200-dynamo-trt")
    in_rack = disagg.disaggregated_curve(gb, gb.arms[0])[0]
    over_nics = disagg.disaggregated_curve(b2, b2.arms[0])[0]
    assert in_rack.kv_transfer_s * 10 < over_nics.kv_transfer_s
    slow_prefill = EmulatorSettings(prefill_efficiency=0.01)
    points = disagg.disaggregated_curve(b2, b2.arms[0], slow_prefill)
    assert points[0].bound == "prefill" and points[0].ttft_s > over_nics.ttft_s * 5


def test_cli_lists_multinode_recipes_and_shows_one_with_its_emulated_shape(capsys):
    assert main(["recipes", "list", "--multinode"]) == 0
    out = capsys.readouterr().out
    assert "dsr1-fp4-gb300-dynamo-trt" in out and "a target names one with recipe: and recipe_arm:" in out
    assert main(["recipes", "show", "dsr1-fp4-gb200-dynamo-trt"]) == 0
    out = capsys.readouterr().out
    assert "EMULATED" in out and "1 rack(s), KV over NVLink" in out and "single-node" in out
    assert main(["recipes", "show", "dsr1-fp4-gb200-dynamo-trtt", "--multinode"]) == 2
    assert "did you mean dsr1-fp4-gb200-dynamo-trt" in capsys.readouterr().err


def test_the_published_points_part_c_compares_name_recipe_arms_of_their_shape_with_source_and_dates():
    doc = yaml.safe_load((ROOT / "benchmarks/data/inferencex_disagg_published.yaml").read_text())
    src = doc["source"]
    assert src["repo"] and len(src["commit"]) == 40 and src["published"] and src["measured"]
    for shape in doc["shapes"]:
        arm = multinode.multinode_recipe(shape["recipe"]).arms[shape["arm"]]
        assert arm.gpus == shape["gpus"] and arm.speculative == "mtp", shape["recipe"]
        concs = [p[0] for p in shape["points"]]
        assert concs == sorted(concs) and all(p[1] > 0 and p[2] > 0 for p in shape["points"])
