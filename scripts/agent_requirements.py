"""Generate (or check) the node's hash-pinned requirements files: the agent's, and the OCI SDK's
that the OCI self-delete kill switch installs (``bakeoff/serving/requirements-oci-sdk.txt``).

The node installs the agent's third-party packages with ``pip install --require-hashes``, so a
compromised index or mirror cannot swap a wheel. The file pins the whole dependency closure of the
``agent`` extra in pyproject.toml (``bakeoff.serving.bundle.AGENT_REQUIREMENTS``) at the versions this
worker runs (requirements.txt), with the SHA-256 of the wheel pip picks on the node (CPython 3.11,
manylinux x86_64, the agent image's platform).

    python scripts/agent_requirements.py            # regenerate (downloads the wheels once, via pip)
    python scripts/agent_requirements.py --check    # offline: the file's pins match this worker's

Run it after ``make lock`` moves one of those pins or the ``agent`` extra changes; a test runs ``--check``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff.serving import bundle, oci_sdk

# glibc 2.36 (Debian bookworm): pip on the node tries these platform tags in this order
PLATFORMS = [f"manylinux_2_{m}_x86_64" for m in range(36, 16, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]


def generate(out: Path, pins: tuple[str, ...] | None = None, header: str = bundle.HASHES_HEADER) -> str:
    pins = bundle.closure_pins() if pins is None else pins
    with tempfile.TemporaryDirectory() as d:
        pip = [sys.executable, "-m", "pip"] if importlib.util.find_spec("pip") else [shutil.which("pip") or "pip"]
        argv = [
            *pip,
            "--isolated",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "--abi",
            "abi3",
            "--abi",
            "none",
            "--dest",
            d,
        ]
        for p in PLATFORMS:
            argv += ["--platform", p]
        subprocess.run(argv + list(pins), check=True)
        wheels = {_name(w.name): w for w in Path(d).glob("*.whl")}
        lines = [header]
        for pin in pins:
            name = pin.split("==")[0]
            wheel = wheels[bundle.normalize(name)]
            lines.append(f"{pin} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}  # {wheel.name}")
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    return text


def _name(wheel_file: str) -> str:
    return bundle.normalize(wheel_file.split("-")[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare the committed file with this worker's pins")
    args = ap.parse_args()
    if args.check:
        problems = bundle.hashes_mismatch() + oci_sdk.mismatch()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    generate(bundle.HASHES_FILE)
    print(f"wrote {bundle.HASHES_FILE}")
    generate(oci_sdk.HASHES_FILE, oci_sdk.pins(), oci_sdk.HEADER)
    print(f"wrote {oci_sdk.HASHES_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
