"""The provider registry: each entry's declared facts match what its class does, and every list the
rest of bakeoff keeps (DAG groups, plan checks, reaper, budget, connections) is the registry's."""

from __future__ import annotations

import typing

import pytest

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.plan import installed_plans, load_plan
from bakeoff.providers import Provider, ProviderError, get_provider
from bakeoff.providers.registry import provider_class
from bakeoff.providers.rest import RestProvider

ENTRIES = list(PROVIDERS.values())


@pytest.mark.parametrize("info", ENTRIES, ids=lambda i: i.name)
def test_declared_methods_match_the_class(info):
    cls = provider_class(info.name)
    assert issubclass(cls, Provider) and cls.name == info.name
    assert callable(getattr(cls, "cleanup", None)) == info.cleanup, "cleanup declared <=> the class has it"
    assert callable(getattr(cls, "console_output", None)) == info.console_output
    assert issubclass(cls, RestProvider) == (info.api_base is not None), "a REST cloud declares its API root"


@pytest.mark.parametrize("info", ENTRIES, ids=lambda i: i.name)
def test_declared_kind_is_consistent(info):
    assert info.launches == (info.provisions or info.emulated)
    assert not info.spends or info.provisions, "only nodes bakeoff provisions bill"
    assert not info.tls or info.provisions, "a per-node certificate is made only for a node bakeoff boots"
    assert info.boot_h == 0.0 if not info.provisions else info.boot_h > 0
    assert (info.conn_id is not None) == info.provisions
    assert info.client_mode == ("co-located" if info.provisions else "remote")


def test_a_plan_targets_default_client_mode_is_the_registrys():
    seen = set()
    for name in installed_plans():
        for t in load_plan(name).targets:
            if t.provider_options.client_mode is None:
                assert t.client_mode == PROVIDERS[t.provider].client_mode, (name, t.name)
                seen.add(t.provider)
    assert {"local", "aws"} <= seen


def test_the_rest_clouds_use_their_declared_api_root():
    for name in ("vultr", "digitalocean"):
        p = get_provider(name, {"token": "t"})
        assert p.base_url == PROVIDERS[name].api_base


def test_an_endpoint_provider_starts_nothing():
    """static serves an existing endpoint: nothing for the sweep or the reaper to find."""
    assert not PROVIDERS["static"].launches and get_provider("static").list_tagged(None) == []


def test_every_list_is_derived_from_the_registry():
    import bakeoff_connections
    from bakeoff.cleanup import reaper
    from bakeoff.plan.target import CLOUD_PROVIDERS, ProviderName
    from bakeoff.serving.deploy import LOCAL_PROVIDERS

    assert set(typing.get_args(ProviderName)) == set(PROVIDERS)
    assert set(CLOUD_PROVIDERS) == {n for n, p in PROVIDERS.items() if p.provisions}
    assert set(reaper.CLOUD_PROVIDERS) == {n for n, p in PROVIDERS.items() if p.launches}
    assert set(LOCAL_PROVIDERS) == {n for n, p in PROVIDERS.items() if p.emulated}
    assert bakeoff_connections.CONN_IDS == {n: p.conn_id for n, p in PROVIDERS.items() if p.conn_id}


def test_the_node_limits_apply_to_the_providers_bakeoff_provisions():
    """One DAG group runs every provider's targets; what bounds a cloud is the library's node limit,
    which a provider bakeoff provisions may have and no other (the emulator, existing endpoints)."""
    from bakeoff.clusters.node_slots import NodeLimitError, parse_limits

    clouds = {n for n, p in PROVIDERS.items() if p.provisions}
    assert parse_limits({n: 2 for n in clouds}) == {n: 2 for n in clouds}
    for name in set(PROVIDERS) - clouds:
        with pytest.raises(NodeLimitError, match=f"key '{name}'"):
            parse_limits({name: 2})


def test_an_unknown_provider_names_the_known_ones():
    with pytest.raises(ProviderError, match="known: aws, digitalocean, local, oci, static, vultr"):
        get_provider("gcp")


def test_the_budget_takes_boot_hours_and_spending_from_the_registry():
    from bakeoff.spend import budget

    rows = {
        r["provider"]: r for n in ("mi355x-vs-b200", "local-demo") for r in budget.estimate(load_plan(n))["targets"]
    }
    assert {"local", "aws", "vultr"} <= set(rows)
    for provider, row in rows.items():
        assert row["boot_h"] == PROVIDERS[provider].boot_h and row["spends"] == PROVIDERS[provider].spends
        assert (row["load_h"] > 0) == PROVIDERS[provider].provisions


CLOUDS = [p for p in ENTRIES if p.provisions]


@pytest.mark.parametrize("info", CLOUDS, ids=lambda i: i.name)
def test_a_cloud_carries_its_plug_in_pieces_beside_its_provider(info):
    """Its pre-flight, fake, image fields and environment names are declared with it and resolve."""
    import importlib.util

    from bakeoff import catalog
    from bakeoff.plan.target import OPTIONS
    from bakeoff.providers.preflight_checks import checks_of

    assert callable(checks_of(info.name)), "its pre-flight's checks"
    module, home = info.preflight.split(":")[0], info.cls.split(":")[0]
    assert module == home or module.startswith(home + "."), "in its provider's module or package"
    assert info.fake and importlib.util.find_spec(info.fake) is not None, "the sandbox module faking its API"
    assert info.image_fields and set(info.image_fields) <= set(OPTIONS[info.name].model_fields)
    default = catalog.default_images().get(info.name)
    assert default is None or default.field in info.image_fields, "the catalog's default image is set by one of them"
    assert info.user_data_max_bytes is None or info.user_data_max_bytes > 16384
    assert (info.self_delete is not None) == (info.kill_switch == "self-delete"), "a self-delete names its section"


@pytest.mark.parametrize("info", [p for p in ENTRIES if not p.provisions], ids=lambda i: i.name)
def test_what_launches_no_cloud_node_has_no_cloud_pieces(info):
    assert info.preflight is None and info.fake is None and not info.image_fields and not info.env
    assert info.self_delete is None


def test_a_cloud_with_a_vendored_api_definition_has_its_prose_rules_named():
    from bakeoff_sandbox.spec_rules import RULES
    from tests.conftest import ROOT

    specs = {p.stem for p in (ROOT / "include" / "bakeoff_sandbox" / "specs").glob("*.json")}
    assert specs <= {c.name for c in CLOUDS}
    assert specs == {r.cloud for r in RULES}
