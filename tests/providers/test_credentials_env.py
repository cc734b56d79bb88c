"""Credentials without Airflow: each cloud's fields from the environment variables its registry entry names."""

from __future__ import annotations

import json

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.providers.credentials import CREDENTIALS_ENV, credentials_from_env


def _clear(monkeypatch):
    monkeypatch.delenv(CREDENTIALS_ENV, raising=False)
    for info in PROVIDERS.values():
        for name in info.env.values():
            monkeypatch.delenv(name, raising=False)


def test_each_field_comes_from_its_named_variable_when_set(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("VULTR_API_KEY", "vk")
    monkeypatch.setenv("OCI_USER_OCID", "ocid1.user.oc1..x")
    monkeypatch.setenv("OCI_PRIVATE_KEY", "PEM")
    monkeypatch.setenv("OCI_REGION", "")  # set but empty: left out
    assert credentials_from_env("vultr") == {"token": "vk"}
    assert credentials_from_env("oci") == {"user": "ocid1.user.oc1..x", "key_content": "PEM"}
    assert credentials_from_env("digitalocean") == {}
    assert credentials_from_env("aws") == {}  # boto3's own chain
    assert credentials_from_env("local") == {}


def test_the_json_entry_wins_over_the_variables(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("DIGITALOCEAN_TOKEN", "from-env")
    monkeypatch.setenv(CREDENTIALS_ENV, json.dumps({"digitalocean": {"token": "from-json", "base_url": "http://x"}}))
    assert credentials_from_env("digitalocean") == {"token": "from-json", "base_url": "http://x"}


def test_a_rest_cloud_names_its_token_and_api_base_variables():
    rest = [p for p in PROVIDERS.values() if p.api_base]
    assert rest and all({"token", "base_url"} <= set(p.env) for p in rest)
