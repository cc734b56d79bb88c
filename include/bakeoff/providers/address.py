"""Where emulated nodes and routers listen: an address of this host that the other workers reach.

A node provisioned on one worker is checked, deployed, benchmarked and terminated from whichever
worker runs the next step, so it must not listen on that worker's loopback. $BAKEOFF_NODE_ADDRESS
names the address: an IP of this host (a compose worker's, a network namespace's veth), or
``@hostname`` (this host's own name, resolved: one setting serves every scaled worker). Unset, it
is 127.0.0.1: nodes reachable from this host only, as a one-machine install needs.

Guarded as loopback is: an emulated node serves plain http, so the address must be loopback or
private (10/8, 172.16/12, 192.168/16, fc00::/7), never public, link-local or every interface;
and a node on a non-loopback address needs the run's API key (the local provider refuses one without).
"""

from __future__ import annotations

import ipaddress
import os
import socket

from bakeoff.providers.base import ProviderError

ADDRESS_ENV = "BAKEOFF_NODE_ADDRESS"
LOOPBACK = "127.0.0.1"
_FIX = (
    f"set {ADDRESS_ENV} to a private IP address of this host that the other workers reach "
    "(10.0.0.5, fd00::5) or @hostname, or unset it to listen on 127.0.0.1 (this host only)"
)


class NodeAddressError(ProviderError):
    """$BAKEOFF_NODE_ADDRESS is not an address emulated nodes may listen on."""


def node_address() -> str:
    """The checked address from $BAKEOFF_NODE_ADDRESS (127.0.0.1 when unset)."""
    raw = os.environ.get(ADDRESS_ENV, "").strip()
    if not raw:
        return LOOPBACK
    shown = raw[:80]
    if raw == "@hostname":
        try:
            raw = socket.gethostbyname(socket.gethostname())
        except OSError as e:
            raise NodeAddressError(
                f"{ADDRESS_ENV}=@hostname: this host's name does not resolve ({e}); {_FIX}"
            ) from None
    try:
        ip = ipaddress.ip_address(raw.strip("[]"))
    except ValueError:
        raise NodeAddressError(f"{ADDRESS_ENV}={shown!r}: not an IP address; {_FIX}") from None
    why = (
        "every interface"
        if ip.is_unspecified
        else "multicast"
        if ip.is_multicast
        else "link-local"
        if ip.is_link_local
        else "public"
        if ip.is_global
        else None
    )
    if why:
        raise NodeAddressError(
            f"{ADDRESS_ENV}={shown!r} is {why}: an emulated node serves plain http, so it listens only on "
            f"loopback or a private address; {_FIX}"
        )
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET) as s:
            s.bind((str(ip), 0))
    except OSError:
        raise NodeAddressError(f"{ADDRESS_ENV}={shown!r} is not an address of this host; {_FIX}") from None
    return str(ip)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def url_host(host: str) -> str:
    """The host as a URL names it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
