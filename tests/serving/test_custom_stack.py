"""A custom stack: the plan's own image, argv template, port and routes, checked, rendered and deployed like
the built-in engines (cloud boot script, local provider with a real process and real HTTP, support matrix)."""

from __future__ import annotations

import shlex
import subprocess
import time

import httpx
import pytest
import yaml

from bakeoff import engines
from bakeoff.bench.client import tokenize
from bakeoff.bench.metrics import server_metrics
from bakeoff.plan import plan_from_dict
from bakeoff.providers.local import LocalProvider
from bakeoff.quality.support import support_matrix
from bakeoff.serving import deploy, readiness, tls, userdata
from bakeoff.serving import front as front_mod
from bakeoff.store import write_json
from tests.custom_stack_fixtures import CLOUD, DIGEST, KEY, plan_doc, refused, target


def test_plan_check_refuses_a_custom_stack_without_a_health_route_naming_the_field(tmp_path, capsys):
    from bakeoff.cli import main

    bad = plan_doc("vultr", custom={k: v for k, v in CLOUD.items() if k != "health_route"})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert main(["plan", "check", str(tmp_path / "bad.yaml")]) == 2
    assert "targets[0].custom.health_route: required" in capsys.readouterr().err
    assert "targets[0].custom.health_route" in refused(health_route="health")  # not a route: named the same
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(plan_doc("vultr", custom=CLOUD)))
    assert main(["plan", "check", str(tmp_path / "ok.yaml")]) == 0
    assert f"custom stack inhouse: {DIGEST} /opt/serve --model {{model}}" in capsys.readouterr().out


def test_the_template_renders_one_word_per_item_with_the_plans_values():
    t = target(tensor_parallel=4)
    words = engines.command(t, 9001, "127.0.0.1")
    assert words == ["--model", t.checkpoint_id, "--host", "127.0.0.1", "--port", "9001", "--tp=4"]
    assert engines.boot(t).entrypoint == "/opt/serve" and engines.boot(t).fronted
    assert engines.label(t) == "custom: inhouse" and t.stack_spec.port == 9000
    assert engines.routes(t) == engines.Routes("/healthz", "/v1/models", "/v1/tokenize", None)


def test_the_boot_script_runs_the_custom_image_behind_the_front():
    t = target()
    script = userdata.render(t, api_key=KEY, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32")
    assert len(script.encode()) < userdata.MAX_BYTES
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    front, serve = [shlex.split(x) for x in script.splitlines() if x.startswith("docker run -d --name bakeoff-")]
    assert front[4] == front_mod.CONTAINER  # the front first: it holds the serving port before the stack starts
    assert serve[serve.index("--entrypoint") + 1] == "/opt/serve" and DIGEST in serve
    after = serve[serve.index(DIGEST) + 1 :]
    assert after[after.index("--host") + 1] == "127.0.0.1" and after[after.index("--port") + 1] == "9001"
    ports = front[front.index(front_mod.SCRIPT) + 1 :][:2]
    assert ports == ["9000", "9001"] and "--dport 9000" in script  # the front owns the serving port
    assert KEY not in " ".join(serve) and userdata.SECRETS_ENV not in " ".join(serve)  # no key, no secrets file


@pytest.mark.slow
def test_a_custom_stack_deploys_on_the_local_provider_with_real_http(tmp_path, monkeypatch):
    """A real emulator process, started through the rendered template, answers on the declared routes;
    readiness asks those routes, and deploy.json records the image and the argv that ran."""
    monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path))
    t = target("local")
    provider = LocalProvider(grace_s=3.0)
    inst = provider.create(t, "run-custom", tags={}, spec={"expires_at": time.time() + 300})
    try:
        cmd = open(f"/proc/{inst.pid}/cmdline", "rb").read().split(b"\0")
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
    raw = plan_doc("vultr", custom=CLOUD)
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


def test_a_sandbox_node_booted_from_the_custom_boot_script_answers_on_the_declared_routes(tmp_path):
    """The fake clouds' node boots from the same user-data a cloud gets (target line, key, certificate):
    readiness over the pinned TLS channel asks the declared health route and finds the model."""
    from bakeoff_sandbox.backing import Backing

    t = target()
    ident = tls.node_identity("run-custom", t.slug)
    pem = {"cert": ident.cert_pem, "key": ident.key_pem}
    script = userdata.render(t, api_key=KEY, shutdown_after_s=600, ingress_cidr="203.0.113.7/32", tls=pem)
    backing = Backing(tmp_path)
    try:
        assert backing.boot("vultr", "node-1", script)
        url = None
        for _ in range(400):  # the emulator's start takes a few seconds on a busy machine
            if (addr := backing.address("vultr", "node-1")) is not None:
                url = f"https://{addr[0]}:{addr[1]}"
                seen = readiness.probe(url, KEY, t.served_model_id, ident.cert_pem, health="/healthz")
                if seen.ready is not None:
                    break
            time.sleep(0.05)
        assert url is not None and seen.ready is not None, seen.last
        assert readiness.probe(url, KEY, t.served_model_id, ident.cert_pem, health="/nope").last == "/nope answered 404"
    finally:
        backing.close()


def _with_padding(words: int) -> dict:
    """The cloud custom stack with ``words`` extra 60-character flags in its template."""
    pad = [f"--opt{i:03d}=" + "v" * 50 for i in range(words)]
    return {**CLOUD, "command": [*CLOUD["command"], *pad]}


def test_plan_check_sizes_the_boot_script_as_a_launch_renders_it(tmp_path, capsys):
    """Refused before any run when the script would be over the user-data limit even with the short bundle
    URL of long-term keys; warned when only the longer URL of temporary credentials would push it over.
    The size is the real renderer's, with stand-ins as long as the launch's own values."""
    from bakeoff.cli import main

    t = target(custom=_with_padding(0))
    short = userdata.size_at_launch(t, userdata.URL_BYTES_LONG_TERM_KEYS)
    ident = tls.stand_in_identity(t.slug)
    agent = {"url": "https://b/" + "u" * 190, "sha256": "0" * 64, "requirements": []}
    real = userdata.render(
        t, api_key="bk-" + "1" * 40, shutdown_after_s=3600, ingress_cidr="203.0.113.7/32", agent=agent,
        expires_at=1_900_000_000, tls={"cert": ident.cert_pem, "key": ident.key_pem},
    )  # fmt: skip
    assert abs(short - len(real.encode())) < 1500  # the pinned requirements and the CIDR differ, not the shape

    def size(words: int, url_bytes: int) -> int:  # as a launch sends it: its prose dropped when over the limit
        return userdata.size_at_launch(target(custom=_with_padding(words)), url_bytes)

    cap, long_term, temporary = (
        userdata.MAX_BYTES,
        userdata.URL_BYTES_LONG_TERM_KEYS,
        userdata.URL_BYTES_TEMPORARY_CREDENTIALS,
    )
    over = next(w for w in range(400) if size(w, long_term) > cap)
    tight = next(w for w in range(400) if size(w, long_term) <= cap < size(w, temporary))
    for words, rc, said in (
        (over, 2, "over the clouds' 16,384-byte user-data limit"),
        (tight, 0, "only while the client bundle's URL is signed with long-term keys"),
    ):
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan_doc("vultr", custom=_with_padding(words))))
        assert main(["plan", "check", str(tmp_path / "p.yaml")]) == rc
        out = capsys.readouterr()
        assert f"targets.{t.name}: its boot script" in out.err + out.out and said in out.err + out.out
