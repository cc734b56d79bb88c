"""The score a correct deployment gets on the built-in evaluation set: the figure models.yaml records as each
model's accuracy floor (``accuracy_floor``).

    .venv/bin/python benchmarks/accuracy_floor.py

Starts the hardware emulator through the local provider, as a run does (the reference path: it answers each
question of bakeoff-arith-v1 with the exact result, whatever the model), for one local target per catalog
model, and runs the accuracy gate (``quality.accuracy.run_gate``) against it over loopback with the plan
defaults (200 items, seed 0). Prints the score per model; every figure is EMULATED. A real checkpoint's
measured score replaces the recorded figure where one is measured.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff import catalog
from bakeoff.core.endpoint import Endpoint
from bakeoff.plan import plan_from_dict
from bakeoff.providers.local import LocalProvider
from bakeoff.quality import accuracy

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


def main() -> None:
    print("model                 score   correct/n  eval set            (EMULATED: the reference path)")
    for name in catalog.models():
        plan = _plan(name)
        (target,) = plan.targets
        with tempfile.TemporaryDirectory() as d:
            os.environ["BAKEOFF_DATA"] = d  # the local provider's records, thrown away after
            provider = LocalProvider()
            spec = {"api_key": KEY, "expires_at": time.time() + 300}
            node = provider.wait_ready(provider.create(target, "accuracy-floor", tags={}, spec=spec), 120)
            try:
                ep = Endpoint(
                    target=target.slug,
                    base_url=node.base_url,
                    model=target.served_model_id,
                    stack=target.stack,
                    emulated=True,
                )
                doc = accuracy.run_gate(ep, KEY, target, plan, Path(d) / "out")
            finally:
                provider.terminate(node.id)
        recorded = target.model_spec.accuracy_floor.score
        print(
            f"{name:<20} {doc['score']:6.3f}   {doc['correct']:>4}/{doc['n']:<4}  {doc['eval_set']['name']}"
            f"  errors {doc['errors']}  recorded {recorded:.3f}"
        )


if __name__ == "__main__":
    main()
