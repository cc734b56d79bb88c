"""The report says, per target, where the client ran (and what a remote client's TTFT includes) and
whether power was measured on the node or estimated from the catalog."""

import json

import pandas as pd

from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.report.gather import _clients


def test_each_target_says_where_its_client_ran_and_where_power_came_from(tmp_path):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    raw["targets"][1]["provider_options"]["client_mode"] = "remote"
    plan = plan_from_dict(raw)
    amd, nv = plan.targets
    (tmp_path / f"target={nv.slug}").mkdir()
    (tmp_path / f"target={nv.slug}" / "deploy.json").write_text(json.dumps({"network": {"rtt_ms_p50": 41.5}}))
    points = pd.DataFrame({"target": [amd.slug, nv.slug], "power_w_per_gpu": [900.0, None]})
    text = _clients(plan, tmp_path, points)
    assert text[amd.slug] == "client co-located on the node (no network in TTFT) · power measured on the node"
    assert text[nv.slug] == (
        "client remote: network RTT p50 41.50 ms is inside every TTFT · power estimated from the catalog"
    )


def test_a_measured_targets_line_names_its_energy_method_library_interval_and_node_power(tmp_path):
    plan = load_plan("mi355x-vs-b200-sandbox")
    amd = plan.targets[0]
    points = pd.DataFrame(
        {
            "target": [amd.slug, amd.slug],
            "power_w_per_gpu": [900.0, 910.0],
            "energy_method": ["measured, energy counters, GPU only"] * 2,
            "energy_library": ["amdsmi=25.3.0.0"] * 2,
            "energy_sample_s": [1.0, 1.02],
            "node_power": ["missing: the node exposes no power reading (IPMI DCMI)"] * 2,
        }
    )
    text = _clients(plan, tmp_path, points)[amd.slug]
    assert text.endswith(
        "energy measured, energy counters, GPU only (amdsmi=25.3.0.0, sampled every 1 s); "
        "node power missing: the node exposes no power reading (IPMI DCMI)"
    )
