"""Claims as data: loading and its errors, and the claim check's matching and verdict arithmetic on cost
tables built by the real cost functions from hand-made points (so the expected figures are known)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from bakeoff import claims, cost
from bakeoff.bench.metrics.summary import POINT_COLUMNS
from bakeoff.plan import PlanError, plan_from_dict
from bakeoff.plan.checkpoints import checkpoint_note, differing_checkpoints
from bakeoff.plan.workload import rate_key

SEED = "glm52-mi355x-wafer"
OCI = {
    "regions": ["us-ashburn-1"],
    "availability_domains": ["Uocm:US-ASHBURN-AD-1"],
    "subnet_ocid": "ocid1.subnet.oc1.iad.aaaaaaaabakeoffsandboxsubnet00000000000000000000000000000000",
    "ingress_cidr": "127.0.0.1/32",
}


def plan_dict(*, input_len: int = 20000, mi355x: bool = True, b200: bool = True, **workload) -> dict:
    targets = []
    if mi355x:
        targets.append(
            {
                "name": "mi355x-sglang",
                "provider": "oci",
                "instance_type": "BM.GPU.MI355X.8",
                "model": "glm-5.2",
                "quantization": "mxfp4",
                "stack": "sglang",
                "tensor_parallel": 8,
                "provider_options": OCI,
            }
        )
    if b200:
        targets.append(
            {
                "name": "b200-sglang",
                "provider": "oci",
                "instance_type": "BM.GPU.B200.8",
                "model": "glm-5.2",
                "quantization": "nvfp4",
                "stack": "sglang",
                "tensor_parallel": 8,
                "provider_options": OCI,
            }
        )
    return {
        "name": "claim-unit",
        "budget_usd": 1000,
        "claims": [SEED],
        "targets": targets,
        "workloads": [
            {
                "name": "claim",
                "input_len": input_len,
                "output_len": 1000,
                "prefix_ratio": 0.6,
                "load": "rate",
                "rates": [1.2, 2.4],
                "repeats": 3,
                **workload,
            }
        ],
        "slo": {"ttft_p99_ms": 5000, "tpot_p99_ms": 50},
    }


def point(slug: str, workload: str, key: int, rep: int, node: float, **kw) -> dict:
    row = {k: None for k in POINT_COLUMNS}
    row.update(
        run_id="r",
        target=slug,
        workload=workload,
        concurrency=key,
        repeat=rep,
        gpus=8,
        emulated=False,
        load_mode="concurrency",
        output_tps=node,
        output_tps_per_gpu=node / 8,
        total_tps_per_gpu=node * 21 / 8,
        interactivity=40.0,
        meets_slo=True,
    )
    row.update(kw)
    return row


def tables(
    plan,
    per_node: dict[str, list[float]],
    *,
    emulated: bool = False,
    meets_slo: bool = True,
    sweep: dict[str, list[float]] | None = None,
):
    """Cost tables for rate points at 1.2 and 2.4 req/s: per target slug, the output tokens/s per node of
    each repeat at 2.4 req/s (1.2 req/s runs at half of it); ``sweep``: a closed-loop workload's repeats at
    concurrency 16 (concurrency 8 runs at half of it)."""
    rows = []
    for slug, values in per_node.items():
        for rate in (1.2, 2.4):
            for rep, v in enumerate(values):
                rows.append(
                    point(
                        slug,
                        "claim",
                        rate_key(rate),
                        rep,
                        v * rate / 2.4,
                        emulated=emulated,
                        load_mode="rate",
                        rate=rate,
                        meets_slo=meets_slo,
                    )
                )
    for slug, values in (sweep or {}).items():
        for c in (8, 16):
            rows += [point(slug, "sweep", c, rep, v * c / 16, emulated=emulated) for rep, v in enumerate(values)]
    points = pd.DataFrame(rows)
    status = {t.slug: {"status": "passed", "ranked": True, "failures": []} for t in plan.targets}
    tdf = cost._targets_frame(plan, status)
    costs = cost.point_costs(points, tdf, plan.pricing.usd_per_kwh)
    return SimpleNamespace(points=costs, at_slo=cost.cost_at_slo(costs, tdf, "output"), targets=tdf)


# --- loading ------------------------------------------------------------------------------------


def test_seed_claim_loads_with_source_and_configuration():
    c = claims.load_claim(SEED)
    assert c.who == "wafer.ai" and "2,626" in c.claim and c.when == "2026-07-03"
    assert c.published.date == "2026-07-03" and "glm52-amd" in c.published.address
    assert c.figure.value == 2626 and c.figure.metric == "output_tps_per_node" and "output" in c.figure.reading
    cfg = c.configuration
    assert (cfg.model, cfg.quantization, cfg.stack, cfg.gpu, cfg.gpus) == ("glm-5.2", "mxfp4", "sglang", "mi355x", 8)
    assert (cfg.input_len, cfg.output_len, cfg.prefix_ratio, cfg.rate) == (20000, 1000, 0.6, 2.4)
    kinds = {x.kind: x for x in c.comparisons}
    assert kinds["throughput"].value == 3192 and kinds["throughput"].gpu == "b200"
    assert kinds["cost_ratio"].value == 0.5 and "b200" in kinds["cost_ratio"].against
    assert SEED in claims.claim_names()


@pytest.mark.parametrize(
    "change,message",
    [
        ({"who": None}, r"who: required field is missing; add it"),
        (
            {"configuration": {"gpu": "mi999x"}},
            r"configuration\.gpu: 'mi999x' is not a catalog GPU; use one of: .*mi355x",
        ),
        (
            {"configuration": {"gpu": "mi355x", "model": "glm-9"}},
            r"configuration\.model: 'glm-9' is not a catalog model",
        ),
        ({"configuration": {"gpu": "mi355x", "quantization": "fp4"}}, r"quantization: 'fp4' is not a precision.*mxfp4"),
        ({"configuration": {"model": "glm-5.2"}}, r"configuration\.gpu: a claim names the GPU"),
        ({"figure": {"metric": "tokens", "value": 1}}, r"figure\.metric: Input should be 'output_tps_per_node'"),
        ({"figure": {"metric": "output_tps_per_node", "value": 0}}, r"figure\.value: Input should be greater than 0"),
        (
            {"comparisons": [{"kind": "throughput", "value": 3}]},
            r"comparisons\[0\]\.gpu: a throughput comparison names the GPU",
        ),
        ({"comparisons": [{"kind": "cost_ratio", "value": 0.5}]}, r"against: a cost_ratio comparison lists"),
        ({"surprise": 1}, r"surprise: unknown field; remove it"),
        ({"published": {"address": "x", "date": "July 2026"}}, r"published\.date: .*pattern"),
        ({"basis": {"throughput": {}, "price": {}}}, r"basis\.throughput\.this: required field is missing"),
    ],
)
def test_bad_claim_files_name_the_field_and_the_fix(tmp_path, monkeypatch, change, message):
    raw = yaml.safe_load((claims.claims_dir() / f"{SEED}.yaml").read_text())
    raw.update(change)
    raw = {k: v for k, v in raw.items() if v is not None}
    monkeypatch.setenv("BAKEOFF_CLAIMS", str(tmp_path))
    (tmp_path / f"{SEED}.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(claims.ClaimError, match=message) as e:
        claims.load_claim(SEED)
    assert str(e.value).startswith(f"{SEED}.yaml is not a valid claim")


def test_claim_file_errors_yaml_id_and_unknown_name(tmp_path, monkeypatch):
    monkeypatch.setenv("BAKEOFF_CLAIMS", str(tmp_path))
    (tmp_path / "broken.yaml").write_text("who: [unclosed\n")
    with pytest.raises(claims.ClaimError, match=r"broken\.yaml: not valid YAML"):
        claims.load_claim("broken")
    monkeypatch.delenv("BAKEOFF_CLAIMS")
    seed = yaml.safe_load((claims.claims_dir() / f"{SEED}.yaml").read_text())
    monkeypatch.setenv("BAKEOFF_CLAIMS", str(tmp_path))
    (tmp_path / "renamed.yaml").write_text(yaml.safe_dump(seed))
    with pytest.raises(claims.ClaimError, match=r"renamed\.yaml: id: 'glm52-mi355x-wafer' must be the file's name"):
        claims.load_claim("renamed")
    with pytest.raises(claims.ClaimError, match=r"no claim named 'nope'; choose one of: broken, renamed"):
        claims.load_claim("nope")


def test_plan_names_claims_by_name_and_refuses_unknown_ones():
    plan = plan_from_dict(plan_dict())
    assert [c.id for c in claims.check_plan_claims(plan)] == [SEED]
    raw = plan_dict()
    raw["claims"] = ["glm52-mi355x-wafre"]
    with pytest.raises(PlanError, match=r"claims\[0\]: no claim named 'glm52-mi355x-wafre'; choose one of: .*" + SEED):
        claims.check_plan_claims(plan_from_dict(raw))


def test_a_run_naming_a_missing_claim_stops_before_anything_is_recorded(data_root):
    from bakeoff import store
    from bakeoff.run import pipeline

    raw = plan_dict()
    raw["claims"] = ["glm52-mi355x-wafre"]
    path = data_root / "claims-plan.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PlanError, match=r"claims\[0\]: no claim named"):
        pipeline.start_run(str(path), "manual__missing_claim")
    assert not list(store.at(store.results_root()).rglob("*.json"))


def test_the_plan_package_does_not_import_claims_and_claims_use_the_plans_precisions():
    """One list of quantizations (the plan's), and no import cycle between plan and claims."""
    import subprocess
    import sys

    from bakeoff.plan.precision import QUANTIZATIONS

    assert claims.QUANTIZATIONS is QUANTIZATIONS
    code = "import sys, bakeoff.plan; assert 'bakeoff.claims' not in sys.modules, 'plan imports claims'"
    subprocess.run([sys.executable, "-c", code], check=True)
    subprocess.run([sys.executable, "-c", "import bakeoff.claims"], check=True)  # claims first: no cycle


# --- checkpoints --------------------------------------------------------------------------------


def test_different_checkpoints_are_named_and_a_fixed_accuracy_reference_is_refused():
    plan = plan_from_dict(plan_dict())
    groups = differing_checkpoints(plan.targets)
    assert groups == {"glm-5.2": {"amd/GLM-5.2-MXFP4": ["mi355x-sglang"], "nvidia/GLM-5.2-NVFP4": ["b200-sglang"]}}
    note = checkpoint_note(plan.targets, plan.quality.accuracy)
    assert note.startswith("These targets serve different checkpoints of glm-5.2 (amd/GLM-5.2-MXFP4: mi355x-sglang")
    assert "quarantined, not ranked" in note
    raw = plan_dict() | {"quality": {"accuracy": {"reference": 0.9}}}
    with pytest.raises(PlanError, match=r"quality\.accuracy\.reference: 0\.9 is a fixed score.*set reference: best"):
        plan_from_dict(raw)
    # one checkpoint: a fixed reference is the buyer's to choose
    assert plan_from_dict(plan_dict(b200=False) | {"quality": {"accuracy": {"reference": 0.9}}})
    off = plan_from_dict(plan_dict() | {"quality": {"accuracy": {"enabled": False, "reference": 0.9}}})
    assert "accuracy gate is off" in checkpoint_note(off.targets, off.quality.accuracy)


# --- the verdict --------------------------------------------------------------------------------


def test_verdict_arithmetic():
    m = claims.Measure(2600.0, 2550.0, 2650.0, 3, "2.4 req/s")
    assert claims.verdict(2626, 0, m, []) == (
        "reproduced",
        "claimed 2,626 is inside bakeoff's 95% CI 2,550–2,650 over 3 repeats",
    )
    v, why = claims.verdict(3000, 0, m, [])
    assert v == "not reproduced" and "outside" in why and "0.87× the claim" in why
    # a tolerance widens the claim into a band: 0.5 ± 10% meets an interval of 0.54-0.6
    assert claims.verdict(0.5, 0.1, claims.Measure(0.57, 0.54, 0.6, 3, "at the SLO"), [])[0] == "reproduced"
    assert claims.verdict(0.5, 0.0, claims.Measure(0.57, 0.54, 0.6, 3, "at the SLO"), [])[0] == "not reproduced"
    assert claims.verdict(2626, 0, m, ["figures are EMULATED"]) == ("not comparable", "figures are EMULATED")
    one = claims.Measure(2600.0, float("nan"), float("nan"), 1, "2.4 req/s")
    assert claims.verdict(2626, 0, one, []) == (
        "not comparable",
        "1 repeat: no confidence interval (add workload repeats)",
    )


def test_claim_reproduced_at_the_claimed_configuration():
    plan = plan_from_dict(plan_dict())
    t = tables(plan, {"mi355x-sglang": [2600.0, 2640.0, 2620.0], "b200-sglang": [3150.0, 3200.0, 3230.0]})
    check = claims.check_claim(claims.load_claim(SEED), plan, t)
    main, b200 = check.figures
    assert main.target == "mi355x-sglang" and not main.differs and not check.emulated
    assert {f.field for f in main.fields} >= {"model", "precision", "engine", "gpu", "input_len", "rate"}
    assert main.at_config.value == pytest.approx(2620.0) and main.at_config.load == "2.4 req/s"
    assert main.at_config.low <= 2626 <= main.at_config.high and main.verdict == "reproduced"
    assert main.at_slo.value == pytest.approx(2620.0)  # the SLO's level: the cheapest that meets it
    assert any(u.startswith("speculative decoding (run: off)") for u in main.unstated)
    # the B200 comparison states neither its precision (the run's checkpoint is NVFP4) nor its load
    assert b200.target == "b200-sglang" and b200.at_config is None and b200.verdict == "not comparable"
    assert b200.reason == "the claim does not state the load (rate or concurrency) of this figure"
    assert "precision (run: nvfp4)" in b200.unstated and b200.at_slo.value == pytest.approx(3193.33, rel=1e-3)


def test_a_claimed_rate_is_per_node_and_a_tp4_target_serves_two_replicas():
    """The benchmark sends a rate to one replica: a TP4 target on an 8-GPU node serves twice its point rate,
    so its 1.2 req/s point is the claim's 2.4 req/s per node."""
    raw = plan_dict()
    raw["targets"][0]["tensor_parallel"] = 4
    plan = plan_from_dict(raw)
    t = tables(plan, {"mi355x-sglang": [5200.0, 5260.0, 5240.0], "b200-sglang": [3150.0, 3200.0, 3230.0]})
    main = claims.check_claim(claims.load_claim(SEED), plan, t).figures[0]
    assert main.at_config.load == "2.4 req/s per node (2 replicas at 1.2)"
    assert main.at_config.value == pytest.approx(5233.33 / 2, rel=1e-3) and main.verdict == "reproduced"
    rate = next(f for f in main.fields if f.field == "rate")
    assert rate.same and rate.run == "2.4, 4.8 req/s per node (2 replicas)"


def test_claim_not_reproduced_gives_the_ratio():
    plan = plan_from_dict(plan_dict())
    t = tables(plan, {"mi355x-sglang": [1990.0, 2000.0, 2010.0], "b200-sglang": [3150.0, 3200.0, 3230.0]})
    main = claims.check_claim(claims.load_claim(SEED), plan, t).figures[0]
    assert main.verdict == "not reproduced" and "0.76× the claim" in main.reason


@pytest.mark.parametrize(
    "case,expect",
    [
        ("emulated", r"figures are EMULATED"),
        ("differs", r"configuration differs in input_len \(claimed 20,000, run 2,000\)"),
        ("one-repeat", r"1 repeat: no confidence interval"),
        ("no-mi355x", r"the run has no MI355X target"),
        ("no-rate", r"configuration differs in rate \(claimed 2.4 req/s, run concurrency load \(no rate point\)\)"),
    ],
)
def test_not_comparable_and_why(case, expect):
    values = {"mi355x-sglang": [2600.0, 2640.0, 2620.0], "b200-sglang": [3150.0, 3200.0, 3230.0]}
    raw = plan_dict(input_len=2000 if case == "differs" else 20000, mi355x=case != "no-mi355x")
    if case == "one-repeat":
        raw["workloads"][0]["repeats"] = 1
        values = {k: v[:1] for k, v in values.items()}
    if case == "no-rate":
        raw["workloads"][0] |= {"load": "concurrency", "rates": [], "concurrency": [4, 8]}
    if case == "no-mi355x":
        values.pop("mi355x-sglang")
    plan = plan_from_dict(raw)
    check = claims.check_claim(claims.load_claim(SEED), plan, tables(plan, values, emulated=case == "emulated"))
    main = check.figures[0]
    assert main.verdict == "not comparable"
    assert pd.Series([main.reason]).str.contains(expect).all(), main.reason


def test_cost_ratio_at_the_slo():
    """OCI list prices: MI355X 68.8, B200 112 USD/node-h. At equal throughput the cost ratio is 68.8/112
    = 0.614; the claimed 'about half' (0.45-0.55) is met when the MI355X node is ~1.2x as fast."""
    plan = plan_from_dict(plan_dict())
    same = tables(plan, {"mi355x-sglang": [3000.0, 3010.0, 2990.0], "b200-sglang": [3000.0, 3010.0, 2990.0]})
    (k,) = claims.check_claim(claims.load_claim(SEED), plan, same).costs
    assert (k.target, k.rival) == ("mi355x-sglang", "b200-sglang")
    assert k.ratio.value == pytest.approx(68.8 / 112, rel=1e-3) and k.verdict == "not reproduced"
    faster = tables(plan, {"mi355x-sglang": [3700.0, 3710.0, 3690.0], "b200-sglang": [3000.0, 3010.0, 2990.0]})
    (k,) = claims.check_claim(claims.load_claim(SEED), plan, faster).costs
    assert k.ratio.value == pytest.approx(68.8 / 112 * 3000 / 3700, rel=1e-2) and k.verdict == "reproduced"
    assert k.ratio.low <= k.ratio.value <= k.ratio.high
    missed = tables(plan, {"mi355x-sglang": [3700.0] * 3, "b200-sglang": [3000.0] * 3}, meets_slo=False)
    (k,) = claims.check_claim(claims.load_claim(SEED), plan, missed).costs
    assert k.verdict == "not comparable" and "has no cost at the SLO" in k.reason


def test_at_the_slo_reads_the_closed_loop_sweep_of_the_same_lengths():
    """An open-loop rate point measures the offered load; what a node carries at the SLO (and what it costs)
    comes from the plan's closed-loop workload with the claim's lengths and prefix share."""
    raw = plan_dict()
    raw["workloads"].append(
        {**raw["workloads"][0], "name": "sweep", "load": "concurrency", "rates": [], "concurrency": [8, 16]}
    )
    plan = plan_from_dict(raw)
    t = tables(
        plan,
        {"mi355x-sglang": [2600.0, 2640.0, 2620.0], "b200-sglang": [2600.0, 2640.0, 2620.0]},
        sweep={"mi355x-sglang": [9000.0, 9100.0, 8900.0], "b200-sglang": [7000.0, 7100.0, 6900.0]},
    )
    check = claims.check_claim(claims.load_claim(SEED), plan, t)
    main = check.figures[0]
    assert check.workload == "claim" and main.at_config.value == pytest.approx(2620.0)
    assert main.at_slo.value == pytest.approx(9000.0) and main.at_slo.load == "concurrency 16, sweep"
    (k,) = check.costs
    assert k.ratio.value == pytest.approx(68.8 / 112 * 7000 / 9000, rel=1e-3) and k.ratio.load == "at the SLO, sweep"


# --- a cost claim's basis -----------------------------------------------------------------------


def _seed_raw() -> dict:
    return yaml.safe_load((claims.claims_dir() / f"{SEED}.yaml").read_text())


@pytest.mark.parametrize(
    "path,value,message",
    [
        (("throughput", "other", "value"), None, r"basis\.throughput\.other\.value: a throughput side gives"),
        (("price", "ratio"), 0, r"basis\.price\.ratio: Input should be greater than 0"),
        (("price", "other", "gpu"), "b999", r"basis\.price\.other\.gpu: 'b999' is not a catalog GPU"),
        (("throughput", "this", "precision"), "fp4", r"basis\.throughput\.this\.precision: 'fp4' is not a precision"),
        (("throughput", "this", "gpu"), "b200", r"basis: throughput\.this\.gpu and price\.this\.gpu are the claim"),
        (("price", "when"), "2026", r"basis\.price\.when: unknown field"),
    ],
)
def test_a_malformed_basis_names_the_field(tmp_path, monkeypatch, path, value, message):
    raw = _seed_raw()
    node = raw["basis"]
    for key in path[:-1]:
        node = node[key]
    if value is None:
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    monkeypatch.setenv("BAKEOFF_CLAIMS", str(tmp_path))
    (tmp_path / f"{SEED}.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(claims.ClaimError, match=message):
        claims.load_claim(SEED)


def test_the_claims_own_arithmetic_by_hand():
    """2,626 / 3,192 = 0.8227 against B200; 2.75x price against B300; 0.8227^-1 / 2.75 = 1.2155 / 2.75 = 0.4420."""
    b = claims.load_claim(SEED).basis
    tp = b.throughput
    assert tp.this.value / tp.other.value == pytest.approx(0.8227, abs=1e-4)
    assert claims.claimed_cost_ratio(tp, b.price.ratio) == pytest.approx(0.4420, abs=1e-4)
    assert (tp.other.gpu, b.price.other.gpu) == ("b200", "b300")  # the two halves name different rivals
    # a per-node figure on nodes of different size is divided by each node's GPUs; a per-GPU one is not
    small = tp.model_copy(update={"other": tp.other.model_copy(update={"gpus": 4})})
    assert claims.claimed_cost_ratio(small, 2.75) == pytest.approx(2 * 0.4420, abs=1e-4)
    per_gpu = small.model_copy(update={"metric": "output_tps_per_gpu"})
    assert claims.claimed_cost_ratio(per_gpu, 2.75) == pytest.approx(0.4420, abs=1e-4)


def test_like_for_like_prices_from_the_catalog_by_hand():
    """The same throughputs at one footing's prices. TCO tiers (dated 2026-04-30), USD/GPU-h MI355X vs B200:
    hyperscaler 1.48 vs 1.95 (1.3176x -> 1.2155 / 1.3176 = 0.9225), neocloud 1.90 vs 2.34 (1.2316x -> 0.9869),
    3yr rental 2.10 vs 2.90 (1.3810x -> 0.8802). OCI on-demand 68.8/8 = 8.60 vs 112/8 = 14.00 (1.6279x ->
    0.7467) is dated by the catalog snapshot it was read from, so it is used too."""
    pairs = {p.basis: p for p in claims.like_for_like_prices(claims.load_claim(SEED).basis.throughput)}
    assert pairs["TCO tier hyperscaler"].cost_ratio == pytest.approx(0.9225, abs=1e-4)
    assert pairs["TCO tier neocloud"].cost_ratio == pytest.approx(0.9869, abs=1e-4)
    assert pairs["TCO tier 3yr_rental"].cost_ratio == pytest.approx(0.8802, abs=1e-4)
    oci = pairs["oci on_demand list price"]
    assert (oci.this_usd, oci.other_usd) == (8.6, 14.0) and oci.cost_ratio == pytest.approx(0.7467, abs=1e-4)
    assert oci.dated and all(p.dated for p in pairs.values())
    # only one footing per pair: no row mixes two clouds or two markets
    assert all(p.basis.count(" ") <= 3 for p in pairs.values())


def test_the_run_supports_the_like_for_like_figure_or_the_claims():
    plan = plan_from_dict(plan_dict())
    # at the plan's OCI prices, MI355X at 2,000 vs B200 at 3,000 tok/s: 68.8/112 x 3000/2000 = 0.9214
    like = tables(plan, {"mi355x-sglang": [1995.0, 2000.0, 2005.0], "b200-sglang": [2995.0, 3000.0, 3005.0]})
    b = claims.check_claim(claims.load_claim(SEED), plan, like).basis
    assert b.cost_ratio == pytest.approx(0.4420, abs=1e-4) and b.mixed
    assert b.run.value == pytest.approx(68.8 / 112 * 3000 / 2000, rel=1e-3)
    assert b.supports.startswith("The run supports like-for-like (TCO tier hyperscaler)"), b.supports
    # MI355X at 4,170: 0.6143 x 3000 / 4170 = 0.4420, the claim's own figure
    claimed = tables(plan, {"mi355x-sglang": [4165.0, 4170.0, 4175.0], "b200-sglang": [2995.0, 3000.0, 3005.0]})
    b = claims.check_claim(claims.load_claim(SEED), plan, claimed).basis
    assert b.supports.startswith("The run supports the claim's arithmetic"), b.supports
    emulated = tables(plan, {"mi355x-sglang": [4170.0] * 3, "b200-sglang": [3000.0] * 3}, emulated=True)
    b = claims.check_claim(claims.load_claim(SEED), plan, emulated).basis
    assert b.supports.startswith("Not comparable (figures are EMULATED") and "EMULATED ratio 0.44" in b.supports
    alone = plan_from_dict(plan_dict(b200=False))
    b = claims.check_claim(claims.load_claim(SEED), alone, tables(alone, {"mi355x-sglang": [4170.0] * 3})).basis
    assert b.run is None and "the run has no B200 target" in b.supports


def test_the_report_states_the_basis_and_the_recomputation():
    from bakeoff.report import claimcheck

    plan = plan_from_dict(plan_dict())
    check = claims.check_claim(
        claims.load_claim(SEED), plan, tables(plan, {"mi355x-sglang": [2000.0] * 3, "b200-sglang": [3000.0] * 3})
    )
    ctx = claimcheck.context(check)
    own = ctx["basis"]["own"]
    assert "0.82× throughput against B200" in own and "2.75× price ratio against B300" in own and "= 0.44×" in own
    assert "about different GPUs" in own
    assert ctx["basis"]["recomputed"].startswith("At like-for-like prices (same cloud and market, dated)")
    assert "0.75–0.99×" in ctx["basis"]["recomputed"]
    assert not any("not used, undated" in line for line in ctx["basis"]["like_for_like"])  # every footing is dated
    assert any("price from a source not stated, undated" in line for line in ctx["basis"]["sides"])
