"""Learning from the installation's own runs: ``bakeoff twin refit`` reads the results store's runs of real
targets (never an emulated one), saves the installation's calibration beside the runs (the shipped set
untouched), the report shows the error before and after, and the opt-in refit after publish."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bakeoff import store
from bakeoff.cli import main
from bakeoff.plan import plan_from_dict
from bakeoff.prediction import runs
from bakeoff.report.gather import gather
from bakeoff.report.html import render as render_html
from bakeoff.report.markdown import render as render_markdown
from bakeoff.run import pipeline
from bakeoff.twin import calibration
from tests.report import synthetic

SHIPPED = Path(calibration.__file__).with_name("calibration.csv")


def _plan(provider: str = "oci"):
    raw = synthetic.plan_dict()
    for t in raw["targets"]:
        t["provider"] = provider
    return plan_from_dict(raw)


def _real_run(run_id: str = "manual__real", speed: dict[str, float] | None = None) -> Path:
    """A hand-built run of real (non-emulated) targets in the installation's results store."""
    return synthetic.make_run(Path(store.results_root()), _plan(), run_id, emulated=False, speed=speed)


def test_only_real_targets_runs_become_calibration_rows(data_root):
    plan = _plan()
    _real_run("manual__real")
    synthetic.make_run(Path(store.results_root()), plan, "manual__emulated", emulated=True)
    # points not marked EMULATED, but the deploy step says the node was the emulator: still never a row
    mixed = synthetic.make_run(Path(store.results_root()), plan, "manual__sandbox", emulated=False)
    store.record(mixed, "deploy", {"emulated": True}, slug="b200-vllm")
    rows, skipped = runs.published_run_rows()
    assert {r.run_id for r in rows} == {"manual__real", "manual__sandbox"}
    assert {r.target for r in rows if r.run_id == "manual__sandbox"} == {"mi355x-vllm"}
    assert any(s.startswith("manual__emulated:") for s in skipped)


def test_a_run_of_emulated_targets_never_enters_even_unmarked(data_root):
    # the local provider serves with the emulator: its target is emulated whatever its points say
    synthetic.make_run(Path(store.results_root()), _plan("local"), "manual__local", emulated=False)
    rows, skipped = runs.published_run_rows()
    assert rows == [] and len(skipped) == 1
    r = runs.refit_installation()
    assert "run_rows" not in r and "saved" not in r and runs.installation_rows() == []


def test_refit_saves_the_installations_calibration_and_the_report_shows_before_and_after(data_root, capsys):
    shipped = hashlib.sha256(SHIPPED.read_bytes()).hexdigest()
    rdir = _real_run(speed={"mi355x-vllm": 40.0, "b200-vllm": 40.0})
    synthetic.make_run(Path(store.results_root()), _plan(), "manual__emulated", emulated=True)
    before = gather(_plan(), rdir)
    assert before.twin_checks and not any("refit_error_pct" in c for c in before.twin_checks)
    assert main(["twin", "refit"]) == 0
    out = capsys.readouterr().out
    assert "run rows (1 runs)" in out and "the installation's calibration saved to" in out
    saved = runs.installation_rows()
    assert saved and {r.run_id for r in saved} == {"manual__real"}
    assert hashlib.sha256(SHIPPED.read_bytes()).hexdigest() == shipped  # the shipped data untouched
    assert store.read_json(runs.installation_path(runs.INSTALLATION_SUMMARY))["run_rows"] == len(saved)
    d = gather(_plan(), rdir)
    assert all("refit_error_pct" in c for c in d.twin_checks)
    mean = lambda key: sum(abs(c[key]) for c in d.twin_checks) / len(d.twin_checks)  # noqa: E731
    assert mean("refit_error_pct") < mean("error_pct")  # the refit learned this installation's hardware
    md = render_markdown(d)
    assert "error after the refit" in md and "scored in sample" in md
    html = render_html(d)
    assert "error after the refit" in html and f"{d.twin_checks[0]['refit_error_pct']:+.1f}%" in html
    csv_rows = d.predicted_vs_measured
    assert {"refit_predicted_output_tok_s_per_gpu", "refit_error_pct"} <= set(csv_rows[0])


def test_dry_run_saves_nothing(data_root, capsys):
    _real_run()
    assert main(["twin", "refit", "--dry-run"]) == 0
    assert "not saved (--dry-run)" in capsys.readouterr().out
    assert runs.installation_rows() == []


@pytest.mark.parametrize(
    ("value", "env", "want"),
    [(None, None, False), ("true", None, True), ("false", "true", False), (None, "yes", True), ("", "1", True)],
)
def test_refit_after_publish_is_an_installation_opt_in(monkeypatch, value, env, want):
    if env is None:
        monkeypatch.delenv(runs.REFIT_AFTER_PUBLISH_ENV, raising=False)
    else:
        monkeypatch.setenv(runs.REFIT_AFTER_PUBLISH_ENV, env)
    assert runs.refit_after_publish(value) is want


def test_publish_refits_when_the_installation_opts_in(data_root, monkeypatch):
    rdir = _real_run()
    monkeypatch.setattr(pipeline, "bundle", lambda *a, **k: "evidence.zip")
    monkeypatch.setattr(pipeline, "publish_reports", lambda plan, run_dir, files, failed_steps: {"files": files})
    assert "twin_refit" not in pipeline.publish(str(rdir), {}, refit_twin="false")
    assert runs.installation_rows() == []
    out = pipeline.publish(str(rdir), {}, refit_twin="true")
    assert out["twin_refit"]["runs"] == 1 and out["twin_refit"]["run_rows"] == len(runs.installation_rows()) > 0
