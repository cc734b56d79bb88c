"""Catalogs shipped with the package: hardware, models, instance prices, serving stacks.

Every figure keeps the source and date it came from, so a report can say where a number is from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

# The weight formats bakeoff runs, the one list: a plan's quantization (plan.precision), a claim's, a
# model's checkpoints and an engine's precisions are all checked against it.
Quantization = Literal["bf16", "fp8", "nvfp4", "mxfp4"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)


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
    precisions: list[str] = []  # weight formats serving engines run on the chip (hardware.yaml says where from)
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


class NameRef(_Frozen):
    """Where a cloud name (slug, shape, image, OS id) was read, and when; None for both: unverified."""

    source: str | None = None
    as_of: str | None = None

    @property
    def verified(self) -> bool:
        return bool(self.source and self.as_of)

    def label(self) -> str:
        return f"{self.source}, {self.as_of}" if self.verified else "unverified"


def _name_ref(raw: object) -> NameRef:
    """``unverified`` (or nothing) -> an unverified ref; {source, as_of} -> a dated one (both required)."""
    if raw in (None, "unverified"):
        return NameRef()
    if not isinstance(raw, dict) or not raw.get("source") or not raw.get("as_of"):
        raise ValueError(f"catalog name_ref {raw!r}: give {{source, as_of}} or the word unverified")
    return NameRef(source=str(raw["source"]), as_of=str(raw["as_of"]))


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
    name_ref: NameRef = NameRef()


class DefaultImage(_Frozen):
    """The image or OS id a provider launches when the plan's ``field`` is unset."""

    provider: str
    field: str
    value: str | int
    name_ref: NameRef = NameRef()
    note: str = ""


class AccuracyFloor(_Frozen):
    """The score a correct deployment of a model gets on bakeoff's built-in evaluation set.

    The accuracy gate fails a target below ``min_score_ratio`` of it whatever the other targets scored, so a
    run whose every target is broken the same way cannot pass by comparing them only with each other.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float = Field(gt=0, le=1)
    eval_set: str
    n: int = Field(gt=0)
    seed: int = 0
    source: str = Field(min_length=1)
    as_of: str = Field(min_length=1)


class NodeImage(_Frozen):
    """What a cloud's default node image provides that the boot script relies on (None: not known)."""

    provider: str
    image: str
    gpu: Literal["nvidia", "amd"] | None = None
    docker: bool | None = None
    gpu_driver: bool | None = None
    container_toolkit: bool | None = None
    gpu_stack: str | None = None
    listing: str = ""  # a regex over the name the cloud's image listing gives it
    ref: NameRef = NameRef()
    note: str = ""
    instead: str = ""

    def lacks(self, vendor: str) -> list[str]:
        """What a boot on a ``vendor`` GPU cannot install and this image is recorded without."""
        out = ["GPU driver"] if self.gpu_driver is False else []
        return out + (["NVIDIA container toolkit"] if vendor == "nvidia" and self.container_toolkit is False else [])


class ModelSpec(_Frozen):
    """One model's architecture, as far as memory and roofline arithmetic need it.

    The KV cache a token leaves depends on the attention kind: GQA stores K and V per KV head;
    MLA (and DSA, DeepSeek's sparse attention on top of MLA) stores one compressed latent plus a
    RoPE key; hybrid models keep a fixed-size state in their linear-attention layers and per-token
    KV only in their full-attention layers (GQA form, or MLA form when kv_lora_rank is set). Sparse
    attention (DSA's indexer, MiniMax's block-sparse MSA) reads only index_topk cached tokens per
    decode step, however long the context.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt field in models.yaml is an error

    name: str
    hf_id: str
    params_b: float
    active_params_b: float
    layers: int
    context: int
    attention: Literal["gqa", "mla", "dsa", "hybrid"] = "gqa"
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int | None = None
    rope_head_dim: int | None = None
    index_topk: int | None = None
    kv_compression: float = 1.0
    full_attention_layers: int | None = None
    dense_params_b: float | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    checkpoints: dict[str, str] = {}
    speculative: dict[str, str] = {}
    # the model's repo ships Python the engine must run (auto_map); off unless set here after reading that code
    trust_remote_code: bool = False
    accuracy_floor: AccuracyFloor
    source: str = ""
    as_of: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"models.yaml {self.name}: {field} {why}")

        if self.active_params_b > self.params_b:
            raise bad("active_params_b", f"({self.active_params_b}) exceeds params_b ({self.params_b})")
        if self.dense_params_b is not None and not 0 < self.dense_params_b <= self.active_params_b:
            raise bad("dense_params_b", f"({self.dense_params_b}) must be in (0, active_params_b]")
        latent = self.kv_lora_rank is not None
        if latent and (self.kv_lora_rank or 0) <= 0:
            raise bad("kv_lora_rank", "must be > 0")
        if latent and self.rope_head_dim is None:
            raise bad("rope_head_dim", "must be set with kv_lora_rank (0 if the model has no RoPE key)")
        if self.attention in ("mla", "dsa") and not latent:
            raise bad("kv_lora_rank/rope_head_dim", f"must be set for attention: {self.attention}")
        if self.attention == "gqa" and latent:
            raise bad("kv_lora_rank", "is for attention mla, dsa or hybrid, not gqa")
        if (self.attention == "gqa" or (self.attention == "hybrid" and not latent)) and (
            self.kv_heads <= 0 or self.head_dim <= 0
        ):
            raise bad("kv_heads/head_dim", f"must be set (> 0) for attention: {self.attention}")
        if self.attention == "dsa" and self.index_topk is None:
            raise bad("index_topk", "must be set for attention: dsa (tokens attended per decode step)")
        if self.index_topk is not None and self.index_topk <= 0:
            raise bad("index_topk", "must be > 0")
        if self.kv_compression < 1:
            raise bad("kv_compression", f"({self.kv_compression}) must be >= 1 (1 = uncompressed)")
        if self.attention == "hybrid":
            if not self.full_attention_layers or self.full_attention_layers > self.layers:
                raise bad("full_attention_layers", f"must be in 1..layers ({self.layers}) for attention: hybrid")
        elif self.full_attention_layers is not None:
            raise bad("full_attention_layers", "is only for attention: hybrid")
        if (self.experts is None) != (self.experts_per_token is None):
            raise bad("experts/experts_per_token", "are set together (MoE) or not at all (dense)")
        if self.experts is not None and self.experts_per_token is not None and self.experts_per_token > self.experts:
            raise bad("experts_per_token", f"({self.experts_per_token}) exceeds experts ({self.experts})")
        unknown = set(self.checkpoints) - set(QUANTIZATIONS)
        if unknown:
            raise bad("checkpoints", f"has unknown quantization {sorted(unknown)}; use {', '.join(QUANTIZATIONS)}")
        return self

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """Bytes of KV cache one token leaves across all layers (a hybrid's linear layers keep none)."""
        layers = self.full_attention_layers if self.attention == "hybrid" else self.layers
        assert layers is not None
        if self.kv_lora_rank is not None:  # MLA latent: one vector serves K and V
            per_layer = self.kv_lora_rank + (self.rope_head_dim or 0)
        else:
            per_layer = 2 * self.kv_heads * self.head_dim
        return layers * per_layer * kv_dtype_bytes / self.kv_compression

    def kv_read_tokens(self, context_tokens: int) -> int:
        """Cached tokens whose KV one decode step of a sequence reads: all of them, except with sparse
        attention, whose indexer picks index_topk of them (the indexer's own small keys are not counted)."""
        if self.index_topk is not None:
            return min(context_tokens, self.index_topk)
        return context_tokens


class StackSpec(_Frozen):
    """A serving engine: images per platform, health routes, per-GPU recipe flags, and what it can do
    (speculative methods, KV-offload backends, weight precisions), so a plan is refused before any spend."""

    name: str
    port: int
    images: dict[str, str]
    health: list[str]
    ignore_eos: bool = True
    env: dict[str, dict[str, str]] = {}
    args: dict[str, list[str]] = {}
    speculative: list[str] = []
    kv_offload: list[str] = []
    precisions: list[str] = list(QUANTIZATIONS)
    metrics_prefix: str = ""
    source: str = ""


def _load(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text()
    doc: dict[str, Any] = yaml.safe_load(text)  # the vendored YAML files, each a mapping at the top
    return doc


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
        row["name_ref"] = _name_ref(row.get("name_ref"))
        out[row["type"]] = InstanceType(**row)
    return out


@lru_cache
def default_images() -> dict[str, DefaultImage]:
    """Per provider, the image or OS id launched when a plan names none, with where the name is from."""
    out = {}
    for row in _load("instances.yaml").get("images") or []:
        row = {**row, "name_ref": _name_ref(row.get("name_ref"))}
        out[row["provider"]] = DefaultImage(**row)
    return out


@lru_cache
def node_images() -> dict[str, NodeImage]:
    """Per provider, what its default node image provides (instances.yaml ``node_images``)."""
    out = {}
    for row in _load("instances.yaml").get("node_images") or []:
        row = {**row, "ref": _name_ref(row.get("ref"))}
        out[row["provider"]] = NodeImage(**row)
    return out


@lru_cache
def tco() -> dict[str, Any]:
    """TCO tiers: {'tiers': [...], 'usd_per_gpu_hour': {gpu: [..]}, 'source', 'as_of'}."""
    tiers: dict[str, Any] = _load("instances.yaml")["tco"]
    return tiers


@lru_cache
def provider_apis() -> dict[str, dict[str, str]]:
    apis: dict[str, dict[str, str]] = _load("instances.yaml")["apis"]
    return apis


@lru_cache
def models() -> dict[str, ModelSpec]:
    return {name: ModelSpec(name=name, **m) for name, m in _load("models.yaml")["models"].items()}


@lru_cache
def engine_flags() -> dict[str, Any]:
    """Flags each engine release's own parser accepts, and the release each shipped image is held to
    (``engine_flags.json``, written by ``scripts/vendor_engine_flags.py``: ``make engine-flags``)."""
    doc: dict[str, Any] = json.loads(resources.files(__package__).joinpath("engine_flags.json").read_text())
    return doc


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


@lru_cache
def golden_al() -> dict[str, Any]:
    """InferenceX's golden acceptance-length curves (golden_al.yaml): model -> method -> curve."""
    return _load("golden_al.yaml")


def golden_acceptance_length(
    model: str, tokens: int, thinking: str = "thinking_on", method: str | None = None
) -> float | None:
    """The golden acceptance length (tokens per verification step) for a model at ``tokens`` draft tokens;
    ``method`` picks the curve (default: the model's first). None where no curve covers it."""
    curves: dict[str, Any] = golden_al()["models"].get(model) or {}
    curve = curves.get(method) if method else next(iter(curves.values()), None)
    points = (curve or {}).get(thinking) or {}
    value = points.get(tokens)
    return None if value is None else float(value)


_NAME_KINDS = {
    "gpu": ("catalog GPU", "hardware.yaml"),
    "model": ("catalog model", "models.yaml"),
    "stack": ("serving stack bakeoff knows", "serving.yaml"),
}


def known_name(kind: Literal["gpu", "model", "stack"], value: str) -> str:
    """The one check of a GPU, model or serving-stack name, for plans and claims alike: an unknown
    name is refused with the catalog's choices and the file that would have to list it."""
    loaders: dict[str, Callable[[], Mapping[str, object]]] = {"gpu": gpus, "model": models, "stack": stacks}
    known = loaders[kind]()
    if value not in known:
        what, where = _NAME_KINDS[kind]
        raise ValueError(
            f"{value!r} is not a {what}; use one of: {', '.join(sorted(known))} (or add it to catalog/{where})"
        )
    return value
