"""A paper model of disaggregated serving: a prefill pool, a decode pool and the KV transfer between them.

For one arm of a multi-node recipe (plan.multinode) and a closed-loop concurrency C, with every figure
from the catalog and the roofline (twin.roofline), so each number can be redone by hand:

- a prefill worker (TP = its GPUs) prefills one prompt of isl tokens in ``prefill_s(isl)``; the pool of
  P workers finishes at most P / prefill_s requests a second;
- the prompt's KV (isl x the model's KV bytes per token) moves to a decode worker over NVLink when both
  roles sit in one NVLink domain (an NVL72 rack), else over the GPUs' scale-out NICs
  (multinode.SCALE_OUT_GBPS), each prefill GPU sending its shard;
- a decode worker runs at most ``decode_batch(arm)`` sequences (the recipe's engine config, e.g.
  ``..._batch8_...``: TRT-LLM's max batch size, per attention rank with DP attention; no cap where the
  recipe names none); the C users are dealt evenly over the D workers up to that cap and the rest wait
  for a slot, which shows as TTFT. Each running sequence sits at the middle of its output (isl + osl / 2
  tokens of context);
- a decode step (``decode_step_s``) reads the weights the step's tokens route to: the dense part once,
  and for a mixture of experts the expected number of distinct experts that T tokens' top-k picks hit
  under uniform routing, E x (1 - (1 - k/E)^T) (Roofline.weights_read, the one the twin and the emulator use),
  plus the sequences' KV; every target pass pays the twin's fixed STEP_OVERHEAD_S (bakeoff.twin.target);
- with MTP a step runs N draft passes (the recipe config name's ``mtpN``, else MTP_DRAFT_TOKENS), one
  decoder layer each plus DRAFT_PASS_OVERHEAD_S of launches per pass (the one fitted constant), and a
  verify pass over 1 + N tokens per sequence, and yields the acceptance length at N
  (catalog.golden_acceptance_length; the DeepSeek family's MTP curve where a DeepSeek model has none
  of its own: AL_STANDIN), 1 where no curve applies;
- tokens/s/user is the running sequences' decode speed (InferenceX's interactivity, 1 / TPOT);
- closed loop: each user's cycle is TTFT + osl / its decode speed, so the request rate is C / cycle
  while every user has a slot, the slots' output rate when some wait, capped by the prefill pool;
  when a cap binds, the wait shows up as a longer TTFT.

Not modelled: the router's own time, expert-parallel all-to-all and load imbalance inside a worker
(as in the roofline), prefill batching gains, and queueing variance. Every figure it gives is EMULATED.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bakeoff import catalog
from bakeoff.plan.multinode import SCALE_OUT_GBPS, Arm, MultinodeRecipe
from bakeoff.plan.options import EmulatorSettings
from bakeoff.twin.roofline import Roofline
from bakeoff.twin.target import STEP_OVERHEAD_S

MTP_DRAFT_TOKENS = 3  # InferenceX's Dynamo MTP arms run mtp3 (their recipe files' names)
# A DeepSeek model without its own golden MTP curve reads the family's: DeepSeek-V4-Pro's MTP head at k=3,
# thinking on, 2.49 (catalog/golden_al.yaml: InferenceX golden_al_distribution/dsv4_mtp.yaml, 2026-08-21).
# DeepSeek-R1 and V4 share the MTP module design of the DeepSeek-V3 report; no R1 curve is published.
AL_STANDIN = {"deepseek-r1": "deepseek-v4-pro"}
# Launch and sync time of each MTP draft pass (a small, latency-bound pass no roofline sees). Fitted
# 2026-12-02 on ONE arm only, InferenceX's dsr1-fp4-gb200-dynamo-trt arm 0 published points at 1k/1k
# (benchmarks/data/inferencex_disagg_published.yaml: InferenceX-app bf6892da, measured 2026-05-22),
# least squares in log tokens/s/GPU and tokens/s/user; the B200 arm 3 is the held-out score
# (`python benchmarks/rack_scale.py --published` prints the fit and both errors).
DRAFT_PASS_OVERHEAD_S = 0.00115
_BATCH_IN_CONFIG = re.compile(r"_batch(\d+)_")  # TRT-LLM recipe files: ctx1_gen4_tep8_batch8_eplb0_mtp3.yaml
_MTP_IN_CONFIG = re.compile(r"_mtp(\d+)(?:_\d+)?\.yaml")  # ..._mtp3.yaml, ..._mtp1_1229.yaml


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
    bound: str  # "decode", "prefill" or "decode slots" (users waiting for a decode batch slot)


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


def decode_batch(arm: Arm) -> int | None:
    """Sequences one decode worker runs at once, from the recipe's engine config name (TRT-LLM's
    max_batch_size is per attention rank: a DP-attention worker holds it on each GPU); None if not given."""
    ranks = arm.decode.gpus_per_worker if arm.decode.dp_attention else 1
    for s in arm.prefill.settings + arm.decode.settings:
        if m := _BATCH_IN_CONFIG.search(s):
            return int(m.group(1)) * ranks
    return None


def mtp_draft_tokens(arm: Arm) -> int:
    """MTP draft tokens per step: the recipe's engine config name (``..._mtp1.yaml``), else MTP_DRAFT_TOKENS;
    0 for an arm without speculative decoding."""
    if not arm.speculative:
        return 0
    for s in arm.prefill.settings + arm.decode.settings:
        if m := _MTP_IN_CONFIG.search(s):
            return int(m.group(1))
    return MTP_DRAFT_TOKENS


def acceptance_length(model: str, draft_tokens: int = MTP_DRAFT_TOKENS) -> float:
    """Tokens an MTP verify step yields per sequence (1.0 where no curve applies: no credit)."""
    for name in (model, AL_STANDIN.get(model)):
        if name and (al := catalog.golden_acceptance_length(name, draft_tokens)):
            return al
    return 1.0


def decode_step_s(
    rf: Roofline, model: str, seqs: int, context: int, draft_tokens: int, draft_overhead_s: float
) -> float:
    """One decode step of ``seqs`` sequences (with ``draft_tokens`` MTP drafts each) at ``context`` tokens."""
    tokens = seqs * (1 + draft_tokens)
    kv = seqs * rf.kv_read_tokens(context) * rf.kv_bytes_per_token
    memory_s = (rf.weights_read(tokens) + kv) / rf.decode_bytes_per_s
    compute_s = 2 * rf.active_params * tokens / rf.prefill_flops_per_s
    drafts_s = draft_tokens * (rf.draft_step_s(seqs) + draft_overhead_s)
    return max(memory_s, compute_s) + STEP_OVERHEAD_S + drafts_s


def _decode_speed(
    rf: Roofline, model: str, seqs: int, context: int, draft_tokens: int, draft_overhead_s: float
) -> float:
    """Tokens per second one sequence gets when a decode worker holds ``seqs`` of them."""
    if draft_tokens:
        al = acceptance_length(model, draft_tokens)
        return al / decode_step_s(rf, model, seqs, context, draft_tokens, draft_overhead_s)
    return 1.0 / decode_step_s(rf, model, seqs, context, 0, 0.0)


def _deal(users: int, workers: int) -> list[int]:
    """Users per worker, dealt evenly (the router's fewest-in-flight choice in steady state)."""
    return [users // workers + (1 if i < users % workers else 0) for i in range(workers)]


def disaggregated_curve(
    recipe: MultinodeRecipe,
    arm: Arm,
    emu: EmulatorSettings | None = None,
    *,
    batch: int | None = None,
    draft_overhead_s: float = DRAFT_PASS_OVERHEAD_S,
) -> list[ShapePoint]:
    """The arm at each of its concurrencies; ``batch`` overrides the recipe's decode batch cap
    (default: ``decode_batch(arm)``; no cap where the recipe gives none)."""
    emu = emu or EmulatorSettings()
    gpu = catalog.gpus()[recipe.gpu]
    prefill = _worker(recipe, arm.prefill.gpus_per_worker, emu)
    decode = _worker(recipe, arm.decode.gpus_per_worker, emu)
    footprint = recipe.footprint(arm)
    link_gbps = gpu.scale_up_gbps if footprint.kv_in_domain else SCALE_OUT_GBPS.get(recipe.gpu, 50.0)
    kv_s = arm.isl * prefill.kv_bytes_per_token / (link_gbps * 1e9 * arm.prefill.gpus_per_worker)
    prefill_s = prefill.prefill_s(arm.isl)
    prefill_cap = arm.prefill.workers / prefill_s  # requests per second
    cap = batch or decode_batch(arm)
    draft_tokens = mtp_draft_tokens(arm)
    context = arm.isl + arm.osl // 2
    out = []
    for c in arm.concurrency:
        running = min(c, (cap or c) * arm.decode.workers)
        ttft = prefill_s + kv_s
        rate, speeds = 0.0, []
        for seqs in _deal(running, arm.decode.workers):
            if seqs:
                speed = _decode_speed(decode, recipe.model, seqs, context, draft_tokens, draft_overhead_s)
                speeds += [speed] * seqs
                # every slot busy while users wait: the slots' own output rate; else each user's cycle
                rate += seqs * speed / arm.osl if running < c else seqs / (ttft + arm.osl / speed)
        user = sum(speeds) / len(speeds)
        bound = "decode slots" if running < c else "decode"
        if rate > prefill_cap:
            rate, bound = prefill_cap, "prefill"
        ttft = max(ttft, c / rate - arm.osl / user)
        tps = rate * arm.osl
        out.append(ShapePoint("disaggregated", c, arm.gpus, tps, tps / arm.gpus, user, ttft, kv_s, bound))
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
        context = arm.isl + arm.osl // 2
        speed = _decode_speed(rf, recipe.model, c, context, mtp_draft_tokens(arm), DRAFT_PASS_OVERHEAD_S)
        round_s = arm.osl / speed + c * prefill_s  # one output of every user, plus every user's prefill
        tps = c * arm.osl / round_s
        user = arm.osl / round_s
        ttft = prefill_s * (1 + (c - 1) / 2)  # behind half the other prompts on average
        out.append(ShapePoint("single-node", c, tp, tps, tps / tp, user, ttft, 0.0, "shared"))
    return out
