"""``bakeoff agent``: the node agent, as the boot script starts it on a serving node.

    python -m bakeoff agent --serve-url https://127.0.0.1:8000 --key-file /etc/bakeoff/api_key
        --log-dir /var/log/bakeoff --work-dir /var/lib/bakeoff [--port 8089] [--host 0.0.0.0]
        [--tls-cert /etc/bakeoff/tls/node.crt --tls-key /etc/bakeoff/tls/node.key]
        [--secrets-file /etc/bakeoff/secrets/serve.env]

The key is read from a root-only file (never an argument, which any process listing shows). With
--tls-cert/--tls-key the agent serves https with the node's certificate (the worker pins it) and
pins the local server with the same certificate. It stops by itself at --expires-at, like the
node's own kill switch.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.agent import COUNTERS_CSV
from bakeoff.core.launch import AGENT_PORT
from bakeoff.serving import gpu_counters
from bakeoff.serving.tls import server_context

if TYPE_CHECKING:
    import ssl

    from bakeoff.agent.server import Agent


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "agent",
        help="the node agent: run benchmarks next to the server (on the node)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--serve-url", required=True, help="the serving stack on this node, e.g. http://127.0.0.1:8000")
    p.add_argument("--key-file", type=Path, required=True, help="file holding the run's per-target key")
    p.add_argument("--log-dir", type=Path, required=True, help="where the boot script writes logs and power.csv")
    p.add_argument("--work-dir", type=Path, required=True, help="where jobs write their results")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all; the node's firewall decides)")
    p.add_argument("--port", type=int, default=AGENT_PORT, help=f"port to listen on (default {AGENT_PORT})")
    p.add_argument("--bundle", default=None, help="SHA-256 of the client bundle this agent runs from (reported)")
    p.add_argument("--expires-at", type=float, default=None, help="epoch seconds: stop then")
    p.add_argument("--tls-cert", type=Path, default=None, help="the node's certificate (PEM): serve https with it")
    p.add_argument("--tls-key", type=Path, default=None, help="the node's private key (PEM, root-only file)")
    p.add_argument(
        "--secrets-file",
        type=Path,
        default=None,
        help="accept PUT /agent/secrets and write them here (root-only env file)",
    )
    p.add_argument(
        "--gpu-vendor",
        choices=("nvidia", "amd"),
        default=None,
        help="read the GPUs' energy counters through this vendor's library (NVML, amdsmi) where it loads",
    )
    p.set_defaults(func=handle)
    return p


def handle(args: argparse.Namespace) -> int:
    from bakeoff.agent.server import Agent  # noqa: PLC0415 - aiohttp: loaded when the agent runs, not for every command

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        key = args.key_file.read_text().strip()
    except OSError as e:
        raise SystemExit(f"--key-file: cannot read {args.key_file.name}: {e.strerror}") from None
    if not key:
        raise SystemExit("--key-file: the file is empty; the boot script writes the run's key there")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("--tls-cert and --tls-key: give both (the node's certificate and its key) or neither")
    ssl_ctx = None
    if args.tls_cert:
        try:
            ssl_ctx = server_context(str(args.tls_cert), str(args.tls_key))
        except (OSError, ValueError) as e:
            raise SystemExit(
                f"--tls-cert/--tls-key: cannot load the node's certificate and key: {type(e).__name__}"
            ) from None
    pin = str(args.tls_cert) if args.tls_cert and args.serve_url.startswith("https://") else None
    agent = Agent(
        serve_url=args.serve_url,
        key=key,
        log_dir=args.log_dir,
        work_dir=args.work_dir,
        bundle=args.bundle,
        secrets_file=args.secrets_file,
        serve_cert=pin,
    )
    if args.gpu_vendor:
        source = gpu_counters.start_thread(args.gpu_vendor, args.work_dir / COUNTERS_CSV)
        logging.info("energy counters: %s", source or "no vendor library; the CLI power sampler's rows are used")
    asyncio.run(_serve(agent, args.host, args.port, args.expires_at, ssl_ctx))
    return 0


async def _serve(
    agent: Agent, host: str, port: int, expires_at: float | None, ssl_ctx: ssl.SSLContext | None = None
) -> None:
    from aiohttp import web  # noqa: PLC0415 - loaded when the agent runs, not for every bakeoff command

    from bakeoff.agent.server import build_app  # noqa: PLC0415 - aiohttp, as above

    runner = web.AppRunner(build_app(agent), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_ctx).start()
    logging.info("bakeoff agent on %s://%s:%s for %s", "https" if ssl_ctx else "http", host, port, agent.serve_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if expires_at:
        loop.call_later(max(0.0, expires_at - time.time()), stop.set)
    await stop.wait()
    await runner.cleanup()
