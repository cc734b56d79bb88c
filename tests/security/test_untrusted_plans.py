"""Plans are untrusted input: whoever writes or triggers one must not reach the workers' secrets or files.

Each test is an attempt that worked before: a static target naming any environment variable as its
key, a plan naming an arbitrary connection, a serving token written into the plan, a workload file
outside the workloads folder (read, echoed into the log, shipped to a node), a trigger naming any
YAML path as the plan.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import yaml

from bakeoff import secrets
from bakeoff.bench.client.workloads import WorkloadFileError, build_specs, trace_specs
from bakeoff.plan import PlanError, plan_from_dict, plans_dir
from bakeoff.plan.target import Target
from bakeoff.plan.workload import Workload
from bakeoff.run import pipeline, provisioning, step_context, teardown_steps, worker_time
from tests.conftest import ROOT
from tests.plan_fixtures import without_deployment

HF = "hf_PLANSECRET0123456789abcdefXYZ"
# the one image these tests' installation trusts with secrets (a made-up digest: the sandbox pulls nothing)
TRUSTED = "vllm/vllm-openai:v0.25.0@sha256:" + "5e" * 32


@pytest.fixture(autouse=True)
def trusted_images(monkeypatch):
    monkeypatch.setenv("BAKEOFF_TRUSTED_IMAGES", TRUSTED)


@pytest.fixture(autouse=True)
def env_connections(monkeypatch):
    """The CLI's resolver (BAKEOFF_CONN_<ID>_*), whatever an earlier test installed."""
    monkeypatch.setattr(secrets, "_resolve_connection", getattr(secrets, "env_connection", None), raising=False)


@pytest.fixture
def demo_raw() -> dict:
    return yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())


@pytest.fixture
def workloads(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "workloads"
    root.mkdir()
    monkeypatch.setenv("BAKEOFF_WORKLOADS_DIR", str(root))
    return root


def _refused(raw: dict) -> str:
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="attack.yaml")
    return str(e.value)


def _static(raw: dict, **opts) -> dict:
    t = without_deployment(Target.model_validate(copy.deepcopy(raw["targets"][0])).model_dump(mode="json"))
    t.update(provider="static", provider_options=opts, price={"usd_per_hour": 40.0})
    raw["targets"] = [t]
    return raw


# --- endpoint keys ------------------------------------------------------------------------------
def test_static_target_cannot_name_a_worker_environment_variable(demo_raw):
    msg = _refused(
        _static(demo_raw, base_url="https://attacker.example:443", api_key_env="AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    )
    assert "api_key_env" in msg and "static_endpoint_" in msg and "endpoint_connection" in msg


@pytest.mark.parametrize("conn", ["aws_default", "oci_default", "huggingface_default", "static_endpoint_"])
def test_static_target_may_only_name_a_static_endpoint_connection(demo_raw, conn):
    msg = _refused(_static(demo_raw, endpoint_connection=conn))
    assert "endpoint_connection" in msg and "static_endpoint_" in msg


def test_a_connections_key_never_goes_to_a_url_the_plan_chose(demo_raw):
    msg = _refused(_static(demo_raw, base_url="https://attacker.example", endpoint_connection="static_endpoint_pool"))
    assert "not both" in msg


def test_resolver_refuses_connections_outside_the_prefixes(monkeypatch):
    """Checked again where connections are read, not only in the plan model."""
    monkeypatch.setenv("BAKEOFF_CONN_AWS_DEFAULT_PASSWORD", "aws-secret")
    for conn_id in ("aws_default", "static_endpoint_x/../aws_default", ""):
        with pytest.raises(secrets.MissingSecret, match="may only name"):
            secrets.connection(conn_id, secrets.SECRET_CONN_PREFIXES)


# --- serving secrets ----------------------------------------------------------------------------
def test_a_serving_token_written_into_the_plan_is_refused(demo_raw):
    demo_raw["targets"][0]["env"] = {"HF_TOKEN": HF}
    msg = _refused(demo_raw)
    assert "targets[0].env" in msg and "secrets: {HF_TOKEN: huggingface_default}" in msg and HF not in msg


@pytest.mark.parametrize(
    "env,conn,field",
    [
        ("HF_TOKEN", "aws_default", "huggingface_"),  # an arbitrary connection's password
        ("HF_TOKEN", "static_endpoint_pool", "huggingface_"),
        ("LD_PRELOAD", "huggingface_default", "HF_"),  # a variable that changes what the node runs
        ("hf_token", "huggingface_default", "HF_"),
    ],
)
def test_serving_secrets_name_only_allowed_variables_and_connections(demo_raw, env, conn, field):
    demo_raw["targets"][0]["secrets"] = {env: conn}
    msg = _refused(demo_raw)
    assert "targets[0].secrets" in msg and field in msg


def _cloud_target(**extra) -> dict:
    from bakeoff.plan import load_plan

    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t["provider_options"]["client_mode"] = "remote"
    return {**t, **({"image": TRUSTED} if "secrets" in extra else {}), **extra}


def test_serving_secrets_only_go_to_nodes_bakeoff_starts(demo_raw):
    demo_raw["targets"][0]["secrets"] = {"HF_TOKEN": "huggingface_default"}
    assert "only a node bakeoff provisions" in _refused(demo_raw)


def test_a_missing_serving_secret_stops_provisioning_before_launch(demo_raw, data_root, tmp_path):
    demo_raw["targets"] = [_cloud_target(secrets={"HF_TOKEN": "huggingface_missing"})]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(demo_raw))
    run = pipeline.start_run(str(path), "manual__missing")
    from bakeoff.providers import ProviderError

    with pytest.raises(ProviderError, match="huggingface_missing.*BAKEOFF_CONN_HUGGINGFACE_MISSING_PASSWORD"):
        provisioning.provision(run["run_dir"], run["targets"][0])
    assert not list(Path(run["run_dir"]).rglob("instance.json"))


@pytest.fixture(scope="module")
def sandbox():
    from bakeoff_sandbox import Sandbox

    with Sandbox(boot_s=0.1) as sb:
        yield sb


# slow: a whole provision and deploy on the sandbox (53 s plus 13 s set-up)
@pytest.mark.slow
def test_serving_secret_reaches_the_node_and_nothing_else(sandbox, data_root, tmp_path, monkeypatch, caplog):
    """A whole run of a gated-model target on the sandbox EC2: the provider gets the token in
    spec["secrets"]; plan.json, deploy.json, every step's return value (XCom), provenance, logs,
    reports and the node's user-data never hold it."""
    from bakeoff.plan import load_plan
    from bakeoff.providers.aws import AwsProvider

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("BAKEOFF_CONN_HUGGINGFACE_DEFAULT_PASSWORD", HF)
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t.update(secrets={"HF_TOKEN": "huggingface_default"}, image=TRUSTED)
    raw.update(name="secret-run", targets=[t])
    raw["quality"]["accuracy"]["eval_size"] = 8
    raw["workloads"][0].update(concurrency=[2], requests_per_point=4, warmup_requests=1, input_len=64, output_len=8)
    path = tmp_path / "secret-run.yaml"
    path.write_text(yaml.safe_dump(raw))

    seen = []
    real_create = AwsProvider.create
    from bakeoff.core.launch import LaunchSpec

    def spy(self, target, run_id, *, tags, spec):
        seen.append(dict(LaunchSpec.of(spec).secrets))
        return real_create(self, target, run_id, tags=tags, spec=spec)

    monkeypatch.setattr(AwsProvider, "create", spy)
    from bakeoff.serving import userdata

    scripts = []
    real_render = userdata.render_for

    def render_spy(target, spec):
        scripts.append(real_render(target, spec))
        return scripts[-1]

    monkeypatch.setattr(userdata, "render_for", render_spy)

    with sandbox.exported():  # every step's default credentials resolve to the sandbox's clouds
        run = pipeline.start_run(str(path), "manual__secret")
        rdir, slug = run["run_dir"], run["targets"][0]
        results = [run]
        inst = provisioning.provision(rdir, slug)
        try:
            ready = worker_time.until_done(provisioning.node_ready, rdir, slug, inst, poll_s=0.1)
            results += [ready, pipeline.deploy(rdir, slug, ready)]
            ep = worker_time.until_done(pipeline.serving_ready, rdir, slug, ready, poll_s=0.1)
            results += [inst, ep, pipeline.accuracy_gate(rdir, slug, ep)]
            started = pipeline.benchmark(rdir, slug, ep)
            results += [started, worker_time.until_done(pipeline.benchmark_done, rdir, slug, ep, started, poll_s=0.2)]
        finally:
            results.append(teardown_steps.terminate(rdir, slug, inst))
        results.append(teardown_steps.sweep(rdir))
        for step in (pipeline.cost, pipeline.report):
            results.append(step(rdir))
    assert seen == [{"HF_TOKEN": HF}]
    plan_doc = json.loads((Path(rdir) / "plan.json").read_text())
    assert plan_doc["targets"][0]["secrets"] == {"HF_TOKEN": "huggingface_default"}  # the name, not the value
    assert HF not in json.dumps(results, default=str) and HF not in caplog.text
    files = [p for p in data_root.rglob("*") if p.is_file()]
    assert any(p.name == "deploy.json" for p in files) and any(p.suffix == ".html" for p in files)
    for p in files:
        assert HF.encode() not in p.read_bytes(), f"{p} holds the secret"
    assert scripts and "HF_TOKEN" in scripts[0] and all(HF not in script for script in scripts)  # names only


def test_run_keys_and_serving_secrets_are_masked_in_task_logs(monkeypatch, data_root, demo_raw, tmp_path):
    import bakeoff_connections

    masked: list[str] = []
    monkeypatch.setattr(bakeoff_connections, "mask_secret", masked.append)
    monkeypatch.setenv("AIRFLOW_CONN_HUGGINGFACE_DEFAULT", json.dumps({"conn_type": "generic", "password": HF}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_STATIC_ENDPOINT_POOL",
        json.dumps(
            {"conn_type": "http", "host": "gpu-pool.internal", "schema": "https", "port": 8443, "password": "pool-key"}
        ),
    )
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({"conn_type": "aws", "password": "aws-secret"}))
    raw = _static(demo_raw, endpoint_connection="static_endpoint_pool")
    raw["targets"].append(_cloud_target(secrets={"HF_TOKEN": "huggingface_default"}))
    raw["budget_usd"] = 500
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    run = pipeline.start_run(str(path), "manual__masked")
    bakeoff_connections.mask_run_keys(run["run_dir"])
    assert "pool-key" in masked and HF in masked and "aws-secret" not in masked
    from bakeoff.providers.static import static_base_url

    assert static_base_url(step_context.run_plan(run["run_dir"]).targets[0]) == "https://gpu-pool.internal:8443"
    with pytest.raises(secrets.MissingSecret):  # the Airflow resolver never serves aws_default to a plan
        secrets.connection("aws_default", (secrets.STATIC_CONN_PREFIX,))


# --- plan choice ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ref",
    [
        "/etc/passwd",
        "../../etc/hosts",
        str(ROOT / "include" / "plans" / "local-demo.yaml"),
        "local-demo.yaml",
        "no-such-plan",
        7,
    ],
)
def test_a_run_can_only_choose_an_installed_plan(ref):
    from bakeoff.plan import installed_plan_path

    with pytest.raises(PlanError, match="Variable bakeoff_plan: .*not an installed plan; choose one of: .*local-demo"):
        installed_plan_path(ref, "Variable bakeoff_plan")
    assert installed_plan_path("local-demo") == plans_dir() / "local-demo.yaml"


def test_the_trigger_form_offers_a_choice_not_a_path():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import ParamValidationError

    from bakeoff.plan import installed_plans

    dag = DagBag(dag_folder=str(ROOT / "dags" / "bakeoff_dag.py")).dags["bakeoff"]
    param = dag.params.get_param("plan")
    assert set(param.schema["enum"]) == {None, *installed_plans()} and "local-demo" in param.schema["enum"]
    for bad in ("/tmp/evil.yaml", "../plans/local-demo", "local-demo.yaml"):
        with pytest.raises(ParamValidationError):
            param.resolve(bad)
    assert param.resolve("local-demo") == "local-demo" and param.resolve(None) is None


# --- workload files ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field,value",
    [
        ("source_path", "/etc/passwd"),
        ("source_path", "../../../etc/passwd"),
        ("source_path", "data/../../x.csv"),
        ("trace_path", "/proc/self/environ"),
        ("source_path", "~root/.ssh/id_rsa"),
    ],
)
def test_a_plan_cannot_name_a_file_outside_the_workloads_folder(demo_raw, field, value):
    w = demo_raw["workloads"][0]
    w.update({field: value, "source": "length_log"} if field == "source_path" else {field: value, "load": "trace"})
    msg = _refused(demo_raw)
    assert f"workloads[0].{field}" in msg and "BAKEOFF_WORKLOADS_DIR" in msg


def test_a_symlink_out_of_the_workloads_folder_is_refused(workloads, tmp_path):
    outside = tmp_path / "worker-secret.csv"
    outside.write_text("input_len,output_len\n5,5\n")
    (workloads / "log.csv").symlink_to(outside)
    with pytest.raises(WorkloadFileError, match="source_path: 'log.csv' leads outside the workloads folder"):
        build_specs(Workload(name="w", source="length_log", source_path="log.csv"), 1)
    with pytest.raises(WorkloadFileError, match="trace_path"):
        trace_specs(Workload(name="w", load="trace", trace_path="log.csv"))


def test_relative_workload_files_resolve_under_the_folder(workloads):
    (workloads / "sub").mkdir()
    (workloads / "sub" / "log.csv").write_text("input_len,output_len\n7,3\n")
    specs = build_specs(Workload(name="w", source="length_log", source_path="sub/log.csv"), 2)
    assert [(s.input_len, s.output_len) for s in specs] == [(7, 3), (7, 3)]


@pytest.mark.parametrize(
    "content,source",
    [
        ("postgresql://airflow:TOPSECRETPW@db/airflow\n1,2\n", "length_log"),  # header line echoed before
        ("input_len,output_len\n1,TOPSECRETPW\n", "length_log"),  # a cell echoed before
        ('{"prompt": "x", "max_tokens": "TOPSECRETPW"}\n', "jsonl"),  # a value echoed before
    ],
)
def test_errors_never_echo_file_content(workloads, content, source):
    (workloads / "f").write_text(content)
    with pytest.raises(WorkloadFileError) as e:
        build_specs(Workload(name="w", source=source, source_path=str(workloads / "f")), 1)
    assert "TOPSECRETPW" not in str(e.value) and "f:" in str(e.value)


def test_binary_files_are_refused_without_quoting_bytes(workloads):
    (workloads / "f.csv").write_bytes(b"input_len,output_len\n1,2\n\xff\xfeSECRET\n")
    with pytest.raises(WorkloadFileError, match="not UTF-8") as e:
        build_specs(Workload(name="w", source="length_log", source_path=str(workloads / "f.csv")), 1)
    assert "\\xff" not in str(e.value) and "SECRET" not in str(e.value)


def test_co_located_jobs_ship_only_files_from_the_workloads_folder(demo_raw, workloads, tmp_path):
    from bakeoff.agent.job import build_job
    from bakeoff.core.endpoint import Endpoint

    (workloads / "prompts.jsonl").write_text('{"prompt": "hello there"}\n')
    demo_raw["workloads"][0].update(source="jsonl", source_path="prompts.jsonl")
    plan = plan_from_dict(demo_raw)
    ep = Endpoint(target="t", base_url="http://127.0.0.1:1", model="m", stack="vllm")
    job = build_job(plan, plan.targets[0], ep, "r1")
    assert list(job["files"].values()) == ['{"prompt": "hello there"}\n']
    outside = tmp_path / "id_rsa"
    outside.write_text("PRIVATE KEY MATERIAL")
    (workloads / "prompts.jsonl").unlink()
    (workloads / "prompts.jsonl").symlink_to(outside)
    with pytest.raises(ValueError, match="outside the workloads folder") as e:
        build_job(plan, plan.targets[0], ep, "r1")
    assert "PRIVATE KEY" not in str(e.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"slo_tiers": {"<b>x</b>": {"ttft_p95_ms": 100}}}, "slo_tiers."),
        ({"slo_tiers": {"=cmd|' /C calc'!A0": {"ttft_p95_ms": 100}}}, "a tier name is a lowercase word"),
        ({"slo_tiers": {"batch": {"e2e_p95_ms": float("inf")}}}, "slo_tiers"),
        ({"capacity": {"points": 10_000}}, "capacity.points"),
        ({"capacity": {"max": 1_000_000}}, "capacity.max"),
    ],
)
def test_slo_tiers_and_the_capacity_search_are_bounded_words_and_numbers(change, says):
    raw = yaml.safe_load((plans_dir() / "local-capacity.yaml").read_text()) | change
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw, source="bad.yaml")
    assert says in str(e.value)
