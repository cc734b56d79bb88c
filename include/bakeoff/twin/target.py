"""The twin of one plan target: the emulator's roofline for its GPU, model, precision and TP, times the
efficiency fitted on every calibration row, with the error band measured on rows the fit never saw.

A target gets a prediction only where the calibration set gives it a basis: its GPU has published
rows, and its model has rows or a near neighbour (same MoE-ness and attention kind; the nearest in
active parameters stands in). Its band is the one measured on hold-outs for its kind of extrapolation
(twin.holdout: same setup, same GPU new model, same GPU new configuration, new GPU, new model kind).
Anything else is ``NoCalibration`` with the reason, never a silent number. Plan points are read at the
Server scenario's efficiency (a loaded server under a latency limit, the nearest MLPerf scenario to a plan's
sweep). Speculative decoding is credited at the golden (or pinned) acceptance length; with no curve for
the model and method it gets no credit. The budget prices prompts without prefix-cache credit (the worst
case); ``predict`` credits a workload's shared prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from bakeoff import catalog
from bakeoff.plan.target import Target
from bakeoff.twin import fit as twin_fit
from bakeoff.twin import holdout, operating
from bakeoff.twin.calibration import engine_family
from bakeoff.twin.holdout import near_model
from bakeoff.twin.roofline import Roofline

PLAN_SCENARIO = "Server"
PREFILL_CHUNK = 8192  # tokens per prefill pass (the engines' default chunk)
# Per-step time no roofline sees (kernel launches, TP all-reduce latency, the scheduler): what a step costs
# when it moves almost nothing. MLPerf's large batches cannot show it; a published small-batch figure does:
# gpt-oss-120b TP8 on MI355X at concurrency 4, 1k/1k, TPOT 3.46 ms (a published InferenceMAX head-to-head
# figure, read 2026-11-30), where the
# roofline's step is under 0.1 ms.
STEP_OVERHEAD_S = 0.0035


@dataclass(frozen=True)
class Query:
    """A configuration to predict, keyed as the fit keys calibration rows."""

    gpu: str
    model: str
    scenario: str
    engine: str
    quantization: str
    multinode: str = "single"

    @property
    def vendor(self) -> str:
        return catalog.gpus()[self.gpu].vendor

    @property
    def precision(self) -> str:
        return "fp4" if self.quantization.endswith("fp4") else self.quantization


@dataclass(frozen=True)
class NoCalibration:
    target: str
    reason: str


@dataclass(frozen=True)
class Deployed:
    """The twin as installed: fitted on every calibration setup (identical setups merged), with the band of
    each kind of extrapolation measured on hold-outs (twin.holdout)."""

    fit: twin_fit.Fit
    bands: dict[str, holdout.Band]


@lru_cache
def deployed() -> Deployed:
    return Deployed(fit=twin_fit.fit(holdout.setups()), bands=holdout.bands())


@dataclass(frozen=True)
class TargetTwin:
    """Predicted timing of one target's replica (TP group)."""

    name: str
    gpu: str
    model: str
    proxy_model: str
    roof: Roofline
    efficiency: float
    tp: int
    replicas: int
    band_log: float
    margin_log: float
    draft_tokens: int = 0  # speculative decoding: draft tokens per verification step (0: none)
    acceptance_length: float = 1.0  # tokens each verification step emits per sequence
    band_kind: str = holdout.SAME_SETUP  # the extrapolation its band was measured on (twin.holdout.KINDS)

    @property
    def basis(self) -> str:
        via = (
            ""
            if self.proxy_model == self.model
            else f", {self.model} read as {self.proxy_model} (its nearest calibrated kind)"
        )
        return (
            f"{self.gpu} x {self.proxy_model} calibration rows{via}; band: {self.band_kind} "
            f"({twin_fit.BAND_Q:.0%} of held-out errors of that kind)"
        )

    def tpot_s(self, concurrency: float, in_len: int, out_len: int, fresh_len: int | None = None) -> float:
        """Seconds per output token of each of ``concurrency`` decoding sequences (the others' prompts prefilled
        beside them, ``fresh_len`` tokens of each not in the prefix cache: operating.point_step_s, the emulator's
        schedule): the roofline's step at the fitted efficiency,
        plus STEP_OVERHEAD_S, over the tokens a step emits (speculative decoding: the acceptance length)."""
        c = max(1, int(round(concurrency)))
        fresh = in_len if fresh_len is None else fresh_len
        step = operating.point_step_s(self.roof, c, in_len, out_len, fresh, self.draft_tokens, self.acceptance_length)
        return (step / self.efficiency + STEP_OVERHEAD_S) / self.acceptance_length

    def prefill_token_s(self) -> float:
        """Seconds per prompt token, a prompt prefilled alone in PREFILL_CHUNK-token passes."""
        return self.roof.prefill_s(PREFILL_CHUNK) / PREFILL_CHUNK / self.efficiency

    def ttft_s(self, in_len: int) -> float:
        return in_len * self.prefill_token_s()

    def tokens_s_per_gpu(self, concurrency: float, in_len: int, out_len: int) -> float:
        return max(1, int(round(concurrency))) / self.tpot_s(concurrency, in_len, out_len) / self.tp

    # the budget's Timing: what the guard prices a calibrated target's serving time with
    def prefill_s(self, tokens: float) -> float:
        return tokens * self.prefill_token_s()

    def decode_s(self, concurrency: float, in_len: int, out_len: int) -> float:
        """Per output token of each sequence: beyond what the KV cache holds (or MAX_BATCH), sequences wait."""
        cap = self.max_concurrency(in_len, out_len)
        running = min(max(concurrency, 1), cap)
        return self.tpot_s(running, in_len, out_len) * max(concurrency, 1) / running

    @property
    def margin(self) -> float:
        """The share added to predicted serving time: exp(margin_log) - 1, the twin's p90 error."""
        return math.expm1(self.margin_log)

    def max_concurrency(self, in_len: int, out_len: int) -> int:
        return operating.max_batch(self.roof, in_len, out_len)


def twin_for(target: Target, installed: Deployed | None = None) -> TargetTwin | NoCalibration:
    """The twin of a plan target, or NoCalibration saying why there is no basis; ``installed``: a refitted
    twin (prediction.runs.installation_twin) in place of the shipped one."""
    d = installed or deployed()
    gpu = target.gpu.name
    if gpu not in catalog.gpus() or gpu not in d.fit.seen["gpu"]:
        return NoCalibration(target.name, f"no published MLPerf row on {gpu}: the twin has no calibration for it")
    proxy = near_model(target.model, sorted(d.fit.seen["model"]))
    if proxy is None:
        return NoCalibration(
            target.name,
            f"no published row for {target.model} or a model of its kind "
            f"({catalog.models()[target.model].attention} attention): the twin has no calibration for it",
        )
    q = Query(gpu, proxy, PLAN_SCENARIO, engine_family(target.stack), target.quantization)
    kind = holdout.kind_of(gpu, target.model, q.engine, q.precision, q.scenario, d.fit.seen)
    band = d.bands.get(kind)
    if band is None:
        return NoCalibration(target.name, f"no held-out error for a {kind} prediction: the twin has no band for it")
    kv = "bf16" if target.kv_cache_dtype == "auto" else target.kv_cache_dtype
    tp = target.tensor_parallel
    roof = operating.roofline(catalog.gpus()[gpu], target.model_spec, target.quantization, tp, kv)
    spec = target.speculative
    al = None
    if spec is not None:
        al = target.pinned_acceptance_length or catalog.golden_acceptance_length(
            target.model, spec.num_speculative_tokens, method=spec.method
        )
    return TargetTwin(
        name=target.name,
        gpu=gpu,
        model=target.model,
        proxy_model=proxy,
        roof=roof,
        efficiency=d.fit.efficiency(q),
        tp=tp,
        replicas=max(1, target.instance.gpus // (tp * target.pipeline_parallel)),
        band_log=band.band_log,
        margin_log=band.margin_log,
        draft_tokens=spec.num_speculative_tokens if spec is not None and al else 0,
        acceptance_length=float(al) if spec is not None and al else 1.0,
        band_kind=kind,
    )
