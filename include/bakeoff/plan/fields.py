"""What every plan model shares: strict parsing and the field patterns more than one model checks."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown fields are typos; inf and nan are never a plan's intent (and would slip past every
    bound and the budget guard)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# a Hugging Face repo id: <owner>/<name>
HF_REPO_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$"
