"""A target: one (hardware, serving stack, model, quantization) combination to evaluate."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bakeoff import catalog

ProviderName = Literal["local", "static", "aws", "vultr", "digitalocean"]
# bytes per weight for each quantization the catalog knows
QUANT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5, "mxfp4": 0.53}
KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0}
COMPUTE_DTYPE = {"bf16": "bf16", "fp8": "fp8", "fp4": "fp4", "mxfp4": "fp4"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmulatorSettings(Strict):
    """Knobs of the hardware emulator's roofline; ignored by real serving stacks."""

    prefill_efficiency: float = Field(0.45, gt=0, le=1, description="share of peak FLOPs prefill reaches")
    decode_efficiency: float = Field(0.65, gt=0, le=1, description="share of HBM bandwidth decode reaches")
    max_num_seqs: int = Field(256, ge=1, description="scheduler cap on concurrent sequences")
    time_scale: float = Field(1.0, gt=0, description="multiply every emulated delay (demo speed-up); figures are rescaled back")
    accuracy_error_rate: float = Field(0.0, ge=0, le=1, description="share of accuracy-set answers made wrong on purpose")
    seed: int = 0


class PriceOverride(Strict):
    usd_per_hour: float | None = Field(None, gt=0, description="node price per hour")
    usd_per_gpu_hour: float | None = Field(None, gt=0)
    market: str = "contract"
    source: str = "per-run override"


class Target(Strict):
    name: str = Field(min_length=1, max_length=80)
    provider: ProviderName
    instance_type: str
    stack: str = "vllm"
    model: str
    quantization: Literal["bf16", "fp8", "fp4", "mxfp4"] = "fp8"
    kv_cache_dtype: Literal["auto", "bf16", "fp8", "fp8_e4m3"] = "auto"
    tensor_parallel: int = Field(1, ge=1)
    pipeline_parallel: int = Field(1, ge=1)
    image: str | None = None
    engine_args: list[str] = []
    env: dict[str, str] = {}
    emulator: EmulatorSettings = EmulatorSettings()
    provider_options: dict[str, Any] = {}
    price: PriceOverride | None = None
    notes: str = ""

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str) -> str:
        if any(ord(c) < 32 for c in v):
            raise ValueError("must not contain control characters")
        return v

    @field_validator("instance_type")
    @classmethod
    def _known_instance(cls, v: str) -> str:
        known = catalog.instance_types()
        if v not in known:
            raise ValueError(f"unknown instance type {v!r}; use one of: {', '.join(sorted(known))}")
        return v

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, v: str) -> str:
        if v not in catalog.stacks():
            raise ValueError(f"unknown serving stack {v!r}; use one of: {', '.join(sorted(catalog.stacks()))}")
        return v

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v not in catalog.models():
            raise ValueError(f"unknown model {v!r}; add it to the model catalog or use one of: {', '.join(sorted(catalog.models()))}")
        return v

    @model_validator(mode="after")
    def _fits(self) -> "Target":
        it = self.instance
        if self.gpus_used > it.gpus:
            raise ValueError(
                f"tensor_parallel x pipeline_parallel = {self.gpus_used} exceeds the {it.gpus} GPUs of {it.type}; lower tensor_parallel")
        if it.usd_per_hour is None and self.price is None:
            raise ValueError(
                f"instance type {it.type} has no catalog price ({it.note or 'none published'}); "
                "set price.usd_per_hour (or price.usd_per_gpu_hour) on this target")
        return self

    @property
    def usd_per_hour(self) -> float:
        """Node price in force for this run: the per-run override, else the catalog."""
        p = self.price
        if p and p.usd_per_hour:
            return p.usd_per_hour
        if p and p.usd_per_gpu_hour:
            return p.usd_per_gpu_hour * self.instance.gpus
        return float(self.instance.usd_per_hour)

    @property
    def price_source(self) -> str:
        if self.price:
            return f"{self.price.source} ({self.price.market})"
        it = self.instance
        return f"{it.source}, {it.market}, as of {it.as_of or 'undated'}"

    # derived facts -------------------------------------------------------
    @property
    def slug(self) -> str:
        """File-, tag- and task-safe form of the name."""
        s = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return s[:60] or "target"

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.instance_types()[self.instance_type]

    @property
    def gpu(self) -> catalog.Gpu:
        return catalog.gpus()[self.instance.gpu]

    @property
    def gpus_used(self) -> int:
        """GPUs serving the model (TP x PP): the divisor of every per-GPU figure."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def model_spec(self) -> catalog.ModelSpec:
        return catalog.models()[self.model]

    @property
    def stack_spec(self) -> catalog.StackSpec:
        return catalog.stacks()[self.stack]
