"""Learning from each run (prediction.runs): a measured run's points beside the twin's prediction, the report's
out-of-band flag, run points as calibration rows with provenance, and ``bakeoff twin add-run`` / ``refit``."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from bakeoff.cli import main
from bakeoff.plan import plan_from_dict
from bakeoff.prediction import runs
from bakeoff.report.gather import gather
from bakeoff.report.markdown import render as render_markdown
from bakeoff.twin.target import twin_for
from tests.report import synthetic


def _plan(provider: str = "oci"):
    raw = synthetic.plan_dict()
    for t in raw["targets"]:
        t["provider"] = provider
    return plan_from_dict(raw)


def _points(plan, factor: dict[str, float]) -> pd.DataFrame:
    """Points measured at the twin's own prediction times ``factor`` per target."""
    rows = []
    w = plan.workloads[0]
    for t in plan.targets:
        tw = twin_for(t)
        for c in w.levels():
            pred = tw.tokens_s_per_gpu(c, w.input_len, w.output_len)
            rows.append(
                {
                    "run_id": "r1",
                    "target": t.slug,
                    "workload": w.name,
                    "concurrency": c,
                    "repeat": 0,
                    "load_mode": "concurrency",
                    "emulated": False,
                    "output_tps_per_gpu": pred * factor[t.slug],
                    "tpot_ms_p50": tw.tpot_s(c, w.input_len, w.output_len) * 1000 / factor[t.slug],
                }
            )
    return pd.DataFrame(rows)


def test_points_inside_the_band_hold_and_points_outside_are_flagged():
    plan = _plan()
    checks = runs.check_run(plan, _points(plan, {"mi355x-vllm": 1.0, "b200-vllm": 3.0}))
    assert len(checks) == 2 * len(plan.workloads[0].levels())
    mi = [c for c in checks if c["target"] == "mi355x-vllm"]
    b2 = [c for c in checks if c["target"] == "b200-vllm"]
    assert all(c["in_band"] and abs(c["error_pct"]) < 1 for c in mi)
    assert not any(c["in_band"] for c in b2) and all(c["error_pct"] == pytest.approx(200, abs=2) for c in b2)
    d = type("D", (), {"twin_checks": checks, "emulated": False})()
    flag = runs.out_of_band_caveat(d)
    assert flag and "b200-vllm" in flag and "mi355x-vllm" not in flag and "3 of 6" in flag
    d.emulated = True
    assert runs.out_of_band_caveat(d) is None  # an emulated run measures the emulator, not the hardware
    d.emulated, d.twin_checks = False, mi
    assert runs.out_of_band_caveat(d) is None


def test_a_measured_runs_report_shows_predicted_vs_measured_and_the_flag(tmp_path):
    plan = _plan()
    rdir = synthetic.make_run(tmp_path / "res", plan, emulated=False, speed={"mi355x-vllm": 400.0})
    d = gather(plan, rdir)
    assert d.twin_checks and {c["target"] for c in d.twin_checks} == {"mi355x-vllm", "b200-vllm"}
    md = render_markdown(d)
    assert "## Predicted vs measured" in md
    # 400 ms per token on an MI355X is far below what the twin predicts: flagged in the caveats
    assert any("Outside the calibrated twin's band" in c and "mi355x-vllm" in c for c in d.caveats)


def test_a_run_row_implies_the_efficiency_the_twin_would_have_predicted_it_with():
    plan = _plan()
    row = next(r for r in runs.run_rows(plan, _points(plan, {"mi355x-vllm": 1.0, "b200-vllm": 1.0}), "r1"))
    tw = twin_for(next(t for t in plan.targets if t.name == row.target))
    assert row.per_gpu / row.roofline_tokens_s_per_gpu == pytest.approx(tw.efficiency, rel=1e-3)
    half = runs.run_rows(plan, _points(plan, {"mi355x-vllm": 0.5, "b200-vllm": 0.5}), "r1")[0]
    assert half.per_gpu / half.roofline_tokens_s_per_gpu < 0.5 * tw.efficiency  # slower: a lower efficiency
    assert row.row == f"r1/{row.target}/{plan.workloads[0].name}/c1" and row.scenario == "Server"
    assert (row.model, row.served_model) == ("llama-2-70b", "llama-3.1-70b")  # read through its calibrated kind


def test_an_emulated_run_never_joins_the_calibration_set():
    plan = _plan()
    pts = _points(plan, {"mi355x-vllm": 1.0, "b200-vllm": 1.0}).assign(emulated=True)
    with pytest.raises(ValueError, match="EMULATED"):
        runs.run_rows(plan, pts, "r1")


def test_run_rows_round_trip_skip_duplicates_and_a_bad_line_is_named(tmp_path):
    plan = _plan()
    rows = runs.run_rows(plan, _points(plan, {"mi355x-vllm": 1.0, "b200-vllm": 1.0}), "r1")
    path = tmp_path / "runs.csv"
    assert runs.write_rows(path, rows) == len(rows) and runs.write_rows(path, rows) == 0
    assert runs.read_rows(path) == rows
    bad = path.read_text().replace(str(rows[1].tokens_s_per_gpu), "-5", 1)
    path.write_text(bad)
    with pytest.raises(ValueError, match="line 3: tokens_s_per_gpu must be a positive number"):
        runs.read_rows(path)


def test_refit_moves_the_twin_toward_the_run_and_prints_the_held_out_error(tmp_path, capsys, data_root):
    plan = _plan()
    rows = runs.run_rows(plan, _points(plan, {"mi355x-vllm": 0.6, "b200-vllm": 0.6}), "r1")
    r = runs.refit(rows)
    # the shipped twin, which never saw the run, is off by about the 40% the run is slower
    assert r["run_rows"] == len(rows) and 40 < r["shipped_on_run_rows_median_ape"] < 80
    # out of fold the other points of the same target teach it: far nearer than the shipped twin
    assert r["out_of_fold_run_rows_median_ape"] < r["shipped_on_run_rows_median_ape"] / 2
    path = tmp_path / "runs.csv"
    runs.write_rows(path, rows)
    assert main(["twin", "refit", "--runs", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"+ {len(rows)} run rows" in out and "random hold-out: median APE" in out
    path.write_text("not,a,run,file\n1,2,3,4\n")
    assert main(["twin", "refit", "--runs", str(path)]) == 2
    assert "line 2: not a run row" in capsys.readouterr().err


def test_add_run_cli_appends_a_measured_runs_points_and_refuses_an_emulated_one(tmp_path, capsys):
    plan = _plan()
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    rdir = synthetic.make_run(tmp_path / "res", plan, emulated=False)
    into = tmp_path / "runs.csv"
    assert main(["twin", "add-run", str(rdir), "--plan", str(plan_file), "--into", str(into)]) == 0
    assert "added 6 run rows" in capsys.readouterr().out
    added = runs.read_rows(into)
    assert {(r.run_id, r.plan) for r in added} == {("manual__2026-11-01T00:00:00+00:00", plan.name)}
    emu = synthetic.make_run(tmp_path / "emu", plan, emulated=True)
    assert main(["twin", "add-run", str(emu), "--plan", str(plan_file), "--into", str(into)]) == 2
    assert "EMULATED" in capsys.readouterr().err
    assert len(runs.read_rows(into)) == 6  # nothing of the emulated run was written


def test_an_emulated_twin_timed_report_computes_its_band_caveat_from_the_table_and_writes_the_csv(tmp_path):
    from bakeoff.report import build_report

    raw = synthetic.plan_dict(repeats=2)
    for t in raw["targets"]:
        t["emulator"] = {"efficiency": "twin"}
    plan = plan_from_dict(raw)
    # mi355x at the twin's own figure; b200 at 10 ms per token at c=1, far from what the twin predicts
    tw = twin_for(plan.targets[0])
    w = plan.workloads[0]
    rdir = synthetic.make_run(
        tmp_path / "res", plan, emulated=True, speed={"mi355x-vllm": tw.tpot_s(1, w.input_len, w.output_len) * 1000}
    )
    d = gather(plan, rdir)
    rows = d.twin_checks
    assert rows and {r["figures"] for r in rows} == {"EMULATED"}
    inside = sum(r["in_band"] for r in rows)
    assert 0 < inside < len(rows)  # some rows in, some out: the count below can be told from a constant
    (caveat,) = [c for c in d.caveats if "fitted efficiencies" in c]
    assert f"{inside} of {len(rows)} fall inside the twin's band" in caveat and "within that band" not in caveat
    assert not any("Outside the calibrated twin's band" in c for c in d.caveats)  # that flag is for hardware
    # the headline carries the twin's band on each ranked cost
    assert "EMULATED figures are the twin's predictions" in d.summary and "band" in d.summary
    paths = build_report(plan, rdir, tmp_path / "out")
    csv = pd.read_csv(paths["csv_predicted_vs_measured"])
    assert paths["csv_predicted_vs_measured"].endswith("-predicted-vs-measured.csv")
    assert len(csv) == len(rows) and int(csv["inside_band"].sum()) == inside
    assert set(csv["figures"]) == {"EMULATED"} and (csv["band_low"] <= csv["predicted_output_tok_s_per_gpu"]).all()
    md = render_markdown(d)
    assert "| figures | measured output tok/s per GPU |" in md
