"""Which blocks of a new prompt the emulator has already computed: its prefix cache.

As vLLM's automatic prefix caching: a prompt is cut into blocks of BLOCK_TOKENS tokens (one word, one token);
block i's key hashes block i-1's key with block i's words (a chain), so one key names the whole prefix up to
it and two prompts share a key exactly when they share every token before it. At admission the longest run
of leading blocks the cache holds is a hit and is not prefilled again. Only full blocks count, and the
prompt's last token is always computed (its logits give the first output token), as in vLLM.

Blocks a running sequence uses are held (reference counted); the rest wait in an LRU list and are evicted,
least recently used first, when the KV cache needs the room: the roofline's KV capacity in blocks, less what
running sequences reserve. A finished sequence's blocks are released tail first, so a prefix outlives the
blocks that extend it. With a host tier (the target's kv_offload), blocks evicted from HBM move to a
host-memory LRU of host_memory_gb; a later hit there is loaded back (and leaves the host tier) at the
host link's bandwidth instead of being recomputed.

Keys use Python's hash: stable within one server process, which is all a cache needs. Hashing a prompt is
one pass over its words, already split for the token count: about 10 ms for 256k words.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bakeoff.plan.target import Target

BLOCK_TOKENS = 16  # vLLM's default block size


def block_keys(words: Sequence[str], block_tokens: int = BLOCK_TOKENS) -> list[int]:
    """Chain keys of the prompt's full blocks: key i covers words[: (i + 1) x block_tokens]."""
    keys: list[int] = []
    append = keys.append
    key = 0
    for block in zip(*[iter(words)] * block_tokens, strict=False):
        key = hash((key, block))
        append(key)
    return keys


@dataclass(frozen=True)
class Match:
    """A lookup's result in blocks: the leading run found in HBM, then the run after it found on the host."""

    hbm: int
    host: int


class PrefixCache:
    def __init__(self, capacity_blocks: int, host_capacity_blocks: int = 0, block_tokens: int = BLOCK_TOKENS):
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        self.block_tokens = block_tokens
        self.capacity_blocks = capacity_blocks
        self.host_capacity_blocks = host_capacity_blocks
        self.held: dict[int, int] = {}  # key -> sequences using it
        self.free: collections.OrderedDict[int, None] = collections.OrderedDict()  # cached, unused; LRU first
        self.host: collections.OrderedDict[int, None] = collections.OrderedDict()  # host tier; LRU first

    def match(self, keys: Sequence[int], max_blocks: int) -> Match:
        """The longest cached prefix of keys (at most max_blocks): HBM first, then the host tier after it."""
        limit = min(len(keys), max_blocks)
        held, free, host = self.held, self.free, self.host
        n = 0
        while n < limit and (keys[n] in held or keys[n] in free):
            n += 1
        m = n
        while m < limit and keys[m] in host:
            m += 1
        return Match(n, m - n)

    def acquire(self, keys: Sequence[int]) -> None:
        """Mark blocks as used by one more sequence (hit, loaded back from the host, or just computed)."""
        held, free, host = self.held, self.free, self.host
        for k in keys:
            if k in free:
                del free[k]
            elif k in host:
                del host[k]
            held[k] = held.get(k, 0) + 1

    def release(self, keys: Sequence[int]) -> None:
        """A sequence is done with these blocks; unused ones become evictable, the last block first."""
        held, free = self.held, self.free
        for k in reversed(keys):
            n = held[k] - 1
            if n:
                held[k] = n
            else:
                del held[k]
                free[k] = None

    def shrink(self, room_blocks: int) -> None:
        """Evict unused blocks (to the host tier, when there is one) until at most room_blocks remain."""
        free, host, host_cap = self.free, self.host, self.host_capacity_blocks
        while len(free) > max(0, room_blocks):
            k, _ = free.popitem(last=False)
            if host_cap:
                host[k] = None
                if len(host) > host_cap:
                    host.popitem(last=False)

    def summary(self) -> dict[str, Any]:
        return {
            "block_tokens": self.block_tokens,
            "capacity_blocks": self.capacity_blocks,
            "host_capacity_blocks": self.host_capacity_blocks,
        }


def _engine_flag(args: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def for_target(target: Target, kv_bytes_per_token: float, kv_capacity_tokens: int) -> PrefixCache | None:
    """The target's prefix cache, or None when its engine_args turn prefix caching off (vLLM's
    --no-enable-prefix-caching). The host tier holds kv_offload.host_memory_gb of blocks."""
    if _engine_flag(target.engine_args, "--no-enable-prefix-caching"):
        return None
    offload = target.kv_offload
    block_bytes = kv_bytes_per_token * BLOCK_TOKENS
    host_blocks = int(offload.host_memory_gb * 1e9 // block_bytes) if offload is not None else 0
    return PrefixCache(max(1, kv_capacity_tokens // BLOCK_TOKENS), host_blocks)
