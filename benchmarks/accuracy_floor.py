"""The score a correct deployment gets on the built-in evaluation set: the figure models.yaml records as each
model's accuracy floor (``accuracy_floor``).

    .venv/bin/python benchmarks/accuracy_floor.py

Starts the hardware emulator (the reference path: it answers each question of bakeoff-arith-v1 with the exact
result, whatever the model) for one local target per catalog model and runs the accuracy gate
(``quality.accuracy.run_gate``) against it over loopback, with the plan defaults (200 items, seed 0). Prints
the score per model; every figure is EMULATED. A real checkpoint's measured score replaces the recorded
figure where one is measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff import catalog
from bakeoff.plan import plan_from_dict
from bakeoff.quality import accuracy
from bakeoff.serving.endpoint import Endpoint

KEY = "bk-floor-key"


def _plan(model: str):
    checkpoints = catalog.models()[model].checkpoints
    quantization = next((q for q in ("mxfp4", "fp8") if q in checkpoints), "bf16")  # the smallest that fits
    return plan_from_dict(
        {
            "name": "accuracy-floor",
            "budget_usd": 10,
            "targets": [
                # the emulator's answers do not depend on the hardware; the largest node fits every model
                {
                    "name": "ref",
                    "provider": "local",
                    "instance_type": "BM.GPU.MI355X.8",
                    "model": model,
                    "quantization": quantization,
                    "tensor_parallel": 8,
                    "emulator": {"time_scale": 0.01},
                }
            ],
            "workloads": [{"name": "w", "input_len": 64, "output_len": 16, "concurrency": [1]}],
        }
    )


def _serve(tmp: Path, target) -> tuple[subprocess.Popen, str]:
    cfg, port_file = tmp / "cfg.json", tmp / "port"
    cfg.write_text(
        json.dumps(
            {
                "mode": "roofline",
                "target": target.model_dump(mode="json"),
                "api_key_env": "FLOOR_KEY",
                "expires_at": time.time() + 300,
            }
        )
    )
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
        env=os.environ | {"FLOOR_KEY": KEY, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "include")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.time() + 60
    while not port_file.exists():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise SystemExit(f"emulator did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{int(port_file.read_text())}"


def main() -> None:
    print("model                 score   correct/n  eval set            (EMULATED: the reference path)")
    for name in catalog.models():
        plan = _plan(name)
        (target,) = plan.targets
        with tempfile.TemporaryDirectory() as d:
            proc, url = _serve(Path(d), target)
            try:
                ep = Endpoint(
                    target=target.slug, base_url=url, model=target.served_model_id, stack=target.stack, emulated=True
                )
                doc = accuracy.run_gate(ep, KEY, target, plan, Path(d) / "out")
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(10)
        recorded = target.model_spec.accuracy_floor.score
        print(
            f"{name:<20} {doc['score']:6.3f}   {doc['correct']:>4}/{doc['n']:<4}  {doc['eval_set']['name']}"
            f"  errors {doc['errors']}  recorded {recorded:.3f}"
        )


if __name__ == "__main__":
    main()
