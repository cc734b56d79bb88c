"""Evaluation plans: load a YAML file, validate it, apply trigger-form overrides.

Errors name the field (``targets[1].instance_type``) and say how to fix it, because plans are
written by people who are not reading this code.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from bakeoff.core.numbers import as_float
from bakeoff.fielderrors import explain
from bakeoff.plan import fits
from bakeoff.plan.capacity import CapacitySearch, check_tiers
from bakeoff.plan.checkpoints import check_accuracy_reference
from bakeoff.plan.fields import Strict
from bakeoff.plan.options import EmulatorSettings, PriceOverride
from bakeoff.plan.serving_options import KvOffload, Speculative, WeightsOptions
from bakeoff.plan.settings import MAX_BUDGET_USD, Pricing, Quality
from bakeoff.plan.slo import Slo
from bakeoff.plan.target import Target
from bakeoff.plan.workload import Sessions, Workload

__all__ = [
    "Plan",
    "PlanError",
    "Target",
    "Workload",
    "Slo",
    "Quality",
    "Pricing",
    "PriceOverride",
    "EmulatorSettings",
    "Speculative",
    "KvOffload",
    "WeightsOptions",
    "load_plan",
    "plan_from_dict",
    "plans_dir",
    "apply_overrides",
    "installed_plans",
    "installed_plan_path",
]


class PlanError(ValueError):
    """A plan that cannot be run; the message lists every offending field."""


class Plan(Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    targets: list[Target] = Field(min_length=1)
    workloads: list[Workload] = Field(min_length=1)
    slo: Slo = Slo()
    quality: Quality = Quality()
    pricing: Pricing = Pricing()
    budget_usd: float = Field(
        gt=0,
        le=MAX_BUDGET_USD,
        description="spend cap for the whole run, USD (at most the installation ceiling; see bakeoff.spend.budget)",
    )
    max_instance_hours: float = Field(3.0, gt=0, le=48, description="an instance older than this is reaped")
    claims: list[str] = Field([], max_length=16, description="published claims the report checks (include/claims)")
    slo_tiers: dict[str, Slo] = Field(
        {}, description="named SLO tiers (e.g. interactive, standard, batch): the capacity each target sustains in each"
    )
    capacity: CapacitySearch = CapacitySearch()

    @model_validator(mode="after")
    def _tiers(self) -> Plan:
        check_tiers(list(self.slo_tiers))
        for name, tier in self.slo_tiers.items():
            if not tier.model_dump(exclude_defaults=True):
                raise ValueError(f"slo_tiers.{name}: give the tier at least one bound, e.g. ttft_p95_ms: 500")
        return self

    @model_validator(mode="after")
    def _checkpoints(self) -> Plan:
        acc = self.quality.accuracy
        check_accuracy_reference(self.targets, acc.reference, acc.enabled)
        return self

    @model_validator(mode="after")
    def _unique(self) -> Plan:
        for kind, names in (
            ("targets", [t.name for t in self.targets]),
            ("target slugs", [t.slug for t in self.targets]),
            ("workloads", [w.name for w in self.workloads]),
        ):
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"{kind} must be unique; rename: {', '.join(sorted(dup))}")
        for i, w in enumerate(self.workloads):
            for field in ("source_path", "trace_path"):
                check_workload_path(getattr(w, field), f"workloads[{i}].{field}")
            for field in ("path", "fit_from"):
                check_workload_path(getattr(w.sessions, field, None), f"workloads[{i}].sessions.{field}")
        return self

    @model_validator(mode="after")
    def _fits_context(self) -> Plan:
        """The longest prompt plus the longest output a workload may sample must fit every target's
        model: a server refuses the rest, so they would only spend."""
        for i, w in enumerate(self.workloads):
            if w.sessions is not None:
                _session_fits(i, w.sessions, self.targets)
                continue
            need = w.length_bounds(w.input_len)[1] + w.length_bounds(w.output_len)[1]
            for t in self.targets:
                ctx = t.model_spec.context
                if need > ctx:
                    raise ValueError(
                        f"workloads[{i}].input_len: does not fit: input_len + output_len may reach {need} tokens "
                        f"(with range_ratio {w.range_ratio} and length_interval {w.length_interval}), beyond the "
                        f"{ctx}-token context of {t.model} (target {t.name}); lower input_len or output_len"
                    )
        return self

    @model_validator(mode="after")
    def _fits_memory(self) -> Plan:
        """Every single-node target holds its weights plus the KV cache of each workload's longest request
        (plan.fits.memory: the emulator's arithmetic; a cluster's roles are sized by their recipe)."""
        for i, w in enumerate(self.workloads):
            if w.sessions is not None:
                if w.sessions.source != "synthetic" or w.sessions.fit_from:
                    continue
                need = w.sessions.peak_context()[0]
            else:
                need = w.length_bounds(w.input_len)[1] + w.length_bounds(w.output_len)[1]
            for k, t in enumerate(self.targets):
                if t.cluster is not None:
                    continue
                why = fits.memory(t.gpu, t.model_spec, t.quantization, t.kv_cache_dtype, t.gpus_used, need)
                if why:
                    raise ValueError(f"targets[{k}].tensor_parallel: {why} (target {t.name}, workloads[{i}] {w.name})")
        return self

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name or t.slug == name:
                return t
        raise PlanError(f"targets: no target named {name!r}; plan {self.name} has {[t.name for t in self.targets]}")

    @property
    def emulated(self) -> bool:
        return any(t.emulated for t in self.targets)


def _session_fits(i: int, sessions: Sessions, targets: list[Target]) -> None:
    """A synthetic session's largest possible context must fit every target's model (trace and log
    sessions are checked with their numbers when the file is read: bench.sessions.workload.load_sessions)."""
    if sessions.source != "synthetic" or sessions.fit_from:
        return
    peak, how = sessions.peak_context()
    for t in targets:
        ctx = t.model_spec.context
        if peak > ctx:
            raise ValueError(
                f"workloads[{i}].sessions: a synthetic session may reach {peak} tokens ({how}), beyond the "
                f"{ctx}-token context of {t.model} (target {t.name}); lower turns.max, new_tokens_per_turn.max, "
                f"output_tokens.max or first_prompt_tokens.max"
            )


def check_workload_path(value: str | None, field: str) -> None:
    """A plan names workload files relative to the workloads folder ($BAKEOFF_WORKLOADS_DIR): no absolute
    path, no .., so it cannot make the worker read (and log, or ship to a node) any other file. The
    folder itself, and symlinks out of it, are checked when the file is opened."""
    if value is None:
        return
    p = PurePosixPath(value.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or value.startswith("~") or not value.strip() or "\0" in value:
        raise ValueError(
            f"{field}: {value!r} must be a path relative to the workloads folder "
            "($BAKEOFF_WORKLOADS_DIR, default include/workloads), without .. or a leading /; "
            "copy the file into that folder and name it relative to it"
        )


def plans_dir() -> Path:
    """Where named plans live: $BAKEOFF_PLANS, else include/plans beside the package."""
    env = os.environ.get("BAKEOFF_PLANS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "plans"


PLAN_NAME_RE = r"[a-z0-9][a-z0-9_.-]{0,63}"


def installed_plans() -> list[str]:
    """Names of the plans installed in plans_dir(): what the trigger form and bakeoff_plan may choose."""
    folder = plans_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml") if re.fullmatch(PLAN_NAME_RE, p.stem) and p.is_file())


def installed_plan_path(name: object, field: str = "plan") -> Path:
    """The file of an installed plan, by name only: whoever triggers a run chooses among the plans the
    installation holds, never a path (a path would let them run any YAML file on the worker)."""
    names = installed_plans()
    if not isinstance(name, str) or name not in names:
        shown = name if isinstance(name, str) and len(name) <= 80 else type(name).__name__
        raise PlanError(
            f"{field}: {shown!r} is not an installed plan; choose one of: {', '.join(names) or '(none)'} "
            f"(to add a plan, put <name>.yaml in the plans folder, $BAKEOFF_PLANS)"
        )
    return plans_dir() / f"{name}.yaml"


def plan_from_dict(raw: dict[str, Any], source: str = "plan") -> Plan:
    if not isinstance(raw, dict):
        raise PlanError(f"{source}: expected a mapping at the top level")
    try:
        return Plan.model_validate(raw)
    except ValidationError as e:
        raise PlanError(f"{source} is not a valid plan:\n{explain(e, root='(plan)', model=Plan)}") from None


def resolve_plan_path(ref: str | os.PathLike[str]) -> Path:
    """A path, or the name of a plan under plans_dir() with or without .yaml."""
    p = Path(ref)
    if p.is_file():
        return p
    for cand in (plans_dir() / f"{ref}", plans_dir() / f"{ref}.yaml"):
        if cand.is_file():
            return cand
    avail = sorted(x.stem for x in plans_dir().glob("*.yaml"))
    raise PlanError(f"plan: no plan file {str(ref)!r}; give a path or one of: {', '.join(avail)}")


def load_plan(ref: str | os.PathLike[str]) -> Plan:
    path = resolve_plan_path(ref)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise PlanError(f"{path.name}: not valid YAML: {yaml_problem(e)}") from None
    return plan_from_dict(raw, source=path.name)


def yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error without its "<unicode string>" stand-in for the file: the line and column (1-based)
    and what the parser expected, for a message that already names the file."""
    # PyYAML's MarkedYAMLError carries marks and a problem; its other errors carry neither
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
    return where + (what or str(e).split("\n", 1)[0])


PRICE_LINE = r"^\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*[=:]\s*([0-9]+(?:\.[0-9]+)?)\s*$"
"""One line of the trigger form's contract prices: a target name, "=", USD per node-hour."""


def price_entries(value: object) -> dict[str, Any]:
    """Contract prices as {target name: USD per node-hour}, from the trigger form's lines
    ("mi355x-vllm = 40.0", one target a line; blank lines ignored) or a mapping (the API, older runs'
    stored conf). A line that does not parse, or a target named twice, is refused naming it."""
    if value in (None, "", [], {}):
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        value = value.splitlines()
    if not isinstance(value, list):
        raise PlanError('prices: expected lines "<target name> = <USD per node-hour>", e.g. "mi355x-vllm = 40.0"')
    out: dict[str, Any] = {}
    for i, line in enumerate(value, 1):
        if not isinstance(line, str):
            raise PlanError(f'prices line {i}: {line!r} is not text; write it as "<target name> = <USD per node-hour>"')
        if not line.strip():
            continue
        m = re.match(PRICE_LINE, line)
        if not m:
            raise PlanError(
                f'prices line {i}: {line.strip()[:80]!r} is not "<target name> = <USD per node-hour>"; '
                'write e.g. "mi355x-vllm = 40.0", one target a line'
            )
        name, price = m.group(1), m.group(2)
        if name in out:
            raise PlanError(f"prices.{name}: priced twice (lines of the form); keep one line for it")
        out[name] = float(price)
    return out


def apply_overrides(plan: Plan, overrides: dict[str, Any] | None) -> Plan:
    """Merge trigger-form values: targets subset, SLO, per-target prices, budget.

    overrides keys: targets (list of names; empty = all), slo (dict), prices ({target: usd_per_hour}, or
    the trigger form's lines "<target> = <usd_per_hour>", see price_entries),
    budget_usd (number), utilisation (number).
    """
    if not overrides:
        return plan
    raw = plan.model_dump(mode="json")
    wanted = overrides.get("targets") or []
    if wanted:
        names = {t["name"] for t in raw["targets"]}
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise PlanError(f"targets: {unknown} not in plan {plan.name}; choose from {sorted(names)}")
        raw["targets"] = [t for t in raw["targets"] if t["name"] in wanted]
    slo = {k: v for k, v in (overrides.get("slo") or {}).items() if v not in (None, "")}
    raw["slo"].update(slo)
    for name, price in price_entries(overrides.get("prices")).items():
        matches = [t for t in raw["targets"] if t["name"] == name]
        if not matches:
            raise PlanError(
                f"prices.{name}: no such target in this run; use one of {[t['name'] for t in raw['targets']]}"
            )
        usd = _number(f"prices.{name}", price, "USD per node-hour such as 40.0")
        # pydantic keeps each bound as its own metadata object: only the upper bound has ``le``
        top = next(m.le for m in PriceOverride.model_fields["usd_per_hour"].metadata if getattr(m, "le", None))
        if not 0 < usd <= top:
            raise PlanError(
                f"prices.{name}: {usd:g} USD per node-hour is out of range; give more than 0, at most {top:g}"
            )
        matches[0]["price"] = {
            "usd_per_hour": usd,
            "market": "contract",
            "source": "trigger-form override",
        }
    if overrides.get("budget_usd") not in (None, ""):
        raw["budget_usd"] = _number("budget_usd", overrides["budget_usd"], "USD such as 500")
    if overrides.get("utilisation") not in (None, ""):
        raw["pricing"]["utilisation"] = _number("utilisation", overrides["utilisation"], "share such as 0.6")
    return plan_from_dict(raw, source=f"{plan.name} with overrides")


def _number(field: str, value: object, example: str) -> float:
    """A trigger-form number: a finite int or float (the plan's bounds are checked after)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        value = None
    out = as_float(value)
    if out != out or out in (float("inf"), float("-inf")):
        raise PlanError(f"{field}: {str(value)[:40]!r} is not a finite number; give a number of {example}")
    return out
