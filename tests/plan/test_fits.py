"""A configuration that cannot run gets "does not fit" with the arithmetic, never a number: weights plus a
request's KV cache over the GPUs' memory, a TP that does not divide, a request longer than the model's
context. plan check, predict and start_run (before any approval request) refuse with one message; the
emulator's roofline refuses with the same arithmetic."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from bakeoff import catalog
from bakeoff.cli import main
from bakeoff.plan import PlanError, fits, load_plan, plan_from_dict
from bakeoff.run import pipeline
from bakeoff.twin.roofline import Roofline


def _demo(**target: Any) -> dict[str, Any]:
    raw = load_plan("local-demo").model_dump(mode="json", exclude_unset=True)
    raw["targets"] = [{**raw["targets"][0], **target}]
    return raw


GB200_TRAY = {  # DeepSeek-V4-Pro NVFP4 on one 4-GPU GB200 tray: 850 GB of weights, 744 GB of HBM
    "instance_type": "BM.GPU.GB200.4",
    "recipe": None,
    "image": None,
    "speculative": None,
    "quantization": "nvfp4",
    "tensor_parallel": 4,
}


def _refused_alike(raw: dict[str, Any], tmp_path, capsys, field: str) -> str:
    """plan check, predict and start_run refuse the plan, each naming ``field`` and saying 'does not fit'
    with the same message; returns it."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw)
    msg = str(e.value)
    assert field in msg and "does not fit" in msg
    why = msg.split("does not fit", 1)[1].strip()
    for argv in (["plan", "check", str(path)], ["predict", str(path)]):
        assert main(argv) != 0
        out = capsys.readouterr()
        assert why in out.err + out.out, argv
    with pytest.raises(PlanError) as started:  # start_run refuses before any approval request is made
        pipeline.start_run(str(path), "manual__does_not_fit")
    assert why in str(started.value)
    return msg


def test_weights_over_the_gpus_memory_do_not_fit_with_the_arithmetic(tmp_path, capsys):
    msg = _refused_alike(_demo(**GB200_TRAY), tmp_path, capsys, "targets[0].tensor_parallel")
    m = re.search(r"is (\d+) GB of weights .* over the (\d+) GB the engine takes on 4 x gb200", msg)
    assert m and int(m[1]) > int(m[2]), msg
    # the emulator's roofline refuses the same configuration with the same weights figure
    with pytest.raises(ValueError, match=f"does not fit: deepseek-v4-pro in nvfp4 is {m[1]} GB of weights"):
        Roofline.for_parts(
            catalog.gpus()["gb200"],
            catalog.models()["deepseek-v4-pro"],
            "nvfp4",
            tp=4,
            gpus_used=4,
            prefill_efficiency=1.0,
            decode_efficiency=1.0,
            max_num_seqs=256,
        )


def test_weights_that_fit_but_not_with_the_workloads_kv_cache_do_not_fit(tmp_path, capsys):
    # Llama-3.1-70B in BF16 on one B200: 141 GB of weights leave room for a 1k-token request's KV cache
    # (0.3 GB), not for a 120k-token one's (39 GB at 327,680 bytes a token)
    base = {
        "instance_type": "BM.GPU.B200.8",
        "recipe": None,
        "image": None,
        "speculative": None,
        "model": "llama-3.1-70b",
        "checkpoint": None,
        "quantization": "bf16",
        "tensor_parallel": 1,
    }
    raw = _demo(**base)
    assert plan_from_dict(raw)  # 1k-token requests fit
    raw["workloads"][0] |= {"input_len": 100_000, "output_len": 20_000, "range_ratio": 1.0}
    msg = _refused_alike(raw, tmp_path, capsys, "targets[0].tensor_parallel")
    assert "GB of KV cache for one 120000-token request" in msg and "workloads[0]" in msg


def test_a_tensor_parallel_that_does_not_divide_the_node_does_not_fit(tmp_path, capsys):
    msg = _refused_alike(_demo(tensor_parallel=3), tmp_path, capsys, "targets[0].tensor_parallel")
    assert "3 does not divide the 8 GPUs" in msg and "2 idle" in msg and "use one of 1, 2, 4, 8" in msg


def test_a_tensor_parallel_that_does_not_divide_the_kv_heads_does_not_fit():
    m = catalog.models()["minimax-m3"]  # GQA with 4 KV heads
    assert fits.tensor_parallel(m, 8, 8, 8, "node") is None  # 8 is a multiple of 4: heads replicated
    assert fits.tensor_parallel(m, 2, 2, 8, "node") is None
    why = fits.tensor_parallel(m, 3, 3, 6, "node")
    assert why and "4 KV heads" in why and "tensor_parallel 3" in why


def test_a_request_longer_than_the_models_context_does_not_fit(tmp_path, capsys):
    raw = _demo()
    ctx = catalog.models()["deepseek-v4-pro"].context
    raw["workloads"][0] |= {"input_len": ctx, "output_len": 128, "range_ratio": 1.0}
    msg = _refused_alike(raw, tmp_path, capsys, "workloads[0].input_len")
    assert f"beyond the {ctx}-token context" in msg
