"""What the emulator's prefix cache costs a long prompt: splitting it into words (done once for the token
count, as before the cache) and chain-hashing its 16-token blocks, best of several runs.

The keys should cost no more than the split (well under 50 ms for 256k words on one core): a prompt's
keys are computed on every request, so a slow hash would show up in every emulated TTFT.

    python benchmarks/prefix_cache_keys.py [--words 256000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import time

from bakeoff.serving.emulator.prefix_cache import BLOCK_TOKENS, block_keys
from bakeoff.tokens import VOCAB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=256_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    text = " ".join(random.Random(0).choices(VOCAB, k=args.words))
    split = keys = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ws = text.split()
        t1 = time.perf_counter()
        block_keys(ws)
        t2 = time.perf_counter()
        split, keys = min(split, t1 - t0), min(keys, t2 - t1)
    print(f"{args.words:,}-word prompt, {args.words // BLOCK_TOKENS:,} blocks, best of {args.repeat}:")
    print(f"  split      {split * 1e3:7.1f} ms")
    print(f"  block keys {keys * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
