"""Per-node TLS: a self-signed certificate for each run's target, and clients that pin it.

Why per-node self-signed certificates rather than a public CA: a cloud node has no DNS name and its
IP is unknown when the certificate is made, so no CA could vouch for it. Instead the worker makes
the node's key pair, hands the private key to the node inside its user-data (a root-only file),
and every client trusts exactly that one certificate (``core.pinning.pinned_context``).

Why derived rather than random: the key is HMAC(installation secret, "tls/<run>/<target>"), like the
run's API key (``bakeoff.secrets``). A retried provision that finds the node already running gets
the same certificate the node was booted with, and no task has to store or pass a private key.
The certificate is public: instance.json and endpoint dicts carry it so later tasks pin it.

Why "pinning, not verify-off": ``pinned_context`` loads the node's certificate as the *only* trust
anchor and keeps ``CERT_REQUIRED``; the handshake succeeds only if the server proves possession of
that node's private key. Hostname checking is off because the pin already names the one acceptable
key, and a bare IP has no name to check. A server presenting any other certificate -- a public-CA
one included -- fails the handshake before the Bearer key is sent.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import ssl
from dataclasses import dataclass

from bakeoff import secrets
from bakeoff.core.pinning import check_cert

# Only node_identity (on the worker) needs ``cryptography``; the rest runs on the node agent too,
# whose pinned installs do not include it, so it uses the standard library's ssl alone.

# The node's key dies with the node; the pin, not the validity window, is what limits trust.
_NOT_BEFORE = _dt.datetime(2020, 1, 1, tzinfo=_dt.UTC)
_NOT_AFTER = _dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_dt.UTC)  # RFC 5280: no expiry
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


@dataclass(frozen=True)
class NodeTLS:
    """A node's certificate (public, PEM) and private key (PEM; only ever written into user-data)."""

    cert_pem: str
    key_pem: str

    def __repr__(self) -> str:  # never shows the private key
        return f"NodeTLS(sha256={fingerprint(self.cert_pem)[:16]}...)"


def node_identity(run_id: str, slug: str) -> NodeTLS:
    """The EC P-256 key and self-signed certificate of one run's target (deterministic, see above)."""
    return _identity(secrets.derive(f"tls/{run_id}/{slug}"), slug)


def stand_in_identity(slug: str) -> NodeTLS:
    """A throwaway identity of the same shape and size as the target's: what ``plan check`` sizes a
    boot script with, before any run (and so any derived key) exists."""
    return _identity(os.urandom(32), slug)


def _identity(seed: bytes, slug: str) -> NodeTLS:
    from cryptography import x509  # noqa: PLC0415 - worker-only dependency
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415 - worker-only dependency
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415 - worker-only dependency
    from cryptography.x509.oid import NameOID  # noqa: PLC0415 - worker-only dependency

    scalar = int.from_bytes(hashlib.sha512(seed).digest(), "big") % (_P256_ORDER - 1) + 1
    key = ec.derive_private_key(scalar, ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"bakeoff-{slug}"[:64])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(int.from_bytes(seed[:16], "big") >> 1 | 1)
        .not_valid_before(_NOT_BEFORE)
        .not_valid_after(_NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256(), ecdsa_deterministic=True)
    )
    return NodeTLS(
        cert.public_bytes(serialization.Encoding.PEM).decode(),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
    )


def fingerprint(cert_pem: str) -> str:
    """SHA-256 of the certificate's DER bytes, hex (what a person compares by eye, and logs)."""
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(check_cert(cert_pem).strip())).hexdigest()


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The node side: serve the certificate the user-data delivered."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx
