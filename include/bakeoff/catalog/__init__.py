"""Catalogs shipped with the package: hardware, models, instance prices, serving stacks.

Every figure keeps the source and date it came from, so a report can say where a number is from.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Gpu(_Frozen):
    name: str
    vendor: Literal["amd", "nvidia"]
    hbm_gb: float
    hbm_tbps: float
    fp4: float | None = None
    fp8: float | None = None
    bf16: float
    tdp_w: float
    scale_up: str
    scale_up_gbps: float
    domain: int
    all_in_kw: float
    usable_gib: float | None = None
    source: str
    as_of: str

    @property
    def platform(self) -> str:
        """Software platform the serving images are built for."""
        return "rocm" if self.vendor == "amd" else "cuda"

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak for a compute dtype; falls back to the next wider dtype the chip has."""
        order = {"fp4": ["fp4", "fp8", "bf16"], "fp8": ["fp8", "bf16"], "bf16": ["bf16"]}[dtype]
        for d in order:
            v = getattr(self, d)
            if v:
                return float(v)
        raise ValueError(f"GPU {self.name} has no {dtype} peak")


class InstanceType(_Frozen):
    provider: str
    type: str
    gpu: str
    gpus: int
    usd_per_hour: float | None = None
    market: str = "on_demand"
    regions: list[str] = []
    source: str = ""
    as_of: str = ""
    note: str = ""


class ModelSpec(_Frozen):
    name: str
    hf_id: str
    params_b: float
    active_params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    context: int

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """K and V for every layer of one token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype_bytes


class StackSpec(_Frozen):
    name: str
    port: int
    images: dict[str, str]
    health: list[str]
    ignore_eos: bool = True
    env: dict[str, dict[str, str]] = {}
    args: dict[str, list[str]] = {}


def _load(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text()
    return yaml.safe_load(text)


@lru_cache
def gpus() -> dict[str, Gpu]:
    raw = _load("hardware.yaml")
    out = {}
    for name, g in raw["gpus"].items():
        ref = g.pop("spec_ref")
        g.pop("power_ref", None)
        out[name] = Gpu(name=name, source=ref["source"], as_of=ref["as_of"], **g)
    return out


@lru_cache
def instance_types() -> dict[str, InstanceType]:
    out = {}
    for row in _load("instances.yaml")["instances"]:
        row = dict(row)
        per_gpu = row.pop("usd_per_gpu_hour", None)
        if row.get("usd_per_hour") is None and per_gpu is not None:
            row["usd_per_hour"] = round(per_gpu * row["gpus"], 6)
            row["note"] = (row.get("note", "") + f" node price = {per_gpu} USD/GPU-h x {row['gpus']}").strip()
        out[row["type"]] = InstanceType(**row)
    return out


@lru_cache
def tco() -> dict[str, Any]:
    """TCO tiers: {'tiers': [...], 'usd_per_gpu_hour': {gpu: [..]}, 'source', 'as_of'}."""
    return _load("instances.yaml")["tco"]


@lru_cache
def provider_apis() -> dict[str, dict[str, str]]:
    return _load("instances.yaml")["apis"]


@lru_cache
def models() -> dict[str, ModelSpec]:
    return {name: ModelSpec(name=name, **m) for name, m in _load("models.yaml")["models"].items()}


@lru_cache
def serving() -> dict[str, Any]:
    return _load("serving.yaml")


@lru_cache
def stacks() -> dict[str, StackSpec]:
    return {name: StackSpec(name=name, **s) for name, s in serving()["stacks"].items()}


_DIGEST_PINNED = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")


def agent_image() -> str:
    """The node agent's image, pinned by digest: a tag can be re-pushed, a digest cannot, and the agent
    holds the run's key on the node."""
    image = str(serving()["agent"]["image"])
    if not _DIGEST_PINNED.match(image):
        raise ValueError(
            f"serving.yaml agent.image: {image!r} is not pinned by digest; write it as "
            "name:tag@sha256:<64 hex> (docker buildx imagetools inspect name:tag prints the digest)"
        )
    return image


def docker_flags(vendor: str) -> list[str]:
    return list(serving()["docker_run"][vendor])
