"""Settings as code: config/ files render from the environment and parse as Airflow imports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
sys.path.insert(0, str(ROOT / "scripts"))
from render_settings import PLACEHOLDER, render  # noqa: E402

CLOUD_CONNECTIONS = {
    "aws_default",
    "vultr_default",
    "digitalocean_default",
    "bakeoff_s3",
    "oci_default",
    "huggingface_default",
}
SECRET_FIELDS = ("password", "login")


def _render_file(name: str, env: dict[str, str], tmp_path: Path) -> Path:
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_settings.py"), str(CONFIG / name), str(out)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    )
    out.with_suffix(".stderr").write_text(proc.stderr)
    return out


def test_connection_file_holds_placeholders_only():
    raw = json.loads((CONFIG / "connections.example.json").read_text())
    assert set(raw) == CLOUD_CONNECTIONS
    for conn_id, conn in raw.items():
        for field in SECRET_FIELDS:
            if conn.get(field):
                assert PLACEHOLDER.fullmatch(conn[field]), f"{conn_id}.{field} must be a ${{VAR}} placeholder"


def test_rendered_connections_parse_as_airflow_imports_them(tmp_path):
    from airflow.secrets.local_filesystem import load_connections_dict

    env = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
        "AWS_DEFAULT_REGION": "us-west-2",
        "VULTR_API_KEY": "vultr-key-value",
        "BAKEOFF_S3_ENDPOINT_URL": "http://minio:9000",
        "OCI_PRIVATE_KEY": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
    }
    out = _render_file("connections.example.json", env, tmp_path)
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    conns = load_connections_dict(str(out))
    assert set(conns) == CLOUD_CONNECTIONS
    assert (conns["aws_default"].login, conns["aws_default"].password) == ("AKIAEXAMPLE", "s3cr3t-value")
    assert conns["aws_default"].extra_dejson == {"region_name": "us-west-2"}
    assert conns["vultr_default"].password == "vultr-key-value"
    assert conns["bakeoff_s3"].extra_dejson["endpoint_url"] == "http://minio:9000"
    assert conns["oci_default"].password == "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
    for conn in conns.values():  # the metadata DB stores extra as text: a dict would fail the insert
        assert conn.extra is None or isinstance(conn.extra, str)
    # unset secrets are named on stderr, their (absent) values never are; set values never appear
    err = out.with_suffix(".stderr").read_text()
    assert "DIGITALOCEAN_TOKEN" in err and "s3cr3t-value" not in err and "vultr-key-value" not in err


def test_an_empty_extra_field_is_dropped_not_imported_as_an_empty_url(tmp_path):
    from airflow.secrets.local_filesystem import load_connections_dict

    conns = load_connections_dict(str(_render_file("connections.example.json", {}, tmp_path)))
    assert "endpoint_url" not in conns["bakeoff_s3"].extra_dejson
    assert conns["aws_default"].password in (None, "")


def test_placeholders_take_defaults_and_report_unset_names():
    unset: set[str] = set()
    value = {"a": "${X:-fallback}", "b": ["${Y}", "x-${Z:-}-y"], "c": 3}
    assert render(value, {"Y": "set"}, unset) == {"a": "fallback", "b": ["set", "x--y"], "c": 3}
    assert unset == set()
    assert render("${MISSING}", {}, unset) == "" and unset == {"MISSING"}


def test_variables_parse_and_default_the_plan(tmp_path):
    from airflow.secrets.local_filesystem import load_variables

    variables = load_variables(str(_render_file("variables.json", {"BAKEOFF_CLIENT_BUCKET": "acme-client"}, tmp_path)))
    assert variables["bakeoff_plan"]["value"] == "local-demo"
    assert variables["bakeoff_client_bucket"]["value"] == "acme-client"
    unset = load_variables(str(_render_file("variables.json", {}, tmp_path)))
    assert unset["bakeoff_client_bucket"]["value"] == "" and unset["bakeoff_client_conn_id"]["value"] == "aws_default"
    # no scheduled run starts anything until the operator names its first date (bakeoff.run.schedule_gate)
    from bakeoff.run.schedule_gate import VARIABLE, refusal

    assert unset[VARIABLE]["value"] == "" and refusal("scheduled", datetime.now(UTC), unset[VARIABLE]["value"])
    dated = load_variables(str(_render_file("variables.json", {"BAKEOFF_SCHEDULE_FROM": "2027-01-01"}, tmp_path)))
    assert dated[VARIABLE]["value"] == "2027-01-01"
    # reports go where BAKEOFF_REPORTS points (object storage or a folder): no separate upload to configure
    assert "bakeoff_s3_bucket" not in unset and "bakeoff_s3_conn_id" not in unset


def test_the_example_price_sheet_is_accepted_by_the_library_for_the_default_plan(tmp_path):
    from airflow.secrets.local_filesystem import load_variables

    from bakeoff.plan import load_plan
    from bakeoff.plan.prices import apply_price_sheet

    variables = load_variables(str(_render_file("variables.json", {}, tmp_path)))
    plan = load_plan(variables["bakeoff_plan"]["value"])
    priced = apply_price_sheet(plan, variables["bakeoff_price_sheet"]["value"])
    sheet = variables["bakeoff_price_sheet"]["value"]["prices"]
    for target in priced.targets:
        assert target.price is not None and target.price.usd_per_hour == sheet[target.instance_type]["usd_per_hour"]


def test_the_default_plan_exists():
    assert (ROOT / "include" / "plans" / "local-demo.yaml").exists()


def test_the_shipped_node_limits_cover_every_cloud_and_pass_the_librarys_check(tmp_path):
    """Per-cloud concurrency is one Variable the library enforces (bakeoff.clusters.node_slots), not Airflow pools."""
    from airflow.secrets.local_filesystem import load_variables

    from bakeoff.clusters.node_slots import VARIABLE, parse_limits
    from bakeoff.core.provider_facts import PROVISIONING

    variables = load_variables(str(_render_file("variables.json", {}, tmp_path)))
    raw = variables[VARIABLE]["value"]
    assert parse_limits(raw) == parse_limits(json.dumps(raw)) == raw and set(raw) == set(PROVISIONING)
    assert variables[VARIABLE]["description"] and not (CONFIG / "pools.json").exists()
