"""The evidence bundle: one zip per run that a negotiation can stand on, and its verification.

What is in it: every file the run stored (the plan as run, step records, per-request and per-point
Parquet, validation results, cost tables), the report files, ``price_sheet.json`` (the prices each
target was costed at, their sources and the SHA-256 of the buyer's whole sheet), ``provenance.json``
(per target: images by digest, engine arguments, drivers, instance ids and types, regions), and
``MANIFEST.json`` (the SHA-256 and size of every other file, plus a summary of what the bundle
shows) with ``MANIFEST.sig``, an Ed25519 signature over the manifest's exact bytes.

Why a zip: each member is compressed and CRC-checked on its own, so a changed byte is traced to the
file it changed (a gzip'd tar fails as a whole). The signing key is derived from the installation
secret (bakeoff.secrets: $BAKEOFF_SECRET_KEY, else the 0600 secret.key under the data root), so
there is no second key to store; its public half goes in the manifest and is printed by
``python -m bakeoff verify --show-key`` for whoever must check bundles elsewhere.

A bundle is untrusted input when verified: members are read by name from the archive (never
extracted), names that are absolute, hold ``..`` or repeat are refused, the archive must hold
nothing but its listed entries laid end to end (what a streaming extractor reads from the local
headers is what the central directory lists), the manifest's shape is checked before anything large
is read, no member is inflated unless the signature holds under a trusted key, and every byte is
hashed against the signed manifest. Without a trusted key (``--public-key`` or this installation's)
the outcome is "signature valid, signer unknown", never "verified". Building refuses any file
holding a known secret (the installation secret, a serving key of the run, a private key block).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bakeoff import secrets, store
from bakeoff.core.facts import RunFacts
from bakeoff.core.provider_facts import PROVIDERS
from bakeoff.paths import StorePath, at, safe_name, state_root
from bakeoff.spend import offers
from bakeoff.spend.approval import approval_line

if TYPE_CHECKING:
    from bakeoff.plan import Plan
    from bakeoff.plan.target import Target

FORMAT = "bakeoff-evidence/1"
MANIFEST, SIGNATURE = "MANIFEST.json", "MANIFEST.sig"
PRICES, PROVENANCE = "price_sheet.json", "provenance.json"
RESULTS, REPORTS = "results", "report"  # folders inside the bundle
_KEY_LABEL = "evidence-signing/v1"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed member times: the same files give the same bytes
_MAX_MANIFEST_BYTES = 64 * 1024 * 1024
_MAX_MANIFEST_DEPTH = 16  # the manifest nests 4 deep; anything deeper is not one
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_SECRETISH = re.compile(r"key|secret|passw|authoriz|credential|(^|[._])token$", re.I)


class BundleError(ValueError):
    """A bundle that cannot be built (it would hold a secret) or read (not a bundle); says which file."""


# --- the key -------------------------------------------------------------------------------------


def signing_key() -> Ed25519PrivateKey:
    """This installation's signing key, derived from its secret (never stored)."""
    return Ed25519PrivateKey.from_private_bytes(secrets.derive(_KEY_LABEL))


def public_key_hex(key: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat  # noqa: PLC0415 - cryptography only for this step

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def installation_public_key() -> str | None:
    """The installation's public key (hex), or None where this machine holds no installation secret
    (verifying must not create one)."""
    if os.environ.get("BAKEOFF_SECRET_KEY") is None and not (state_root() / "secret.key").exists():
        return None
    return public_key_hex(signing_key().public_key())


def key_id(public_hex: str) -> str:
    """A short fingerprint to name a key by: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(bytes.fromhex(public_hex)).hexdigest()[:16]


# --- building --------------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _price_sheet(plan: Plan, sheet_sha256: str | None) -> dict[str, Any]:
    rows = {}
    for t in plan.targets:
        try:
            usd: float | None = t.usd_per_hour
        except ValueError:
            usd = None
        rows[t.name] = {"usd_per_hour": usd, "source": t.price_source, "contract": bool(t.price)}
    return {"sheet_sha256": sheet_sha256, "targets": rows}


def _clean(doc: object) -> Any:
    """``doc`` without keys that name a secret, whatever a provider or server put there."""
    if isinstance(doc, dict):
        return {k: _clean(v) for k, v in doc.items() if not _SECRETISH.search(str(k))}
    if isinstance(doc, list):
        return [_clean(v) for v in doc]
    return doc


def _provenance(plan: Plan, run_dir: StorePath, run: RunFacts) -> dict[str, Any]:
    """Per target what ran where, from the records its steps wrote (what was asked, what the node said)."""
    out = {}
    for t in plan.targets:
        tdir = run_dir / f"target={safe_name(t.slug)}"
        inst = store.read_json(tdir / "instance.json") or {}
        deploy = store.read_json(tdir / "deploy.json") or {}
        steps = run.target(t.slug)
        node = dict(deploy.get("node") or {})
        ids = [tr.instance_id for tr in steps.provision.tries] if steps.provision else []
        ids += list(steps.terminate.instances) if steps.terminate else []
        out[t.name] = _clean(
            {
                "provider": t.provider,
                "instance_type": inst.get("instance_type") or t.instance_type,
                "instance_ids": sorted({i for i in ids if i}),
                "region": inst.get("region"),
                "gpu": f"{t.instance.gpus}x {t.gpu.name}",
                "model": t.model,
                "checkpoint": t.checkpoint_id,
                "quantization": t.quantization,
                "tensor_parallel": t.tensor_parallel,
                "image": deploy.get("image") or t.image,
                "image_digest": node.pop("image_digest", None),
                **_engine_args(t, deploy),
                "driver": node,
                "emulated": steps.deploy.emulated if steps.deploy else bool(t.emulated),
            }
        )
    return out


def _engine_args(target: Target, deploy: dict[str, Any]) -> dict[str, Any]:
    """The engine command the node was given; for an emulated node, the one a real node would get."""
    if deploy.get("engine_args"):
        return {"engine_args": deploy["engine_args"], "engine_args_source": "as deployed"}
    if PROVIDERS[target.provider].existing_endpoint:
        return {"engine_args": None, "engine_args_source": "not deployed by bakeoff (an existing endpoint)"}
    from bakeoff import engines  # noqa: PLC0415 - the renderers load the serving catalog

    try:
        rendered = engines.command(target, target.stack_spec.port or 8000)
    except (ValueError, KeyError, AttributeError):  # a static endpoint, or a stack bakeoff does not render
        return {"engine_args": list(target.engine_args or []), "engine_args_source": "plan"}
    why = "rendered for a real node (not run: emulated)" if target.emulated else "rendered (deploy recorded none)"
    return {"engine_args": rendered, "engine_args_source": why}


def _files_under(root: StorePath) -> list[StorePath]:
    return sorted((p for p in root.rglob("*") if p.is_file()), key=str)


def _relative(path: StorePath, root: StorePath) -> str:
    return str(path)[len(str(root)) :].lstrip("/")


def _check_no_secret(name: str, data: bytes, known: list[bytes]) -> None:
    if _PRIVATE_KEY.search(data) or secrets.holds_installation_secret(data) or any(k in data for k in known):
        raise BundleError(
            f"{name}: holds a secret (a serving key, the installation secret or a private key), so no "
            "bundle is built; find what wrote it there and remove it from the results store"
        )


def build(
    plan: Plan,
    run_dir: str | StorePath,
    report_paths: dict[str, str],
    dest_dir: str | StorePath,
    *,
    failed_steps: list[str] | tuple[str, ...] = (),
    known_secrets: list[str] | tuple[str, ...] = (),
) -> StorePath:
    """Write the run's evidence bundle into ``dest_dir`` and return its path.
    ``known_secrets``: values no file may hold (the run's serving keys); the installation secret is added."""
    run_dir = at(run_dir)
    plan = offers.as_ran(plan, run_dir)  # the price in force is that of the type that ran
    run = store.run_facts(run_dir)
    run_id = run.run_id
    known = [s.encode() for s in known_secrets if s]
    members: dict[str, bytes] = {}
    for f in _files_under(run_dir):
        members[f"{RESULTS}/{_relative(f, run_dir)}"] = f.read_bytes()
    for ref in sorted(report_paths.values()):
        src = at(ref)
        members[f"{REPORTS}/{src.name}"] = src.read_bytes()
    members[PRICES] = json.dumps(_price_sheet(plan, run.start.price_sheet_sha256), indent=2, sort_keys=True).encode()
    members[PROVENANCE] = json.dumps(_provenance(plan, run_dir, run), indent=2, sort_keys=True).encode()
    for name, data in members.items():
        _check_no_secret(name, data, known)
    key = signing_key()
    public = public_key_hex(key.public_key())
    manifest = {
        "format": FORMAT,
        "plan": plan.name,
        "run_id": run_id,
        "created_at": time.time(),
        "public_key": public,
        "key_id": key_id(public),
        "shows": _shows(plan, run_dir, run, members, failed_steps),
        "files": {n: {"sha256": _sha256(d), "bytes": len(d)} for n, d in sorted(members.items())},
    }
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in [(MANIFEST, body), (SIGNATURE, key.sign(body).hex().encode()), *sorted(members.items())]:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    path = at(dest_dir) / bundle_name(plan.name, run_id)
    return store.write_bytes(path, buf.getvalue())


def bundle_name(plan_name: str, run_id: str) -> str:
    return f"bakeoff-{safe_name(plan_name)}-{safe_name(run_id)}-evidence.zip"


def _shows(
    plan: Plan, run_dir: StorePath, run: RunFacts, members: dict[str, bytes], failed: list[str] | tuple[str, ...]
) -> dict[str, Any]:
    """The claims the signed manifest makes about the run, for verify to print."""
    head = store.read_json(run_dir / "cost.json") or {}
    validation = store.read_json(run_dir / "validation.json") or {}
    return {
        "started_at": run.start.started_at,
        "emulated": bool(head.get("emulated", run.emulated or plan.emulated)),
        "status": "failed" if failed else "success",
        "failed_steps": list(failed),
        "headline": head.get("summary", ""),
        "validation_passed": validation.get("passed"),
        "targets": [t.name for t in plan.targets],
        "estimate_usd": run.start.budget.estimate_usd,
        "measured_cost_usd": head.get("evaluation_cost_usd"),
        "approval": run.approval.as_shown() if run.approval else None,
        "prices_sha256": _sha256(members[PRICES]),
        "buyer_sheet_sha256": run.start.price_sheet_sha256,
        "requests_files": sum(1 for n in members if "/requests/" in n),
        "points_files": sum(1 for n in members if "/points/" in n),
    }


# --- verifying -------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What verify found: ``errors`` empty means every hash and the signature check; ``ok`` also
    needs the signer to be a key the reader trusts (``signer_known``)."""

    path: str
    errors: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    key_trust: str = ""
    signer_known: bool = False
    checked_files: int = 0
    checked_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors and self.signer_known

    @property
    def signer_unknown(self) -> bool:
        """Intact and signed as it says, by a key nobody here vouches for: not verified."""
        return not self.errors and not self.signer_known


def _safe_member(name: str) -> bool:
    p = PurePosixPath(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts and "\\" not in name and not name.endswith("/")


def _hash_member(z: zipfile.ZipFile, name: str, limit: int) -> tuple[str, int]:
    """SHA-256 and size of a member, reading at most ``limit`` + 1 bytes (the size the manifest signed)."""
    h, size = hashlib.sha256(), 0
    with z.open(name) as f:
        while size <= limit and (chunk := f.read(min(1 << 20, limit + 1 - size))):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _raw_name(info: zipfile.ZipInfo) -> bytes:
    return info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")


def _layout_errors(path: str | os.PathLike[str], z: zipfile.ZipFile) -> list[str]:
    """Bytes a streaming extractor would see that the central directory does not list: data before
    the first entry or between entries, a local header naming another file, a trailing comment.
    A bundle is written as its listed entries end to end, then the directory, then its end record."""
    with open(path, "rb") as f:
        pos = 0
        for info in sorted(z.infolist(), key=lambda i: i.header_offset):
            if info.header_offset != pos:
                return [f"bytes {pos}..{info.header_offset} of the archive belong to no listed entry"]
            f.seek(pos)
            head = f.read(30)
            if len(head) < 30 or head[:4] != b"PK\x03\x04":
                return [f"{info.filename}: no local header where the directory says it starts"]
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            if f.read(name_len) != _raw_name(info):
                return [
                    f"{info.filename}: its local header names another file (a streaming extractor would write that)"
                ]
            if info.flag_bits & 0x08:
                return [f"{info.filename}: a data descriptor, which bundles never have"]
            pos += 30 + name_len + extra_len + info.compress_size
        directory = sum(46 + len(_raw_name(i)) + len(i.extra) + len(i.comment) for i in z.infolist())
        start_dir = int(getattr(z, "start_dir", -1))  # ZipFile's undocumented central-directory offset
        end = os.fstat(f.fileno()).st_size - start_dir - directory
    if start_dir != pos:
        return [f"bytes {pos}..{start_dir} of the archive belong to no listed entry"]
    if z.comment or end not in (22, 22 + 56 + 20):  # the end record, with zip64's record and locator
        return ["the archive has bytes after its directory that no listed entry holds"]
    return []


def _manifest(body: bytes) -> dict[str, Any]:
    """The manifest, its shape checked: ``files`` maps names to a SHA-256 and a byte count,
    ``public_key`` is 64 hex digits, ``shows`` an object. Raises BundleError naming the field."""
    try:
        doc = json.loads(body)
    except RecursionError:
        raise BundleError("nested too deep to be a manifest") from None
    except ValueError as e:
        raise BundleError(f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BundleError("not a JSON object")
    if store.json_depth(doc, _MAX_MANIFEST_DEPTH) > _MAX_MANIFEST_DEPTH:
        raise BundleError(f"nested deeper than {_MAX_MANIFEST_DEPTH} levels")
    if not isinstance(doc.get("public_key"), str) or not _HEX64.fullmatch(doc["public_key"].lower()):
        raise BundleError("public_key: expected 64 hex digits (an Ed25519 public key)")
    if not isinstance(doc.get("shows", {}), dict):
        raise BundleError("shows: expected an object")
    files = doc.get("files")
    if not isinstance(files, dict):
        raise BundleError("files: expected an object of file name -> {sha256, bytes}")
    for name, entry in files.items():
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not _HEX64.fullmatch(entry["sha256"])
            or isinstance(entry.get("bytes"), bool)
            or not isinstance(entry.get("bytes"), int)
            or entry["bytes"] < 0
        ):
            raise BundleError(f"files[{name[:80]!r}]: expected {{sha256: 64 hex digits, bytes: a count}}")
    return doc


def verify(path: str | os.PathLike[str], public_key: str | None = None) -> Verdict:
    """Check a bundle's layout, its manifest's signature and every file against the manifest. The
    key trusted is ``public_key`` (hex), else this installation's; with neither, an intact bundle
    is ``signer_unknown``, not ``ok``. Nothing is inflated but the manifest and the signature until
    the signature holds under a trusted key."""
    v = Verdict(str(path))
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        v.errors.append(f"{path}: not a readable zip archive ({e}); it is damaged or not an evidence bundle")
        return v
    with z:
        names = [i.filename for i in z.infolist()]
        bad = sorted({n for n in names if not _safe_member(n)} | {n for n in names if names.count(n) > 1})
        if bad:
            v.errors.append(f"refused member names (absolute, '..', repeated or folders): {', '.join(bad)}")
            return v
        v.errors += _layout_errors(path, z)
        if v.errors:
            return v
        if MANIFEST not in names or SIGNATURE not in names:
            v.errors.append(f"no {MANIFEST} or {SIGNATURE}: not an evidence bundle")
            return v
        try:
            if z.getinfo(MANIFEST).file_size > _MAX_MANIFEST_BYTES or z.getinfo(SIGNATURE).file_size > 1024:
                raise BundleError(f"larger than a manifest ({_MAX_MANIFEST_BYTES} bytes) or a signature (1 KiB)")
            body = z.read(MANIFEST)
            sig = bytes.fromhex(z.read(SIGNATURE).decode("ascii").strip())
            v.manifest = _manifest(body)
        except (zipfile.BadZipFile, ValueError, BundleError) as e:
            v.errors.append(f"{MANIFEST}: unreadable or malformed ({e}); not an evidence bundle bakeoff wrote")
            v.manifest = {}
            return v
        files, signer = v.manifest["files"], v.manifest["public_key"]
        trusted = public_key or installation_public_key()
        v.signer_known = bool(trusted)
        if trusted and trusted.lower() != signer.lower():
            v.errors.append(
                f"{MANIFEST}: signed by key {_kid(signer)}, not the trusted key {_kid(trusted)}; "
                "it was not made by this installation (pass --public-key with the signer's key if you trust it)"
            )
        v.key_trust = (
            ("the given key" if public_key else "this installation's key")
            if trusted
            else "no trusted key (SIGNER UNKNOWN: pass --public-key with the key the signer gave you)"
        )
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(signer)).verify(sig, body)
        except (InvalidSignature, ValueError):
            v.errors.append(f"{MANIFEST}: the signature does not match its bytes (the manifest was changed)")
        if v.errors:
            return v  # nothing more is read from a bundle whose manifest no trusted key vouches for
        listed = set(files)
        present = set(names) - {MANIFEST, SIGNATURE}
        for name in sorted(present - listed):
            v.errors.append(f"{name}: not in the signed manifest (a file was added)")
        for name in sorted(listed - present):
            v.errors.append(f"{name}: listed in the manifest but missing from the bundle")
        for name in sorted(present & listed):
            expected = files[name]
            if z.getinfo(name).file_size != expected["bytes"]:
                v.errors.append(f"{name}: changed (its size in the archive differs from the signed manifest)")
                continue
            try:
                digest, size = _hash_member(z, name, expected["bytes"])
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:  # a CRC or deflate error: damaged bytes
                v.errors.append(f"{name}: changed (its bytes in the archive are damaged: {e})")
                continue
            if digest != expected["sha256"] or size != expected["bytes"]:
                v.errors.append(f"{name}: changed (SHA-256 {digest[:16]}… differs from the signed manifest)")
            v.checked_files += 1
            v.checked_bytes += size
    return v


def _kid(public_hex: str) -> str:
    try:
        return key_id(public_hex)
    except ValueError:
        return "(not a key)"


def describe(v: Verdict) -> str:
    """The verdict in words: what failed, or what the bundle proves."""
    m, shows = v.manifest, dict(v.manifest.get("shows") or {})
    if v.errors:
        return "\n".join([f"{v.path}: FAILED verification", *(f"  {e}" for e in v.errors)])
    if v.signer_unknown:
        return (
            f"{v.path}: NOT VERIFIED: intact and signed by Ed25519 key {_kid(m['public_key'])}, but that key is "
            "not one you trust (anyone can re-sign a bundle with a key of their own); pass --public-key with "
            "the key the installation gave you (python -m bakeoff verify --show-key on its machine)"
        )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(shows.get("started_at") or 0)))
    lines = [
        f"{v.path}: verified",
        f"  signature: Ed25519 key {_kid(m['public_key'])}, checked against {v.key_trust}",
        f"  files: {v.checked_files}, {v.checked_bytes:,} bytes, every SHA-256 as signed",
        "It shows:",
        f"  plan {m.get('plan')}, run {m.get('run_id')}, started {when}"
        + (", EMULATED (figures from bakeoff's hardware emulator, not real GPUs)" if shows.get("emulated") else ""),
        f"  outcome: {shows.get('status')}"
        + (f" (failed: {', '.join(shows.get('failed_steps') or [])})" if shows.get("failed_steps") else ""),
        f"  headline: {shows.get('headline') or '(none)'}",
        f"  validation passed: {shows.get('validation_passed')}",
        f"  targets: {', '.join(shows.get('targets') or [])} (images, engine args, drivers, instances, regions "
        f"in {PROVENANCE})",
        f"  measured: {shows.get('requests_files')} per-request and {shows.get('points_files')} per-point "
        "Parquet files",
        f"  prices: {PRICES} (SHA-256 {str(shows.get('prices_sha256'))[:16]}…), from the buyer's sheet "
        + (f"SHA-256 {shows['buyer_sheet_sha256']}" if shows.get("buyer_sheet_sha256") else "(none: catalog prices)"),
        f"  spend: estimated {shows.get('estimate_usd')} USD, measured {shows.get('measured_cost_usd')} USD",
        f"  approval: {approval_line(shows.get('approval'))}",
    ]
    return "\n".join(lines)
