"""``bakeoff summary`` finds a plan's runs whether the plan is given by name or as a file."""

import yaml

from bakeoff import store
from bakeoff.cli import main
from tests.conftest import ROOT


def test_summary_of_a_plan_file_looks_runs_up_by_the_plans_own_name(data_root, tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "include" / "plans" / "local-demo.yaml").read_text())
    raw["name"] = "my-plan"
    path = tmp_path / "somewhere" / "plan-file.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(raw))
    rdir = store.run_dir("my-plan", "r1")
    store.record(rdir, store.START, {"plan": "my-plan", "run_id": "r1", "started_at": 1.0})
    store.record(rdir, "report", {"html": "r1.html", "failed_steps": ["validate"]})
    assert main(["summary", "--plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "run r1 of plan my-plan: failed (validate)" in out and "html: r1.html" in out and "failed_steps" not in out
    assert main(["summary", "--plan", "my-plan"]) == 0
    empty = tmp_path / "other.yaml"
    empty.write_text(yaml.safe_dump({**raw, "name": "never-run"}))
    assert main(["summary", "--plan", str(empty)]) == 1
    assert f"no runs stored for plan 'never-run' (from {empty})" in capsys.readouterr().err
