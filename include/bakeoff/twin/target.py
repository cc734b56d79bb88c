"""The twin of one plan target: the emulator's roofline for its GPU, model, precision and TP, times the
efficiency fitted on every calibration row, with the error band measured on rows the fit never saw.

A target gets a prediction only where the calibration set gives it a basis: its GPU has published
rows, and its model has rows or a near neighbour (same MoE-ness and attention kind; the nearest in
active parameters stands in, and the band widens to the leave-one-model-out error). Anything else is
``NoCalibration`` with the reason, never a silent number. Plan points are read at the Server
scenario's efficiency (a loaded server under a latency limit, the nearest MLPerf scenario to a plan's
sweep). Speculative decoding is credited at the golden (or pinned) acceptance length; with no curve for
the model and method it gets no credit. The budget prices prompts without prefix-cache credit (the worst
case); ``predict`` credits a workload's shared prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from bakeoff import catalog
from bakeoff.serving.emulator.roofline import Roofline
from bakeoff.twin import calibration, operating
from bakeoff.twin import fit as twin_fit
from bakeoff.twin.calibration import Row, engine_family

if TYPE_CHECKING:
    from bakeoff.plan.target import Target

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


def near_model(model: str, seen: Sequence[str]) -> str | None:
    """The calibrated model standing in for ``model``: itself if calibrated, else the nearest (in active
    parameters) of the same MoE-ness and attention kind (latent or not); None for a hybrid (linear
    attention) model or when nothing alike was calibrated."""
    if model in seen:
        return model
    specs = catalog.models()
    m = specs[model]
    if m.attention == "hybrid":
        return None

    def kind(s: catalog.ModelSpec) -> tuple[bool, bool]:
        return (s.experts is not None, s.kv_lora_rank is not None)

    alike = [s for s in seen if kind(specs[s]) == kind(m)]
    if not alike:
        return None
    return min(alike, key=lambda s: abs(math.log(specs[s].active_params_b / m.active_params_b)))


@dataclass(frozen=True)
class Deployed:
    """The twin as installed: fitted on every calibration row, with its measured bands."""

    fit: twin_fit.Fit
    proxy_band_log: float  # leave-one-model-out, the stand-in model's terms used
    proxy_margin_log: float


def _proxy_errors(rows: Sequence[Row]) -> np.ndarray:
    out = []
    models = sorted({r.model for r in rows})
    for m in models:
        train = [r for r in rows if r.model != m]
        proxy = near_model(m, sorted({r.model for r in train}))
        if proxy is None:
            continue
        f = twin_fit.fit(train, band=False)
        for r in rows:
            if r.model == m:
                q = Query(r.gpu, proxy, r.scenario, r.engine, r.quantization, r.multinode)
                # the proxy's efficiency applied to this model's own roofline
                out.append(abs(math.log(twin_fit.ideal_per_gpu(r) * f.efficiency(q) / r.per_gpu)))
    return np.array(out)


def config_errors(rows: Sequence[Row]) -> np.ndarray:
    """|log error| of each row predicted by a fit that saw no row of its GPU x engine x precision."""
    out = []
    cfg = [twin_fit.configuration(r) for r in rows]
    for c in sorted(set(cfg)):
        train = [r for r, k in zip(rows, cfg, strict=True) if k != c]
        if not train:
            continue
        f = twin_fit.fit(train, band=False)
        out += [abs(math.log(f.predict(r) / r.per_gpu)) for r, k in zip(rows, cfg, strict=True) if k == c]
    return np.array(out)


@lru_cache
def config_bands() -> tuple[float, float]:
    """(band, margin) in log for a configuration no calibration row ran: leave-one-configuration-out.
    Computed only when such a target is asked for (a dozen refits)."""
    err = config_errors(calibration.rows())
    return float(np.quantile(err, twin_fit.BAND_Q)), float(np.quantile(err, twin_fit.MARGIN_Q))


@lru_cache
def deployed() -> Deployed:
    rows = calibration.rows()
    err = _proxy_errors(rows)
    return Deployed(
        fit=twin_fit.fit(rows),
        proxy_band_log=float(np.quantile(err, twin_fit.BAND_Q)),
        proxy_margin_log=float(np.quantile(err, twin_fit.MARGIN_Q)),
    )


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
    unseen_configuration: str | None = None  # its GPU x engine x precision when no calibration row ran it

    @property
    def basis(self) -> str:
        via = (
            ""
            if self.proxy_model == self.model
            else f", {self.model} read as {self.proxy_model} (its nearest calibrated kind)"
        )
        unseen = (
            f"; no published row ran {self.unseen_configuration.replace(':', ' ')}: its band is at least the "
            "error on GPU x engine x precision configurations left out of the fit"
            if self.unseen_configuration
            else ""
        )
        return f"{self.gpu} x {self.proxy_model} calibration rows{via}{unseen}"

    def tpot_s(self, concurrency: float, in_len: int, out_len: int, fresh_len: int | None = None) -> float:
        """Seconds per output token of each of ``concurrency`` decoding sequences (their prompts beside them,
        ``fresh_len`` tokens of each not in the prefix cache): the roofline's step at the fitted efficiency,
        plus STEP_OVERHEAD_S, over the tokens a step emits (speculative decoding: the acceptance length)."""
        c = max(1, int(round(concurrency)))
        step = operating.step_s(
            self.roof,
            c,
            in_len,
            out_len,
            fresh_len=fresh_len,
            draft_tokens=self.draft_tokens,
            acceptance_length=self.acceptance_length,
        )
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


def twin_for(target: Target) -> TargetTwin | NoCalibration:
    """The twin of a plan target, or NoCalibration saying why there is no basis."""
    d = deployed()
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
    kv = "bf16" if target.kv_cache_dtype == "auto" else target.kv_cache_dtype
    tp = target.tensor_parallel
    roof = operating.roofline(catalog.gpus()[gpu], target.model_spec, target.quantization, tp, kv)
    own = proxy == target.model
    band, margin = (d.fit.band_log, d.fit.margin_log) if own else (d.proxy_band_log, d.proxy_margin_log)
    config = twin_fit.configuration(q)
    unseen = config not in d.fit.seen["configuration"]
    if unseen:  # an engine or precision no published row ran on this GPU: the coarser terms stand in
        config_band, config_margin = config_bands()
        band, margin = max(band, config_band), max(margin, config_margin)
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
        band_log=max(d.fit.band_log, band),
        margin_log=max(d.fit.margin_log, margin),
        draft_tokens=spec.num_speculative_tokens if spec is not None and al else 0,
        acceptance_length=float(al) if spec is not None and al else 1.0,
        unseen_configuration=config if unseen else None,
    )
