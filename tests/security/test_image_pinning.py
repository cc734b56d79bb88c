"""``bakeoff images pin``: tags resolved to digests through the registry HTTP API, for the
trusted-images Variable.

A local fake registry speaks the Docker Registry v2 API as Docker Hub does for anonymous pulls:
``HEAD /v2/<name>/manifests/<tag>`` answers 401 with a Bearer challenge, the token service hands an
anonymous token for the repository's pull scope, and the retried HEAD answers the
``Docker-Content-Digest`` of what the tag points at now.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from bakeoff import cli, images, installation
from bakeoff.plan import PlanError, load_plan, plan_from_dict

DIGEST = "sha256:" + "ab" * 32
TOKEN = "anon-token-0123"


class _Registry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.manifests = {
            ("lmsysorg/sglang", "v0.5.16-cu130"): DIGEST,
            ("library/python", "3.11"): "sha256:" + "cd" * 32,
        }
        self.scopes: list[str] = []
        self.accepts: list[str] = []
        self.send_digest = True
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Registry

    def _reply(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        u = urlsplit(self.path)
        if u.path != "/token":
            return self._reply(404)
        self.server.scopes += parse_qs(u.query).get("scope", [])
        self._reply(200, {"Content-Type": "application/json"}, json.dumps({"token": TOKEN}).encode())

    def do_HEAD(self):
        parts = self.path.split("/manifests/")
        if not parts[0].startswith("/v2/") or len(parts) != 2:
            return self._reply(404)
        repo, tag = parts[0][len("/v2/") :], parts[1]
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = (
                f'Bearer realm="http://{self.server.host}/token",service="fake-registry",scope="repository:{repo}:pull"'
            )
            return self._reply(401, {"WWW-Authenticate": challenge})
        self.server.accepts.append(self.headers.get("Accept", ""))
        digest = self.server.manifests.get((repo, tag))
        if digest is None:
            return self._reply(404)
        headers = {"Content-Type": "application/vnd.oci.image.index.v1+json"}
        if self.server.send_digest:
            headers["Docker-Content-Digest"] = digest
        self._reply(200, headers)

    def log_message(self, *a):
        pass


@pytest.fixture
def registry():
    r = _Registry()
    threading.Thread(target=r.serve_forever, daemon=True).start()
    yield r
    r.shutdown()
    r.server_close()


@pytest.fixture(autouse=True)
def no_trust(monkeypatch):
    monkeypatch.delenv(installation.TRUSTED_IMAGES_ENV, raising=False)


def test_a_tag_is_resolved_to_the_registrys_digest_through_the_anonymous_token(registry):
    image = f"{registry.host}/lmsysorg/sglang:v0.5.16-cu130"
    assert images.pin_all([image], frozenset({registry.host})) == [f"{image}@{DIGEST}"]
    assert registry.scopes == ["repository:lmsysorg/sglang:pull"]
    assert "application/vnd.oci.image.index.v1+json" in registry.accepts[0]  # the multi-platform digest


def test_the_command_prints_the_variables_value_and_the_gate_then_lets_the_image_have_secrets(
    registry, capsys, monkeypatch
):
    image = f"{registry.host}/lmsysorg/sglang:v0.5.16-cu130"
    assert cli.main(["images", "pin", image, "--plain-http", registry.host]) == 0
    out = capsys.readouterr()
    value = out.out
    assert json.loads(value) == [f"{image}@{DIGEST}"] and installation.TRUSTED_IMAGES_VARIABLE in out.err
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t.update(image=f"{image}@{DIGEST}", secrets={"HF_TOKEN": "huggingface_default"})
    raw["targets"] = [t]
    installation.check_secret_images(plan_from_dict(raw), installation.trusted_images(value))  # accepted
    monkeypatch.setenv(installation.TRUSTED_IMAGES_ENV, "other/x:1@sha256:" + "ee" * 32)
    assert cli.main(["images", "pin", image, "--plain-http", registry.host, "--merge"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_an_unknown_tag_or_a_registry_without_a_digest_is_an_error_naming_the_image(registry, capsys):
    missing = f"{registry.host}/lmsysorg/sglang:nightly"
    assert cli.main(["images", "pin", missing, "--plain-http", registry.host]) == 2
    assert f"image {missing}: no tag 'nightly'" in capsys.readouterr().err
    registry.send_digest = False
    with pytest.raises(images.ImageError, match="no sha256 Docker-Content-Digest"):
        images.pin_all([f"{registry.host}/lmsysorg/sglang:v0.5.16-cu130"], frozenset({registry.host}))


def test_a_registry_wanting_credentials_is_not_sent_any(registry):
    with httpx.Client() as c, pytest.raises(images.ImageError, match="only anonymous pulls"):
        images._token(c, 'Basic realm="registry"', "x")


@pytest.mark.parametrize(
    ("image", "ref"),
    [
        ("python:3.11", images.Ref("registry-1.docker.io", "library/python", "3.11")),
        ("lmsysorg/sglang", images.Ref("registry-1.docker.io", "lmsysorg/sglang", "latest")),
        ("docker.io/vllm/vllm-openai:v0.25.0", images.Ref("registry-1.docker.io", "vllm/vllm-openai", "v0.25.0")),
        (
            "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14",
            images.Ref("nvcr.io", "nvidia/tensorrt-llm/release", "1.3.0rc14"),
        ),
        ("localhost:5000/team/img:tag", images.Ref("localhost:5000", "team/img", "tag")),
    ],
)
def test_image_names_are_read_as_docker_reads_them(image, ref):
    assert images.parse(image) == ref


@pytest.mark.parametrize("bad", ["", "UPPER/case:tag", "a b:c", "name:tag@sha256:12"])
def test_a_malformed_image_name_is_refused(bad):
    with pytest.raises(images.ImageError):
        images.parse(bad)


def test_the_gates_refusal_names_the_command():
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t.update(image="lmsysorg/sglang:v0.5.16-cu130", secrets={"HF_TOKEN": "huggingface_default"})
    raw["targets"] = [t]
    with pytest.raises(PlanError, match=r"python -m bakeoff images pin lmsysorg/sglang:v0\.5\.16-cu130"):
        installation.check_secret_images(plan_from_dict(raw), frozenset())


def test_the_recipe_images_are_listed_for_pinning_without_a_registry():
    listed = images.recipe_images()
    assert listed and all("@sha256:" not in i for i in listed)  # all floating today: what --recipes pins
    assert all(images.parse(i).tag for i in listed)
