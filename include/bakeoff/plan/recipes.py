"""Vendored serving recipes (InferenceX's single-node configs): named target templates a plan can start from.

The data is a dated snapshot (``bakeoff/recipes/inferencex.yaml``, refreshed by scripts/vendor_recipes.py);
a target names one with ``recipe:`` and overrides any field it wants. A multi-node recipe
(plan.multinode) is named the same way, with ``recipe_arm:`` for which of its prefill/decode shapes.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bakeoff import catalog
from bakeoff.core.provider_facts import EMULATORS
from bakeoff.plan.multinode import multinode_recipes

RECIPES_FILE = "inferencex.yaml"


class RecipeSpeculative(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    method: str
    num_speculative_tokens: int | None = None
    draft_model: str | None = None


class RecipeKvOffload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    backend: str
    dram_utilization: float | None = None
    host_memory_gb: float | None = None


class Recipe(BaseModel):
    """One InferenceX recipe: what it says (image, checkpoint, parallelism, flags) and where it came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    key: str = Field(description="the recipe's key in the InferenceX config file")
    source_file: str
    script: str | None = None
    scenario: Literal["fixed-seq-len", "agentic-coding"]
    model: str
    gpu: str
    engine: str
    precision: str
    image: str
    checkpoint: str
    tp: int
    ep: int = 1
    dp_attention: bool = False
    speculative: RecipeSpeculative | None = None
    kv_offload: RecipeKvOffload | None = None
    concurrency: list[int]
    isl: int | None = None
    osl: int | None = None
    engine_args: list[str] = []
    env: dict[str, str] = {}
    instance_type: str | None = None
    script_commit: str | None = Field(None, description="the launch script's version its flags were read from")
    pinned_acceptance_length: float | None = Field(None, description="the AL the script pins (AgentX policy)")
    notes: str = ""

    @property
    def floating(self) -> bool:
        """Its image is a tag, not a digest (every InferenceX recipe names tags, nightly builds among them):
        the tag may be re-pushed with other code, so a target using it gets no serving secrets
        (installation.check_secret_images) until a plan pins the image by digest and the installation
        trusts that digest."""
        return "@sha256:" not in self.image

    @property
    def middle_concurrency(self) -> int:
        """The concurrency the benchmark runs a recipe at: the middle of its published list."""
        return self.concurrency[len(self.concurrency) // 2]

    @property
    def spec_label(self) -> str:
        s = self.speculative
        if s is None:
            return "-"
        return f"{s.method}" + (f" k={s.num_speculative_tokens}" if s.num_speculative_tokens else "")

    @property
    def kv_offload_label(self) -> str:
        return self.kv_offload.backend if self.kv_offload else "-"

    def default_instance_type(self) -> str | None:
        """The recipe's own, else the catalog's 8-GPU node for its GPU (``catalog_node``)."""
        return self.instance_type or catalog_node(self.gpu, 8)

    def template(self) -> dict[str, Any]:
        """Target fields this recipe sets (a plan's own fields override them)."""
        out: dict[str, Any] = {
            "stack": self.engine,
            "model": self.model,
            "quantization": self.precision,
            "checkpoint": self.checkpoint,
            "image": self.image,
            "tensor_parallel": self.tp,
            "expert_parallel": self.ep,
            "data_parallel_attention": self.dp_attention,
            "engine_args": list(self.engine_args),
            "env": dict(self.env),
        }
        it = self.default_instance_type()
        if it:
            out["instance_type"] = it
        if self.speculative:
            spec: dict[str, Any] = {"method": self.speculative.method}
            if self.speculative.num_speculative_tokens:
                spec["num_speculative_tokens"] = self.speculative.num_speculative_tokens
            if self.speculative.draft_model:
                spec["draft_model"] = self.speculative.draft_model
            out["speculative"] = spec
        if self.kv_offload:
            host_gb = self.kv_offload.host_memory_gb or self.host_memory_gb()
            out["kv_offload"] = {"backend": self.kv_offload.backend, "host_memory_gb": host_gb}
        return out

    def host_memory_gb(self) -> float:
        """InferenceX's KV host tier: node host DRAM x dram_utilization x tp/8 (its runners' formula)."""
        share = (self.kv_offload.dram_utilization if self.kv_offload else None) or 0.5
        return round(HOST_DRAM_GB.get(self.gpu, 2000.0) * share * self.tp / 8, 1)


# The one cloud with all three GPU families: where a recipe's GPU defaults (catalog_node) and the
# cloud `bakeoff recipes show` renders a recipe for.
HOME_CLOUD = "oci"


def catalog_node(gpu: str, gpus: int) -> str | None:
    """The node a recipe's GPU defaults to where any catalog type will do (the emulator): the emulator's
    own row where the catalog has one (the GB300 tray), else OCI's bare-metal node (the one cloud with
    all three GPU families), else a priced one, else any."""
    fit = [it for it in catalog.instance_types().values() if it.gpu == gpu and it.gpus == gpus]
    fit.sort(key=lambda it: (it.provider not in EMULATORS, it.provider != HOME_CLOUD, it.usd_per_hour is None, it.type))
    return fit[0].type if fit else None


# Host DRAM of InferenceX's 8-GPU runners, GB: MI355X 2,861,022 MiB (its local-run README's worked example);
# B200 2,063,920 MiB (the b200-nscale runner, per the GLM-5.2 B200 launch script); B300 assumed as B200.
# Source: SemiAnalysisAI/InferenceX, read 2026-11.
HOST_DRAM_GB = {"mi355x": 3000.0, "b200": 2164.0, "b300": 2164.0}


@lru_cache
def _raw() -> dict[str, Any]:
    path = resources.files("bakeoff").joinpath("recipes", RECIPES_FILE)
    if not path.is_file():
        return {"recipes": {}}
    return yaml.safe_load(path.read_text()) or {"recipes": {}}


def source() -> dict[str, Any]:
    """Where the snapshot came from: repo, commit, date, licence."""
    return dict(_raw().get("source") or {})


@lru_cache
def recipes() -> dict[str, Recipe]:
    return {name: Recipe(name=name, **r) for name, r in (_raw().get("recipes") or {}).items()}


def unknown_recipe_message(name: str, field: str = "recipe") -> str:
    close = difflib.get_close_matches(name, [*recipes(), *multinode_recipes()], n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (
        f"{field}: no recipe named {name!r}; {hint}{len(recipes())} recipes are vendored, and "
        f"{len(multinode_recipes())} multi-node ones (list them with: python -m bakeoff recipes [--multinode])"
    )


def resolve(name: str) -> Recipe | None:
    """A recipe by its name, or by its short name ``<model>-<precision>-<gpu>-<engine>`` when exactly one
    recipe has it (``glm5.2-fp4-mi355x-sglang`` is the MTP agentic one, InferenceX's only such key)."""
    known = recipes()
    if name in known:
        return known[name]
    matches = [r for n, r in known.items() if n.startswith(name + "-")]
    return matches[0] if len(matches) == 1 and name.count("-") >= 3 else None


def recipe(name: str) -> Recipe:
    """A recipe by name (or unique short name); the error lists close matches."""
    r = resolve(name)
    if r is None:
        raise KeyError(unknown_recipe_message(name))
    return r
