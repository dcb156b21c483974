"""Publish and signatures: model.sig, signing-key.pub and attestations/ go up in the bundle's one
commit; an unsigned or wrongly signed bundle is refused unless --allow-unsigned, which the card
then says at the top. The Hub is the fake of conftest; the uploaded files are checked with the
real `model_signing` CLI."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from rich.console import Console

from builder import constants
from builder.bundle import BundleSources, build_bundle, verify_bundle
from builder.bundle.sign import sign_bundle
from builder.errors import UnsignedBundle
from builder.keys import generate_key_pair
from builder.measure.evidence import GateEvidence
from builder.publish import PublishRequest, publish
from tests.evidence_fixtures import write_ledger
from tests.publish.conftest import CARD, FAKE_TOKEN, gate_file, make_bundle, public_key, signing_key

IMAGE = {"tag": "qfn-int8kv:gb10-0.3.1", "id": "sha256:" + "5e" * 32}
ATTESTATIONS = ("image.json", "provenance.intoto.json", "provenance.intoto.json.dsse.json", "sbom.cdx.json",
                "sbom.cdx.json.dsse.json")


def run(bundle: Path, hub, **options) -> tuple[object, str]:
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", **options)
    plan = publish(request=request, console=Console(file=out, width=250), api_factory=hub, sleep=lambda s: None)
    return plan, out.getvalue()


def attested_bundle(tmp_path: Path) -> Path:
    """A gb10 bundle from the real writer, with an image's attestations, signed with the test key."""
    evidence = tmp_path / "evidence" / "gb10"
    evidence.mkdir(parents=True)
    for gate in constants.PUBLISH_REQUIRED_GATES:
        record = GateEvidence(gate=gate, required=True, verdict="pass", summary="3/3", created="2026-11-29T10:00:00Z")
        (evidence / f"{gate}.json").write_text(record.model_dump_json(indent=2))
    write_ledger(tmp_path / "evidence", {"id": "gates", "targets": ["gb10"],
                                         "files": [f"gb10/{g}.json" for g in constants.PUBLISH_REQUIRED_GATES]})
    attest = tmp_path / "attest"
    attest.mkdir()
    (attest / "image.json").write_text(json.dumps(IMAGE))
    for name in ATTESTATIONS[1:]:
        (attest / name).write_text(json.dumps({"file": name}))
    out = tmp_path / "dist" / "gb10"
    build_bundle(target="gb10", out=out, sources=BundleSources(evidence_root=tmp_path / "evidence"),
                 console=Console(file=io.StringIO()), attestations=attest)
    sign_bundle(out, key=signing_key())
    return out


def test_dry_run_plan_lists_the_signature_the_public_key_and_the_attestations(tmp_path, hub):
    bundle = attested_bundle(tmp_path)
    plan, out = run(bundle, hub, public_key=public_key())
    assert hub.api.calls == []
    paths = [f.path for f in plan.files]
    for path in (constants.SIGNATURE_NAME, constants.PUBLIC_KEY_NAME, *(f"attestations/{n}" for n in ATTESTATIONS)):
        assert path in paths and path in out
    assert plan.signed and plan.key_id in out and "verified" in out
    assert IMAGE["tag"] in out and IMAGE["id"] in out
    assert "Files to upload" in out and "dry run" in out


def test_the_signature_public_key_and_attestations_go_up_in_the_one_commit_and_verify_upstream(tmp_path, hub):
    bundle = attested_bundle(tmp_path)
    plan, _ = run(bundle, hub, public_key=public_key(), yes=True)
    assert hub.api.methods.count("create_commit") == 1
    sent = {s.path: s.data for s in hub.api.sent}
    assert sent[constants.SIGNATURE_NAME] == (bundle / constants.SIGNATURE_NAME).read_bytes()
    assert sent[constants.PUBLIC_KEY_NAME] == public_key().read_bytes()
    assert {f"attestations/{n}" for n in ATTESTATIONS} <= set(sent)
    assert plan.key_id in hub.api.calls[3][2]["commit_description"]
    # The repo as a user downloads it (with the .gitattributes the Hub adds), in a folder of another name.
    repo = tmp_path / "hub-download" / "Qwen-release"
    for rel, data in {**sent, ".gitattributes": b"*.bin filter=lfs\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "model_signing"), "verify", "key", str(repo),
         "--signature", str(repo / constants.SIGNATURE_NAME), "--public_key", str(repo / constants.PUBLIC_KEY_NAME)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    card = (repo / constants.CARD_NAME).read_text()
    assert "model_signing verify key" in card and "builder verify . --public-key signing-key.pub" in card
    assert IMAGE["id"] in card and plan.key_id not in card, "the bundle was built without --public-key"
    # The card's second step, in the download as it is: builder verify holds all three checks.
    report = verify_bundle(repo, public_key=repo / constants.PUBLIC_KEY_NAME)
    assert report.ok and report.signature.ok and report.bundle.image.id == IMAGE["id"]


def test_an_unsigned_bundle_is_refused_then_published_with_a_warning(tmp_path, hub):
    bundle = make_bundle(tmp_path / "gb10", signed=False)
    with pytest.raises(UnsignedBundle, match="no model.sig") as refused:
        run(bundle, hub, public_key=public_key(), yes=True)
    assert refused.value.exit_code == 66 and "--allow-unsigned" in refused.value.hint
    assert hub.api.calls == []

    plan, out = run(bundle, hub, public_key=public_key(), yes=True, allow_unsigned=True)
    sent = {s.path: s.data for s in hub.api.sent}
    assert constants.SIGNATURE_NAME not in sent and constants.PUBLIC_KEY_NAME not in sent
    echo = tmp_path / "sent"
    for rel, data in sent.items():
        (echo / rel).parent.mkdir(parents=True, exist_ok=True)
        (echo / rel).write_bytes(data)
    assert verify_bundle(echo).ok
    card = ModelCard.load(echo / constants.CARD_NAME)
    assert card.text.lstrip().startswith("> [!WARNING]\n> **This release is not signed.**")
    assert constants.CARD_UNSIGNED_TAG in card.data.tags
    assert not plan.signed and "unsigned" in out


def test_a_bundle_signed_by_another_key_is_refused(tmp_path, hub):
    bundle = make_bundle(tmp_path / "gb10")
    other = tmp_path / "keys"
    other.mkdir()
    generate_key_pair(private_path=other / "k", public_path=other / "k.pub")
    with pytest.raises(UnsignedBundle, match="does not verify"):
        run(bundle, hub, public_key=other / "k.pub", yes=True)
    assert hub.api.calls == []


def test_without_a_public_key_a_signed_bundle_is_refused(bundle, hub):
    with pytest.raises(UnsignedBundle, match="no --public-key"):
        run(bundle, hub, yes=True)
    assert hub.api.calls == []


def test_failed_gates_on_a_signed_bundle_need_allow_unsigned_too(tmp_path, hub):
    bundle = make_bundle(tmp_path / "gb10", gates={"needle": gate_file("needle", verdict="fail")})
    with pytest.raises(UnsignedBundle, match="allow-failed-gates adds a warning"):
        run(bundle, hub, public_key=public_key(), yes=True, allow_failed_gates=True)
    assert hub.api.calls == []


def test_a_card_built_with_the_gates_notice_is_published_signed_and_unchanged(tmp_path, hub):
    """The bundle's card already says its gates did not pass (as `builder bundle` writes it then),
    so --allow-failed-gates changes nothing the signature covers: it goes up signed, card as built."""
    noted = CARD.replace("- kv-cache\n", f"- kv-cache\n- {constants.CARD_FAILED_GATES_TAG}\n")
    bundle = make_bundle(tmp_path / "gb10", gates={"needle": None}, card=noted)
    plan, out = run(bundle, hub, public_key=public_key(), yes=True, allow_failed_gates=True)
    assert plan.signed and not plan.card_modified and plan.card_notes_failed_gates
    sent = {s.path: s.data for s in hub.api.sent}
    assert sent[constants.CARD_NAME] == (bundle / constants.CARD_NAME).read_bytes()
    assert sent[constants.CHECKSUMS_NAME] == (bundle / constants.CHECKSUMS_NAME).read_bytes()
    assert "it says its gates did not pass" in out


def test_publish_leaves_no_trace_of_the_private_key(tmp_path, hub):
    bundle = attested_bundle(tmp_path)
    _, out = run(bundle, hub, public_key=public_key(), yes=True)
    pem = signing_key().read_text()
    body = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    secrets = [pem, "".join(body), *body, str(signing_key())]
    for secret in secrets:
        assert secret not in out
        for s in hub.api.sent:
            assert secret.encode() not in s.data, s.path
        assert secret not in hub.api.calls[3][2]["commit_description"]
    assert FAKE_TOKEN not in out
