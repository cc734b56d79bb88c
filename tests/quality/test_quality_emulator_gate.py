"""The accuracy gate against the real hardware emulator process (loopback, port 0)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("bakeoff.serving.emulator")

from quality_fixtures import make_plan

from bakeoff.core.endpoint import Endpoint
from bakeoff.quality import accuracy


def start_emulator(tmp_path, target, api_key: str):
    cfg = tmp_path / f"{target.slug}.json"
    cfg.write_text(
        json.dumps(
            {
                "mode": "roofline",
                "target": target.model_dump(mode="json"),
                "api_key_env": "QUALITY_TEST_KEY",
                "expires_at": time.time() + 120,
            }
        )
    )
    port_file = tmp_path / f"{target.slug}.port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff.serving.emulator",
            "--config",
            str(cfg),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ],
        env=os.environ | {"QUALITY_TEST_KEY": api_key},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + 30
    while not port_file.exists():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"emulator did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{int(port_file.read_text())}"


@pytest.fixture
def emulators(tmp_path):
    procs = []

    def start(target, key):
        proc, url = start_emulator(tmp_path, target, key)
        procs.append(proc)
        return url

    yield start
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(10)


@pytest.mark.slow
def test_emulator_passes_the_gate_and_injected_errors_fail_it(tmp_path, emulators):
    plan = make_plan(accuracy={"eval_size": 100, "concurrency": 16})
    raw = plan.model_dump(mode="json")
    for t, rate in zip(raw["targets"], (0.0, 0.05), strict=True):
        t["emulator"] = {"time_scale": 0.02, "accuracy_error_rate": rate}
    from bakeoff.plan import plan_from_dict

    plan = plan_from_dict(raw)
    docs = {}
    for t in plan.targets:
        url = emulators(t, "bk-emulator-key")
        ep = Endpoint(target=t.slug, base_url=url, model=t.model_spec.hf_id, stack=t.stack, emulated=True)
        docs[t.slug] = accuracy.run_gate(ep, "bk-emulator-key", t, plan, tmp_path / t.slug)
    good, bad = docs["mi355x-vllm"], docs["b200-vllm"]
    assert good["errors"] == 0 and good["score"] == 1.0 and good["mean_output_tokens"] == 1.0
    assert bad["errors"] == 0 and 0.88 <= bad["score"] < 0.99
    v = accuracy.judge(plan, docs)
    assert v["targets"]["mi355x-vllm"]["passed"] and not v["targets"]["b200-vllm"]["passed"]
