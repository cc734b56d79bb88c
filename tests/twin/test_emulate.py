"""The emulator timed by the calibrated twin: its steps are the twin's predictions, and it says so."""

from __future__ import annotations

import pytest

from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.report.gather import gather
from bakeoff.report.markdown import render as render_markdown
from bakeoff.serving.emulator.config import config_from_dict
from bakeoff.serving.emulator.server import version_info
from bakeoff.twin import operating
from bakeoff.twin.emulate import band_pcts, efficiency_info, emulator_roofline
from bakeoff.twin.roofline import Roofline
from bakeoff.twin.target import STEP_OVERHEAD_S, TargetTwin, twin_for
from tests.report import synthetic


def _plan(efficiency: str, instance_type: str | None = None):
    raw = load_plan("local-demo").model_dump(mode="json")
    for t in raw["targets"]:
        t["emulator"]["efficiency"] = efficiency
        if instance_type:
            t["instance_type"] = instance_type
    return plan_from_dict(raw)


def _step(roof: Roofline, tw: TargetTwin, c: int, prefill: int) -> float:
    """One emulator step of c sequences at 1k in / 256 out (mid-output context) with ``prefill`` prompt tokens."""
    ctx = 1024 + 128
    kv_read = c * roof.kv_read_tokens(ctx)
    if tw.draft_tokens:
        return roof.verify_step_s(c, tw.draft_tokens, c * ctx, kv_read, prefill_tokens=prefill)
    return roof.step_s(prefill, c, c * ctx, kv_read)


def test_a_twin_timed_emulator_steps_as_the_twin_predicts():
    for t in _plan("twin").targets:
        tw = twin_for(t)
        assert isinstance(tw, TargetTwin)
        roof = emulator_roofline(t)
        assert roof.step_overhead_s == STEP_OVERHEAD_S
        assert roof.decode_bytes_per_s == pytest.approx(t.gpu.hbm_tbps * 1e12 * t.tensor_parallel * tw.efficiency)
        for c in (1, 8, 64):
            # c sequences at 1k in / 256 out as the emulator schedules them: decode steps, and a step that also
            # prefills one whole prompt each time another sequence starts ((c - 1) x AL / 256 such per step);
            # the emulator's mean step is the twin's TPOT x AL
            prompts = (c - 1) * tw.acceptance_length / 256
            decode, mixed = _step(roof, tw, c, 0), _step(roof, tw, c, round(1024 * max(prompts, 1)))
            emulated = mixed if prompts >= 1 else decode + prompts * (mixed - decode)
            assert emulated == pytest.approx(tw.tpot_s(c, 1024, 256) * tw.acceptance_length, rel=1e-9)
        info = efficiency_info(t)
        assert info["source"] == "twin" and info["band_pct"] > 0 and info["basis"] == tw.basis


def test_manual_efficiency_is_untouched_and_an_uncalibrated_target_says_why():
    for t in _plan("manual").targets:
        assert emulator_roofline(t) == Roofline.for_target(t)
        assert efficiency_info(t) == {
            "source": "manual",
            "prefill": t.emulator.prefill_efficiency,
            "decode": t.emulator.decode_efficiency,
        }
    (t, *_) = _plan("twin", instance_type="BM.GPU.H200.8").targets
    assert emulator_roofline(t) == Roofline.for_target(t)
    info = efficiency_info(t)
    assert info["source"] == "manual" and "no published MLPerf row on h200" in info["no_calibration"]
    cfg = config_from_dict({"mode": "roofline", "target": t.model_dump(mode="json")})
    assert version_info(cfg, emulator_roofline(t))["efficiency"] == info


def test_the_operating_point_and_the_emulator_share_one_roofline():
    t = _plan("twin").targets[0]
    tw = twin_for(t)
    assert isinstance(tw, TargetTwin)
    plain = operating.roofline(t.gpu, t.model_spec, t.quantization, t.tensor_parallel, "bf16")
    base = Roofline.for_target(t)
    assert plain.weights_read(64) == base.weights_read(64) and plain.kv_bytes_per_token == base.kv_bytes_per_token


def test_a_twin_timed_emulated_report_shows_the_band_beside_its_emulated_figures(tmp_path):
    raw = synthetic.plan_dict()
    raw["targets"][0]["emulator"] = {"efficiency": "twin"}  # the other target keeps manual efficiencies
    plan = plan_from_dict(raw)
    twin_timed, manual = plan.targets
    assert twin_timed.emulated and manual.emulated
    bands = band_pcts(plan.targets)
    tw = twin_for(twin_timed)
    assert isinstance(tw, TargetTwin) and bands == {twin_timed.name: efficiency_info(twin_timed)["band_pct"]}
    d = gather(plan, synthetic.make_run(tmp_path / "res", plan))
    assert d.emulator_bands == bands
    ranking = render_markdown(d).split("## Did not pass")[0]
    twin_row = next(x for x in ranking.splitlines() if x.startswith("| ") and f" {twin_timed.name} **EMULATED**" in x)
    manual_row = next(x for x in ranking.splitlines() if x.startswith("| ") and f" {manual.name} **EMULATED**" in x)
    assert f"(twin prediction ±{bands[twin_timed.name]:g}%)" in twin_row and "twin prediction" not in manual_row
