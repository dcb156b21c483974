"""The SLSA v1 provenance statement: parsed by the in-toto attestation protos (statement and SLSA
predicate), subject = the image id, the documented dependencies, nothing but build args as parameters."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement

from builder.constants import ATTESTATION_FILES
from builder.image.attest import ENVELOPE_SUFFIX, IMAGE_RECORD_NAME, PROVENANCE_NAME, SBOM_NAME, _without_credentials, attestation_refusal
from builder.image.provenance import PREDICATE_TYPE, STATEMENT_TYPE, ProvenanceInputs, SourceCommit, provenance_statement

IMAGE_ID = "sha256:" + "1d" * 32
LOCK_PIN = "docker/locks/vllm-0.33.0-linux-amd64.txt@sha256:" + "0c" * 32
BASE_ID = "sha256:" + "ba" * 32


def _inputs(**over) -> ProvenanceInputs:
    fields = dict(
        image_tag="qfn-int8kv:h200-0.1.0", image_id=IMAGE_ID, target="h200", platform="linux/amd64",
        build_args={"BASE_IMAGE": BASE_ID, "ENGINE_SPEC": "", "APPLY_PATCHES": "1"}, emulated=False,
        base_source="wheel-lock", base_pin=LOCK_PIN, base_image=BASE_ID, patch_series_sha256="5e" * 32,
        builder_version="0.1.0", source=SourceCommit(uri="https://example.org/q.git", commit="ab" * 20, dirty=True),
        started_on="2026-12-04T23:22:57Z", finished_on="2026-12-04T23:40:01Z",
    )  # fmt: skip
    return ProvenanceInputs(**(fields | over))


def test_statement_parses_as_in_toto_v1_with_a_slsa_v1_predicate():
    st = provenance_statement(_inputs())
    pb = json_format.ParseDict(st, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    json_format.ParseDict(st["predicate"], provenance_pb2.Provenance())  # unknown or mistyped fields raise
    assert st["_type"] == STATEMENT_TYPE and st["predicateType"] == PREDICATE_TYPE
    assert st["subject"] == [{"name": "qfn-int8kv:h200-0.1.0", "digest": {"sha256": "1d" * 32}}]


def test_resolved_dependencies_name_lock_series_builder_and_commit():
    deps = {d["name"]: d for d in provenance_statement(_inputs())["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert deps["base-lock"] == {"name": "base-lock", "uri": "docker/locks/vllm-0.33.0-linux-amd64.txt", "digest": {"sha256": "0c" * 32}}
    assert deps["base-image"]["digest"] == {"sha256": "ba" * 32}
    assert deps["patch-series"]["digest"] == {"sha256": "5e" * 32}
    assert deps["builder"]["annotations"] == {"version": "0.1.0"}
    assert deps["source"]["digest"] == {"gitCommit": "ab" * 20} and deps["source"]["annotations"] == {"dirty": True}


def test_an_image_base_is_named_by_its_registry_digest_and_no_series_when_unpatched():
    st = provenance_statement(_inputs(base_source="image", base_pin="reg/base:tag@sha256:" + "9f" * 32,
                                      base_image="reg/base:tag@sha256:" + "9f" * 32, patch_series_sha256=None))
    deps = {d["name"]: d for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert set(deps) == {"base-image", "builder", "source"}
    assert deps["base-image"] == {"name": "base-image", "uri": "reg/base:tag", "digest": {"sha256": "9f" * 32}}


def test_parameters_are_the_build_args_only():
    st = provenance_statement(_inputs())
    ext = st["predicate"]["buildDefinition"]["externalParameters"]
    assert ext == {"target": "h200", "platform": "linux/amd64",
                   "buildArgs": {"APPLY_PATCHES": "1", "BASE_IMAGE": BASE_ID, "ENGINE_SPEC": ""}}


@pytest.mark.parametrize("url, public", [
    ("https://user:ghp_secret@github.com/o/r.git", "https://github.com/o/r.git"),
    ("https://hf_token@huggingface.co/o/r", "https://huggingface.co/o/r"),
    ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ("/work/main", "/work/main"),
])  # fmt: skip
def test_a_clone_url_loses_its_credentials(url, public):
    assert _without_credentials(url) == public


def test_only_an_attestation_folder_may_be_replaced(tmp_path):
    (tmp_path / "image.json").write_text(json.dumps({"tag": "t:1", "id": IMAGE_ID}))
    for name in ATTESTATION_FILES[1:]:
        (tmp_path / name).write_text("{}")
    assert attestation_refusal(tmp_path) is None
    (tmp_path / "notes.txt").write_text("mine")
    assert "notes.txt" in attestation_refusal(tmp_path)
    (tmp_path / "notes.txt").unlink()
    (tmp_path / "image.json").write_text("{}")
    assert "image.json" in attestation_refusal(tmp_path)


def test_the_files_written_are_the_ones_a_bundle_copies():
    written = {IMAGE_RECORD_NAME, SBOM_NAME, PROVENANCE_NAME, SBOM_NAME + ENVELOPE_SUFFIX, PROVENANCE_NAME + ENVELOPE_SUFFIX}
    assert written == set(ATTESTATION_FILES) and len(ATTESTATION_FILES) == 5
