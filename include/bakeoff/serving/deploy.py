"""Deploy: turn a provisioned instance into a ready, described endpoint.

The server itself is started by the instance's boot script (cloud) or by the local provider
(emulator); this step waits until it serves the model and records what it is.
"""
from __future__ import annotations

from pathlib import Path

from bakeoff import store
from bakeoff.providers import Instance
from bakeoff.serving.endpoint import Endpoint
from bakeoff.serving.readiness import NotReady, wait_ready


def served_model(target) -> str:
    """The model id the server answers to (vLLM/SGLang default: the repository id)."""
    return target.model_spec.hf_id


def deploy(target, instance: Instance, *, api_key: str | None, out_dir: Path) -> Endpoint:
    timeout = float(target.provider_options.get("deploy_timeout_s", 60 if target.provider == "local" else 3600))
    try:
        info = wait_ready(instance.base_url, api_key, timeout)
    except NotReady as e:
        store.write_json(Path(out_dir) / "deploy.json", {"ready": False, "failure": "timeout", "detail": str(e)})
        raise
    endpoint = Endpoint(target=target.slug, base_url=instance.base_url, model=served_model(target),
                        stack=target.stack, emulated=target.provider == "local", provenance=info)
    store.write_json(Path(out_dir) / "deploy.json", {"ready": True, "failure": None})
    store.write_json(Path(out_dir) / "endpoint.json", endpoint.to_dict())
    return endpoint
