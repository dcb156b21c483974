"""Publish a bundle written by the real bundle writer (builder.bundle.build_bundle for gb10)."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from rich.console import Console

from builder import constants
from builder.bundle import BundleSources, build_bundle, verify_bundle
from builder.errors import GatesNotPassed
from builder.measure.evidence import GateEvidence
from builder.publish import PublishRequest, publish
from builder.bundle.sign import sign_bundle
from tests.evidence_fixtures import write_ledger
from tests.publish.conftest import public_key, signing_key


def real_bundle(tmp_path: Path, *, gates: dict[str, str]) -> Path:
    evidence = tmp_path / "evidence" / "gb10"
    evidence.mkdir(parents=True)
    for gate, verdict in gates.items():
        record = GateEvidence(gate=gate, required=True, verdict=verdict, summary="3/3", created=datetime.now(timezone.utc))
        (evidence / f"{gate}.json").write_text(record.model_dump_json(indent=2))
    claims = [{"id": "gates", "targets": ["gb10"], "files": [f"gb10/{gate}.json" for gate in gates]}] if gates else []
    write_ledger(tmp_path / "evidence", *claims)
    out = tmp_path / "dist" / "gb10"
    build_bundle(target="gb10", out=out, sources=BundleSources(evidence_root=tmp_path / "evidence"), console=Console(file=io.StringIO()))
    sign_bundle(out, key=signing_key())
    return out


def run(bundle: Path, hub, **options) -> tuple[object, str]:
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/Qwen3.8-Flash-Next-INT8KV-gb10", public_key=public_key(), **options)
    plan = publish(request=request, console=Console(file=out, width=200), api_factory=hub, sleep=lambda s: None)
    return plan, out.getvalue()


def test_real_bundle_dry_run_then_upload(tmp_path, hub):
    bundle = real_bundle(tmp_path, gates={g: "pass" for g in constants.PUBLISH_REQUIRED_GATES})
    card = ModelCard.load(bundle / constants.CARD_NAME).data.to_dict()
    assert card["library_name"] == "vllm" and card["base_model"] and card["license"]

    plan, out = run(bundle, hub)
    files = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())
    assert constants.SIGNATURE_NAME in files
    assert [f.path for f in plan.files] == sorted([*files, constants.PUBLIC_KEY_NAME])
    assert {f"evidence/{g}.json" for g in constants.PUBLISH_REQUIRED_GATES} <= set(files)
    assert plan.release.target == "gb10" and plan.tag == plan.release.bundle_version
    assert f"Release gb10 {plan.release.bundle_version}" in out and hub.api.calls == []

    run(bundle, hub, yes=True)
    assert {s.path: s.data for s in hub.api.sent} == {rel: (bundle / rel).read_bytes() for rel in files} | {
        constants.PUBLIC_KEY_NAME: public_key().read_bytes()}


def test_real_bundle_without_evidence_is_refused_then_published_with_a_warning(tmp_path, hub):
    bundle = real_bundle(tmp_path, gates={})
    with pytest.raises(GatesNotPassed, match="golden_probes \\(missing\\).*kv_pool \\(missing\\)"):
        run(bundle, hub, yes=True)
    assert hub.api.calls == []

    run(bundle, hub, yes=True, allow_failed_gates=True, allow_unsigned=True)
    echo = tmp_path / "sent"
    for sent in hub.api.sent:
        (echo / sent.path).parent.mkdir(parents=True, exist_ok=True)
        (echo / sent.path).write_bytes(sent.data)
    assert verify_bundle(echo).ok
    card = ModelCard.load(echo / constants.CARD_NAME)
    assert card.text.lstrip().startswith("> [!WARNING]")
    assert card.data.to_dict()["library_name"] == "vllm"
