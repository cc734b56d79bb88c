"""Airflow connections -> provider credentials (plugins/bakeoff_connections.py)."""

from __future__ import annotations

import json

import bakeoff_connections
from bakeoff.run import pipeline, step_context


def test_rest_connection_gives_token_and_base_url(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_DIGITALOCEAN_DEFAULT",
        json.dumps(
            {
                "conn_type": "http",
                "host": "https://api.devcloud.amd.com/v2",
                "password": "do-token",
                "extra": {"poll_s": 2},
            }
        ),
    )
    monkeypatch.setenv("AIRFLOW_CONN_VULTR_DEFAULT", json.dumps({"conn_type": "http", "password": "v-token"}))
    assert bakeoff_connections.resolve("digitalocean") == {
        "token": "do-token",
        "base_url": "https://api.devcloud.amd.com/v2",
        "poll_s": 2,
    }
    assert bakeoff_connections.resolve("vultr") == {"token": "v-token", "base_url": "https://api.vultr.com/v2"}
    assert set(bakeoff_connections.configured_providers()) >= {"local", "vultr", "digitalocean"}


def test_bare_host_gets_the_api_version_path(monkeypatch):
    """config/connections.example.json gives bare hosts; the providers' paths live under /v2."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_VULTR_DEFAULT",
        json.dumps({"conn_type": "http", "host": "https://api.vultr.com", "password": "v"}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_DIGITALOCEAN_DEFAULT",
        json.dumps({"conn_type": "http", "host": "api.devcloud.amd.com/", "password": "d"}),
    )
    assert bakeoff_connections.resolve("vultr")["base_url"] == "https://api.vultr.com/v2"
    assert bakeoff_connections.resolve("digitalocean")["base_url"] == "https://api.devcloud.amd.com/v2"


def test_aws_connection_gives_a_session_and_endpoint(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDEXAMPLE",
                "password": "secret",
                "extra": {
                    "region_name": "us-west-2",
                    "endpoint_url": "http://127.0.0.1:5999",
                    "bakeoff_address_map_url": "http://127.0.0.1:6000/address",
                },
            }
        ),
    )
    creds = bakeoff_connections.resolve("aws")
    assert creds["session"].region_name == "us-west-2" and creds["endpoint_url"] == "http://127.0.0.1:5999"
    assert creds["session"].get_credentials().access_key == "AKIDEXAMPLE"
    assert creds["address_map_url"] == "http://127.0.0.1:6000/address"


def test_the_resolver_is_passed_into_the_pipeline(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_VULTR_DEFAULT", json.dumps({"conn_type": "http", "password": "v-token"}))
    creds = bakeoff_connections.credentials_resolver()
    provider = step_context.provider_for("vultr", creds)
    assert provider.base_url == "https://api.vultr.com/v2" and creds("vultr")["token"] == "v-token"
    assert not hasattr(pipeline, "set_credentials_resolver")  # no module-global resolver to leak between tasks


def test_tokens_and_run_keys_are_registered_with_the_log_masker(monkeypatch, data_root):
    seen = []
    monkeypatch.setattr(bakeoff_connections, "mask_secret", seen.append)
    monkeypatch.setenv("AIRFLOW_CONN_VULTR_DEFAULT", json.dumps({"conn_type": "http", "password": "v-token"}))
    run = pipeline.start_run("mi355x-vs-b200-sandbox", "manual__mask")
    step_context.provider_for("vultr", bakeoff_connections.credentials_resolver(run["run_dir"]))
    from bakeoff import secrets

    assert set(seen) == {"v-token"} | {secrets.api_key("manual__mask", s) for s in run["targets"]}
