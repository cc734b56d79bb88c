"""Serving secrets reach only code the installation trusts (second review, N1).

Each test is an attempt that worked before: a target naming any image with ``secrets: {HF_TOKEN: ...}``
was accepted, the boot script ran that image for the weights download with the secrets file, the
serving container got the file too, and TensorRT-LLM always ran the checkpoint's own Python
(``--trust_remote_code``) for a checkpoint the plan chose.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from bakeoff import catalog, engines, installation, secrets
from bakeoff.plan import PlanError, load_plan, plan_from_dict, recipes
from bakeoff.run import pipeline
from bakeoff.serving import hub_fetch, tls, userdata

ATTACKER = "docker.io/attacker/anything:latest"
PINNED = "vllm/vllm-openai:v0.25.0@sha256:" + "5e" * 32
TOKEN = "hf_" + "TrUsT" * 6  # made up: it must reach the hub and nothing else
KEY = "bk-" + "0123456789abcdef" * 2 + "01234567"


@pytest.fixture(autouse=True)
def no_trust(monkeypatch):
    monkeypatch.delenv(installation.TRUSTED_IMAGES_ENV, raising=False)
    monkeypatch.setattr(secrets, "_resolve_connection", secrets.env_connection)


def _raw(**target) -> dict:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t["provider_options"]["client_mode"] = "remote"
    t.update(target)
    raw.update(name="trust", targets=[t])
    return raw


def _start(raw: dict, tmp_path: Path, run_id: str, **settings):
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return pipeline.start_run(str(path), run_id, **settings)


# --- which images may receive secrets ----------------------------------------------------------------


def test_an_attacker_image_asking_for_the_hub_token_is_refused_before_anything_is_recorded(data_root, tmp_path):
    raw = _raw(image=ATTACKER, secrets={"HF_TOKEN": "huggingface_default"})
    with pytest.raises(PlanError, match=r"targets\[0\]\.image: .*attacker.*floating tag.*bakeoff_trusted_images"):
        _start(raw, tmp_path, "manual__attack")
    assert not list(data_root.rglob("start.json"))


def test_the_stacks_own_tag_gets_no_secrets_either(data_root, tmp_path):
    """The catalog's images are tags too: a tag can be re-pushed with other code."""
    with pytest.raises(PlanError, match=r"targets\[0\]\.image: .*vllm-openai:v0\.25\.0.*floating"):
        _start(_raw(secrets={"HF_TOKEN": "huggingface_default"}), tmp_path, "manual__tag")


def test_a_digest_the_installation_does_not_trust_is_refused_and_a_trusted_one_runs(data_root, tmp_path, monkeypatch):
    raw = _raw(image=PINNED, secrets={"HF_TOKEN": "huggingface_default"})
    with pytest.raises(PlanError, match=r"targets\[0\]\.image: .* not one of the images the installation trusts"):
        _start(raw, tmp_path, "manual__untrusted")
    run = _start(raw, tmp_path, "manual__trusted", trusted_images=json.dumps([PINNED]))  # the Variable's value
    assert run["targets"] and Path(run["run_dir"], "plan.json").is_file()
    monkeypatch.setenv(installation.TRUSTED_IMAGES_ENV, PINNED)  # without Airflow: the environment
    assert _start(raw, tmp_path, "manual__trusted-env")["targets"]


def test_a_target_without_secrets_may_run_any_image(data_root, tmp_path):
    assert _start(_raw(image=ATTACKER), tmp_path, "manual__no-secrets")["targets"]


@pytest.mark.parametrize("value", ["vllm/vllm-openai:v0.25.0", '["x@sha256:short"]', "{}", "[1, 2]"])
def test_the_trusted_images_variable_takes_only_digest_pinned_images(value):
    with pytest.raises(PlanError, match="bakeoff_trusted_images: "):
        installation.trusted_images(value)


def test_every_vendored_recipe_image_is_marked_and_floating_ones_get_no_secrets(data_root, tmp_path):
    every = recipes.recipes().values()
    nightly = [r for r in every if "nightly" in r.image]
    assert nightly and all(r.floating for r in nightly)
    assert all(r.floating == ("@sha256:" not in r.image) for r in every)
    r = next(r for r in every if r.engine == "vllm" and r.gpu == "b200")
    raw = _raw(recipe=r.name, instance_type=None, secrets={"HF_TOKEN": "huggingface_default"})
    raw["targets"][0].pop("instance_type")
    for field in ("stack", "model", "quantization", "checkpoint", "image", "tensor_parallel", "speculative"):
        raw["targets"][0].pop(field, None)
    with pytest.raises(PlanError, match=r"targets\[0\]\.image: .*floating"):
        _start(raw, tmp_path, "manual__recipe")


# --- where the token goes on the node ---------------------------------------------------------------


def _script(t) -> str:
    ident = tls.node_identity("run-trust", "node")
    spec = {
        "api_key": KEY,
        "shutdown_after_s": 3600,
        "expires_at": time.time() + 3600,
        "tls": {"cert": ident.cert_pem, "key": ident.key_pem},
        "agent": {"url": "https://bucket.example/client.zip", "sha256": "a" * 64, "requirements": []},
        "secrets": {"HF_TOKEN": TOKEN},
    }
    return userdata.render_for(t, spec)


def test_the_download_runs_bakeoffs_checked_downloader_in_the_agent_image_and_serving_gets_no_secrets():
    t = plan_from_dict(_raw(image=ATTACKER, secrets={"HF_TOKEN": "huggingface_default"})).targets[0]
    script = _script(t)
    assert TOKEN not in script
    runs = [shlex.split(line.strip()) for line in script.splitlines() if "docker run" in line and "$w_e" in line]
    assert len(runs) == 1 and catalog.agent_image() in runs[0] and ATTACKER not in runs[0]
    assert f"python {hub_fetch.SCRIPT}" in script and f'<<< "{hub_fetch.SHA256}  {hub_fetch.SCRIPT}"' in script
    serve = shlex.split(next(line for line in script.splitlines() if line.startswith("docker run ")))
    assert ATTACKER in serve and userdata.SECRETS_ENV not in serve and "HF_HUB_OFFLINE=1" in serve
    assert userdata.SECRETS_ENV not in " ".join(userdata.docker_argv(t, 8000, tls=True))


class _FakeHub(http.server.BaseHTTPRequestHandler):
    """The hub's two routes the downloader uses; every file redirects to a 'CDN' path, as the hub does."""

    rev = "c" * 40
    files: list[str] = ["config.json", "tokenizer.json", "sub/model.safetensors"]
    seen: list[tuple[str, str | None]] = []

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/api/models/org/model/revision/main":
            body = json.dumps({"sha": self.rev, "siblings": [{"rfilename": f} for f in self.files]}).encode()
        elif self.path.startswith(f"/org/model/resolve/{self.rev}/"):
            self.send_response(302)
            self.send_header("Location", "/cdn/" + self.path.rsplit("/", 1)[1])
            self.end_headers()
            return
        elif self.path.startswith("/cdn/"):
            body = b"bytes of " + self.path.encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FakeHub.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _download(hub: str, cache: Path, token: str | None) -> subprocess.CompletedProcess:
    program = hub_fetch.program().replace("https://huggingface.co", hub)  # the one line a test must move
    env = {"PATH": os.environ["PATH"], **({"HF_TOKEN": token} if token else {})}
    return subprocess.run(
        [sys.executable, "-c", program, "org/model", str(cache)], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_downloader_fills_the_hub_cache_and_sends_the_token_to_the_hub_only(fake_hub, tmp_path):
    out = _download(fake_hub, tmp_path, TOKEN)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "models--org--model"
    assert (d / "refs" / "main").read_text() == _FakeHub.rev
    snap = d / "snapshots" / _FakeHub.rev
    assert (snap / "sub" / "model.safetensors").read_bytes() == b"bytes of /cdn/model.safetensors"
    hub_calls = [auth for path, auth in _FakeHub.seen if not path.startswith("/cdn/")]
    cdn_calls = [auth for path, auth in _FakeHub.seen if path.startswith("/cdn/")]
    assert hub_calls and all(a == f"Bearer {TOKEN}" for a in hub_calls)
    assert len(cdn_calls) == 3 and not any(cdn_calls)  # the redirect target never sees the token


def test_a_hub_answer_naming_a_file_outside_the_snapshot_is_refused(fake_hub, tmp_path, monkeypatch):
    monkeypatch.setattr(_FakeHub, "files", ["../../../../escaped.txt"])
    out = _download(fake_hub, tmp_path / "cache", None)
    assert out.returncode != 0 and "refused file name" in out.stderr
    assert not list(tmp_path.rglob("escaped.txt"))


# --- code from the checkpoint's repo ------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--trust-remote-code", "--trust_remote_code", "--TRUST-REMOTE-CODE=true"])
def test_a_plan_cannot_turn_on_remote_code_for_a_model_the_catalog_does_not_mark(flag):
    with pytest.raises(PlanError, match=r"engine_args: --trust-remote-code would run Python code .*models.yaml"):
        plan_from_dict(_raw(engine_args=[flag]))


def test_tensorrt_llm_runs_remote_code_only_for_a_model_the_catalog_marks(monkeypatch):
    raw = _raw(stack="trtllm", model="glm-5.2", quantization="nvfp4", tensor_parallel=8, image=None)
    raw["targets"][0]["instance_type"] = next(
        it.type for it in catalog.instance_types().values() if it.provider == "aws" and it.gpu == "b200"
    )
    t = plan_from_dict(raw).targets[0]
    assert not t.model_spec.trust_remote_code and "--trust_remote_code" not in engines.command(t, 8001)
    marked = {**catalog.models(), "glm-5.2": t.model_spec.model_copy(update={"trust_remote_code": True})}
    monkeypatch.setattr(catalog, "models", lambda: marked)
    assert "--trust_remote_code" in engines.command(t, 8001)
    assert plan_from_dict({**raw, "targets": [{**raw["targets"][0], "engine_args": ["--trust-remote-code"]}]})
