"""Power and provenance parsers on the tools' own output formats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.serving import power

FIXTURES = Path(__file__).parent / "fixtures"  # recorded outputs: fixtures/SOURCES.md
# Constructed, not recorded: the boot sampler's noheader,nounits form with an unsupported reading
NVIDIA_CSV = "0, 712.45\n1, 698.10\n2, [N/A]\n"
# Constructed, not recorded: amd-smi's shapes across versions ({value, unit} and "N/A"; a string with a unit)
AMD_NEW = json.dumps(
    [
        {"gpu": 0, "power": {"socket_power": {"value": 1180, "unit": "W"}, "power_management": "ENABLED"}},
        {"gpu": 1, "power": {"socket_power": {"value": "N/A", "unit": "W"}}},
    ]
)
AMD_OLD = json.dumps([{"gpu": 0, "power": {"socket_power": "1,050 W"}}, {"gpu": 1, "power": {"socket_power": 990}}])
NVIDIA_PROV = "bakeoff-provenance: NVIDIA B200, 580.82.07, 97.00.B9.00.3A\nbakeoff-provenance: CUDA Version: 13.0\n"
AMD_VERSION = json.dumps(
    [{"tool": "AMDSMI Tool", "version": "26.0.0+abc", "amdsmi_library_version": "26.0.0", "rocm_version": "7.0.1"}]
)
AMD_STATIC = json.dumps(
    [
        {
            "gpu": 0,
            "asic": {"market_name": "AMD Instinct MI355X"},
            "driver": {"version": "6.14.14"},
            "vbios": {"version": "022.040.003.043.000001"},
        }
    ]
)


def test_nvidia_power_rows_skip_unavailable():
    assert power.parse_nvidia_power(NVIDIA_CSV) == [{"gpu": 0, "watts": 712.45}, {"gpu": 1, "watts": 698.10}]


def test_nvidia_power_on_a_recorded_b200_run():
    """nvidia-smi's CSV as a B200 run recorded it (header, units, eight GPUs, three samples); GPU 0's
    watts are the figures the source states beside its file."""
    rows = power.parse_nvidia_power((FIXTURES / "nvidia_smi_query_gpu_csv_b200.csv").read_text())
    assert len(rows) == 24 and {r["gpu"] for r in rows} == set(range(8))
    assert [r["watts"] for r in rows if r["gpu"] == 0] == [380.42, 336.61, 337.18]
    assert rows[1] == {"gpu": 1, "watts": 392.58}


def test_amd_power_on_amd_smis_recorded_output():
    """`amd-smi metric -p --json` as AMD's changelog for ROCm 6.1.0 shows it: socket power 10 W."""
    recorded = (FIXTURES / "amd_smi_metric_power_rocm6.1.json").read_text()
    assert power.parse_amd_power(recorded) == [{"gpu": 0, "watts": 10.0}]
    # the boot script's AMD sampler turns the same output into power.csv rows, and newer amd-smi's
    # {"gpu_data": [...]} wrapper around the same list into the same rows
    wrapped = json.dumps({"gpu_data": json.loads(recorded)})
    for text in (recorded, wrapped):
        out = subprocess.run(
            [sys.executable, "-c", power.AMD_ROWS_PY, "1700000000.5"], input=text, text=True, capture_output=True
        )
        assert out.returncode == 0, out.stderr
        assert power.parse_samples(out.stdout) == [{"t": 1700000000.5, "gpu": 0, "watts": 10.0}]


def test_amd_power_both_json_shapes():
    assert power.parse_amd_power(AMD_NEW) == [{"gpu": 0, "watts": 1180.0}]
    assert power.parse_amd_power(AMD_OLD) == [{"gpu": 0, "watts": 1050.0}, {"gpu": 1, "watts": 990.0}]


def test_energy_is_trapezoids_per_gpu_within_the_window():
    rows = power.parse_samples("10.0,0,100\n11.0,0,300\n12.0,0,300\n10.0,1,50\n12.0,1,50\n13.0,0,9999\nbroken\n")
    # GPU0: (100+300)/2*1 + 300*1 = 500 J; GPU1: 50*2 = 100 J; the 13 s sample is outside the window
    assert power.energy_joules(rows, 10.0, 12.0) == pytest.approx(600.0)


def test_provenance_parsers():
    assert power.parse_nvidia_provenance(NVIDIA_PROV) == {
        "vendor": "nvidia",
        "gpu_name": "NVIDIA B200",
        "driver": "580.82.07",
        "firmware": "97.00.B9.00.3A",
        "cuda": "13.0",
    }
    amd = power.parse_amd_provenance(AMD_VERSION, AMD_STATIC)
    assert amd["rocm"] == "7.0.1" and amd["gpu_name"] == "AMD Instinct MI355X" and amd["driver"] == "6.14.14"


@pytest.mark.parametrize("vendor", ["amd", "nvidia"])
def test_sampler_script_is_valid_bash(vendor):
    subprocess.run(["bash", "-n"], input=power.sampler_script(vendor, "/var/log/bakeoff"), text=True, check=True)


def test_provenance_from_an_ec2_console():
    console = (
        "cloud-init v. 24.1 running\n"
        + NVIDIA_PROV
        + "bakeoff-image-digest: vllm/vllm-openai@sha256:"
        + "ab" * 32
        + "\nbakeoff: boot done\n"
    )
    got = power.provenance_from_console(console, "nvidia")
    assert got["driver"] == "580.82.07" and got["cuda"] == "13.0" and got["image_digest"].endswith("ab" * 32)
    amd_console = "\n".join(
        "bakeoff-provenance: " + ln
        for ln in (
            json.dumps(json.loads(AMD_VERSION), indent=1) + "\n" + json.dumps(json.loads(AMD_STATIC), indent=1)
        ).splitlines()
    )
    got = power.provenance_from_console(amd_console, "amd")
    assert got["rocm"] == "7.0.1" and got["gpu_name"] == "AMD Instinct MI355X"
    assert (
        power.provenance_from_console(None, "amd") == {} and power.provenance_from_console("no marks", "nvidia") == {}
    )
