"""Deploy: hand a provisioned node what its serving stack needs, then check until it serves the model.

The server itself is started by the instance's boot script (cloud; see userdata.py) or by the
local provider (emulator). ``start_serving`` is the action: when the target has serving secrets
(HF_TOKEN, registry tokens) they are pushed to the node agent over the node's pinned TLS channel
(its boot script waits for them before it pulls and starts the server, so they never sit in the
user-data). ``check_serving`` is one look, so a sensor frees its worker between looks: the endpoint
once the server serves the model, None while it comes up, and ``DeployFailed`` once waiting cannot
help (the model is not served, the node's output shows a failure, or the deadline passed).

Every outcome is recorded in ``deploy.json`` -- ``{"ready", "failure", "detail", "weights"}`` with
failure one of readiness.FAILURES (node_image, image_pull, weights_download, weights_incomplete, oom, ...) -- which
the software-support matrix reads. ``weights`` says where the checkpoint came from and how long it took:
download (the boot script's weights step, read back from the node's console line) and load (engine
container start to the first ready probe, so at most one poke late); both are excluded from
benchmark time and included in the evaluation's cost. The API key and secrets are masked out
of every detail before it is stored. A static endpoint was started by someone else: its record
holds only what it says about itself (engine, version, the model ids it offers). A cloud node is spoken
to over https pinned to its own certificate (``Instance.tls_cert``, see tls.py).
"""

from __future__ import annotations

import logging
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bakeoff import engines, store
from bakeoff.core.endpoint import Endpoint, Provenance
from bakeoff.core.instance import Instance
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers import get_provider
from bakeoff.providers.credentials import credentials_from_env
from bakeoff.serving import userdata
from bakeoff.serving.agent_client import AgentClient, AgentError
from bakeoff.serving.power import provenance_from_console
from bakeoff.serving.provenance import identify_engine, snapshot_provenance
from bakeoff.serving.readiness import ModelNotServed, NotReady, classify, mask, probe

if TYPE_CHECKING:
    from bakeoff.plan.target import Target

log = logging.getLogger(__name__)
LOCAL_PROVIDERS = tuple(n for n, p in PROVIDERS.items() if p.emulated)
# A static endpoint is already up: when it does not answer within this, waiting longer will not help.
STATIC_DEPLOY_TIMEOUT_S = 120.0
# The node agent starts seconds into boot, before the engine: an engine ready this soon after launch (an
# emulator) may beat it, so readiness waits this long for the agent; later, a silent agent is broken, and
# the endpoint is described without the node's facts rather than held until the deploy deadline.
AGENT_GRACE_S = 120.0
# Failures the node's output makes certain while the server comes up: waiting on cannot help. An
# "unsupported" line alone is believed only at the deadline (engines log benign "not supported"
# warnings while they start); a fatal one ends in a traceback, which is a crash.
CERTAIN_FAILURES = ("node_image", "image_pull", "weights_download", "weights_incomplete", "oom", "crash")
Credentials = Callable[[str], dict[str, Any]]


class DeployFailed(NotReady):
    """The serving stack did not come up; ``failure`` says how (see deploy.json)."""

    def __init__(self, message: str, failure: str, detail: str) -> None:
        super().__init__(message, detail)
        self.failure, self.detail = failure, detail


def served_model(target: Target) -> str:
    """The model id the server answers to: a static endpoint's ``served_model``, else the catalog
    model's repository id (vLLM's and SGLang's default)."""
    return target.served_model_id


def base_url(instance: Instance) -> str:
    return instance.url or instance.base_url


def deploy_timeout(target: Target) -> float:
    t = target.provider_options.get("deploy_timeout_s")
    if t:
        return float(t)
    if PROVIDERS[target.provider].existing_endpoint:
        return STATIC_DEPLOY_TIMEOUT_S
    if target.provider in LOCAL_PROVIDERS:
        return 60.0
    # a cloud node's boot fetches the weights (bounded by weights.download_timeout_s, after which it stops
    # as weights_download); an hour on top for the image pull and the engine's load
    return target.weights.download_timeout_s + 3600.0


def push_secrets(
    target: Target, instance: Instance, api_key: str | None, secrets: dict[str, str], timeout_s: float = 900.0
) -> list[str]:
    """Hand the serving secrets to the node agent over the pinned channel; the names pushed."""
    if not instance.agent_url:
        raise DeployFailed(
            f"{target.name}: serving secrets ({', '.join(sorted(secrets))}) need the node agent to "
            "receive them, and none is reachable; stage the client bundle (Variable "
            "bakeoff_client_bucket) or drop the secrets",
            "crash",
            "no node agent for the serving secrets",
        )
    try:
        with AgentClient(instance.agent_url, api_key, timeout_s=30.0, tls_cert=instance.tls_cert) as agent:
            agent.wait_healthy(timeout_s)
            return [str(name) for name in agent.put_secrets(secrets).get("names", [])]
    except AgentError as e:
        detail = mask(str(e), api_key, *secrets.values())
        raise DeployFailed(
            f"{target.name}: could not hand the serving secrets to the node: {detail}", "crash", detail
        ) from None


def start_serving(
    target: Target,
    instance: Instance,
    *,
    api_key: str | None,
    out_dir: str | store.StorePath,
    secrets: dict[str, str] | None = None,
) -> list[str]:
    """The deploy action: push the target's serving secrets to the node agent (nothing else to do
    when it has none); the names pushed. Safe to repeat: the agent keeps the last secrets it got."""
    if not secrets:
        return []
    try:
        pushed = push_secrets(target, instance, api_key, secrets)
    except DeployFailed as e:
        _record_failure(out_dir, target, e.failure, e.detail)
        raise
    log.info("deploy: %s: handed %d serving secret(s) to the node: %s", target.name, len(pushed), ", ".join(pushed))
    return pushed


def check_serving(
    target: Target,
    instance: Instance,
    *,
    api_key: str | None,
    out_dir: str | store.StorePath,
    waited_s: float,
    credentials: Credentials | None = None,
    masked: tuple[str, ...] = (),
    provenance: dict[str, Any] | None = None,
) -> Endpoint | None:
    """One look at the server, ``waited_s`` after the wait began: the described endpoint once it
    serves the model, None while it comes up. DeployFailed (deploy.json written) at once when it
    serves other models or the node's output shows a certain failure, and after
    ``deploy_timeout(target)`` with the failure classified from that output. ``masked``: secret
    values never to store; ``credentials``: the provider's, to read a node's console; ``provenance``:
    more facts for deploy.json and the endpoint's provenance (a cluster's roles)."""
    url = base_url(instance)
    tls_cert = instance.tls_cert
    try:
        routes = engines.routes(target)
        seen = probe(
            url,
            api_key,
            model=served_model(target),
            tls_cert=tls_cert,
            health=routes.health,
            models_route=routes.readiness,
        )
    except ModelNotServed as e:
        detail = mask(str(e), api_key, *masked)
        _record_failure(out_dir, target, "model_not_served", detail, models_offered=e.offered)
        log.error("deploy: %s: %s", target.name, detail)
        raise DeployFailed(f"{target.name}: {detail}", "model_not_served", detail) from None
    if seen.ready is not None:
        return _describe(
            target,
            instance,
            seen.ready,
            api_key=api_key,
            out_dir=out_dir,
            credentials=credentials,
            extra=provenance or {},
        )
    timed_out = waited_s >= deploy_timeout(target)
    output = node_output(instance, api_key, credentials)
    failure, detail = classify(output, seen.last)
    if not timed_out and failure not in CERTAIN_FAILURES:
        return None
    detail = mask(detail, api_key, *masked)
    _record_failure(out_dir, target, failure, detail, weights=weights_facts(target, instance, output, None))
    log.error("deploy: %s on %s failed (%s): %s", target.stack, target.name, failure, detail)
    raise DeployFailed(f"{target.name}: {target.stack} did not become ready ({failure}): {detail}", failure, detail)


def _record_failure(out_dir: str | store.StorePath, target: Target, failure: str, detail: str, **more: Any) -> None:
    store.write_json(
        store.at(out_dir) / "deploy.json",
        {"ready": False, "failure": failure, "detail": detail, **more, **stack_facts(target)},
    )


def _describe(
    target: Target,
    instance: Instance,
    info: dict[str, Any],
    *,
    api_key: str | None,
    out_dir: str | store.StorePath,
    credentials: Credentials | None,
    extra: dict[str, Any],
) -> Endpoint | None:
    """The ready server as an endpoint, with its provenance (and ``extra`` facts); deploy.json and
    endpoint.json written. None while the node's agent, which hands back the node's facts, is not
    answering yet."""
    url = base_url(instance)
    stack = stack_facts(target)
    # whatever the provider, a server that says it is the emulator makes every figure EMULATED
    emulated = (
        target.provider in LOCAL_PROVIDERS or instance.emulated or bool((info.get("version") or {}).get("emulated"))
    )
    network = measure_rtt(url) if target.provider not in LOCAL_PROVIDERS else {}
    if PROVIDERS[target.provider].existing_endpoint:
        stack = {**stack, **_served_by(url, api_key, info)}
    node: dict[str, Any] = {}
    output = None
    ready_at = time.time()
    if PROVIDERS[target.provider].provisions:
        output = node_output(instance, api_key, credentials)
        booted_s = time.time() - (instance.launched_at or 0.0)
        if output is None and instance.agent_url and booted_s < AGENT_GRACE_S:
            log.info("deploy: %s serves, but its node agent does not answer yet; looking again", target.name)
            return None  # the agent hands back the weights facts and runs a co-located benchmark
        node = provenance_from_console(output, target.gpu.vendor)
    weights = weights_facts(target, instance, output, ready_at)
    endpoint = Endpoint(
        target=target.slug,
        base_url=url,
        model=served_model(target),
        stack=target.stack,
        emulated=emulated,
        provenance=Provenance.model_validate({**info, **stack, "network": network, "node": node, **extra}),
        agent_url=instance.agent_url,
        tls_cert=instance.tls_cert,
        power_csv=instance.power_csv,
    )
    store.write_json(
        store.at(out_dir) / "deploy.json",
        {
            "ready": True,
            "failure": None,
            "detail": "",
            **stack,
            "network": network,
            "node": node,
            "weights": weights,
            **extra,
        },
    )
    store.write_json(store.at(out_dir) / "endpoint.json", endpoint.to_dict())
    return endpoint


def weights_facts(
    target: Target, instance: Instance, output: str | None, ready_at: float | None
) -> dict[str, Any] | None:
    """Where the checkpoint came from and how long it took: ``{checkpoint, source, bytes, download_s,
    load_s, ok, failure, missing}``. A cloud node's boot script reports its weights step on the console
    (userdata.WEIGHTS_MARK); load_s runs from its engine container start to ``ready_at``. An emulator
    downloads nothing: load_s runs from its process start. None for a static endpoint (not deployed here)."""
    launched = instance.launched_at
    if target.provider in LOCAL_PROVIDERS:
        return {
            "checkpoint": target.checkpoint_id,
            "source": "none (emulator)",
            "bytes": 0,
            "download_s": 0.0,
            "load_s": round(ready_at - launched, 3) if ready_at and launched else None,
            "ok": True,
            "failure": None,
            "missing": [],
        }
    if not PROVIDERS[target.provider].provisions:
        return None

    seen = userdata.weights_from_output(output)
    if seen is None:
        return {"checkpoint": target.checkpoint_id, "source": "unknown (no weights line from the node)"}
    engine = seen.get("engine_started")
    return {
        "checkpoint": seen.get("checkpoint") or target.checkpoint_id,
        "source": seen.get("source"),
        "bytes": seen.get("bytes"),
        "files": seen.get("files"),
        "download_s": seen.get("download_s"),
        "mirror_push_s": seen.get("mirror_push_s"),
        "load_s": round(max(0.0, ready_at - float(engine)), 3) if ready_at and engine else None,
        "ok": seen.get("ok"),
        "failure": seen.get("failure"),
        "missing": seen.get("missing") or [],
    }


def stack_facts(target: Target) -> dict[str, Any]:
    """What was asked of the server (image, engine arguments; never the key), for provenance. A
    static endpoint's server was started by someone else: nothing is claimed about it here."""
    if PROVIDERS[target.provider].existing_endpoint:
        return {
            "stack_in_plan": target.stack,
            "client_mode": target.client_mode,
            "deployed_by": "not bakeoff (static endpoint)",
            "served_model": target.served_model_id,
        }
    custom = engines.custom_facts(target)  # a custom stack's declaration: image, template, routes
    if target.provider in LOCAL_PROVIDERS or target.stack not in engines.ENGINES:
        local = {"engine_args": engines.command(target, 0, "127.0.0.1")} if custom else {}
        return {"stack": target.stack, **custom, **local, "client_mode": target.client_mode}

    return {
        "stack": target.stack,
        **custom,
        "image": userdata.image_for(target),
        "entrypoint": engines.boot(target).entrypoint,
        "engine_args": engines.command(target, target.stack_spec.port),
        "env": engines.environment(target),
        "extra_files": engines.extra_files(target),
        "client_mode": target.client_mode,
    }


def _served_by(url: str, api_key: str | None, info: dict[str, Any]) -> dict[str, Any]:
    """What a static endpoint says about itself, and only that: the engine and version identified
    from /version, /v1/models and /metrics, and the model ids it offers."""

    try:
        snap = snapshot_provenance(url, api_key)
    except Exception as e:  # noqa: BLE001 - provenance must never fail a ready endpoint
        log.warning("deploy: %s gave no provenance snapshot (%s)", url, type(e).__name__)
        snap = {"version": {"json": info.get("version")}, "models": {"json": info.get("models")}}
    ids = [m.get("id") for m in ((snap.get("models") or {}).get("json") or {}).get("data", []) if isinstance(m, dict)]
    served_by = identify_engine(snap)
    return {"stack": served_by["stack"], "served_by": served_by, "models_offered": ids}


def node_output(instance: Instance, api_key: str | None = None, credentials: Credentials | None = None) -> str | None:
    """The node's logs from its agent (any cloud), else its console (EC2) or emulator log (local),
    for failure classification and provenance."""
    path = instance.log
    if path and Path(path).is_file():
        return Path(path).read_text(errors="replace")[-20000:]
    if not PROVIDERS[instance.provider].provisions:
        return None
    agent_url = instance.agent_url
    if agent_url:
        try:
            with AgentClient(agent_url, api_key, timeout_s=10.0, tls_cert=instance.tls_cert) as agent:
                return agent.logs()
        except AgentError as e:
            log.warning("deploy: node agent of %s gave no logs (%s); trying the console", instance.id, e)
    if not PROVIDERS[instance.provider].console_output:  # Vultr and DigitalOcean expose no console log
        return None
    try:
        resolve = credentials or credentials_from_env  # the DAG passes its connection resolver
        provider = get_provider(instance.provider, credentials=resolve(instance.provider))
        fetch = getattr(provider, "console_output", None)  # declared by the registry entry checked above
        return fetch(instance.id) if fetch else None
    except Exception as e:  # noqa: BLE001 - triage must not hide the real failure
        log.warning("deploy: could not read %s console of %s: %s", instance.provider, instance.id, type(e).__name__)
        return None


def measure_rtt(url: str, samples: int = 5) -> dict[str, Any]:
    """TCP connect round trip from the Airflow worker to the server: what a remote client's TTFT
    includes (recorded next to the results; a co-located client does not pay it)."""

    u = httpx.URL(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        try:
            with socket.create_connection((u.host, port), timeout=3.0):
                times.append((time.perf_counter() - t0) * 1000)
        except OSError:
            continue
    return {
        "rtt_ms_p50": round(statistics.median(times), 3) if times else None,
        "rtt_ms_max": round(max(times), 3) if times else None,
        "samples": len(times),
    }
