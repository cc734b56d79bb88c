"""GPU power and provenance from the node itself (nvidia-smi / amd-smi), so energy per token is
measured rather than assumed.

The sampler runs on the node (started by the boot script) and appends one CSV row per GPU per
second to ``power.csv``: ``epoch_s,gpu,watts``. Provenance (driver, CUDA/ROCm, firmware, GPU name)
is written once as ``provenance.txt`` and echoed on the console with a ``bakeoff-provenance:``
prefix. The parsers below turn the tools' own output formats into rows; they are what the client
side uses once the files are fetched back.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SLACK_S = 1.0  # samples are ~1 s apart: a point shorter than that still gets the samples around it
# rows fetched around a point: two sampling intervals and a half, so a reading at or before its start and
# one at or after its end are there for the counter difference even when a sample comes late
FETCH_S = 2.5

_NVIDIA_SAMPLER = r"""
nvidia-smi --query-gpu=index,power.draw --format=csv,noheader,nounits -lms 1000 2>/dev/null \
  | while IFS=, read -r gpu watts; do echo "$(date +%s.%N),${{gpu// /}},${{watts// /}}"; done >> {dir}/power.csv &
{{ nvidia-smi --query-gpu=name,driver_version,vbios_version --format=csv,noheader; \
  nvidia-smi | grep -o 'CUDA Version: [0-9.]*'; }} \
  > {dir}/provenance.txt 2>&1
sed 's/^/bakeoff-provenance: /' {dir}/provenance.txt
"""

# ``amd-smi metric --power --json`` on stdin -> ``epoch_s,gpu,watts`` rows (the epoch is argv[1]): a list of
# GPUs, or (newer amd-smi) the list under "gpu_data"; socket_power a {value, unit} object or a bare value.
# No single quote: it travels inside one in the boot script.
AMD_ROWS_PY = """import json,sys
d=json.load(sys.stdin)
d=d.get("gpu_data",[d]) if isinstance(d,dict) else d
for g in d:
    p=(g.get("power") or {}).get("socket_power")
    v=p.get("value") if isinstance(p,dict) else p
    print(sys.argv[1], g.get("gpu"), v, sep=",")"""

_AMD_SAMPLER = r"""
(while true; do
  now=$(date +%s.%N)
  amd-smi metric --power --json 2>/dev/null | python3 -c '{rows_py}' "$now" >> {dir}/power.csv
  sleep 1
done) &
{{ amd-smi version --json; amd-smi static --asic --vbios --driver --json; }} > {dir}/provenance.txt 2>&1
sed 's/^/bakeoff-provenance: /' {dir}/provenance.txt | head -c 8000
"""


def sampler_script(vendor: str, log_dir: str) -> str:
    """Shell lines for the boot script: start the power sampler, record provenance once."""
    tmpl = _AMD_SAMPLER if vendor == "amd" else _NVIDIA_SAMPLER
    return tmpl.format(dir=log_dir, rows_py=AMD_ROWS_PY).strip()


def _watts(v: object) -> float | None:
    """A power value as amd-smi prints it across versions: 523, "523 W", {"value": 523, "unit": "W"}, "N/A"."""
    if isinstance(v, dict):
        v = v.get("value")
    if isinstance(v, (int, float)):
        return float(v)
    m = re.match(r"\s*([0-9.]+)", str(v or "").replace(",", ""))
    return float(m.group(1)) if m else None


def parse_nvidia_power(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=index,power.draw --format=csv,noheader,nounits`` (the boot sampler's) -> rows.
    Where the output keeps its header (``--format=csv``: ``timestamp, index, power.draw [W], ...``) the
    columns are found by name and the values may carry their unit (``380.42 W``)."""
    recs = list(csv.reader(io.StringIO(text)))
    gpu_col, watts_col = 0, 1
    names = [c.strip().split(" [", 1)[0] for c in recs[0]] if recs else []
    if "index" in names:
        power_col = next((i for i, n in enumerate(names) if n.startswith("power.draw")), None)
        if power_col is None:
            return []
        gpu_col, watts_col, recs = names.index("index"), power_col, recs[1:]
    rows = []
    for rec in recs:
        if len(rec) <= max(gpu_col, watts_col):
            continue
        w = _watts(rec[watts_col])
        if rec[gpu_col].strip().isdigit() and w is not None:
            rows.append({"gpu": int(rec[gpu_col]), "watts": w})
    return rows


def parse_amd_power(text: str) -> list[dict[str, Any]]:
    """``amd-smi metric --power --json`` -> rows (socket power per GPU)."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    rows: list[dict[str, Any]] = []
    for g in data:
        w = _watts((g.get("power") or {}).get("socket_power"))
        if w is not None:
            rows.append({"gpu": int(g.get("gpu", len(rows))), "watts": w})
    return rows


def parse_samples(text: str) -> list[dict[str, Any]]:
    """The samplers' ``power.csv`` -> rows, skipping partial lines: the CLI sampler's ``epoch_s,gpu,watts``,
    and the library sampler's longer rows (``serving.gpu_counters``: energy counter in J, clock,
    temperature, throttle reasons, source), whose fields a row carries only where they were read."""
    rows = []
    for rec in csv.reader(io.StringIO(text)):
        try:
            watts = _finite(rec[2]) if rec[2] else None
            row: dict[str, Any] = {"t": _finite(rec[0]), "gpu": int(rec[1]), "watts": watts}
            if len(rec) >= 8:
                row.update(energy_j=_finite(rec[3]) if rec[3] else None, throttle=_label(rec[6]), source=_label(rec[7]))
        except (IndexError, ValueError):
            continue
        if row["watts"] is not None or row.get("energy_j") is not None:
            rows.append(row)
    return rows


_LABEL = re.compile(r"[A-Za-z0-9_.=+-]{0,64}")


def _finite(text: str) -> float:
    """A number a node wrote; nan and inf are refused (a row of them is skipped), as is anything else."""
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"not a finite number: {text[:20]!r}")
    return v


def _label(text: str) -> str:
    """A library=version source or throttle reasons as a node wrote them: short plain tokens only (they
    reach the points table and its CSV); anything else is dropped to empty, the row's numbers kept."""
    text = text.strip()
    return text if _LABEL.fullmatch(text) else ""


def format_samples(rows: list[dict[str, Any]]) -> str:
    """Rows back as ``power.csv`` lines (the agent's /agent/power): the long form where a row has a counter
    or a source, so the client side reads what the node's sampler wrote."""

    def n(v: float | None, digits: int) -> str:
        return "" if v is None else f"{v:.{digits}f}"

    out = []
    for r in rows:
        line = f"{r['t']:.3f},{r['gpu']},{n(r['watts'], 2)}"
        if "source" in r:
            line += f",{n(r.get('energy_j'), 3)},,,{r.get('throttle', '')},{r['source']}"
        out.append(line + "\n")
    return "".join(out)


def energy_joules(samples: list[dict[str, Any]], start: float, end: float) -> float:
    """Energy of all GPUs over [start, end]: per GPU, trapezoids between consecutive samples."""
    total = 0.0
    by_gpu: dict[int, list[tuple[float, float]]] = {}
    for s in samples:
        if start <= s["t"] <= end and s["gpu"] >= 0 and s["watts"] is not None:
            by_gpu.setdefault(s["gpu"], []).append((s["t"], s["watts"]))
    for pts in by_gpu.values():
        pts.sort()
        total += sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(pts, pts[1:], strict=False))
    return total


def mean_watts_per_gpu(
    samples: list[dict[str, Any]], start: float, end: float, gpus: int | None = None
) -> float | None:
    """Mean power per GPU over [start, end] (widened by SLACK_S), averaged over GPUs 0..gpus-1 (the
    ones a TP x PP server uses; a node's idle GPUs would only dilute the figure); None without samples."""
    by_gpu: dict[int, list[float]] = {}
    for s in samples:
        if start - SLACK_S <= s["t"] <= end + SLACK_S and 0 <= s["gpu"] < (gpus or 1 << 16) and s["watts"] is not None:
            by_gpu.setdefault(s["gpu"], []).append(s["watts"])
    if not by_gpu:
        return None
    return sum(sum(w) / len(w) for w in by_gpu.values()) / len(by_gpu)


@dataclass(frozen=True)
class PowerFile:
    """The samplers' rows, read where they are written (the co-located client on the node): ``path`` (the
    library sampler's counters) where it has rows in the window, else ``fallback`` (the CLI sampler's).
    Picklable, so benchmark worker processes can take it along."""

    path: str
    fallback: str | None = None

    def __call__(self, start: float, end: float) -> list[dict[str, Any]]:
        for name in (self.path, self.fallback):
            p = Path(name) if name else None
            rows = parse_samples(p.read_text(errors="replace")) if p is not None and p.is_file() else []
            rows = [r for r in rows if start - FETCH_S <= r["t"] <= end + FETCH_S]
            if rows:
                return rows
        return []


def parse_nvidia_provenance(text: str) -> dict[str, Any]:
    """The provenance block of an NVIDIA node: GPU name, driver, VBIOS, CUDA version."""
    out: dict[str, Any] = {"vendor": "nvidia"}
    for line in text.splitlines():
        line = line.removeprefix("bakeoff-provenance: ").strip()
        m = re.search(r"CUDA Version: ([0-9.]+)", line)
        if m:
            out["cuda"] = m.group(1)
        elif line.count(",") == 2 and "driver" not in out:
            name, driver, vbios = (x.strip() for x in line.split(","))
            out.update(gpu_name=name, driver=driver, firmware=vbios)
    return out


def parse_amd_provenance(version_json: str, static_json: str | None = None) -> dict[str, Any]:
    """``amd-smi version --json`` (+ ``amd-smi static --asic --vbios --driver --json``) -> provenance."""
    out: dict[str, Any] = {"vendor": "amd"}
    v = json.loads(version_json)
    v = v[0] if isinstance(v, list) else v
    out["rocm"] = v.get("rocm_version")
    out["amd_smi"] = v.get("amdsmi_library_version") or v.get("version")
    if static_json:
        s = json.loads(static_json)
        g = s[0] if isinstance(s, list) else s.get("gpu_data", [s])[0]
        out["gpu_name"] = (g.get("asic") or {}).get("market_name")
        out["driver"] = (g.get("driver") or {}).get("version")
        out["firmware"] = (g.get("vbios") or {}).get("version") or (g.get("vbios") or {}).get("part_number")
    return out


def provenance_from_console(text: str | None, vendor: str | None) -> dict[str, Any]:
    """Provenance the boot script echoed on the node's console (``bakeoff-provenance:`` lines and the
    image digest), for clouds whose API returns the console (EC2); empty when there is none. ``vendor``
    None (a GPU the catalog does not know) reads the lines as AMD's JSON, as any vendor but nvidia."""
    if not text:
        return {}
    lines = [ln.split("bakeoff-provenance: ", 1)[1] for ln in text.splitlines() if "bakeoff-provenance: " in ln]
    digest = next(
        (
            ln.split("bakeoff-image-digest: ", 1)[1].strip()
            for ln in text.splitlines()
            if "bakeoff-image-digest: " in ln
        ),
        None,
    )
    out: dict[str, Any] = {}
    if lines and vendor == "nvidia":
        out = parse_nvidia_provenance("\n".join(lines))
    elif lines:
        docs, blob, dec, i = [], "\n".join(lines), json.JSONDecoder(), 0
        while i < len(blob):
            if blob[i] in "[{":
                try:
                    doc, i = dec.raw_decode(blob, i)
                    docs.append(json.dumps(doc))
                    continue
                except ValueError:
                    pass
            i += 1
        if docs:
            out = parse_amd_provenance(docs[0], docs[1] if len(docs) > 1 else None)
    if digest:
        out["image_digest"] = digest
    return out
