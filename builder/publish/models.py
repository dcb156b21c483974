"""Typed inputs and outputs of the publish step: the request, the bundle's release info, the plan."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from builder import constants
from builder.bundle import BundleManifest
from builder.bundle.gates import GateReport
from builder.errors import PublishError


class PublishRequest(BaseModel):
    """What the user asked for on the command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle_dir: Path = Field(description="A bundle directory written by `builder bundle`.")
    repo: str = Field(description="Hub model repo, 'org/name'.")
    revision: str = Field(default="main", min_length=1, description="Branch to commit to; created when absent.")
    private: bool = Field(default=False, description="Create the repo private; otherwise a new repo gets the namespace default. An existing repo keeps its visibility.")
    tag: str | None = Field(default=None, min_length=1, description="Tag for the commit; default: the bundle version.")
    yes: bool = Field(default=False, description="Upload; without it only the plan is printed.")
    allow_failed_gates: bool = Field(default=False, description="Publish despite missing or failed gates, with a warning card.")
    public_key: Path | None = Field(default=None, description="Public key model.sig must verify against; uploaded as signing-key.pub.")
    allow_unsigned: bool = Field(default=False, description="Publish without a signature that verifies, with a warning card.")
    timeout_s: float = Field(
        default=constants.PUBLISH_TIMEOUT_S, gt=0, allow_inf_nan=False,
        description="Seconds the Hub part of publish may take in all: every call, retry and backoff wait.",
    )

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if value.count("/") != 1:
            raise ValueError(f"{value!r} is not 'org/name'")
        try:
            validate_repo_id(value)
        except HFValidationError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @field_validator("revision", "tag")
    @classmethod
    def _ref_name(cls, value: str | None) -> str | None:
        # The Hub refuses a bad branch or tag only when it is created: a bad tag after the commit landed.
        problem = None if value is None else ref_name_problem(value)
        if problem:
            raise ValueError(f"{value!r} is not a git branch or tag name: {problem}")
        return value

    @classmethod
    def parse(cls, **fields: object) -> PublishRequest:
        """Build a request, turning a validation failure into a PublishError naming the option."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else ""
            option = _OPTIONS.get(field, "--" + field.replace("_", "-")) if field else "arguments"
            hint = _HINTS.get(field, "see `builder publish --help`")
            raise PublishError(f"{option}: {first['msg']}", hint=hint) from exc


#: Fields whose command-line spelling is not --<field>.
_OPTIONS = {"timeout_s": "--timeout", "bundle_dir": "BUNDLE_DIR"}
_HINTS = {
    "timeout_s": "pass a positive number of seconds, e.g. --timeout 600",
    "tag": "use letters, digits, '.', '-', '_' and '/', e.g. --tag v0.3.1",
    "revision": "use letters, digits, '.', '-', '_' and '/', e.g. --revision main",
}


def ref_name_problem(name: str) -> str | None:
    """Why git (and so the Hub) would refuse ``name`` as a branch or tag, or None (git check-ref-format)."""
    if not name:
        return "it is empty"
    bad = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F or c in " ~^:?*[\\"), None)
    if bad is not None:
        return f"it holds {bad!r}"
    if name == "@" or "@{" in name:
        return "it is '@' or holds '@{'"
    if ".." in name or "//" in name or name.startswith("/") or name.endswith(("/", ".")):
        return "it holds '..' or '//', or starts with '/' or ends with '/' or '.'"
    if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "a part starts with '.' or ends with '.lock'"
    return None


class PlannedFile(BaseModel):
    path: str = Field(description="Path in the repo (POSIX, relative).")
    size: int


class PublishPlan(BaseModel):
    """Everything an upload will do, printed in a dry run and followed exactly with --yes."""

    repo: str
    revision: str
    private: bool
    tag: str
    release: BundleManifest
    files: list[PlannedFile]
    commit_message: str
    commit_description: str
    checksums_sha256: str = Field(description=f"sha256 of the uploaded {constants.CHECKSUMS_NAME}.")
    bundle_checksums_sha256: str = Field(description=f"sha256 of the bundle's own {constants.CHECKSUMS_NAME}.")
    gates: GateReport
    card_modified: bool = Field(description="The model card got a warning (failed gates, unsigned) at publish time.")
    card_notes_failed_gates: bool = Field(default=False, description="The card as built already says its gates did not pass.")
    signed: bool = Field(default=False, description=f"{constants.SIGNATURE_NAME} verified and is uploaded with {constants.PUBLIC_KEY_NAME}.")
    key_id: str | None = Field(default=None, description="Id of the public key the signature verified against.")
    unsigned_reason: str | None = Field(default=None, description="Why the release is published unsigned.")
    token_source: str | None = Field(description="Where the token will come from; never the token itself.")

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)
