"""Command line: ``python -m bakeoff.serving.emulator --config CONFIG.json --port 0 --port-file F``.

Port 0 binds a free port and writes it to --port-file (atomically, once listening), so a parent
process can start many emulators at once without choosing ports. With --tls-cert/--tls-key it
serves https with that certificate, as a cloud node's server does (the sandbox's nodes use the
certificate their user-data carries, so clients exercise the real pinning path). Exits on SIGTERM/SIGINT, or by
itself at the config's expires_at, so no emulator outlives its run even if its parent died.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

from aiohttp import web

from bakeoff import durable
from bakeoff.serving.emulator.config import EmulatorConfig, EmulatorConfigError, load_config
from bakeoff.serving.emulator.server import build_app

log = logging.getLogger("bakeoff.emulator")


def write_port_file(path: Path, port: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    durable.replace(tmp, path)


async def serve(config: EmulatorConfig, host: str, port: int, port_file: Path | None, ssl_context=None) -> None:
    app = build_app(config)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if config.expires_at is not None:
        loop.call_later(max(0.0, config.expires_at - time.time()), stop.set)
    await stop.wait()
    log.info(
        "emulator on port %s stopping%s",
        bound,
        " (expired)" if config.expires_at and time.time() >= config.expires_at else "",
    )
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
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        if config.mode == "roofline":
            from bakeoff.serving.emulator.roofline import Roofline

            Roofline.for_target(config.target)  # fail here, not on the first request
    except (EmulatorConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ssl_context = None
    if bool(args.tls_cert) != bool(args.tls_key):
        print("error: --tls-cert and --tls-key: give both or neither", file=sys.stderr)
        return 2
    if args.tls_cert:
        from bakeoff.serving.tls import server_context

        try:
            ssl_context = server_context(str(args.tls_cert), str(args.tls_key))
        except (OSError, ValueError) as e:
            print(f"error: --tls-cert/--tls-key: cannot load them ({type(e).__name__})", file=sys.stderr)
            return 2
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    run(serve(config, args.host, args.port, args.port_file, ssl_context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
