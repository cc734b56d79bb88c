"""The bakeoff DAG against a static endpoint started outside bakeoff under its own model id, on
hardware the plan describes rather than a catalog instance."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bakeoff import store
from bakeoff.plan import load_plan
from tests.conftest import ROOT
from tests.e2e.conftest import dag_run_state, run_dag

pytestmark = pytest.mark.e2e


@pytest.fixture
def served_elsewhere(tmp_path):
    """The hardware emulator as someone else started it: keyless, answering to "my-llama" only."""
    target = load_plan("local-demo").targets[1].model_dump(mode="json")
    cfg = {"mode": "roofline", "target": target, "served_model": "my-llama"}
    (tmp_path / "emu.json").write_text(json.dumps(cfg))
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff.serving.emulator",
            "--config",
            str(tmp_path / "emu.json"),
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, "emulator did not start"
        time.sleep(0.1)
    yield f"http://127.0.0.1:{int(port_file.read_text())}"
    proc.terminate()
    proc.wait(10)


def test_static_endpoint_with_served_model_and_described_hardware(airflow_env, tmp_path, served_elsewhere):
    raw = yaml.safe_load((ROOT / "include" / "plans" / "local-demo.yaml").read_text())
    raw["name"] = "e2e-static"
    raw["targets"] = [
        {
            "name": "lab-box",
            "provider": "static",
            "model": "llama-3.1-70b",
            "quantization": "fp8",
            "tensor_parallel": 8,
            "served_model": "my-llama",
            "hardware": {"gpu": "RTX 6000 Ada", "gpus": 8, "description": "lab rack 3"},
            "price": {"usd_per_hour": 12.0, "market": "contract"},
            "provider_options": {"base_url": served_elsewhere},
        }
    ]
    for w in raw["workloads"]:
        w.update(concurrency=[1, 4], requests_per_point=8, warmup_requests=2, output_len=32, input_len=256, repeats=1)
    plan = tmp_path / "e2e-static.yaml"
    plan.write_text(yaml.safe_dump(raw))
    res = run_dag(airflow_env, plan)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    (rdir,) = (Path(airflow_env["BAKEOFF_DATA"]) / "results" / "e2e-static").glob("run_id=*")
    run = store.run_facts(rdir)
    assert dag_run_state(airflow_env, run.run_id) == "success"
    deploy = json.loads((rdir / "target=lab-box" / "deploy.json").read_text())
    assert deploy["models_offered"] == ["my-llama"] and deploy["served_by"]["stack"] == "emulator"
    assert not {"image", "engine_args", "env"} & set(deploy)
    points = pd.concat(pd.read_parquet(p) for p in rdir.glob("target=*/points/*.parquet"))
    assert len(points) == 2 and (points["completed"] == 8).all() and (points["ttft_connection"] == "warm").all()
    html = Path(run.report.files["html"]).read_text()
    assert "EMULATED" in html and "8x RTX 6000 Ada (described in the plan; lab rack 3)" in html
