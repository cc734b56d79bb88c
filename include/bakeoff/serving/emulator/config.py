"""The emulator's config file: which target it pretends to be and how it times its answers.

A JSON file rather than command-line flags, because the whole target (hardware, model,
quantization, efficiency factors) travels in it; the file never holds a secret, only the *name*
of the environment variable that holds the API key. Example::

    {"mode": "roofline",                         # or "scripted"
     "target": {...},                            # Target.model_dump(mode="json"); roofline only
     "served_model": "meta-llama/Llama-3.1-70B-Instruct",   # default: the catalog hf_id
     "api_key_env": "BAKEOFF_API_KEY",           # or null: no auth
     "scripted": {"ttft_ms": 100, "itl_ms": 10, "tokens_per_chunk": 1},  # see Scripted
     "expires_at": 1767225600,                   # optional: exit by itself then (epoch s)
     "power_csv": "logs/power.csv",              # optional, roofline only: append EMULATED GPU power
     "power_interval_s": 1.0}                    #   samples (epoch_s,gpu,watts) this often; see power.py
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from bakeoff.fielderrors import explain
from bakeoff.plan.target import Target


class EmulatorConfigError(ValueError):
    """A config the emulator cannot start from; the message names each field and the fix."""


class Scripted(BaseModel):
    """Fixed timing with no batching effects: a null server to measure a client against (scripted.py).

    Chunk k (0-based) leaves at ttft_ms + k x tokens_per_chunk x itl_ms after the request arrived
    (kernel receive time), so the truth a client should report is TTFT = ttft_ms, chunk gap =
    tokens_per_chunk x itl_ms, and for N tokens in K chunks, E2E = ttft_ms + (K - 1) x
    tokens_per_chunk x itl_ms. The *_per_inflight_ms terms make a saturating server whose delays
    grow with the requests in flight.
    """

    model_config = ConfigDict(extra="forbid")
    ttft_ms: float = Field(100.0, ge=0, description="time to the first chunk")
    itl_ms: float = Field(10.0, ge=0, description="time per output token")
    tokens_per_chunk: int = Field(1, ge=1)
    output_tokens: int | None = Field(None, ge=1, description="fixed output length; default: the request's max_tokens")
    ttft_per_inflight_ms: float = Field(0.0, ge=0, description="TTFT grows by this per request in flight")
    itl_per_inflight_ms: float = Field(0.0, ge=0, description="each gap grows by this per request in flight")
    include_usage: bool = Field(True, description="false: never send usage (a misbehaving server)")
    precise: bool = Field(False, description="poll near due times (~1 ms timer slop); only on a core of its own")


# The provider's teardown from another host (the local provider's nodes, reached over the network):
# POST with 'Authorization: Bearer <stop key>' and the emulator exits as on SIGTERM; 404 without a key.
STOP_ROUTE = "/_bakeoff/stop"


def opens_stop(key_env: str | None, authorization: bytes | None) -> bool | None:
    """Whether this Authorization header opens the stop route; None when no key was given (no route)."""
    key = os.environ.get(key_env) if key_env else None
    if not key:
        return None
    return hmac.compare_digest(authorization or b"", f"Bearer {key}".encode())


class EmulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["roofline", "scripted"] = "roofline"
    target: Target | None = Field(None, description="Target.model_dump(mode='json'); required for roofline")
    served_model: str = Field(
        None,  # replaced by _default_model
        min_length=1,
        validate_default=True,
        description="model id to answer to; default: the catalog hf_id",
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="environment variable holding the bearer key, or null for no auth",
    )
    stop_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description=f"environment variable holding the key that opens POST {STOP_ROUTE}, or null: no stop route",
    )
    scripted: Scripted = Scripted()
    expires_at: float | None = Field(None, description="epoch seconds; the emulator exits by itself after this")
    power_csv: str | None = Field(
        None, min_length=1, description="append EMULATED power samples here, like the node's power.csv"
    )
    power_interval_s: float = Field(1.0, gt=0, description="wall seconds between power samples")

    @field_validator("served_model", mode="before")
    @classmethod
    def _default_model(cls, v: object, info: ValidationInfo) -> Any:
        """No served_model: the id the target's server answers to (its checkpoint; the target is validated
        first), else "scripted"."""
        if v is not None:
            return v
        target = info.data.get("target")
        return target.served_model_id if target else "scripted"

    @model_validator(mode="after")
    def _complete(self) -> EmulatorConfig:
        if self.mode == "roofline" and self.target is None:
            raise ValueError(
                "mode 'roofline' needs a target; add target (a plan target as JSON) or use mode 'scripted'"
            )
        if self.power_csv and self.mode != "roofline":
            raise ValueError(
                "power_csv needs mode 'roofline' (the scripted engine models no GPU); "
                "drop power_csv or use mode 'roofline'"
            )
        return self

    @property
    def seed(self) -> int:
        return self.target.emulator.seed if self.target else 0

    @property
    def accuracy_error_rate(self) -> float:
        return self.target.emulator.accuracy_error_rate if self.target else 0.0

    @property
    def time_scale(self) -> float:
        """Applied to roofline delays only; scripted delays are taken literally."""
        return self.target.emulator.time_scale if (self.target and self.mode == "roofline") else 1.0

    def api_key(self) -> str | None:
        """The key from the environment, if auth is configured and the variable is set."""
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None

    def opens_stop(self, authorization: bytes | None) -> bool | None:
        return opens_stop(self.stop_key_env, authorization)


def config_from_dict(raw: object, source: str = "emulator config") -> EmulatorConfig:
    if not isinstance(raw, dict):
        raise EmulatorConfigError(f"{source}: expected a JSON object at the top level")
    try:
        return EmulatorConfig.model_validate(raw)
    except ValidationError as e:
        raise EmulatorConfigError(f"{source} is not a valid emulator config:\n{explain(e, root='(config)')}") from None


def load_config(path: str | os.PathLike[str]) -> EmulatorConfig:
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise EmulatorConfigError(f"--config: no file {str(p)!r}; give the path of an emulator config JSON") from None
    except json.JSONDecodeError as e:
        raise EmulatorConfigError(f"{p.name}: not valid JSON ({e})") from None
    return config_from_dict(raw, source=p.name)
