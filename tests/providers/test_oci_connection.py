"""The oci_default Airflow connection -> OCI provider credentials (plugins/bakeoff_connections.py)."""

from __future__ import annotations

import json

import bakeoff_connections
from bakeoff.providers.oci import OciProvider
from bakeoff_sandbox import oci as fake_oci
from bakeoff_sandbox.oci import throwaway_api_key


def test_oci_connection_gives_sdk_config_and_masks_the_key(monkeypatch):
    pem, fingerprint = throwaway_api_key()
    monkeypatch.setenv(
        "AIRFLOW_CONN_OCI_DEFAULT",
        json.dumps(
            {
                "conn_type": "generic",
                "login": fake_oci.USER,
                "password": pem,
                "extra": {
                    "tenancy": fake_oci.TENANCY,
                    "fingerprint": fingerprint,
                    "region": "us-ashburn-1",
                    "compartment_id": fake_oci.COMPARTMENT,
                    "service_endpoint": "http://127.0.0.1:5998",
                    "bakeoff_address_map_url": "http://127.0.0.1:6000/address",
                },
            }
        ),
    )
    creds = bakeoff_connections.resolve("oci")
    assert creds == {
        "user": fake_oci.USER,
        "key_content": pem,
        "tenancy": fake_oci.TENANCY,
        "fingerprint": fingerprint,
        "region": "us-ashburn-1",
        "compartment_id": fake_oci.COMPARTMENT,
        "service_endpoint": "http://127.0.0.1:5998",
        "address_map_url": "http://127.0.0.1:6000/address",
    }
    p = OciProvider(creds)  # a complete config: the SDK accepts it and the key loads
    assert p.default_compartment == fake_oci.COMPARTMENT and p.service_endpoint == "http://127.0.0.1:5998"
    assert "oci" in bakeoff_connections.configured_providers()
    seen = []
    monkeypatch.setattr(bakeoff_connections, "mask_secret", seen.append)
    bakeoff_connections.masked(bakeoff_connections.resolve)("oci")
    assert seen == [pem]


def test_no_oci_connection_gives_no_credentials(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_OCI_DEFAULT", raising=False)
    assert bakeoff_connections.resolve("oci") == {}


def test_the_emulated_nodes_extra_counts_only_as_the_literal_true(monkeypatch):
    """The sandbox's oci_default says ``bakeoff_emulated_nodes: true``; a real account's never does, and a
    string or 1 there claims nothing (a cluster target is then refused at provision, before any create)."""
    pem, fingerprint = throwaway_api_key()
    seen = {}
    for claim in (True, "true", 1, None):
        extra = {"tenancy": fake_oci.TENANCY, "fingerprint": fingerprint, "region": "us-ashburn-1"}
        if claim is not None:
            extra["bakeoff_emulated_nodes"] = claim
        conn = {"conn_type": "generic", "login": fake_oci.USER, "password": pem, "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_OCI_DEFAULT", json.dumps(conn))
        seen[repr(claim)] = OciProvider(bakeoff_connections.resolve("oci")).emulated_nodes
    assert seen == {"True": True, "'true'": False, "1": False, "None": False}
