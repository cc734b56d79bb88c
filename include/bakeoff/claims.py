"""Published performance claims as data, and what a run says about them.

A claim file (``include/claims/<id>.yaml``, or ``$BAKEOFF_CLAIMS``) records who claimed what, when,
where, the configuration the claim states and its figures. A plan lists the claims it checks
(``claims: [<id>]``); the report's "Claim check" compares each figure with bakeoff's:

- at the claim's own configuration, where the run matches it (same model, precision, engine, GPUs
  per node, lengths, prefix share, and a point at the claimed rate or concurrency), with the
  bootstrap interval over repeats (``bench.metrics.stats``, the one CI method);
- at the buyer's SLO (the load level the cost ranking uses);
- a verdict: *reproduced* (the claimed figure, or the band its wording allows, meets bakeoff's
  interval), *not reproduced* (outside it; the ratio says by how much), or *not comparable* (the
  configuration differs, the figures are EMULATED, or one repeat gave no interval).

A cost claim ("about half the cost of Blackwell") is checked at the buyer's SLO with the buyer's
prices: the claim's target's cost per token over each rival's, with the interval of the difference
over repeats. Fields a claim leaves open are reported as not stated, never guessed.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Protocol

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bakeoff import catalog
from bakeoff.fielderrors import explain
from bakeoff.plan import Plan, PlanError, Target, Workload
from bakeoff.plan.precision import QUANTIZATIONS

if TYPE_CHECKING:
    import pandas as pd

CLAIM_ID_RE = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
METRICS = {
    "output_tps_per_node": "output tokens/s per node",
    "total_tps_per_node": "input + output tokens/s per node",
    "output_tps_per_gpu": "output tokens/s per GPU",
    "total_tps_per_gpu": "input + output tokens/s per GPU",
}
Metric = Literal["output_tps_per_node", "total_tps_per_node", "output_tps_per_gpu", "total_tps_per_gpu"]
LENGTH_TOLERANCE = 0.05  # "20k in" is 20,000 or 20,480: lengths within 5% count as the same
PREFIX_TOLERANCE = 0.05  # absolute share
RATE_TOLERANCE = 0.02  # relative


class Tables(Protocol):
    """The run's cost tables a claim is checked against (``cost.CostTables``, a higher rank than claims)."""

    @property
    def points(self) -> pd.DataFrame: ...
    @property
    def at_slo(self) -> pd.DataFrame: ...
    @property
    def targets(self) -> pd.DataFrame: ...


REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE = "reproduced", "not reproduced", "not comparable"


class ClaimError(ValueError):
    """A claim file that cannot be read or a claim name that does not exist; the message says which field."""


def _quantization(v: str) -> str:
    if v not in QUANTIZATIONS:
        raise ValueError(f"{v!r} is not a precision bakeoff runs; use one of: {', '.join(QUANTIZATIONS)}")
    return v


def _gpu_name(v: str) -> str:
    return catalog.known_name("gpu", v)


# Shared by Configuration and Comparison, so both check GPU names and precisions the same way.
GpuName = Annotated[str, AfterValidator(_gpu_name)]
Quantization = Annotated[str, AfterValidator(_quantization)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Configuration(_Strict):
    """What the claim states about how its figure was measured; None = not stated."""

    model: str | None = Field(None, description="catalog model name, e.g. glm-5.2")
    quantization: Quantization | None = None
    stack: str | None = Field(None, description="serving engine: vllm, sglang, atom, trtllm")
    gpu: GpuName | None = Field(None, description="catalog GPU name, e.g. mi355x")
    gpus: int | None = Field(None, ge=1, le=1024, description="GPUs per node")
    input_len: int | None = Field(None, ge=1, le=1_048_576)
    output_len: int | None = Field(None, ge=1, le=1_048_576)
    prefix_ratio: float | None = Field(None, ge=0, lt=1, description="share of each prompt served from prefix cache")
    rate: float | None = Field(None, gt=0, le=10_000, description="requests per second")
    concurrency: int | None = Field(None, ge=1, le=4096)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        return v if v is None else catalog.known_name("model", v)

    @field_validator("stack")
    @classmethod
    def _stack(cls, v: str | None) -> str | None:
        return v if v is None else catalog.known_name("stack", v)


class Figure(_Strict):
    metric: Metric = Field(description=f"what the figure measures: one of {', '.join(METRICS)}")
    value: float = Field(gt=0)
    tolerance: float = Field(
        0.0, ge=0, lt=1, description="share of the value the claim's wording allows ('about half': 0.1)"
    )
    reading: str = Field("", description="why the figure is read as this metric")


class Comparison(_Strict):
    """A second figure in the same claim: another GPU's throughput on the same workload, or a cost ratio."""

    kind: Literal["throughput", "cost_ratio"]
    value: float = Field(gt=0)
    tolerance: float = Field(0.0, ge=0, lt=1)
    text: str = ""
    metric: Metric = "output_tps_per_node"
    gpu: GpuName | None = Field(None, description="throughput: the GPU the figure is for")
    gpus: int | None = Field(None, ge=1, le=1024)
    quantization: Quantization | None = Field(
        None, description="throughput: the precision, when stated (the claim's model, engine and workload carry over)"
    )
    stack: str | None = None
    rate: float | None = Field(None, gt=0, le=10_000, description="throughput: requests/s per node, when stated")
    concurrency: int | None = Field(None, ge=1, le=4096, description="throughput: when stated")
    against: list[str] = Field([], description="cost_ratio: the rival GPUs (the claim's GPU's cost / theirs)")

    @field_validator("against")
    @classmethod
    def _against(cls, v: list[str]) -> list[str]:
        return [_gpu_name(g) for g in v]

    @model_validator(mode="after")
    def _kind(self) -> Comparison:
        if self.kind == "throughput" and self.gpu is None:
            raise ValueError("gpu: a throughput comparison names the GPU its figure is for, such as b200")
        if self.kind == "cost_ratio" and not self.against:
            raise ValueError("against: a cost_ratio comparison lists the rival GPUs, such as [b200, b300]")
        return self


class Side(_Strict):
    """One side of the comparison a cost claim rests on: what the claim says of it; None = not stated."""

    gpu: GpuName
    gpus: int | None = Field(None, ge=1, le=1024, description="GPUs per node")
    engine: str | None = Field(None, description="serving engine: vllm, sglang, atom, trtllm")
    precision: Quantization | None = None
    workload: str | None = Field(None, description="the workload in the claim's words, e.g. '20k in / 1k out'")
    value: float | None = Field(None, gt=0, description="throughput: the figure the claim gives this side")
    price_source: str | None = Field(None, description="price: where the claim's price for this side is from")
    price_as_of: str | None = Field(None, description="price: the date of that price")

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str | None) -> str | None:
        return v if v is None else catalog.known_name("stack", v)


class ThroughputBasis(_Strict):
    """The throughput pair a cost claim divides: ``this`` (the claim's GPU) against ``other``."""

    metric: Metric = "output_tps_per_node"
    this: Side
    other: Side

    @model_validator(mode="after")
    def _values(self) -> ThroughputBasis:
        for name in ("this", "other"):
            if getattr(self, name).value is None:
                raise ValueError(f"{name}.value: a throughput side gives its figure, such as 2626")
        return self


class PriceBasis(_Strict):
    """The price pair a cost claim divides by: ``ratio`` is other's per-GPU price over this one's."""

    this: Side
    other: Side
    ratio: float = Field(gt=0, le=1000, description="other's per-GPU price / this one's, as the claim used it")
    text: str = ""


class Basis(_Strict):
    throughput: ThroughputBasis
    price: PriceBasis


class Published(_Strict):
    address: str = Field(min_length=1, description="where the write-up is")
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="its publication date (YYYY-MM-DD)")
    found: str = Field("", description="how and when it was found")


class Claim(_Strict):
    id: str = Field(pattern=CLAIM_ID_RE)
    who: str = Field(min_length=1, description="who made the claim")
    claim: str = Field(min_length=1, description="the claim in its own words")
    when: str = Field(min_length=1, description="publication date, or 'undated; recorded YYYY-MM'")
    source: str = Field(min_length=1, description="where it was published")
    recorded: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$", description="when it was recorded here (YYYY-MM[-DD])")
    configuration: Configuration
    figure: Figure
    also_reported: dict[str, float | str] = {}
    comparisons: list[Comparison] = []
    published: Published | None = None
    basis: Basis | None = Field(None, description="the throughput and price pairs a cost claim rests on")

    @model_validator(mode="after")
    def _gpu_stated(self) -> Claim:
        if self.configuration.gpu is None:
            raise ValueError("configuration.gpu: a claim names the GPU its figure is for, such as mi355x")
        if self.basis and {self.basis.throughput.this.gpu, self.basis.price.this.gpu} != {self.configuration.gpu}:
            raise ValueError(
                f"basis: throughput.this.gpu and price.this.gpu are the claim's GPU ({self.configuration.gpu}); "
                "put the rival under other"
            )
        return self


# --- loading ------------------------------------------------------------------------------------


def claims_dir() -> Path:
    """Where claims live: $BAKEOFF_CLAIMS, else include/claims beside the package."""
    env = os.environ.get("BAKEOFF_CLAIMS")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "claims"


def claim_names() -> list[str]:
    folder = claims_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml") if re.fullmatch(CLAIM_ID_RE, p.stem) and p.is_file())


def parse_claim(raw: object, source: str) -> Claim:
    """A claim from a parsed YAML document; errors name the field and the fix."""
    if not isinstance(raw, dict):
        raise ClaimError(f"{source}: expected a mapping at the top level (who, claim, when, source, ...)")
    try:
        return Claim.model_validate(raw)
    except ValidationError as e:
        raise ClaimError(f"{source} is not a valid claim:\n{explain(e, root='(claim)')}") from None


@lru_cache(maxsize=64)
def _load(path: Path, mtime: float) -> Claim:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ClaimError(f"{path.name}: not valid YAML: {e}") from None
    c = parse_claim(raw, path.name)
    if c.id != path.stem:
        raise ClaimError(f"{path.name}: id: {c.id!r} must be the file's name without .yaml ({path.stem!r})")
    return c


def load_claim(name: str) -> Claim:
    """The installed claim of that name (by name only, like plans)."""
    names = claim_names()
    if name not in names:
        raise ClaimError(
            f"no claim named {str(name)[:80]!r}; choose one of: {', '.join(names) or '(none)'} "
            "(to add one, put <id>.yaml in the claims folder, $BAKEOFF_CLAIMS)"
        )
    path = claims_dir() / f"{name}.yaml"
    return _load(path, path.stat().st_mtime)


def check_plan_claims(plan: Plan) -> list[Claim]:
    """Every claim the plan names, loaded: a run (and ``plan check``) stops before any spend on a
    missing or broken one. It is checked here, not in the plan's schema, because claims derive their
    precisions from the plan package: a schema rule would make the two import each other."""
    loaded = []
    for i, name in enumerate(plan.claims):
        try:
            loaded.append(load_claim(name))
        except ClaimError as e:
            raise PlanError(f"claims[{i}]: {e}") from None
    return loaded


# --- checking -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldMatch:
    field: str
    claimed: str
    run: str
    same: bool


@dataclass(frozen=True)
class Measure:
    """A figure bakeoff measured: the mean over repeats and its 95% bootstrap interval."""

    value: float
    low: float
    high: float
    repeats: int
    load: str  # "2.4 req/s", "concurrency 16"

    def ratio(self, claimed: float) -> float:
        return self.value / claimed if claimed else math.nan

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass
class FigureCheck:
    label: str  # "MI355X node (8 GPUs)"
    metric: str
    claimed: float
    tolerance: float
    target: str | None
    fields: list[FieldMatch]
    unstated: list[str]
    at_config: Measure | None
    at_slo: Measure | None
    verdict: str
    reason: str

    @property
    def differs(self) -> list[FieldMatch]:
        return [f for f in self.fields if not f.same]


@dataclass
class CostCheck:
    text: str
    claimed: float
    tolerance: float
    target: str | None
    rival: str | None
    ratio: Measure | None
    verdict: str
    reason: str


@dataclass(frozen=True)
class PricePair:
    """One like-for-like price pair from the catalog (same cloud and market, or one TCO tier), per GPU-hour."""

    basis: str  # "oci on_demand list price", "TCO tier neocloud"
    source: str
    as_of: str
    this_usd: float
    other_usd: float
    cost_ratio: float  # the claim's own throughputs at these prices: this side's cost per token / other's

    @property
    def price_ratio(self) -> float:
        return self.other_usd / self.this_usd

    @property
    def dated(self) -> bool:
        return bool(self.as_of) and self.as_of != "undated"


@dataclass
class BasisCheck:
    """A cost claim's own arithmetic, the same throughputs at like-for-like prices, and what the run supports."""

    basis: Basis
    throughput_ratio: float  # this / other, in the claim's metric
    price_ratio: float  # other's per-GPU price / this one's, as the claim used it
    cost_ratio: float  # the claim's arithmetic: this side's cost per token / other's
    like_for_like: list[PricePair]
    run: Measure | None  # the run's cost ratio, this GPU's target over the throughput rival's, at the SLO
    run_why: list[str]  # why the run's ratio cannot decide (EMULATED, missing, not validated)
    supports: str

    @property
    def mixed(self) -> bool:
        """The price pair's rival is not the throughput pair's (B300's price against B200's throughput)."""
        return self.basis.price.other.gpu != self.basis.throughput.other.gpu


@dataclass
class ClaimCheck:
    claim: Claim
    workload: str | None
    emulated: bool
    figures: list[FigureCheck] = field(default_factory=list)
    costs: list[CostCheck] = field(default_factory=list)
    basis: BasisCheck | None = None


def check_claims(plan: Plan, tables: Tables) -> list[ClaimCheck]:
    """Every claim the plan names, checked against the run's cost tables (``cost.CostTables``)."""
    return [check_claim(load_claim(name), plan, tables) for name in plan.claims]


def check_claim(claim: Claim, plan: Plan, tables: Tables) -> ClaimCheck:
    cfg = claim.configuration
    main_target = _best_target(cfg, plan.targets)
    wl = _best_workload(cfg, plan.workloads, _replicas(main_target) if main_target else 1)
    points = tables.points
    emulated = bool(plan.emulated or (not points.empty and points["emulated"].astype(bool).any()))
    out = ClaimCheck(claim=claim, workload=wl.name if wl else None, emulated=emulated)
    out.figures.append(
        _figure_check(cfg, claim.figure.metric, claim.figure.value, claim.figure.tolerance, plan, wl, tables)
    )
    for comp in claim.comparisons:
        if comp.kind == "throughput":
            ccfg = cfg.model_copy(
                update={
                    "gpu": comp.gpu,
                    "gpus": comp.gpus if comp.gpus is not None else cfg.gpus,
                    "quantization": comp.quantization,  # another GPU's checkpoint: stated or not, never inherited
                    "stack": comp.stack or cfg.stack,
                    "rate": comp.rate,  # each figure's own load: stated or not, never inherited
                    "concurrency": comp.concurrency,
                }
            )
            t = _best_target(ccfg, plan.targets)
            cwl = _best_workload(ccfg, plan.workloads, _replicas(t) if t else 1)
            out.figures.append(_figure_check(ccfg, comp.metric, comp.value, comp.tolerance, plan, cwl, tables))
        else:
            out.costs += _cost_checks(claim, comp, plan, wl, tables, emulated)
    if claim.basis is not None:
        out.basis = check_basis(claim, plan, wl, tables, emulated)
    return out


# --- a cost claim's basis -----------------------------------------------------------------------


def claimed_cost_ratio(tp: ThroughputBasis, price_ratio: float) -> float:
    """This side's cost per token over the other's: (price x GPUs / throughput) for each side, divided.

    A per-node figure is divided by the node's GPUs (each side's ``gpus``, equal when not stated); a
    per-GPU figure already is per GPU. ``price_ratio`` is the other side's per-GPU price over this one's.
    """
    assert tp.this.value and tp.other.value  # ThroughputBasis requires both
    gpus = (tp.this.gpus or 1) / (tp.other.gpus or 1) if tp.metric.endswith("_node") else 1.0
    return gpus * (tp.other.value / tp.this.value) / price_ratio


def like_for_like_prices(tp: ThroughputBasis) -> list[PricePair]:
    """Every catalog price pair for the throughput pair's two GPUs on one footing: the same cloud and market
    (list prices), and each tier of the dated TCO model. Undated pairs are listed and marked, never hidden."""
    this, other = tp.this.gpu, tp.other.gpu
    by_place: dict[tuple[str, str], dict[str, catalog.InstanceType]] = {}
    for it in catalog.instance_types().values():
        if it.usd_per_hour and it.gpu in (this, other):
            by_place.setdefault((it.provider, it.market), {}).setdefault(it.gpu, it)
    out = []
    for (provider, market), rows in sorted(by_place.items()):
        if this in rows and other in rows:
            a, b = rows[this], rows[other]
            pa, pb = float(a.usd_per_hour or 0) / a.gpus, float(b.usd_per_hour or 0) / b.gpus
            dates = {a.as_of or "undated", b.as_of or "undated"}
            as_of = "undated" if "undated" in dates else " and ".join(sorted(dates))
            source = a.source if a.source == b.source else f"{a.source}; {b.source}"
            out.append(
                PricePair(f"{provider} {market} list price", source, as_of, pa, pb, claimed_cost_ratio(tp, pb / pa))
            )
    tco = catalog.tco()
    per_gpu = tco.get("usd_per_gpu_hour") or {}
    if this in per_gpu and other in per_gpu:
        for i, tier in enumerate(tco.get("tiers") or []):
            pa, pb = float(per_gpu[this][i]), float(per_gpu[other][i])
            out.append(
                PricePair(
                    f"TCO tier {tier}", str(tco["source"]), str(tco["as_of"]), pa, pb, claimed_cost_ratio(tp, pb / pa)
                )
            )
    return out


def check_basis(claim: Claim, plan: Plan, wl: Workload | None, tables: Tables, emulated: bool) -> BasisCheck:
    """The claim's own arithmetic first, then its throughputs at like-for-like prices, then the run's ratio."""
    assert claim.basis is not None
    tp, price = claim.basis.throughput, claim.basis.price
    assert tp.this.value and tp.other.value
    pairs = like_for_like_prices(tp)
    own = claimed_cost_ratio(tp, price.ratio)
    run, why = None, []
    cfg = claim.configuration
    t = _best_target(cfg, [x for x in plan.targets if x.gpu.name == tp.this.gpu])
    r = _best_target(cfg.model_copy(update={"gpu": tp.other.gpu}), plan.targets)
    if t is None or r is None or wl is None:
        missing = tp.this.gpu if t is None else tp.other.gpu
        why.append(f"the run has no {missing.upper()} target" if wl is not None else "the plan has no workload")
    else:
        run, why = _run_cost_ratio(t, r, _capacity_workload(cfg, plan.workloads, wl), tables, _cost_column(plan))
        if emulated:
            why.append("figures are EMULATED (the emulator's roofline model, not GPUs)")
    return BasisCheck(
        claim.basis, tp.this.value / tp.other.value, price.ratio, own, pairs, run, why, _supports(own, pairs, run, why)
    )


def _cost_column(plan: Plan) -> str:
    return f"usd_per_m_{plan.pricing.rank_by}"


def _supports(own: float, pairs: list[PricePair], run: Measure | None, why: list[str]) -> str:
    """Which of the claim's arithmetic and the like-for-like recomputation the run's cost ratio supports."""
    dated = [p for p in pairs if p.dated]
    candidates = [("the claim's arithmetic", own)] + [(f"like-for-like ({p.basis})", p.cost_ratio) for p in dated]
    if run is None:
        return "The run cannot say which: " + "; ".join(why or ["it has no cost ratio at the SLO"])
    nearest = min(candidates, key=lambda c: abs(math.log(c[1] / run.value)))[0]
    ci = f" (95% CI {run.low:.2f}–{run.high:.2f})" if run.has_interval else " (no interval: one repeat)"
    measured = f"the run's {'EMULATED ' if any('EMULATED' in w for w in why) else ''}ratio {run.value:.2f}×{ci}"
    if why or not run.has_interval:
        reasons = "; ".join(why) if why else "no interval"
        return f"Not comparable ({reasons}); {measured} lies nearest {nearest}"
    inside = [name for name, v in candidates if run.low <= v <= run.high]
    if inside:
        return f"The run supports {' and '.join(inside)}: {measured} includes it"
    return f"The run supports neither: {measured} includes no candidate; it lies nearest {nearest}"


def verdict(claimed: float, tolerance: float, m: Measure | None, why_not: list[str]) -> tuple[str, str]:
    """(verdict, reason): not comparable when there is a reason, else whether the claimed band meets the CI."""
    if why_not:
        return NOT_COMPARABLE, "; ".join(why_not)
    if m is None or not math.isfinite(m.value):
        return NOT_COMPARABLE, "bakeoff has no figure at this configuration"
    if not m.has_interval:
        return NOT_COMPARABLE, f"{m.repeats} repeat: no confidence interval (add workload repeats)"
    lo, hi = claimed * (1 - tolerance), claimed * (1 + tolerance)
    band = f"{_num(claimed)}" if tolerance == 0 else f"{_num(claimed)} (±{tolerance:.0%}: {_num(lo)}–{_num(hi)})"
    ci = f"bakeoff's 95% CI {_num(m.low)}–{_num(m.high)} over {m.repeats} repeats"
    if hi >= m.low and lo <= m.high:
        return REPRODUCED, f"claimed {band} is inside {ci}"
    return NOT_REPRODUCED, f"claimed {band} is outside {ci}: bakeoff measured {m.ratio(claimed):.2f}× the claim"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def _replicas(t: Target) -> int:
    """Replicas of the target's configuration that fill its node (a TP4 target on 8 GPUs: 2)."""
    return max(1, int(t.instance.gpus) // max(1, int(t.gpus_used)))


def _workload_fields(cfg: Configuration, w: Workload, replicas: int = 1) -> list[FieldMatch]:
    """The claim's workload fields against the run's. A claimed rate is per node; the benchmark sends a rate
    to one replica, so a node of ``replicas`` replicas serves ``replicas`` x that rate."""
    out = []
    for name in ("input_len", "output_len"):
        want = getattr(cfg, name)
        if want is not None:
            have = getattr(w, name)
            out.append(FieldMatch(name, f"{want:,}", f"{have:,}", _close(want, have, LENGTH_TOLERANCE)))
    if cfg.prefix_ratio is not None:
        have = w.prefix_ratio
        out.append(
            FieldMatch(
                "prefix share",
                f"{cfg.prefix_ratio:.0%}",
                f"{have:.0%}",
                abs(cfg.prefix_ratio - have) <= PREFIX_TOLERANCE,
            )
        )
    if cfg.rate is not None:
        rates = [r * replicas for r in w.rates] if w.load == "rate" else []
        per = f" per node ({replicas} replicas)" if replicas > 1 else ""
        run = f"{', '.join(f'{r:g}' for r in rates)} req/s{per}" if rates else f"{w.load} load (no rate point)"
        out.append(
            FieldMatch("rate", f"{cfg.rate:g} req/s", run, any(_close(cfg.rate, r, RATE_TOLERANCE) for r in rates))
        )
    if cfg.concurrency is not None:
        levels = w.levels() if w.load == "concurrency" else []
        run = f"concurrency {', '.join(map(str, levels))}" if levels else f"{w.load} load"
        out.append(FieldMatch("concurrency", str(cfg.concurrency), run, cfg.concurrency in levels))
    return out


def _fields(cfg: Configuration, t: Target) -> list[tuple[str, object, object]]:
    """(label, claimed or None when the claim does not say, the run's) for each deployment field."""
    return [
        ("model", cfg.model, t.model),
        ("precision", cfg.quantization, t.quantization),
        ("engine", cfg.stack, t.stack),
        ("gpu", cfg.gpu, t.gpu.name),
        ("GPUs per node", cfg.gpus, t.instance.gpus),
    ]


def _target_fields(cfg: Configuration, t: Target) -> list[FieldMatch]:
    return [FieldMatch(k, str(want), str(run), want == run) for k, want, run in _fields(cfg, t) if want is not None]


def _unstated(cfg: Configuration, t: Target) -> list[str]:
    """What the run chose that the claim does not say (so a match on stated fields is not the whole story)."""
    spec, kv = t.speculative, t.kv_offload
    return [
        f"tensor parallel (run: TP{t.tensor_parallel})",
        f"speculative decoding (run: {spec.method if spec else 'off'})",
        f"KV offload (run: {kv.backend if kv else 'off'})",
        *(f"{k} (run: {run})" for k, want, run in _fields(cfg, t) if want is None and k != "gpu"),
    ]


def _best_target(cfg: Configuration, targets: list[Target]) -> Target | None:
    """The target on the claim's GPU closest to the claim (fewest differing fields; the first on a tie)."""
    candidates = [t for t in targets if t.gpu.name == cfg.gpu]
    if not candidates:
        return None
    return min(candidates, key=lambda t: sum(not f.same for f in _target_fields(cfg, t)))


def _best_workload(cfg: Configuration, workloads: list[Workload], replicas: int = 1) -> Workload | None:
    """The plan's workload closest to the claim's (fewest differing fields; the first on a tie)."""
    if not workloads:
        return None
    return min(workloads, key=lambda w: sum(not f.same for f in _workload_fields(cfg, w, replicas)))


def _capacity_workload(cfg: Configuration, workloads: list[Workload], claimed: Workload) -> Workload:
    """Where to read throughput and cost at the SLO: a closed-loop (or SLA-search) workload with the claim's
    lengths and prefix share when the plan has one, since an open-loop rate point measures the offered load,
    not what the node can carry; else the workload matched to the claim."""

    def off(w: Workload) -> int:
        return sum(not f.same for f in _workload_fields(cfg, w) if f.field not in ("rate", "concurrency"))

    closed = [w for w in workloads if w.load in ("concurrency", "sla") and off(w) <= off(claimed)]
    return closed[0] if closed else claimed


def _load_text(row: pd.Series, replicas: int = 1) -> str:
    if str(row.get("load_mode", "")) == "rate" and math.isfinite(float(row.get("rate", math.nan))):
        rate = float(row["rate"])
        if replicas > 1:
            return f"{rate * replicas:g} req/s per node ({replicas} replicas at {rate:g})"
        return f"{rate:g} req/s"
    return f"concurrency {int(row['concurrency'])}"


def _measure(rows: pd.DataFrame, column: str, replicas: int = 1, workload: str | None = None) -> Measure | None:
    """Mean and bootstrap interval of a column over the repeats of one load level."""
    # bench.metrics.stats pulls scipy in: imported when a run is checked, not when a plan merely names a claim
    from bakeoff.bench.metrics.stats import bootstrap_ci  # noqa: PLC0415 - start-up cost of plan validation

    if rows.empty or column not in rows:
        return None
    est, lo, hi = bootstrap_ci(rows[column].to_numpy(float))
    if not math.isfinite(est):
        return None
    load = _load_text(rows.iloc[0], replicas) + (f", {workload}" if workload else "")
    return Measure(est, lo, hi, int(rows["repeat"].nunique()), load)


def _at_claimed_load(cfg: Configuration, pts: pd.DataFrame, replicas: int = 1) -> pd.DataFrame:
    is_rate = pts["load_mode"].astype(str) == "rate" if "load_mode" in pts else pts["concurrency"] != pts["concurrency"]
    if cfg.rate is not None and "rate" in pts:
        node_rate = pts["rate"].astype(float) * replicas
        return pts[is_rate & ((node_rate - cfg.rate).abs() <= RATE_TOLERANCE * cfg.rate)]
    if cfg.concurrency is not None:
        return pts[~is_rate & (pts["concurrency"] == cfg.concurrency)]
    return pts.iloc[0:0]


def _slo_row(tables: Tables, slug: str, workload: str) -> pd.Series | None:
    at = tables.at_slo
    if at.empty:
        return None
    rows = at[(at["target"] == slug) & (at["workload"] == workload)]
    if rows.empty or not bool(rows.iloc[0].get("slo_met")):
        return None
    return rows.iloc[0]


def _figure_check(
    cfg: Configuration, metric: str, claimed: float, tolerance: float, plan: Plan, wl: Workload | None, tables: Tables
) -> FigureCheck:
    gpus = f" ({cfg.gpus} GPUs)" if cfg.gpus else ""
    label = f"{(cfg.gpu or '?').upper()} {'node' if metric.endswith('_node') else 'GPU'}{gpus}"
    t = _best_target(cfg, plan.targets)
    if t is None or wl is None:
        absent = f"the run has no {(cfg.gpu or '').upper()} target" if t is None else "the plan has no workload"
        return FigureCheck(label, METRICS[metric], claimed, tolerance, None, [], [], None, None, NOT_COMPARABLE, absent)
    replicas = _replicas(t)
    fields = _target_fields(cfg, t) + _workload_fields(cfg, wl, replicas)
    pts = tables.points
    pts = pts[(pts["target"] == t.slug) & (pts["workload"] == wl.name)] if not pts.empty else pts
    at_config = _measure(_at_claimed_load(cfg, pts, replicas), metric, replicas) if not pts.empty else None
    cap = _capacity_workload(cfg, plan.workloads, wl)
    slo = _slo_row(tables, t.slug, cap.name)
    at_slo = None
    if slo is not None:
        every = tables.points
        level = every[(every["target"] == t.slug) & (every["workload"] == cap.name)]
        at_slo = _measure(level[level["concurrency"] == slo["concurrency"]], metric, replicas, cap.name)
    why = _why_not_comparable(fields, tables, t, at_config)
    if cfg.rate is None and cfg.concurrency is None:
        why = [x for x in why if not x.startswith("bakeoff has no point")]
        why.append("the claim does not state the load (rate or concurrency) of this figure")
    v, reason = verdict(claimed, tolerance, at_config, why)
    return FigureCheck(
        label, METRICS[metric], claimed, tolerance, t.name, fields, _unstated(cfg, t), at_config, at_slo, v, reason
    )


def _why_not_comparable(fields: list[FieldMatch], tables: Tables, t: Target, m: Measure | None) -> list[str]:
    out = []
    differs = [f for f in fields if not f.same]
    if differs:
        out.append(
            "configuration differs in " + ", ".join(f"{f.field} (claimed {f.claimed}, run {f.run})" for f in differs)
        )
    trow = tables.targets[tables.targets["target"] == t.slug] if not tables.targets.empty else tables.targets
    if not trow.empty and not bool(trow.iloc[0]["ranked"]):
        out.append(f"{t.name} did not pass validation (quarantined, not ranked)")
    if _emulated(tables, t.slug) or t.emulated:
        out.append("figures are EMULATED (the emulator's roofline model, not GPUs)")
    if m is None and not differs:
        out.append("bakeoff has no point at the claimed load")
    elif m is not None and not m.has_interval:
        out.append(f"{m.repeats} repeat: no confidence interval (add workload repeats)")
    return out


def _emulated(tables: Tables, slug: str) -> bool:
    p = tables.points
    sel = p[p["target"] == slug] if not p.empty else p
    return bool(not sel.empty and sel["emulated"].astype(bool).any())


def _cost_checks(
    claim: Claim, comp: Comparison, plan: Plan, wl: Workload | None, tables: Tables, emulated: bool
) -> list[CostCheck]:
    """The claim's GPU's cost per token at the SLO over each rival GPU's, with the interval of the difference."""
    cfg = claim.configuration
    col = _cost_column(plan)
    own = [t for t in plan.targets if t.gpu.name == cfg.gpu]
    rivals = [t for t in plan.targets if t.gpu.name in comp.against]
    text = comp.text or f"cost ratio {cfg.gpu} / {', '.join(comp.against)}"
    if not own or not rivals or wl is None:
        missing = (cfg.gpu or "").upper() if not own else "/".join(g.upper() for g in comp.against)
        absent = f"the run has no {missing} target" if (not own or not rivals) else "the plan has no workload"
        return [CostCheck(text, comp.value, comp.tolerance, None, None, None, NOT_COMPARABLE, absent)]
    t = _best_target(cfg, own)
    assert t is not None  # own holds only targets on the claim's GPU
    wl = _capacity_workload(cfg, plan.workloads, wl)
    # the cost claim is about the claim's deployment: its model, precision, engine and workload (not its rate:
    # the SLO chooses the load level)
    differs = [
        f
        for f in _target_fields(cfg, t) + _workload_fields(cfg, wl)
        if not f.same and f.field not in ("rate", "concurrency")
    ]
    out = []
    for r in rivals:
        why: list[str] = []
        if differs:
            why.append(
                "configuration differs in "
                + ", ".join(f"{f.field} (claimed {f.claimed}, run {f.run})" for f in differs)
            )
        if emulated:
            why.append("figures are EMULATED (the emulator's roofline model, not GPUs)")
        ratio, lacking = _run_cost_ratio(t, r, wl, tables, col)
        why += lacking
        v, reason = verdict(comp.value, comp.tolerance, ratio, why)
        out.append(CostCheck(text, comp.value, comp.tolerance, t.name, r.name, ratio, v, reason))
    return out


def _run_cost_ratio(t: Target, r: Target, wl: Workload, tables: Tables, col: str) -> tuple[Measure | None, list[str]]:
    """t's cost per token at the SLO over r's, with the interval of the difference over repeats; or why not."""
    # bench.metrics.stats pulls scipy in: imported when a run is checked, not when a plan merely names a claim
    from bakeoff.bench.metrics.stats import difference_ci  # noqa: PLC0415 - start-up cost of plan validation

    a, b = _slo_row(tables, t.slug, wl.name), _slo_row(tables, r.slug, wl.name)
    if a is None or b is None:
        return None, [f"{(t if a is None else r).name} has no cost at the SLO"]
    if not (a["ranked"] and b["ranked"]):
        return None, [f"{(t if not a['ranked'] else r).name} did not pass validation"]
    pts = tables.points
    own_reps = pts[(pts["target"] == t.slug) & (pts["workload"] == wl.name) & (pts["concurrency"] == a["concurrency"])]
    riv_reps = pts[(pts["target"] == r.slug) & (pts["workload"] == wl.name) & (pts["concurrency"] == b["concurrency"])]
    base = float(b[col])
    est = float(a[col]) / base
    _, lo, hi = difference_ci(riv_reps[col].to_numpy(float), own_reps[col].to_numpy(float))
    reps = int(min(own_reps["repeat"].nunique(), riv_reps["repeat"].nunique()))
    return Measure(est, 1 + lo / base, 1 + hi / base, reps, f"at the SLO, {wl.name}"), []
