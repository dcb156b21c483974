"""The publish flow end to end against the recording fake HfApi: what is planned, what is sent."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from rich.console import Console

from builder import constants
from builder.bundle import verify_bundle
from builder.errors import PublishError
from builder.publish import PublishRequest, publish
from tests.publish.conftest import FAKE_TOKEN, gate_file, head_of, make_bundle, public_key


def run(bundle: Path, hub, **options) -> tuple[object, str]:
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/Qwen3.8-Flash-Next-INT8KV", public_key=public_key(), **options)
    plan = publish(request=request, console=Console(file=out, width=200), api_factory=hub, sleep=lambda s: None)
    return plan, out.getvalue()


def bundle_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_dry_run_prints_the_plan_and_makes_no_hub_call(bundle, hub):
    plan, out = run(bundle, hub)
    assert hub.tokens == [] and hub.api.calls == []
    digest = hashlib.sha256((bundle / constants.CHECKSUMS_NAME).read_bytes()).hexdigest()
    assert plan.commit_message == f"Release gb10 0.3.1 ({constants.CHECKSUMS_NAME} sha256:{digest})"
    assert plan.tag == "0.3.1" and plan.revision == "main"
    assert [f.path for f in plan.files] == sorted([*bundle_files(bundle), constants.PUBLIC_KEY_NAME])
    for f in plan.files:
        source = public_key() if f.path == constants.PUBLIC_KEY_NAME else bundle / f.path
        assert f.size == source.stat().st_size
        assert f.path in out
    for text in ("qfn/Qwen3.8-Flash-Next-INT8KV", plan.commit_message, "0.3.1", "dry run", "HF_TOKEN environment variable"):
        assert text in out
    assert FAKE_TOKEN not in out


def test_upload_sends_exactly_the_bundle_in_one_commit_then_tags_it(bundle, hub):
    plan, out = run(bundle, hub, yes=True)
    api = hub.api
    assert hub.tokens == [FAKE_TOKEN]
    assert api.methods == ["create_repo", "list_repo_refs", "list_repo_files", "create_commit", "create_tag"]
    repo = "qfn/Qwen3.8-Flash-Next-INT8KV"
    assert api.calls[0] == ("create_repo", (repo,), {"repo_type": "model", "private": None, "exist_ok": True})
    assert api.calls[2] == ("list_repo_files", (repo,), {"revision": "main", "repo_type": "model"})
    _, _, commit_kwargs = api.calls[3]
    assert commit_kwargs["commit_message"] == plan.commit_message
    assert commit_kwargs["revision"] == "main" and commit_kwargs["repo_type"] == "model"
    assert commit_kwargs["parent_commit"] == head_of("main")
    assert "gb10" in commit_kwargs["commit_description"] and plan.checksums_sha256 in commit_kwargs["commit_description"]
    # Exactly the bundle's bytes, every file (its signature too), and the public key; nothing deleted.
    assert {s.path: s.data for s in api.sent} == bundle_files(bundle) | {constants.PUBLIC_KEY_NAME: public_key().read_bytes()}
    assert all(s.kind == "add" for s in api.sent)
    assert api.calls[4] == (
        "create_tag",
        (repo,),
        {"tag": "0.3.1", "tag_message": plan.commit_message, "revision": "c" * 40, "repo_type": "model"},
    )
    assert "published:" in out


def test_new_branch_private_repo_custom_tag_and_stale_files(bundle, hub):
    hub.api.remote_files = [".gitattributes", "README.md", "evidence/old-gate.json"]
    run(bundle, hub, yes=True, revision="gb10", private=True, tag="gb10-v0.3.1")
    api = hub.api
    assert api.methods == ["create_repo", "list_repo_refs", "create_branch", "list_repo_files", "create_commit", "create_tag"]
    assert api.calls[0][2]["private"] is True
    assert api.calls[2][2] == {"branch": "gb10", "repo_type": "model", "exist_ok": True}
    assert [s.path for s in api.sent if s.kind == "delete"] == ["evidence/old-gate.json"]
    assert api.calls[4][2]["revision"] == "gb10"
    assert api.calls[4][2]["parent_commit"] == head_of("main"), "a new branch starts at main's head"
    assert api.calls[5][2]["tag"] == "gb10-v0.3.1"


def test_existing_tag_is_refused_before_anything_is_written(bundle, hub):
    hub.api.tags = ["0.3.1"]
    with pytest.raises(PublishError, match="tag '0.3.1' already exists"):
        run(bundle, hub, yes=True)
    assert hub.api.methods == ["create_repo", "list_repo_refs"]


def test_allow_failed_gates_uploads_a_reverified_copy_with_a_warning_card(tmp_path, hub):
    bundle = make_bundle(tmp_path / "gb10", gates={"needle": gate_file("needle", verdict="fail"), "kv_pool": None})
    before = bundle_files(bundle)
    # The warning changes README.md, which the signature covers: it is published unsigned, and says so.
    plan, out = run(bundle, hub, yes=True, allow_failed_gates=True, allow_unsigned=True)
    sent = {s.path: s.data for s in hub.api.sent}
    assert bundle_files(bundle) == before, "the built bundle itself is never modified"
    assert set(sent) == set(before) - {constants.SIGNATURE_NAME}
    assert all(sent[p] == before[p] for p in sent if p not in ("README.md", constants.CHECKSUMS_NAME))
    # What was sent is self-consistent: written out, it passes verification.
    echo = tmp_path / "sent"
    for rel, data in sent.items():
        (echo / rel).parent.mkdir(parents=True, exist_ok=True)
        (echo / rel).write_bytes(data)
    assert verify_bundle(echo).ok
    card = ModelCard.load(echo / "README.md")
    assert card.data.to_dict()["library_name"] == "vllm"
    assert constants.CARD_FAILED_GATES_TAG in card.data.tags
    assert card.text.lstrip().startswith("> [!WARNING]")
    assert "needle (fail), kv_pool (missing)" in card.text
    assert plan.bundle_checksums_sha256 in card.text
    assert plan.card_modified and plan.bundle_checksums_sha256 in hub.api.calls[3][2]["commit_description"]
    assert plan.checksums_sha256 == hashlib.sha256(sent[constants.CHECKSUMS_NAME]).hexdigest()
    assert "failed-gates and unsigned warning" in out


def test_existing_branch_commit_is_based_on_its_own_head(bundle, hub):
    hub.api.branches = ["main", "gb10"]
    run(bundle, hub, yes=True, revision="gb10")
    assert "create_branch" not in hub.api.methods
    assert hub.api.calls[3][2]["parent_commit"] == head_of("gb10")
