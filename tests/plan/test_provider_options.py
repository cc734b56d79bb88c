"""provider_options as a union discriminated by the target's provider (plan/target.OPTIONS)."""

from __future__ import annotations

import copy

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.fielderrors import explain
from bakeoff.plan import PlanError, load_plan, plan_from_dict
from bakeoff.plan.options import AwsOptions, OciOptions, ProviderOptions, RestOptions, StaticOptions
from bakeoff.plan.target import OPTIONS


def _raw(provider: str = "aws") -> dict:
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"] = [copy.deepcopy(next(t for t in raw["targets"] if t["provider"] == provider))]
    return raw


def test_every_provider_has_its_options_class():
    assert set(OPTIONS) == set(PROVIDERS)
    assert OPTIONS["aws"] is AwsOptions and OPTIONS["oci"] is OciOptions and OPTIONS["static"] is StaticOptions
    assert OPTIONS["vultr"] is OPTIONS["digitalocean"] is RestOptions and OPTIONS["local"] is ProviderOptions


def test_a_target_reads_its_providers_options_and_round_trips():
    raw = _raw("aws")
    plan = plan_from_dict(raw)
    opts = plan.targets[0].provider_options
    assert isinstance(opts, AwsOptions) and opts.regions
    assert plan_from_dict(plan.model_dump(mode="json")).model_dump(mode="json") == plan.model_dump(mode="json")
    assert opts.get("subnet_ocid", "none") == "none"  # a common reader may ask for any field


def test_another_providers_option_is_refused_naming_whose_it_is_and_the_choices():
    raw = _raw("aws")
    raw["targets"][0]["provider_options"]["availability_domains"] = ["Uocm:US-ASHBURN-AD-1"]
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw)
    msg = str(e.value)
    assert "provider_options.availability_domains: an option of oci targets, not of aws ones" in msg
    assert "aws targets take: ami," in msg and "zones" in msg


def test_a_field_no_provider_has_and_a_bad_value_name_the_field():
    raw = _raw("vultr")
    raw["targets"][0]["provider_options"]["ssh_keys"] = ["k1"]
    with pytest.raises(PlanError, match=r"provider_options.ssh_keys: Extra inputs.*vultr targets take: .*ssh_key_ids"):
        plan_from_dict(raw)
    raw = _raw("aws")
    raw["targets"][0]["provider_options"]["ami"] = "not-an-ami"
    with pytest.raises(PlanError, match=r"provider_options.ami: String should match pattern"):
        plan_from_dict(raw)


def test_a_provider_option_error_reads_as_one_path_from_the_plan_root():
    """The options are checked by the target's model-level validator, whose message leads with the
    field: that path continues the target's own, so the line names one path a person can follow."""
    raw = _raw("aws")
    raw["targets"][0]["provider_options"]["ready_timeout_s"] = -5
    with pytest.raises(PlanError) as e:
        plan_from_dict(raw)
    assert "  targets[0].provider_options.ready_timeout_s: Input should be greater than 0" in str(e.value)
    assert "targets[0]: provider_options" not in str(e.value)


def test_the_path_joining_leaves_a_message_that_names_no_field_alone():
    class M(BaseModel):
        x: int = 0

        @model_validator(mode="after")
        def _check(self) -> M:
            raise ValueError("give either ami or ssm_parameter, not both")

    with pytest.raises(ValidationError) as e:
        M.model_validate({})
    assert explain(e.value) == "  (top level): give either ami or ssm_parameter, not both"


def test_a_static_target_without_options_still_needs_its_endpoint():
    raw = _raw("aws")
    t = raw["targets"][0]
    t.update(provider="static", instance_type=None, hardware={"gpu": "b200", "gpus": 8}, price={"usd_per_hour": 9.0})
    t.pop("provider_options")
    with pytest.raises(PlanError, match="provider_options.endpoint_connection: a static target needs its endpoint"):
        plan_from_dict(raw)
