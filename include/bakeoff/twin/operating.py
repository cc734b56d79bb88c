"""The emulator's roofline at an operating point: what ideal hardware would do, before any efficiency.

The twin's fit explains each published figure as (this roofline) x (a fitted efficiency), so the
physics (HBM bandwidth, FP4/FP8 peak, KV capacity, MoE expert reads, sparse attention) lives here,
in the emulator's own ``Roofline``, and the fit only learns how far real stacks fall short of it.

Steady state with ``batch`` sequences decoding: every step emits one token per sequence and, to keep
the batch full, prefills batch x input / output prompt tokens beside them (chunked prefill), so a
step costs ``Roofline.step_s`` of that mix. A scenario's TPOT limit caps the batch: the largest whose
step, at NOMINAL_EFFICIENCY of the roofline, stays within the limit; KV capacity and MAX_BATCH cap it
too. The TP group is the smallest power of two whose HBM holds the weights with room for KV.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from bakeoff import catalog
from bakeoff.plan.fits import GPU_MEMORY_UTILIZATION
from bakeoff.plan.precision import COMPUTE_DTYPE, KV_BYTES, QUANT_BYTES
from bakeoff.twin.roofline import Roofline

NOMINAL_EFFICIENCY = 0.5  # what a tuned stack reaches of the roofline, for sizing the batch under a TPOT limit
MAX_BATCH = 2048  # sequences in flight per replica (engines cap max_num_seqs near this)
WEIGHTS_SHARE = 0.6  # the weights may take at most this share of a TP group's HBM
KV_DTYPE = "fp8"  # MLPerf submissions keep the KV cache in FP8


def _hbm_bytes(gpu: catalog.Gpu) -> float:
    return gpu.usable_gib * 2**30 if gpu.usable_gib else gpu.hbm_gb * 1e9


def tp_group(gpu: catalog.Gpu, model: catalog.ModelSpec, quantization: str) -> int:
    """The smallest power-of-two TP group (up to 8) whose HBM holds the weights within WEIGHTS_SHARE."""
    weights = model.params_b * 1e9 * QUANT_BYTES[quantization]
    tp = 1
    while tp < 8 and weights > WEIGHTS_SHARE * tp * _hbm_bytes(gpu):
        tp *= 2
    return tp


def roofline(
    gpu: catalog.Gpu, model: catalog.ModelSpec, quantization: str, tp: int, kv_dtype: str = KV_DTYPE
) -> Roofline:
    """The emulator's Roofline at efficiency 1 (peak FLOPs, full HBM bandwidth) for this configuration."""
    bpp = QUANT_BYTES[quantization]
    kv_per_token = model.kv_bytes_per_token(KV_BYTES[kv_dtype])
    kv_free = _hbm_bytes(gpu) * tp * GPU_MEMORY_UTILIZATION - model.params_b * 1e9 * bpp
    return Roofline(
        params=model.params_b * 1e9,
        active_params=model.active_params_b * 1e9,
        bytes_per_param=bpp,
        kv_bytes_per_token=kv_per_token,
        kv_capacity_tokens=max(0, int(kv_free // kv_per_token)),
        prefill_flops_per_s=gpu.peak_tflops(COMPUTE_DTYPE[quantization]) * 1e12 * tp,
        decode_bytes_per_s=gpu.hbm_tbps * 1e12 * tp,
        max_num_seqs=MAX_BATCH,
        context=model.context,
        dense_params=model.dense_params_b * 1e9 if model.dense_params_b is not None else None,
        layers=model.layers,
        index_topk=model.index_topk,
        experts=model.experts,
        experts_per_token=model.experts_per_token,
    )


def step_s(
    roof: Roofline,
    batch: int,
    in_len: int,
    out_len: int,
    *,
    fresh_len: int | None = None,
    draft_tokens: int = 0,
    acceptance_length: float = 1.0,
) -> float:
    """One steady-state step at ``batch`` decoding sequences, their prompts' share of prefill beside them:
    ``fresh_len`` of each prompt needs prefill (the rest is a cached prefix; default all of it), and a step
    emits acceptance_length tokens per sequence. With ``draft_tokens`` the step is a speculative one
    (Roofline.verify_step_s: draft steps, then one target pass over every draft token)."""
    fresh = in_len if fresh_len is None else fresh_len
    return _step_with(
        roof, batch, in_len, out_len, round(batch * acceptance_length * fresh / max(out_len, 1)), draft_tokens
    )


def _step_with(roof: Roofline, batch: int, in_len: int, out_len: int, prefill: int, draft_tokens: int) -> float:
    """One step of ``batch`` sequences at mid-output context with ``prefill`` prompt tokens beside them."""
    ctx = in_len + out_len // 2
    kv, kv_read = batch * ctx, batch * roof.kv_read_tokens(ctx)
    if draft_tokens:
        return roof.verify_step_s(batch, draft_tokens, kv, kv_read, prefill_tokens=prefill)
    return roof.step_s(prefill, batch, kv, kv_read)


def point_step_s(roof: Roofline, batch: int, in_len: int, out_len: int, fresh: int, draft: int, al: float) -> float:
    """The mean step a sequence sees at a plan's load level of ``batch`` sequences in a closed loop, as the
    emulator schedules it: decode steps, and each time another sequence starts, one step that also prefills
    its whole ``fresh`` prompt tokens (``draft`` speculative tokens a step, ``al`` tokens emitted). A
    sequence's own prefill is its TTFT, so its TPOT sees the other batch - 1 prompts once per output. At
    MLPerf's large batches this is ``step_s``'s steady prefill share; at a plan's small ones it does not
    spread one prompt's expert reads over every step."""
    decode = _step_with(roof, batch, in_len, out_len, 0, draft)
    if batch <= 1 or fresh <= 0:
        return decode
    prompts = (batch - 1) * al / max(out_len, 1)  # others' prompts starting per step
    # under one prompt a step: some steps carry one whole prompt; above, every step carries that many prompts
    mixed = _step_with(roof, batch, in_len, out_len, round(fresh * max(prompts, 1.0)), draft)
    return mixed if prompts >= 1 else decode + prompts * (mixed - decode)


def max_batch(roof: Roofline, in_len: int, out_len: int) -> int:
    """Sequences the KV cache holds at full length, at most MAX_BATCH (at least 1)."""
    return max(1, min(MAX_BATCH, roof.kv_capacity_tokens // max(in_len + out_len, 1)))


def batch_under(roof: Roofline, in_len: int, out_len: int, tpot_s: float | None) -> int:
    """The largest batch whose step at NOMINAL_EFFICIENCY stays within ``tpot_s`` (None: no limit)."""
    hi = max_batch(roof, in_len, out_len)
    if tpot_s is None or step_s(roof, hi, in_len, out_len) / NOMINAL_EFFICIENCY <= tpot_s:
        return hi
    lo = 1
    while lo < hi:  # step time grows with the batch: bisect for the last batch under the limit
        mid = (lo + hi + 1) // 2
        if step_s(roof, mid, in_len, out_len) / NOMINAL_EFFICIENCY <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Point:
    batch: int
    tp: int
    step_s: float  # roofline step time (efficiency 1)

    @property
    def tokens_s_per_gpu(self) -> float:
        return self.batch / self.step_s / self.tp


@lru_cache(maxsize=4096)
def ideal(gpu: str, model: str, quantization: str, in_len: int, out_len: int, tpot_s: float | None) -> Point:
    """The roofline's operating point for a configuration under a TPOT limit."""
    g, m = catalog.gpus()[gpu], catalog.models()[model]
    tp = tp_group(g, m, quantization)
    roof = roofline(g, m, quantization, tp)
    b = batch_under(roof, in_len, out_len, tpot_s)
    return Point(batch=b, tp=tp, step_s=step_s(roof, b, in_len, out_len))
