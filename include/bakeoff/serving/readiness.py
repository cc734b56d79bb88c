"""Readiness: a server is ready when /health answers 200 and /v1/models lists the model (a custom stack:
the routes it declares, engines.routes).

A server whose /v1/models lists other ids fails at once (``ModelNotServed``) with the ids it offers:
vLLM and SGLang list models only once the engine is up, and the list never changes afterwards.

``probe`` looks once (a sensor's poke); ``wait_ready`` loops over it. Checking both (as vLLM's and
SGLang's own launch scripts do) catches a server whose HTTP front end is up while the engine is
still loading weights. When the deadline passes, ``classify`` reads the
node's console / log text and says how the deployment failed, for the software-support matrix.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bakeoff.core.pinning import client_context
from bakeoff.serving import egress

FAILURES = (
    "node_image",
    "image_pull",
    "weights_download",
    "weights_incomplete",
    "oom",
    "unsupported",
    "timeout",
    "crash",
    "model_not_served",
)

# Checked in order: the most specific cause first (an OOM also ends in a crash and a traceback).
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    # the boot script found the node image without what it cannot install (serving/userdata.py)
    ("node_image", re.compile(r"bakeoff: node image .* has no ")),
    # the boot script's weights step names its own failure; an engine that finds files missing from the
    # offline cache (or is refused by the hub) says so in its own words
    (
        "weights_incomplete",
        re.compile(r"bakeoff: weights_incomplete|LocalEntryNotFoundError|Cannot find the requested files", re.I),
    ),
    (
        "weights_download",
        re.compile(
            r"bakeoff: weights_download|GatedRepoError|Cannot access gated repo|"
            r"40[13] Client Error.*huggingface\.co",
            re.I,
        ),
    ),
    (
        "image_pull",
        re.compile(
            r"image pull failed|pull access denied|manifest unknown|manifest for .* not found|"
            r"toomanyrequests|repository does not exist|Error response from daemon: .*(not found|pull)|"
            r"no matching manifest|ErrImagePull|ImagePullBackOff",
            re.I,
        ),
    ),
    (
        "oom",
        re.compile(
            r"out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory|"
            r"hipErrorOutOfMemory|oom-kill|Killed process \d+|exited with code 137|"
            r"No available memory for the cache blocks|Not enough memory|insufficient memory|"
            r"needs \d+ GB of weights but|"
            # the emulator in the plan's own words (plan.fits)
            r"GB of weights.* over the \d+ GB the engine takes|"
            # TensorRT-LLM and ATOM (HIP) in their own words
            r"cudaErrorMemoryAllocation|Failed to allocate (device )?memory|"
            r"free_gpu_memory_fraction .*(too|negative)|hipErrorMemoryAllocation",
            re.I,
        ),
    ),
    (
        "unsupported",
        re.compile(
            r"not supported|unsupported|NotImplementedError|no kernel image is available|"
            r"hipErrorNoBinaryForGpu|invalid device function|Unknown quantization|"
            r"quantization method .* is not|is not a valid QuantizationMethods|"
            r"does not support|requires compute capability|invalid choice|"
            # an engine refusing a flag, a speculative method, a quantization or the chip (TRT-LLM, ATOM)
            r"unrecognized arguments|No such option|Unknown decoding_type|Unrecognized decoding_type|"
            r"Unknown quant_algo|Unsupported quant|unsupported (arch|architecture|gpu|sm)|"
            r"sm_?\d+ is not supported|gfx\d+\w* (is )?not supported",
            re.I,
        ),
    ),
    (
        "crash",
        re.compile(
            r"exited with code [1-9]|Traceback \(most recent call last\)|Segmentation fault|"
            r"core dumped|RuntimeError|Engine core initialization failed|EngineDeadError|"
            r"emulator .* exited before it was ready|error: |"
            r"\[TensorRT-LLM\]\[ERROR\]|CUDA error: |HIP error: |NCCL error|RCCL error|MPI_ABORT|"
            r"Executor worker .* died|worker died",
            re.I,
        ),
    ),
]


class NotReady(RuntimeError):
    """The server did not become ready before the deadline; the message says what was last seen."""

    def __init__(self, message: str, last: str = ""):
        super().__init__(message)
        self.last = last


class ModelNotServed(NotReady):
    """The server is up and lists its models, and the one asked for is not among them. Its list
    does not change while it runs, so waiting on is pointless: fail at once, naming what it offers."""

    def __init__(self, base_url: str, model: str, offered: list[str]):
        self.offered = offered
        super().__init__(
            f"{base_url} is up but does not serve {model!r}; /v1/models offers: {', '.join(map(repr, offered))}. "
            "If the server was started with --served-model-name, set the target's served_model to the id "
            "it offers",
            f"/v1/models answered 200 without {model}",
        )


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True)
class Probe:
    """One readiness look at a server: ``ready`` is what it says about itself (models, version) once it
    serves the model, else None with ``last`` saying what was seen."""

    ready: dict[str, Any] | None
    last: str


def probe(
    base_url: str,
    api_key: str | None,
    model: str | None = None,
    tls_cert: str | None = None,
    *,
    health: str = "/health",
    models_route: str = "/v1/models",
) -> Probe:
    """One look: /health, then /v1/models (a custom stack's declared routes: ``health``, ``models_route``).
    ModelNotServed at once when it lists other models.

    With ``tls_cert`` (a cloud node's own certificate) only that server is spoken to: a server with
    any other certificate fails the handshake, so the key is never sent to it (``last`` says so)."""

    verify = client_context(base_url, tls_cert)
    try:
        with egress.client(base_url=base_url, headers=_headers(api_key), timeout=5.0, verify=verify) as client:
            alive = client.get(health)
            if alive.status_code != 200:
                return Probe(None, f"{health} answered {alive.status_code}")
            models = client.get(models_route)
            ids = [m.get("id") for m in models.json().get("data", [])] if models.status_code == 200 else []
            if ids and (model is None or model in ids):
                return Probe({"models": models.json(), "version": _optional_json(client, "/version")}, "ready")
            if ids:
                raise ModelNotServed(base_url, str(model), [str(i) for i in ids])
            return Probe(None, f"{models_route} answered {models.status_code}")
    except egress.EgressRefused as e:
        return Probe(None, str(e))
    except (httpx.HTTPError, ValueError) as e:
        return Probe(
            None,
            type(e).__name__
            + (
                " (TLS: the server did not present the node's pinned certificate)"
                if "CERTIFICATE_VERIFY_FAILED" in str(e)
                else ""
            ),
        )


def wait_ready(
    base_url: str,
    api_key: str | None,
    timeout_s: float,
    poll_s: float = 0.25,
    model: str | None = None,
    tls_cert: str | None = None,
    *,
    health: str = "/health",
    models_route: str = "/v1/models",
) -> dict[str, Any]:
    """Probe until ready (for callers without a scheduler); what the server says about itself.
    NotReady at the deadline, with the last thing seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = probe(base_url, api_key, model, tls_cert, health=health, models_route=models_route)
        if seen.ready is not None:
            return seen.ready
        if time.monotonic() >= deadline:
            raise NotReady(f"{base_url} not ready after {timeout_s:.0f}s (last: {seen.last})", seen.last)
        time.sleep(poll_s)


def _optional_json(client: httpx.Client, path: str) -> Any:
    try:
        r = client.get(path)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def classify(console: str | None, last_seen: str = "") -> tuple[str, str]:
    """(failure kind, the evidence line) from console/log text; ``timeout`` when nothing explains it."""
    text = console or ""
    for kind, pat in _PATTERNS:
        m = pat.search(text)
        if m:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            return kind, text[start : end if end >= 0 else len(text)].strip()[:500]
    return (
        "timeout",
        f"no failure in the node's output; the server never became ready (last: {last_seen or 'no answer'})",
    )


def mask(text: str, *secrets: str | None) -> str:
    """Blank every secret out of text that is about to be stored or logged."""
    for s in secrets:
        if s:
            text = text.replace(s, "<api-key>")
    return text
