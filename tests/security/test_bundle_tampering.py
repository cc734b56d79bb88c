"""The evidence bundle against whoever holds a copy: a changed byte (in a file, or in the archive
itself) fails verification naming the file, as does an added, removed or re-described file, a
bundle signed by another installation, member names that leave the archive; and no bundle is built
that would carry a serving key, the installation secret or a private key."""

from __future__ import annotations

import io
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from bakeoff import secrets, store
from bakeoff.cli import main
from bakeoff.publishing import evidence
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "report"))
import synthetic

KEY_A, KEY_B = "a" * 64, "b" * 64


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A stored run (points, requests, step records, validation) and one small report file."""
    root = tmp_path_factory.mktemp("evidence")
    plan = synthetic.make_plan(concurrency=(1, 4))
    rdir = synthetic.make_run(root / "results", plan, run_id="manual__2026-11-04T00:00:00+00:00")
    report = root / "report.md"
    report.write_text("# report\n")
    return {"plan": plan, "run_dir": rdir, "paths": {"markdown": str(report)}}


@pytest.fixture
def bundle(built, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", KEY_A)
    return Path(str(evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path)))


def _rewrite(src: Path, dest: Path, change) -> Path:
    """Copy a zip member by member; ``change(name, data)`` returns the new bytes (or None to drop it)."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            data = change(info.filename, z.read(info.filename))
            if data is not None:
                out.writestr(info, data)
    return dest


def test_changed_byte_in_a_file_is_named(bundle, tmp_path, capsys):
    victim = next(n for n in zipfile.ZipFile(bundle).namelist() if n.endswith(".parquet") and "/points/" in n)

    def flip(name, data):
        return data[:10] + bytes([data[10] ^ 1]) + data[11:] if name == victim else data

    bad = _rewrite(bundle, tmp_path / "bad.zip", flip)
    v = evidence.verify(bad)
    assert not v.ok and any(e.startswith(f"{victim}: changed") for e in v.errors), v.errors
    assert main(["verify", str(bad)]) == 1
    assert victim in capsys.readouterr().out


def test_changed_byte_in_the_archive_itself_is_named(bundle, tmp_path):
    """A byte flipped in the raw archive, inside one member's compressed data: that member fails."""
    raw = bytearray(bundle.read_bytes())
    with zipfile.ZipFile(bundle) as z:
        info = next(i for i in z.infolist() if i.filename == "results/plan.json")
    # local header: 30 bytes + name + extra, then the compressed data
    name_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.compress_size // 2] ^= 0xFF
    bad = tmp_path / "flipped.zip"
    bad.write_bytes(bytes(raw))
    v = evidence.verify(bad)
    assert not v.ok and any(e.startswith("results/plan.json: changed") for e in v.errors), v.errors


def test_added_removed_and_resigned_files_fail(bundle, tmp_path):
    added = tmp_path / "added.zip"
    _rewrite(bundle, added, lambda n, d: d)
    with zipfile.ZipFile(added, "a") as z:
        z.writestr("results/extra.json", b"{}")
    assert any(e.startswith("results/extra.json: not in the signed manifest") for e in evidence.verify(added).errors)
    dropped = _rewrite(bundle, tmp_path / "dropped.zip", lambda n, d: None if n == "results/plan.json" else d)
    errors = evidence.verify(dropped).errors
    assert any(e.startswith("results/plan.json: listed in the manifest but missing") for e in errors)

    def edit_manifest(name, data):  # claim a different headline without re-signing
        if name != evidence.MANIFEST:
            return data
        doc = json.loads(data)
        doc["shows"]["headline"] = "b200 wins"
        return json.dumps(doc).encode()

    forged = _rewrite(bundle, tmp_path / "forged.zip", edit_manifest)
    assert any("signature does not match" in e for e in evidence.verify(forged).errors)


def test_another_installations_key_is_refused_unless_trusted(bundle, monkeypatch):
    signer = json.loads(zipfile.ZipFile(bundle).read(evidence.MANIFEST))["public_key"]
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", KEY_B)
    v = evidence.verify(bundle)
    assert not v.ok and any("not the trusted key" in e for e in v.errors)
    assert evidence.verify(bundle, public_key=signer).ok
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", KEY_A)
    assert evidence.installation_public_key() == signer


def test_unsafe_member_names_and_non_bundles_are_refused(bundle, tmp_path):
    evil = tmp_path / "evil.zip"
    _rewrite(bundle, evil, lambda n, d: d)
    with zipfile.ZipFile(evil, "a") as z:
        z.writestr("../outside.txt", b"x")
    assert any("refused member names" in e and "../outside.txt" in e for e in evidence.verify(evil).errors)
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    assert "not a readable zip archive" in evidence.verify(junk).errors[0]


def test_no_secret_in_a_bundle_and_a_leaked_key_stops_the_build(built, bundle, tmp_path, monkeypatch):
    run_id = store.read_record(built["run_dir"], store.START)["run_id"]
    keys = [secrets.api_key(run_id, t.slug) for t in built["plan"].targets]
    with zipfile.ZipFile(bundle) as z:
        blob = b"".join(z.read(n) for n in z.namelist())
    assert KEY_A.encode() not in blob and not any(k.encode() in blob for k in keys)
    assert b"PRIVATE KEY-----" not in blob
    slug = built["plan"].targets[0].slug
    leak = Path(built["run_dir"]) / f"target={slug}" / "console.txt"  # as if a node's log were mirrored
    leak.write_text(f"Authorization: Bearer {keys[0]}")
    try:
        with pytest.raises(evidence.BundleError, match=rf"results/target={slug}/console.txt: holds a secret"):
            evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path / "x", known_secrets=keys)
        leak.write_text(f"secret={KEY_A}")  # the installation secret itself, whoever wrote it
        with pytest.raises(evidence.BundleError, match="holds a secret"):
            evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path / "x")
    finally:
        leak.unlink()
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_show_key_prints_the_key_bundles_are_signed_with(bundle, capsys, monkeypatch):
    signer = json.loads(zipfile.ZipFile(bundle).read(evidence.MANIFEST))["public_key"]
    assert main(["verify", "--show-key"]) == 0
    assert capsys.readouterr().out.startswith(f"{signer}  (key id {evidence.key_id(signer)})")
    monkeypatch.delenv("BAKEOFF_SECRET_KEY")
    monkeypatch.setenv("BAKEOFF_DATA", str(bundle.parent / "no-installation-here"))
    assert main(["verify", "--show-key"]) == 2  # verifying never creates an installation secret
    assert not (bundle.parent / "no-installation-here").exists()


# --- third pass: a stranger's machine, bytes outside the entries, malformed manifests ---------------


@pytest.fixture
def stranger(monkeypatch, tmp_path):
    """A machine with no installation secret (an auditor's, a supplier's)."""
    monkeypatch.delenv("BAKEOFF_SECRET_KEY", raising=False)
    monkeypatch.setenv("BAKEOFF_DATA", str(tmp_path / "no-installation-here"))


def test_a_re_signed_bundle_is_not_verified_without_a_trusted_key(built, tmp_path, monkeypatch, stranger, capsys):
    monkeypatch.setenv("BAKEOFF_SECRET_KEY", KEY_B)  # the forger signs with a key of their own
    forged = Path(str(evidence.build(built["plan"], built["run_dir"], built["paths"], tmp_path / "forger")))
    monkeypatch.delenv("BAKEOFF_SECRET_KEY")
    v = evidence.verify(forged)
    assert not v.ok and v.signer_unknown
    assert main(["verify", str(forged)]) == 3
    out = capsys.readouterr().out
    assert "NOT VERIFIED" in out and ": verified" not in out and "--public-key" in out
    signer = json.loads(zipfile.ZipFile(forged).read(evidence.MANIFEST))["public_key"]
    assert main(["verify", str(forged), "--public-key", signer]) == 0  # a key the reader chose to trust


def _local_entry(name: str, data: bytes) -> bytes:
    """A zip's local header and data for one file, without a directory: what a streaming extractor
    (bsdtar -xf -) reads and writes out."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(name, data)
    raw = buf.getvalue()
    return raw[: raw.index(b"PK\x01\x02")]


def test_bytes_before_the_first_entry_are_refused(bundle, tmp_path):
    hidden = tmp_path / "prefixed.zip"
    hidden.write_bytes(_local_entry("report/headline.md", b"FORGED: mi355x 0.10 USD/Mtok") + bundle.read_bytes())
    assert zipfile.ZipFile(hidden).testzip() is None, "zipfile reads past the prefix: a verifier must look"
    v = evidence.verify(hidden, public_key=evidence.installation_public_key())
    assert not v.ok and any("belong to no listed entry" in e for e in v.errors), v.errors


def test_bytes_between_entries_and_a_local_header_naming_another_file_are_refused(bundle, tmp_path):
    raw = bundle.read_bytes()
    with zipfile.ZipFile(bundle) as z:
        infos = sorted(z.infolist(), key=lambda i: i.header_offset)
    second = infos[1].header_offset
    extra = _local_entry("report/headline.md", b"FORGED")
    shifted = bytearray(raw[:second] + extra + raw[second:])  # every later offset is now off: fix the directory
    cd = shifted.index(b"PK\x01\x02")
    while cd != -1:
        off = int.from_bytes(shifted[cd + 42 : cd + 46], "little")
        if off >= second:
            shifted[cd + 42 : cd + 46] = (off + len(extra)).to_bytes(4, "little")
        cd = shifted.find(b"PK\x01\x02", cd + 4)
    eocd = shifted.rindex(b"PK\x05\x06")
    start = int.from_bytes(shifted[eocd + 16 : eocd + 20], "little")
    shifted[eocd + 16 : eocd + 20] = (start + len(extra)).to_bytes(4, "little")
    between = tmp_path / "between.zip"
    between.write_bytes(bytes(shifted))
    v = evidence.verify(between, public_key=evidence.installation_public_key())
    assert any("belong to no listed entry" in e for e in v.errors), v.errors

    renamed = bytearray(raw)  # the local header of one entry renamed (same length), its directory entry not
    name = infos[2].filename.encode()
    at_ = infos[2].header_offset + 30
    renamed[at_ : at_ + len(name)] = name[:-1] + (b"x" if name[-1:] != b"x" else b"y")
    (tmp_path / "renamed.zip").write_bytes(bytes(renamed))
    v = evidence.verify(tmp_path / "renamed.zip", public_key=evidence.installation_public_key())
    assert any("local header names another file" in e for e in v.errors), v.errors


def _with_manifest(bundle: Path, dest: Path, manifest: bytes) -> Path:
    return _rewrite(bundle, dest, lambda n, d: manifest if n == evidence.MANIFEST else d)


@pytest.mark.parametrize(
    ("manifest", "error"),
    [
        (lambda doc: {**doc, "files": list(doc["files"])}, "files: expected an object"),
        (lambda doc: {**doc, "files": {**doc["files"], "results/plan.json": "sha"}}, r"files\['results/plan.json'\]"),
        (lambda doc: {**doc, "public_key": ["x"]}, "public_key: expected 64 hex digits"),
        (lambda doc: [doc], "not a JSON object"),
        (lambda doc: "[" * 200_000 + "]" * 200_000, "nested too deep"),
        (lambda doc: {**doc, "shows": {"a": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}}, "nested deeper than 16"),
    ],
)
def test_a_malformed_manifest_is_refused_with_a_clear_error(bundle, tmp_path, manifest, error, capsys):
    doc = json.loads(zipfile.ZipFile(bundle).read(evidence.MANIFEST))
    new = manifest(doc)
    bad = _with_manifest(bundle, tmp_path / "bad.zip", (new if isinstance(new, str) else json.dumps(new)).encode())
    v = evidence.verify(bad)
    assert not v.ok and len(v.errors) == 1 and "MANIFEST.json: unreadable or malformed" in v.errors[0]
    assert re.search(error, v.errors[0]), v.errors
    assert main(["verify", str(bad)]) == 1
    assert "Traceback" not in capsys.readouterr().out


def test_no_member_is_inflated_once_the_signature_fails(bundle, tmp_path, monkeypatch):
    hashed: list[str] = []
    real = evidence._hash_member
    monkeypatch.setattr(evidence, "_hash_member", lambda z, n, limit: (hashed.append(n), real(z, n, limit))[1])
    doc = json.loads(zipfile.ZipFile(bundle).read(evidence.MANIFEST))
    doc["shows"]["headline"] = "FORGED"
    forged = _with_manifest(bundle, tmp_path / "forged.zip", json.dumps(doc).encode())
    assert any("signature does not match" in e for e in evidence.verify(forged).errors)
    assert hashed == [], "members were inflated and hashed after the signature failed"
    assert evidence.verify(bundle).ok and hashed, "the genuine bundle was not hashed at all"


def test_a_member_larger_than_signed_is_refused_without_inflating_it(bundle, tmp_path, monkeypatch):
    hashed: list[str] = []
    monkeypatch.setattr(evidence, "_hash_member", lambda z, n, limit: hashed.append(n) or ("0" * 64, 0))
    grown = _rewrite(bundle, tmp_path / "grown.zip", lambda n, d: d + b"\0" * 4096 if n == "results/plan.json" else d)
    v = evidence.verify(grown)
    assert any(e.startswith("results/plan.json: changed (its size") for e in v.errors), v.errors
    assert "results/plan.json" not in hashed
