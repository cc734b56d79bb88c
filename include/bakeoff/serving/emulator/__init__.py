"""The hardware emulator: an OpenAI-compatible server that times its answers like a given GPU node.

It lets a whole bake-off (provision, deploy, benchmark, validate, cost, report, teardown) run on
one laptop with the real code paths: real HTTP, real SSE streaming in vLLM's exact format, and
latencies from a continuous-batching roofline model of the target's hardware (server.py, engine.py),
with a prefix cache (prefix_cache.py) and speculative decoding (speculation.py) when the target has them,
or fixed, scripted latencies from the raw-socket reference server a client is measured against
(scripted.py). Everything it produces is emulated and must be labelled so.

Start it with ``python -m bakeoff.serving.emulator --config CONFIG.json [--host H] [--port P]
[--port-file PATH]``; see config.py for the file's fields. With power_csv set it also appends EMULATED
GPU power samples like the node's sampler (power.py).
"""

VERSION = "0.1.0"
