"""The bakeoff DAG end to end on the local provider: success, and failures that must not leak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bakeoff import store
from bakeoff.core import facts
from tests.e2e.conftest import dag_run_state, live_emulators, mapped_task_instances, run_dag, small_plan
from tests.smtp_sink import SmtpSink

pytestmark = pytest.mark.e2e


def _run_dir(env, plan_name: str) -> Path:
    """Each test uses its own plan name, so its plan has exactly one run."""
    (rdir,) = (Path(env["BAKEOFF_DATA"]) / "results" / plan_name).glob("run_id=*")
    return rdir


def _slots(rdir: Path) -> dict[str, dict]:
    """The run's node-limit records (bakeoff.clusters.node_slots), by target."""
    return {f.stem: json.loads(f.read_text()) for f in rdir.glob("node_slots/*.json")}


def _live_emulators(env) -> list[str]:
    """Emulator processes started under this test's data root that are still alive."""
    return live_emulators(env["BAKEOFF_DATA"])


def test_demo_plan_runs_end_to_end(airflow_env, tmp_path):
    plan = small_plan(tmp_path, "e2e-ok")
    res = run_dag(airflow_env, plan)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    rdir = _run_dir(airflow_env, "e2e-ok")
    run = store.run_facts(rdir)  # the steps' records; the run's outcome is Airflow's
    assert dag_run_state(airflow_env, run.run_id) == "success" and list(run.report.failed_steps) == []
    assert not hasattr(run, "status")
    # the grid shows what the plan runs: one group, a map index per target labelled with its name
    tis = mapped_task_instances(airflow_env, run.run_id)
    assert {tid.split(".", 1)[0] for tid, _, _ in tis} == {"target"}
    assert {(i, label) for _, i, label in tis} == {(0, "mi355x-vllm"), (1, "b200-vllm")}
    assert {tid for tid, _, _ in tis} == {f"target.{s}" for s in ("wait_slot", "provision", "wait_node", "deploy")} | {
        f"target.{s}" for s in ("wait_serving", "accuracy_gate", "benchmark", "wait_benchmark", "terminate")
    }
    # the local provider is unlimited: each target claimed and released its node
    assert {s: rec["released_at"] is not None for s, rec in _slots(rdir).items()} == {
        "mi355x-vllm": True,
        "b200-vllm": True,
    }
    points = pd.concat(pd.read_parquet(p) for p in rdir.glob("target=*/points/*.parquet"))
    assert sorted(points["target"].unique()) == ["b200-vllm", "mi355x-vllm"]
    assert len(points) == 4 and points["emulated"].all() and (points["total_tps_per_gpu"] > 0).all()
    html = Path(run.report.files["html"]).read_text()
    assert "EMULATED" in html and "mi355x-vllm" in html and "b200-vllm" in html
    # the demo emulates on the calibrated twin: its band beside each ranked target's EMULATED stamp
    assert html.count('class="muted twin-band">twin prediction ±') >= 2
    # the dashboard's document, in the published manifest: each target's two load levels and its node
    (manifest,) = (Path(airflow_env["BAKEOFF_DATA"]) / "reports" / "e2e-ok").glob("*/manifest.json")
    dash = json.loads(manifest.read_text())["dashboard"]
    assert sorted(t["name"] for t in dash["targets"].values()) == ["b200-vllm", "mi355x-vllm"]
    for t in dash["targets"].values():
        assert t["provisioned"] is True and t["config"]["engine"] == "vllm"
        assert [len(w["frontier"]) for w in t["workloads"].values()] == [2]
    assert not _live_emulators(airflow_env)
    # nothing billed: the approval step was skipped and says why; the conf is kept for "run again"
    assert run.approval.decision == "not required" and run.start.conf["plan"] == "e2e-ok"
    # publish built the signed evidence bundle beside the reports, and it verifies with this installation's key
    (bundle,) = (Path(airflow_env["BAKEOFF_DATA"]) / "reports" / "e2e-ok").glob("run_id=*/*-evidence.zip")
    env = {k: v for k, v in os.environ.items() if k != "BAKEOFF_SECRET_KEY"}
    env["BAKEOFF_DATA"] = airflow_env["BAKEOFF_DATA"]
    out = subprocess.run(
        [sys.executable, "-m", "bakeoff", "verify", str(bundle)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "this installation's key" in out.stdout, out.stdout + out.stderr


@pytest.fixture(scope="module")
def failed_run(airflow_env, tmp_path_factory):
    """One DAG run failing two ways, read by two tests: b200-vllm's benchmark fails (its teardown must still
    run, mi355x-vllm's results must be kept, the alert mailed), and a third target, mi355x-orphan, fails
    provisioning right after its node was created (the all_done sweep must kill that orphan). One run
    instead of two: each fault is on its own target, and each test checks its own target's records."""
    plan = small_plan(tmp_path_factory.mktemp("failed"), "e2e-fail", fault={"b200-vllm": "benchmark"})
    raw = yaml.safe_load(plan.read_text())
    (mi355x,) = (t for t in raw["targets"] if t["name"] == "mi355x-vllm")
    orphan = {**mi355x, "name": "mi355x-orphan", "provider_options": {"inject_fault": "after_create"}}
    raw["targets"].append(orphan)
    raw["budget_usd"] = raw["budget_usd"] * 2  # room for the third node's worst case
    plan.write_text(yaml.safe_dump(raw))
    with SmtpSink() as sink:  # the DAG's failure notifier mails the alert address through the SMTP connection
        res = run_dag({**airflow_env, **sink.connection_env(), "BAKEOFF_ALERT_EMAIL": "oncall@example.com"}, plan)
    rdir = _run_dir(airflow_env, "e2e-fail")
    return res, sink.messages, rdir, store.run_facts(rdir), _live_emulators(airflow_env)


def test_failed_benchmark_fails_run_but_tears_down(airflow_env, failed_run):
    res, messages, rdir, run, alive = failed_run
    assert res.returncode != 0
    [(to, mail)] = messages
    assert to == ["oncall@example.com"] and mail["Subject"].startswith("[bakeoff] bakeoff run ")
    assert mail["Subject"].endswith(" failed")
    assert dag_run_state(airflow_env, run.run_id) == "failed"
    assert run.target("b200-vllm").terminate is not None  # the teardown ran
    # the report and the published manifest name the failed task, from the DAG run's task states
    assert any(".benchmark" in step for step in list(run.report.failed_steps)), list(run.report.failed_steps)
    assert "These steps of the run failed" in Path(run.report.files["html"]).read_text()
    assert list(rdir.glob("target=mi355x-vllm/points/*.parquet"))  # the other target's results are kept
    assert not list(rdir.glob("target=b200-vllm/points/*.parquet"))  # (and the failed one has none)
    assert not alive


def test_failing_accuracy_gate_fails_the_dag_run(airflow_env, tmp_path):
    """Validation fails the gate of an emulator answering half the questions wrong: Airflow must
    record the DAG run as failed, and `airflow dags test` must exit non-zero."""
    plan = small_plan(tmp_path, "e2e-gate-fail", emulator={"b200-vllm": {"accuracy_error_rate": 0.5}})
    res = run_dag(airflow_env, plan)
    assert res.returncode != 0, res.stdout[-4000:] + res.stderr[-4000:]
    run = store.run_facts(_run_dir(airflow_env, "e2e-gate-fail"))
    assert dag_run_state(airflow_env, run.run_id) == "failed"
    assert not _live_emulators(airflow_env)


def test_accuracy_fault_on_every_target_fails_on_the_models_floor(airflow_env, tmp_path):
    """Both demo targets answer half the items wrong: each equals the best, so only the model's floor
    (models.yaml accuracy_floor) can fail them, and the DAG run must fail naming it."""
    half_wrong = {"accuracy_error_rate": 0.5}
    plan = small_plan(tmp_path, "e2e-floor", emulator={"mi355x-vllm": half_wrong, "b200-vllm": half_wrong})
    res = run_dag(airflow_env, plan)
    assert res.returncode != 0, res.stdout[-4000:] + res.stderr[-4000:]
    rdir = _run_dir(airflow_env, "e2e-floor")
    run = store.run_facts(rdir)
    assert dag_run_state(airflow_env, run.run_id) == "failed"
    assert any(step.endswith("validate") for step in list(run.report.failed_steps)), list(run.report.failed_steps)
    summary = json.loads((rdir / "validation.json").read_text())
    for slug in ("mi355x-vllm", "b200-vllm"):
        (failure,) = summary["targets"][slug]["accuracy"]["failures"]
        assert "below the floor for deepseek-v4-pro" in failure, failure
    assert "below the floor for deepseek-v4-pro" in res.stdout + res.stderr
    # the report shows each target's score beside the score its model's floor requires (99% of 1.000)
    assert summary["accuracy_floors"]["b200-vllm"]["need"] == 0.99
    html = Path(run.report.files["html"]).read_text()
    assert html.count("floor = 0.99") == 2, html[html.find("Accuracy:") :][:400]
    assert not _live_emulators(airflow_env)


def test_provision_failing_after_create_is_swept(airflow_env, failed_run):
    _, _, rdir, run, alive = failed_run
    assert dag_run_state(airflow_env, run.run_id) == "failed"
    # the orphan is the plan's third target (map index 2): its provision task failed
    assert any(".provision" in step and step.endswith("_2") for step in list(run.report.failed_steps)), list(
        run.report.failed_steps
    )
    swept = run.sweep.terminated["local"]
    assert len(swept) == 1  # the all_done sweep killed the orphan, and only it
    # the others gave their node back in terminate, before the sweep; the orphan's provision failed
    # after its create, so its slot is kept while its node lives and the sweep releases it once gone
    slots = _slots(rdir)
    assert sorted(slots) == ["b200-vllm", "mi355x-orphan", "mi355x-vllm"]
    orphan = slots.pop("mi355x-orphan")
    assert orphan["claimed_at"] <= run.sweep.at <= orphan["released_at"], orphan
    assert all(s["claimed_at"] <= s["released_at"] <= run.sweep.at for s in slots.values()), slots
    assert not alive


@pytest.mark.parametrize("plan", ["mi355x-vs-b200-sandbox", "mi355x-vs-b200-oci-sandbox"])
def test_sandbox_plan_runs_through_the_dag_with_co_located_clients(airflow_env, tmp_path, plan):
    """mi355x-vs-b200 rehearsed through the DAG's own hooks: Airflow connections point the Vultr, EC2
    and OCI providers at the sandbox clouds, the client bundle is staged in moto's S3 through the
    connection and Variable the hooks read, each node runs the benchmark next to its server."""
    from bakeoff_sandbox import Sandbox

    with Sandbox(boot_s=0.1) as sb:
        env = {**airflow_env, **sb.env()}
        res = run_dag(env, plan)
        live = sb.live()
        signing_key_line = sb.fakes["oci"].api_key[0].strip().splitlines()[1]
        firewalls_left = dict(sb.fakes["digitalocean"].firewalls)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert signing_key_line not in res.stdout + res.stderr
    rdir = _run_dir(airflow_env, plan)
    run = store.run_facts(rdir)
    assert (
        dag_run_state(airflow_env, run.run_id) == "success"
        and live == {"aws": [], "vultr": [], "digitalocean": [], "oci": []}
        and not firewalls_left
    )
    for slug in ("mi355x-vllm", "b200-vllm"):
        assert run.target(slug).benchmark == facts.Benchmark(points=2, client_mode="co-located")
        assert len(run.target(slug).provision.client_bundle) == 64
    points = pd.concat(pd.read_parquet(p) for p in rdir.glob("target=*/points/*.parquet"))
    assert (points["power_w_per_gpu"] > 0).all() and points["emulated"].all()
    # the sandbox nodes' emulators serve an emulated NVML/amdsmi: energy through the library path
    assert set(points["energy_library"]) <= {"nvml=EMULATED", "amdsmi=EMULATED"}
    html = Path(run.report.files["html"]).read_text()
    assert "client co-located on the node" in html and "energy measured, energy counters, GPU only" in html
