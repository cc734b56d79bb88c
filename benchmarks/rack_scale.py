"""Rack scale on paper: single-node vs disaggregated vs NVL72, from the vendored multi-node recipes.

    python benchmarks/rack_scale.py [--model deepseek-r1] [--precision nvfp4]

For every multi-node recipe of the model (and precision, if given) whose GPU is in the hardware
catalog, each arm's footprint (GPUs, nodes, racks, where the KV moves) and the emulator's paper model
of it (serving.emulator.disagg) beside one aggregated 8-GPU server of the same GPU at the same
concurrencies: output tokens/s per GPU, tokens/s per user and TTFT. Every figure is EMULATED: a
roofline with the emulator's default efficiencies, not a measurement; it shows the shape (where a
disaggregated pool wins, where KV over the NICs costs), not the level. Cluster provisioning, role
deployment and a client fleet are not built yet, so this prints no provisioning timeline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from bakeoff import catalog
from bakeoff.plan import multinode
from bakeoff.serving.emulator import disagg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-r1")
    ap.add_argument("--precision", default=None)
    args = ap.parse_args(argv)
    chosen = [
        r
        for r in multinode.multinode_recipes().values()
        if r.model == args.model and (args.precision is None or r.precision == args.precision)
    ]
    skipped = sorted({r.gpu for r in chosen if r.gpu not in catalog.gpus()})
    print(f"EMULATED. {len(chosen)} multi-node recipes of {args.model}; GPUs without a catalog entry: {skipped or '-'}")
    header = f"{'recipe':42} {'arm':>3} {'shape':14} {'conc':>5} {'gpus':>5} {'nodes':>5} {'racks':>5} "
    header += f"{'tok/s/gpu':>10} {'tok/s/user':>10} {'ttft s':>7} {'kv ms':>6} bound"
    print(header)
    for r in chosen:
        if r.gpu not in catalog.gpus():
            continue
        for i, arm in enumerate(r.arms):
            fp = r.footprint(arm)
            for p in disagg.disaggregated_curve(r, arm) + disagg.single_node_curve(r, arm):
                nodes, racks = (fp.nodes, fp.racks or "-") if p.shape == "disaggregated" else (1, "-")
                print(
                    f"{r.name:42} {i:>3} {p.shape:14} {p.concurrency:>5} {p.gpus:>5} {nodes:>5} {racks!s:>5} "
                    f"{p.output_tps_per_gpu:>10,.0f} {p.tps_per_user:>10,.1f} {p.ttft_s:>7.3f} "
                    f"{p.kv_transfer_s * 1e3:>6.2f} {p.bound}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
