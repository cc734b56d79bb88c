"""A target: one (hardware, serving stack, model, quantization) combination to evaluate."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, ValidationInfo, field_validator, model_validator

from bakeoff import catalog
from bakeoff.core.provider_facts import ENDPOINTS, PROVIDERS, PROVISIONING
from bakeoff.plan import cluster as clusters
from bakeoff.plan import fits, multinode, recipes
from bakeoff.plan.custom_stack import CUSTOM_STACK, LOCAL_ARGS, LOCAL_IMAGE, LOCAL_PROGRAM, CustomStack
from bakeoff.plan.fields import HF_REPO_RE, Strict
from bakeoff.plan.options import (
    BY_NAME,
    DescribedGpu,
    EmulatorSettings,
    Hardware,
    PriceOverride,
    ProviderOptions,
    StaticOptions,
)
from bakeoff.plan.precision import Quantization
from bakeoff.plan.serving_options import KvOffload, Speculative, WeightsOptions
from bakeoff.secrets import SECRET_CONN_PREFIXES, SECRET_ENV_PREFIXES, allowed_connection

# the names a plan may give, the registry's in its order (a pydantic Literal: its error lists them)
if TYPE_CHECKING:
    ProviderName = str
else:
    ProviderName = Literal[tuple(PROVIDERS)]
FP4_HINT = "write nvfp4 (NVIDIA Blackwell FP4) or mxfp4 (OCP MX FP4, MI355X and Blackwell)"
CLOUD_PROVIDERS = PROVISIONING  # nodes bakeoff provisions (and can ship its client to)
# provider_options as a union discriminated by the target's provider: each provider's fields are
# checked on its own class, and a field of another provider's is refused naming whose it is
OPTIONS: dict[str, type[ProviderOptions]] = {name: BY_NAME[p.options] for name, p in PROVIDERS.items()}

# A container image reference: [registry[:port]/]path[:tag][@sha256:digest]. Anything else (spaces,
# quotes, ';', '|', newlines) is refused here, and every value is shell-quoted again in user-data.
_IMAGE_RE = re.compile(
    r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?(?::[0-9]{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
# env names that hold secrets: those belong in ``secrets`` (resolved from connections), never in the plan.
# Substrings for the unmistakable words (HFTOKEN, DB_PASSWORD1), whole words for the short ones (MY_PASS, HF_AUTH)
_SECRET_NAME = re.compile(
    r"TOKEN(?!S|IZ)|SECRET|PASSW|CREDENTIAL|APIKEY|(API|ACCESS|PRIVATE|AUTH)_?KEY|(^|_)(PASS|PWD|AUTH|KEY|COOKIE)(_|$)"
)
# ... and any word of the name (split at _ and digits) that abbreviates a secret word (HF_TOK, AWS_SESS,
# HUB_SECR: at least 3 letters and more than half of the word) or is a secret's acronym (GH_PAT, X_JWT)
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSPHRASE", "SESSION", "CREDENTIAL", "COOKIE", "PRIVATE", "BEARER")
_SECRET_ACRONYMS = frozenset({"PAT", "JWT", "PWD", "PW", "SIG", "KEY", "AUTH", "PASS", "CRED", "CREDS", "OTP"})


def secret_looking(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (checked by rule, not by a list of names)."""
    upper = name.upper()
    if _SECRET_NAME.search(upper):
        return True
    for word in filter(None, re.split(r"[_0-9]+", upper)):
        if word in _SECRET_ACRONYMS:
            return True
        if len(word) >= 3 and any(s.startswith(word) and 2 * len(word) > len(s) for s in _SECRET_WORDS):
            return True
    return False


# engine flags that decide who reaches the server and how (address, port, TLS, key, a config file that could
# set any of them): bakeoff sets these itself, so a plan's engine_args may not (checked with - or _ spelling)
_EXPOSURE_FLAGS = frozenset(
    {"--host", "--port", "--server-port", "--uds", "--config", "--extra-llm-api-options", "--enable-ssl-refresh"}
)
TRUST_REMOTE_CODE = "--trust-remote-code"


def flag_name(arg: str) -> str:
    """``--Server_Port=8001`` -> ``--server-port``: one spelling for the comparisons below."""
    return arg.split("=", 1)[0].strip().lower().replace("_", "-")


def exposure_flag(arg: str) -> bool:
    name = flag_name(arg)
    return name.startswith("--") and (name in _EXPOSURE_FLAGS or name.startswith("--ssl-") or name.endswith("api-key"))


def _checkpoint_precision(checkpoint: str | None) -> str | None:
    """The format a checkpoint's repo name declares (``amd/GLM-5.2-MXFP4`` -> mxfp4), if it declares one."""
    words = set(re.split(r"[^a-z0-9]+", (checkpoint or "").lower()))
    for q in ("nvfp4", "mxfp4", "fp8", "bf16"):
        if q in words:
            return q
    return None


def check_image(v: str) -> str:
    if not _IMAGE_RE.match(v):
        raise ValueError(
            f"{v!r} is not a container image reference; write it as registry/name:tag (e.g. vllm/vllm-openai:v0.25.0)"
        )
    return v


def check_arg(v: str) -> str:
    """Engine arguments and env values are passed as single, quoted words: no control characters."""
    if any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"{v!r} contains a newline or control character; give one plain value per list item")
    return v


def _from_multinode_recipe(data: dict[str, Any], r: multinode.MultinodeRecipe) -> dict[str, Any]:
    """One arm of a multi-node recipe as the target's fields (its ``cluster`` and an MTP arm's
    ``speculative`` merged key by key with the target's own; ``speculative: null`` serves without); the
    target's other fields win as with any recipe."""
    template = multinode.cluster_template(
        r,
        data.get("recipe_arm"),
        data.get("provider"),
        data.get("instance_type"),
        data.get("cluster"),
        recipes.catalog_node,
    )
    if template.get("price") is None or "price" in data:
        template.pop("price", None)
    arm = multinode.pick_arm(r, data.get("recipe_arm"))
    own = {k: v for k, v in data.items() if k != "cluster"}
    if isinstance(own.get("speculative"), dict) and isinstance(template.get("speculative"), dict):
        mine, arms = own["speculative"], dict(template["speculative"])
        if {"method", "num_speculative_tokens", "acceptance"} & set(mine):  # the arm's pinned length fits its own
            arms.pop("acceptance", None)
            arms.pop("acceptance_length", None)
        own["speculative"] = {**arms, **mine}  # key by key, the target's win
    return {**template, **own, "recipe_arm": arm}


def cloud_types(provider: object) -> list[str]:
    """The instance types the catalog lists on one cloud, sorted."""
    return sorted(it.type for it in catalog.instance_types().values() if it.provider == provider)


def unknown_instance_message(value: str, provider: object) -> str:
    """An unknown instance type, with the types the target's own cloud sells (every catalog type for the
    local emulator and a static endpoint, which take any: the type only describes the hardware)."""
    shown = value[:80]
    if provider in CLOUD_PROVIDERS:
        own = cloud_types(provider)
        return f"unknown instance type {shown!r} on {provider}; use one of: {', '.join(own) or '(none listed)'}"
    return f"unknown instance type {shown!r}; use one of: {', '.join(sorted(catalog.instance_types()))}"


class Target(Strict):
    name: str = Field(min_length=1, max_length=80)
    provider: ProviderName
    instance_type: str | None = Field(
        None,
        description="catalog instance type (required except for a static target that describes its hardware instead)",
    )
    instance_types: list[str] = Field(
        [],
        description="ordered offers when capacity or quota refuses: every placement of one is tried before "
        "the next; the first is instance_type (which may then be left out), each the same GPU model and "
        "count, sold by the target's provider; cost uses the price of the one that ran",
    )
    hardware: Hardware | None = Field(
        None, description="static only: the endpoint's hardware, free-form, instead of a catalog instance_type"
    )
    served_model: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        pattern=r"^[^\s\x00-\x1f\x7f]+$",
        description="static only: the model id the endpoint answers to (its "
        "--served-model-name); default: the catalog model's HF id",
    )
    recipe: str | None = Field(
        None, description="a vendored recipe (python -m bakeoff recipes): its fields first, this target's override"
    )
    recipe_arm: int | None = Field(
        None, ge=0, description="a multi-node recipe's arm (python -m bakeoff recipes show <name>): its cluster"
    )
    stack: str = "vllm"
    custom: CustomStack | None = Field(None, description="stack: custom: the buyer's own serving stack")
    model: str
    quantization: Quantization = "fp8"
    checkpoint: str | None = Field(
        None, pattern=HF_REPO_RE, description="weights repo (default: the catalog's checkpoint for the quantization)"
    )
    kv_cache_dtype: Literal["auto", "bf16", "fp8", "fp8_e4m3"] = "auto"
    tensor_parallel: int = Field(1, ge=1, le=64)
    pipeline_parallel: int = Field(1, ge=1, le=64)
    expert_parallel: int = Field(1, ge=1, le=64, description="GPUs the MoE experts are spread over")
    data_parallel_attention: bool = Field(False, description="attention data-parallel across the GPUs (MLA models)")
    speculative: Speculative | None = None
    kv_offload: KvOffload | None = None
    weights: WeightsOptions = WeightsOptions()
    image: str | None = None
    engine_args: list[str] = []
    env: dict[str, str] = {}
    secrets: dict[str, str] = Field(
        {},
        description="serving secrets: env name on the node (HF_*, REGISTRY_*) -> "
        "Airflow connection (huggingface_*, registry_*) whose password is the value",
    )
    emulator: EmulatorSettings = EmulatorSettings()
    # the class of the target's provider (OPTIONS); serialized as that class, with its own fields
    provider_options: SerializeAsAny[ProviderOptions] = ProviderOptions()
    cluster: clusters.Cluster | None = Field(
        None, description="several nodes (or a rack shape) with prefill and decode roles; default one node"
    )
    price: PriceOverride | None = None
    notes: str = ""

    @model_validator(mode="before")
    @classmethod
    def _options_of_the_provider(cls, data: object) -> Any:
        """provider_options read as the target's provider's own class (``OPTIONS``)."""
        if not isinstance(data, dict) or data.get("provider") not in OPTIONS:
            return data  # an unknown provider: the provider field's own check names the choices
        provider, raw = data["provider"], data.get("provider_options")
        kind = OPTIONS[provider]
        if type(raw) is kind:
            return data
        doc = raw.model_dump(exclude_unset=True) if isinstance(raw, ProviderOptions) else ({} if raw is None else raw)
        if not isinstance(doc, dict):
            return data  # not a mapping: the field's own check says so
        takes = f"{provider} targets take: {', '.join(sorted(kind.model_fields))}"
        for key in doc:
            owners = sorted(p for p, c in OPTIONS.items() if key in c.model_fields and key not in kind.model_fields)
            if owners:
                raise ValueError(
                    f"provider_options.{key}: an option of {'/'.join(owners)} targets, not of {provider} ones; "
                    f"remove it or change the provider ({takes})"
                )
        try:
            return {**data, "provider_options": kind.model_validate(doc)}
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            fix = f"; not an option of any provider ({takes})" if err["type"] == "extra_forbidden" else ""
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise ValueError(f"provider_options{'.' + where if where else ''}: {msg}{fix}") from None

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str) -> str:
        if any(ord(c) < 32 for c in v):
            raise ValueError("must not contain control characters")
        return v

    @model_validator(mode="before")
    @classmethod
    def _from_recipe(cls, data: object) -> Any:
        """A named recipe's fields first, then this target's own (which win); ``recipe`` stays for provenance."""
        if not isinstance(data, dict) or data.get("recipe") is None:
            return data
        name = data["recipe"]
        if isinstance(name, str) and name in multinode.multinode_recipes():
            return _from_multinode_recipe(data, multinode.multinode_recipes()[name])
        r = recipes.resolve(name) if isinstance(name, str) else None
        if r is None:
            raise ValueError(recipes.unknown_recipe_message(str(name)[:80]))
        if data.get("recipe_arm") is not None:
            raise ValueError(
                f"recipe_arm: {r.name!r} is a single-node recipe (one configuration); remove recipe_arm, "
                "which picks the prefill/decode shape of a multi-node recipe (python -m bakeoff recipes --multinode)"
            )
        template = r.template()
        data = {**data, "recipe": r.name}
        provider = data.get("provider")
        if data.get("instance_types"):  # the target lists its own offers: the recipe's type is not one of them
            template.pop("instance_type", None)
        elif "instance_type" not in data and provider in CLOUD_PROVIDERS:
            # the recipe's GPU as this cloud sells it (8 GPUs first); none: the target must name one
            sold = sorted(
                (it for it in catalog.instance_types().values() if it.provider == provider and it.gpu == r.gpu),
                key=lambda it: it.gpus != 8,
            )
            if sold:
                template["instance_type"] = sold[0].type
            else:
                template.pop("instance_type", None)
        if provider in ENDPOINTS:
            for field in ("image", "engine_args", "env", "instance_type"):
                template.pop(field, None)
        return {**template, **data}

    @model_validator(mode="after")
    def _arm_needs_recipe(self) -> Target:
        if self.recipe_arm is not None and self.recipe is None:
            raise ValueError("recipe_arm: picks an arm of a multi-node recipe; name the recipe too (recipe: <name>)")
        return self

    @field_validator("quantization", mode="before")
    @classmethod
    def _fp4_renamed(cls, v: object) -> Any:
        if isinstance(v, str) and v.lower() == "fp4":
            raise ValueError(f"'fp4' names two formats; {FP4_HINT}")
        return v

    @field_validator("image")
    @classmethod
    def _image_ref(cls, v: str | None) -> str | None:
        return None if v is None else check_image(v)

    @field_validator("engine_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for a in v:
            if exposure_flag(a):
                raise ValueError(
                    f"{a.split('=', 1)[0]!r} sets where or how the server is reached (host, port, TLS, API key "
                    "or a config file), which bakeoff decides so the node stays behind its firewall, TLS and key; "
                    "remove it from engine_args"
                )
        return [check_arg(a) for a in v]

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"environment variable name {k!r} is not a valid name; use letters, digits and _")
            check_arg(val)
            if secret_looking(k):
                raise ValueError(
                    f"env.{k} looks like a secret, and env values are stored in plan.json, deploy.json "
                    f"and reports; name a connection instead: secrets: {{{k}: huggingface_default}}"
                )
        return v

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 8:
            raise ValueError(f"at most 8 secrets per target, got {len(v)}")
        for k, conn in v.items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", k) or not k.startswith(SECRET_ENV_PREFIXES):
                raise ValueError(
                    f"secrets.{k}: the variable name must start with {', '.join(SECRET_ENV_PREFIXES)} "
                    "(upper case, digits, _), e.g. HF_TOKEN"
                )
            if not isinstance(conn, str) or not allowed_connection(conn, SECRET_CONN_PREFIXES):
                raise ValueError(
                    f"secrets.{k}: {conn!r} is not a connection a plan may name; use one whose id "
                    f"starts with {' or '.join(SECRET_CONN_PREFIXES)}, e.g. huggingface_default"
                )
        return v

    @field_validator("instance_type")
    @classmethod
    def _known_instance(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and v not in catalog.instance_types():
            raise ValueError(unknown_instance_message(v, info.data.get("provider")))
        return v

    @model_validator(mode="before")
    @classmethod
    def _first_offer(cls, data: object) -> Any:
        """``instance_types`` alone: its first offer is the target's instance_type."""
        if isinstance(data, dict) and data.get("instance_type") is None:
            offers = data.get("instance_types")
            if isinstance(offers, list) and offers and isinstance(offers[0], str):
                return {**data, "instance_type": offers[0]}
        return data

    @field_validator("instance_types")
    @classmethod
    def _known_offers(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if not v:
            return v
        if len(v) < 2:
            raise ValueError("one offer is instance_type: write instance_type: <type> (list two or more here)")
        if len(set(v)) != len(v):
            raise ValueError(f"{sorted(x for x in set(v) if v.count(x) > 1)} listed twice; list each offer once")
        for x in v:
            if x not in catalog.instance_types():
                raise ValueError(unknown_instance_message(x, info.data.get("provider")))
        return v

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, v: str) -> str:
        return v if v == CUSTOM_STACK else catalog.known_name("stack", v)

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        return catalog.known_name("model", v)

    @model_validator(mode="after")
    def _fits(self) -> Target:
        self._static_only()
        it = self.instance
        if self.cluster is None and self.gpus_used > it.gpus:
            raise ValueError(
                f"tensor_parallel x pipeline_parallel = {self.gpus_used} exceeds the {it.gpus} GPUs of {it.type}; "
                "lower tensor_parallel"
            )
        if self.cluster is None and (
            why := fits.tensor_parallel(self.model_spec, self.tensor_parallel, self.gpus_used, it.gpus, it.type)
        ):
            raise ValueError(f"tensor_parallel: {why}")
        if self.provider in CLOUD_PROVIDERS and it.provider != self.provider:
            raise ValueError(
                f"instance_type: {it.type} is sold by {it.provider}, not {self.provider}; pick one of "
                f"{self.provider}'s ({', '.join(cloud_types(self.provider)) or 'none listed'}) or change provider"
            )
        if self.provider_options.client_mode == "co-located" and self.provider not in CLOUD_PROVIDERS:
            raise ValueError(
                f"provider_options.client_mode: co-located needs a node bakeoff provisions "
                f"({', '.join(CLOUD_PROVIDERS)}); a {self.provider} target's client runs remotely, "
                "so use client_mode: remote"
            )
        opts = self.provider_options
        if isinstance(opts, StaticOptions) and not (opts.base_url or opts.endpoint_connection):
            raise ValueError(
                "provider_options.endpoint_connection: a static target needs its endpoint: name the "
                "connection static_endpoint_<name> that holds its URL and key (or give base_url for an "
                "endpoint without a key)"
            )
        if self.secrets and self.provider not in CLOUD_PROVIDERS:
            raise ValueError(
                f"secrets: only a node bakeoff provisions ({', '.join(CLOUD_PROVIDERS)}) gets serving "
                f"secrets; a {self.provider} target's server is not started by bakeoff, so remove them"
            )
        if set(self.secrets) & set(self.env):
            raise ValueError(
                f"secrets and env both set {sorted(set(self.secrets) & set(self.env))}; keep each name in one"
            )
        if self.hardware and self.price is None:
            raise ValueError(
                "price.usd_per_hour: a target described by hardware has no catalog price; give what the "
                "endpoint costs you (price: {usd_per_hour: 20.0, market: contract}) so its cost per "
                "token can be reported"
            )
        if it.usd_per_hour is None and self.price is None:
            raise ValueError(
                f"instance type {it.type} has no catalog price ({it.note or 'none published'}); "
                "set price.usd_per_hour (or price.usd_per_gpu_hour) on this target"
            )
        return self

    @model_validator(mode="after")
    def _custom_stack(self) -> Target:
        """``stack: custom`` and a ``custom`` block go together; the local provider runs only the emulator."""
        c, named = self.custom, self.stack == CUSTOM_STACK
        if named != (c is not None):
            raise ValueError(
                "custom: required with stack: custom (image, command, port, health_route); give the block"
                if named
                else f"custom: only a target with stack: custom takes it (this one runs {self.stack}); "
                "set stack: custom or remove the block"
            )
        if c is not None:
            try:
                check_image(c.image)
            except ValueError as e:
                raise ValueError(f"custom.image: {e}") from None
        if c is not None and self.image is not None:
            raise ValueError("image: a custom stack names its image in custom.image; remove the target's image")
        if c is not None and PROVIDERS[self.provider].existing_endpoint:
            raise ValueError(
                "custom: bakeoff does not start a static endpoint's server; describe it with served_model instead"
            )
        if c is not None and self.emulated and not (c.runs_locally and not self.engine_args):
            raise ValueError(
                f"custom.image: the {self.provider} provider runs no container, only the project's emulator, with "
                f"no other flag; set image: {LOCAL_IMAGE}, command: [python3, {', '.join(LOCAL_PROGRAM)}, "
                f"{', '.join(LOCAL_ARGS)}] and no engine_args (a cloud target runs the image itself)"
            )
        return self

    @model_validator(mode="after")
    def _offers_fit(self) -> Target:
        """Every offer is the same node on the same cloud (only its stock and price differ), so a fallback
        never changes what is compared; and each can be priced (cost uses the one that ran)."""
        if not self.instance_types:
            return self
        first = catalog.instance_types()[self.instance_types[0]]
        if self.instance_type != first.type:
            raise ValueError(
                f"instance_types: the first offer is the target's instance_type; list {self.instance_type} "
                "first or leave instance_type out"
            )
        if self.provider not in CLOUD_PROVIDERS or self.cluster is not None:
            raise ValueError(
                "instance_types: only a single-node target bakeoff provisions "
                f"({', '.join(CLOUD_PROVIDERS)}) falls back over offers; name one instance_type"
            )
        for x in self.instance_types[1:]:
            it = catalog.instance_types()[x]
            if (it.provider, it.gpu, it.gpus) != (first.provider, first.gpu, first.gpus):
                raise ValueError(
                    f"instance_types: {x} is {it.gpus}x {it.gpu} on {it.provider}, not {first.gpus}x {first.gpu} on "
                    f"{first.provider} like {first.type}; every offer must be the same GPU model and count on "
                    "the same cloud (compare other hardware as its own target)"
                )
            if it.usd_per_hour is None and self.price is None:
                raise ValueError(
                    f"instance_types: {x} has no catalog price ({it.note or 'none published'}); set "
                    "price.usd_per_hour on this target or drop the offer"
                )
        return self

    @model_validator(mode="after")
    def _cluster_fits(self) -> Target:
        """A multi-node target: the cloud must place nodes together (and sell its rack), the roles must fit."""
        c = self.cluster
        if c is not None:
            if self.instance_type is None:
                raise ValueError("cluster: a target spanning nodes needs a catalog instance_type for its nodes")
            clusters.check(c, self.provider, self.instance.type, self.instance.gpus, self.instance.gpu)
        return self

    @model_validator(mode="after")
    def _remote_code(self) -> Target:
        """Code from the checkpoint's repo runs only for a model the catalog marks (models.yaml trust_remote_code)."""
        if any(flag_name(a) == TRUST_REMOTE_CODE for a in self.engine_args) and not self.model_spec.trust_remote_code:
            raise ValueError(
                f"engine_args: {TRUST_REMOTE_CODE} would run Python code from the checkpoint's repo, and the model "
                f"catalog does not mark {self.model} as needing it (models.yaml trust_remote_code); remove the flag"
            )
        return self

    @model_validator(mode="after")
    def _serving_options(self) -> Target:
        """What the GPU, the engine and the model can actually run: refused here, before any spend."""
        self._check_precision()
        spec, stack = self.speculative, self.stack_spec
        ep, used = self.expert_parallel, self.gpus_used
        if ep > used or used % ep:
            divisors = [d for d in range(1, used + 1) if used % d == 0]
            raise ValueError(
                f"expert_parallel: {ep} must divide the {used} GPUs used (tensor_parallel x pipeline_parallel); "
                f"use one of {divisors}"
            )
        experts = self.model_spec.experts
        if ep > 1 and experts is not None and experts <= 1:
            raise ValueError(f"expert_parallel: {self.model} is a dense model (no experts); set expert_parallel: 1")
        if spec is not None:
            methods = stack.speculative
            if spec.method not in methods:
                raise ValueError(
                    f"speculative.method: the {self.stack} stack does not run {spec.method}; it runs "
                    f"{', '.join(methods) or 'no speculative decoding'}"
                )
            drafts = self.model_spec.speculative
            if spec.draft_model is None and spec.method not in drafts:
                raise ValueError(
                    f"speculative.method: {self.model} ships no {spec.method} draft (it ships: "
                    f"{', '.join(drafts) or 'none'}); use one of those or give speculative.draft_model (an HF repo)"
                )
            if spec.acceptance == "pinned" and self.pinned_acceptance_length is None:
                raise ValueError(
                    f"speculative.acceptance_length: pinned acceptance needs a golden acceptance-length curve, and "
                    f"there is none for {self.model} {spec.method} at num_speculative_tokens "
                    f"{spec.num_speculative_tokens}; give acceptance_length (tokens per step) or use acceptance: real"
                )
        if self.kv_offload is not None:
            backends = stack.kv_offload
            if self.kv_offload.backend not in backends:
                raise ValueError(
                    f"kv_offload.backend: the {self.stack} stack has no {self.kv_offload.backend} offload; it has "
                    f"{', '.join(backends) or 'none'}"
                )
        return self

    def _check_precision(self) -> None:
        """The checkpoint's format must be the quantization, and the GPU must run it (NVFP4 is Blackwell's)."""
        named = _checkpoint_precision(self.checkpoint)
        if named and named != self.quantization:
            raise ValueError(
                f"checkpoint: {self.checkpoint} is a {named} checkpoint but quantization is {self.quantization}; "
                f"set quantization: {named} or name a {self.quantization} checkpoint"
            )
        gpu = self.gpu
        runs = [] if isinstance(gpu, DescribedGpu) else gpu.precisions  # a described GPU: nothing to check
        if not runs or self.quantization in runs:
            return
        checkpoints = self.model_spec.checkpoints
        usable = [q for q in ("mxfp4", "nvfp4", "fp8", "bf16") if q in runs and q in checkpoints]
        hint = (
            f"use the {usable[0]} checkpoint {checkpoints[usable[0]]} (quantization: {usable[0]})"
            if usable
            else f"set quantization to one of {', '.join(runs)}"
        )
        raise ValueError(
            f"quantization: {self.gpu.name.upper()} runs {', '.join(runs)}, not {self.quantization}; {hint}"
        )

    def _static_only(self) -> None:
        """What only a static target may say, and what it may not (bakeoff does not start its server)."""
        if not PROVIDERS[self.provider].existing_endpoint:
            for field in ("hardware", "served_model"):
                if getattr(self, field) is not None:
                    raise ValueError(
                        f"{field}: only a static target takes it; bakeoff starts the server of a "
                        f"{self.provider} target itself, on a catalog instance_type, serving the model "
                        "under its HF id"
                    )
        if self.instance_type is None and not self.hardware:
            raise ValueError(
                "instance_type: required; name a catalog instance type (a static target may describe "
                "its hardware instead: hardware: {gpu: H100 SXM 80GB, gpus: 8})"
            )
        if self.instance_type is not None and self.hardware:
            raise ValueError(
                "hardware: give either instance_type (a catalog instance) or hardware (a free-form "
                "description), not both"
            )
        if PROVIDERS[self.provider].existing_endpoint and (self.image or self.engine_args or self.env):
            raise ValueError(
                "image / engine_args / env: bakeoff does not start a static endpoint's server, so these "
                "would describe a deployment it did not make; remove them (the server's own /version, "
                "/v1/models and /metrics are recorded instead)"
            )

    @property
    def checkpoint_id(self) -> str:
        """The weights repo served: the plan's checkpoint, else the catalog's for the quantization, else the HF id."""
        checkpoints = self.model_spec.checkpoints
        return self.checkpoint or checkpoints.get(self.quantization) or self.model_spec.hf_id

    @property
    def served_model_id(self) -> str:
        """The model id requests name: the static endpoint's own, else the checkpoint served (what vLLM and
        SGLang answer to by default)."""
        return self.served_model or self.checkpoint_id

    @property
    def pinned_acceptance_length(self) -> float | None:
        """Pinned speculative acceptance: the plan's value, else InferenceX's golden curve (thinking on)."""
        spec = self.speculative
        if spec is None or spec.acceptance != "pinned":
            return None
        if spec.acceptance_length is not None:
            return spec.acceptance_length
        return catalog.golden_acceptance_length(self.model, spec.num_speculative_tokens, method=spec.method)

    @property
    def emulated(self) -> bool:
        """Its node is the hardware emulator (the local provider): every figure is EMULATED."""
        return PROVIDERS[self.provider].emulated

    @property
    def client_mode(self) -> str:
        """Where the benchmark client runs: the plan's choice, else co-located on cloud nodes (as MLPerf
        and InferenceMAX do, so the network never pollutes TTFT) and remote elsewhere."""
        return self.provider_options.client_mode or PROVIDERS[self.provider].client_mode

    @property
    def nodes(self) -> int:
        """Nodes the target takes (1 unless it is a cluster)."""
        return self.cluster.node_count if self.cluster else 1

    @property
    def usd_per_hour(self) -> float:
        """Node price in force for this run: the per-run override, else the catalog (a cluster pays it
        on each of its ``nodes``)."""
        p = self.price
        if p and p.usd_per_hour:
            return p.usd_per_hour
        if p and p.usd_per_gpu_hour:
            return p.usd_per_gpu_hour * self.instance.gpus
        if self.instance.usd_per_hour is None:
            raise ValueError(
                f"price.usd_per_hour: instance type {self.instance.type} has no catalog price; "
                "set price.usd_per_hour (or price.usd_per_gpu_hour) on this target"
            )
        return float(self.instance.usd_per_hour)

    @property
    def price_source(self) -> str:
        if self.price:
            return f"{self.price.source} ({self.price.market})"
        it = self.instance
        dated = f"as of {it.as_of}" if it.as_of and it.as_of != "undated" else "undated"
        return f"{it.source}, {it.market}, {dated}"

    @property
    def offers(self) -> list[str]:
        """The instance types the create may launch, in order (one unless ``instance_types`` lists more)."""
        return list(self.instance_types) or ([self.instance_type] if self.instance_type else [])

    def ran_as(self, instance_type: str) -> Target:
        """This target on one of its offers: what a launch of that type is priced and described by."""
        if instance_type not in self.offers:
            raise ValueError(f"instance_type: {instance_type!r} is not an offer of {self.name} ({self.offers})")
        if not self.instance_types:
            return self
        return self.model_copy(update={"instance_type": instance_type, "instance_types": []})

    # derived facts -------------------------------------------------------
    @property
    def slug(self) -> str:
        """File-, tag- and task-safe form of the name."""
        s = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return s[:60] or "target"

    @property
    def instance(self) -> catalog.InstanceType:
        if self.instance_type is None:  # a static endpoint described in the plan
            h = self._described_hardware()
            return catalog.InstanceType(
                provider="static",
                type="described",
                gpu=self.gpu.name,
                gpus=h.gpus,
                market=self.price.market if self.price else "contract",
                source="described in the plan",
                note=h.description,
            )
        return catalog.instance_types()[self.instance_type]

    @property
    def gpu(self) -> catalog.Gpu | DescribedGpu:
        if self.instance_type is None:
            return self._described_hardware().as_gpu()
        return catalog.gpus()[self.instance.gpu]

    def _described_hardware(self) -> Hardware:
        """A target without instance_type describes its hardware (validation enforces it; this narrows the type)."""
        if self.hardware is None:
            raise ValueError("instance_type: required; name a catalog instance type or describe the hardware")
        return self.hardware

    @property
    def gpus_used(self) -> int:
        """GPUs serving the model (TP x PP; a cluster: every GPU of its nodes, as each is billed): the
        divisor of every per-GPU figure."""
        if self.cluster is not None:
            return self.nodes * self.instance.gpus
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def model_spec(self) -> catalog.ModelSpec:
        return catalog.models()[self.model]

    @property
    def stack_spec(self) -> catalog.StackSpec:
        """The catalog's engine, or a custom stack's facts as the plan declares them (it renders no
        speculative method or KV offload: those are refused for it)."""
        c = self.custom
        if c is None:
            return catalog.stacks()[self.stack]
        routes = [c.health_route, c.readiness_route, *([c.metrics_route] if c.metrics_route else [])]
        return catalog.StackSpec(
            name=f"{CUSTOM_STACK}: {c.name}",
            port=c.port,
            images={},
            health=list(dict.fromkeys(routes)),
            metrics_prefix=c.metrics_prefix,
            source="declared in the plan (custom stack)",
        )
