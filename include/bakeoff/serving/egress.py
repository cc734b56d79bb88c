"""Connections to plan-chosen hosts: resolve the name once, check the address, connect to that address.

Why: a static ``base_url`` is checked when the run starts (``installation.check_static_endpoints``),
but the plan's author owns its DNS: a name that resolved to a public address then may resolve to
169.254.169.254 or loopback an hour later (rebinding), and a client that resolves again when it
connects would fetch the metadata service and put the answer in the report. So every client that
speaks to an endpoint (readiness, provenance, server metrics, the tokenizer, the benchmark client,
the worker's agent client, the accuracy client) goes through this module: for a guarded host each
connection resolves the name once here, refuses an internal address, and connects to the checked
address (TLS still verifies the name: it is sent as SNI and checked against the certificate).

Which hosts are guarded: those ``guard`` names (``start_run`` records the plan's static base_url
hosts unless the installation allows private endpoints, and every step that loads the run's plan
registers them). The list lives in this process's environment so that the benchmark's spawned load
processes inherit it. Other hosts (cloud nodes by IP, emulators on loopback, the installation's own
endpoint connections) connect as before, through the same transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import httpx

GUARD_ENV = "BAKEOFF_EGRESS_GUARDED"  # comma-separated host names, lower case
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's own default
getaddrinfo = socket.getaddrinfo  # the one resolver (tests swap it for one whose answer changes)


class EgressRefused(httpx.ConnectError):
    """A guarded host resolved to an internal address at connect time: no connection was made."""


def internal_address(addr: str) -> bool:
    """Loopback, link-local (the metadata service), private, ULA, unspecified, multicast, and the
    IPv4-mapped forms of those: anything that is not a global unicast address."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def _norm(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def guard(hosts: list[str] | tuple[str, ...] | set[str]) -> None:
    """Check these hosts at every connection from now on (in this process and the ones it starts)."""
    have = set(filter(None, os.environ.get(GUARD_ENV, "").split(",")))
    os.environ[GUARD_ENV] = ",".join(sorted(have | {_norm(h) for h in hosts if h}))


def guarded_hosts() -> list[str]:
    """The hosts this process guards (a client fleet's message carries them to its members)."""
    return sorted(filter(None, os.environ.get(GUARD_ENV, "").split(",")))


@contextlib.contextmanager
def guarding(hosts: list[str]) -> Iterator[None]:
    """Guard ``hosts`` too while the block runs (a long-lived client worker, one point's member at a
    time), then only what was guarded before."""
    before = os.environ.get(GUARD_ENV)
    guard(hosts)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(GUARD_ENV, None)
        else:
            os.environ[GUARD_ENV] = before


def guarded(host: str) -> bool:
    return _norm(host) in set(os.environ.get(GUARD_ENV, "").split(","))


def checked_address(host: str, port: int) -> tuple[int, tuple[Any, ...]]:
    """(family, sockaddr) to connect to: the first answer of one lookup, after every answer was
    checked when the host is guarded (raises EgressRefused naming the address)."""
    infos = getaddrinfo(_norm(host), port, type=socket.SOCK_STREAM)
    if not infos:
        raise EgressRefused(f"{host} does not resolve")
    if guarded(host):
        bad = sorted({str(i[4][0]) for i in infos if internal_address(str(i[4][0]))})
        if bad:
            raise EgressRefused(
                f"{host} now resolves to {bad[0]}, an internal address (it was checked when the run started): "
                "not connecting; name the endpoint by an installation connection "
                "(provider_options.endpoint_connection) if it is private"
            )
    family, sockaddr = infos[0][0], infos[0][4]
    return int(family), tuple(sockaddr)


def _pinned(request: httpx.Request) -> httpx.Request:
    """The request aimed at the checked address of a guarded host (Host header and SNI keep the name)."""
    host = request.url.host
    if not guarded(host):
        return request
    port = request.url.port or (443 if request.url.scheme == "https" else 80)
    _, sockaddr = checked_address(host, port)
    request.url = request.url.copy_with(host=str(sockaddr[0]))
    if request.url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": host}
    return request


class PinnedTransport(httpx.HTTPTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return super().handle_request(_pinned(request))


class AsyncPinnedTransport(httpx.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request = await asyncio.get_running_loop().run_in_executor(None, _pinned, request)
        return await super().handle_async_request(request)


def client(
    *, verify: ssl.SSLContext | str | bool = True, limits: httpx.Limits | None = None, **kw: Any
) -> httpx.Client:
    """An httpx.Client whose connections go through PinnedTransport (``verify`` is the transport's)."""
    return httpx.Client(transport=PinnedTransport(verify=verify, limits=limits or _LIMITS), **kw)


def async_client(
    *, verify: ssl.SSLContext | str | bool = True, limits: httpx.Limits | None = None, **kw: Any
) -> httpx.AsyncClient:
    transport = AsyncPinnedTransport(verify=verify, limits=limits or _LIMITS)
    return httpx.AsyncClient(transport=transport, **kw)
