"""A run stored in S3 (moto, through an Airflow connection) is costed, reported and published there:
what workers that share no disk do. The run's failed steps, handed in by the orchestrator, show."""

import json
import zipfile

import pytest
import synthetic

from bakeoff import store
from bakeoff.paths import run_folder
from bakeoff.publishing import evidence
from bakeoff.publishing.publish import list_published
from bakeoff.quality.validate import ValidationFailed
from bakeoff.run import pipeline


@pytest.mark.slow
def test_report_and_publish_from_an_s3_results_store(s3_store, tmp_path):
    plan = synthetic.make_plan(concurrency=(1, 4))
    rdir = synthetic.make_run(None, plan, run_id="manual__s3", held_hours={plan.targets[0].slug: 0.5})
    assert str(rdir).startswith(f"s3://bakeoff_store_test@{s3_store}/results/")
    assert rdir.name == f"run_id={run_folder('manual__s3')}"  # readable prefix + hash of the raw id
    run_dir = str(rdir)  # as tasks pass it
    with pytest.raises(ValidationFailed):  # synthetic rows miss the client's columns: what is stored matters
        pipeline.validate(run_dir)  # GX over the frames read from S3, its raw results written beside them
    assert store.read_record(run_dir, "validation") == {"passed": False, "failed_targets": ["mi355x-vllm", "b200-vllm"]}
    assert list(store.at(run_dir).glob("validation/*/*.json"))
    pipeline.cost(run_dir)
    paths = pipeline.report(run_dir, failed_steps=["sweep"])
    assert all(
        p.startswith(f"s3://bakeoff_store_test@{s3_store}/reports/synthetic/{rdir.name}/") for p in paths.values()
    )
    html = store.at(paths["html"]).read_text()
    assert "These steps of the run failed: sweep." in html
    assert store.at(paths["pdf"]).read_bytes().startswith(b"%PDF")
    assert list(store.run_facts(run_dir).report.failed_steps) == ["sweep"]

    published = pipeline.publish(run_dir, paths, failed_steps=["sweep"])
    assert published["status"] == "failed" and published["location"] == str(pipeline.report_dir("synthetic", rdir.name))
    manifest = json.loads(store.at(published["location"]).joinpath("manifest.json").read_text())
    assert manifest["failed_steps"] == ["sweep"] and manifest["run_id"] == "manual__s3"
    assert [r["run_id"] for r in list_published(plan_name="synthetic")] == ["manual__s3"]
    index = json.loads(store.at(published["index"]["index_json"]).read_text())
    assert index[0]["status"] == "failed"
    # the evidence bundle is built in the reports store too, from every object the run stored
    bundle = store.at(published["files"]["evidence"])
    assert manifest["files"]["evidence"] == bundle.name
    local = tmp_path / bundle.name
    local.write_bytes(bundle.read_bytes())
    verdict = evidence.verify(local)
    assert verdict.ok, verdict.errors
    with zipfile.ZipFile(local) as z:
        names = set(z.namelist())
    assert {"results/plan.json", "results/steps/start.json"} <= names
    assert any(n.startswith("results/target=mi355x-vllm/requests/") for n in names)
