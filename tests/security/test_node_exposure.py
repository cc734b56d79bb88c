"""What a plan cannot expose or reach, and what a node cannot write (second review, N5, N6, N7).

Each test is an attempt that worked before: plan ``engine_args`` came last and moved the engine to
another port (unfiltered on clouds without a cloud firewall) or set its own key or TLS; the results
mirror stored node-supplied ``steps/provision.json`` and ``instance.json``, which feed re-provision,
cost and teardown; and a static ``base_url`` sent the worker's requests to loopback, link-local or
private addresses and put the answers in the report.
"""

from __future__ import annotations

import copy
import logging

import pytest
import yaml

from bakeoff import installation
from bakeoff.plan import PlanError, load_plan, plan_from_dict, plans_dir
from bakeoff.plan.target import Target
from bakeoff.run import pipeline
from bakeoff.serving.agent_client import mirror
from tests.plan_fixtures import without_deployment


def _cloud_raw(**target) -> dict:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = next(x for x in raw["targets"] if x["provider"] == "aws")
    t.update(target)
    raw["targets"] = [t]
    return raw


# --- N5: engine arguments cannot change exposure --------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--port", "8001"],
        ["--host=0.0.0.0"],
        ["--Server_Port", "8001"],
        ["--api-key", "mine"],
        ["--admin-api-key=x"],
        ["--ssl-keyfile", "/tmp/k"],
        ["--ssl_certfile=/tmp/c"],
        ["--config", "/tmp/override.yaml"],
        ["--extra_llm_api_options", "/tmp/o.yaml"],
        ["--uds", "/tmp/s.sock"],
    ],
)
def test_engine_args_that_set_host_port_tls_key_or_a_config_file_are_refused(args):
    with pytest.raises(PlanError, match=rf"engine_args.*{args[0].split('=')[0]!r} sets where or how the server"):
        plan_from_dict(_cloud_raw(engine_args=args))


def test_other_engine_args_still_pass():
    t = plan_from_dict(_cloud_raw(engine_args=["--max-num-seqs", "256", "--enable-prefix-caching"])).targets[0]
    assert t.engine_args == ["--max-num-seqs", "256", "--enable-prefix-caching"]


# --- N6: the store takes only the benchmark's outputs from a node ---------------------------------------


class _Node:
    """An agent answering every file it lists: a tampered node offering control records too."""

    def fetch(self, job_id, rel):
        return b'{"instance_id": "i-someone-elses"}' if rel.endswith(".json") else b"PAR1"


def test_a_node_cannot_write_the_runs_control_records(tmp_path, caplog):
    offered = {
        "steps/provision.json": 40,
        "instance.json": 40,
        "deploy.json": 40,
        "steps/terminate.json": 40,
        "points/w-c4-r0.parquet": 4,
        "requests/w-c4-r0.parquet": 4,
        "provenance/w-c4-r0.json": 40,
        "power/w-c4-r0.json": 40,
        "sla-w.json": 40,
        "prompt_sizing-w.json": 40,
        "client_calibration.json": 40,
        "points/deeper/x.parquet": 4,
    }
    tdir = tmp_path / "target=t"
    with caplog.at_level(logging.WARNING, logger="bakeoff.serving.agent_client"):
        n = mirror(_Node(), "job", offered, tdir, {})
    stored = sorted(str(p.relative_to(tdir)) for p in tdir.rglob("*") if p.is_file())
    assert stored == sorted(
        [
            "client_calibration.json",
            "points/w-c4-r0.parquet",
            "prompt_sizing-w.json",
            "power/w-c4-r0.json",
            "provenance/w-c4-r0.json",
            "requests/w-c4-r0.parquet",
            "sla-w.json",
        ]
    )
    assert n == 7
    for refused in ("steps/provision.json", "instance.json", "deploy.json", "points/deeper/x.parquet"):
        assert f"{refused!r}, which is not a benchmark output" in caplog.text


# --- N7: no worker requests to plan-chosen internal addresses -------------------------------------------


@pytest.fixture
def strict(monkeypatch):
    """This installation allows no private static endpoint (the suite's conftest allows them)."""
    monkeypatch.delenv(installation.PRIVATE_ENDPOINTS_ENV, raising=False)


def _static(url: str) -> dict:
    raw = yaml.safe_load((plans_dir() / "local-demo.yaml").read_text())
    t = without_deployment(Target.model_validate(copy.deepcopy(raw["targets"][0])).model_dump(mode="json"))
    t.update(provider="static", provider_options={"base_url": url}, price={"usd_per_hour": 40.0})
    raw["targets"] = [t]
    return raw


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000",
        "http://localhost:8000",
        "http://169.254.169.254",
        "http://metadata.google.internal",
        "http://10.0.0.5:8000",
        "http://192.168.1.20",
        "http://[::1]:8000",
        "http://[fd00::1]",
        "http://[::ffff:127.0.0.1]",
        "http://0.0.0.0:8000",
    ],
)
def test_a_static_base_url_inside_the_network_is_refused_at_start(strict, data_root, tmp_path, url):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_static(url)))
    with pytest.raises(PlanError, match=r"targets\[0\]\.provider_options\.base_url: .*endpoint_connection"):
        pipeline.start_run(str(path), "manual__ssrf")
    assert not list(data_root.rglob("start.json"))


def test_a_public_address_passes_and_the_installation_can_allow_private_ones(strict, monkeypatch):
    public = plan_from_dict(_static("https://93.184.215.14:8443"))
    installation.check_static_endpoints(public, installation.private_endpoints_allowed(None))
    private = plan_from_dict(_static("http://127.0.0.1:9000"))
    with pytest.raises(PlanError):
        installation.check_static_endpoints(private, installation.private_endpoints_allowed("false"))
    installation.check_static_endpoints(private, installation.private_endpoints_allowed("true"))  # the Variable
    monkeypatch.setenv(installation.PRIVATE_ENDPOINTS_ENV, "1")
    installation.check_static_endpoints(private, installation.private_endpoints_allowed(None))
    with pytest.raises(PlanError, match="bakeoff_allow_private_endpoints: 'sometimes'"):
        installation.private_endpoints_allowed("sometimes")


def test_a_private_endpoint_named_by_the_installations_connection_is_not_refused(strict):
    raw = _static("http://unused")
    raw["targets"][0]["provider_options"] = {"endpoint_connection": "static_endpoint_pool"}
    installation.check_static_endpoints(plan_from_dict(raw), allowed=False)  # its host is the installation's


def test_a_nodes_power_rows_carry_numbers_and_plain_labels_only():
    """power.csv comes from the node: nan/inf are not energy, and a source or throttle field that is not a
    short plain token (a CSV formula, markup, a 10 kB string) is dropped before it reaches the points table."""
    from bakeoff.serving import energy, power

    text = (
        "10.0,0,500,1000,,,,nvml=12.580\n"
        "10.5,0,nan,1100,,,,nvml=12.580\n"
        "10.6,0,500,inf,,,,nvml=12.580\n"
        '11.0,0,500,1500,,,"=HYPERLINK(""http://x"")",<script>alert(1)</script>\n'
        "12.0,0," + "9" * 400 + ",2000,,,,nvml=12.580\n"
        "12.0,0,500,2000,,,," + "a" * 10_000 + "\n"
    )
    rows = power.parse_samples(text)
    assert [r["t"] for r in rows] == [10.0, 11.0, 12.0]  # nan, inf and an overflowing number skipped
    assert rows[1]["throttle"] == "" and rows[1]["source"] == "" and rows[2]["source"] == ""
    got = energy.point_energy(rows, 10.0, 12.0, 1)
    assert got["energy_j"] == 1000.0 and got["energy_library"] == "nvml=12.580" and not got["throttled"]
