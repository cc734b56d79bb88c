"""A multi-node recipe as a target's template: one arm of it becomes the target's cluster (nodes, rack
shape, roles, KV transfer), and what does not fit is refused by plan check naming the field."""

from __future__ import annotations

import pytest

from bakeoff.plan import PlanError, multinode, plan_from_dict

# the four: GB200 and GB300 Dynamo disaggregated, MI355X SGLang PD and ATOM's mesh
RECIPES = (
    "dsr1-fp4-gb200-dynamo-trt",
    "dsr1-fp4-gb300-dynamo-trt",
    "dsr1-fp4-mi355x-sglang-disagg",
    "dsv4-fp4-mi355x-atom-disagg",
)


def _plan(**target):
    raw = {
        "name": "rack-plan",
        "budget_usd": 5000,
        "targets": [{"name": "t", "provider": "local", **target}],
        "workloads": [{"name": "w", "input_len": 1024, "output_len": 128, "concurrency": [4]}],
    }
    return plan_from_dict(raw)


@pytest.mark.parametrize("name", RECIPES)
def test_every_arm_of_the_rack_scale_and_mi355x_recipes_renders_into_a_cluster(name):
    r = multinode.multinode_recipe(name)
    for i, arm in enumerate(r.arms):
        (t,) = _plan(recipe=name, recipe_arm=i).targets
        c = t.cluster
        assert (t.recipe, t.recipe_arm, t.stack, t.model, t.quantization) == (name, i, r.engine, r.model, r.precision)
        assert t.image == r.image and t.instance.gpu == r.gpu
        for role, want in (("prefill", arm.prefill), ("decode", arm.decode)):
            got = getattr(c, role)
            fields = ("workers", "tp", "ep", "dp_attention")
            assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]
        # nodes: what the roles take on the node (or tray) size, every GPU of them billed
        per_node = t.instance.gpus
        need = c.prefill.nodes_needed(per_node) + c.decode.nodes_needed(per_node)
        assert t.nodes == need and t.gpus_used == need * per_node >= arm.gpus
        if r.gpu in ("gb200", "gb300"):
            assert c.rack == f"{r.gpu}-nvl72" and per_node == 4 and c.kv_over_nvlink
            assert c.kv_label == f"{r.kv_transfer} (in the NVLink domain)"
        else:
            assert c.rack is None and per_node == 8 and not c.kv_over_nvlink
            assert c.kv_label == f"{r.kv_transfer} (over the NICs)"
        assert c.kv_path == r.kv_transfer
        prov = multinode.provenance(t.recipe, t.recipe_arm)
        assert prov["orchestrator"] == r.orchestrator and prov["router"] == r.router
        assert prov["commit"] == multinode.source()["commit"] and prov["source"].endswith(r.source_file)
        assert prov["settings"]["prefill"] == list(arm.prefill.settings)


def test_a_node_without_a_list_price_is_priced_at_the_tco_tier_and_the_plan_overrides_win():
    (t,) = _plan(recipe="dsr1-fp4-gb300-dynamo-trt", recipe_arm=0).targets
    assert t.instance_type == "gb300-nvl72-tray" and t.price.market == "tco"
    assert t.price.usd_per_gpu_hour == 3.30 and "TCO tier, neocloud" in t.price.source
    (t,) = _plan(
        recipe="dsr1-fp4-gb300-dynamo-trt",
        recipe_arm=0,
        price={"usd_per_gpu_hour": 5.0},
        cluster={"deadline_s": 60},
        stack="vllm",
    ).targets
    assert t.price.usd_per_gpu_hour == 5.0 and t.stack == "vllm"
    arm = multinode.multinode_recipe("dsr1-fp4-gb300-dynamo-trt").arms[0]
    assert t.cluster.deadline_s == 60 and t.cluster.rack == "gb300-nvl72"
    assert t.cluster.decode.workers == arm.decode.workers and t.cluster.prefill.tp == arm.prefill.tp


def test_a_cloud_gets_its_rack_offer_and_a_cloud_without_the_rack_is_refused_naming_the_field():
    (t,) = _plan(recipe="dsr1-fp4-gb200-dynamo-trt", recipe_arm=0, provider="oci").targets
    assert t.instance_type == "BM.GPU.GB200.4" and t.cluster.rack == "gb200-nvl72"
    # AWS sells the rack as p6e-gb200 UltraServer trays, with no list price: the TCO tier prices them
    (t,) = _plan(recipe="dsr1-fp4-gb200-dynamo-trt", recipe_arm=0, provider="aws").targets
    assert t.instance_type == "p6e-gb200.36xlarge" and t.price.market == "tco" and t.price.usd_per_gpu_hour == 2.75
    # OCI sells GB300 NVL72 trays (BM.GPU.GB300.4, Oracle's oci-hpc-oke), no list price: the TCO tier again
    (t,) = _plan(recipe="dsr1-fp4-gb300-dynamo-trt", recipe_arm=0, provider="oci").targets
    assert t.instance_type == "BM.GPU.GB300.4" and t.cluster.rack == "gb300-nvl72" and t.price.market == "tco"
    with pytest.raises(PlanError, match=r"cluster\.rack: aws does not offer gb300-nvl72 .*gb200-nvl72"):
        _plan(recipe="dsr1-fp4-gb300-dynamo-trt", recipe_arm=0, provider="aws")
    with pytest.raises(PlanError, match=r"cluster: vultr has no multi-node placement offer"):
        _plan(recipe="dsr1-fp4-mi355x-sglang-disagg", recipe_arm=0, provider="vultr")


def test_roles_that_do_not_fit_the_nodes_are_refused_naming_the_field():
    with pytest.raises(PlanError, match=r"cluster\.nodes: prefill 8 GPUs and decode 8 GPUs take 2 nodes .* has 1"):
        _plan(recipe="dsr1-fp4-mi355x-sglang-disagg", recipe_arm=0, cluster={"nodes": 1})
    with pytest.raises(PlanError, match=r"cluster\.nodes: a gb200-nvl72 rack has 18 trays"):
        _plan(recipe="dsr1-fp4-gb200-dynamo-trt", recipe_arm=0, cluster={"nodes": 40})


def test_an_unknown_or_missing_arm_is_refused_listing_the_arms():
    r = multinode.multinode_recipe("dsr1-fp4-gb200-dynamo-trt")
    with pytest.raises(PlanError, match=r"recipe_arm: dsr1-fp4-gb200-dynamo-trt has no arm '99'; its arms: 0 \(pre"):
        _plan(recipe=r.name, recipe_arm=99)
    with pytest.raises(PlanError, match=rf"recipe_arm: dsr1-fp4-gb200-dynamo-trt has {len(r.arms)} arms .* 10 \("):
        _plan(recipe=r.name)
    with pytest.raises(PlanError, match=r"recipe_arm: 'dsr1-fp4-b200-sglang' is a single-node recipe"):
        _plan(recipe="dsr1-fp4-b200-sglang", recipe_arm=0)
    with pytest.raises(PlanError, match=r"recipe_arm: picks an arm of a multi-node recipe; name the recipe"):
        _plan(recipe_arm=0, instance_type="BM.GPU.B200.8", model="deepseek-r1")
    with pytest.raises(PlanError, match=r"recipe: no recipe named 'dsr1-fp4-gb200-dynamo-trtt'; did you mean"):
        _plan(recipe="dsr1-fp4-gb200-dynamo-trtt", recipe_arm=0)


def test_an_unknown_provider_is_named_as_such_not_as_a_missing_offer():
    with pytest.raises(PlanError, match=r"targets\[0\]\.provider: Input should be 'local'"):
        _plan(recipe="dsr1-fp4-gb200-dynamo-trt", recipe_arm=0, provider="nowhere")


def _rendered(t):
    """The target's speculative as the arm renders it: the keys it sets (real acceptance is the default)."""
    return t.speculative.model_dump(exclude_defaults=True) | {
        "num_speculative_tokens": t.speculative.num_speculative_tokens
    }


def _spec(t):
    s = t.speculative
    return None if s is None else (s.method, s.num_speculative_tokens, s.acceptance, s.acceptance_length)


def test_an_mtp_arm_serves_mtp_with_the_draft_tokens_and_acceptance_its_settings_name():
    cases = {
        ("dsr1-fp4-gb200-dynamo-trt", 0): ("mtp", 3, "real", None),  # ..._mtp3.yaml
        ("dsr1-fp4-gb200-dynamo-trt", 2): ("mtp", 1, "real", None),  # ..._mtp1.yaml
        ("dsr1-fp4-gb200-dynamo-trt", 5): None,  # an stp arm (mtp0): no speculative decoding
        ("dsr1-fp4-mi355x-sglang-disagg-8k1k-mtp", 7): ("mtp", 1, "real", None),  # DECODE_MTP_SIZE=1
        ("dsv4-fp4-gb200-dynamo-vllm-mtp2", 0): ("mtp", 2, "pinned", 2.27),  # synthetic acceptance, mtp2
        # no count named: 1.79 is deepseek-v4-pro's golden MTP length at 1 draft token
        ("dsv4-fp4-b200-dynamo-vllm-mtp", 4): ("mtp", 1, "pinned", 1.79),
    }
    for (name, arm), want in cases.items():
        (t,) = _plan(recipe=name, recipe_arm=arm).targets
        assert _spec(t) == want, (name, arm)
        rendered = multinode.provenance(name, arm)["speculative_rendered"]  # what cluster.json records
        assert rendered == (None if want is None else _rendered(t))


def test_the_targets_own_speculative_keys_win_and_null_serves_without():
    pinned = "dsv4-fp4-gb200-dynamo-vllm-mtp2"
    (t,) = _plan(recipe=pinned, recipe_arm=0, speculative={"acceptance_length": 2.0}).targets
    assert _spec(t) == ("mtp", 2, "pinned", 2.0)
    # a target that changes the draft count or the acceptance mode drops the arm's pinned length
    (t,) = _plan(recipe=pinned, recipe_arm=0, speculative={"num_speculative_tokens": 4}).targets
    assert _spec(t) == ("mtp", 4, "real", None)
    (t,) = _plan(recipe="dsr1-fp4-gb200-dynamo-trt", recipe_arm=0, speculative=None).targets
    assert t.speculative is None and multinode.provenance(t.recipe, t.recipe_arm)["speculative"] == "mtp"


def test_the_emulated_decode_node_serves_the_arms_mtp():
    from bakeoff.clusters.cluster import NodeTarget
    from bakeoff.serving.emulator import server
    from bakeoff.serving.emulator.config import EmulatorConfig

    (t,) = _plan(recipe="dsr1-fp4-mi355x-sglang-disagg-8k1k-mtp", recipe_arm=7).targets
    decode = t.nodes - 1  # prefill nodes first
    node = NodeTarget(t, decode, "decode").model_dump(mode="json")
    engine = server._engine(EmulatorConfig(mode="roofline", target=node))
    assert engine.speculation is not None and engine.speculation.draft_tokens == 1
    assert engine.stats.speculative  # the node exports vLLM's spec-decode counters
    (off,) = _plan(recipe="dsr1-fp4-mi355x-sglang-disagg-8k1k-mtp", recipe_arm=7, speculative=None).targets
    node = NodeTarget(off, decode, "decode").model_dump(mode="json")
    assert server._engine(EmulatorConfig(mode="roofline", target=node)).speculation is None


def test_plan_check_prints_each_roles_parallelism_and_the_arms_mtp(tmp_path, capsys):
    import yaml

    from bakeoff.cli import main

    def check(**target):
        raw = {
            "name": "rack-plan",
            "budget_usd": 1000,  # the installation's default ceiling: plan check refuses more, as run does
            "targets": [{"name": "t", "provider": "local", "recipe": "dsr1-fp4-gb200-dynamo-trt", **target}],
            "workloads": [{"name": "w", "input_len": 1024, "output_len": 128, "concurrency": [4]}],
        }
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
        assert main(["plan", "check", str(tmp_path / "p.yaml")]) == 0
        return capsys.readouterr().out

    out = check(recipe_arm=0)
    first = out.splitlines()[0]
    assert "deepseek-r1 nvfp4 prefill TP4 EP4 DP-attn | decode TP8 EP8," in first and " TP1," not in first
    assert "USD/h per node" in first
    assert "  speculative mtp k=3 real acceptance (the recipe arm's mtp, the target's keys over it)" in out
    out = check(recipe_arm=0, speculative=None)
    assert "  speculative: MTP in the recipe arm, not served (the target says speculative: null)" in out
