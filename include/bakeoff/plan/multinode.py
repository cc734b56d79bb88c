"""Multi-node, disaggregated recipes (InferenceX's prefill/decode deployments) and the hardware they span.

The data is a dated snapshot (``bakeoff/recipes/inferencex-multinode.yaml``, written by
scripts/vendor_recipes.py beside the single-node file). Each recipe names an orchestrator (Dynamo, llm-d,
SGLang PD, ATOM's mesh), the engine its workers run, the router and the KV transfer engine; each arm of
its search space gives the prefill and decode roles as published. A target cannot name one as its
template yet (plan.recipes refuses it, pointing to ``cluster:``, plan.cluster, where a target gives the
same roles itself); the emulator's paper model of the shape (serving.emulator.disagg) gives its
expected curve, EMULATED.
"""

from __future__ import annotations

import difflib
import math
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bakeoff import catalog

MULTINODE_FILE = "inferencex-multinode.yaml"

# NVL72 racks: 72 GPUs in one NVLink domain, as 18 compute trays of 4 GPUs (two Grace-Blackwell
# superchips per tray). Source: NVIDIA's GB200 NVL72 and GB300 NVL72 product pages (read 2026-12).
TRAY_GPUS = 4
# Scale-out bandwidth per GPU, GB/s, for KV that leaves the NVLink domain (one NIC per GPU in the
# vendors' reference designs: HGX B200 and GB200 ConnectX-7 400 Gb/s; HGX B300 and GB300 ConnectX-8
# 800 Gb/s; MI355X platforms Pollara 400 Gb/s). Vendor datasheets as published by 2026-12; not checked
# against a stored source here, so the model's transfer times carry them as assumptions.
SCALE_OUT_GBPS = {"b200": 50.0, "gb200": 50.0, "b300": 100.0, "gb300": 100.0, "mi355x": 50.0}


class Role(BaseModel):
    """Prefill or decode workers of one arm: how many, and each worker's parallelism."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    workers: int = Field(ge=1)
    tp: int = Field(ge=1)
    ep: int = Field(1, ge=1)
    dp_attention: bool = False
    settings: list[str] = Field([], description="what InferenceX passes the worker (e.g. its recipe file)")

    @property
    def gpus_per_worker(self) -> int:
        return max(self.tp, self.ep)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def label(self) -> str:
        bits = [f"{self.workers}x tp{self.tp}"] + ([f"ep{self.ep}"] if self.ep > 1 else [])
        return " ".join(bits + (["dp-attn"] if self.dp_attention else []))


class Arm(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    concurrency: list[int] = Field(min_length=1)
    speculative: str | None = None
    prefill: Role
    decode: Role

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def label(self) -> str:
        spec = f", {self.speculative}" if self.speculative else ""
        return f"prefill {self.prefill.label} | decode {self.decode.label}{spec}, conc {self.concurrency}"


class Footprint(BaseModel):
    """What one arm occupies: GPUs, nodes (8-GPU nodes, or an NVL72 rack's 4-GPU trays), racks, and
    whether prefill-to-decode KV stays in one NVLink domain."""

    model_config = ConfigDict(frozen=True)
    gpus: int
    nodes: int
    racks: int | None
    nvlink_domain: int
    kv_in_domain: bool


class MultinodeRecipe(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    key: str
    source_file: str
    runner: str
    model: str
    gpu: str
    framework: str
    orchestrator: str
    engine: str
    precision: str
    image: str
    checkpoint: str
    router: str | None = None
    kv_transfer: str | None = None
    arms: list[Arm] = Field(min_length=1)

    def footprint(self, arm: Arm) -> Footprint:
        """GPUs, nodes and racks of one arm on the recipe's GPU (the catalog's NVLink domain size)."""
        gpu = catalog.gpus().get(self.gpu)
        if gpu is None:
            raise ValueError(f"{self.name}: GPU {self.gpu!r} is not in the hardware catalog, so it has no footprint")
        domain = gpu.domain
        gpus = arm.gpus
        if domain > 8:  # a rack-scale domain: nodes are its trays
            return Footprint(
                gpus=gpus,
                nodes=math.ceil(gpus / TRAY_GPUS),
                racks=math.ceil(gpus / domain),
                nvlink_domain=domain,
                kv_in_domain=gpus <= domain,
            )
        return Footprint(
            gpus=gpus, nodes=math.ceil(gpus / domain), racks=None, nvlink_domain=domain, kv_in_domain=False
        )


@lru_cache
def _raw() -> dict[str, Any]:
    path = resources.files("bakeoff").joinpath("recipes", MULTINODE_FILE)
    return (yaml.safe_load(path.read_text()) if path.is_file() else None) or {"recipes": {}}


def source() -> dict[str, Any]:
    return dict(_raw().get("source") or {})


@lru_cache
def multinode_recipes() -> dict[str, MultinodeRecipe]:
    return {name: MultinodeRecipe(name=name, **r) for name, r in (_raw().get("recipes") or {}).items()}


def multinode_recipe(name: str) -> MultinodeRecipe:
    """A multi-node recipe by its InferenceX key; the error lists close matches."""
    known = multinode_recipes()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, list(known), n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise KeyError(
        f"no multi-node recipe named {name!r}; {hint}list them with: python -m bakeoff recipes list --multinode"
    )


def not_deployable_message(name: str, field: str = "recipe") -> str:
    """Why a target cannot name a multi-node recipe, and where its expected shape can be seen."""
    r = multinode_recipes()[name]
    return (
        f"{field}: {name!r} is a multi-node disaggregated recipe ({r.orchestrator} with {r.engine} on {r.gpu}, "
        f"prefill and decode on separate workers); a recipe cannot be a target's template yet, but a target may "
        f"give the same roles itself: instance_type of its GPU, cluster: {{nodes: N (or rack: gb200-nvl72), "
        f"prefill: {{workers, tp, ep}}, decode: {{...}}}}. Its arms and emulated shape: "
        f"python -m bakeoff recipes show {name}"
    )
