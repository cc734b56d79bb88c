"""Command line: ``python -m bakeoff.serving.emulator --config CONFIG.json --port 0 --port-file F``.

Port 0 binds a free port and writes it to --port-file (atomically, once listening), so a parent
process can start many emulators at once without choosing ports. With --tls-cert/--tls-key it
serves https with that certificate, as a cloud node's server does (the sandbox's nodes use the
certificate their user-data carries, so clients exercise the real pinning path). Mode "roofline" runs the
aiohttp app (server.py), mode "scripted" the raw-socket scripted server (scripted.py); --cpu pins the
process to one core (a scripted server measuring a client on another). Exits on SIGTERM/SIGINT, or by
itself at the config's expires_at, so no emulator outlives its run even if its parent died.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from aiohttp import web

from bakeoff import durable
from bakeoff.serving.emulator import scripted
from bakeoff.serving.emulator.config import EmulatorConfig, EmulatorConfigError, load_config
from bakeoff.serving.emulator.server import build_app, until_stopped
from bakeoff.serving.tls import server_context
from bakeoff.twin.roofline import Roofline

log = logging.getLogger("bakeoff.emulator")


def write_port_file(path: Path, port: int) -> None:
    durable.write_atomic(path, f"{port}\n".encode())


async def serve(
    config: EmulatorConfig, host: str, port: int, port_file: Path | None, ssl_context: ssl.SSLContext | None = None
) -> None:
    listener, runner = None, None
    if config.mode == "scripted":
        listener = scripted.serve(config, host, port, ssl_context)
        bound = listener.port
    else:
        runner = web.AppRunner(build_app(config), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True, ssl_context=ssl_context)
        await site.start()
        bound = runner.addresses[0][1]
    if port_file:
        write_port_file(port_file, bound)
    log.info(
        "emulator listening on %s:%s tls=%s mode=%s model=%s auth=%s time_scale=%s",
        host,
        bound,
        "on" if ssl_context else "off",
        config.mode,
        config.served_model,
        "on" if config.api_key() else "off",
        config.time_scale,
    )
    await until_stopped(config.expires_at)
    log.info(
        "emulator on port %s stopping%s",
        bound,
        " (expired)" if config.expires_at and time.time() >= config.expires_at else "",
    )
    if listener:
        listener.close()
    if runner:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bakeoff.serving.emulator",
        description="bakeoff's hardware emulator: an OpenAI-compatible server whose "
        "timing models a GPU node (every figure it yields is EMULATED).",
    )
    ap.add_argument("--config", required=True, help="emulator config JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    ap.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    ap.add_argument("--tls-cert", type=Path, help="serve https with this certificate (PEM)")
    ap.add_argument("--tls-key", type=Path, help="the certificate's private key (PEM)")
    ap.add_argument("--cpu", type=int, help="pin this process to one CPU")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        if config.target is not None and config.mode == "roofline":  # the config requires the target there
            Roofline.for_target(config.target)  # fail here, not on the first request
    except (EmulatorConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ssl_context = None
    if bool(args.tls_cert) != bool(args.tls_key):
        print("error: --tls-cert and --tls-key: give both or neither", file=sys.stderr)
        return 2
    if args.tls_cert:
        try:
            ssl_context = server_context(str(args.tls_cert), str(args.tls_key))
        except (OSError, ValueError) as e:
            print(f"error: --tls-cert/--tls-key: cannot load them ({type(e).__name__})", file=sys.stderr)
            return 2
    if args.cpu is not None:
        try:
            os.sched_setaffinity(0, {args.cpu})
        except (OSError, ValueError) as e:
            print(f"error: --cpu {args.cpu}: cannot pin to it ({e}); give a CPU this process may use", file=sys.stderr)
            return 2
    run: Callable[[Coroutine[Any, Any, None]], None]  # uvloop.run and asyncio.run differ only in keywords
    try:
        import uvloop  # noqa: PLC0415 - optional: the emulator runs on asyncio's loop without it

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    run(serve(config, args.host, args.port, args.port_file, ssl_context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
