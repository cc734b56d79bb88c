"""The capacity-refusal wordings bakeoff fails over on, held to what the clouds were seen to answer.

Each wording below is quoted from a public report of a real API answer (source and date beside it),
not from the sandbox fakes: a capacity refusal must send the create to the next region / AD, and a
configuration error must not (it would only be refused again everywhere, hiding the real error).
"""

from __future__ import annotations

import pytest
from oci.exceptions import ServiceError

from bakeoff.providers.aws.instance import CAPACITY_CODES
from bakeoff.providers.oci.instance import is_capacity
from bakeoff.providers.rest import CAPACITY_RE, refusal_reason

# (cloud answer, source, date): REST clouds answer 4xx with a message; CAPACITY_RE reads it
REST_CAPACITY = [
    # DigitalOcean POST /v2/droplets 422, the size out of stock in that region
    ("Size is not available in this region.", "github.com/pry0cc/axiom/issues/305", "2021-04-22"),
    ("Size is not available in this region.", "github.com/ChainSafe/forest-iac/pull/437", "2024-04-18"),
    # DigitalOcean 422 when droplet creation is disabled in a region ("limited availability")
    ("Region is not available", "github.com/digitalocean/api-v2/issues/41", "2014-07-02"),
]
REST_NOT_CAPACITY = [
    # Vultr 400 for a plan the endpoint does not take: a plan error, never a stockout
    ('{"error":"Invalid plan chosen.","status":400}', "github.com/vultr/vultr-cli/issues/385", "2023-12-07"),
]


@pytest.mark.parametrize("message,source,date", REST_CAPACITY)
def test_rest_capacity_refusals_fail_over(message, source, date):
    assert CAPACITY_RE.search(message), f"{source} ({date})"
    assert refusal_reason(message) == "capacity"


@pytest.mark.parametrize("message,source,date", REST_NOT_CAPACITY)
def test_a_plan_error_is_not_read_as_a_stockout(message, source, date):
    assert not CAPACITY_RE.search(message), f"{source} ({date})"


def test_vultr_sold_out_with_a_hyphen():
    # Vultr's portal said "temporarily sold-out" (github.com/joedicastro/vps-comparison/issues/27, 2017-05-29)
    assert CAPACITY_RE.search("Plan is temporarily sold-out")
    assert CAPACITY_RE.search("Plan is temporarily sold out")
    assert refusal_reason("Plan is temporarily sold-out") == "capacity"


def test_oci_out_of_host_capacity_fails_over():
    # LaunchInstance 500 InternalError "Out of host capacity." (github.com/jpetazzo/ampernetacle/issues/54,
    # 2023-09-06; Oracle's own github.com/oracle/karpenter-provider-oci/pull/36 maps it, 2026-06-09)
    assert is_capacity(ServiceError(500, "InternalError", {}, "Out of host capacity."))
    assert not is_capacity(ServiceError(400, "InvalidParameter", {}, "Invalid shape BM.GPU.X"))
    assert not is_capacity(ServiceError(500, "InternalError", {}, "Internal server error"))


def test_ec2_capacity_and_quota_codes():
    # the EC2 API's error codes (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html, as
    # quoted by gardener/machine-controller-manager-provider-aws pkg/aws/errors/codes.go v0.20.1 and
    # aws/aws-parallelcluster-node pull 673, 2025-06-27); botocore's EC2 model carries no error shapes
    codes = ("InsufficientInstanceCapacity", "InsufficientCapacity", "InstanceLimitExceeded", "VcpuLimitExceeded")
    for code in (*codes, "UnfulfillableCapacity"):
        assert code in CAPACITY_CODES
    assert "InvalidParameterValue" not in CAPACITY_CODES and "UnauthorizedOperation" not in CAPACITY_CODES
