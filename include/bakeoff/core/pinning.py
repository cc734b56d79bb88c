"""Clients that pin a node's own certificate (see serving/tls.py for why per-node certificates):
the node's PEM loaded as the only trust anchor, ``CERT_REQUIRED`` kept, hostname checking off (the
pin names the one acceptable key; a bare IP has no name). Here, beside ``Endpoint``, so every layer
that talks to a node pins it the same way; it needs nothing but the standard library.
"""

from __future__ import annotations

import re
import ssl

_PEM_CERT = re.compile(r"\s*-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+-----END CERTIFICATE-----\s*")


def check_cert(cert_pem: str, field: str = "tls_cert") -> str:
    """The PEM if it is exactly one parseable certificate; else a clear error naming the field."""
    ok = isinstance(cert_pem, str) and bool(_PEM_CERT.fullmatch(cert_pem))
    if ok:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=cert_pem)
        except (ssl.SSLError, ValueError):
            ok = False
    if not ok:
        raise ValueError(
            f"{field}: not one PEM certificate; give the node's certificate as '-----BEGIN CERTIFICATE-----...'"
        )
    return cert_pem


def pinned_context(cert_pem: str) -> ssl.SSLContext:
    """A client context that accepts only the server holding this certificate's key (see module doc)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # the node has no name; the pinned anchor is the identity check
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=check_cert(cert_pem))
    return ctx


def client_context(base_url: str, cert_pem: str | None) -> ssl.SSLContext | bool:
    """What an httpx client passes as ``verify``: the pinned context when a node certificate is
    known, else the system's CA verification (https) -- never "off"."""
    if cert_pem:
        if not base_url.startswith("https://"):
            raise ValueError(
                f"endpoint: {base_url!r} is plain http but the node has a pinned certificate; use its https:// URL"
            )
        return pinned_context(cert_pem)
    return True
