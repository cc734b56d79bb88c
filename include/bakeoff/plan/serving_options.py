"""How a target's engine serves: speculative decoding, KV-cache offload, where the weights come from."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from bakeoff.plan.fields import HF_REPO_RE, Strict
from bakeoff.secrets import allowed_connection

MIRROR_CONN_PREFIXES = ("aws_",)  # the S3 mirror's credentials: an AWS connection, never a serving secret
_S3_MIRROR_RE = re.compile(
    r"^s3://(?P<conn>[A-Za-z0-9][A-Za-z0-9_.-]{0,199})@(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])"
    r"(?:/(?P<prefix>[A-Za-z0-9_.=/-]*))?$"
)


class Speculative(Strict):
    """Speculative decoding: the draft a model ships (MTP, DSpark) or a separate draft model (EAGLE, EAGLE3,
    draft). ``pinned`` acceptance forces the engine's synthetic acceptance to a golden acceptance length, so
    throughput compares with published figures; ``real`` measures acceptance on the workload's prompts."""

    method: Literal["mtp", "eagle", "eagle3", "dspark", "draft"]
    num_speculative_tokens: int = Field(3, ge=1, le=16, description="draft tokens proposed per verification step")
    draft_model: str | None = Field(
        None, pattern=HF_REPO_RE, description="HF repo of the draft (default: the one the model catalog names)"
    )
    acceptance: Literal["real", "pinned"] = "real"
    acceptance_length: float | None = Field(
        None, ge=1, le=17, description="pinned: tokens per verification step (default: the golden curve's value)"
    )

    @model_validator(mode="after")
    def _al_bounds(self) -> Speculative:
        if self.acceptance_length is not None:
            if self.acceptance != "pinned":
                raise ValueError("acceptance_length: only pinned acceptance takes it; set acceptance: pinned")
            if self.acceptance_length > self.num_speculative_tokens + 1:
                raise ValueError(
                    f"acceptance_length: {self.acceptance_length} exceeds num_speculative_tokens + 1 = "
                    f"{self.num_speculative_tokens + 1} (the most one step can yield); lower it"
                )
        return self


class KvOffload(Strict):
    """A host-memory tier for the KV cache (SGLang HiCache, LMCache, vLLM's and TensorRT-LLM's native CPU
    offload, Mooncake)."""

    backend: Literal["hicache", "lmcache", "vllm_native", "trtllm_native", "mooncake"]
    host_memory_gb: float = Field(gt=0, le=16384, description="host DRAM given to the KV cache, per node")
    host_tbps: float = Field(0.1, gt=0, le=10, description="host<->GPU bandwidth per node, TB/s (the emulator's)")


class WeightsOptions(Strict):
    """Where a node keeps and fetches model weights."""

    cache_dir: str = Field(
        "/mnt/nvme/hf-cache",
        pattern=r"^/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?$",
        description="absolute path on the node's local NVMe (the HF cache)",
    )
    s3_mirror: str | None = Field(
        None, description="s3://<aws connection id>@bucket/prefix: a mirror of the weights, tried before Hugging Face"
    )
    download_timeout_s: float = Field(7200, gt=0, le=86_400)

    @field_validator("cache_dir")
    @classmethod
    def _no_dotdot(cls, v: str) -> str:
        if ".." in v.split("/"):
            raise ValueError(f"{v!r}: give an absolute path without .., e.g. /mnt/nvme/hf-cache")
        return v

    @field_validator("s3_mirror")
    @classmethod
    def _mirror(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = _S3_MIRROR_RE.match(v)
        if not m:
            raise ValueError(
                f"{v!r} is not an S3 mirror URL; write s3://<connection id>@<bucket>/<prefix>, "
                "e.g. s3://aws_weights@my-weights-bucket/hf"
            )
        if not allowed_connection(m["conn"], MIRROR_CONN_PREFIXES):
            raise ValueError(
                f"{m['conn']!r} is not a connection a plan may name for the mirror; use an AWS connection "
                f"whose id starts with {' or '.join(MIRROR_CONN_PREFIXES)}, e.g. s3://aws_weights@{m['bucket']}"
            )
        return v

    @property
    def mirror_parts(self) -> tuple[str, str, str] | None:
        """(connection id, bucket, prefix) of the S3 mirror, if any."""
        m = _S3_MIRROR_RE.match(self.s3_mirror or "")
        return (m["conn"], m["bucket"], (m["prefix"] or "").strip("/")) if m else None
