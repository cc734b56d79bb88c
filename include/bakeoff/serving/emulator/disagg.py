"""A paper model of disaggregated serving: a prefill pool, a decode pool and the KV transfer between them.

For one arm of a multi-node recipe (plan.multinode) and a closed-loop concurrency C, with every figure
from the catalog and the roofline (serving.emulator.roofline), so each number can be redone by hand:

- a prefill worker (TP = its GPUs) prefills one prompt of isl tokens in ``prefill_s(isl)``; the pool of
  P workers finishes at most P / prefill_s requests a second;
- the prompt's KV (isl x the model's KV bytes per token) moves to a decode worker over NVLink when both
  roles sit in one NVLink domain (an NVL72 rack), else over the GPUs' scale-out NICs
  (multinode.SCALE_OUT_GBPS), each prefill GPU sending its shard;
- a decode worker holds C / D sequences at the middle of their output (isl + osl / 2 tokens of context)
  and advances them one step at a time (``decode_step_s``); with MTP a step verifies 3 draft tokens and
  yields the model's golden acceptance length (catalog.golden_al) or 1 where no curve is published;
- closed loop: each user's cycle is TTFT + osl / its decode speed, so the request rate is C / cycle,
  capped by the prefill pool; when the cap binds, the wait shows up as a longer TTFT.

Not modelled: the router's own time, expert-parallel all-to-all inside a worker (as in the roofline),
prefill batching gains, and queueing variance. Every figure it gives is EMULATED.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bakeoff import catalog
from bakeoff.plan.multinode import SCALE_OUT_GBPS, Arm, MultinodeRecipe
from bakeoff.plan.options import EmulatorSettings
from bakeoff.serving.emulator.roofline import Roofline

MTP_DRAFT_TOKENS = 3  # InferenceX's Dynamo MTP arms run mtp3 (their recipe files' names)


@dataclass(frozen=True)
class ShapePoint:
    """One concurrency of one serving shape, EMULATED."""

    shape: str  # "disaggregated" or "single-node"
    concurrency: int
    gpus: int
    output_tps: float
    output_tps_per_gpu: float
    tps_per_user: float
    ttft_s: float
    kv_transfer_s: float
    bound: str  # "decode" or "prefill"


def _worker(recipe: MultinodeRecipe, gpus: int, emu: EmulatorSettings) -> Roofline:
    return Roofline.for_parts(
        catalog.gpus()[recipe.gpu],
        catalog.models()[recipe.model],
        recipe.precision,
        tp=gpus,
        gpus_used=gpus,
        prefill_efficiency=emu.prefill_efficiency,
        decode_efficiency=emu.decode_efficiency,
        max_num_seqs=emu.max_num_seqs,
        name=recipe.name,
    )


def _decode_speed(rf: Roofline, model: str, seqs: int, context: int, speculative: str | None) -> float:
    """Tokens per second one sequence gets when a decode worker holds ``seqs`` of them."""
    kv_read = seqs * rf.kv_read_tokens(context)
    if speculative:
        accepted = catalog.golden_acceptance_length(model, MTP_DRAFT_TOKENS) or 1.0
        return accepted / rf.verify_step_s(seqs, MTP_DRAFT_TOKENS, seqs * context, kv_read)
    return 1.0 / rf.decode_step_s(seqs, kv_read)


def disaggregated_curve(recipe: MultinodeRecipe, arm: Arm, emu: EmulatorSettings | None = None) -> list[ShapePoint]:
    """The arm at each of its published concurrencies."""
    emu = emu or EmulatorSettings()
    gpu = catalog.gpus()[recipe.gpu]
    prefill = _worker(recipe, arm.prefill.gpus_per_worker, emu)
    decode = _worker(recipe, arm.decode.gpus_per_worker, emu)
    footprint = recipe.footprint(arm)
    link_gbps = gpu.scale_up_gbps if footprint.kv_in_domain else SCALE_OUT_GBPS.get(recipe.gpu, 50.0)
    kv_s = arm.isl * prefill.kv_bytes_per_token / (link_gbps * 1e9 * arm.prefill.gpus_per_worker)
    prefill_s = prefill.prefill_s(arm.isl)
    prefill_cap = arm.prefill.workers / prefill_s  # requests per second
    out = []
    for c in arm.concurrency:
        seqs = max(1, math.ceil(c / arm.decode.workers))
        speed = _decode_speed(decode, recipe.model, seqs, arm.isl + arm.osl // 2, arm.speculative)
        ttft = prefill_s + kv_s
        rate = c / (ttft + arm.osl / speed)
        bound = "decode"
        if rate > prefill_cap:
            rate, bound = prefill_cap, "prefill"
            ttft = c / rate - arm.osl / speed
        tps = rate * arm.osl
        out.append(ShapePoint("disaggregated", c, arm.gpus, tps, tps / arm.gpus, speed, ttft, kv_s, bound))
    return out


def single_node_curve(
    recipe: MultinodeRecipe, arm: Arm, tp: int = 8, emu: EmulatorSettings | None = None
) -> list[ShapePoint]:
    """The same model, precision and concurrencies on one aggregated TP-``tp`` server: prefill and
    decode share its GPUs, so each request's prefill pauses every decoding sequence once."""
    emu = emu or EmulatorSettings()
    rf = _worker(recipe, tp, emu)
    prefill_s = rf.prefill_s(arm.isl)
    out = []
    for c in arm.concurrency:
        speed = _decode_speed(rf, recipe.model, c, arm.isl + arm.osl // 2, arm.speculative)
        round_s = arm.osl / speed + c * prefill_s  # one output of every user, plus every user's prefill
        tps = c * arm.osl / round_s
        user = arm.osl / round_s
        ttft = prefill_s * (1 + (c - 1) / 2)  # behind half the other prompts on average
        out.append(ShapePoint("single-node", c, tp, tps, tps / tp, user, ttft, 0.0, "shared"))
    return out
