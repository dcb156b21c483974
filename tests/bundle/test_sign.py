"""Signed bundles: `builder sign` / `verify --public-key`, checked against upstream's own verifier.

Every tamper must fail both `builder verify --public-key` and `model_signing verify key` (the
real CLI, in a subprocess), in a folder named unlike the one the bundle was signed in.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.bundle import verify_bundle
from builder.bundle.sign import sign_bundle
from builder.checksums import manifest_text, read_manifest_file
from builder.constants import CHECKSUMS_NAME, PUBLIC_KEY_NAME, SIGNATURE_IGNORED, SIGNATURE_NAME
from builder.errors import BundleError, ChecksumMismatch, SignatureError, SigningKeyError
from builder.keys import load_private_key

UPSTREAM = Path(sys.executable).parent / "model_signing"


def upstream_verify(root: Path, public: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(UPSTREAM), "verify", "key", str(root), "--signature", str(root / SIGNATURE_NAME), "--public_key", str(public)],
        capture_output=True, text=True, timeout=120,
    )


def builder_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250"})


def rehash(root: Path) -> None:
    """CHECKSUMS.sha256 recomputed over the files it lists, as someone covering an edit would."""
    listed = [e.path for e in read_manifest_file(root / CHECKSUMS_NAME)]
    (root / CHECKSUMS_NAME).write_text(manifest_text(root, listed))


def sign_with_other_key(root: Path, key: Path) -> None:
    """model.sig made by another key, through upstream's API (builder sign refuses a key the bundle does not name)."""
    from model_signing import hashing, signing

    config = hashing.Config().set_ignored_paths(paths=list(SIGNATURE_IGNORED))
    signing.Config().set_hashing_config(config).use_elliptic_key_signer(private_key=key).sign(root, root / SIGNATURE_NAME)


def test_a_signed_bundle_verifies_with_ours_and_upstream_in_any_folder(signed, signed_master, keys):
    assert signed.name != signed_master.name
    report = verify_bundle(signed, public_key=keys[0].public)
    assert report.ok and report.signed and report.signature.ok and report.signature.key_id == keys[0].id
    report.raise_for_problems()
    done = upstream_verify(signed, keys[0].public)
    assert done.returncode == 0, done.stderr
    assert "Verification succeeded" in done.stdout


TAMPERS = {
    "file changed": lambda root, keys: (root / "launch/ENV.md").write_text("# Environment\nexport EVIL=1\n"),
    "file added": lambda root, keys: (root / "notes.txt").write_text("extra\n"),
    "file removed": lambda root, keys: (root / "launch/ENV.md").unlink(),
    "file renamed": lambda root, keys: (root / "benchmark_vllm.py").rename(root / "bench.py"),
    "manifest rewritten to match": lambda root, keys: (
        (root / "evidence/bench-decode.json").write_text('{"workload": "decode", "mean_ttft_ms": 1.0}'), rehash(root)),
    "signature swapped for another key's": lambda root, keys: sign_with_other_key(root, keys[1].private),
    "signature file removed": lambda root, keys: (root / SIGNATURE_NAME).unlink(),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_every_tamper_fails_ours_and_upstream(signed, keys, tamper):
    TAMPERS[tamper](signed, keys)
    report = verify_bundle(signed, public_key=keys[0].public)
    assert not report.signature.ok, report.signature
    assert not report.ok
    with pytest.raises((SignatureError, ChecksumMismatch)):
        report.raise_for_problems()
    done = upstream_verify(signed, keys[0].public)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Verification failed" in done.stderr


def test_a_rehashed_bundle_passes_plain_verify_and_fails_with_the_public_key(signed, keys):
    # An evidence file's content: bundle.json's claims say nothing of it, so only the signature sees the edit.
    (signed / "evidence/bench-decode.json").write_text('{"workload": "decode", "mean_ttft_ms": 1.0}')
    rehash(signed)
    plain = builder_cli("verify", str(signed))
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "model.sig not checked" in plain.stdout
    keyed = builder_cli("verify", str(signed), "--public-key", str(keys[0].public))
    assert keyed.returncode == SignatureError.exit_code == 15, keyed.stdout + keyed.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in keyed.stdout.splitlines()
            if line.count("│") >= 4 and line.split("│")[1].strip()}
    assert rows == {"manifest": "ok", "claims": "ok", "signature": "FAILED"}, keyed.stdout
    assert "evidence/bench-decode.json" in keyed.stdout + keyed.stderr


def test_plain_verify_of_a_signed_bundle_is_unchanged_and_says_the_signature_was_not_checked(signed):
    done = builder_cli("verify", str(signed))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not checked" in done.stdout and "--public-key" in done.stdout


def test_only_the_signature_the_public_key_and_the_hubs_attributes_may_sit_outside_the_manifest(signed):
    assert SIGNATURE_NAME not in (signed / CHECKSUMS_NAME).read_text()
    # As downloaded from the Hub: the public key publish uploads and the .gitattributes the Hub adds.
    (signed / PUBLIC_KEY_NAME).write_text("the publisher's key\n")
    (signed / ".gitattributes").write_text("*.bin filter=lfs\n")
    assert verify_bundle(signed).ok
    # Any other top-level stray, or one of those names further down, is still unexpected.
    (signed / "notes.txt").write_text("x\n")
    (signed / "launch" / PUBLIC_KEY_NAME).write_text("x\n")
    assert verify_bundle(signed).unexpected == [f"launch/{PUBLIC_KEY_NAME}", "notes.txt"]


def test_sign_refuses_a_bundle_that_does_not_verify_and_writes_nothing(signed, keys):
    (signed / SIGNATURE_NAME).unlink()
    (signed / "launch/ENV.md").write_text("edited\n")
    with pytest.raises(ChecksumMismatch, match="refusing to sign"):
        sign_bundle(signed, key=keys[0].private)
    assert not (signed / SIGNATURE_NAME).exists()


def test_signing_again_replaces_only_the_signature(signed, keys):
    before = {p.relative_to(signed).as_posix(): p.read_bytes() for p in signed.rglob("*") if p.is_file()}
    sign_bundle(signed, key=keys[0].private)
    after = {p.relative_to(signed).as_posix(): p.read_bytes() for p in signed.rglob("*") if p.is_file()}
    assert set(after) == set(before)
    assert {k for k in after if after[k] != before[k]} <= {SIGNATURE_NAME}
    assert verify_bundle(signed, public_key=keys[0].public).ok


def test_sign_refuses_a_key_the_bundle_does_not_name(signed, keys):
    with pytest.raises(SigningKeyError, match="key id"):
        sign_bundle(signed, key=keys[1].private)
    assert verify_bundle(signed, public_key=keys[0].public).ok, "the earlier signature is left as it was"


def test_a_key_others_may_read_is_refused_with_the_fix_before_anything_is_written(signed, keys, tmp_path):
    (signed / SIGNATURE_NAME).unlink()
    loose = tmp_path / "loose.key"
    shutil.copyfile(keys[0].private, loose)
    loose.chmod(0o644)
    done = builder_cli("sign", str(signed), "--key", str(loose))
    assert done.returncode == SigningKeyError.exit_code == 80, done.stdout + done.stderr
    assert "chmod 600" in done.stderr
    assert not (signed / SIGNATURE_NAME).exists()


def secrets_of(key: Path) -> list[str]:
    """What must never leave the key file: its PEM, each base64 line of it, its raw bytes in base64, and its path."""
    pem = key.read_text()
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    from cryptography.hazmat.primitives import serialization

    der = load_private_key(key).private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())
    return [pem, "".join(body), *body, base64.b64encode(der).decode(), str(key), str(key.resolve())]


def assert_no_secret(key: Path, *, files: Path, output: str) -> None:
    secrets = secrets_of(key)
    for path in files.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, f"{secret[:20]}... in {path}"
    for secret in secrets:
        assert secret not in output, f"{secret[:20]}... in the output"


def test_builder_sign_leaves_no_trace_of_the_private_key(signed, keys):
    (signed / SIGNATURE_NAME).unlink()
    done = builder_cli("sign", str(signed), "--key", str(keys[0].private))
    assert done.returncode == 0, done.stderr
    assert keys[0].id in done.stdout
    assert_no_secret(keys[0].private, files=signed, output=done.stdout + done.stderr)
    assert upstream_verify(signed, keys[0].public).returncode == 0


def test_make_bundle_with_sign_key_signs_and_leaves_no_trace_of_the_key(tmp_path, keys):
    from builder.constants import REPO_ROOT

    out = tmp_path / "release"
    # -o: the venv is taken as it is (this test must never rebuild it).
    done = subprocess.run(["make", "-o", ".venv/.installed", "bundle", f"OUT={out}", f"SIGN_KEY={keys[0].private}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_no_secret(keys[0].private, files=out, output=done.stdout + done.stderr)
    report = verify_bundle(out, public_key=keys[0].public)
    assert report.ok and report.bundle.signing_key_id == keys[0].id
    assert keys[0].id in (out / "README.md").read_text()
    assert upstream_verify(out, keys[0].public).returncode == 0


def test_a_refused_key_stops_make_bundle_before_signing(tmp_path, keys):
    from builder.constants import REPO_ROOT

    loose_dir = tmp_path / "keys"
    loose_dir.mkdir()
    loose = loose_dir / "loose.key"
    shutil.copyfile(keys[0].private, loose)
    shutil.copyfile(keys[0].public, loose_dir / "loose.key.pub")
    loose.chmod(0o644)
    out = tmp_path / "release"
    done = subprocess.run(["make", "-o", ".venv/.installed", "bundle", f"OUT={out}", f"SIGN_KEY={loose}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "chmod 600" in done.stderr, done.stdout + done.stderr
    assert not (out / SIGNATURE_NAME).exists()
    assert loose.read_text() not in done.stdout + done.stderr


# --- attestations ---

IMAGE = {"tag": "qfn-int8kv:gb10-0.3.1", "id": "sha256:" + "ab" * 32}


def attestation_folder(root: Path, **image: object) -> Path:
    root.mkdir(parents=True)
    (root / "image.json").write_text(__import__("json").dumps({**IMAGE, **image}))
    for name in ("sbom.cdx.json", "provenance.intoto.json", "sbom.cdx.json.dsse.json", "provenance.intoto.json.dsse.json"):
        (root / name).write_text('{"name": "%s"}\n' % name)
    (root / "build.log").write_text("not an attestation\n")
    return root


def test_bundle_carries_the_attestations_and_names_the_image(tmp_path, sources, quiet, keys):
    from builder.bundle import build_bundle

    folder = attestation_folder(tmp_path / "attest")
    out = tmp_path / "dist" / "gb10"
    result = build_bundle(target="gb10", out=out, sources=sources, console=quiet, attestations=folder)
    assert result.manifest.image.tag == IMAGE["tag"] and result.manifest.image.id == IMAGE["id"]
    assert sorted(p.name for p in (out / "attestations").iterdir()) == sorted(
        ["image.json", "sbom.cdx.json", "provenance.intoto.json", "sbom.cdx.json.dsse.json", "provenance.intoto.json.dsse.json"])
    assert '"image": {' in (out / "bundle.json").read_text()
    card = (out / "README.md").read_text()
    assert IMAGE["tag"] in card and IMAGE["id"] in card and "`attestations/image.json`" in card
    assert verify_bundle(out).ok
    # The signature covers the image id: another id, re-hashed, fails.
    sign_bundle(out, key=keys[0].private)
    (out / "attestations/image.json").write_text(__import__("json").dumps({**IMAGE, "id": "sha256:" + "cd" * 32}))
    rehash(out)
    assert verify_bundle(out).ok
    assert not verify_bundle(out, public_key=keys[0].public).signature.ok
    assert upstream_verify(out, keys[0].public).returncode == 1


def test_bundle_without_attestations_says_no_image_is_named(built):
    assert built.manifest.image is None
    assert '"image": null' in (built.path / "bundle.json").read_text()
    assert "none named" in (built.path / "README.md").read_text()


@pytest.mark.parametrize(("image", "named"), [({"id": "sha256:abc"}, "'id'"), ({"tag": ""}, "'tag'"), ({"id": None}, "'id'")])
def test_an_attestation_folder_without_a_valid_image_json_is_refused(tmp_path, sources, quiet, image, named):
    from builder.bundle import build_bundle

    folder = attestation_folder(tmp_path / "attest", **image)
    out = tmp_path / "dist" / "gb10"
    with pytest.raises(BundleError, match=named) as refused:
        build_bundle(target="gb10", out=out, sources=sources, console=quiet, attestations=folder)
    assert "image.json" in refused.value.message and refused.value.hint
    assert not out.exists()


def test_an_attestation_folder_without_image_json_is_refused(tmp_path, sources, quiet):
    from builder.bundle import build_bundle

    folder = attestation_folder(tmp_path / "attest")
    (folder / "image.json").unlink()
    with pytest.raises(BundleError, match="has no image.json"):
        build_bundle(target="gb10", out=tmp_path / "out", sources=sources, console=quiet, attestations=folder)


def test_keygen_writes_a_pair_and_prints_its_id_and_both_paths(tmp_path):
    done = builder_cli("keygen", "--out", str(tmp_path / "release.key"))
    assert done.returncode == 0, done.stderr
    private, public = tmp_path / "release.key", tmp_path / "release.key.pub"
    assert (private.stat().st_mode & 0o777) == 0o600 and public.is_file()
    from builder.keys import key_id, load_public_key

    assert key_id(load_public_key(public)) in done.stdout
    assert str(private) in done.stdout and str(public) in done.stdout
    again = builder_cli("keygen", "--out", str(private), "--public-out", str(tmp_path / "elsewhere.pub"))
    assert again.returncode == SigningKeyError.exit_code and "never overwritten" in again.stderr


def test_a_signed_bundle_is_replaced_by_a_new_build(signed, sources, quiet):
    from builder.bundle import build_bundle

    build_bundle(target="gb10", out=signed, sources=sources, console=quiet)
    assert not (signed / SIGNATURE_NAME).exists(), "a new build is unsigned until signed again"
    assert verify_bundle(signed).ok
