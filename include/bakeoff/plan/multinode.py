"""Multi-node, disaggregated recipes (InferenceX's prefill/decode deployments) and the hardware they span.

The data is a dated snapshot (``bakeoff/recipes/inferencex-multinode.yaml``, written by
scripts/vendor_recipes.py beside the single-node file). Each recipe names an orchestrator (Dynamo, llm-d,
SGLang PD, ATOM's mesh), the engine its workers run, the router and the KV transfer engine; each arm of
its search space gives the prefill and decode roles as published. A target names one as its template
with ``recipe:`` and picks an arm with ``recipe_arm:`` (``cluster_template``): the arm becomes the
target's ``cluster:`` (nodes of the recipe's GPU, the NVL72 rack shape for GB200/GB300, the roles'
TP/EP/DP-attention, the KV transfer engine) and the recipe's engine, image and checkpoint its fields;
``provenance`` records the orchestrator, router and source commit. The emulator's paper model of the
shape (serving.emulator.disagg) gives its expected curve, EMULATED.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bakeoff import catalog
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan.cluster import KV_TRANSFERS, ClusterRole, check_offer, offers, racks
from bakeoff.plan.fields import HF_REPO_RE

MULTINODE_FILE = "inferencex-multinode.yaml"

# NVL72 racks: 72 GPUs in one NVLink domain, as 18 compute trays of 4 GPUs (two Grace-Blackwell
# superchips per tray). Source: NVIDIA's GB200 NVL72 and GB300 NVL72 product pages (read 2026-12).
TRAY_GPUS = 4
# Scale-out bandwidth per GPU, GB/s, for KV that leaves the NVLink domain (one NIC per GPU in the
# vendors' reference designs: HGX B200 and GB200 ConnectX-7 400 Gb/s; HGX B300 and GB300 ConnectX-8
# 800 Gb/s; MI355X platforms Pollara 400 Gb/s). Vendor datasheets as published by 2026-12; not checked
# against a stored source here, so the model's transfer times carry them as assumptions.
SCALE_OUT_GBPS = {"b200": 50.0, "gb200": 50.0, "b300": 100.0, "gb300": 100.0, "mi355x": 50.0}
# An MTP arm's draft tokens and pinned acceptance, from the settings InferenceX passes its workers: the
# recipe file's name ("..._mtp3.yaml", "8k1k_mtp2_throughput_1p1d.yaml"), DECODE_MTP_SIZE=3 (MoRI's
# SGLang PD) and SYNTHETIC_ACCEPTANCE_LENGTH=2.49 (vLLM's synthetic acceptance). An arm that names no
# count gets MTP_DEFAULT_DRAFT_TOKENS: 3, what most of the snapshot's MTP arms that name one run (mtp3).
_DRAFTS_RE = re.compile(r"(?:MTP_SIZE=|mtp)(\d{1,2})(?!\d)")
_AL_RE = re.compile(r"SYNTHETIC_ACCEPTANCE_LENGTH=(\d{1,2}(?:\.\d+)?)")
MTP_DEFAULT_DRAFT_TOKENS = 3


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


def arm_choices(r: MultinodeRecipe) -> str:
    """The arms a target may pick, one per line's worth: index, roles, GPUs and nodes."""
    out = []
    for i, arm in enumerate(r.arms):
        fp = r.footprint(arm) if r.gpu in catalog.gpus() else None
        where = f", {fp.gpus} GPUs on {fp.nodes} nodes" if fp else ""
        out.append(f"{i} ({arm.label}{where})")
    return "; ".join(out)


def pick_arm(r: MultinodeRecipe, index: object) -> int:
    """The arm a target names (``recipe_arm``); one is required when the recipe has several."""
    if index is None:
        if len(r.arms) == 1:
            return 0
        raise ValueError(
            f"recipe_arm: {r.name} has {len(r.arms)} arms (prefill/decode shapes); pick one by its number: "
            f"{arm_choices(r)}"
        )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(r.arms):
        raise ValueError(f"recipe_arm: {r.name} has no arm {str(index)[:20]!r}; its arms: {arm_choices(r)}")
    return index


def arm_speculative(model: str, arm: Arm) -> dict[str, Any] | None:
    """The target's ``speculative`` an arm's MTP renders into (plan.serving_options.Speculative), or None
    without speculative decoding: the draft tokens its settings name (decode's first); an arm that pins
    acceptance (its synthetic acceptance length) pinned at that length, its draft tokens where it names
    none those at which the model's golden curve has that length; else MTP_DEFAULT_DRAFT_TOKENS."""
    if arm.speculative is None:
        return None
    settings = [*arm.decode.settings, *arm.prefill.settings]
    drafts = next((int(m.group(1)) for s in settings if (m := _DRAFTS_RE.search(s))), None)
    al = next((float(m.group(1)) for s in settings if (m := _AL_RE.search(s))), None)
    if drafts is None and al is not None:
        curve = {k: catalog.golden_acceptance_length(model, k, method=arm.speculative) for k in range(1, 17)}
        drafts = next((k for k, v in curve.items() if v is not None and abs(v - al) < 0.005), None)
    drafts = drafts or MTP_DEFAULT_DRAFT_TOKENS
    out: dict[str, Any] = {"method": arm.speculative, "num_speculative_tokens": drafts}
    if al is not None and 1 <= al <= drafts + 1:
        out.update(acceptance="pinned", acceptance_length=al)
    return out


def rack_shape(gpu: str) -> str | None:
    """The NVL72 rack shape a rack-scale GPU's recipe runs on (catalog clusters.yaml), else None."""
    return next((name for name, row in racks().items() if row.get("gpu") == gpu), None)


def _node_type(r: MultinodeRecipe, provider: str, rack: str | None, node_gpus: int) -> str | None:
    """The catalog instance type a recipe's nodes default to on a cloud: its rack offer, else its
    instance of the GPU with that many GPUs (priced first)."""
    sold = ((offers().get(provider) or {}).get("racks") or {}).get(rack or "") or {}
    if sold.get("instance_type"):
        return str(sold["instance_type"])
    fit = [
        it
        for it in catalog.instance_types().values()
        if it.gpu == r.gpu and it.gpus == node_gpus and it.provider == provider
    ]
    fit.sort(key=lambda it: (it.usd_per_hour is None, it.type))
    return fit[0].type if fit else None


def cluster_template(
    r: MultinodeRecipe,
    index: object,
    provider: object,
    instance_type: object,
    own_cluster: object,
    catalog_node: Callable[[str, int], str | None],
) -> dict[str, Any]:
    """Target fields one arm of a multi-node recipe sets: engine, image, checkpoint, the node type and
    the ``cluster`` (nodes from the roles' GPUs and the node or tray size; a GB200/GB300 recipe on its
    NVL72 rack shape). The target's own fields win (``cluster`` key by key). A cloud without the rack
    is refused here, naming cluster.rack; roles that do not fit are refused by plan.cluster.check.
    The node type: the cloud's (``_node_type``); on a provider that provisions nothing (the emulator)
    ``catalog_node(gpu, gpus)``, the node the single-node recipes default to (plan.recipes)."""
    arm = r.arms[pick_arm(r, index)]
    rack = rack_shape(r.gpu)
    own = own_cluster if isinstance(own_cluster, dict) else {}
    if rack is not None and "rack" in own:
        rack = own["rack"]
    if provider in PROVIDERS:  # an unknown provider: its own field says so
        check_offer(provider, rack if isinstance(rack, str) else None)
    out: dict[str, Any] = {
        "stack": r.engine,
        "model": r.model,
        "quantization": r.precision,
        "image": r.image,
    }
    if re.fullmatch(HF_REPO_RE, r.checkpoint):
        out["checkpoint"] = r.checkpoint  # else (a local path in the recipe) the catalog's checkpoint
    it_name = instance_type if isinstance(instance_type, str) else None
    if it_name is None and provider in PROVIDERS:
        node_gpus = TRAY_GPUS if rack else 8
        if PROVIDERS[provider].provisions:
            it_name = _node_type(r, provider, rack if isinstance(rack, str) else None, node_gpus)
        else:
            it_name = catalog_node(r.gpu, node_gpus)
        if it_name is None:
            raise ValueError(
                f"instance_type: the catalog has no {provider} node of {node_gpus} {r.gpu} GPUs for {r.name}; "
                "name the target's instance_type, or pick a provider that sells the recipe's GPU"
            )
        out["instance_type"] = it_name
    it = catalog.instance_types().get(it_name or "")
    node_gpus = it.gpus if it else (TRAY_GPUS if rack else 8)
    roles = {
        name: {"workers": role.workers, "tp": role.tp, "ep": role.ep, "dp_attention": role.dp_attention}
        for name, role in (("prefill", arm.prefill), ("decode", arm.decode))
    }
    cluster: dict[str, Any] = {
        "nodes": sum(ClusterRole(**role).nodes_needed(node_gpus) for role in roles.values()),
        **roles,
    }
    if rack:
        cluster["rack"] = rack
    if r.kv_transfer in KV_TRANSFERS:
        cluster["kv_transfer"] = r.kv_transfer
    out["cluster"] = {**cluster, **own}
    spec = arm_speculative(r.model, arm)
    if spec is not None:
        out["speculative"] = spec  # the target's own keys win (plan.target merges them)
    if it is not None and it.usd_per_hour is None:
        out["price"] = tco_price(r.gpu)
    return out


def tco_price(gpu: str) -> dict[str, Any] | None:
    """A node without a catalog list price (GB200 UltraServer Capacity Blocks, an emulated GB300 tray):
    the catalog's TCO neocloud tier for its GPU, with that table's source and date."""
    t = catalog.tco()
    row = (t.get("usd_per_gpu_hour") or {}).get(gpu)
    if not row:
        return None
    tier = list(t.get("tiers") or []).index("neocloud") if "neocloud" in (t.get("tiers") or []) else 0
    return {
        "usd_per_gpu_hour": float(row[tier]),
        "market": "tco",
        "source": f"catalog TCO tier, neocloud ({t.get('source')}, {t.get('as_of')})",
    }


def provenance(recipe_name: str | None, arm_index: int | None) -> dict[str, Any] | None:
    """What a cluster target's recipe says and where it is from: orchestrator, engine, router, KV
    transfer, the arm's roles and per-role settings (the recipe file InferenceX cites), source commit."""
    r = multinode_recipes().get(recipe_name or "")
    if r is None:
        return None
    i = arm_index or 0
    arm = r.arms[i]
    src = source()
    return {
        "recipe": r.name,
        "key": r.key,
        "arm": i,
        "arm_label": arm.label,
        "orchestrator": r.orchestrator,
        "framework": r.framework,
        "engine": r.engine,
        "router": r.router,
        "kv_transfer": r.kv_transfer,
        "image": r.image,
        "isl": arm.isl,
        "osl": arm.osl,
        "concurrency": list(arm.concurrency),
        "speculative": arm.speculative,
        "speculative_rendered": arm_speculative(r.model, arm),
        "settings": {"prefill": list(arm.prefill.settings), "decode": list(arm.decode.settings)},
        "source": f"{src.get('repo')} {r.source_file}",
        "commit": src.get("commit"),
        "date": src.get("date"),
    }
