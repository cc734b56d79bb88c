"""Every cloud name in the catalog says where it is from, or that it is unverified; plan check warns,
naming the field, when a plan would send an unverified one."""

from __future__ import annotations

import copy

import pytest
import yaml

from bakeoff import catalog
from bakeoff.cli import main
from bakeoff.plan import load_plan, plan_from_dict
from bakeoff.plan.names import unverified_names
from bakeoff.providers import digitalocean, vultr
from bakeoff.providers.aws.instance import DEFAULT_SSM_PARAMETER

CLOUDS = ("aws", "oci", "vultr", "digitalocean")


def test_every_cloud_name_carries_a_dated_source_or_says_unverified():
    rows = catalog._load("instances.yaml")["instances"]
    for row in [*rows, *catalog._load("instances.yaml")["images"]]:
        assert "name_ref" in row, f"{row.get('type') or row.get('value')}: name_ref missing"
        ref = row["name_ref"]
        assert ref == "unverified" or (ref.get("source") and ref.get("as_of")), row
    assert {r.provider for r in catalog.instance_types().values()} >= set(CLOUDS)


def test_a_name_ref_without_a_date_is_refused():
    with pytest.raises(ValueError, match="give \\{source, as_of\\} or the word unverified"):
        catalog._name_ref({"source": "somewhere"})
    assert not catalog._name_ref("unverified").verified and catalog._name_ref({"source": "s", "as_of": "d"}).verified


def test_the_catalog_defaults_are_the_ones_the_providers_launch():
    images = catalog.default_images()
    assert images["aws"].value == DEFAULT_SSM_PARAMETER
    assert images["digitalocean"].value == digitalocean.DEFAULT_IMAGE
    assert images["vultr"].value == vultr.DEFAULT_OS_ID


def _plan(provider: str, instance_type: str, **options):
    raw = load_plan("mi355x-vs-b200-sandbox").model_dump(mode="json")
    t = copy.deepcopy(next(x for x in raw["targets"] if x["provider"] == "vultr"))
    t.update(provider=provider, instance_type=instance_type)
    t["provider_options"].update(options)
    raw["targets"] = [t]
    return raw


def test_plan_check_names_the_unverified_field(capsys, tmp_path, monkeypatch):
    raw = _plan("digitalocean", "gpu-mi355x8-2304gb-spot", regions=["atl1"])
    raw["targets"][0]["price"] = {"usd_per_hour": 20.0}  # the catalog has none for it
    (tmp_path / "do.yaml").write_text(yaml.safe_dump(raw))
    assert main(["plan", "check", str(tmp_path / "do.yaml")]) == 0
    out = capsys.readouterr().out
    assert "is unverified" not in out  # the size now has a dated source
    assert "provider_options.os_image: unset, so the default" not in out  # gpu-amd-base has a dated source
    assert "may lack Docker: the boot script checks on the node" in out  # what the image provides is not known
    # every instance type has a source today: a row that loses its source is warned about again
    rows = dict(catalog.instance_types())
    row = rows["gpu-mi355x8-2304gb-spot"]
    rows[row.type] = row.model_copy(update={"name_ref": catalog.NameRef()})
    monkeypatch.setattr(catalog, "instance_types", lambda: rows)
    assert main(["plan", "check", str(tmp_path / "do.yaml")]) == 0
    out = capsys.readouterr().out
    assert "warning: targets[0].instance_type: digitalocean name 'gpu-mi355x8-2304gb-spot' is unverified" in out


def test_the_names_confirmed_from_sources_say_where(monkeypatch):
    """The OCI shapes from Oracle's own repository, the Vultr MI300X plan and the DigitalOcean MI355X
    size from dated third-party catalogs; the Vultr os_id and the DLAMI parameter stay unverified."""
    rows = catalog.instance_types()
    oci_shapes = (
        "BM.GPU.MI355X.8",
        "BM.GPU.MI300X.8",
        "BM.GPU.B200.8",
        "BM.GPU.B300.8",
        "BM.GPU.GB200.4",
        "BM.GPU.GB300.4",
    )
    for shape in oci_shapes:
        assert "oracle-quickstart/oci-hpc-oke" in rows[shape].name_ref.source and rows[shape].name_ref.verified
    assert "gpuhunt" in rows["vbm-256c-2048gb-8-mi300x-gpu"].name_ref.source
    assert "Slugs.ts at 9b59a8ad" in rows["gpu-mi355x8-2304gb-spot"].name_ref.source
    images = catalog.default_images()
    assert not images["vultr"].name_ref.verified and not images["aws"].name_ref.verified


def test_a_verified_slug_and_a_plan_chosen_image_give_no_warning():
    ok = plan_from_dict(_plan("digitalocean", "gpu-mi300x8-1536gb", regions=["atl1"]))
    assert unverified_names(ok) == []
    vultr_default = plan_from_dict(_plan("vultr", "vbm-256c-3072gb-8-mi355x-gpu"))
    assert [w.split(":")[0] for w in unverified_names(vultr_default)] == ["targets[0].provider_options.os_image"]
    vultr_own = plan_from_dict(_plan("vultr", "vbm-256c-3072gb-8-mi355x-gpu", os_image=1743))
    assert unverified_names(vultr_own) == []


def test_local_targets_borrowing_a_cloud_row_are_not_warned():
    assert unverified_names(load_plan("local-demo")) == []
