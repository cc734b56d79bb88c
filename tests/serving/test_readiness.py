"""Readiness (one probe, one serving check), failure classification from node output, deploy.json,
and the key kept out of records."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bakeoff.core.instance import Instance
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.serving import deploy as deploy_mod
from bakeoff.serving.readiness import ModelNotServed, NotReady, classify, mask, probe, wait_ready
from tests.plan_fixtures import without_deployment

KEY = "bk-" + "f" * 40

SAMPLES = {
    "image_pull": "bakeoff: image pull failed for vllm/vllm-openai:v9\nError response from daemon: manifest unknown",
    "oom": "INFO loading weights\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    "bakeoff: bakeoff-serve exited with code 1",
    "unsupported": "Traceback (most recent call last):\n"
    "ValueError: fp8 quantization is not supported on gfx942 with this kernel",
    "crash": "bakeoff-log: Fatal Python error: Segmentation fault\nbakeoff: bakeoff-serve exited with code 139",
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_classify_names_the_cause(kind):
    got, evidence = classify(SAMPLES[kind], "ConnectError")
    assert got == kind and evidence


def test_classify_falls_back_to_timeout_with_what_was_seen():
    kind, detail = classify("cloud-init finished\nbakeoff: boot", "/health answered 503")
    assert kind == "timeout" and "/health answered 503" in detail
    assert classify(None)[0] == "timeout"


def test_mask():
    assert mask(f"args: api_key='{KEY}'", KEY, None) == "args: api_key='<api-key>'"


class _Server:
    """A tiny OpenAI-ish server: health status and models are settable."""

    def __init__(self, health=200, models=("meta-llama/Llama-3.1-70B-Instruct",)):
        state = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                auth_ok = self.headers.get("Authorization") == f"Bearer {KEY}"
                if self.path == "/health":
                    code, body = state.health, {}
                elif not auth_ok:
                    code, body = 401, {"error": "unauthorized"}
                elif self.path == "/v1/models":
                    code, body = 200, {"data": [{"id": m} for m in state.models]}
                else:
                    code, body = 200, state.version
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.health, self.models = health, list(models)
        self.version = {"version": "test"}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


def test_wait_ready_needs_health_and_the_model(server):
    base = f"http://127.0.0.1:{server.port}"
    assert wait_ready(base, KEY, 2, poll_s=0.02)["models"]["data"]
    server.models = ["other/model", "my-llama"]
    t0 = time.monotonic()
    with pytest.raises(ModelNotServed, match="offers: 'other/model', 'my-llama'.*served_model") as e:
        wait_ready(base, KEY, 30, poll_s=0.02, model="meta-llama/Llama-3.1-70B-Instruct")
    assert time.monotonic() - t0 < 5 and e.value.offered == ["other/model", "my-llama"]  # not after the deadline
    server.health = 503
    with pytest.raises(NotReady, match="/health answered 503"):
        wait_ready(base, KEY, 0.3, poll_s=0.02)


def test_probe_looks_once(server):
    base = f"http://127.0.0.1:{server.port}"
    assert probe(base, KEY).ready["models"]["data"]
    server.health = 503
    seen = probe(base, KEY)
    assert seen.ready is None and seen.last == "/health answered 503"
    seen = probe("http://127.0.0.1:1", KEY)
    assert seen.ready is None and seen.last == "ConnectError"


def _target(timeout):
    t = load_plan("mi355x-vs-b200-sandbox").targets[1]
    return t.model_copy(
        update={"provider_options": t.provider_options.model_copy(update={"deploy_timeout_s": timeout})}
    )


def test_deploy_records_ready_with_provenance_and_rtt(server, tmp_path):
    inst = _node(server)
    ep = deploy_mod.check_serving(_target(5), inst, api_key=KEY, out_dir=tmp_path, waited_s=0)
    doc = json.loads((tmp_path / "deploy.json").read_text())
    assert doc["ready"] is True and doc["failure"] is None and doc["network"]["rtt_ms_p50"] is not None
    assert "--tensor-parallel-size" in doc["engine_args"] and ep.base_url.endswith(str(server.port))
    assert KEY not in (tmp_path / "deploy.json").read_text() + (tmp_path / "endpoint.json").read_text()


def test_a_certain_failure_in_the_log_fails_at_once_classified_and_masked(server, tmp_path, caplog):
    server.health = 503
    log = tmp_path / "node.log"
    log.write_text(f"vllm args: {{'api_key': '{KEY}'}}\ntorch.OutOfMemoryError: HIP out of memory (key {KEY})\n")
    inst = _node(server, log)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(deploy_mod.DeployFailed) as e:  # long before its deadline: waiting cannot help
        deploy_mod.check_serving(_target(3600), inst, api_key=KEY, out_dir=tmp_path / "t", waited_s=1)
    doc = json.loads((tmp_path / "t" / "deploy.json").read_text())
    assert doc["ready"] is False and doc["failure"] == "oom" and "<api-key>" in doc["detail"]
    assert e.value.failure == "oom"
    assert (
        KEY not in (tmp_path / "t" / "deploy.json").read_text() and KEY not in str(e.value) and KEY not in caplog.text
    )


def _static(**fields):
    raw = load_plan("local-demo").model_dump(mode="json")
    t = without_deployment(raw["targets"][0])
    for k in ("instance_type", "emulator"):
        t.pop(k)
    t.update(
        provider="static",
        provider_options={"base_url": "http://127.0.0.1:1"},
        hardware={"gpu": "RTX 6000 Ada", "gpus": 8},
        price={"usd_per_hour": 9.0},
        **fields,
    )
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


def _static_instance(port):
    return Instance(
        provider="static",
        id="static:x",
        target="x",
        run_id="r",
        state="running",
        host="127.0.0.1",
        port=port,
        url=f"http://127.0.0.1:{port}",
    )


def test_static_endpoint_answers_to_its_served_model_and_claims_nothing_else(server, tmp_path):
    """A server started with --served-model-name: requests name its id; deploy.json records what the
    server says about itself (engine from /version, the ids it offers), never an image or engine args."""
    server.models = ["my-llama"]
    server.version = {"version": "0.32.0", "name": "vllm"}
    t = _static(served_model="my-llama", stack="sglang")
    ep = deploy_mod.check_serving(t, _static_instance(server.port), api_key=KEY, out_dir=tmp_path, waited_s=0)
    doc = json.loads((tmp_path / "deploy.json").read_text())
    assert ep.model == "my-llama" and doc["ready"] is True
    assert not {"image", "engine_args", "env"} & set(doc) and not {"image", "engine_args", "env"} & set(
        ep.provenance.to_json()
    )
    assert doc["served_by"] == {"stack": "vllm", "engine_version": "0.32.0", "identified_from": "/version"}
    assert doc["models_offered"] == ["my-llama"] and doc["deployed_by"].startswith("not bakeoff")
    assert doc["stack"] == ep.provenance.stack == "vllm" and doc["stack_in_plan"] == "sglang"  # the server says
    assert KEY not in (tmp_path / "deploy.json").read_text() + (tmp_path / "endpoint.json").read_text()


def test_static_endpoint_without_served_model_fails_at_once_naming_the_ids(server, tmp_path):
    server.models = ["my-llama"]
    t = _static()
    assert deploy_mod.deploy_timeout(t) == deploy_mod.STATIC_DEPLOY_TIMEOUT_S <= 120
    t0 = time.monotonic()
    with pytest.raises(deploy_mod.DeployFailed, match="'my-llama'.*served_model") as e:
        deploy_mod.check_serving(t, _static_instance(server.port), api_key=KEY, out_dir=tmp_path, waited_s=0)
    assert time.monotonic() - t0 < 5 and e.value.failure == "model_not_served"
    doc = json.loads((tmp_path / "deploy.json").read_text())
    assert doc["failure"] == "model_not_served" and doc["models_offered"] == ["my-llama"] and "image" not in doc


def _node(server, log=None) -> Instance:
    """A cloud node served by the test server; its console log is the file ``log``, when given."""
    return Instance(
        provider="aws",
        id="us-east-1/i-0abc",
        target="b200-vllm",
        run_id="r",
        state="running",
        host="127.0.0.1",
        port=server.port,
        log=str(log) if log else None,
    )


def test_check_serving_waits_until_its_deadline_then_records_the_failure(server, tmp_path):
    """Not ready and nothing certain in the node's output: None (a sensor pokes again) until the
    target's deploy timeout, then the failure is classified and recorded as before the split. A
    "not supported" line alone is believed only then (engines log benign ones while they start)."""
    server.health = 503
    log = tmp_path / "node.log"
    log.write_text("INFO loading weights\nWARNING fp8 kv-cache is not supported by this kernel, falling back\n")
    out = tmp_path / "t"
    assert deploy_mod.check_serving(_target(60), _node(server, log), api_key=KEY, out_dir=out, waited_s=59) is None
    assert not (out / "deploy.json").exists()
    with pytest.raises(deploy_mod.DeployFailed) as e:
        deploy_mod.check_serving(_target(60), _node(server, log), api_key=KEY, out_dir=out, waited_s=60)
    doc = json.loads((out / "deploy.json").read_text())
    assert e.value.failure == doc["failure"] == "unsupported" and doc["ready"] is False
    log.write_text("INFO loading weights\n")
    with pytest.raises(deploy_mod.DeployFailed) as e:
        deploy_mod.check_serving(_target(60), _node(server, log), api_key=KEY, out_dir=out, waited_s=61)
    doc = json.loads((out / "deploy.json").read_text())
    assert doc["failure"] == "timeout" and "/health answered 503" in doc["detail"]
    server.health = 200  # ready: the endpoint, even past the deadline's look
    ep = deploy_mod.check_serving(_target(60), _node(server, log), api_key=KEY, out_dir=out, waited_s=1)
    assert ep is not None and json.loads((out / "deploy.json").read_text())["ready"] is True
