"""A custom stack is plan input: its template cannot become code on the node or the worker, its routes stay
on its own server, and its image gets the installation's tokens only when the installation trusts it."""

from __future__ import annotations

import shlex

import pytest

from bakeoff import catalog
from bakeoff.core.launch import AGENT_PORT
from bakeoff.plan import PlanError, plan_from_dict
from bakeoff.plan import custom_stack as cs
from bakeoff.serving import front as front_mod
from bakeoff.serving import tls, userdata
from tests.custom_stack_fixtures import CLOUD, DIGEST, KEY, plan_doc, refused, target
from tests.stub_host import docker_argv


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["/opt/serve", "--model", "{model.__class__}", "{host}", "{port}"], "{model.__class__}"),
        (["/opt/serve", "{0}", "{host}", "{port}"], "{0}"),
        (["/opt/serve", "--x", "{{host}}", "{host}", "{port}"], "stray brace"),
        (["/opt/serve", "--x", "{secrets}", "{host}", "{port}"], "{secrets}"),
        # a shell as the program, written as a plan would (split here so no test line reads as a shell call)
        (shlex.split("sh -c 'serve {model} --host {host} --port {port}'"), "is a shell"),
        (shlex.split("/bin/bash -c serve {host} {port}"), "is a shell"),
        (["$(curl evil)", "{host}", "{port}"], "must name the program"),
        (["/opt/serve", "--a\nrm -rf /", "{host}", "{port}"], "control character"),
        (["/opt/serve", "--host", "0.0.0.0", "--port", "{port}"], "sets where the stack listens"),
        (["/opt/serve", "--model", "{model}"], "never names {host}"),
    ],
)
def test_a_template_that_could_become_code_is_refused_naming_the_item(command, says):
    msg = refused(command=command)
    assert "targets[0].custom.command" in msg and says in msg, msg


def test_a_value_that_looks_like_shell_stays_one_word_on_the_node():
    """A literal word with shell syntax reaches docker as that one word: the boot script quotes it."""
    t = target(custom={**CLOUD, "command": [*CLOUD["command"], "--banner=$(touch /tmp/pwned); `id` {gpus}"]})
    script = userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    line = next(x for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-serve"))
    out = docker_argv(line)
    assert out[-1] == f"--banner=$(touch /tmp/pwned); `id` {t.tensor_parallel}"


def test_a_custom_image_gets_secrets_only_when_the_installation_trusts_it():
    from bakeoff import installation

    floating = plan_from_dict(
        plan_doc(
            "vultr",
            custom={**CLOUD, "image": "docker.io/attacker/llm:latest"},
            secrets={"HF_TOKEN": "huggingface_default"},
        )
    )
    with pytest.raises(PlanError, match=r"targets\[0\].image: 'docker.io/attacker/llm:latest' is a floating tag"):
        installation.check_secret_images(floating, frozenset())
    pinned = plan_from_dict(plan_doc("vultr", custom=CLOUD, secrets={"HF_TOKEN": "huggingface_default"}))
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
            "--config",
            "/etc/x",
        ],
    )
    assert "custom.image" in refused("local", command=["python3", "-m", "evil", "--port", "{port}", "--host", "{host}"])
    assert "port 8089 is the node agent's" in refused(port=8088) and cs.RESERVED_PORTS == {
        AGENT_PORT: "the node agent's"
    }


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


# --- third pass: listening flags in any spelling, shells and inline code behind wrappers ------------


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (
            ["/opt/serve", "--host", "0.0.0.0", "--port", "9000", "--label={host}-{port}"],
            "sets where the stack listens",
        ),
        (["/opt/serve", "--host={host}", "--port={port}", "--port=9000"], "'--port=9000' sets where"),
        (["/opt/serve", "--host", "{host}", "--port", "{port}", "--label={host}-{port}"], "outside a listening flag"),
        (["/opt/serve", "--bind-address", "0.0.0.0", "--host", "{host}", "--port", "{port}"], "sets where"),
        (["/opt/serve", "--HTTP_PORT", "9000", "--host", "{host}", "--port", "{port}"], "sets where"),
        (["/opt/serve", "--host", "{host}", "--port", "{port}", "--x", "0.0.0.0:9000"], "literal address"),
        (["/opt/serve", "--host", "{host}", "--port", "{port}", "--x", "[::]"], "literal address"),
        # shells behind wrappers, written as a plan would (split here so no test line reads as a shell call)
        (shlex.split("nice sh -c serve --host {host} --port {port}"), "'sh' is a shell"),
        (shlex.split("timeout 0 bash -c x --host {host} --port {port}"), "'bash' is a shell"),
        (["nohup", "/usr/bin/env", "X=1", "serve", "--host", "{host}", "--port", "{port}"], "is a shell"),
        (["python3", "-c", "import os", "--host", "{host}", "--port", "{port}"], "'-c' hands python3 code"),
        (["python3", "-u", "-Bc", "x", "--host", "{host}", "--port", "{port}"], "'-Bc' hands python3 code"),
        (["stdbuf", "-oL", "perl", "-e", "x", "--host", "{host}", "--port", "{port}"], "'-e' hands perl code"),
        (["nice", "node", "--eval=x", "--host", "{host}", "--port", "{port}"], "hands node code"),
    ],
)
def test_listening_flags_and_code_behind_wrappers_are_refused(command, says):
    msg = refused(command=command)
    assert "targets[0].custom.command" in msg and says in msg, msg


@pytest.mark.parametrize(
    "command",
    [
        ["python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--host", "{host}", "--port", "{port}"],
        ["/opt/serve", "--bind", "{host}:{port}", "--max-num-seqs", "256", "--model", "{model}"],
        ["/opt/serve", "--listen-address={host}", "--http-port={port}", "--tp={tensor_parallel}"],
    ],
)
def test_an_ordinary_template_still_passes(command):
    assert target(custom={**CLOUD, "command": command}).custom.command == command


def test_the_front_holds_the_serving_port_before_the_stack_starts():
    t = target(custom={**CLOUD, "command": ["/opt/serve", "--host", "{host}", "--port", "{port}"]})
    lines = userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32").splitlines()
    front_at = next(i for i, x in enumerate(lines) if "docker run" in x and front_mod.CONTAINER in x)
    waits = next(i for i, x in enumerate(lines) if "/dev/tcp/127.0.0.1/" in x)
    serve_at = next(i for i, x in enumerate(lines) if x.startswith("docker run -d --name bakeoff-serve"))
    assert front_at < waits < serve_at, "the serving container starts before the front holds the port"
